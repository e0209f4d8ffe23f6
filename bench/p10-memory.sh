#!/usr/bin/env bash
# P10: memory. Idle RSS <= 16 MiB (after start and a few requests of each
# kind), and streaming any size costs <= +16 MiB: peak RSS (VmHWM) growth
# over the idle RSS across a streamed download and upload, at two sizes
# (the growth must not follow the size).
GOAL=P10
source "$(dirname "$0")/lib.sh"
build_all

if [ "$SMOKE" = 1 ]; then SIZES="$((1 << 20)) $((8 << 20))" WARM=2; else SIZES="$((64 << 20)) $((1 << 30))" WARM=10; fi
start_sandboxd --backend local
cmdline "$SBX_CMD"
cmdline "warm-up: $WARM x (POST /exec true, PUT /fs/write 1 KiB, GET /fs/read), then 2 s idle: VmRSS"
for i in $(seq 1 "$WARM"); do
	sbx_curl -o /dev/null -X POST "$SBX_URL/exec" -d "$EXEC_TRUE"
	head -c 1024 /dev/zero | tr '\0' 'x' | sbx_curl -o /dev/null -X PUT --data-binary @- "$SBX_URL/fs/write?path=w$i.txt"
	sbx_curl -o /dev/null "$SBX_URL/fs/read?path=w$i.txt"
done
sleep 2
IDLE=$(rss_kb "$SBX_PID")
row "idle RSS kB" "$IDLE" "-" "-" "<= 16384" "$(yesno le "$IDLE" 16384)"
st=$(sbx_curl -o /dev/null -w '%{http_code}' "$SBX_URL/fs/read_stream?path=w1.txt")
if [ "$st" = 404 ]; then
	note "GET /fs/read_stream missing (404): streaming memory not measured"
	row "streaming RSS growth" "route missing" "-" "-" "<= 16384" "no"
	mem "$(hwm_kb "$SBX_PID")"
	[ "$SMOKE" = 1 ] && exit 0
	exit 1
fi
mktmp SRCD
for sz in $SIZES; do
	make_big "$SRCD/src.bin" "$sz"
	cp "$SRCD/src.bin" "$SBX_SESSION_DIR/down.bin"
	chown --reference="$SBX_SESSION_DIR" "$SBX_SESSION_DIR/down.bin"
	before=$(hwm_kb "$SBX_PID")
	d=$(sbx_curl -o /dev/null -w '%{http_code} %{size_download}' "$SBX_URL/fs/read_stream?path=down.bin")
	u=$(sbx_curl -T "$SRCD/src.bin" -o /dev/null -w '%{http_code} %{size_upload}' "$SBX_URL/fs/write_stream?path=up.bin")
	HWM=$(hwm_kb "$SBX_PID")
	log "size $sz: download $d, upload $u, VmHWM $before -> $HWM kB (idle RSS $IDLE)"
	cmdline "curl GET /fs/read_stream + PUT /fs/write_stream of $((sz >> 20)) MiB"
	row "peak RSS growth kB, stream $((sz >> 20)) MiB down+up" "$((HWM - IDLE))" "-" "-" "<= 16384" "$(yesno le $((HWM - IDLE)) 16384)"
	rm -f "$SBX_SESSION_DIR/down.bin" "$SBX_SESSION_DIR/up.bin" "$SRCD/src.bin"
done
mem "$(hwm_kb "$SBX_PID")"
