# The egress benchmarks' world (sourced after lib.sh, not run): the same
# as tests/integration/it_egress.h's, so that nothing a benchmark does
# leaves the machine. netns_enter re-runs the calling script in a network
# and mount namespace of its own (the server it starts then connects out
# from there); netns_world then joins it by a veth pair to an upstream
# namespace (held by a `sleep` of ours) where
# tests/integration/egress_upstream.py serves allowed.test on
# 198.51.100.10 (HTTP 80, HTTPS 443 with a test CA made here, GET
# /size/N: N bytes), checks that no route leads anywhere else, and
# bind-mounts a hosts file naming it over /etc/hosts.
#
#   netns_enter "$@"   # first, after build_all and `need`s (no network inside)
#   netns_world        # sets NETNS_DIR (ca.pem there), NETNS_HOLDER, NETNS_UPSTREAM

NETNS_TEST4=198.51.100.1
NETNS_ALLOWED=198.51.100.10

netns_enter() {
	[ "${SBX_NETNS_IN:-}" = 1 ] && return 0
	[ "$(id -u)" = 0 ] || die "the egress benchmarks need root (network namespaces)"
	need nsenter util-linux
	need python3 python3
	need openssl openssl
	# shellcheck disable=SC2093 # the script goes on in the namespaces
	exec unshare --net --mount --propagation private env SBX_NETNS_IN=1 BENCH_BUILT=1 "$0" "$@"
}

# netns_routes_ok [nsenter ...]: every route a table local one, the veth
# subnet or its link-local; no default.
netns_routes_ok() {
	local fam
	for fam in 4 6; do
		"$@" ip -j -"$fam" route show table all | python3 -c '
import json, sys
ok = {"198.51.100.0/24", "2001:db8:5b::/64", "fe80::/64"}
bad = [r for r in json.load(sys.stdin) if r.get("dst") == "default" or
       (r.get("table") != "local" and r.get("dst") not in ok)]
for r in bad:
    print("route out of the benchmark namespaces:", r, file=sys.stderr)
sys.exit(1 if bad else 0)' || return 1
	done
}

netns_world() {
	[ "${SBX_NETNS_IN:-}" = 1 ] || die "netns_world: call netns_enter first"
	mktmp NETNS_DIR
	chmod 755 "$NETNS_DIR"
	ip link set lo up
	bg unshare --net sleep infinity
	NETNS_HOLDER=$LASTPID
	local i
	for i in $(seq 1 100); do
		[ "$(readlink /proc/"$NETNS_HOLDER"/ns/net)" != "$(readlink /proc/self/ns/net)" ] && break
		sleep 0.02
	done
	ip link add eg0 type veth peer name eg1 netns "$NETNS_HOLDER"
	ip addr add "$NETNS_TEST4/24" dev eg0
	ip addr add 2001:db8:5b::1/64 dev eg0 nodad
	ip link set eg0 up
	nsenter -t "$NETNS_HOLDER" -n sh -ec "ip link set lo up; ip addr add $NETNS_ALLOWED/24 dev eg1
		ip addr add 2001:db8:5b::10/64 dev eg1 nodad; ip link set eg1 up"
	netns_routes_ok || die "a route leads out of the benchmark's namespace"
	netns_routes_ok nsenter -t "$NETNS_HOLDER" -n || die "a route leads out of the upstream namespace"

	printf '127.0.0.1 localhost\n::1 localhost\n%s allowed.test\n' "$NETNS_ALLOWED" >"$NETNS_DIR/hosts"
	mount --bind "$NETNS_DIR/hosts" /etc/hosts
	(
		cd "$NETNS_DIR"
		echo "subjectAltName=DNS:allowed.test" >ext.cnf
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem \
			-days 2 -subj /CN=sandboxd-bench-ca -addext basicConstraints=critical,CA:TRUE \
			-addext keyUsage=critical,keyCertSign
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout srv.key -out srv.csr \
			-subj /CN=allowed.test
		openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile ext.cnf \
			-out srv.pem
	) >/dev/null 2>&1 || die "cannot make the test CA"
	bg nsenter -t "$NETNS_HOLDER" -n python3 "$REPO/tests/integration/egress_upstream.py" \
		"$NETNS_DIR" "$NETNS_DIR/srv.pem" "$NETNS_DIR/srv.key" "allowed.test=$NETNS_ALLOWED"
	NETNS_UPSTREAM=$LASTPID
	for i in $(seq 1 200); do
		[ -e "$NETNS_DIR/ready" ] && curl -s -o /dev/null -m 1 "http://allowed.test/" && break
		alive "$NETNS_UPSTREAM"
		sleep 0.05
	done
	curl -sf -o /dev/null -m 2 --cacert "$NETNS_DIR/ca.pem" https://allowed.test/ ||
		die "the upstream does not answer from the benchmark's namespace"
	log "upstream allowed.test at $NETNS_ALLOWED (pid $NETNS_UPSTREAM, namespace of pid $NETNS_HOLDER)"
}
