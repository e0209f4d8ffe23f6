#!/usr/bin/env bash
# P1: exec round trip of `true`, local backend, keep-alive, 1 client:
# p50 <= 1.3 x bare `sh -c true` (hyperfine -N). adnanh webhook (a
# command-per-request peer) is run alongside as context.
GOAL=P1
source "$(dirname "$0")/lib.sh"
build_all
need hyperfine hyperfine

if [ "$SMOKE" = 1 ]; then ROUNDS=1 N=20 HR=10 HW=2; else ROUNDS=5 N=500 HR=500 HW=50; fi
start_sandboxd --backend local
start_webhook
cmdline "$SBX_CMD"
cmdline "loadgen req -c 1 -n $N -w 5 -u /exec -b '$EXEC_TRUE' (keep-alive, sequential)  x $ROUNDS rounds"
cmdline "hyperfine -N --warmup $HW --runs $HR 'sh -c true'  x $ROUNDS rounds"
cmdline "$WH_CMD; loadgen req -c 1 -n $N -u /hooks/true  x $ROUNDS rounds"

s=() b=() w=()
for r in $(seq 1 "$ROUNDS"); do
	l=$(exec_lat "$N"); log "round $r sandboxd: $l"; need_ok "$l"
	s+=("$(kv p50_ms "$l")")
	h=$(hyperfine_median --warmup "$HW" --runs "$HR" 'sh -c true'); log "round $r hyperfine sh -c true median: $h s"
	b+=("$(calc "$h * 1000")")
	l=$("$LOADGEN" req -p "$WH_PORT" -m POST -u /hooks/true -b '' -c 1 -n "$N" -w 5 -d 600); log "round $r webhook: $l"
	w+=("$(kv p50_ms "$l")")
done
S=$(printf '%s\n' "${s[@]}" | median)
B=$(printf '%s\n' "${b[@]}" | median)
W=$(printf '%s\n' "${w[@]}" | median)
R=$(calc "$S / $B")
row "exec p50 ms (local, c1) vs hyperfine sh -c true" "$S" "$B" "$R" "<= 1.3" "$(yesno le "$R" 1.3)"
row "context: webhook c1 p50 ms (sandboxd/webhook)" "$S" "$W" "$(calc "$S / $W")" "-" "-"
mem "$(hwm_kb "$SBX_PID")"
