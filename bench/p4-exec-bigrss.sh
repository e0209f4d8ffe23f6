#!/usr/bin/env bash
# P4: exec latency with the server's RSS at 1 GiB: p50 within 10 % of P1
# (the same server at its normal size, measured in the same run).
# The ballast needs no hook: buffered PUT /fs/write bodies are held in the
# server's memory until complete, so `loadgen ballast` keeps 64 uploads of
# 16 MiB in flight, all but their last byte sent (64 x 16 MiB = 1 GiB).
GOAL=P4
source "$(dirname "$0")/lib.sh"
build_all

if [ "$SMOKE" = 1 ]; then ROUNDS=1 N=20 BC=2; else ROUNDS=3 N=400 BC=64; fi
BS=$((16 << 20))
start_sandboxd --backend local --set connection-timeout-s=600 --set max-buffered-bytes=$BS
cmdline "$SBX_CMD"
cmdline "loadgen req -c 1 -n $N -w 5 -u /exec -b '$EXEC_TRUE'  (normal RSS, then with the ballast) x $ROUNDS rounds"
cmdline "loadgen ballast -c $BC -s $BS  (PUT /fs/write, last byte withheld)"
s=() b=() rss=()
for r in $(seq 1 "$ROUNDS"); do
	l=$(exec_lat "$N"); log "round $r normal (RSS $(rss_kb "$SBX_PID") kB): $l"; need_ok "$l"
	s+=("$(kv p50_ms "$l")")
	rm -f "$SBX_DATA/ready"
	bg "$LOADGEN" ballast -p "$SBX_PORT" -a "$SBX_AUTH" -c $BC -s $BS -d 300 -r "$SBX_DATA/ready" >&2
	BP=$LASTPID
	for i in $(seq 1 600); do [ -s "$SBX_DATA/ready" ] && break; sleep 0.1; done
	[ -s "$SBX_DATA/ready" ] || die "ballast not ready"
	sleep 0.5
	R=$(rss_kb "$SBX_PID"); rss+=("$R")
	l=$(exec_lat "$N"); log "round $r ballast $(cat "$SBX_DATA/ready") (RSS $R kB): $l"; need_ok "$l"
	b+=("$(kv p50_ms "$l")")
	stop_pid "$BP" >/dev/null; forget "$BP"
	sleep 1
done
S=$(printf '%s\n' "${s[@]}" | median)
B=$(printf '%s\n' "${b[@]}" | median)
RSS=$(printf '%s\n' "${rss[@]}" | median)
R=$(calc "$B / $S")
row "exec p50 ms c1 with RSS $((RSS / 1024)) MiB vs normal RSS" "$B" "$S" "$R" "<= 1.10" "$(yesno le "$R" 1.10)"
[ "$SMOKE" = 1 ] || ge "$RSS" $((1000 * 1024)) || note "the ballast reached only $((RSS / 1024)) MiB of RSS"
mem "$(hwm_kb "$SBX_PID")"
