#!/usr/bin/env bash
# Where the server's CPU goes under one goal's load: perf record (cpu-clock,
# call graphs) of the running sandboxd's threads, then the samples sorted
# into a few named buckets (kernel TCP, scheduling, cgroups, process
# creation, files, SQLite, libmicrohttpd, JSON, malloc, sandboxd's own
# code, ...) and the top symbols. Shares of samples do not depend on the
# machine's load, unlike timings; run it beside the timed goal to say what
# a gap is made of.
#   bench/profile.sh p1    # 1,000 local execs of true, c1
#   bench/profile.sh p2    # 300 bwrap execs of true, c1
#   bench/profile.sh p3    # 6,400 local execs of true, c64 (limit 64: no 429s)
#   bench/profile.sh p5    # 64,000 4 KiB GET /fs/read, c64
#   bench/profile.sh p3 --set runner-threads=1   # server options
# With PROFILE_CHILDREN=1 the commands' processes (from clone to their
# exit) are recorded too; by default only the server's own threads.
GOAL=PROF
WHAT=${1:-p1}; shift || true
SETS=("$@")
set --
source "$(dirname "$0")/lib.sh"
build_all
need perf linux-perf

mktmp W
case $WHAT in
p1 | p2 | p3)
	BK=local; C=1; N=1000
	[ "$WHAT" = p2 ] && { BK=bwrap; N=300; }
	[ "$WHAT" = p3 ] && { C=64; N=100; }
	start_sandboxd --backend $BK --set tenant-max-execs=64 ${SETS[@]+"${SETS[@]}"}
	LOAD=("$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c $C)
	WHATIS="$((C * N)) POST /exec true, $BK backend, c$C"
	;;
p5)
	start_sandboxd --backend local ${SETS[@]+"${SETS[@]}"}
	head -c 4096 /dev/zero | tr '\0' 'a' >"$SBX_SESSION_DIR/f4k.txt"
	chown 100000:100000 "$SBX_SESSION_DIR/f4k.txt" 2>/dev/null || true
	LOAD=("$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -m GET -u "/fs/read?path=f4k.txt" -c 64)
	N=1000
	WHATIS="64,000 GET /fs/read 4 KiB, c64"
	;;
*) die "usage: bench/profile.sh p1|p2|p3|p5 [--set k=v]..." ;;
esac

"${LOAD[@]}" -n 5 >/dev/null 2>&1 || true # warm: policy, groups, caches
INH=(--no-inherit)
[ "${PROFILE_CHILDREN:-0}" = 1 ] && INH=()
perf record -q -e cpu-clock -F 1999 -g "${INH[@]}" -o "$W/perf.data" -p "$SBX_PID" 2>"$W/rec.err" &
st=$!
sleep 1
"${LOAD[@]}" -n "$N" >"$W/load"
kill -INT "$st"; wait "$st" 2>/dev/null || true

echo "== $WHATIS: $(cat "$W/load")"
# Each sample goes to one bucket, from its call chain: the system call it
# is in (named by the kernel's __x64_sys_* / __do_sys_* frame), else the
# user library or binary of its innermost user frame, else what the kernel
# was doing (interrupts, the scheduler after a switch).
perf script -i "$W/perf.data" -F comm,ip,sym,dso 2>/dev/null | awk '
function user_bucket(dso, sym) {
	if (dso ~ /sqlite/) return "SQLite"
	if (dso ~ /microhttpd/) return "libmicrohttpd"
	if (dso ~ /jansson/) return "JSON (jansson)"
	if (dso ~ /jwt|crypto|ssl/) return "JWT / crypto"
	if (dso ~ /libc/) {
		if (sym ~ /malloc|free|_int_|calloc|realloc|arena|tcache/) return "libc malloc"
		if (sym ~ /printf|_IO_|strto|scanf/) return "libc printf/parse"
		return "libc other"
	}
	if (dso ~ /sandboxd/) return "sandboxd own code"
	return "user: " dso
}
function flush() {
	if (n == 0) return
	b = ""
	for (i = 1; i <= n && b == ""; i++) {
		if (dsos[i] ~ /kernel/ && syms[i] ~ /^(__x64_sys_|__do_sys_|__se_sys_)/) {
			nm = syms[i]; sub(/^(__x64_sys_|__do_sys_|__se_sys_)/, "", nm); b = "syscall " nm
		}
	}
	for (i = 1; i <= n && b == ""; i++)
		if (dsos[i] !~ /kernel/)
			b = i == 1 ? user_bucket(dsos[i], syms[i]) : "kernel, called from " syms[i]
	if (b == "") {
		b = "kernel: " syms[1]
		for (i = 1; i <= n; i++)
			if (syms[i] ~ /irq|softirq|apic/) { b = "kernel: interrupts/softirq"; break }
			else if (syms[i] ~ /schedule|ret_from_fork/) { b = "kernel: scheduler/" syms[i]; break }
	}
	tot++; cnt[b]++; thr[comm]++
	n = 0
}
/^[^ \t]/ { flush(); comm = $1; next }
/^[ \t]*$/ { flush(); next }
{ n++; sym = $2; dso = $NF; gsub(/[()]/, "", dso); sub(/\+0x[0-9a-f]+$/, "", sym); syms[n] = sym; dsos[n] = dso }
END {
	flush()
	printf "== share of the server'"'"'s CPU samples (%d) by thread\n", tot
	for (k in thr) printf "%6.1f %%  %s\n", 100 * thr[k] / tot, k | "sort -g -r"
	close("sort -g -r")
	print "== by what the sample was doing (system call, else library, else kernel work)"
	for (k in cnt) if (100 * cnt[k] / tot >= 0.3) printf "%6.1f %%  %s\n", 100 * cnt[k] / tot, k | "sort -g -r"
	close("sort -g -r")
}'
echo "== top symbols (self)"
perf report -i "$W/perf.data" --no-children --stdio -g none --percent-limit 0.4 \
	--sort dso,sym 2>/dev/null | awk '$1 ~ /%$/' | head -25
