#!/usr/bin/env bash
# P9: 1,000 SSE watchers (GET /exec/{id}/events) of 4 running commands,
# heartbeats at 1 Hz (--set heartbeat-ms=1000): the server's CPU
# (utime+stime from /proc/PID/stat) over a 20 s window <= 5 % of one core,
# against the same server with the same commands running and no watcher;
# and exec p50 (1 client) up <= 5 % with the watchers connected.
GOAL=P9
source "$(dirname "$0")/lib.sh"
build_all

if [ "$SMOKE" = 1 ]; then ROUNDS=1 WIN=1 N=20 WATCHERS=20; else ROUNDS=2 WIN=20 N=300 WATCHERS=1000; fi
IDS=w1,w2,w3,w4
start_sandboxd --backend local --set heartbeat-ms=1000 --set max-connections-per-ip=8192 --set max-connections=8192
bg "$LOADGEN" hold -p "$SBX_PORT" -a "$SBX_AUTH" -i "$IDS" -b "sleep 900" -d 1200 -r "$SBX_DATA/held" >&2
for id in ${IDS//,/ }; do
	for i in $(seq 1 100); do
		sbx_curl "$SBX_URL/exec/$id" | grep -q '"state":"running"' && break
		sleep 0.1
	done
	sbx_curl "$SBX_URL/exec/$id" | grep -q '"state":"running"' || die "exec $id is not running"
done
cmdline "$SBX_CMD"
cmdline "loadgen hold -i $IDS -b 'sleep 900'  (4 running execs, connections kept open)"
cmdline "loadgen sse -c $WATCHERS -i $IDS  (GET /exec/{id}/events, round robin)"
cmdline "CPU: utime+stime of the server over ${WIN}s, without and with the watchers, x $ROUNDS rounds"
cmdline "loadgen req -c 1 -n $N -w 5 -u /exec -b '$EXEC_TRUE'  without and with the watchers"
cpu_idle=() cpu_w=() p_idle=() p_w=() FAILED_EXEC=
for r in $(seq 1 "$ROUNDS"); do
	c0=$(cpu_s "$SBX_PID"); sleep "$WIN"; c1=$(cpu_s "$SBX_PID")
	cpu_idle+=("$(calc "($c1 - $c0) / $WIN * 100")")
	l=$(exec_lat "$N"); p_idle+=("$(kv p50_ms "$l")")
	log "round $r no watcher: cpu $(calc "($c1 - $c0) / $WIN * 100") %, exec $l"
	rm -f "$SBX_DATA/ready"
	bg "$LOADGEN" sse -p "$SBX_PORT" -a "$SBX_AUTH" -i "$IDS" -c "$WATCHERS" -d 900 -r "$SBX_DATA/ready" >"$SBX_DATA/sse.out"
	WP=$LASTPID
	for i in $(seq 1 600); do [ -s "$SBX_DATA/ready" ] && break; sleep 0.1; done
	log "round $r watchers: $(cat "$SBX_DATA/ready" 2>/dev/null || echo 'not ready')"
	sleep 2
	c0=$(cpu_s "$SBX_PID"); sleep "$WIN"; c1=$(cpu_s "$SBX_PID")
	cpu_w+=("$(calc "($c1 - $c0) / $WIN * 100")")
	l=$(exec_lat "$N")
	log "round $r $WATCHERS watchers: cpu $(calc "($c1 - $c0) / $WIN * 100") %, exec $l"
	if [ "$(kv ok "$l")" = 0 ]; then
		FAILED_EXEC=$(sbx_curl -X POST "$SBX_URL/exec" -d "$EXEC_TRUE" -w ' (HTTP %{http_code})' | head -c 300)
		log "round $r: no exec succeeded with $WATCHERS watchers connected: $FAILED_EXEC"
	else
		p_w+=("$(kv p50_ms "$l")")
	fi
	stop_pid "$WP"; forget "$WP"
	log "round $r loadgen sse: $(cat "$SBX_DATA/sse.out")"
	SSE=$(cat "$SBX_DATA/sse.out")
	sleep 1
done
CI=$(printf '%s\n' "${cpu_idle[@]}" | median)
CW=$(printf '%s\n' "${cpu_w[@]}" | median)
PI=$(printf '%s\n' "${p_idle[@]}" | median)
row "server CPU % of one core, $WATCHERS watchers (vs none)" "$CW" "$CI" "+$(calc "$CW - $CI") points" "<= 5 %" "$(yesno le "$CW" 5)"
if [ ${#p_w[@]} -gt 0 ]; then
	PW=$(printf '%s\n' "${p_w[@]}" | median)
	R=$(calc "$PW / $PI")
	row "exec p50 ms c1 with watchers vs without" "$PW" "$PI" "$R" "<= 1.05" "$(yesno le "$R" 1.05)"
else
	row "exec p50 ms c1 with watchers vs without" "every exec failed" "$PI" "-" "<= 1.05" "no"
	note "with $WATCHERS SSE connections open, POST /exec fails: $FAILED_EXEC"
fi
note "last round's watchers: $SSE (heartbeats expected ~ watchers x seconds at 1 Hz)"
mem "$(hwm_kb "$SBX_PID")"
