/* The sandbox's DNS (sandbox/egress/dns.h): queries as glibc's resolver
 * builds and sends them, the answers it accepts, malformed queries, and
 * the synthetic addresses. Network: one UDP socket on 127.0.0.1. */
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <resolv.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/egress/dns.h"

static const uint8_t addr[4] = {198, 18, 0, 2};

/* A query the way a stub resolver builds it (glibc's res_nmkquery: a
 * random id, RD set, class IN). Its length. */
static size_t mkquery(const char *name, int type, uint8_t *b, size_t cap)
{
	struct __res_state st;

	memset(&st, 0, sizeof st);
	assert_int_equal(res_ninit(&st), 0);
	int n = res_nmkquery(&st, QUERY, name, C_IN, type, NULL, 0, NULL, b, (int)cap);
	res_nclose(&st);
	assert_true(n > 12);
	return (size_t)n;
}

/* Appends EDNS's OPT record (UDP size 1232, an 8-byte client cookie), as
 * resolvers with EDNS add it. */
static size_t add_opt(uint8_t *b, size_t n)
{
	static const uint8_t opt[] = {0,  0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 12, 0,
				      10, 0, 8,	 1,    2,    3, 4, 5, 6, 7, 8}; /* a client cookie */

	memcpy(b + n, opt, sizeof opt);
	b[11]++;
	return n + sizeof opt;
}

/* Parse n bytes from a buffer of exactly n, so that ASan sees any read
 * past the end. */
static int parse_exact(const uint8_t *b, size_t n, struct sbx_egress_dns_query *q)
{
	uint8_t *copy = malloc(n ? n : 1);
	memcpy(copy, b, n);
	int rc = sbx_egress_dns_parse(copy, n, q);
	free(copy);
	return rc;
}

static void test_resolver_queries(void **state)
{
	static const int types[] = {T_A, T_AAAA, T_MX, T_TXT, T_ANY, T_SRV};
	uint8_t b[SBX_EGRESS_DNS_MAX];
	struct sbx_egress_dns_query q;

	(void)state;
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		size_t n = mkquery("WWW.Example.COM.", types[i], b, sizeof b);
		assert_int_equal(parse_exact(b, n, &q), 0);
		assert_string_equal(q.name, "www.example.com");
		assert_int_equal(q.qtype, types[i]);
		assert_int_equal(q.qclass, C_IN);
		assert_int_equal(q.id, b[0] << 8 | b[1]);
		n = add_opt(b, n);
		assert_int_equal(parse_exact(b, n, &q), 0);
		assert_string_equal(q.name, "www.example.com");
	}
	size_t n = mkquery("_xmpp-server._tcp.Jabber.org", T_SRV, b, sizeof b);
	assert_int_equal(parse_exact(b, n, &q), 0);
	assert_string_equal(q.name, "_xmpp-server._tcp.jabber.org");
}

/* A name of total text len from labels of up to lab bytes. */
static size_t wire_name(uint8_t *b, size_t len, size_t lab)
{
	size_t o = 0;

	while (len) {
		size_t l = len < lab ? len : lab;
		b[o++] = (uint8_t)l;
		memset(b + o, 'a', l);
		o += l;
		len -= l;
		if (len)
			len--; /* the dot */
	}
	b[o++] = 0;
	return o;
}

/* Header (id 0x1234, RD), a name of len characters in labels of up to
 * lab, type A, class IN. Its length. */
static size_t hand_query(uint8_t *b, size_t len, size_t lab)
{
	static const uint8_t hdr[12] = {0x12, 0x34, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0};

	memcpy(b, hdr, sizeof hdr);
	size_t n = 12 + wire_name(b + 12, len, lab);
	memcpy(b + n, "\0\1\0\1", 4);
	return n + 4;
}

static void test_name_limits(void **state)
{
	uint8_t b[SBX_EGRESS_DNS_MAX];
	struct sbx_egress_dns_query q;
	size_t n;

	(void)state;
	/* 253 characters in labels of 63: the longest name there is */
	n = hand_query(b, 253, 63);
	assert_int_equal(parse_exact(b, n, &q), 0);
	assert_int_equal(strlen(q.name), 253);
	n = hand_query(b, 254, 63);
	assert_int_equal(parse_exact(b, n, &q), -EINVAL);
	/* a label of 64 bytes is a length byte DNS does not have */
	n = hand_query(b, 64, 64);
	assert_int_equal(parse_exact(b, n, &q), -EINVAL);
	n = hand_query(b, 63, 63);
	assert_int_equal(parse_exact(b, n, &q), 0);
}

struct bad {
	const char *what;
	uint8_t b[48];
	size_t n;
};

#define HDR_RD 0x12, 0x34, 0x01, 0x00
#define COUNTS(qd, an, ns, ar) 0, qd, 0, an, 0, ns, 0, ar
#define NAME_A_COM 1, 'a', 3, 'c', 'o', 'm', 0
#define TYPE_CLASS 0, 1, 0, 1

static const struct bad bads[] = {
    {"empty", {0}, 0},
    {"truncated header", {HDR_RD, COUNTS(1, 0, 0, 0)}, 11},
    {"header only", {HDR_RD, COUNTS(1, 0, 0, 0)}, 12},
    {"label length past the end", {HDR_RD, COUNTS(1, 0, 0, 0), 5, 'a', 'b'}, 15},
    {"no type and class", {HDR_RD, COUNTS(1, 0, 0, 0), NAME_A_COM, 0, 1}, 21},
    {"pointer", {HDR_RD, COUNTS(1, 0, 0, 0), 1, 'a', 0xc0, 12, TYPE_CLASS}, 20},
    {"pointer loop", {HDR_RD, COUNTS(1, 0, 0, 0), 0xc0, 12, TYPE_CLASS}, 18},
    {"label type 0x40", {HDR_RD, COUNTS(1, 0, 0, 0), 0x41, 'a', 0, TYPE_CLASS}, 19},
    {"root name", {HDR_RD, COUNTS(1, 0, 0, 0), 0, TYPE_CLASS}, 17},
    {"dot in a label", {HDR_RD, COUNTS(1, 0, 0, 0), 3, 'a', '.', 'b', 0, TYPE_CLASS}, 21},
    {"NUL in a label", {HDR_RD, COUNTS(1, 0, 0, 0), 3, 'a', 0, 'b', 0, TYPE_CLASS}, 21},
    {"space in a label", {HDR_RD, COUNTS(1, 0, 0, 0), 3, 'a', ' ', 'b', 0, TYPE_CLASS}, 21},
    {"UTF-8 in a label", {HDR_RD, COUNTS(1, 0, 0, 0), 2, 0xc3, 0xa9, 0, TYPE_CLASS}, 20},
    {"QDCOUNT 0", {HDR_RD, COUNTS(0, 0, 0, 0), NAME_A_COM, TYPE_CLASS}, 23},
    {"QDCOUNT 2", {HDR_RD, COUNTS(2, 0, 0, 0), NAME_A_COM, TYPE_CLASS, NAME_A_COM, TYPE_CLASS}, 34},
    {"QR 1", {0x12, 0x34, 0x81, 0, COUNTS(1, 0, 0, 0), NAME_A_COM, TYPE_CLASS}, 23},
    {"OPCODE IQUERY", {0x12, 0x34, 0x09, 0, COUNTS(1, 0, 0, 0), NAME_A_COM, TYPE_CLASS}, 23},
    {"OPCODE UPDATE", {0x12, 0x34, 0x29, 0, COUNTS(1, 0, 0, 0), NAME_A_COM, TYPE_CLASS}, 23},
    {"ANCOUNT 1", {HDR_RD, COUNTS(1, 1, 0, 0), NAME_A_COM, TYPE_CLASS}, 23},
    {"NSCOUNT 1", {HDR_RD, COUNTS(1, 0, 1, 0), NAME_A_COM, TYPE_CLASS}, 23},
    {"ARCOUNT 2, one OPT",
     {HDR_RD, COUNTS(1, 0, 0, 2), NAME_A_COM, TYPE_CLASS, 0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0},
     34},
    {"two OPT records",
     {HDR_RD,	  COUNTS(1, 0, 0, 2),
      NAME_A_COM, TYPE_CLASS,
      0,	  0,
      41,	  0x10,
      0,	  0,
      0,	  0,
      0,	  0,
      0,	  0,
      0,	  41,
      0x10,	  0,
      0,	  0,
      0,	  0,
      0,	  0},
     45},
    {"ARCOUNT 1, none there", {HDR_RD, COUNTS(1, 0, 0, 1), NAME_A_COM, TYPE_CLASS}, 23},
    {"additional not OPT",
     {HDR_RD, COUNTS(1, 0, 0, 1), NAME_A_COM, TYPE_CLASS, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
     34},
    {"OPT not at the root",
     {HDR_RD, COUNTS(1, 0, 0, 1), NAME_A_COM, TYPE_CLASS, 1, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0},
     34},
    {"OPT with a name",
     {HDR_RD, COUNTS(1, 0, 0, 1), NAME_A_COM, TYPE_CLASS, 1, 'a', 0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0},
     36},
    {"OPT data past the end",
     {HDR_RD, COUNTS(1, 0, 0, 1), NAME_A_COM, TYPE_CLASS, 0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 4, 0, 0},
     36},
    {"trailing byte", {HDR_RD, COUNTS(1, 0, 0, 0), NAME_A_COM, TYPE_CLASS, 0}, 24},
    {"trailing byte after OPT",
     {HDR_RD, COUNTS(1, 0, 0, 1), NAME_A_COM, TYPE_CLASS, 0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0, 7},
     35},
};

static void test_malformed(void **state)
{
	struct sbx_egress_dns_query q;

	(void)state;
	for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++)
		if (parse_exact(bads[i].b, bads[i].n, &q) != -EINVAL)
			fail_msg("accepted: %s", bads[i].what);
	/* every prefix of a good query is refused, and read within its n */
	uint8_t b[SBX_EGRESS_DNS_MAX];
	size_t n = add_opt(b, mkquery("www.example.com", T_A, b, sizeof b));
	for (size_t k = 0; k < n; k++)
		assert_int_equal(parse_exact(b, k, &q), -EINVAL);
	assert_int_equal(parse_exact(b, n, &q), 0);
	/* nothing larger than SBX_EGRESS_DNS_MAX, whatever it holds */
	uint8_t big[SBX_EGRESS_DNS_MAX + 20];
	n = mkquery("a.com", T_A, big, sizeof big);
	big[11] = 1;
	memcpy(big + n, "\0\0\51\0\0\0\0\0\0", 9);
	size_t rd = sizeof big - n - 11;
	big[n + 9] = (uint8_t)(rd >> 8);
	big[n + 10] = (uint8_t)rd;
	memset(big + n + 11, 0, rd);
	assert_int_equal(parse_exact(big, sizeof big, &q), -EINVAL);
}

/* The answer's header and question, checked against query b[0..n). */
static void check_answer(const uint8_t *a, size_t alen, const uint8_t *b, size_t qlen, int rcode, bool with_a)
{
	assert_true(alen < 512);
	assert_memory_equal(a, b, 2);		   /* id */
	assert_int_equal(a[2], 0x84 | (b[2] & 1)); /* QR, AA, RD as asked */
	assert_int_equal(a[3], rcode);		   /* RA 0 */
	assert_int_equal(a[4] << 8 | a[5], 1);
	assert_int_equal(a[6] << 8 | a[7], with_a);
	assert_int_equal(a[8] | a[9] | a[10] | a[11], 0); /* no authority, no OPT */
	assert_memory_equal(a + 12, b + 12, qlen - 12);	  /* the question, case kept */
	assert_int_equal(alen, qlen + (with_a ? 16 : 0));
	if (with_a) {
		static const uint8_t rr[12] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, SBX_EGRESS_DNS_TTL, 0, 4};
		assert_memory_equal(a + qlen, rr, sizeof rr);
		assert_memory_equal(a + qlen + 12, addr, 4);
	}
}

static void test_answers(void **state)
{
	uint8_t b[SBX_EGRESS_DNS_MAX], a[SBX_EGRESS_DNS_MAX];
	struct sbx_egress_dns_query q;

	(void)state;
	size_t qlen = mkquery("Pypi.ORG", T_A, b, sizeof b);
	size_t n = add_opt(b, qlen);
	assert_int_equal(parse_exact(b, n, &q), 0);
	size_t len = sbx_egress_dns_answer(b, n, &q, SBX_DNS_NOERROR, addr, a, sizeof a);
	check_answer(a, len, b, qlen, SBX_DNS_NOERROR, true);
	len = sbx_egress_dns_answer(b, n, &q, SBX_DNS_REFUSED, NULL, a, sizeof a);
	check_answer(a, len, b, qlen, SBX_DNS_REFUSED, false);
	/* a query without RD gets an answer without RD */
	b[2] &= 0xfe;
	len = sbx_egress_dns_answer(b, n, &q, SBX_DNS_NXDOMAIN, NULL, a, sizeof a);
	check_answer(a, len, b, qlen, SBX_DNS_NXDOMAIN, false);
	/* too small a buffer: nothing, not a cut answer */
	for (size_t cap = 0; cap < qlen + 16; cap++)
		assert_int_equal(sbx_egress_dns_answer(b, n, &q, 0, addr, a, cap), 0);
	assert_int_equal(sbx_egress_dns_answer(b, n, &q, 0, addr, a, qlen + 16), qlen + 16);
	/* the longest name's answer fits 512 bytes */
	n = hand_query(b, 253, 63);
	assert_int_equal(parse_exact(b, n, &q), 0);
	len = sbx_egress_dns_answer(b, n, &q, 0, addr, a, sizeof a);
	check_answer(a, len, b, n, 0, true);
}

/* glibc's resolver, pointed at a socket of ours on 127.0.0.1 only. */
struct stub {
	uint16_t port;
	int type;
	int len;
	int herr;
	uint8_t ans[SBX_EGRESS_DNS_MAX];
};

static void *stub_query(void *arg)
{
	struct stub *s = arg;
	struct __res_state st;

	/* no cmocka assertion here: they must not jump out of a thread */
	memset(&st, 0, sizeof st);
	if (res_ninit(&st) != 0) {
		s->len = -2;
		return NULL;
	}
	/* exactly one server, ours: resolv.conf's are never asked */
	st.nscount = 1;
	st.nsaddr_list[0].sin_family = AF_INET;
	st.nsaddr_list[0].sin_port = htons(s->port);
	st.nsaddr_list[0].sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	st.options =
	    (st.options | RES_USE_EDNS0) & ~(unsigned long)RES_USEVC; /* UDP, whatever resolv.conf says */
	st.retrans = 5;
	st.retry = 1;
	s->len = res_nquery(&st, "Files.PythonHosted.org", C_IN, s->type, s->ans, sizeof s->ans);
	s->herr = st.res_h_errno;
	res_nclose(&st);
	return NULL;
}

/* One query from glibc's resolver, answered with addr for A. */
static void serve_one(int fd, struct stub *s)
{
	uint8_t b[2048], a[SBX_EGRESS_DNS_MAX];
	struct sockaddr_in from;
	socklen_t fl = sizeof from;
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	struct sbx_egress_dns_query q;
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, stub_query, s), 0);
	assert_int_equal(poll(&pfd, 1, 5000), 1);
	ssize_t n = recvfrom(fd, b, sizeof b, 0, (struct sockaddr *)&from, &fl);
	assert_true(n > 12);
	assert_int_equal(b[11], 1); /* glibc sent its OPT record */
	assert_int_equal(sbx_egress_dns_parse(b, (size_t)n, &q), 0);
	assert_string_equal(q.name, "files.pythonhosted.org");
	assert_int_equal(q.qtype, s->type);
	size_t len = sbx_egress_dns_answer(b, (size_t)n, &q, SBX_DNS_NOERROR, q.qtype == T_A ? addr : NULL, a,
					   sizeof a);
	assert_true(len > 0);
	assert_int_equal(sendto(fd, a, len, 0, (struct sockaddr *)&from, fl), (ssize_t)len);
	assert_int_equal(pthread_join(t, NULL), 0);
}

static void test_glibc_resolver(void **state)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sin;
	struct stub s = {.type = T_A};

	(void)state;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
	s.port = ntohs(sin.sin_port);
	serve_one(fd, &s);
	/* glibc took the answer (same id and question) and its one A record */
	assert_true(s.len > 12);
	assert_int_equal(s.ans[6] << 8 | s.ans[7], 1);
	assert_memory_equal(s.ans + s.len - 4, addr, 4);
	/* AAAA of an allowed name: NOERROR, no records (glibc: NO_DATA) */
	s.type = T_AAAA;
	serve_one(fd, &s);
	assert_int_equal(s.len, -1);
	assert_int_equal(s.herr, NO_DATA);
	close(fd);
}

static void test_names(void **state)
{
	struct sbx_egress_names *m = sbx_egress_names_new();
	char name[SBX_EGRESS_NAME_MAX + 1], got[SBX_EGRESS_NAME_MAX + 1];
	uint8_t a4[4], b4[4];

	(void)state;
	assert_int_equal(sbx_egress_names_addr(m, "pypi.org", a4), 0);
	assert_memory_equal(a4, addr, 4);
	assert_int_equal(sbx_egress_names_addr(m, "github.com", b4), 0);
	assert_memory_equal(b4, ((uint8_t[]){198, 18, 0, 3}), 4);
	assert_int_equal(sbx_egress_names_addr(m, "pypi.org", b4), 0);
	assert_memory_equal(a4, b4, 4);
	assert_true(sbx_egress_names_lookup(m, a4, got, sizeof got));
	assert_string_equal(got, "pypi.org");
	/* not given yet, not synthetic, or a buffer too small: no name */
	assert_false(sbx_egress_names_lookup(m, (uint8_t[]){198, 18, 0, 4}, got, sizeof got));
	assert_false(sbx_egress_names_lookup(m, (uint8_t[]){198, 18, 0, 1}, got, sizeof got));
	assert_false(sbx_egress_names_lookup(m, (uint8_t[]){10, 18, 0, 2}, got, sizeof got));
	assert_false(sbx_egress_names_lookup(m, a4, got, 8));
	assert_int_equal(sbx_egress_names_addr(m, "", a4), -EINVAL);
	memset(name, 'a', SBX_EGRESS_NAME_MAX);
	name[SBX_EGRESS_NAME_MAX] = '\0';
	assert_int_equal(sbx_egress_names_addr(m, name, a4), 0);
	sbx_egress_names_free(&m);
	assert_null(m);
	sbx_egress_names_free(&m);
}

static void test_names_full(void **state)
{
	struct sbx_egress_names *m = sbx_egress_names_new();
	static uint8_t seen[2][256][256];
	char name[32], got[SBX_EGRESS_NAME_MAX + 1];
	uint8_t a4[4];

	(void)state;
	for (int i = 0; i < SBX_EGRESS_NAMES_MAX; i++) {
		snprintf(name, sizeof name, "h%d.example.com", i);
		assert_int_equal(sbx_egress_names_addr(m, name, a4), 0);
		assert_true(sbx_egress_names_synthetic(a4));
		assert_true(a4[3] != 0 && a4[3] != 255);
		assert_int_equal(seen[a4[1] - 18][a4[2]][a4[3]]++, 0); /* each its own */
		assert_true(sbx_egress_names_lookup(m, a4, got, sizeof got));
		assert_string_equal(got, name);
	}
	assert_int_equal(sbx_egress_names_addr(m, "one.more.com", a4), -ENOSPC);
	/* the addresses never given, though 4096 names reach past them */
	assert_false(sbx_egress_names_lookup(m, (uint8_t[]){198, 18, 1, 0}, got, sizeof got));
	assert_false(sbx_egress_names_lookup(m, (uint8_t[]){198, 18, 0, 255}, got, sizeof got));
	assert_false(sbx_egress_names_lookup(m, (uint8_t[]){198, 18, 16, 255}, got, sizeof got));
	assert_int_equal(sbx_egress_names_addr(m, "h17.example.com", a4), 0);
	assert_true(sbx_egress_names_lookup(m, a4, got, sizeof got));
	assert_string_equal(got, "h17.example.com");
	sbx_egress_names_free(&m);
}

/* Two threads ask for the same names in opposite orders and look them up:
 * each name ends with one address, whoever asked first. */
#define RACE_NAMES 1000
struct racer {
	struct sbx_egress_names *m;
	bool backwards;
	uint8_t a4[RACE_NAMES][4];
	bool ok;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	char name[32], got[SBX_EGRESS_NAME_MAX + 1];

	r->ok = true;
	for (int k = 0; k < RACE_NAMES; k++) {
		int i = r->backwards ? RACE_NAMES - 1 - k : k;
		snprintf(name, sizeof name, "n%d.test", i);
		r->ok &= sbx_egress_names_addr(r->m, name, r->a4[i]) == 0;
		r->ok &= sbx_egress_names_lookup(r->m, r->a4[i], got, sizeof got) && strcmp(got, name) == 0;
	}
	return NULL;
}

static void test_names_threads(void **state)
{
	struct sbx_egress_names *m = sbx_egress_names_new();
	struct racer *r = calloc(2, sizeof *r);
	pthread_t t[2];
	uint8_t a4[4];

	(void)state;
	for (int i = 0; i < 2; i++) {
		r[i] = (struct racer){.m = m, .backwards = i == 1};
		assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	assert_true(r[0].ok && r[1].ok);
	assert_memory_equal(r[0].a4, r[1].a4, sizeof r[0].a4);
	/* exactly RACE_NAMES given: the next one is the one after them */
	assert_int_equal(sbx_egress_names_addr(m, "last.test", a4), 0);
	char got[SBX_EGRESS_NAME_MAX + 1];
	assert_false(sbx_egress_names_lookup(m, (uint8_t[]){a4[0], a4[1], a4[2], (uint8_t)(a4[3] + 1)}, got,
					     sizeof got));
	free(r);
	sbx_egress_names_free(&m);
}

static void test_synthetic(void **state)
{
	(void)state;
	assert_true(sbx_egress_names_synthetic((uint8_t[]){198, 18, 0, 0}));
	assert_true(sbx_egress_names_synthetic((uint8_t[]){198, 19, 255, 255}));
	assert_false(sbx_egress_names_synthetic((uint8_t[]){198, 17, 255, 255}));
	assert_false(sbx_egress_names_synthetic((uint8_t[]){198, 20, 0, 0}));
	assert_false(sbx_egress_names_synthetic((uint8_t[]){199, 18, 0, 2}));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_resolver_queries), cmocka_unit_test(test_name_limits),
	    cmocka_unit_test(test_malformed),	     cmocka_unit_test(test_answers),
	    cmocka_unit_test(test_glibc_resolver),   cmocka_unit_test(test_names),
	    cmocka_unit_test(test_names_full),	     cmocka_unit_test(test_names_threads),
	    cmocka_unit_test(test_synthetic),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
