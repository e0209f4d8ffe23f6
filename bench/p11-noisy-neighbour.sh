#!/usr/bin/env bash
# P11 (issue 13): noisy neighbour. Tenant B's p99 for POST /exec
# {"command":"true"} and a 4 KiB GET /fs/read (one client each, keep-alive)
# while tenant A in turn runs: a fork bomb, memory hogs up to its budget,
# a 1 GB stdout flood, its warm pool emptied as fast as it can (issue
# 30), a disk fill to its quota, and six concurrent
# readdirs of a 300,000-entry directory. Goal: B's p99 <= 1.5 x its quiet
# p99 in every phase. bwrap backend (the tenants' cgroup budgets), disk
# quotas as disk-quota=auto finds them (project quotas, else an image per
# tenant); the server's data, images and mounts are removed at the end.
GOAL=P11
source "$(dirname "$0")/lib.sh"
build_all

# WARM: B's warm-up requests per measure (one in smoke mode: under the
# guest's TCG an exec takes a second).
if [ "$SMOKE" = 1 ]; then
	D=1 ENTRIES=2000 FLOOD=10000000 QUOTA=$((64 << 20)) MEMB=$((256 << 20)) INODES=16000 WARM=1
else
	D=10 ENTRIES=300000 FLOOD=1000000000 QUOTA=$((2 << 30)) MEMB=$((1 << 30)) INODES=400000 WARM=3
fi
# P11_MEMB: A's memory budget instead (run-all's guest run: the guest has
# no disk, so a tenant's image is a file on tmpfs, whose pages the loop
# device charges to the tenant's memory group, unreclaimable without swap;
# the budget then must hold the quota too).
if [ -n "${P11_MEMB:-}" ]; then
	MEMB=$P11_MEMB
	note "tenant-mem-budget-bytes=$MEMB here instead (P11_MEMB: a disk image on tmpfs is charged to its tenant's memory)"
fi
T=$((2 * D + 10)) # A's commands end by themselves soon after their phase

# The server is stopped (gracefully: its images are unmounted) before the
# data goes; a mount a killed server left behind is detached.
unmount_left() {
	local m
	[ -n "${SBX_DATA:-}" ] || return 0
	for m in "$SBX_DATA"/tenants/*/workspace; do
		mountpoint -q "$m" 2>/dev/null && umount -l "$m"
	done
	return 0
}
trap 'rc=$?; [ -n "${SBX_PID:-}" ] && stop_pid "$SBX_PID"; unmount_left; (exit $rc); cleanup' EXIT

start_sandboxd --backend bwrap --set disk-quota=auto --set "tenant-disk-quota-bytes=$QUOTA" \
	--set "tenant-disk-quota-inodes=$INODES" --set "tenant-mem-budget-bytes=$MEMB" --set max-output-bytes-cap=1048576 \
	--set spill-cap-bytes=1048576 # the flood's spill files would fill A's quota before the disk phase
"$SANDBOXD" tenant add globex --data-dir "$SBX_DATA" >/dev/null
TB="Bearer $("$SANDBOXD" token --tenant globex --scope "fs:read fs:write exec" --ttl 7200 --data-dir "$SBX_DATA")"
TA=$SBX_AUTH
head -c 4096 /dev/zero | tr '\0' 'b' | curl -sf -o /dev/null -X PUT -H "Authorization: $TB" --data-binary @- \
	"$SBX_URL/fs/write?path=/workspace/f4k.txt" || die "B's PUT /fs/write failed"
READY=$(curl -s "$SBX_URL/readyz")
MODE=$(sed -n 's/.*"disk_quota":{[^}]*"mode":"\([a-z]*\)".*/\1/p' <<<"$READY")
CPU=$(sed -n 's/.*"cpu":{"status":"\([a-z]*\)"[^}]*"default_budget_millicores":\([0-9]*\).*/\1, \2 millicores/p' <<<"$READY")
log "disk quotas: ${MODE:-?}; CPU budget: ${CPU:-?}"
note "disk quotas in force: ${MODE:-unknown} (disk-quota=auto); tenant budgets: memory $MEMB bytes, disk $QUOTA bytes, CPU ${CPU:-not reported} (tenant-cpu-budget-millicores default)"
mktmp W

# p99_of VAR PHASE WHAT LOADGEN-LINE: its p99 in ms into VAR; when no
# request ended within the run, the run's length (a lower bound), said in
# a NOTE.
p99_of() {
	[ "$(kv err "$4")" = 0 ] || die "$2: B's $3 failed: $4"
	if [ "$(kv ok "$4")" = 0 ]; then
		note "during A's $2 no $3 of B ended within $(kv secs "$4") s: its p99 is given as that"
		printf -v "$1" %s "$(calc "$(kv secs "$4") * 1000")"
	else
		printf -v "$1" %s "$(kv p99_ms "$4")"
	fi
}

# b_p99 PHASE: B's exec and read p99 (D seconds each); sets BE and BR.
b_p99() {
	local l
	l=$("$LOADGEN" req -p "$SBX_PORT" -a "$TB" -u /exec -b "$EXEC_TRUE" -c 1 -d "$D" -w "$WARM" || true)
	log "$1: B exec true: $l"; p99_of BE "$1" "exec" "$l"
	l=$("$LOADGEN" req -p "$SBX_PORT" -a "$TB" -m GET -u "/fs/read?path=/workspace/f4k.txt" -c 1 -d "$D" -w "$WARM" || true)
	log "$1: B 4 KiB read: $l"; p99_of BR "$1" "4 KiB read" "$l"
}

# a_load N JSON: N clients, each repeating POST /exec JSON as tenant A
# until a_stop.
A_PIDS=()
a_load() {
	local i
	rm -f "$W/stop"
	for i in $(seq 1 "$1"); do
		bg bash -c 'while [ ! -e "$0" ]; do curl -s -o /dev/null -m "$4" -H "Authorization: $1" \
			-H "Content-Type: application/json" -d "$2" "$3/exec"; done' "$W/stop" "$TA" "$2" "$SBX_URL" "$((T + 10))"
		A_PIDS+=("$LASTPID")
	done
}
# a_running: ids of A's running commands.
a_running() {
	curl -s -H "Authorization: $TA" "$SBX_URL/execs?state=running&limit=1000" |
		grep -o '"id":"[^"]*"' | cut -d'"' -f4 || true
}
# a_stop: A's clients stop, its running commands are cancelled, and the
# next phase starts once none is left (up to 60 s).
a_stop() {
	local p id i
	touch "$W/stop"
	for p in "${A_PIDS[@]}"; do stop_pid "$p"; forget "$p"; done
	A_PIDS=()
	for i in $(seq 1 600); do
		ids=$(a_running)
		[ -z "$ids" ] && return 0
		for id in $ids; do curl -s -o /dev/null -X POST -H "Authorization: $TA" "$SBX_URL/exec/$id/cancel"; done
		sleep 0.1
	done
	log "warning: A still has commands running: $ids"
}
cmd() { printf '{"command":"%s","timeout_s":%d}' "$1" "$T"; }

b_p99 quiet
QE=$BE QR=$BR
cmdline "$SBX_CMD"
cmdline "B: loadgen req -c 1 -d $D -w $WARM -u /exec -b '$EXEC_TRUE'; then -u '/fs/read?path=/workspace/f4k.txt' (4 KiB); quiet, then during each phase of A"

phase() { # phase NAME: measure B, then stop A's load, and report
	b_p99 "$1"
	a_stop
	local re rr
	re=$(calc "$BE / $QE") rr=$(calc "$BR / $QR")
	row "B exec true p99 ms during A's $1 (vs quiet)" "$BE" "$QE" "$re" "<= 1.5" "$(yesno le "$re" 1.5)"
	row "B 4 KiB read p99 ms during A's $1 (vs quiet)" "$BR" "$QR" "$rr" "<= 1.5" "$(yesno le "$rr" 1.5)"
}

a_load 2 "$(cmd 'f(){ f | f & }; f; sleep 600')"
cmdline "A fork bomb: 2 clients repeating POST /exec $(cmd 'f(){ f | f & }; f; sleep 600')"
phase "fork bomb"

a_load 4 "$(cmd 'tail /dev/zero')"
cmdline "A memory hogs: 4 clients repeating POST /exec $(cmd 'tail /dev/zero') (tenant-mem-budget-bytes=$MEMB)"
phase "memory hogs"

a_load 1 "$(cmd "head -c $FLOOD /dev/zero")"
cmdline "A stdout flood: POST /exec $(cmd "head -c $FLOOD /dev/zero") repeated"
phase "stdout flood"

# Issue 30: A takes its warm sandboxes as fast as it can (8 clients of
# `true`): the pool's one thread makes sandboxes for A and B in turn, so
# B's commands still find theirs.
a_load 8 "$(cmd true)"
cmdline "A emptying its warm pool: 8 clients repeating POST /exec $(cmd true)"
phase "warm pool drain"

FILL="head -c $((QUOTA + (16 << 20))) /dev/zero > /workspace/fill; rm -f /workspace/fill"
a_load 1 "$(cmd "$FILL")"
cmdline "A disk fill: POST /exec $(cmd "$FILL") repeated (tenant-disk-quota-bytes=$QUOTA)"
phase "disk fill"

l=$(curl -s -H "Authorization: $TA" -H "Content-Type: application/json" \
	-d "{\"command\":\"rm -f /workspace/fill; mkdir -p /workspace/big && cd /workspace/big && seq 1 $ENTRIES | xargs touch && ls | wc -l\",\"timeout_s\":900}" \
	"$SBX_URL/exec")
grep -q "\"stdout\":\"$ENTRIES" <<<"$l" || die "A could not make $ENTRIES entries: $(head -c 300 <<<"$l")"
# With readdir paging (a `limit` parameter in the spec) each of A's
# requests gets the server's default page, as a paging client's first
# request does; without it, every readdir walks all the entries.
RD="/fs/readdir?path=/workspace/big"
if awk '/^  \/fs\/readdir:/ {on = 1; next} /^  \/[a-z]/ {on = 0} on' "$REPO/openapi/openapi.yaml" |
	grep -q 'name: limit'; then
	note "A's readdirs are paged (the server's default page per request)"
else
	note "GET /fs/readdir has no paging in this build: each of A's readdirs walks all $ENTRIES entries"
fi
rm -f "$W/stop"
bg "$LOADGEN" req -p "$SBX_PORT" -a "$TA" -m GET -u "$RD" -c 6 -d "$((2 * D + 5))"
A_PIDS+=("$LASTPID")
cmdline "A readdirs: loadgen req -c 6 -m GET -u '$RD' ($ENTRIES entries)"
phase "six $ENTRIES-entry readdirs"

AUD=$(sbx_curl "$SBX_URL/audit?limit=1&route=/exec" | head -c 300)
grep -q '"records":\[{' <<<"$AUD" || note "could not confirm A's audit records for /exec: $AUD"
mem "$(hwm_kb "$SBX_PID")"
stop_pid "$SBX_PID"
forget "$SBX_PID"
left=$(grep -c "$SBX_DATA" /proc/self/mountinfo || true)
[ "$left" = 0 ] || die "$left mounts of $SBX_DATA left after the server stopped"
