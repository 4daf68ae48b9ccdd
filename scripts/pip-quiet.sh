# Sourced by the install scripts: pip_q ARGS... runs "${PY}" -m pip quietly, without the per-package
# warnings about this machine's absent local index folders, and returns pip's status.
pip_q() {
    "${PY}" -m pip "$@" -q 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
    return "${PIPESTATUS[0]}"
}
