#!/usr/bin/env bash
# P6: 1 GiB streamed download (GET /fs/read_stream) >= 90 % of nginx
# (sendfile on) serving the same file from the page cache.
#   curl -s -o /dev/null -w '%{speed_download}'
GOAL=P6
source "$(dirname "$0")/lib.sh"
build_all

if [ "$SMOKE" = 1 ]; then ROUNDS=1 SIZE=$((8 << 20)); else ROUNDS=5 SIZE=$((1 << 30)); fi
start_sandboxd --backend local
st=$(sbx_curl -o /dev/null -w '%{http_code}' "$SBX_URL/fs/read_stream?path=.bench-probe")
route_or_skip "$st" "GET /fs/read_stream"
make_big "$SBX_SESSION_DIR/big.bin" "$SIZE"
start_nginx "$SBX_SESSION_DIR" on
RSS0=$(rss_kb "$SBX_PID")
cmdline "$SBX_CMD"
cmdline "curl -s -o /dev/null -w '%{speed_download}' -H 'Authorization: Bearer ...' '$SBX_URL/fs/read_stream?path=big.bin'  ($((SIZE >> 20)) MiB) x $ROUNDS rounds"
cmdline "$NGX_CMD"
cmdline "curl -s -o /dev/null -w '%{speed_download}' $NGX_URL/big.bin  x $ROUNDS rounds"
s=() b=()
for r in $(seq 1 "$ROUNDS"); do
	l=$(sbx_curl -o /dev/null -w '%{http_code} %{size_download} %{speed_download}' "$SBX_URL/fs/read_stream?path=big.bin")
	log "round $r sandboxd: $l"
	read -r code size speed <<<"$l"
	[ "$code" = 200 ] && [ "$size" = "$SIZE" ] || die "download failed: $l"
	s+=("$speed")
	l=$(curl -s -o /dev/null -w '%{http_code} %{size_download} %{speed_download}' "$NGX_URL/big.bin")
	log "round $r nginx: $l"
	read -r code size speed <<<"$l"
	b+=("$speed")
done
S=$(printf '%s\n' "${s[@]}" | median)
B=$(printf '%s\n' "${b[@]}" | median)
R=$(calc "$S / $B")
row "download MB/s, $((SIZE >> 20)) MiB, vs nginx sendfile on" "$(calc "$S / 1e6")" "$(calc "$B / 1e6")" "$R" ">= 0.90" "$(yesno ge "$R" 0.90)"
HWM=$(hwm_kb "$SBX_PID")
row "context: server peak RSS growth kB over the downloads" "$((HWM - RSS0))" "-" "-" "<= 16384" "$(yesno le $((HWM - RSS0)) 16384)"
mem "$HWM"
