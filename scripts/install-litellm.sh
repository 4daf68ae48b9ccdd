#!/usr/bin/env bash
# Install the LiteLLM proxy into <repo>/.venv-litellm, for the gateway-overhead comparison benchmark
# (bench/litellm_proxy.py starts it in front of the simulator).
#
# Its own venv: litellm[proxy] pins versions (fastapi, uvicorn, pydantic, openai, ...) that must not
# leak into the project's .venv. Idempotent: a marker file records a successful install; when it
# matches and the venv still has the pinned packages, the script exits at once. Safe to run
# non-interactively as root (CI). About 750 MB; a fresh install takes about 3 minutes.
#
#   bash scripts/install-litellm.sh
set -euo pipefail

# Exact pins: the benchmark compares against this release; never float them to "latest" (1.107.0 was a
# compromised release, since pulled from PyPI). 1.108.7 is the newest whose [proxy] extra resolves on
# PyPI here: later ones pin litellm-proxy / litellm-proxy-extras / litellm-enterprise builds it lacks.
LITELLM_VERSION="1.108.7"
# Not in [proxy] (it is in [extra_proxy], with the DB drivers and cloud SDKs) but imported by the
# proxy's auth error handler: without it a request with a missing or wrong key gets a 500
# (ModuleNotFoundError: prisma) instead of a 401/400. Only the Python package: no DB is used.
PRISMA_VERSION="0.15.0"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ROOT}/.venv-litellm"
PY="${VENV}/bin/python"
MARKER="${VENV}/.litellm-installed"
WANT="litellm[proxy]==${LITELLM_VERSION} prisma==${PRISMA_VERSION}"

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore

# shellcheck source=scripts/pip-quiet.sh
source "${ROOT}/scripts/pip-quiet.sh"  # pip_q

# Quick: the wanted versions are installed, with the [proxy] extra's packages (no import: see below).
check_installed() {
    "${PY}" -c "
import sys, importlib.metadata as m, importlib.util as u
ok = m.version('litellm') == '${LITELLM_VERSION}' and m.version('prisma') == '${PRISMA_VERSION}'
ok = ok and all(u.find_spec(n) for n in ('fastapi', 'uvicorn', 'uvloop', 'backoff', 'orjson', 'apscheduler',
                                         'litellm_enterprise', 'litellm_proxy_extras'))
sys.exit(0 if ok else 1)" >/dev/null 2>&1
}

# The proxy server imports (about 15 s of CPU); offline, as the benchmark runs it: without
# LITELLM_LOCAL_MODEL_COST_MAP, importing litellm tries to fetch the model cost map from GitHub.
check_import() {
    LITELLM_LOCAL_MODEL_COST_MAP=True "${PY}" -c "import litellm.proxy.proxy_server" >/dev/null 2>&1
}

if [[ -f "${MARKER}" && "$(cat "${MARKER}")" == "${WANT}" ]] && check_installed; then
    echo "litellm ${LITELLM_VERSION} already installed in ${VENV}"
    exit 0
fi

echo "Installing ${WANT} into ${VENV} (about 3 minutes)..."
rm -f "${MARKER}"
if [[ ! -x "${PY}" ]]; then
    python3 -m venv "${VENV}"
fi
pip_q install "litellm[proxy]==${LITELLM_VERSION}" "prisma==${PRISMA_VERSION}"

if ! check_installed || ! check_import; then
    echo "litellm install check failed:" >&2
    LITELLM_LOCAL_MODEL_COST_MAP=True "${PY}" -c "
import importlib.metadata as m
print('litellm', m.version('litellm'))
import litellm.proxy.proxy_server" >&2 || true
    exit 1
fi
echo "${WANT}" >"${MARKER}"
echo "litellm ${LITELLM_VERSION} ready: ${VENV}/bin/litellm (python: ${PY})"
