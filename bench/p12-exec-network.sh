#!/usr/bin/env bash
# P12 (issue 29): what network on request costs a command. POST /exec
# {"command":"true","network":true} against {"command":"true"}, bwrap
# backend, 1 client, the two interleaved round by round (paired: the same
# server, the same moment's machine). Goal: the networked p50 within
# +10 ms of the other (pasta's design: about +60 ms). `true` connects
# nowhere: the tenant's allowlist names one documentation name and no
# packet is sent, so this runs in the host's own namespace. Each client
# waits 30 ms after every answer (loadgen -t), so that both kinds start
# from the warm pool (issue 30: networked sandboxes wait in egress
# namespaces of their own), as a user's commands a moment apart do.
GOAL=P12
source "$(dirname "$0")/lib.sh"
build_all
need bwrap bubblewrap

if [ "$SMOKE" = 1 ]; then ROUNDS=1 N=5; else ROUNDS=5 N=100; fi
start_sandboxd --backend bwrap
"$SANDBOXD" tenant set acme network=allowed.test --data-dir "$SBX_DATA" >/dev/null || die "tenant set network failed"
NET_TRUE='{"command":"true","network":true}'
l=$(sbx_curl -X POST "$SBX_URL/exec" -d "$NET_TRUE")
grep -q '"exit_code":0' <<<"$l" || die "a networked true does not run here: $l"

cmdline "$SBX_CMD"
cmdline "loadgen req -c 1 -n $N -w 5 -t 30 -u /exec -b '$NET_TRUE'  x $ROUNDS rounds"
cmdline "loadgen req -c 1 -n $N -w 5 -t 30 -u /exec -b '$EXEC_TRUE'  x $ROUNDS rounds"
s=() b=()
for r in $(seq 1 "$ROUNDS"); do
	l=$("$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$NET_TRUE" -c 1 -n "$N" -w 5 -t 30 -d 600 || true)
	log "round $r network: $l"
	need_ok "$l"
	s+=("$(kv p50_ms "$l")")
	l=$("$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 1 -n "$N" -w 5 -t 30 -d 600 || true)
	log "round $r no network: $l"
	need_ok "$l"
	b+=("$(kv p50_ms "$l")")
done
S=$(printf '%s\n' "${s[@]}" | median)
B=$(printf '%s\n' "${b[@]}" | median)
D=$(calc "$S - $B")
row "exec p50 ms (bwrap, c1, warm pool, 30 ms think time), network: true vs none" "$S" "$B" "+$D ms ($(calc "$S / $B")x)" "<= +10 ms" "$(yesno le "$D" 10)"
mem "$(hwm_kb "$SBX_PID")"
