/* Egress rules (rules.h): the grammar, and the decisions the gateway asks
 * per connection. Decisions scan the rules (at most 64) and allocate
 * nothing. */
#include "sandbox/egress/rules.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "common/xmalloc.h"
#include "sandbox/egress/classes.h"
#include "sandbox/egress/rule.h"

/* Host loopback ports granted by one spec, in all (each one a port the
 * namespace redirects to the gateway). */
#define LOOP_PORTS_MAX 256

struct sbx_egress_rules {
	atomic_uint refs;
	char *spec;
	size_t n;
	struct sbx_egress_rule r[];
};

static const uint8_t lo4[16] = {127, 0, 0, 1};
static const uint8_t lo6[16] = {[15] = 1};

static void vsay(char *buf, size_t sz, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
static void vsay(char *buf, size_t sz, const char *fmt, va_list ap)
{
	if (buf && sz)
		vsnprintf(buf, sz, fmt, ap);
}

/* A refused connection: false, and why. */
static bool refuse(char *why, size_t whysz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool refuse(char *why, size_t whysz, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(why, whysz, fmt, ap);
	va_end(ap);
	return false;
}

/* A refusal of the spec: -EINVAL, and why in err. */
static int fail(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(err, errsz, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static size_t addr_len(int family)
{
	return family == AF_INET ? 4 : 16;
}

/* ---- the grammar ---- */

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

static int parse_ports(const char *s, size_t n, struct sbx_egress_rule *e)
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
	e->has_port = true;
	return 0;
}

/* A DNS name: labels of letters, digits, '-' and '_' (1..63 bytes, no
 * '-' at either end), at most 253 bytes, the last label not all digits
 * (so that "10.1.2" is not taken for a name). */
static bool name_ok(const char *s, size_t n)
{
	size_t start = 0;
	bool digits = true;

	if (n == 0 || n > SBX_EGRESS_NAME_MAX)
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
static int parse_addr(int family, const char *s, size_t n, struct sbx_egress_rule *e)
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
	e->kind = SBX_EGRESS_ADDR;
	e->family = family;
	e->prefix = prefix;
	return 0;
}

/* Splits "HOST[:PORTS]" / "[V6][:PORTS]" into host and ports. */
static int split_rule(const char *s, size_t n, const char **host, size_t *hlen, const char **ports,
		      size_t *plen, bool *v6)
{
	const char *colon;

	*ports = NULL;
	*plen = 0;
	*v6 = n && s[0] == '[';
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

static void set_name(struct sbx_egress_rule *e, enum sbx_egress_kind kind, const char *s, size_t n)
{
	e->kind = kind;
	e->namelen = n;
	for (size_t i = 0; i < n; i++)
		e->name[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
	e->name[n] = '\0';
}

/* HOST: a name, *.name, *, an IPv4 address or CIDR, [an IPv6 one]. */
static int parse_host(const char *h, size_t n, bool v6, struct sbx_egress_rule *e, char *err, size_t errsz)
{
	int tl = e->textlen;
	const char *t = e->text;

	if (v6) {
		if (parse_addr(AF_INET6, h, n, e) < 0)
			return fail(err, errsz, "'%.*s': not an IPv6 address or CIDR", tl, t);
	} else if (n == 1 && h[0] == '*') {
		e->kind = SBX_EGRESS_ANY;
	} else if (n > 2 && h[0] == '*' && h[1] == '.' && name_ok(h + 2, n - 2)) {
		set_name(e, SBX_EGRESS_WILD, h + 2, n - 2);
	} else if (memchr(h, '*', n)) {
		return fail(err, errsz, "'%.*s': a wildcard is * alone or *.NAME (the names below NAME)", tl,
			    t);
	} else if (memchr(h, '/', n) || parse_addr(AF_INET, h, n, e) == 0) {
		if (parse_addr(AF_INET, h, n, e) < 0)
			return fail(err, errsz, "'%.*s': not an IPv4 CIDR", tl, t);
	} else if (name_ok(h, n)) {
		set_name(e, SBX_EGRESS_NAME, h, n);
	} else {
		return fail(err, errsz, "'%.*s': not a host name or IPv4 address", tl, t);
	}
	return 0;
}

static bool host_bits_zero(int family, const uint8_t *a, unsigned prefix)
{
	for (unsigned bit = prefix; bit < addr_len(family) * 8; bit++) {
		if (a[bit / 8] & (0x80 >> (bit % 8)))
			return false;
	}
	return true;
}

static bool is_host_loopback(const struct sbx_egress_rule *e)
{
	if (e->kind != SBX_EGRESS_ADDR || e->prefix != addr_len(e->family) * 8)
		return false;
	return memcmp(e->addr, e->family == AF_INET ? lo4 : lo6, addr_len(e->family)) == 0;
}

/* e lies within the host's loopback (127.0.0.0/8, ::1). */
static bool within_loopback(const struct sbx_egress_rule *e)
{
	if (e->family == AF_INET)
		return e->prefix >= 8 && e->addr[0] == 127;
	return e->prefix == 128 && memcmp(e->addr, lo6, 16) == 0;
}

static bool unspecified(const struct sbx_egress_rule *e)
{
	static const uint8_t zero[16];

	return e->prefix == addr_len(e->family) * 8 && memcmp(e->addr, zero, addr_len(e->family)) == 0;
}

/* What an allow address rule may not name; a deny rule may name anything. */
static int allow_addr_ok(const struct sbx_egress_rule *e, char *err, size_t errsz)
{
	char nv[64];
	bool inside;
	int tl = e->textlen;

	if (unspecified(e))
		return fail(err, errsz, "'%.*s': the unspecified address is no destination", tl, e->text);
	if (sbx_egress_never_named(e->family, e->addr, e->prefix, &inside, nv, sizeof(nv))) {
		if (inside)
			return fail(err, errsz,
				    "'%.*s': within %s: link-local, metadata and IPv6-embedded IPv4 "
				    "(::ffff:0:0/96, NAT64) addresses are never reachable",
				    tl, e->text, nv);
		/* Only "everything" may contain a never range (the gateway
		 * and the filter carve them out); a narrower CIDR around
		 * one names it by mistake. */
		if (e->prefix > 0)
			return fail(
			    err, errsz,
			    "'%.*s': overlaps %s, which is never reachable (name the ranges around it)", tl,
			    e->text, nv);
	}
	if (within_loopback(e) && (!is_host_loopback(e) || !e->has_port))
		return fail(err, errsz,
			    "'%.*s': the host's loopback is reachable only as 127.0.0.1:PORT or [::1]:PORT "
			    "(a port or range)",
			    tl, e->text);
	return 0;
}

static int parse_rule(const char *s, size_t n, struct sbx_egress_rule *e, char *err, size_t errsz)
{
	const char *host, *ports;
	size_t hlen, plen;
	bool v6;

	memset(e, 0, sizeof(*e));
	e->text = s;
	e->textlen = (int)n;
	e->lo = 1;
	e->hi = 65535;
	e->deny = s[0] == '!';
	s += e->deny;
	n -= e->deny;
	if (split_rule(s, n, &host, &hlen, &ports, &plen, &v6) < 0)
		return fail(err, errsz, "'%.*s': not HOST, HOST:PORT or HOST:LO-HI (IPv6 in brackets)",
			    e->textlen, e->text);
	if (ports && parse_ports(ports, plen, e) < 0)
		return fail(err, errsz, "'%.*s': a port is 1..65535, a range LO-HI with LO <= HI", e->textlen,
			    e->text);
	if (parse_host(host, hlen, v6, e, err, errsz) < 0)
		return -EINVAL;
	if (e->kind != SBX_EGRESS_ADDR)
		return 0;
	if (!host_bits_zero(e->family, e->addr, e->prefix))
		return fail(err, errsz, "'%.*s': the address has bits set beyond its prefix", e->textlen,
			    e->text);
	return e->deny ? 0 : allow_addr_ok(e, err, errsz);
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
}

/* s[0..n) without the spaces around it. */
static void trim(const char **s, size_t *n)
{
	while (*n && is_space(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && is_space((*s)[*n - 1]))
		(*n)--;
}

static size_t loop_ports(const struct sbx_egress_rule *e)
{
	return !e->deny && is_host_loopback(e) ? (size_t)(e->hi - e->lo) + 1 : 0;
}

static int parse_rules(struct sbx_egress_rules *r, char *err, size_t errsz)
{
	const char *p = r->spec;
	size_t loop = 0;

	for (;;) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);

		trim(&p, &n);
		if (n == 0)
			return fail(err, errsz, "an empty entry (two commas, or one at an end)");
		if (r->n == SBX_EGRESS_RULES_MAX)
			return fail(err, errsz, "more than %d rules", SBX_EGRESS_RULES_MAX);
		if (parse_rule(p, n, &r->r[r->n], err, errsz) < 0)
			return -EINVAL;
		loop += loop_ports(&r->r[r->n++]);
		if (!end)
			break;
		p = end + 1;
	}
	if (loop > LOOP_PORTS_MAX)
		return fail(err, errsz, "more than %d host loopback ports", LOOP_PORTS_MAX);
	return 0;
}

/* "" and "none" (spaces around allowed): no rules. */
static bool no_rules(const char *spec)
{
	const char *s = spec;
	size_t n = strlen(spec);

	trim(&s, &n);
	return n == 0 || (n == 4 && memcmp(s, "none", 4) == 0);
}

int sbx_egress_rules_parse(const char *spec, struct sbx_egress_rules **out, char *err, size_t errsz)
{
	struct sbx_egress_rules *r;
	size_t len;

	if (!spec)
		return fail(err, errsz, "the allowlist is empty");
	len = strlen(spec);
	if (len > SBX_EGRESS_SPEC_MAX)
		return fail(err, errsz, "the allowlist is longer than %d bytes", SBX_EGRESS_SPEC_MAX);
	r = xcalloc(1, sizeof(*r) + SBX_EGRESS_RULES_MAX * sizeof(r->r[0]));
	atomic_init(&r->refs, 1);
	r->spec = xstrdup(spec);
	if (!no_rules(spec) && parse_rules(r, err, errsz) < 0) {
		sbx_egress_rules_unref(&r);
		return -EINVAL;
	}
	*out = r;
	return 0;
}

struct sbx_egress_rules *sbx_egress_rules_ref(struct sbx_egress_rules *r)
{
	atomic_fetch_add(&r->refs, 1);
	return r;
}

void sbx_egress_rules_unref(struct sbx_egress_rules **r)
{
	if (!*r)
		return;
	if (atomic_fetch_sub(&(*r)->refs, 1) == 1) {
		free((*r)->spec);
		free(*r);
	}
	*r = NULL;
}

const char *sbx_egress_rules_spec(const struct sbx_egress_rules *r)
{
	return r->spec;
}

size_t sbx_egress_rules_count(const struct sbx_egress_rules *r)
{
	return r->n;
}

const struct sbx_egress_rule *sbx_egress_rules_at(const struct sbx_egress_rules *r, size_t i)
{
	return &r->r[i];
}

/* ---- decisions ---- */

/* e covers port; port 0 ("some port"): an allow rule any, a deny rule
 * only when it covers them all. */
static bool covers_port(const struct sbx_egress_rule *e, uint16_t port)
{
	if (port == 0)
		return !e->deny || (e->lo == 1 && e->hi == 65535);
	return e->lo <= port && port <= e->hi;
}

static bool name_matches(const struct sbx_egress_rule *e, const char *name, size_t len)
{
	switch (e->kind) {
	case SBX_EGRESS_ANY:
		return true;
	case SBX_EGRESS_NAME:
		return len == e->namelen && strncasecmp(name, e->name, len) == 0;
	case SBX_EGRESS_WILD:
		return len > e->namelen + 1 && name[len - e->namelen - 1] == '.' &&
		       strncasecmp(name + len - e->namelen, e->name, e->namelen) == 0;
	case SBX_EGRESS_ADDR:
		break;
	}
	return false;
}

/* The first rule of that kind (deny or allow) matching name on port. */
static const struct sbx_egress_rule *name_rule(const struct sbx_egress_rules *r, bool deny, const char *name,
					       size_t len, uint16_t port)
{
	for (size_t i = 0; i < r->n; i++) {
		const struct sbx_egress_rule *e = &r->r[i];

		if (e->deny == deny && covers_port(e, port) && name_matches(e, name, len))
			return e;
	}
	return NULL;
}

static bool denied(const struct sbx_egress_rule *e, char *why, size_t whysz)
{
	return refuse(why, whysz, "denied by rule %.*s", e->textlen, e->text);
}

bool sbx_egress_rules_name(const struct sbx_egress_rules *r, const char *name, uint16_t port, char *why,
			   size_t whysz)
{
	size_t len = strnlen(name, SBX_EGRESS_NAME_MAX + 1);
	const struct sbx_egress_rule *e;

	/* an address in a Host header or an SNI is no name: the address
	 * rules decide it */
	if (!name_ok(name, len))
		return refuse(why, whysz, "not a host name");
	e = name_rule(r, true, name, len, port);
	if (e)
		return denied(e, why, whysz);
	if (name_rule(r, false, name, len, port))
		return true;
	if (port && name_rule(r, false, name, len, 0))
		return refuse(why, whysz, "port %u not allowed for %s", port, name);
	return refuse(why, whysz, "not in the allowlist");
}

/* The first address rule of that kind covering addr on port; with
 * literal, not a /0. */
static const struct sbx_egress_rule *addr_rule(const struct sbx_egress_rules *r, bool deny, int family,
					       const uint8_t *addr, uint16_t port, bool literal)
{
	for (size_t i = 0; i < r->n; i++) {
		const struct sbx_egress_rule *e = &r->r[i];

		if (e->kind == SBX_EGRESS_ADDR && e->deny == deny && e->family == family &&
		    (!literal || e->prefix > 0) && covers_port(e, port) &&
		    sbx_egress_prefix_eq(addr, e->addr, e->prefix))
			return e;
	}
	return NULL;
}

/* Why an address no rule denied is refused. */
static bool not_granted(const struct sbx_egress_rules *r, int family, const uint8_t *addr, uint16_t port,
			const char *what, const char *text, char *why, size_t whysz)
{
	if (port && addr_rule(r, false, family, addr, 0, what != NULL))
		return refuse(why, whysz, "port %u not allowed for %s", port, text);
	if (what)
		return refuse(why, whysz, "%s (%s), not in the allowlist", what, text);
	return refuse(why, whysz, "address not in the allowlist");
}

bool sbx_egress_rules_addr(const struct sbx_egress_rules *r, int family, const uint8_t *addr, uint16_t port,
			   bool from_name, char *why, size_t whysz)
{
	char text[INET6_ADDRSTRLEN] = "";
	bool never;
	const char *what = sbx_egress_addr_what(family, addr, &never);
	const struct sbx_egress_rule *e;

	if (family != AF_INET && family != AF_INET6)
		return refuse(why, whysz, "not an IPv4 or IPv6 address");
	inet_ntop(family, addr, text, sizeof(text));
	if (never)
		return refuse(why, whysz, "%s%s (%s)", from_name ? "resolves to " : "", what, text);
	e = addr_rule(r, true, family, addr, port, false);
	if (e)
		return denied(e, why, whysz);
	/* internal addresses only under a rule that names them */
	if (addr_rule(r, false, family, addr, port, what != NULL))
		return true;
	if (from_name && !what)
		return true;
	if (from_name)
		return refuse(why, whysz, "resolves to %s (%s)", what, text);
	return not_granted(r, family, addr, port, what, text, why, whysz);
}

static int by_lo(const void *a, const void *b)
{
	const uint16_t *x = a, *y = b;

	return (int)x[0] - (int)y[0];
}

size_t sbx_egress_rules_loopback(const struct sbx_egress_rules *r, int family, uint16_t (*ports)[2],
				 size_t cap)
{
	uint16_t all[SBX_EGRESS_RULES_MAX][2];
	size_t n = 0, out = 0;

	for (size_t i = 0; i < r->n; i++) {
		if (loop_ports(&r->r[i]) && r->r[i].family == family) {
			all[n][0] = r->r[i].lo;
			all[n++][1] = r->r[i].hi;
		}
	}
	/* sorted and merged: an nft interval set refuses overlaps, and a
	 * spec may name one port twice */
	qsort(all, n, sizeof(all[0]), by_lo);
	for (size_t i = 0; i < n && out < cap;) {
		uint16_t lo = all[i][0], hi = all[i][1];

		for (i++; i < n && all[i][0] <= hi + 1; i++) {
			if (all[i][1] > hi)
				hi = all[i][1];
		}
		ports[out][0] = lo;
		ports[out++][1] = hi;
	}
	return out;
}
