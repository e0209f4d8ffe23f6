#!/usr/bin/env bash
# P13 (issue 29): a 1 GiB download through the egress gateway. A command
# with network runs `curl http://allowed.test/size/N` (the upstream of
# bench/netns.sh, in a namespace of this script, no route out of the
# machine), against the same curl from the server's own namespace to the
# same upstream, directly; interleaved rounds. Goal: >= 0.8 x direct.
GOAL=P13
source "$(dirname "$0")/lib.sh"
source "$BENCH_DIR/netns.sh"
build_all
need bwrap bubblewrap
netns_enter "$@"
netns_world

if [ "$SMOKE" = 1 ]; then ROUNDS=1 SIZE=$((8 << 20)); else ROUNDS=5 SIZE=$((1 << 30)); fi
start_sandboxd --backend bwrap
"$SANDBOXD" tenant set acme network=allowed.test --data-dir "$SBX_DATA" >/dev/null || die "tenant set network failed"
URL=http://allowed.test/size/$SIZE
CURL="curl -s -o /dev/null -w '%{http_code} %{size_download} %{speed_download}' $URL"
REQ=$(printf '{"command":"%s","network":true,"timeout_s":600}' "${CURL//\'/\'}")

cmdline "$SBX_CMD"
cmdline "POST /exec {\"command\": \"$CURL\", \"network\": true}  ($((SIZE >> 20)) MiB) x $ROUNDS rounds"
cmdline "$CURL  (from the server's namespace, directly) x $ROUNDS rounds"
s=() b=()
for r in $(seq 1 "$ROUNDS"); do
	l=$(sbx_curl -X POST "$SBX_URL/exec" -d "$REQ")
	out=$(sed -n 's/.*"stdout":"\([^"]*\)".*/\1/p' <<<"$l")
	log "round $r gateway: $out"
	read -r code size speed <<<"$out"
	[ "${code:-}" = 200 ] && [ "${size:-}" = "$SIZE" ] || die "download through the gateway failed: $l"
	s+=("$speed")
	out=$(eval "$CURL")
	log "round $r direct: $out"
	read -r code size speed <<<"$out"
	[ "$code" = 200 ] && [ "$size" = "$SIZE" ] || die "direct download failed: $out"
	b+=("$speed")
done
S=$(printf '%s\n' "${s[@]}" | median)
B=$(printf '%s\n' "${b[@]}" | median)
R=$(calc "$S / $B")
row "download MB/s, $((SIZE >> 20)) MiB, through the gateway vs direct" "$(calc "$S / 1e6")" "$(calc "$B / 1e6")" "$R" ">= 0.80" "$(yesno ge "$R" 0.80)"
mem "$(hwm_kb "$SBX_PID")"
