/* One egress namespace, made in-process: entered on this thread, its
 * links over rtnetlink (nsprep_link.c), its filter through libnftables,
 * the gateway's sockets made inside, left again. No program is started. */
#include "sandbox/egress/nsprep.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <nftables/libnftables.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/errors.h"
#include "common/log.h"
#include "sandbox/egress/nsprep_impl.h"

#define GW_BACKLOG 128
#define NFT_TEXT_MAX 8192
#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- entering and leaving ---- */

/* Move this thread into target (-1: a new namespace). *self is where it
 * comes back with leave(). 0 or -errno (the thread has not moved). */
static int enter(int target, int *self)
{
	int rc;

	*self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (*self < 0)
		return -errno;
	/* Only leave where this thread can come back: in a user namespace
	 * (the subordinate-range mode) the host's namespace is not ours to
	 * join, and a thread stuck in another one would make every later
	 * namespace, and every socket, there. Joining the one it is in is
	 * that same check. */
	if (setns(*self, CLONE_NEWNET) < 0 ||
	    (target < 0 ? unshare(CLONE_NEWNET) : setns(target, CLONE_NEWNET)) < 0) {
		rc = -errno;
		close(*self);
		return rc;
	}
	return 0;
}

static void leave(int self)
{
	if (setns(self, CLONE_NEWNET) < 0) {
		/* Everything this thread does next would be in the sandbox's. */
		log_msg("error", "cannot return to the server's network namespace: %s", strerror(errno));
		abort();
	}
	close(self);
}

/* ---- the filter ---- */

/* Debian's libnftables is built with xtables support, whose state is
 * process-wide; contexts are made and used one at a time. */
static pthread_mutex_t nft_mu = PTHREAD_MUTEX_INITIALIZER;

/* Run cmds in this thread's namespace: a context made here has its
 * netlink socket here. 0, or -SBX_E_BACKEND with nft's first line. */
static int nft_run(const char *cmds, const char *what, char *err, size_t errsz)
{
	struct nft_ctx *ctx;
	const char *msg;
	int rc = 0;

	pthread_mutex_lock(&nft_mu);
	ctx = nft_ctx_new(NFT_CTX_DEFAULT);
	if (!ctx) {
		snprintf(err, errsz, "%s: libnftables has no context", what);
		rc = -SBX_E_BACKEND;
	} else if (nft_ctx_buffer_output(ctx) || nft_ctx_buffer_error(ctx) ||
		   nft_run_cmd_from_buffer(ctx, cmds)) {
		msg = nft_ctx_get_error_buffer(ctx);
		snprintf(err, errsz, "%s: %.*s", what, (int)strcspn(msg ? msg : "", "\n"), msg ? msg : "");
		rc = -SBX_E_BACKEND;
	}
	if (ctx)
		nft_ctx_free(ctx);
	pthread_mutex_unlock(&nft_mu);
	return rc;
}

#define GW ":" STR(SBX_EGRESS_GW_PORT)

/* nsprep.h says what it does. Output only: nothing comes in from
 * outside (a dummy delivers nothing), and what the sandbox sends itself
 * on lo has passed here once already. The gateway's sockets only accept
 * and answer: their packets belong to connections already seen, which
 * nat does not look at again. */
static void filter_text(struct buf *b, bool v6)
{
	buf_appendf(b, "table inet sandboxd {\n"
		       "set loop4 { type inet_service; flags interval; auto-merge; }\n"
		       "set loop6 { type inet_service; flags interval; auto-merge; }\n"
		       "chain nat_out {\n"
		       "type nat hook output priority -100; policy accept;\n"
		       "ip daddr 127.0.0.1 tcp dport @loop4 redirect to " GW "\n"
		       "ip daddr 127.0.0.0/8 meta l4proto tcp accept\n");
	if (v6)
		buf_appendf(b, "ip6 daddr ::1 tcp dport @loop6 redirect to " GW "\n"
			       "ip6 daddr ::1 meta l4proto tcp accept\n");
	buf_appendf(b, "meta l4proto tcp redirect to " GW "\n"
		       "ip daddr != " SBX_EGRESS_RESOLVER " udp dport 53 dnat ip to " SBX_EGRESS_RESOLVER
		       ":53\n");
	if (v6)
		buf_appendf(b, "ip6 daddr != ::1 udp dport 53 dnat ip6 to [::1]:53\n");
	/* nat routes what it translated again, to lo, but oif stays the
	 * device the hook began with (a test found it): what nat
	 * translated, always to a loopback address here, is let through by
	 * its conntrack status. A sandbox flooding UDP logs 50 a second. */
	buf_appendf(b, "}\n"
		       "chain filter_out {\n"
		       "type filter hook output priority 0; policy drop;\n"
		       "oif lo accept\n"
		       "ct status dnat ip daddr 127.0.0.0/8 accept\n"
		       "ct status dnat ip6 daddr ::1 accept\n"
		       "meta l4proto udp limit rate 50/second log group " STR(
			   SBX_EGRESS_NFLOG_GROUP) " drop\n"
						   "meta l4proto udp drop\n"
						   "meta l4proto tcp reject with tcp reset\n"
						   "reject with icmpx admin-prohibited\n"
						   "}\n}\n");
}

static int load_filter(bool v6, char *err, size_t errsz)
{
	struct buf b;
	int rc;

	buf_init(&b, NFT_TEXT_MAX);
	filter_text(&b, v6);
	rc = nft_run(buf_cstr(&b), "namespace filter", err, errsz);
	buf_free(&b);
	return rc;
}

/* ---- the gateway's sockets ---- */

static const struct gw_socket {
	size_t off; /* in struct sbx_egress_ns */
	int family, type;
	const char *addr;
	uint16_t port;
} gw_sockets[] = {
    {offsetof(struct sbx_egress_ns, tcp4), AF_INET, SOCK_STREAM, "127.0.0.1", SBX_EGRESS_GW_PORT},
    {offsetof(struct sbx_egress_ns, tcp6), AF_INET6, SOCK_STREAM, "::1", SBX_EGRESS_GW_PORT},
    {offsetof(struct sbx_egress_ns, dns4), AF_INET, SOCK_DGRAM, SBX_EGRESS_RESOLVER, 53},
    {offsetof(struct sbx_egress_ns, dns6), AF_INET6, SOCK_DGRAM, "::1", 53},
};

static int open_socket(const struct gw_socket *g)
{
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} u = {0};
	socklen_t len = g->family == AF_INET ? sizeof(u.in) : sizeof(u.in6);
	int one = 1, rc, fd = socket(g->family, g->type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	u.sa.sa_family = (sa_family_t)g->family;
	if (g->family == AF_INET) {
		u.in.sin_port = htons(g->port);
		inet_pton(AF_INET, g->addr, &u.in.sin_addr);
	} else {
		u.in6.sin6_port = htons(g->port);
		inet_pton(AF_INET6, g->addr, &u.in6.sin6_addr);
	}
	if ((g->family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0) ||
	    bind(fd, &u.sa, len) < 0 || (g->type == SOCK_STREAM && listen(fd, GW_BACKLOG) < 0)) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

static int open_sockets(struct sbx_egress_ns *ns, bool v6, char *err, size_t errsz)
{
	for (size_t i = 0; i < sizeof(gw_sockets) / sizeof(gw_sockets[0]); i++) {
		const struct gw_socket *g = &gw_sockets[i];
		int *slot = (int *)((char *)ns + g->off);

		if (g->family == AF_INET6 && !v6)
			continue;
		*slot = open_socket(g);
		if (*slot < 0) {
			snprintf(err, errsz, "gateway socket %s port %u: %s", g->addr, g->port,
				 strerror(-*slot));
			return -SBX_E_BACKEND;
		}
	}
	return 0;
}

/* ---- one namespace ---- */

/* Everything made inside, on this thread, in the new namespace. */
static int fill(struct sbx_egress_ns *ns, bool v6, char *err, size_t errsz)
{
	int rc;

	ns->netns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (ns->netns < 0) {
		snprintf(err, errsz, "namespace fd: %s", strerror(errno));
		return -SBX_E_BACKEND;
	}
	if ((rc = sbx_nsprep_links(v6, err, errsz)) < 0 || (rc = load_filter(v6, err, errsz)) < 0 ||
	    (rc = open_sockets(ns, v6, err, errsz)) < 0)
		return rc;
	ns->nflog = sbx_nsprep_nflog_open(err, errsz);
	return ns->nflog < 0 ? ns->nflog : 0;
}

static void ns_init(struct sbx_egress_ns *ns)
{
	ns->netns = ns->tcp4 = ns->tcp6 = ns->dns4 = ns->dns6 = ns->nflog = -1;
}

int sbx_egress_ns_make(struct sbx_egress_ns *ns, char *err, size_t errsz)
{
	struct sbx_egress_ns n;
	/* The host's answer: a kernel without IPv6 has no such directory. */
	bool v6 = access("/proc/sys/net/ipv6", F_OK) == 0;
	int self, rc;

	ns_init(&n);
	rc = enter(-1, &self);
	if (rc < 0) {
		snprintf(err, errsz, "new network namespace: %s", strerror(-rc));
		return -SBX_E_BACKEND;
	}
	rc = fill(&n, v6, err, errsz);
	leave(self);
	if (rc < 0) {
		sbx_egress_ns_close(&n);
		return rc;
	}
	*ns = n;
	return 0;
}

void sbx_egress_ns_close(struct sbx_egress_ns *ns)
{
	int *fds[] = {&ns->netns, &ns->tcp4, &ns->tcp6, &ns->dns4, &ns->dns6, &ns->nflog};

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
	}
	ns_init(ns);
}

/* ---- the loopback sets ---- */

static void set_text(struct buf *b, const char *set, const uint16_t (*p)[2], size_t n)
{
	buf_appendf(b, "flush set inet sandboxd %s\n", set);
	if (!n)
		return;
	buf_appendf(b, "add element inet sandboxd %s {", set);
	for (size_t i = 0; i < n; i++) {
		buf_appendf(b, i ? ", %u" : " %u", p[i][0]);
		if (p[i][1] != p[i][0])
			buf_appendf(b, "-%u", p[i][1]);
	}
	buf_appendf(b, " }\n");
}

int sbx_egress_ns_loopback(const struct sbx_egress_ns *ns, const uint16_t (*ports4)[2], size_t n4,
			   const uint16_t (*ports6)[2], size_t n6, char *err, size_t errsz)
{
	struct buf b;
	int self, rc;

	/* ", 65535-65535" is 13 bytes a pair: room for all of them. */
	buf_init(&b, (n4 + n6) * 16 + 256);
	set_text(&b, "loop4", ports4, n4);
	set_text(&b, "loop6", ports6, n6);
	rc = enter(ns->netns, &self);
	if (rc < 0) {
		snprintf(err, errsz, "enter the namespace: %s", strerror(-rc));
		rc = -SBX_E_BACKEND;
	} else {
		/* One buffer, one transaction: never a moment with neither set. */
		rc = nft_run(buf_cstr(&b), "loopback ports", err, errsz);
		leave(self);
	}
	buf_free(&b);
	return rc;
}

int sbx_egress_ns_probe(char *msg, size_t msgsz)
{
	struct sbx_egress_ns ns;
	char err[256];

	if (geteuid() != 0) {
		snprintf(msg, msgsz, "unavailable: not root");
		return -SBX_E_BACKEND;
	}
	if (sbx_egress_ns_make(&ns, err, sizeof(err)) < 0) {
		snprintf(msg, msgsz, "unavailable: %s", err);
		return -SBX_E_BACKEND;
	}
	sbx_egress_ns_close(&ns);
	snprintf(msg, msgsz, "in-process namespaces (netlink, libnftables)");
	return 0;
}
