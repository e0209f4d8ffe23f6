#!/usr/bin/env bash
# P2: exec round trip, bwrap backend, 1 client: p50 <= bare bwrap spawn +
# 0.5 ms. The bare spawn is hyperfine -N of the bwrap line that
# sandbox/backend_bwrap.c builds (same flags, a generated /etc, the same
# uid as the tenant's sandbox), without --seccomp (it needs the server's
# BPF program on fd 3; loading it costs microseconds).
GOAL=P2
source "$(dirname "$0")/lib.sh"
build_all
need hyperfine hyperfine
need bwrap bubblewrap
need setpriv util-linux

if [ "$SMOKE" = 1 ]; then ROUNDS=1 N=10 HR=10 HW=2; else ROUNDS=3 N=200 HR=200 HW=20; fi
start_sandboxd --backend bwrap
l=$(sbx_curl -X POST "$SBX_URL/exec" -d '{"command":"id -u"}')
SUID=$(sed -n 's/.*"stdout":"\([0-9]*\)\\n".*/\1/p' <<<"$l")
[ -n "$SUID" ] || die "exec under bwrap failed: $l"
SGID=$SUID
log "sandbox uid $SUID"

# The bare bwrap line (backend_bwrap.c build_head + bw_prepare).
mktmp T
chmod 711 "$T"
E=$T/etc-$SUID-$SGID
mkdir -p "$E/alternatives" "$T/ws"
printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:%s:%s:sandbox:/workspace:/bin/sh\n' "$SUID" "$SGID" >"$E/passwd"
printf 'root:x:0:\nsandbox:x:%s:\n' "$SGID" >"$E/group"
printf '127.0.0.1\tlocalhost\n' >"$E/hosts"
: >"$E/resolv.conf"; : >"$E/ld.so.cache"
printf 'passwd: files\ngroup: files\nhosts: files\n' >"$E/nsswitch.conf"
echo sandbox >"$E/hostname"
chmod -R a+rX "$E"
chown "$SUID:$SGID" "$T/ws"
RD=""
for d in bin sbin lib lib64 lib32 libx32; do
	if [ -L "/$d" ]; then
		t=$(readlink "/$d")
		case $t in usr/* | /usr/*) RD="$RD --symlink $t /$d" ;; esac
	elif [ -d "/$d" ]; then
		RD="$RD --ro-bind /$d /$d"
	fi
done
BW="bwrap --unshare-all --unshare-user --disable-userns --die-with-parent --new-session --cap-drop ALL --clearenv --ro-bind /usr /usr$RD --ro-bind $E /etc --ro-bind-try /etc/ld.so.cache /etc/ld.so.cache --ro-bind-try /etc/alternatives /etc/alternatives --proc /proc --dev /dev --size 268435456 --tmpfs /tmp --bind $T/ws /workspace --chdir /workspace --setenv PATH /usr/local/bin:/usr/bin:/bin --setenv HOME /workspace --setenv LANG C.UTF-8 --setenv USER sandbox /bin/sh -c true"
HF_PREFIX=(setpriv --reuid="$SUID" --regid="$SGID" --clear-groups)
# shellcheck disable=SC2086
setpriv --reuid="$SUID" --regid="$SGID" --clear-groups $BW || die "the bare bwrap line does not run here"

cmdline "$SBX_CMD"
cmdline "loadgen req -c 1 -n $N -w 5 -u /exec -b '$EXEC_TRUE'  x $ROUNDS rounds"
cmdline "${HF_PREFIX[*]} hyperfine -N --warmup $HW --runs $HR '$BW'  x $ROUNDS rounds"
s=() b=()
for r in $(seq 1 "$ROUNDS"); do
	l=$(exec_lat "$N"); log "round $r sandboxd(bwrap): $l"
	[ "$(kv ok "$l")" -gt 0 ] || die "no exec succeeded"
	s+=("$(kv p50_ms "$l")")
	h=$(hyperfine_median --warmup "$HW" --runs "$HR" "$BW"); log "round $r hyperfine bwrap median: $h s"
	b+=("$(calc "$h * 1000")")
done
S=$(printf '%s\n' "${s[@]}" | median)
B=$(printf '%s\n' "${b[@]}" | median)
D=$(calc "$S - $B")
row "exec p50 ms (bwrap, c1) vs hyperfine of the bwrap line" "$S" "$B" "+$D ms ($(calc "$S / $B")x)" "<= +0.5 ms" "$(yesno le "$D" 0.5)"
mem "$(hwm_kb "$SBX_PID")"
