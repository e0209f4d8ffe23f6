#!/usr/bin/env bash
# Runs integration suites with response recording on (SANDBOXD_RECORD_DIR,
# see tests/integration/harness.c) and validates every recorded response
# against openapi/openapi.yaml with validate-responses.mjs. Run by CTest
# (test contract_responses); scripts/test installs node_modules first.
# Usage: tests/contract/responses.sh [--recorded DIR] BUILD_DIR [SUITE...]
#   --recorded DIR: the suites' records are in DIR already (CTest ran them
#   with SANDBOXD_RECORD_DIR=DIR, tests/CMakeLists.txt); only a suite with
#   no record there is run here. DIR is kept.
#   SANDBOXD_BIN must name the server binary (CTest sets it).
#   Default suites: it_test_foundation, the five it_test_fs_* (access,
#   errors, paths, read, write), it_test_ops, it_test_transfers and
#   it_test_exec, it_test_quota, it_test_images (a suite that skips, 77,
#   records nothing and fails nothing). RECORD_KEEP=1 keeps the records.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
recorded=
if [ "${1:-}" = --recorded ]; then
  recorded="${2:?usage: responses.sh [--recorded DIR] BUILD_DIR [SUITE...]}"
  shift 2
fi
build="${1:?usage: responses.sh [--recorded DIR] BUILD_DIR [SUITE...]}"
shift
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(it_test_foundation it_test_fs_access it_test_fs_errors it_test_fs_paths it_test_fs_read
  it_test_fs_write it_test_ops it_test_transfers it_test_exec it_test_quota it_test_code it_test_background
  it_test_pty it_test_disk_image it_test_images it_test_remote it_test_runners it_test_ssh it_test_store_budget
  it_test_io_budget it_test_docs_route)
: "${SANDBOXD_BIN:?SANDBOXD_BIN must name the sandboxd binary}"
if [ ! -d "$here/node_modules/ajv" ] || [ ! -d "$here/node_modules/yaml" ]; then
  echo "contract responses: $here/node_modules is incomplete; run (cd tests/contract && npm ci --no-audit --no-fund), as scripts/test does" >&2
  exit 1
fi
if [ -n "$recorded" ]; then
  mkdir -p "$recorded"
  rec="$recorded"
elif rec="$(mktemp -d /tmp/sandboxd-records-XXXXXX)" && [ -n "${RECORD_KEEP:-}" ]; then
  echo "contract responses: records kept in $rec"
else
  trap 'rm -rf "$rec"' EXIT
fi
failed=0
for s in "${suites[@]}"; do
  bin="$build/tests/$s"
  if [ ! -x "$bin" ]; then
    echo "contract responses: $bin is not built" >&2
    exit 1
  fi
  if [ -n "$recorded" ] && grep -qsF "\"suite\":\"$s\"" "$rec"/*.ndjson; then
    echo "contract responses: $s recorded by CTest's run"
    continue
  fi
  start=$SECONDS
  # A failing suite fails this test too (its records would be incomplete),
  # but what it recorded is still validated.
  st=0
  SANDBOXD_RECORD_DIR="$rec" "$bin" >"$rec/$s.log" 2>&1 || st=$?
  if [ "$st" -eq 0 ]; then
    echo "contract responses: $s passed ($((SECONDS - start)) s)"
  elif [ "$st" -eq 77 ]; then
    echo "contract responses: $s skipped: $(grep -m1 SKIPPED "$rec/$s.log" || true)"
  else
    echo "contract responses: $s FAILED ($((SECONDS - start)) s); its output:" >&2
    tail -n 40 "$rec/$s.log" >&2
    failed=1
  fi
done
node "$here/validate-responses.mjs" "$rec" || failed=1
exit "$failed"
