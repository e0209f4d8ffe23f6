#!/usr/bin/env bash
# The container deployment gives each tenant a uid of its own (issue 13).
# No Docker engine runs here, so the container is re-created by hand the
# way userns-remap makes it: a throwaway user with a 65536-id subordinate
# range (dockremap's size) creates a user namespace mapping 0..65535 to
# that range (newuidmap, through unshare --map-users), and a pid namespace;
# inside, as root, with the capability bounding set of docker-compose.yml
# (cap_drop ALL + cap_add) and no-new-privileges, the Dockerfile's
# ENTRYPOINT runs its CMD (data dir and port swapped for test ones).
# Checks: the image runs as root, the compose file has the options
# docs/operations.md says bubblewrap needs, the server states "root: one uid per
# tenant" in a user namespace, two tenants are distinct host uids inside
# the range (id -u inside, owners of their files on the host), and what
# the server needs its capabilities for works (files of another mode,
# killing a command on timeout). Removes the user, its range and every
# file it made, whatever happens.
# Usage: container_uids.sh SANDBOXD_BIN DOCKERFILE COMPOSE_FILE
set -euo pipefail
bin=$1 dockerfile=$2 compose=$3
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root (useradd, /etc/subuid)"; exit 77; }
fail() { echo "FAIL: $*"; [ -f "${dir:-/nonexistent}/log" ] && tail -n 20 "$dir/log"; exit 1; }

# ---- the image and the compose file ----
grep -Eq '^USER[[:space:]]+[^r]' "$dockerfile" && fail "the image must run sandboxd as root (no USER)"
entry=$(sed -n 's/^ENTRYPOINT \[\(.*\)\]$/\1/p' "$dockerfile" | tr -d '"' | tr ',' ' ')
cmdline=$(sed -n 's/^CMD \[\(.*\)\]$/\1/p' "$dockerfile" | tr -d '"' | tr ',' ' ')
[ -n "$entry" ] && [ -n "$cmdline" ] || fail "no ENTRYPOINT or CMD in $dockerfile"
base=$(printf '%s\n' $cmdline | sed -n 's/^uid-base=//p')
[ -n "$base" ] || fail "the image's CMD sets no uid-base"
[ "$base" -lt 65534 ] || fail "uid-base $base leaves no tenant inside a 65536-id user namespace"
for opt in seccomp=unconfined apparmor=unconfined systempaths=unconfined no-new-privileges:true; do
  grep -Eq -- "^[[:space:]]+- ${opt}\$" "$compose" || fail "$compose: security_opt lacks $opt"
done
grep -Eq -- '^[[:space:]]+- ALL$' "$compose" || fail "$compose: cap_drop ALL missing"
# cap_add's list, as setpriv's bounding set: +setuid,+setgid,...
caps=$(awk '/^[[:space:]]+cap_add:/ {on=1; next} on && /^[[:space:]]+- / {print $2; next} on {on=0}' "$compose" |
  tr 'A-Z' 'a-z' | sed 's/^/+/' | paste -sd, -)
[ -n "$caps" ] || fail "$compose: no cap_add"
grep -q "uid-base=$base" "$compose" || fail "$compose's command and the image's CMD differ in uid-base"

# ---- the throwaway user, its range, the data ----
user="sbxctr$$"
range=$(( 2000000000 + ($$ % 30000) * 65536 ))
dir=$(mktemp -d /tmp/sandboxd-ctr-XXXXXX)
chmod 755 "$dir"
uid=
# Processes of the user or of its range (the "container"), by pid.
ours() {
  local p u
  for p in /proc/[0-9]*; do
    u=$(awk '/^Uid:/ {print $2}' "$p/status" 2>/dev/null) || continue
    [ -n "$u" ] || continue
    if [ "$u" = "${uid:-x}" ] || { [ "$u" -ge "$range" ] && [ "$u" -le $((range + 65535)) ]; }; then
      echo "${p#/proc/}"
    fi
  done
}
cleanup() {
  set +e
  for _ in $(seq 1 50); do
    pids=$(ours)
    [ -n "$pids" ] || break
    kill -KILL $pids 2>/dev/null
    sleep 0.1
  done
  if grep -q "^$user:" /etc/subuid /etc/subgid 2>/dev/null; then
    usermod --del-subuids "$range-$((range + 65535))" --del-subgids "$range-$((range + 65535))" "$user"
  fi
  id "$user" >/dev/null 2>&1 && userdel "$user"
  rm -rf "$dir"
}
trap cleanup EXIT
retry() { for _ in $(seq 1 50); do "$@" && return 0; sleep 0.2; done; return 1; }
retry useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user" ||
  fail "useradd"
retry usermod --add-subuids "$range-$((range + 65535))" --add-subgids "$range-$((range + 65535))" "$user" ||
  fail "usermod --add-subuids"
mkdir -m 755 "$dir/data"
chown "$range:$range" "$dir/data" # the volume belongs to container root
uid=$(id -u "$user") gid=$(id -g "$user")
# The "container" runs the binary as that user: a checkout under a 0700
# directory (a fresh clone in a private home) would fail below with a bare
# "Permission denied". Say which directory, and how to fix it.
as_user() { setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"; }
real=$(realpath "$bin")
if ! as_user test -x "$real"; then
  blocked=$real d=
  for part in $(printf '%s' "${real#/}" | tr '/' ' '); do
    d=$d/$part
    as_user test -x "$d" || { blocked=$d; break; }
  done
  echo "skipped: $real cannot be run by uid $uid: $blocked (mode $(stat -c %04a "$blocked"), owner" \
    "$(stat -c %u "$blocked")) is not searchable by it. The test runs sandboxd as another user, so" \
    "the checkout and build directory must be reachable by every user: chmod o+x $blocked (0711" \
    "is enough), or clone and build under a directory every user can search (docs/testing.md: \"A" \
    "checkout every user can reach\")"
  exit 77
fi

# `docker exec` (and, with --pid --fork --mount-proc, `docker run`): root
# of a user namespace mapped onto the range.
ctr() {
  exec setpriv --reuid="$uid" --regid="$gid" --clear-groups -- \
    unshare --map-users="$range,0,65536" --map-groups="$range,0,65536" --setuid 0 --setgid 0 "$@"
}
(ctr "$bin" tenant add acme --data-dir "$dir/data") >/dev/null || fail "tenant add"
(ctr "$bin" tenant add globex --data-dir "$dir/data") >/dev/null || fail "tenant add"

port=$(( 20000 + RANDOM % 20000 ))
cmd=()
for w in $entry; do [ "$w" = /usr/local/bin/sandboxd ] && w=$bin; cmd+=("$w"); done
prev=
for w in $cmdline; do
  case "$prev" in --data-dir) w=$dir/data ;; --listen) w=127.0.0.1:$port ;; esac
  cmd+=("$w")
  prev=$w
done
# Root of a user namespace on this (cgroup v1) host cannot write the
# host's hierarchies: the server starts only when told, degraded (a
# container on a cgroup v2 host with compose's cgroup: private and a
# writable /sys/fs/cgroup is contained).
cmd+=(--allow-uncontained)
(ctr --pid --fork --mount-proc setpriv --bounding-set="-all,$caps" --inh-caps=-all --no-new-privs -- \
  "${cmd[@]}") >"$dir/log" 2>&1 &
ns_pid=$!
for _ in $(seq 1 300); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  kill -0 "$ns_pid" 2>/dev/null || fail "the container exited"
  sleep 0.05
done

# ---- what it states, and what tenants get ----
ready=$(curl -sS "http://127.0.0.1:$port/readyz")
case "$ready" in
  *'"status":"degraded"'*) ;;
  *) fail "not degraded (no cgroups in the user namespace): $ready" ;;
esac
case "$ready" in
  *'"containment":{"status":"degraded"'*) ;;
  *) fail "containment not stated: $ready" ;;
esac
want="root: one uid per tenant (in a user namespace: uid 0 is host uid $range)"
case "$ready" in *"\"mode\":\"root\",\"detail\":\"$want\""*) ;; *) fail "uids not stated: $ready" ;; esac
grep -qF "uids: $want" "$dir/log" || fail "the log does not state the uid mode"

exec_json() { # TENANT JSON -> the ShellResult
  local tok
  tok=$(ctr "$bin" token --tenant "$1" --ttl 600 --data-dir "$dir/data")
  curl -fsS -H "Authorization: Bearer $tok" -d "$2" "http://127.0.0.1:$port/exec"
}
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
owners=()
for t in acme globex; do
  out=$(exec_json "$t" '{"command":"id -u; echo x > mine; chmod 600 mine"}')
  inside=$(printf '%s' "$out" | sed -n 's/.*"stdout":"\([0-9]*\)\\n".*/\1/p')
  [ -n "$inside" ] || fail "$t: $out"
  host=$(stat -c %u "$dir"/data/tenants/$t/workspace/sessions/*/mine)
  [ "$host" -eq $((range + inside)) ] || fail "$t: uid $inside inside, its file owned by $host on the host"
  [ "$inside" -ge "$base" ] && [ "$inside" -lt 65534 ] || fail "$t runs as $inside"
  owners+=("$host")
  echo "$t: uid $inside in the container, host uid $host"
done
[ "${owners[0]}" != "${owners[1]}" ] || fail "both tenants are host uid ${owners[0]}"

# DAC_OVERRIDE: the server reads a tenant's 0600 file; KILL: a timeout ends
# a command running as the tenant's uid.
tok=$(ctr "$bin" token --tenant acme --ttl 600 --data-dir "$dir/data")
[ "$(curl -fsS -H "Authorization: Bearer $tok" "http://127.0.0.1:$port/fs/read?path=mine")" = x ] ||
  fail "the server cannot read what the tenant made"
out=$(exec_json acme '{"command":"sleep 30","timeout_s":1}')
[ "$(printf '%s' "$out" | field timed_out)" = true ] || fail "timeout: $out"
echo "container deployment: one host uid per tenant, in the range $range..$((range + 65535))"
