/* The sandbox's DNS (sandbox/egress/dns.h): one query in, one answer out,
 * and the synthetic addresses the answers hand out. */
#include "sandbox/egress/dns.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/xmalloc.h"

#define HDR 12	     /* the header's bytes */
#define RR_FIXED 10  /* a record after its name: type, class, TTL, RDLENGTH */
#define A_RR 16	     /* the answer's A record: pointer, fixed part, 4 bytes */
#define QNAME_PTR 12 /* the question's name, right after the header */
#define TYPE_A 1
#define TYPE_OPT 41
#define CLASS_IN 1

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint8_t *put16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
	return p + 2;
}

/* Host-name letters plus '_' (SRV-style names such as _sip._tcp); no dots
 * (they would make a label look like two), spaces or bytes a log or a rule
 * comparison could misread. */
static bool name_char(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
	       c == '_';
}

/* The question's name at p[off..n) into name, lowercase: the offset after
 * it, or -EINVAL. Only plain labels: a query has nothing earlier to point
 * at, so a compression pointer is either an attack or a broken client. */
static int parse_name(const uint8_t *p, size_t n, size_t off, char name[SBX_EGRESS_NAME_MAX + 1])
{
	size_t len = 0;

	for (;;) {
		if (off >= n)
			return -EINVAL;
		size_t l = p[off++];
		if (l == 0)
			break;
		/* > 63: pointers (0xc0) and the unused label types 0x40, 0x80 */
		if (l > 63 || l > n - off || len + !!len + l > SBX_EGRESS_NAME_MAX)
			return -EINVAL;
		if (len)
			name[len++] = '.';
		for (size_t i = 0; i < l; i++) {
			uint8_t c = p[off + i];
			if (!name_char(c))
				return -EINVAL;
			name[len++] = (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
		}
		off += l;
	}
	if (!len)
		return -EINVAL; /* the root: no name to decide on */
	name[len] = '\0';
	return (int)off;
}

/* EDNS's OPT record (RFC 6891) at p[off..n): the offset after it, or
 * -EINVAL. Its contents (UDP size, cookies, padding) are ignored: answers
 * stay under 512 bytes and carry no OPT. */
static int parse_opt(const uint8_t *p, size_t n, size_t off)
{
	if (n - off < 1 + RR_FIXED || p[off] != 0 || get16(p + off + 1) != TYPE_OPT)
		return -EINVAL;
	size_t rdlen = get16(p + off + 1 + RR_FIXED - 2);
	if (rdlen > n - off - 1 - RR_FIXED)
		return -EINVAL;
	return (int)(off + 1 + RR_FIXED + rdlen);
}

int sbx_egress_dns_parse(const uint8_t *p, size_t n, struct sbx_egress_dns_query *q)
{
	struct sbx_egress_dns_query r;

	if (n < HDR || n > SBX_EGRESS_DNS_MAX)
		return -EINVAL;
	/* QR 0 and OPCODE 0 (QUERY); one question, no answers or authority,
	 * at most the OPT record in additional */
	if ((p[2] & 0xf8) || get16(p + 4) != 1 || get16(p + 6) || get16(p + 8) || get16(p + 10) > 1)
		return -EINVAL;
	int off = parse_name(p, n, HDR, r.name);
	if (off < 0 || n - (size_t)off < 4)
		return -EINVAL;
	r.qtype = get16(p + off);
	r.qclass = get16(p + off + 2);
	off += 4;
	if (get16(p + 10) && (off = parse_opt(p, n, (size_t)off)) < 0)
		return -EINVAL;
	if ((size_t)off != n)
		return -EINVAL;
	r.id = get16(p);
	*q = r;
	return 0;
}

size_t sbx_egress_dns_answer(const uint8_t *p, size_t n, const struct sbx_egress_dns_query *q, int rcode,
			     const uint8_t *a4, uint8_t *out, size_t cap)
{
	/* The question as the query sent it (a parsed name's wire form is
	 * its text and two bytes), case and all: resolvers that randomise
	 * the case of their names (DNS 0x20) compare it byte for byte. */
	size_t text = strnlen(q->name, SBX_EGRESS_NAME_MAX + 1);
	size_t qlen = text + 2 + 4;
	size_t len = HDR + qlen + (a4 ? A_RR : 0);

	if (!text || text > SBX_EGRESS_NAME_MAX || n < HDR + qlen || cap < len)
		return 0;
	uint8_t *o = put16(out, q->id);
	*o++ = 0x80 | 0x04 | (p[2] & 0x01); /* QR, AA, the query's RD */
	*o++ = (uint8_t)(rcode & 0x0f);	    /* RA 0: nothing recurses */
	o = put16(o, 1);
	o = put16(o, a4 ? 1 : 0);
	o = put16(o, 0);
	o = put16(o, 0);
	memcpy(o, p + HDR, qlen);
	o += qlen;
	if (a4) {
		o = put16(o, 0xc000 | QNAME_PTR);
		o = put16(o, TYPE_A);
		o = put16(o, CLASS_IN);
		o = put16(o, SBX_EGRESS_DNS_TTL >> 16);
		o = put16(o, SBX_EGRESS_DNS_TTL & 0xffff);
		o = put16(o, 4);
		memcpy(o, a4, 4);
	}
	return len;
}

/* Names map both ways in O(1): addresses are handed out in order, so an
 * address is an index into names[]; a name finds its index through an
 * open-addressing table at most half full. The command chooses the names,
 * so the table's hash is keyed (SipHash-1-3, as Python's and Rust's hash
 * tables use against the same attack): colliding names cannot make every
 * lookup a scan. */
#define SLOTS (2 * SBX_EGRESS_NAMES_MAX)

struct sbx_egress_names {
	pthread_mutex_t mu;
	uint64_t key[2];
	size_t n;
	char *names[SBX_EGRESS_NAMES_MAX]; /* the k-th name given has the k-th address */
	uint16_t slot[SLOTS];		   /* 1 + its index in names, 0 empty */
};

static uint64_t rotl(uint64_t x, int b)
{
	return x << b | x >> (64 - b);
}

static void sipround(uint64_t v[4])
{
	v[0] += v[1];
	v[1] = rotl(v[1], 13) ^ v[0];
	v[0] = rotl(v[0], 32);
	v[2] += v[3];
	v[3] = rotl(v[3], 16) ^ v[2];
	v[0] += v[3];
	v[3] = rotl(v[3], 21) ^ v[0];
	v[2] += v[1];
	v[1] = rotl(v[1], 17) ^ v[2];
	v[2] = rotl(v[2], 32);
}

static uint64_t siphash13(const uint64_t k[2], const char *s, size_t len)
{
	uint64_t v[4] = {k[0] ^ 0x736f6d6570736575ULL, k[1] ^ 0x646f72616e646f6dULL,
			 k[0] ^ 0x6c7967656e657261ULL, k[1] ^ 0x7465646279746573ULL};
	uint64_t last = (uint64_t)len << 56;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t m;
		memcpy(&m, s + i, 8);
		v[3] ^= m;
		sipround(v);
		v[0] ^= m;
	}
	for (size_t j = 0; i + j < len; j++)
		last |= (uint64_t)(uint8_t)s[i + j] << (8 * j);
	v[3] ^= last;
	sipround(v);
	v[0] ^= last;
	v[2] ^= 0xff;
	sipround(v);
	sipround(v);
	sipround(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* Where name is, or the empty slot where it goes. */
static size_t find_slot(const struct sbx_egress_names *m, const char *name, size_t len)
{
	size_t i = siphash13(m->key, name, len) & (SLOTS - 1);

	while (m->slot[i] && strcmp(m->names[m->slot[i] - 1], name) != 0)
		i = (i + 1) & (SLOTS - 1);
	return i;
}

/* The k-th address: 198.18.0.0/15 in order, less every x.x.x.0 and
 * x.x.x.255 (software that still thinks in classful networks takes them
 * for network and broadcast addresses and may refuse them) and less
 * 198.18.0.1, kept back for the range's own use (a route's next hop).
 * 254 addresses per /24; the first index is 198.18.0.2. */
static void index_addr(size_t k, uint8_t a4[4])
{
	size_t j = k + 1, block = j / 254;

	a4[0] = 198;
	a4[1] = (uint8_t)(18 + (block >> 8));
	a4[2] = (uint8_t)block;
	a4[3] = (uint8_t)(j % 254 + 1);
}

/* index_addr's inverse: false for an address it never gives. */
static bool addr_index(const uint8_t a4[4], size_t *k)
{
	if (!sbx_egress_names_synthetic(a4) || a4[3] == 0 || a4[3] == 255)
		return false;
	size_t j = ((size_t)(a4[1] - 18) << 8 | a4[2]) * 254 + a4[3] - 1;
	if (j == 0)
		return false;
	*k = j - 1;
	return true;
}

struct sbx_egress_names *sbx_egress_names_new(void)
{
	struct sbx_egress_names *m = xcalloc(1, sizeof *m);

	pthread_mutex_init(&m->mu, NULL);
	/* Only probe lengths depend on the key; getrandom of 16 bytes does
	 * not fail once the kernel's pool is up, and a zero key would still
	 * give every name its own address. */
	if (getrandom(m->key, sizeof m->key, 0) != (ssize_t)sizeof m->key)
		memset(m->key, 0, sizeof m->key);
	return m;
}

void sbx_egress_names_free(struct sbx_egress_names **m)
{
	if (!m || !*m)
		return;
	for (size_t i = 0; i < (*m)->n; i++)
		free((*m)->names[i]);
	pthread_mutex_destroy(&(*m)->mu);
	free(*m);
	*m = NULL;
}

int sbx_egress_names_addr(struct sbx_egress_names *m, const char *name, uint8_t a4[4])
{
	size_t len = strnlen(name, SBX_EGRESS_NAME_MAX + 1);
	int rc = 0;

	if (!len || len > SBX_EGRESS_NAME_MAX)
		return -EINVAL;
	pthread_mutex_lock(&m->mu);
	size_t i = find_slot(m, name, len);
	if (!m->slot[i] && m->n == SBX_EGRESS_NAMES_MAX) {
		rc = -ENOSPC;
	} else {
		if (!m->slot[i]) {
			m->names[m->n] = xstrndup(name, len);
			m->slot[i] = (uint16_t)++m->n;
		}
		index_addr(m->slot[i] - 1u, a4);
	}
	pthread_mutex_unlock(&m->mu);
	return rc;
}

bool sbx_egress_names_lookup(struct sbx_egress_names *m, const uint8_t a4[4], char *name, size_t namesz)
{
	size_t k;
	bool ok = false;

	if (!addr_index(a4, &k))
		return false;
	pthread_mutex_lock(&m->mu);
	if (k < m->n) {
		size_t len = strlen(m->names[k]);
		if (len < namesz) {
			memcpy(name, m->names[k], len + 1);
			ok = true;
		}
	}
	pthread_mutex_unlock(&m->mu);
	return ok;
}

bool sbx_egress_names_synthetic(const uint8_t a4[4])
{
	return a4[0] == 198 && (a4[1] & 0xfe) == 18;
}
