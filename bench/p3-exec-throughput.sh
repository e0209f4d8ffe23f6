#!/usr/bin/env bash
# P3: exec throughput, 64 keep-alive clients, local backend: >= 75 % of the
# in-process spawn ceiling (spawnceil: posix_spawn `sh -c true` from 2
# threads), and p99 <= 3 x p50 of the answered execs. With the defaults
# (tenant-max-execs 32, tenant-exec-queue 32) the 32 clients past the limit
# wait in the tenant's admission queue, so every request is answered and
# its latency includes that wait; a 429 (the queue full, or a wait past
# exec-queue-wait-ms) is load shed: counted, retried after 10 ms (-R 10),
# not in the latencies, and should be 0 here. adnanh webhook at c64 runs
# alongside as context.
GOAL=P3
source "$(dirname "$0")/lib.sh"
build_all

if [ "$SMOKE" = 1 ]; then ROUNDS=1 D=1; else ROUNDS=3 D=8; fi
C=64
start_sandboxd --backend local
start_webhook
cmdline "$SBX_CMD"
cmdline "loadgen req -c $C -d $D -w 2 -R 10 -u /exec -b '$EXEC_TRUE'  x $ROUNDS rounds"
cmdline "spawnceil -t 2 -d $D  x $ROUNDS rounds"
cmdline "$WH_CMD; loadgen req -c $C -d $D -u /hooks/true  x $ROUNDS rounds"
s=() p50=() p99=() shed=() b=() w=()
for r in $(seq 1 "$ROUNDS"); do
	l=$("$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c $C -d $D -w 2 -R 10); log "round $r sandboxd: $l"
	s+=("$(kv rps "$l")"); p50+=("$(kv p50_ms "$l")"); p99+=("$(kv p99_ms "$l")")
	shed+=("$(calc "$(kv r429 "$l") / $(kv secs "$l")")")
	l=$("$SPAWNCEIL" -t 2 -d $D); log "round $r spawnceil: $l"
	b+=("$(kv rate "$l")")
	l=$("$LOADGEN" req -p "$WH_PORT" -m POST -u /hooks/true -b '' -c $C -d $D); log "round $r webhook: $l"
	w+=("$(kv rps "$l")")
done
S=$(printf '%s\n' "${s[@]}" | median)
B=$(printf '%s\n' "${b[@]}" | median)
W=$(printf '%s\n' "${w[@]}" | median)
P50=$(printf '%s\n' "${p50[@]}" | median)
P99=$(printf '%s\n' "${p99[@]}" | median)
SHED=$(printf '%s\n' "${shed[@]}" | median)
R=$(calc "$S / $B")
row "exec/s, c64 (2xx only) vs spawn ceiling" "$S" "$B" "$R" ">= 0.75" "$(yesno ge "$R" 0.75)"
row "exec p99/p50 ms at c64 (429s shed: $SHED/s)" "p99 $P99" "p50 $P50" "$(calc "$P99 / $P50")" "<= 3" "$(yesno le "$(calc "$P99 / $P50")" 3)"
row "context: exec/s c64, sandboxd vs webhook" "$S" "$W" "$(calc "$S / $W")" "-" "-"
mem "$(hwm_kb "$SBX_PID")"
