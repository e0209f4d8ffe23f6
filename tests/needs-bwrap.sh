# Sourced by the Node-driven suites (tests/clients/run.sh,
# tests/clients/typescript.sh, tests/mcp/run.sh), whose servers use the
# bwrap backend: needs_bwrap WHAT exits 77 (CTest's skip) unless we are
# root with a bwrap that runs here.
needs_bwrap() {
  if [ "$(id -u)" -ne 0 ] || ! command -v bwrap >/dev/null 2>&1 ||
     ! bwrap --unshare-all --die-with-parent --ro-bind / / true >/dev/null 2>&1; then
    echo "$1: skipped: the bwrap backend needs root and a working bwrap" >&2
    exit 77
  fi
}
