#!/usr/bin/env bash
# Syscalls per request of the server (strace -c -f attached to the running
# sandboxd), the noise-free evidence behind the P5 and P8 figures:
#   bench/syscalls.sh p5   # 2,000 GET /fs/read of a 4 KiB file, c1 and c64; CPU per request vs nginx
#   bench/syscalls.sh p8   # one exec printing 200 MB on stdout
#   bench/syscalls.sh p7   # one 64 MiB PUT /fs/write_stream
#   bench/syscalls.sh p1   # 100 local execs of true: the server's own syscalls
#   bench/syscalls.sh p2   # 100 bwrap execs of true: the server's own syscalls
#   bench/syscalls.sh p3   # 3,200 local execs of true at c64: server CPU per exec (perf stat)
#   bench/syscalls.sh p3q  # P3's own load (default limits, 429s retried): CPU per answered exec, 429s,
#                          #   with the exec admission queue off (tenant-exec-queue=0) and on (default)
#   bench/syscalls.sh p9   # 300 local execs of true, c1, without and with 1,000 SSE watchers (perf stat)
#   bench/syscalls.sh p5 --set connection-memory-bytes=32768   # server options
# strace slows the server; only the counts mean anything, not the times.
GOAL=SYS
WHAT=${1:-p5}; shift || true
SETS=("$@") # --set k=v ... for the server
set --
source "$(dirname "$0")/lib.sh"
build_all
need strace strace

strace_run() { # strace_run OUT CMD...: counts over the CMD's duration
	local out=$1; shift
	strace -c -f -q -o "$out" -p "$SBX_PID" &
	local st=$!
	sleep 1
	"$@"
	sleep 0.5
	kill -INT "$st"; wait "$st" 2>/dev/null || true
}

per() { # per FILE N: syscall name, calls, calls per N
	awk -v n="$2" '$1 ~ /^[0-9.]+$/ && NF>=5 { c=$4; name=$NF; if (NF==6) name=$6; if (name == "total") next; printf "%-16s %9d %8.2f\n", name, c, c/n; tot+=c }
	END { printf "%-16s %9d %8.2f\n", "total", tot, tot/n }' "$1"
}

mktmp W
case $WHAT in
p5)
	start_sandboxd --backend local ${SETS[@]+"${SETS[@]}"}
	head -c 4096 /dev/zero | tr '\0' 'a' >"$SBX_SESSION_DIR/f4k.txt"
	chown 100000:100000 "$SBX_SESSION_DIR/f4k.txt" 2>/dev/null || true
	"$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -m GET -u "/fs/read?path=f4k.txt" -c 1 -n 200 >/dev/null
	# CPU per request without strace (perf stat task-clock, every thread;
	# the audit writer apart), sandboxd and then nginx serving the same
	# file under the same load: 20,032 requests at c64 each, three rounds
	# interleaved. task-clock counts the kernel's TCP work too (the
	# loopback delivery to the client is charged to the sender).
	need perf linux-perf
	start_nginx "$SBX_SESSION_DIR" on
	NGX_W=$(pgrep -P "$NGX_PID" | paste -sd,)
	p5_cpu() { # p5_cpu LABEL PIDS PORT URL [AUTH]
		"$LOADGEN" req -p "$3" ${5:+-a "$5"} -m GET -u "$4" -c 64 -n 20 >/dev/null
		perf stat --per-thread -x, -e task-clock,raw_syscalls:sys_enter -o "$W/cpu" -p "$2" &
		local st=$!
		sleep 0.5
		"$LOADGEN" req -p "$3" ${5:+-a "$5"} -m GET -u "$4" -c 64 -n 313 >"$W/lg"
		kill -INT "$st"; wait "$st" 2>/dev/null || true
		awk -F, -v l="$1" -v lg="$(cat "$W/lg")" '$2 ~ /^[0-9.]+$/ { v[$4] += $2; if ($1 ~ /^sbx-audit/) a[$4] += $2 }
		END { printf "== %-8s c64: %.1f us of CPU per request (audit writer %.1f), %.2f syscalls per request (%s)\n", l,
			v["task-clock"] * 1000 / 20032, a["task-clock"] * 1000 / 20032, v["raw_syscalls:sys_enter"] / 20032, lg }' "$W/cpu"
	}
	for r in 1 2 3; do
		p5_cpu sandboxd "$SBX_PID" "$SBX_PORT" "/fs/read?path=f4k.txt" "$SBX_AUTH"
		p5_cpu nginx "$NGX_W" "$NGX_PORT" /f4k.txt
	done
	for c in 1 64; do
		n=$((2000 / c))
		strace_run "$W/c$c" "$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -m GET -u "/fs/read?path=f4k.txt" -c "$c" -n "$n"
		echo "== GET /fs/read 4 KiB, c$c, $((n * c)) requests: syscall calls per-request"
		per "$W/c$c" $((n * c))
	done
	;;
p8)
	start_sandboxd --backend local ${SETS[@]+"${SETS[@]}"}
	B='{"command":"dd if=/dev/zero bs=64k count=3052 status=none","timeout_s":900}'
	strace_run "$W/p8" sbx_curl -o /dev/null -X POST "$SBX_URL/exec" -d "$B"
	echo "== exec of 200 MB (3052 x 64 KiB) stdout: syscall calls per-64KiB-block"
	per "$W/p8" 3052
	;;
p1 | p2)
	# Server threads only (each tid attached, children not followed):
	# what the server itself does per exec, the command excluded (p1:
	# local backend, p2: bwrap).
	if [ "$WHAT" = p1 ]; then BK=local; else BK=bwrap; fi
	start_sandboxd --backend $BK ${SETS[@]+"${SETS[@]}"}
	"$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 1 -n 5 >/dev/null
	tids=(); for t in /proc/"$SBX_PID"/task/*; do tids+=(-p "${t##*/}"); done
	strace -c -w -q -o "$W/p2" "${tids[@]}" &
	st=$!; sleep 1
	"$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 1 -n 100
	sleep 0.5; kill -INT "$st"; wait "$st" 2>/dev/null || true
	echo "== 100 POST /exec true, $BK backend, c1: server-thread syscall calls per exec (strace -w: wall time in each)"
	head -22 "$W/p2"
	per "$W/p2" 100
	# SQLite transactions per exec, from the WAL-index locks: every
	# transaction takes a read mark (F_RDLCK on bytes 123..127 of the
	# -shm file), a write transaction also the write lock (byte 120).
	strace -q -e trace=fcntl -o "$W/locks" "${tids[@]}" &
	st=$!; sleep 1
	"$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 1 -n 100 >/dev/null
	sleep 0.5; kill -INT "$st"; wait "$st" 2>/dev/null || true
	shm=$(find "/proc/$SBX_PID/fd" -lname '*-shm' -printf '%f\n' | head -1)
	rd=$(grep -c "fcntl($shm, F_SETLK, {l_type=F_RDLCK, l_whence=SEEK_SET, l_start=12[3-7]" "$W/locks" || true)
	wr=$(grep -c "fcntl($shm, F_SETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, l_start=120" "$W/locks" || true)
	echo "== SQLite transactions per exec (the audit writer's batches included): $(calc "($rd - $wr) / 100") read, $(calc "$wr / 100") write"
	# CPU and thread hand-offs per exec (server threads, commands not
	# counted): a context switch is a thread going to sleep and being
	# woken, so their count per exec follows the hand-offs between threads.
	if command -v perf >/dev/null; then
		perf stat --no-inherit -x, -e task-clock,context-switches -o "$W/cs" -p "$SBX_PID" &
		st=$!; sleep 1
		"$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 1 -n 300 >/dev/null
		kill -INT "$st"; wait "$st" 2>/dev/null || true
		awk -F, '$1 ~ /^[0-9.]+$/ { v[$3] = $1 }
		END { printf "== 300 more, server threads per exec (perf stat): task-clock %.0f us, context switches %.2f\n", v["task-clock"] * 1000 / 300, v["context-switches"] / 300 }' "$W/cs"
	fi
	;;
p3)
	# Server threads only (perf stat --no-inherit: the commands are not
	# counted): CPU and context switches per exec at c64, all threads and
	# the runner threads (named runner-N) apart, with a tenant limit that
	# admits all 64 (no 429s in the count); then the runner's gauges.
	need perf linux-perf
	start_sandboxd --backend local --set tenant-max-execs=64 ${SETS[@]+"${SETS[@]}"}
	"$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 64 -n 5 >/dev/null
	perf stat --no-inherit --per-thread -x, -e task-clock,context-switches -o "$W/p3" -p "$SBX_PID" &
	st=$!; sleep 1
	"$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 64 -n 50
	kill -INT "$st"; wait "$st" 2>/dev/null || true
	echo "== 3,200 POST /exec true, local backend, c64: server threads per exec (task-clock in ms)"
	awk -F, '$2 ~ /^[0-9.]+$/ { all[$4] += $2; if ($1 ~ /^runner/) run[$4] += $2 }
	END { for (e in all) printf "%-18s all threads %8.4f  runner threads %8.4f\n", e, all[e] / 3200, run[e] / 3200 }' "$W/p3"
	sort -t, -k2 -g -r "$W/p3" | grep task-clock | head -8
	sbx_curl "$SBX_URL/metrics" | grep '^sandboxd_runner_' || true
	;;
p3q)
	# P3's own load as bench/p3 makes it (64 clients, the default limits:
	# max_execs 32, a 429 retried after 10 ms), 3,200 requests, twice:
	# the admission queue off (every request past 32 running is a 429)
	# and on (the default: it waits for a slot). Server threads only
	# (perf stat --no-inherit: the commands are not counted); CPU per
	# answered exec (429s included in the cost, not in the count).
	need perf linux-perf
	for q in 0 default; do
		qs=(); [ "$q" = 0 ] && qs=(--set tenant-exec-queue=0)
		start_sandboxd --backend local ${qs[@]+"${qs[@]}"} ${SETS[@]+"${SETS[@]}"}
		"$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 64 -n 5 -R 10 >/dev/null
		perf stat --no-inherit -x, -e task-clock,context-switches -o "$W/p3q" -p "$SBX_PID" &
		st=$!; sleep 1
		l=$("$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 64 -n 50 -R 10)
		kill -INT "$st"; wait "$st" 2>/dev/null || true
		ok=$(kv ok "$l")
		echo "== tenant-exec-queue=$q: $l"
		awk -F, -v ok="$ok" -v r429="$(kv r429 "$l")" '$1 ~ /^[0-9.]+$/ { v[$3] = $1 }
		END { printf "   answered %d, 429s %d (%.2f per answered); server task-clock %.4f ms and %.2f context switches per answered exec\n",
			ok, r429, r429 / ok, v["task-clock"] / ok, v["context-switches"] / ok }' "$W/p3q"
		sbx_curl "$SBX_URL/metrics" | grep -E '^sandboxd_exec_queue_(wait_seconds_(sum|count)|refused_total)' || true
		stop_pid "$SBX_PID"
	done
	;;
p9)
	# What an open connection costs each exec: server CPU and syscalls
	# (all threads, commands not counted) per local exec of true at c1,
	# with no connection but one running exec's, then with 1,000 SSE
	# watchers of it (P9's set-up; heartbeats off the count: 10 min).
	need perf linux-perf
	start_sandboxd --backend local --set heartbeat-ms=600000 --set max-connections-per-ip=8192 \
		--set max-connections=8192 ${SETS[@]+"${SETS[@]}"}
	bg "$LOADGEN" hold -p "$SBX_PORT" -a "$SBX_AUTH" -i w1 -b "sleep 900" -d 1200 -r "$W/held" >&2
	for i in $(seq 1 100); do
		sbx_curl "$SBX_URL/exec/w1" | grep -q '"state":"running"' && break
		sleep 0.1
	done
	p9_count() { # p9_count LABEL
		"$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 1 -n 5 >/dev/null
		perf stat --no-inherit -x, -e task-clock,raw_syscalls:sys_enter -o "$W/p9" -p "$SBX_PID" &
		st=$!
		perf stat -x, -e task-clock -o "$W/p9i" -p "$SBX_PID" &
		sti=$!; sleep 1
		"$LOADGEN" req -p "$SBX_PORT" -a "$SBX_AUTH" -u /exec -b "$EXEC_TRUE" -c 1 -n 300 >/dev/null
		kill -INT "$st" "$sti"; wait "$st" "$sti" 2>/dev/null || true
		awk -F, -v l="$1" -v f="$W/p9i" '$1 ~ /^[0-9.]+$/ { v[$3] = $1 }
		END { getline line < f; while ((getline line < f) > 0) { split(line, a, ","); if (a[3] == "task-clock") inh = a[1] }
			printf "%-14s server threads %.1f us/exec, with the children until exec and the commands %.1f us/exec, syscalls (server threads) %.1f/exec\n", l,
			v["task-clock"] * 1000 / 300, inh * 1000 / 300, v["raw_syscalls:sys_enter"] / 300 }' "$W/p9"
	}
	echo "== 300 POST /exec true, local backend, c1, task-clock (perf stat)"
	p9_count "no watcher"
	bg "$LOADGEN" sse -p "$SBX_PORT" -a "$SBX_AUTH" -i w1 -c 1000 -d 900 -r "$W/ready" >/dev/null
	for i in $(seq 1 600); do [ -s "$W/ready" ] && break; sleep 0.1; done
	[ -s "$W/ready" ] || die "the watchers did not connect"
	p9_count "1000 watchers"
	;;
p7)
	start_sandboxd --backend local ${SETS[@]+"${SETS[@]}"}
	head -c $((64 << 20)) /dev/zero >"$W/src.bin"
	strace_run "$W/p7" sbx_curl -o /dev/null -T "$W/src.bin" "$SBX_URL/fs/write_stream?path=up.bin"
	echo "== upload of 64 MiB (PUT /fs/write_stream): syscall calls per-MiB"
	per "$W/p7" 64
	;;
esac
