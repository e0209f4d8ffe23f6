#pragma once
/* Network on request: a command whose sbx_spawn_req.net_allow is set runs
 * in a network namespace of its own whose only way out is the allowlist.
 *
 * Mechanism (sandbox/netns.c), per command, all before the command's
 * first instruction:
 *   1. the server (root) makes a new network namespace, owned by its own
 *      user namespace (the initial one when it runs as root on the host):
 *      nothing in the sandbox (an unprivileged uid in bwrap's user
 *      namespace nested in it, no capabilities) can change its
 *      interfaces, routes or rules;
 *   2. `nft` installs the filter in it (table inet sandboxd, below) while
 *   3. `pasta` (Debian's passt) attaches to it as its user-mode network:
 *      it gives the namespace the host's addresses and routes through a
 *      tap device and forwards connections to the host's sockets, without
 *      gateway mapping (--no-map-gw) and with no port forwarded except the
 *      allowlisted loopback ports (-T); the server waits for its pid file,
 *      which pasta writes once the namespace is configured. pasta runs as
 *      root (Debian 12's drops privileges before joining a namespace; an
 *      unprivileged pasta owning a user namespace would need /dev/net/tun
 *      open to all, 0600 on many hosts), confined by itself: seccomp,
 *      no_new_privs, CAP_SYS_ADMIN + CAP_NET_BIND_SERVICE only, an empty
 *      mount namespace;
 *   4. once both are done, the command (bwrap --share-net) joins the
 *      namespace (the launcher's setns, as root, before it drops to the
 *      tenant's uid).
 * pasta runs in its tenant's helper group (sandbox/cgroup.h, joined
 * before its exec), so what it uses counts against the tenant's budget,
 * not the server's group.
 * When the command is reaped (sbx_backend_reap), pasta is killed and
 * waited for and the namespace's last reference closed: the kernel frees
 * it with its rules. pasta runs with PR_SET_PDEATHSIG, so a server that
 * dies leaves none behind either. A namespace that cannot be made
 * exactly so never runs a command (-SBX_E_BACKEND).
 *
 * What is reachable (the filter, outbound, first match wins):
 *   - the sandbox's own loopback (its own listeners), except the ports
 *     pasta forwards, which are reachable only at the address the
 *     allowlist names;
 *   - the host's loopback only through entries naming 127.0.0.1 or [::1]
 *     (a name resolving to them only with such an entry too: names
 *     reach internal addresses only under a literal entry, netns.c)
 *     with a port or range: pasta forwards
 *     exactly those ports of the namespace's 127.0.0.1 / [::1] to the
 *     host's; every other host loopback port (sandboxd's own included) is
 *     refused. A CIDR such as 0.0.0.0/0 does not include the host's
 *     loopback (the sandbox's 127.0.0.0/8 is its own) nor the host's own
 *     addresses (pasta copies them into the namespace, where they are
 *     the sandbox's own too; those of the host's other interfaces are
 *     reachable when allowlisted);
 *   - never link-local or cloud metadata addresses (169.254.0.0/16,
 *     fe80::/10, fd00:ec2::254, 100.100.100.200, 168.63.129.16), even
 *     inside an allowlisted CIDR;
 *   - TCP to the allowlisted destinations and ports; nothing else: no
 *     UDP (pasta --no-udp, and the filter), no ICMP (--no-icmp), no DNS.
 *     Refused TCP connections get a reset, others an ICMP
 *     administratively-prohibited, so clients fail at once.
 * Names: the server resolves the allowlist's names when the command
 * starts (getaddrinfo on a setup thread, sandbox/netpool.h, at most
 * sbx_net_limits.resolve_ms for all of them together) and writes them
 * into the sandbox's /etc/hosts; the sandbox has no resolver (empty
 * resolv.conf), so DNS cannot carry data out. A name that does not
 * resolve in time is left out (its connections fail), and so are its
 * loopback, private, CGNAT, link-local and metadata addresses unless a
 * literal entry covers them (the name's owner chooses its addresses).
 * Never reachable either: the IPv6 forms of IPv4 addresses
 * (::ffff:0:0/96, NAT64), which pasta's IPv6 sockets reach as IPv4.
 *
 * A command with network costs about 60 ms more to start (measured on a
 * busy 2-core VM: pasta ~45 ms, nft ~10 ms, run side by side) and one
 * pasta process while it runs (test_network prints the numbers).
 */
#include <stddef.h>
#include <stdint.h>

#define SBX_NET_SPEC_MAX 4096	   /* bytes of an allowlist */
#define SBX_NET_ENTRIES_MAX 64	   /* entries of an allowlist */
#define SBX_NET_LOOP_PORTS_MAX 256 /* host loopback ports forwarded per command */
#define SBX_NET_RESOLVE_MS 2000	   /* all names of one command together (the default) */

/* What one command's namespace allows besides the allowlist (0 in a
 * field: its default). New TCP connections out of the sandbox (to the
 * host's loopback ports or through pasta) are refused with a reset
 * beyond conn_max open at once or beyond conn_per_s per second (burst:
 * twice that): pasta makes one host socket per connection, and each
 * closed one lingers in TIME_WAIT on the host for a minute, so a command
 * churning connections would otherwise use up the host's ports to that
 * destination. resolve_ms bounds the names' resolution. */
struct sbx_net_limits {
	unsigned conn_max;   /* default SBX_NET_CONN_MAX */
	unsigned conn_per_s; /* default SBX_NET_CONN_PER_S */
	unsigned resolve_ms; /* default SBX_NET_RESOLVE_MS */
};
#define SBX_NET_CONN_MAX 64
#define SBX_NET_CONN_PER_S 10

/* One allowlist entry. family is AF_INET or AF_INET6 with addr (network
 * byte order) and prefix, or 0 for a DNS name (name, resolved at start).
 * Ports lo..hi inclusive; 1..65535 when the entry names none. */
struct sbx_net_entry {
	int family;
	uint8_t addr[16];
	unsigned prefix;
	char *name;
	uint16_t lo, hi;
	int has_port;
};

struct sbx_net_allow {
	struct sbx_net_entry *e;
	size_t n;
};

/* The allowlist grammar: entries separated by commas (spaces around
 * entries allowed); each `HOST`, `HOST:PORT` or `HOST:LO-HI`, HOST being
 * a DNS name, an IPv4 address or CIDR, or an IPv6 address or CIDR in
 * brackets; no port means every port. Refused besides bad syntax: CIDRs
 * with host bits set, loopback other than 127.0.0.1 / [::1] with a port
 * (see above), link-local and metadata addresses, unspecified addresses,
 * more than SBX_NET_ENTRIES_MAX entries or SBX_NET_LOOP_PORTS_MAX
 * loopback ports. Returns 0 or -EINVAL with a one-line reason in err
 * (naming the entry). Thread-safe; no allocation kept. */
int sbx_net_allow_check(const char *spec, char *err, size_t errsz);

/* As sbx_net_allow_check, filling *out (owned by the caller, freed with
 * sbx_net_allow_clear; untouched on failure). */
int sbx_net_allow_parse(const char *spec, struct sbx_net_allow *out, char *err, size_t errsz);
void sbx_net_allow_clear(struct sbx_net_allow *a);

/* 0 when network on request works on this host: the server is root,
 * pasta and nft are installed, /dev/net/tun exists, and a probe
 * namespace with a filter and pasta attached could be made. The probe
 * runs once (the first call; the bwrap backend makes it at start) and is
 * cached. msg gets a one-line description either way, e.g. "pasta +
 * nftables (TCP to the allowlist only)" or "unavailable: /usr/sbin/nft
 * missing (packages passt, nftables)". Thread-safe. Errors:
 * -SBX_E_BACKEND. */
int sbx_net_health(char *msg, size_t msgsz);
