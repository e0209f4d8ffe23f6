#!/usr/bin/env bash
# P8: exec printing 1 GB on stdout >= 70 % of the pipe ceiling
# (`dd bs=64k | dd bs=64k`), and server RSS growth <= 16 MiB. The command
# is the same producer as the ceiling's left side; sandboxd keeps the
# bounded head/tail and tees the whole stream to the spill file.
GOAL=P8
source "$(dirname "$0")/lib.sh"
build_all

if [ "$SMOKE" = 1 ]; then ROUNDS=1 COUNT=160; else ROUNDS=3 COUNT=15259; fi
BYTES=$((COUNT * 65536))
PROD="dd if=/dev/zero bs=64k count=$COUNT status=none"
start_sandboxd --backend local
RSS0=$(rss_kb "$SBX_PID")
BODY="{\"command\":\"$PROD\",\"timeout_s\":900}"
cmdline "$SBX_CMD"
cmdline "curl -X POST $SBX_URL/exec -d '$BODY' -w '%{time_total}'  x $ROUNDS rounds"
cmdline "$PROD | dd of=/dev/null bs=64k  x $ROUNDS rounds"
s=() b=()
for r in $(seq 1 "$ROUNDS"); do
	rm -rf "$SBX_DATA"/tenants/acme/workspace/.sandboxd/spill/* 2>/dev/null || true
	out=$(sbx_curl -X POST "$SBX_URL/exec" -d "$BODY" -w '\n%{http_code} %{time_total}')
	read -r code t <<<"$(tail -1 <<<"$out")"
	got=$(sed -n 's/.*"stdout_bytes":\([0-9]*\).*/\1/p' <<<"$out")
	log "round $r sandboxd: http $code, stdout_bytes $got, $t s"
	[ "$code" = 200 ] && [ "$got" = "$BYTES" ] || die "exec failed: $(head -c 400 <<<"$out")"
	s+=("$(calc "$BYTES / $t")")
	t0=$(date +%s.%N)
	$PROD | dd of=/dev/null bs=64k status=none
	t1=$(date +%s.%N)
	log "round $r pipe: $(calc "$t1 - $t0") s"
	b+=("$(calc "$BYTES / ($t1 - $t0)")")
done
S=$(printf '%s\n' "${s[@]}" | median)
B=$(printf '%s\n' "${b[@]}" | median)
R=$(calc "$S / $B")
HWM=$(hwm_kb "$SBX_PID")
row "exec stdout MB/s ($((BYTES / 1000000)) MB) vs dd-to-dd pipe" "$(calc "$S / 1e6")" "$(calc "$B / 1e6")" "$R" ">= 0.70" "$(yesno ge "$R" 0.70)"
row "server peak RSS growth kB during the execs" "$((HWM - RSS0))" "-" "-" "<= 16384" "$(yesno le $((HWM - RSS0)) 16384)"
mem "$HWM"
