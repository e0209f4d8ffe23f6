# Shared helpers of the bench/ scripts (sourced, not run).
#
# Every script: `bench/pN-*.sh [--smoke]`. It builds what it needs (a
# Release sandboxd in $BENCH_BUILD, default build-bench/, plus loadgen and
# spawnceil), starts its own sandboxd on 127.0.0.1 with a temporary data
# directory and, where the goal names one, its baseline; runs them
# interleaved for several rounds; prints figures and ratios; and stops every
# process it started by pid (trap on EXIT/INT/TERM).
#
# Machine-readable lines, collected by bench/run-all into RESULTS.md:
#   ROW|goal|what|sandboxd|baseline|ratio|target|met
#   CMD|goal|command line as run
#   MEM|goal|peak RSS of the server in kB (VmHWM)
#   NOTE|goal|free text
# In smoke mode (--smoke or BENCH_SMOKE=1) every path runs with tiny sizes
# and "met" is "smoke": the figures mean nothing.

set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd)
BENCH_BUILD=${BENCH_BUILD:-$REPO/build-bench}
SANDBOXD=$BENCH_BUILD/sandboxd
LOADGEN=$BENCH_BUILD/loadgen
SPAWNCEIL=$BENCH_BUILD/spawnceil
FDSPAWN=$BENCH_BUILD/fdspawn
SMOKE=${BENCH_SMOKE:-0}
for a in "$@"; do
	case $a in
	--smoke) SMOKE=1 ;;
	*) echo "unknown argument: $a" >&2; exit 2 ;;
	esac
done
export BENCH_SMOKE=$SMOKE

PIDS=()
TMPS=()
CGROUPS=()
GOAL=${GOAL:-?}

log() { printf '[%s %s] %s\n' "$GOAL" "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Stop every process we started, by pid: TERM, up to 5 s, then KILL.
stop_pid() {
	local p=$1 i
	kill -0 "$p" 2>/dev/null || return 0
	kill -TERM "$p" 2>/dev/null || true
	for i in $(seq 1 50); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$p" 2>/dev/null; then
		log "pid $p did not stop on TERM: KILL"
		kill -KILL "$p" 2>/dev/null || true
	fi
	wait "$p" 2>/dev/null || true
}
cleanup() {
	local rc=$? i
	set +e
	if [ "$rc" != 0 ] && [ -n "${SBX_DATA:-}" ] && [ -s "$SBX_DATA/stderr.log" ]; then
		log "exit $rc; the server's last stderr lines:"
		grep -v 'runs on the host without isolation' "$SBX_DATA/stderr.log" | tail -5 >&2
		[ -n "${SBX_PID:-}" ] && ! kill -0 "$SBX_PID" 2>/dev/null && log "the server (pid $SBX_PID) is not running"
	fi
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${PIDS[$i]}"; done
	for i in "${CGROUPS[@]}"; do rmdir_cgroup "$i"; done
	for i in "${TMPS[@]}"; do rm -rf "$i"; done
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Run a command in the background and remember its pid.
bg() {
	"$@" &
	PIDS+=($!)
	LASTPID=$!
}
# Forget a pid once it was stopped/waited for by the script itself.
forget() {
	local p=$1 i out=()
	for i in "${PIDS[@]}"; do [ "$i" = "$p" ] || out+=("$i"); done
	PIDS=("${out[@]}")
}

# mktmp VAR: a new temporary directory, removed on exit, into VAR (not
# through $(...): the list of directories to remove must be ours).
mktmp() {
	local _d
	_d=$(mktemp -d "${TMPDIR:-/tmp}/sbxbench.XXXXXX")
	TMPS+=("$_d")
	printf -v "$1" %s "$_d"
}

# ---- packages -------------------------------------------------------------

need() { # need COMMAND DEBIAN_PACKAGE
	command -v "$1" >/dev/null 2>&1 && return 0
	log "installing $2 (for $1)"
	if ! apt-cache policy "$2" 2>/dev/null | grep -q Candidate: ||
		apt-cache policy "$2" 2>/dev/null | grep -q 'Candidate: (none)'; then
		apt-get update -qq >/dev/null
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
	command -v "$1" >/dev/null 2>&1 || die "$1 still missing after installing $2"
}

# ---- build ----------------------------------------------------------------

build_all() {
	need cc gcc
	need cmake cmake
	if [ "${BENCH_BUILT:-0}" != 1 ]; then
		log "building Release sandboxd in $BENCH_BUILD"
		cmake -S "$REPO" -B "$BENCH_BUILD" -DCMAKE_BUILD_TYPE=Release -DSANDBOXD_WERROR=ON >"$BENCH_BUILD.cmake.log" 2>&1 ||
			{ tail -20 "$BENCH_BUILD.cmake.log" >&2; die "cmake configure failed"; }
		cmake --build "$BENCH_BUILD" -j2 --target sandboxd >"$BENCH_BUILD.build.log" 2>&1 ||
			{ grep -m5 error "$BENCH_BUILD.build.log" >&2; die "build failed"; }
		cc -O2 -Wall -Wextra -Werror -o "$LOADGEN" "$BENCH_DIR/loadgen.c" -lpthread
		cc -O2 -Wall -Wextra -Werror -o "$SPAWNCEIL" "$BENCH_DIR/spawnceil.c" -lpthread
		cc -O2 -Wall -Wextra -Werror -o "$FDSPAWN" "$BENCH_DIR/fdspawn.c"
	fi
	[ -x "$SANDBOXD" ] && [ -x "$LOADGEN" ] && [ -x "$SPAWNCEIL" ] && [ -x "$FDSPAWN" ] || die "binaries missing"
}

# ---- ports, processes, /proc ----------------------------------------------

free_port() {
	local p i
	for i in $(seq 1 200); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	die "no free port"
}

wait_http() { # wait_http URL [PID [LOGFILE]]: up to 30 s for any HTTP answer
	local i
	for i in $(seq 1 300); do
		curl -s -o /dev/null -m 1 "$1" && return 0
		if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then
			[ -n "${3:-}" ] && tail -5 "$3" >&2
			die "pid $2 exited before $1 answered"
		fi
		sleep 0.1
	done
	[ -n "${3:-}" ] && tail -5 "$3" >&2
	die "nothing answers at $1"
}

alive() { kill -0 "$1" 2>/dev/null || die "pid $1 is gone (did the server crash?)"; }
rss_kb() { alive "$1"; awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kb() { alive "$1"; awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
# CPU time of a process in seconds (utime+stime, all threads).
cpu_s() {
	local tck
	[ -r "/proc/$1/stat" ] || die "pid $1 is gone (did the server crash? see its stderr above)"
	tck=$(getconf CLK_TCK)
	# fields after the ")" of comm: utime is field 12, stime 13 there.
	sed 's/.*) //' "/proc/$1/stat" | awk -v t="$tck" '{printf "%.3f\n", ($12 + $13) / t}'
}

# ---- numbers --------------------------------------------------------------

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else printf "%.6g\n", (a[NR/2]+a[NR/2+1])/2}'; }
kv() { # kv KEY "LINE": the value of key=value in a loadgen line
	tr ' ' '\n' <<<"$2" | awk -F= -v k="$1" '$1==k {print $2; exit}'
}
calc() { awk "BEGIN {printf \"%.4g\n\", $*}"; }
le() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a+0 <= b+0)}'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a+0 >= b+0)}'; }
yesno() { # yesno CONDITION-COMMAND...: "yes"/"no", or "smoke" in smoke mode
	if [ "$SMOKE" = 1 ]; then echo smoke; elif "$@"; then echo yes; else echo no; fi
}

row() { echo "ROW|$GOAL|$1|$2|$3|$4|$5|$6"; }
cmdline() { echo "CMD|$GOAL|$*"; }
mem() { echo "MEM|$GOAL|$1"; }
note() { echo "NOTE|$GOAL|$*"; }

# ---- sandboxd -------------------------------------------------------------

# server_cgroup: on a pure cgroup-v2 host, when this script is not in the
# root group, a group of its own for the server into SBX_CGROUP, a sibling
# of ours: <parent>/sbxbench-PID.service (made once; removed on exit);
# SBX_CGROUP="" otherwise. The server cannot stay in our group: it holds
# this script and its load generators, and cgroup v2's no-internal-
# processes rule keeps a group with processes from enabling controllers
# for its commands (EBUSY). systemd gives a unit's server such a group
# (Delegate=yes); tests/vm's guest runs us where a unit would run, and the
# test harness does the same (tests/integration/harness.c, spawn()).
server_cgroup() {
	local cur g
	[ -z "${SBX_CGROUP+set}" ] || return 0
	SBX_CGROUP=
	[ "$(id -u)" = 0 ] && [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] || return 0
	cur=$(sed -n 's/^0:://p' /proc/self/cgroup)
	case $cur in "" | /) return 0 ;; esac
	g=/sys/fs/cgroup${cur%/*}/sbxbench-$$.service
	mkdir -p "$g" || die "cannot make the server's cgroup $g"
	CGROUPS+=("$g")
	SBX_CGROUP=$g
}
# rmdir_cgroup DIR: DIR and every group below it, deepest first (empty
# once the server and its commands are gone).
rmdir_cgroup() {
	[ -d "$1" ] || return 0
	find "$1" -depth -type d -exec rmdir {} + 2>/dev/null ||
		log "warning: cgroup $1 not removed: $(find "$1" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')"
}

# start_sandboxd [--backend bwrap|local] [--set k=v]...: sets SBX_PID,
# SBX_PORT, SBX_DATA, SBX_TOKEN, SBX_AUTH, SBX_URL, SBX_SESSION_DIR.
start_sandboxd() {
	local backend=local sets=() a
	while [ $# -gt 0 ]; do
		case $1 in
		--backend) backend=$2; shift 2 ;;
		--set) sets+=(--set "$2"); shift 2 ;;
		*) die "start_sandboxd: $1" ;;
		esac
	done
	mktmp SBX_DATA
	"$SANDBOXD" tenant add acme --data-dir "$SBX_DATA" >/dev/null
	SBX_TOKEN=$("$SANDBOXD" token --tenant acme --scope "fs:read fs:write exec audit:read" --ttl 7200 --data-dir "$SBX_DATA")
	SBX_AUTH="Bearer $SBX_TOKEN"
	ulimit -n 65536 2>/dev/null || true
	local try i up=0 cg launch=("$SANDBOXD")
	server_cgroup
	cg=$SBX_CGROUP
	# Its pid into the group's cgroup.procs before the exec; a second
	# server of this script joins the leaf the first moved itself into
	# (<group>/sandboxd/<uid-base>/server: the group enables controllers
	# now and takes no process), as a unit's restarted server would.
	[ -z "$cg" ] || launch=(bash -c 'for g in "$0" "$0"/*/*/server; do
		echo $$ 2>/dev/null >"$g/cgroup.procs" && exec "$@"; done
		echo "cannot join the cgroup $0" >&2; exit 125' "$cg" "$SANDBOXD")
	for try in 1 2 3; do # a port taken between the probe and the bind: another
		SBX_PORT=$(free_port)
		SBX_URL=http://127.0.0.1:$SBX_PORT
		a=(serve --data-dir "$SBX_DATA" --listen "127.0.0.1:$SBX_PORT" --backend "$backend")
		[ "$backend" = local ] && a+=(--allow-unsafe-local)
		# A uid range (and cgroup root) of its own: a server already on
		# this host with the default one (the demo) would refuse ours.
		# No disk image per tenant (disk-quota=auto on a root host with
		# loop devices) unless a benchmark asks: loop devices are few.
		a+=(--set log-requests=false --set "uid-base=$((4000000 + ($$ % 10000) * 16))"
			--set disk-quota=none "${sets[@]}")
		SBX_CMD="sandboxd ${a[*]}"
		bg "${launch[@]}" "${a[@]}" 2>"$SBX_DATA/stderr.log"
		SBX_PID=$LASTPID
		for i in $(seq 1 300); do
			if curl -s -o /dev/null -m 1 "$SBX_URL/healthz"; then up=1; break; fi
			kill -0 "$SBX_PID" 2>/dev/null || break
			sleep 0.1
		done
		[ "$up" = 1 ] && break
		log "sandboxd did not come up on port $SBX_PORT (try $try):"
		tail -5 "$SBX_DATA/stderr.log" >&2
		stop_pid "$SBX_PID"; forget "$SBX_PID"
	done
	[ "$up" = 1 ] || die "sandboxd does not start"
	# Create the session directory and learn its host path.
	local p
	p=$(curl -sf -X PUT -H "Authorization: $SBX_AUTH" --data-binary x "$SBX_URL/fs/write?path=.bench-probe" |
		sed -n 's/.*"path":"\/workspace\/\([^"]*\)\/.bench-probe".*/\1/p')
	[ -n "$p" ] || die "PUT /fs/write probe failed"
	SBX_SESSION_DIR=$SBX_DATA/tenants/acme/workspace/$p
	# With a disk image per tenant the workspace is mounted in the
	# server's own mount namespace (sandbox/diskimg_ns.c): seen from the
	# host through the server's root.
	[ -d "$SBX_SESSION_DIR" ] || SBX_SESSION_DIR=/proc/$SBX_PID/root$(realpath "$SBX_DATA")/tenants/acme/workspace/$p
	[ -d "$SBX_SESSION_DIR" ] || die "session dir $SBX_SESSION_DIR missing"
	log "sandboxd pid $SBX_PID on $SBX_URL ($backend), data $SBX_DATA${cg:+, cgroup ${cg#/sys/fs/cgroup}}"
}

sbx_curl() { curl -s -H "Authorization: $SBX_AUTH" "$@"; }

EXEC_TRUE='{"command":"true"}'
# exec_lat N: N sequential POST /exec {"command":"true"} on one keep-alive
# connection (after 5 warm-up requests); prints the loadgen line (whose
# ok= is 0 when no exec succeeded: callers check).
exec_lat() {
	"$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 1 -n "$1" -w 5 -d 600 || true
}

# ---- baselines ------------------------------------------------------------

# start_nginx ROOT [sendfile on|off]: sets NGX_PID, NGX_PORT, NGX_URL.
start_nginx() {
	need nginx nginx
	# access: off, or buffered (a combined log line per request, written
	# in 64 KiB batches: nginx's access_log ... buffer=)
	local root=$1 sf=${2:-on} access=${3:-off} d al
	mktmp d
	mkdir -p "$d/tmp"
	NGX_PORT=$(free_port)
	al=off
	[ "$access" = buffered ] && al="$d/access.log combined buffer=64k flush=1s"
	cat >"$d/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes auto;
user root;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 4096; }
http {
    access_log $al;
    sendfile $sf;
    tcp_nopush on;
    keepalive_requests 100000000;
    keepalive_timeout 120;
    default_type application/octet-stream;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    scgi_temp_path $d/tmp/scgi;
    server {
        listen 127.0.0.1:$NGX_PORT;
        root $root;
        location / { }
    }
}
EOF
	NGX_CMD="nginx -c $d/nginx.conf -p $d -e $d/error.log (sendfile $sf, worker_processes auto, access_log $access)"
	bg nginx -c "$d/nginx.conf" -p "$d" -e "$d/error.log"
	NGX_PID=$LASTPID
	NGX_URL=http://127.0.0.1:$NGX_PORT
	wait_http "$NGX_URL/" "$NGX_PID" "$d/error.log"
	log "nginx pid $NGX_PID on $NGX_URL (sendfile $sf)"
}

# start_webhook: sets WH_PID, WH_PORT (hook /hooks/true runs sh -c true and
# answers with its output, so the answer waits for the command).
start_webhook() {
	need webhook webhook
	local d
	mktmp d
	cat >"$d/hooks.json" <<'EOF'
[{"id": "true", "execute-command": "/bin/sh",
  "pass-arguments-to-command": [{"source": "string", "name": "-c"}, {"source": "string", "name": "true"}],
  "include-command-output-in-response": true, "http-methods": ["POST"]}]
EOF
	WH_PORT=$(free_port)
	WH_CMD="webhook -hooks $d/hooks.json -ip 127.0.0.1 -port $WH_PORT"
	bg webhook -hooks "$d/hooks.json" -ip 127.0.0.1 -port "$WH_PORT" >"$d/log" 2>&1
	WH_PID=$LASTPID
	local i
	for i in $(seq 1 100); do
		curl -s -o /dev/null -m 1 -X POST "http://127.0.0.1:$WH_PORT/hooks/true" && break
		sleep 0.1
	done
	log "webhook pid $WH_PID on port $WH_PORT"
}

# hyperfine_median ARGS...: median seconds of `hyperfine -N ARGS`, run
# through "${HF_PREFIX[@]}" (e.g. setpriv to drop to a uid) when set.
HF_PREFIX=()
hyperfine_median() {
	need hyperfine hyperfine
	need jq jq
	local d
	mktmp d
	chmod 777 "$d"
	(cd "$d" && "${HF_PREFIX[@]}" hyperfine -N --style none "$@" --export-json "$d/hf.json" >"$d/out" 2>&1) ||
		{ cat "$d/out" >&2; die "hyperfine $* failed"; }
	jq -r '.results[0].median' "$d/hf.json"
	rm -rf "$d" # we run in $(...): the EXIT trap of the script does not see it
}

# wrk_run URL [LUA] -> "rps=N p50_ms=X p99_ms=Y" (wrk -t2 -c$WRK_C -d$WRK_D --latency)
ms_of() { # "1.23ms" / "870.00us" / "1.01s" -> ms
	awk -v v="$1" 'BEGIN {
		if (v ~ /us$/) { sub(/us$/, "", v); printf "%.4g\n", v / 1000 }
		else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.4g\n", v }
		else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.4g\n", v * 1000 }
		else print "nan" }'
}
wrk_run() {
	need wrk wrk
	local out
	if [ -n "${2:-}" ]; then
		out=$(wrk -t2 -c"$WRK_C" -d"$WRK_D" --latency -s "$2" "$1" 2>&1)
	else
		out=$(wrk -t2 -c"$WRK_C" -d"$WRK_D" --latency "$1" 2>&1)
	fi
	local rps p50 p99 non2xx
	rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
	p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
	p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
	non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<<"$out")
	[ -n "$rps" ] || { echo "$out" >&2; die "wrk failed"; }
	echo "rps=$rps p50_ms=$(ms_of "$p50") p99_ms=$(ms_of "$p99") non2xx=${non2xx:-0}"
}

# make_big PATH BYTES: a file of BYTES random-ish bytes, owned by the
# workspace owner (uid of the directory), in the page cache.
make_big() {
	local mb=$(($2 >> 20))
	dd if=/dev/urandom of="$1" bs=1M count="$mb" status=none
	chown --reference="$(dirname "$1")" "$1"
	cat "$1" >/dev/null
}

# route_or_skip STATUS ROUTE: a 404 from a route means it is not there yet.
route_or_skip() {
	if [ "$1" = 404 ]; then
		echo "route missing: $2"
		row "$2" "route missing" "-" "-" "-" "no"
		[ "$SMOKE" = 1 ] && exit 0
		exit 1
	fi
}

# need_ok LOADGEN-LINE: die unless some request succeeded.
need_ok() { [ "$(kv ok "$1")" != 0 ] || die "no request succeeded: $1"; }
