#!/usr/bin/env bash
# The container image's entrypoint runs as PID 1 of its pid namespace:
# orphans of the sandboxes (bwrap's inner process when a timed-out
# command's group is killed) are reparented to it and must be reaped.
# Runs the Dockerfile's ENTRYPOINT (with the built binary in place of the
# installed one) as PID 1 of a new pid namespace, makes commands time out,
# and counts the zombies left in that namespace.
# Usage: pid1_reaps.sh SANDBOXD_BIN DOCKERFILE
set -euo pipefail
bin=$1 dockerfile=$2
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root (unshare --pid)"; exit 77; }
# ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/sandboxd"] -> words
entry=$(sed -n 's/^ENTRYPOINT \[\(.*\)\]$/\1/p' "$dockerfile" | tr -d '"' | tr ',' ' ')
[ -n "$entry" ] || { echo "no ENTRYPOINT in $dockerfile"; exit 1; }
cmd=()
for w in $entry; do
  [ "$w" = /usr/local/bin/sandboxd ] && w=$bin
  [ -x "${w#-}" ] || [ "$w" = "--" ] || [ "$w" = "$bin" ] || { echo "entrypoint word $w is not installed here"; exit 1; }
  cmd+=("$w")
done
dir=$(mktemp -d /tmp/sandboxd-pid1-XXXXXX)
chmod 755 "$dir"
trap 'kill -KILL "$ns_pid" 2>/dev/null || true; wait "$ns_pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
"$bin" tenant add acme --data-dir "$dir/data" >/dev/null
port=$(( 20000 + RANDOM % 20000 ))
unshare --pid --fork --kill-child "${cmd[@]}" serve --data-dir "$dir/data" --listen "127.0.0.1:$port" \
  --set "uid-base=$(( 300000 + ($$ % 1000) * 16 ))" --set disk-quota=none >"$dir/log" 2>&1 &
ns_pid=$!
for _ in $(seq 1 300); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.05
done
tok=$("$bin" token --tenant acme --ttl 600 --data-dir "$dir/data")
for i in 1 2 3 4 5; do
  curl -fsS -H "Authorization: Bearer $tok" -d '{"command":"sleep 30","timeout_s":1}' \
    "http://127.0.0.1:$port/exec" >/dev/null
done
# PID 1 of the namespace is the child of unshare.
init=$(cat /proc/"$ns_pid"/task/"$ns_pid"/children | tr -s ' ' '\n' | head -n1)
[ -n "$init" ] || { echo "no namespace init"; cat "$dir/log"; exit 1; }
zombies() {
  local n=0 p
  for p in /proc/[0-9]*; do
    [ "$(awk '/^PPid:/ {print $2}' "$p/status" 2>/dev/null)" = "$init" ] || continue
    [ "$(awk '/^State:/ {print $2}' "$p/status" 2>/dev/null)" = Z ] && n=$((n + 1))
  done
  echo "$n"
}
# Reaping is asynchronous: wait (bounded) for the count to reach 0.
for _ in $(seq 1 100); do
  [ "$(zombies)" -eq 0 ] && { echo "no zombies under PID 1 (${cmd[0]})"; exit 0; }
  sleep 0.05
done
echo "$(zombies) zombies left under PID 1 ${cmd[0]}"
exit 1
