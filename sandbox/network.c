/* The allowlist: its grammar (the egress rules' now, sandbox/egress/
 * rules.h), and what it becomes in a command's network namespace of the
 * pasta path (the nft ruleset and pasta's loopback forwards). No system
 * state here; sandbox/netns.c applies it. */
#include "sandbox/network.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/xmalloc.h"
#include "sandbox/egress/classes.h"
#include "sandbox/egress/rule.h"
#include "sandbox/netplan.h"

_Static_assert(SBX_NET_SPEC_MAX == SBX_EGRESS_SPEC_MAX && SBX_NET_ENTRIES_MAX == SBX_EGRESS_RULES_MAX,
	       "the allowlist is the egress rules' grammar");

static const uint8_t lo4[16] = {127, 0, 0, 1};
static const uint8_t lo6[16] = {[15] = 1};

static size_t addr_len(int family)
{
	return family == AF_INET ? 4 : 16;
}

bool sbx_net_is_never(int family, const uint8_t *addr, unsigned prefix)
{
	char text[64];
	bool inside = false;

	return sbx_egress_never_named(family, addr, prefix, &inside, text, sizeof(text)) && inside;
}

bool sbx_net_is_internal(int family, const uint8_t *addr)
{
	return sbx_egress_addr_internal(family, addr);
}

bool sbx_net_covers(const struct sbx_net_entry *e, int family, const uint8_t *addr)
{
	return e->family && e->family == family && sbx_egress_prefix_eq(addr, e->addr, e->prefix);
}

bool sbx_net_is_host_loopback(int family, const uint8_t *addr, unsigned prefix)
{
	if (family == AF_INET)
		return prefix == 32 && memcmp(addr, lo4, 4) == 0;
	return family == AF_INET6 && prefix == 128 && memcmp(addr, lo6, 16) == 0;
}

void sbx_net_allow_clear(struct sbx_net_allow *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->n; i++)
		free(a->e[i].name);
	free(a->e);
	a->e = NULL;
	a->n = 0;
}

static size_t loop_ports(const struct sbx_net_entry *e)
{
	return sbx_net_is_host_loopback(e->family, e->addr, e->prefix) ? (size_t)(e->hi - e->lo) + 1 : 0;
}

/* The egress rules' grammar, but an allowlist of no rules ("", or
 * "none" with spaces around it) is refused: a policy's "none" means no
 * network at all (routes/policy.c), and an empty value is a mistake, not
 * a network that reaches nothing. */
int sbx_net_allow_check(const char *spec, char *err, size_t errsz)
{
	struct sbx_egress_rules *r = NULL;
	int rc = sbx_egress_rules_parse(spec, &r, err, errsz);

	if (rc == 0 && sbx_egress_rules_count(r) == 0) {
		snprintf(err, errsz, "the allowlist is empty (\"none\": no network)");
		rc = -EINVAL;
	}
	sbx_egress_rules_unref(&r);
	return rc;
}

/* TEMPORARY, until the egress gateway replaces pasta (issue 29): the
 * pasta path resolves names once and filters by address, so it cannot
 * honour a deny rule (refused here, at the command's start) nor match a
 * wildcard or `*` (left out, as a name that does not resolve is: their
 * connections fail). Everything else keeps its old meaning. */
static int to_entry(const struct sbx_egress_rule *e, struct sbx_net_entry *d, char *err, size_t errsz)
{
	if (e->deny) {
		snprintf(err, errsz,
			 "'%.*s': deny rules need the egress gateway, not yet on this host's network path",
			 e->textlen, e->text);
		return -EINVAL;
	}
	if (e->kind == SBX_EGRESS_WILD || e->kind == SBX_EGRESS_ANY)
		return 0;
	memset(d, 0, sizeof(*d));
	if (e->kind == SBX_EGRESS_NAME) {
		d->name = xstrndup(e->name, e->namelen);
	} else {
		d->family = e->family;
		memcpy(d->addr, e->addr, addr_len(e->family));
		d->prefix = e->prefix;
	}
	d->lo = e->lo;
	d->hi = e->hi;
	d->has_port = e->has_port;
	return 1;
}

int sbx_net_allow_parse(const char *spec, struct sbx_net_allow *out, char *err, size_t errsz)
{
	struct sbx_net_allow a = {0};
	struct sbx_egress_rules *r = NULL;
	int rc = sbx_egress_rules_parse(spec, &r, err, errsz);

	if (rc < 0)
		return rc;
	a.e = xcalloc(SBX_NET_ENTRIES_MAX, sizeof(*a.e));
	for (size_t i = 0; i < sbx_egress_rules_count(r) && rc >= 0; i++) {
		rc = to_entry(sbx_egress_rules_at(r, i), &a.e[a.n], err, errsz);
		a.n += rc > 0;
	}
	sbx_egress_rules_unref(&r);
	if (rc < 0 || !out) {
		sbx_net_allow_clear(&a);
		return rc < 0 ? rc : 0;
	}
	*out = a;
	return 0;
}

/* ---- what the allowlist becomes ---- */

static void add_addr(struct buf *b, int family, const uint8_t *addr, unsigned prefix)
{
	char text[INET6_ADDRSTRLEN];

	inet_ntop(family, addr, text, sizeof(text));
	if (prefix == addr_len(family) * 8)
		buf_appendf(b, "%s", text);
	else
		buf_appendf(b, "%s/%u", text, prefix);
}

static void add_ports(struct buf *b, const struct sbx_net_entry *e)
{
	if (e->lo == e->hi)
		buf_appendf(b, "%u", e->lo);
	else
		buf_appendf(b, "%u-%u", e->lo, e->hi);
}

static int by_lo(const void *a, const void *b)
{
	const struct sbx_net_entry *x = a, *y = b;

	return (int)x->lo - (int)y->lo;
}

/* "8080,9000-9010": the ports of the host loopback entries (of family,
 * or any), sorted and merged: pasta refuses overlapping ports, and an
 * allowlist may name one port twice (127.0.0.1:80 and [::1]:80). */
static void loop_port_list(struct buf *b, const struct sbx_net_entry *d, size_t n, int family)
{
	struct sbx_net_entry *r = xcalloc(n ? n : 1, sizeof(*r));
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		if (loop_ports(&d[i]) && (!family || d[i].family == family))
			r[k++] = d[i];
	}
	qsort(r, k, sizeof(*r), by_lo);
	for (size_t i = 0; i < k;) {
		struct sbx_net_entry run = r[i];

		for (i++; i < k && r[i].lo <= run.hi + 1; i++) {
			if (r[i].hi > run.hi)
				run.hi = r[i].hi;
		}
		if (b->len)
			buf_appendf(b, ",");
		add_ports(b, &run);
	}
	free(r);
}

int sbx_net_pasta_ports(const struct sbx_net_entry *d, size_t n, struct buf *out)
{
	loop_port_list(out, d, n, 0);
	if (!out->len)
		buf_appendf(out, "none");
	return 0;
}

static void loopback_rules(struct buf *b, const struct sbx_net_entry *d, size_t n)
{
	struct buf all, v4, v6;

	buf_init(&all, 1 << 16);
	buf_init(&v4, 1 << 16);
	buf_init(&v6, 1 << 16);
	loop_port_list(&all, d, n, 0);
	loop_port_list(&v4, d, n, AF_INET);
	loop_port_list(&v6, d, n, AF_INET6);
	/* pasta listens on both 127.0.0.1 and [::1] for each forwarded port;
	 * only the family the allowlist names may use it. */
	if (v4.len)
		buf_appendf(b, "\t\toif lo ip daddr 127.0.0.1 tcp dport { %s } accept\n", buf_cstr(&v4));
	if (v6.len)
		buf_appendf(b, "\t\toif lo ip6 daddr ::1 tcp dport { %s } accept\n", buf_cstr(&v6));
	if (all.len)
		buf_appendf(b, "\t\toif lo tcp dport { %s } reject with tcp reset\n", buf_cstr(&all));
	buf_appendf(b, "\t\toif lo accept\n");
	buf_free(&all);
	buf_free(&v4);
	buf_free(&v6);
}

static void never_rules(struct buf *b)
{
	char text[64];
	int family;

	for (size_t i = 0; sbx_egress_never_named_at(i, &family, text, sizeof(text)); i++)
		buf_appendf(b,
			    "\t\t%s daddr %s meta l4proto tcp reject with tcp reset\n"
			    "\t\t%s daddr %s reject with icmpx type admin-prohibited\n",
			    family == AF_INET ? "ip" : "ip6", text, family == AF_INET ? "ip" : "ip6", text);
}

/* New TCP connections that leave the namespace (through pasta's tap, or
 * to a forwarded host loopback port) are marked, then bounded: at most
 * conn_max open (conntrack counts live ones, not TIME_WAIT) and
 * conn_per_s new per second. The sandbox's own loopback is not counted.
 * Nothing in the sandbox can set a mark (no CAP_NET_ADMIN). */
static void limit_rules(struct buf *b, const struct sbx_net_entry *d, size_t n,
			const struct sbx_net_limits *lim)
{
	struct buf ports;
	unsigned max = lim && lim->conn_max ? lim->conn_max : SBX_NET_CONN_MAX;
	unsigned rate = lim && lim->conn_per_s ? lim->conn_per_s : SBX_NET_CONN_PER_S;

	buf_init(&ports, 1 << 16);
	loop_port_list(&ports, d, n, 0);
	buf_appendf(b, "\t\tct state new oif != lo meta l4proto tcp meta mark set 0x5bd\n");
	if (ports.len)
		buf_appendf(b, "\t\tct state new oif lo tcp dport { %s } meta mark set 0x5bd\n",
			    buf_cstr(&ports));
	buf_appendf(b,
		    "\t\tct state new meta mark 0x5bd ct count over %u reject with tcp reset\n"
		    "\t\tct state new meta mark 0x5bd limit rate over %u/second burst %u packets reject with "
		    "tcp reset\n",
		    max, rate, rate * 2);
	buf_free(&ports);
}

int sbx_net_ruleset(const struct sbx_net_entry *d, size_t n, const struct sbx_net_limits *lim,
		    struct buf *out)
{
	buf_appendf(out, "table inet sandboxd {\n\tchain output {\n"
			 "\t\ttype filter hook output priority 0; policy drop;\n");
	limit_rules(out, d, n, lim);
	loopback_rules(out, d, n);
	never_rules(out);
	buf_appendf(out, "\t\tct state established,related accept\n"
			 "\t\ticmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } "
			 "accept\n");
	for (size_t i = 0; i < n; i++) {
		if (!d[i].family || loop_ports(&d[i]))
			continue;
		buf_appendf(out, "\t\t%s daddr ", d[i].family == AF_INET ? "ip" : "ip6");
		add_addr(out, d[i].family, d[i].addr, d[i].prefix);
		buf_appendf(out, " tcp dport ");
		add_ports(out, &d[i]);
		buf_appendf(out, " accept\n");
	}
	buf_appendf(out, "\t\tmeta l4proto tcp reject with tcp reset\n"
			 "\t\treject with icmpx type admin-prohibited\n\t}\n"
			 "\tchain input {\n"
			 "\t\ttype filter hook input priority 0; policy drop;\n"
			 "\t\tiif lo accept\n"
			 "\t\tct state established,related accept\n"
			 "\t\ticmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-advert } "
			 "accept\n\t}\n}\n");
	return 0;
}
