#!/usr/bin/env bash
# P7: 1 GiB streamed upload (PUT /fs/write_stream, fsync'd by the server)
# >= 70 % of `dd bs=1M conv=fsync` copying the same page-cached file into
# the same directory.
GOAL=P7
source "$(dirname "$0")/lib.sh"
build_all

if [ "$SMOKE" = 1 ]; then ROUNDS=1 SIZE=$((8 << 20)); else ROUNDS=5 SIZE=$((1 << 30)); fi
start_sandboxd --backend local
st=$(sbx_curl -o /dev/null -w '%{http_code}' -X PUT --data-binary x "$SBX_URL/fs/write_stream?path=.bench-probe2")
route_or_skip "$st" "PUT /fs/write_stream"
mktmp SRCD
SRC=$SRCD/src.bin
make_big "$SRC" "$SIZE"
RSS0=$(rss_kb "$SBX_PID")
cmdline "$SBX_CMD"
cmdline "curl -s -T src.bin -o /dev/null -w '%{speed_upload}' -H 'Authorization: Bearer ...' '$SBX_URL/fs/write_stream?path=up.bin'  ($((SIZE >> 20)) MiB) x $ROUNDS rounds"
cmdline "dd if=src.bin of=<session dir>/dd.bin bs=1M conv=fsync  x $ROUNDS rounds"
s=() b=()
for r in $(seq 1 "$ROUNDS"); do
	rm -f "$SBX_SESSION_DIR/up.bin" "$SBX_SESSION_DIR/dd.bin"
	sync
	l=$(sbx_curl -T "$SRC" -o /dev/null -w '%{http_code} %{size_upload} %{speed_upload}' "$SBX_URL/fs/write_stream?path=up.bin")
	log "round $r sandboxd: $l"
	read -r code size speed <<<"$l"
	case $code in 200 | 201) ;; *) die "upload failed: $l" ;; esac
	[ "$(stat -c %s "$SBX_SESSION_DIR/up.bin")" = "$SIZE" ] || die "uploaded file has the wrong size"
	s+=("$speed")
	rm -f "$SBX_SESSION_DIR/up.bin"
	sync
	l=$(dd if="$SRC" of="$SBX_SESSION_DIR/dd.bin" bs=1M conv=fsync 2>&1 | tail -1)
	log "round $r dd: $l"
	secs=$(sed -n 's/.* copied, \([0-9.]*\) s,.*/\1/p' <<<"$l")
	b+=("$(calc "$SIZE / $secs")")
done
rm -f "$SBX_SESSION_DIR/dd.bin"
S=$(printf '%s\n' "${s[@]}" | median)
B=$(printf '%s\n' "${b[@]}" | median)
R=$(calc "$S / $B")
row "upload MB/s, $((SIZE >> 20)) MiB fsync'd, vs dd conv=fsync" "$(calc "$S / 1e6")" "$(calc "$B / 1e6")" "$R" ">= 0.70" "$(yesno ge "$R" 0.70)"
HWM=$(hwm_kb "$SBX_PID")
row "context: server peak RSS growth kB over the uploads" "$((HWM - RSS0))" "-" "-" "<= 16384" "$(yesno le $((HWM - RSS0)) 16384)"
mem "$HWM"
