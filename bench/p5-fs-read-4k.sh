#!/usr/bin/env bash
# P5: authenticated 4 KiB GET /fs/read (every request audited), 64 clients:
# >= 90 % of nginx serving the same 4 KiB file (keep-alive, sendfile on).
# Both with `wrk -t2 -c64 -d10s --latency`, interleaved.
GOAL=P5
source "$(dirname "$0")/lib.sh"
build_all
need wrk wrk

if [ "$SMOKE" = 1 ]; then ROUNDS=1 WRK_D=1s WRK_C=8; else ROUNDS=3 WRK_D=10s WRK_C=64; fi
# Two pairings (issue 30): the request log off against nginx's access_log
# off, and sandboxd's default (log-requests on, its lines on stderr, here
# a file) against nginx writing its access log buffered.
pairing() { # $1: off or on (sandboxd's request log); nginx's access log to match
	local mode=$1 access=off label="request log off vs nginx access_log off"
	[ "$mode" = on ] && access=buffered label="request log on (default) vs nginx access_log buffer=64k"
	start_sandboxd --backend local --set "log-requests=$([ "$mode" = on ] && echo true || echo false)"
	head -c 4096 /dev/zero | tr '\0' 'a' >"$SBX_SESSION_DIR/f4k.txt"
	chown 100000:100000 "$SBX_SESSION_DIR/f4k.txt" 2>/dev/null || true
	[ "$(sbx_curl "$SBX_URL/fs/read?path=f4k.txt" | wc -c)" = 4096 ] || die "GET /fs/read of the 4 KiB file failed"
	start_nginx "$SBX_SESSION_DIR" on "$access"
	[ "$(curl -s "$NGX_URL/f4k.txt" | wc -c)" = 4096 ] || die "nginx does not serve the file"
	mktmp W
	cat >"$W/auth.lua" <<LUA
wrk.headers["Authorization"] = "$SBX_AUTH"
LUA
	cmdline "$SBX_CMD"
	cmdline "wrk -t2 -c$WRK_C -d$WRK_D --latency -s auth.lua '$SBX_URL/fs/read?path=f4k.txt'  (auth.lua sets the Authorization header) x $ROUNDS rounds"
	cmdline "$NGX_CMD"
	cmdline "wrk -t2 -c$WRK_C -d$WRK_D --latency $NGX_URL/f4k.txt  x $ROUNDS rounds"
	local s=() b=() sp=() bp=() r l S B R
	for r in $(seq 1 "$ROUNDS"); do
		l=$(wrk_run "$SBX_URL/fs/read?path=f4k.txt" "$W/auth.lua"); log "round $r sandboxd ($mode): $l"
		[ "$(kv non2xx "$l")" = 0 ] || log "warning: sandboxd answered non-2xx"
		s+=("$(kv rps "$l")"); sp+=("$(kv p99_ms "$l")")
		l=$(wrk_run "$NGX_URL/f4k.txt"); log "round $r nginx ($access): $l"
		b+=("$(kv rps "$l")"); bp+=("$(kv p99_ms "$l")")
	done
	S=$(printf '%s\n' "${s[@]}" | median)
	B=$(printf '%s\n' "${b[@]}" | median)
	R=$(calc "$S / $B")
	row "req/s, 4 KiB /fs/read c$WRK_C vs nginx static, $label" "$S" "$B" "$R" ">= 0.90" "$(yesno ge "$R" 0.90)"
	row "context: p99 ms ($label)" "$(printf '%s\n' "${sp[@]}" | median)" "$(printf '%s\n' "${bp[@]}" | median)" "-" "-" "-"
	if [ "$mode" = on ]; then
		grep -q '"route":"/fs/read"' "$SBX_DATA/stderr.log" || die "the request log has no /fs/read line"
	fi
	AUD=$(sbx_curl "$SBX_URL/audit?limit=1&route=/fs/read" | head -c 300)
	grep -q '"records":\[{' <<<"$AUD" || note "could not confirm audit records for /fs/read: $AUD"
	mem "$(hwm_kb "$SBX_PID")"
	# the next pairing's server takes the same uid range
	stop_pid "$SBX_PID"; forget "$SBX_PID"
	stop_pid "$NGX_PID"; forget "$NGX_PID"
}
pairing off
pairing on
