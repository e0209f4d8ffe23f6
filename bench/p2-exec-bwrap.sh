#!/usr/bin/env bash
# P2: exec round trip, bwrap backend, 1 client: p50 <= the bare bwrap line
# + 0.5 ms, so that P2 measures the server's own overhead.
#
# The bare line is the backend's own, never a copy that can drift:
# `sandboxd debug bwrap-argv` runs sandbox/backend_bwrap.c's prepare step
# for `true` as this tenant's sandbox uid:gid and writes what it would
# start (bwrap --args N /bin/sh -c true) and every fd bwrap reads: the
# options memfd (namespaces, --disable-userns, --die-with-parent,
# --new-session, --cap-drop ALL, --clearenv, the /usr and /bin... binds,
# /etc from memfds, --proc, --dev, a sized /dev/shm and /tmp,
# --remount-ro of /dev and /, the workspace, --chdir, the environment),
# the seccomp program (--seccomp) and the /etc files (--file). fdspawn
# (bench/fdspawn.c) then posix_spawns that line with each fd opened afresh
# from its file, in a new session, with an empty environment, as the
# same uid:gid, and times it to its exit.
#
# What the bare line leaves out, so it counts as the server's share: the
# per-command cgroups (mkdir, memory and pids limits, joining them, rmdir
# after the exit; the bare line cannot join cgroups cheaply), the rlimits
# and PR_SET_PDEATHSIG the server's child sets before execve, and
# everything between the HTTP request and the spawn (policy, exec row,
# hand-offs). The workspace is a scratch directory instead of the
# session's; tmp-size-bytes is the default on both sides.
#
# P2' (issue 30): the same exec from a warm pool (sandbox/warm.h, the
# default: warm-pool=2 per tenant) against the same bare line. A warm
# sandbox is made off the request's path, so the client leaves it time
# to: 30 ms of think time after each answer (an agent's model takes far
# longer). The cold row is a second server with warm-pool=0 (every
# sandbox made on the request's path, as P2 always measured), so that
# "the cold path no slower than before" is a figure of the same run; the
# drained row is the warm server with no think time at all, where the
# pool empties and most commands start cold while the pool's thread
# makes sandboxes beside them.
GOAL=P2
source "$(dirname "$0")/lib.sh"
build_all
need bwrap bubblewrap

if [ "$SMOKE" = 1 ]; then ROUNDS=1 N=10 HR=10 HW=2; else ROUNDS=3 N=200 HR=200 HW=20; fi
# The cold server first (its uid range and cgroup root apart from the warm one's).
start_sandboxd --backend bwrap --set warm-pool=0 --set "uid-base=$((5000000 + ($$ % 10000) * 16))"
COLD_PORT=$SBX_PORT COLD_AUTH=$SBX_AUTH COLD_CMD=$SBX_CMD COLD_PID=$SBX_PID
start_sandboxd --backend bwrap
l=$(sbx_curl -X POST "$SBX_URL/exec" -d '{"command":"id -u; id -g"}')
SUID=$(sed -n 's/.*"stdout":"\([0-9]*\)\\n\([0-9]*\)\\n".*/\1/p' <<<"$l")
SGID=$(sed -n 's/.*"stdout":"\([0-9]*\)\\n\([0-9]*\)\\n".*/\2/p' <<<"$l")
[ -n "$SUID" ] && [ -n "$SGID" ] || die "exec under bwrap failed: $l"
log "sandbox uid $SUID gid $SGID"

mktmp T
chmod 711 "$T"
mkdir "$T/ws"
chown "$SUID:$SGID" "$T/ws"
# It creates $T/line itself (0700, never an existing path).
"$SANDBOXD" debug bwrap-argv "$T/line" "$T/ws" "$SUID" "$SGID" true || die "sandboxd debug bwrap-argv failed"
chmod 755 "$T/line"
log "bare line: $(tr '\0' ' ' <"$T/line/argv"), options: $(tr '\0' ' ' <"$T/line/fd-$(tr '\0' '\n' <"$T/line/argv" | sed -n 3p)")"
"$FDSPAWN" -n 1 -w 0 -u "$SUID" -g "$SGID" "$T/line" >/dev/null || die "the bare bwrap line does not run here"

# lat PORT AUTH N THINK_MS: exec true, c1
lat() { "$LOADGEN" req -p "$1" -a "$2" -u /exec -b "$EXEC_TRUE" -c 1 -n "$3" -w 5 -t "$4" -d 600 || true; }
warm_count() { sbx_curl "$SBX_URL/metrics" | sed -n "s/^sandboxd_warm_commands_total{start=\"$1\"} //p"; }

cmdline "$COLD_CMD"
cmdline "$SBX_CMD"
cmdline "loadgen req -c 1 -n $N -w 5 -u /exec -b '$EXEC_TRUE' [-t 30]  x $ROUNDS rounds, on each server"
cmdline "sandboxd debug bwrap-argv DIR WS $SUID $SGID true; fdspawn -n $HR -w $HW -u $SUID -g $SGID DIR  x $ROUNDS rounds"
s=() b=() w=() d=()
for r in $(seq 1 "$ROUNDS"); do
	l=$(lat "$COLD_PORT" "$COLD_AUTH" "$N" 0); log "round $r sandboxd(bwrap, warm-pool=0): $l"
	[ "$(kv ok "$l")" -gt 0 ] || die "no exec succeeded"
	s+=("$(kv p50_ms "$l")")
	w0=$(warm_count warm)
	l=$(lat "$SBX_PORT" "$SBX_AUTH" "$N" 30); log "round $r sandboxd(bwrap, warm pool, think 30 ms): $l"
	[ "$(kv ok "$l")" -gt 0 ] || die "no exec succeeded"
	w+=("$(kv p50_ms "$l")")
	log "round $r: $(( $(warm_count warm) - w0 )) of $(kv ok "$l") + 5 warm-up commands started warm"
	h=$("$FDSPAWN" -n "$HR" -w "$HW" -u "$SUID" -g "$SGID" "$T/line") || die "fdspawn failed"
	log "round $r bare bwrap line: $h"
	b+=("$(kv median_ms "$h")")
	l=$(lat "$SBX_PORT" "$SBX_AUTH" "$N" 0); log "round $r sandboxd(bwrap, warm pool, back to back): $l"
	d+=("$(kv p50_ms "$l")")
done
S=$(printf '%s\n' "${s[@]}" | median)
B=$(printf '%s\n' "${b[@]}" | median)
W=$(printf '%s\n' "${w[@]}" | median)
DR=$(printf '%s\n' "${d[@]}" | median)
D=$(calc "$S - $B")
row "exec p50 ms (bwrap, c1, warm-pool=0: cold) vs the backend's own bwrap line, bare" "$S" "$B" "+$D ms ($(calc "$S / $B")x)" "<= +0.5 ms" "$(yesno le "$D" 0.5)"
row "P2': exec p50 ms (bwrap, c1, warm pool, 30 ms think time) vs the same bare line" "$W" "$B" "$(calc "$W / $B")" "< 1 (moonshot <= 0.5)" "$(yesno le "$W" "$B")"
row "context: exec p50 ms (bwrap, c1, warm pool drained: back to back) vs cold" "$DR" "$S" "$(calc "$DR / $S")" "-" "-"
mem "$(hwm_kb "$SBX_PID")"
