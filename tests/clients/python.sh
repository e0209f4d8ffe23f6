#!/usr/bin/env bash
# The Python package clients/python (sandboxd-client), CTest label
# clients: type-checked with Debian's mypy (--strict, as old as Python
# 3.9), installed with pip into a fresh virtual environment offline
# (--no-index: its build backend needs nothing from an index), imported
# there by a type-checked consumer, then its gateway scenario
# (clients/python/tests/) against a real sandboxd, importing the installed
# package.
#   usage: SANDBOXD_BIN=build/sandboxd tests/clients/python.sh
# Exit 77 (skipped) when bwrap cannot run here or we are not root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pkg=$(cd "$here/../../clients/python" && pwd)
: "${SANDBOXD_BIN:?set SANDBOXD_BIN to the sandboxd binary}"
SANDBOXD_BIN=$(realpath "$SANDBOXD_BIN")
export SANDBOXD_BIN
source "$here/../needs-bwrap.sh"
needs_bwrap "python client"
command -v mypy >/dev/null || { echo "python client: mypy is missing (scripts/deps installs Debian's)" >&2; exit 1; }
MYPYPATH="$pkg/tests" mypy --strict --python-version 3.9 --cache-dir=/dev/null \
  "$pkg/sandboxd_client" "$pkg/tests" "$pkg/examples" "$pkg/_build"
scratch=$(mktemp -d /tmp/sandboxd-py-pack-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
python3 -m venv "$scratch/venv"
py=$scratch/venv/bin/python
# A copy, so that the build leaves nothing in the source tree.
cp -r "$pkg" "$scratch/src"
rm -rf "$scratch/src/tests" "$scratch/src/examples"
"$py" -m pip install --no-index --no-cache-dir --disable-pip-version-check --quiet "$scratch/src"
cat >"$scratch/check.py" <<'PY'
import asyncio
from sandboxd_client import GatewaySandbox, ShellResult, SyncGatewaySandbox


async def main() -> ShellResult:
    api = GatewaySandbox("http://127.0.0.1:1", "token", "acme")
    return await api.exec("true", timeout_s=5)

r: "asyncio.Future[ShellResult]"
s: SyncGatewaySandbox
PY
mypy --strict --cache-dir=/dev/null --python-executable "$py" "$scratch/check.py"
(cd "$scratch" && "$py" -c 'import sandboxd_client, sys; assert sandboxd_client.__file__.startswith(sys.prefix), sandboxd_client.__file__')
echo "python client: installed offline and imported with its types"
cd "$scratch"
"$py" -m unittest discover -v -s "$pkg/tests" -t "$pkg/tests"
