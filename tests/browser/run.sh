#!/usr/bin/env bash
# Browser test of the dashboard (web/dashboard.html): starts a real sandboxd
# on a free loopback port with a fresh data directory (tenant acme), mints an
# observer token (audit:read), an exec token and an fs:write token, runs dashboard.test.mjs with
# node's test runner (playwright-core driving Debian's /usr/bin/chromium),
# then stops the server by its pid and checks that it exited cleanly and that
# no token reached its log.
#   usage: SANDBOXD_BIN=build/sandboxd tests/browser/run.sh [OUT_DIR]
# Screenshots and the server's log go to OUT_DIR (default tests/browser/out).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out}
bin=${SANDBOXD_BIN:?set SANDBOXD_BIN to the sandboxd binary}
export CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || { echo "browser test: no $CHROMIUM (scripts/deps installs Debian's chromium)" >&2; exit 1; }
if [ ! -d "$here/node_modules/playwright-core" ]; then
  (cd "$here" && npm ci --no-audit --no-fund)
fi
mkdir -p "$out"
rm -f "$out"/*.png
log="$out/server.log"
dir=$(mktemp -d /tmp/sandboxd-browser-XXXXXX)
chmod 755 "$dir"
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    wait "$pid" || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

"$bin" tenant add acme --data-dir "$dir" >/dev/null
# Approve tokens are signed with the tenant's approver key, never its main key.
"$bin" tenant set-approver acme --data-dir "$dir" >/dev/null
# Commands that mention needs-approval wait for a person (the approval tests).
"$bin" tenant set acme 'approval=["*needs-approval*"]' --data-dir "$dir" >/dev/null
port=$(node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });')
# A uid range of our own (as tests/integration/it_exec.h does): servers of
# other suites on this host run their first tenant as uid-base + 0 too, and
# RLIMIT_NPROC counts per uid, so a fork bomb there would starve us here.
uid_base=$((1800000 + ($$ % 100000) * 16))
"$bin" serve --data-dir "$dir" --listen "127.0.0.1:$port" --set heartbeat_ms=500 --set "uid-base=$uid_base" \
  --set disk-quota=none \
  >"$log" 2>&1 &
pid=$!
for _ in $(seq 200); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { echo "browser test: sandboxd did not start:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.05
done

export SBX_URL="http://127.0.0.1:$port" SBX_OUT_DIR="$out"
SBX_OBSERVER_TOKEN=$("$bin" token --tenant acme --scope "audit:read" --data-dir "$dir")
SBX_EXEC_TOKEN=$("$bin" token --tenant acme --scope "exec" --data-dir "$dir")
# For the gate files the detail-view tests write (PUT /fs/write), as a gateway would.
SBX_FS_TOKEN=$("$bin" token --tenant acme --scope "fs:write" --data-dir "$dir")
# A person at the dashboard who decides on commands that wait for approval.
SBX_APPROVER_TOKEN=$("$bin" token --tenant acme --scope "approve audit:read" --sub alice --data-dir "$dir")
export SBX_OBSERVER_TOKEN SBX_EXEC_TOKEN SBX_FS_TOKEN SBX_APPROVER_TOKEN

status=0
node --test --test-reporter=spec "$here/dashboard.test.mjs" || status=$?

kill -TERM "$pid"
server_status=0
wait "$pid" || server_status=$?
pid=""
if [ "$server_status" -ne 0 ]; then
  echo "browser test: sandboxd exited with status $server_status after SIGTERM; its log: $log" >&2
  status=1
fi
if grep -qF -e "$SBX_OBSERVER_TOKEN" -e "$SBX_EXEC_TOKEN" -e "$SBX_FS_TOKEN" -e "$SBX_APPROVER_TOKEN" "$log"; then
  echo "browser test: a token appears in the server's log ($log)" >&2
  status=1
fi
echo "browser test: screenshots in $out"
exit "$status"
