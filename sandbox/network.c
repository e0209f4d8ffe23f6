/* The allowlist: its grammar, and what it becomes in a command's network
 * namespace (the nft ruleset and pasta's loopback forwards). No system
 * state here; sandbox/netns.c applies it. */
#include "sandbox/network.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/xmalloc.h"
#include "sandbox/netplan.h"

struct cidr {
	int family;
	uint8_t addr[16];
	unsigned prefix;
	const char *text;
};

/* Never reachable, whatever the allowlist says: link-local (where cloud
 * metadata services live) and the metadata addresses outside it. */
static const struct cidr never[] = {
    {AF_INET, {169, 254}, 16, "169.254.0.0/16"},
    {AF_INET, {100, 100, 100, 200}, 32, "100.100.100.200"},
    {AF_INET, {168, 63, 129, 16}, 32, "168.63.129.16"},
    {AF_INET6, {0xfe, 0x80}, 10, "fe80::/10"},
    {AF_INET6, {0xfd, 0x00, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54}, 128, "fd00:ec2::254"},
    /* IPv6 forms of IPv4 addresses: pasta connects to them from the host
     * with an IPv6 socket, which the host maps to IPv4 (::ffff:169.254.
     * 169.254 is 169.254.169.254), or a NAT64 gateway translates; the
     * namespace's IPv4 rules never see them. A sandbox uses IPv4. */
    {AF_INET6, {[10] = 0xff, [11] = 0xff}, 96, "::ffff:0:0/96"},
    {AF_INET6, {0x00, 0x64, 0xff, 0x9b}, 96, "64:ff9b::/96"},
    {AF_INET6, {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48, "64:ff9b:1::/48"},
};

/* Resolved addresses in these ranges (and the never ones) are kept only
 * when a literal entry of the allowlist covers them: a name is no way to
 * reach the host's or the local network's private services (DNS
 * rebinding: the name's owner chooses its addresses). */
static const struct cidr internal[] = {
    {AF_INET, {127}, 8, "127.0.0.0/8"},	       {AF_INET, {10}, 8, "10.0.0.0/8"},
    {AF_INET, {172, 16}, 12, "172.16.0.0/12"}, {AF_INET, {192, 168}, 16, "192.168.0.0/16"},
    {AF_INET, {100, 64}, 10, "100.64.0.0/10"}, {AF_INET6, {[15] = 1}, 128, "::1"},
    {AF_INET6, {0xfc}, 7, "fc00::/7"},	       {AF_INET6, {0xfe, 0xc0}, 10, "fec0::/10"},
};

static const uint8_t lo4[16] = {127, 0, 0, 1};
static const uint8_t lo6[16] = {[15] = 1};

static int fail(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	if (err && errsz) {
		va_start(ap, fmt);
		vsnprintf(err, errsz, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static size_t addr_len(int family)
{
	return family == AF_INET ? 4 : 16;
}

/* a/prefix lies within (or equals) c. */
static bool within(int family, const uint8_t *a, unsigned prefix, const struct cidr *c)
{
	unsigned bits = c->prefix, i;

	if (family != c->family || prefix < c->prefix)
		return false;
	for (i = 0; i < bits / 8; i++) {
		if (a[i] != c->addr[i])
			return false;
	}
	if (bits % 8) {
		uint8_t mask = (uint8_t)(0xff << (8 - bits % 8));

		if ((a[i] & mask) != (c->addr[i] & mask))
			return false;
	}
	return true;
}

static bool host_bits_zero(int family, const uint8_t *a, unsigned prefix)
{
	for (unsigned bit = prefix; bit < addr_len(family) * 8; bit++) {
		if (a[bit / 8] & (0x80 >> (bit % 8)))
			return false;
	}
	return true;
}

bool sbx_net_is_never(int family, const uint8_t *addr, unsigned prefix)
{
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
		if (within(family, addr, prefix, &never[i]))
			return true;
	}
	return false;
}

/* a/prefix and c share an address. */
static bool overlaps(int family, const uint8_t *a, unsigned prefix, const struct cidr *c)
{
	struct cidr wide = {family, {0}, prefix, ""};

	if (family != c->family)
		return false;
	memcpy(wide.addr, a, addr_len(family));
	return within(family, a, prefix, c) || within(family, c->addr, c->prefix, &wide);
}

/* The never range a/prefix overlaps (NULL: none). */
static const struct cidr *never_overlap(int family, const uint8_t *a, unsigned prefix)
{
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
		if (overlaps(family, a, prefix, &never[i]))
			return &never[i];
	}
	return NULL;
}

bool sbx_net_is_internal(int family, const uint8_t *addr)
{
	unsigned full = (unsigned)addr_len(family) * 8;

	if (sbx_net_is_never(family, addr, full))
		return true;
	for (size_t i = 0; i < sizeof(internal) / sizeof(internal[0]); i++) {
		if (within(family, addr, full, &internal[i]))
			return true;
	}
	return false;
}

bool sbx_net_covers(const struct sbx_net_entry *e, int family, const uint8_t *addr)
{
	struct cidr c = {e->family, {0}, e->prefix, ""};

	if (!e->family)
		return false;
	memcpy(c.addr, e->addr, addr_len(e->family));
	return within(family, addr, (unsigned)addr_len(family) * 8, &c);
}

bool sbx_net_is_host_loopback(int family, const uint8_t *addr, unsigned prefix)
{
	if (family == AF_INET)
		return prefix == 32 && memcmp(addr, lo4, 4) == 0;
	return family == AF_INET6 && prefix == 128 && memcmp(addr, lo6, 16) == 0;
}

static int parse_u16(const char *s, size_t n, uint16_t *out)
{
	unsigned v = 0;

	if (n == 0 || n > 5)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v < 1 || v > 65535)
		return -EINVAL;
	*out = (uint16_t)v;
	return 0;
}

static int parse_ports(const char *s, size_t n, struct sbx_net_entry *e)
{
	const char *dash = memchr(s, '-', n);

	if (!dash) {
		if (parse_u16(s, n, &e->lo) < 0)
			return -EINVAL;
		e->hi = e->lo;
	} else if (parse_u16(s, (size_t)(dash - s), &e->lo) < 0 ||
		   parse_u16(dash + 1, n - (size_t)(dash - s) - 1, &e->hi) < 0 || e->lo > e->hi) {
		return -EINVAL;
	}
	e->has_port = 1;
	return 0;
}

/* A DNS name: labels of letters, digits, '-' and '_' (1..63 bytes, no
 * '-' at either end), at most 253 bytes, the last label not all digits
 * (so that "10.1.2" is not taken for a name). */
static bool name_ok(const char *s, size_t n)
{
	size_t start = 0;
	bool digits = true;

	if (n == 0 || n > 253)
		return false;
	for (size_t i = 0; i <= n; i++) {
		char c = i < n ? s[i] : '.';

		if (c == '.') {
			size_t len = i - start;

			if (len == 0 || len > 63 || s[start] == '-' || s[i - 1] == '-')
				return false;
			if (i == n && digits)
				return false;
			start = i + 1;
			digits = true;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_'))
			return false;
		if (c < '0' || c > '9')
			digits = false;
	}
	return true;
}

/* An address with an optional /prefix, of family. */
static int parse_addr(int family, const char *s, size_t n, struct sbx_net_entry *e)
{
	char tmp[64];
	const char *slash = memchr(s, '/', n);
	size_t alen = slash ? (size_t)(slash - s) : n;
	unsigned max = family == AF_INET ? 32 : 128, prefix = max;

	if (alen == 0 || alen >= sizeof(tmp))
		return -EINVAL;
	memcpy(tmp, s, alen);
	tmp[alen] = '\0';
	if (inet_pton(family, tmp, e->addr) != 1)
		return -EINVAL;
	if (slash) {
		uint16_t p;
		size_t plen = n - alen - 1;

		/* "0" is a valid prefix; parse_u16 refuses 0 */
		if (plen == 1 && slash[1] == '0')
			prefix = 0;
		else if (parse_u16(slash + 1, plen, &p) < 0 || p > max)
			return -EINVAL;
		else
			prefix = p;
	}
	e->family = family;
	e->prefix = prefix;
	return 0;
}

/* Splits "HOST[:PORTS]" / "[V6][:PORTS]" into host and ports. */
static int split_entry(const char *s, size_t n, const char **host, size_t *hlen, const char **ports,
		       size_t *plen, bool *v6)
{
	const char *colon;

	*ports = NULL;
	*plen = 0;
	*v6 = s[0] == '[';
	if (*v6) {
		const char *close = memchr(s, ']', n);

		if (!close)
			return -EINVAL;
		*host = s + 1;
		*hlen = (size_t)(close - s) - 1;
		colon = close + 1 < s + n ? close + 1 : NULL;
		if (colon && *colon != ':')
			return -EINVAL;
	} else {
		colon = memchr(s, ':', n);
		if (colon && memchr(colon + 1, ':', n - (size_t)(colon - s) - 1))
			return -EINVAL; /* an unbracketed IPv6 address */
		*host = s;
		*hlen = colon ? (size_t)(colon - s) : n;
	}
	if (colon) {
		*ports = colon + 1;
		*plen = n - (size_t)(colon + 1 - s);
	}
	return 0;
}

static int entry_rules(const struct sbx_net_entry *e, const char *s, int n, char *err, size_t errsz)
{
	static const struct cidr lo_net[] = {
	    {AF_INET, {127}, 8, "127.0.0.0/8"},
	    {AF_INET6, {[15] = 1}, 128, "::1"},
	};
	const struct cidr zero = {e->family, {0}, addr_len(e->family) * 8, ""};
	const struct cidr *nv;

	if (!e->family)
		return 0;
	if (!host_bits_zero(e->family, e->addr, e->prefix))
		return fail(err, errsz, "'%.*s': the address has bits set beyond its prefix", n, s);
	if (sbx_net_is_never(e->family, e->addr, e->prefix))
		return fail(err, errsz,
			    "'%.*s': link-local, metadata and IPv6-embedded IPv4 (::ffff:0:0/96, NAT64) "
			    "addresses are never reachable",
			    n, s);
	/* Only "everything" may contain a never range (the filter carves
	 * them out); a narrower CIDR around one names it by mistake. */
	nv = never_overlap(e->family, e->addr, e->prefix);
	if (nv && e->prefix > 0)
		return fail(err, errsz,
			    "'%.*s': overlaps %s, which is never reachable (name the ranges around it)", n, s,
			    nv->text);
	if (within(e->family, e->addr, e->prefix, &zero))
		return fail(err, errsz, "'%.*s': the unspecified address is no destination", n, s);
	for (size_t i = 0; i < 2; i++) {
		if (!within(e->family, e->addr, e->prefix, &lo_net[i]))
			continue;
		if (!sbx_net_is_host_loopback(e->family, e->addr, e->prefix) || !e->has_port)
			return fail(err, errsz,
				    "'%.*s': the host's loopback is reachable only as 127.0.0.1:PORT or "
				    "[::1]:PORT (a port or range)",
				    n, s);
	}
	return 0;
}

static int parse_entry(const char *s, size_t n, struct sbx_net_entry *e, char *err, size_t errsz)
{
	const char *host, *ports;
	size_t hlen, plen;
	bool v6;
	int in = (int)n;

	memset(e, 0, sizeof(*e));
	e->lo = 1;
	e->hi = 65535;
	if (split_entry(s, n, &host, &hlen, &ports, &plen, &v6) < 0)
		return fail(err, errsz, "'%.*s': not HOST, HOST:PORT or HOST:LO-HI (IPv6 in brackets)", in,
			    s);
	if (ports && parse_ports(ports, plen, e) < 0)
		return fail(err, errsz, "'%.*s': a port is 1..65535, a range LO-HI with LO <= HI", in, s);
	if (v6) {
		if (parse_addr(AF_INET6, host, hlen, e) < 0)
			return fail(err, errsz, "'%.*s': not an IPv6 address or CIDR", in, s);
	} else if (memchr(host, '/', hlen) || parse_addr(AF_INET, host, hlen, e) == 0) {
		if (parse_addr(AF_INET, host, hlen, e) < 0)
			return fail(err, errsz, "'%.*s': not an IPv4 CIDR", in, s);
	} else if (name_ok(host, hlen)) {
		e->name = xstrndup(host, hlen);
	} else {
		return fail(err, errsz, "'%.*s': not a host name or IPv4 address", in, s);
	}
	return entry_rules(e, s, in, err, errsz);
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

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
}

static size_t loop_ports(const struct sbx_net_entry *e)
{
	return sbx_net_is_host_loopback(e->family, e->addr, e->prefix) ? (size_t)(e->hi - e->lo) + 1 : 0;
}

int sbx_net_allow_parse(const char *spec, struct sbx_net_allow *out, char *err, size_t errsz)
{
	struct sbx_net_allow a = {0};
	const char *p = spec;
	size_t loop = 0;

	if (!spec || !spec[0])
		return fail(err, errsz, "the allowlist is empty");
	if (strlen(spec) > SBX_NET_SPEC_MAX)
		return fail(err, errsz, "the allowlist is longer than %d bytes", SBX_NET_SPEC_MAX);
	a.e = xcalloc(SBX_NET_ENTRIES_MAX, sizeof(*a.e));
	for (;;) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);

		while (n && is_space(*p)) {
			p++;
			n--;
		}
		while (n && is_space(p[n - 1]))
			n--;
		if (n == 0 || a.n == SBX_NET_ENTRIES_MAX) {
			sbx_net_allow_clear(&a);
			return n ? fail(err, errsz, "more than %d entries", SBX_NET_ENTRIES_MAX)
				 : fail(err, errsz, "an empty entry (two commas, or one at an end)");
		}
		if (parse_entry(p, n, &a.e[a.n], err, errsz) < 0) {
			sbx_net_allow_clear(&a);
			return -EINVAL;
		}
		loop += loop_ports(&a.e[a.n++]);
		if (!end)
			break;
		p = end + 1;
	}
	if (loop > SBX_NET_LOOP_PORTS_MAX) {
		sbx_net_allow_clear(&a);
		return fail(err, errsz, "more than %d host loopback ports", SBX_NET_LOOP_PORTS_MAX);
	}
	if (out)
		*out = a;
	else
		sbx_net_allow_clear(&a);
	return 0;
}

int sbx_net_allow_check(const char *spec, char *err, size_t errsz)
{
	return sbx_net_allow_parse(spec, NULL, err, errsz);
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
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
		buf_appendf(b,
			    "\t\t%s daddr %s meta l4proto tcp reject with tcp reset\n"
			    "\t\t%s daddr %s reject with icmpx type admin-prohibited\n",
			    never[i].family == AF_INET ? "ip" : "ip6", never[i].text,
			    never[i].family == AF_INET ? "ip" : "ip6", never[i].text);
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
