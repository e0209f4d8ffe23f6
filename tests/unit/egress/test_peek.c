/* What a connection's first bytes say (sandbox/egress/peek.h): real
 * ClientHellos made by OpenSSL's client, damaged and extended ones, HTTP
 * heads, and the stream check of plain HTTP connections. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "sandbox/egress/peek.h"

#define HELLO_MAX (64 * 1024)

struct hello {
	uint8_t b[HELLO_MAX];
	size_t len;
};

/* A client extension of the test's choosing: type and size. */
struct ext {
	unsigned type;
	size_t size;
};

static int ext_add(SSL *s, unsigned type, unsigned ctx, const unsigned char **out, size_t *outlen, X509 *x,
		   size_t chainidx, int *al, void *arg)
{
	const struct ext *e = arg;
	unsigned char *p = calloc(1, e->size ? e->size : 1);

	(void)s;
	(void)type;
	(void)ctx;
	(void)x;
	(void)chainidx;
	(void)al;
	*out = p;
	*outlen = e->size;
	return 1;
}

static void ext_free(SSL *s, unsigned type, unsigned ctx, const unsigned char *out, void *arg)
{
	(void)s;
	(void)type;
	(void)ctx;
	(void)arg;
	free((void *)out);
}

/* The first flight of OpenSSL's client: TLS up to max_version, SNI sni
 * (NULL: none), records of at most frag bytes (0: the default), an extra
 * extension when e is not NULL. */
static void make_hello(struct hello *h, int max_version, const char *sni, size_t frag, const struct ext *e)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *s;
	BIO *in = BIO_new(BIO_s_mem()), *out = BIO_new(BIO_s_mem());
	int n;

	assert_non_null(ctx);
	assert_int_equal(SSL_CTX_set_max_proto_version(ctx, max_version), 1);
	if (frag)
		assert_int_equal(SSL_CTX_set_max_send_fragment(ctx, frag), 1);
	if (e)
		assert_int_equal(SSL_CTX_add_custom_ext(ctx, e->type, SSL_EXT_CLIENT_HELLO, ext_add, ext_free,
							(void *)e, NULL, NULL),
				 1);
	s = SSL_new(ctx);
	assert_non_null(s);
	SSL_set_bio(s, in, out);
	if (sni)
		assert_int_equal(SSL_set_tlsext_host_name(s, sni), 1);
	assert_int_equal(SSL_connect(s), -1);
	assert_int_equal(SSL_get_error(s, -1), SSL_ERROR_WANT_READ);
	n = BIO_read(out, h->b, sizeof h->b);
	assert_true(n > 0);
	h->len = (size_t)n;
	SSL_free(s);
	SSL_CTX_free(ctx);
}

static struct sbx_egress_peek peek(const uint8_t *b, size_t n)
{
	struct sbx_egress_peek p;

	sbx_egress_peek(b, n, &p);
	return p;
}

static void expect(const uint8_t *b, size_t n, enum sbx_egress_proto proto, const char *name_or_why)
{
	struct sbx_egress_peek p = peek(b, n);

	if (p.proto != proto)
		fail_msg("proto %d, not %d (why '%s', name '%s')", p.proto, proto, p.why, p.name);
	if (proto == SBX_EGRESS_REFUSE)
		assert_string_equal(p.why, name_or_why);
	else if (name_or_why)
		assert_string_equal(p.name, name_or_why);
	/* no refusal of ours or of OpenSSL's stays queued on this thread */
	assert_int_equal(ERR_peek_error(), 0);
}

static void expect_str(const char *s, enum sbx_egress_proto proto, const char *name_or_why)
{
	expect((const uint8_t *)s, strlen(s), proto, name_or_why);
}

/* Every prefix is MORE, the whole is proto. */
static void expect_prefixes(const uint8_t *b, size_t n, enum sbx_egress_proto proto, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (peek(b, i).proto != SBX_EGRESS_MORE)
			fail_msg("prefix of %zu of %zu bytes decided %d", i, n, peek(b, i).proto);
	expect(b, n, proto, name);
}

static void tls13_sni_every_prefix(void **state)
{
	struct hello h;

	(void)state;
	make_hello(&h, TLS1_3_VERSION, "Api.Example.COM", 0, NULL);
	expect_prefixes(h.b, h.len, SBX_EGRESS_TLS, "api.example.com");
}

static void tls12_sni_every_prefix(void **state)
{
	struct hello h;

	(void)state;
	make_hello(&h, TLS1_2_VERSION, "pypi.org", 0, NULL);
	expect_prefixes(h.b, h.len, SBX_EGRESS_TLS, "pypi.org");
}

static void tls_without_sni(void **state)
{
	struct hello h;

	(void)state;
	make_hello(&h, TLS1_3_VERSION, NULL, 0, NULL);
	expect(h.b, h.len, SBX_EGRESS_TLS, "");
	make_hello(&h, TLS1_2_VERSION, NULL, 0, NULL);
	expect(h.b, h.len, SBX_EGRESS_TLS, "");
}

/* RFC 6066: no address literals in SNI; one is no name at all. Names
 * that are not hostnames are refused, not passed on. */
static void tls_sni_not_a_name(void **state)
{
	static const char *bad[] = {"bad_name.example.com", "example.com.", "-a.example.com", "a..b", "a b"};
	struct hello h;

	(void)state;
	make_hello(&h, TLS1_3_VERSION, "127.0.0.1", 0, NULL);
	expect(h.b, h.len, SBX_EGRESS_TLS, "");
	make_hello(&h, TLS1_3_VERSION, "2130706433", 0, NULL);
	expect(h.b, h.len, SBX_EGRESS_TLS, "");
	make_hello(&h, TLS1_3_VERSION, "::1", 0, NULL);
	expect(h.b, h.len, SBX_EGRESS_TLS, "");
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		make_hello(&h, TLS1_3_VERSION, bad[i], 0, NULL);
		expect(h.b, h.len, SBX_EGRESS_REFUSE, "SNI is not a name");
	}
}

/* Records of 512 bytes and a 3000-byte extension: the hello spans records. */
static void tls_hello_across_records(void **state)
{
	const struct ext big = {0x1234, 3000};
	struct hello h;

	(void)state;
	make_hello(&h, TLS1_3_VERSION, "files.example.org", 512, &big);
	assert_true(h.len > 3 * 512);
	assert_int_equal(h.b[512 + 5], 22); /* a second record header */
	expect_prefixes(h.b, h.len, SBX_EGRESS_TLS, "files.example.org");
}

static void tls_hello_over_the_bound(void **state)
{
	const struct ext huge = {0x1234, 20000};
	struct hello h;

	(void)state;
	make_hello(&h, TLS1_3_VERSION, "x.example.org", 0, &huge);
	assert_true(h.len > SBX_EGRESS_PEEK_MAX);
	expect(h.b, SBX_EGRESS_PEEK_MAX - 1, SBX_EGRESS_MORE, NULL);
	expect(h.b, SBX_EGRESS_PEEK_MAX, SBX_EGRESS_REFUSE, "ClientHello too long");
}

/* encrypted_client_hello, even GREASE (an empty or random one looks the same). */
static void tls_ech_refused(void **state)
{
	const struct ext ech = {0xfe0d, 40}, esni = {0xffce, 40};
	struct hello h;

	(void)state;
	make_hello(&h, TLS1_3_VERSION, "public.example.net", 0, &ech);
	expect(h.b, h.len, SBX_EGRESS_REFUSE, "ECH refused");
	make_hello(&h, TLS1_3_VERSION, NULL, 0, &ech);
	expect(h.b, h.len, SBX_EGRESS_REFUSE, "ECH refused");
	make_hello(&h, TLS1_3_VERSION, "public.example.net", 0, &esni);
	expect(h.b, h.len, SBX_EGRESS_REFUSE, "ECH refused");
}

static uint8_t *find(struct hello *h, const char *s)
{
	uint8_t *p = memmem(h->b, h->len, s, strlen(s));

	assert_non_null(p);
	return p;
}

/* The lengths around the name, wrong in each direction. */
static void tls_truncated_lengths(void **state)
{
	struct hello h;
	uint8_t *name;

	(void)state;
	make_hello(&h, TLS1_3_VERSION, "example.com", 0, NULL);
	name = find(&h, "example.com");
	name[-1] = 10; /* the name's length: one short */
	expect(h.b, h.len, SBX_EGRESS_REFUSE, "malformed ClientHello");
	make_hello(&h, TLS1_3_VERSION, "example.com", 0, NULL);
	name = find(&h, "example.com");
	name[-4] = 15; /* the list's length: one long */
	expect(h.b, h.len, SBX_EGRESS_REFUSE, "malformed ClientHello");
	make_hello(&h, TLS1_3_VERSION, "example.com", 0, NULL);
	name = find(&h, "example.com");
	name[-6] = 17; /* the extension's length: past the list */
	expect(h.b, h.len, SBX_EGRESS_REFUSE, "malformed ClientHello");
	make_hello(&h, TLS1_3_VERSION, "example.com", 0, NULL);
	name = find(&h, "example.com");
	name[-3] = 1; /* a name type other than host_name */
	expect(h.b, h.len, SBX_EGRESS_REFUSE, "malformed ClientHello");
	make_hello(&h, TLS1_3_VERSION, "example.com", 0, NULL);
	h.b[8]++; /* the handshake message claims a byte more than the record holds: wait for it */
	expect(h.b, h.len, SBX_EGRESS_MORE, NULL);
	h.b[8] -= 2; /* a byte less: the record holds more than the message */
	expect(h.b, h.len, SBX_EGRESS_REFUSE, "malformed ClientHello");
}

static void tls_garbage(void **state)
{
	static const uint8_t not_hello[] = {22, 3, 1, 0, 4, 2, 0, 0, 0};  /* a ServerHello */
	static const uint8_t not_tls[] = {22, 4, 1, 0, 4};		  /* version 4.x */
	static const uint8_t sslv2[] = {0x80, 0x2e, 0x01, 0x03, 0x01, 0}; /* SSLv2-format hello */
	uint8_t noise[600], empty[40 * 5];

	(void)state;
	expect(not_hello, sizeof not_hello, SBX_EGRESS_REFUSE, "malformed ClientHello");
	/* OpenSSL waits past a few empty records, not past 32 */
	for (size_t i = 0; i < sizeof empty; i += 5)
		memcpy(empty + i, (const uint8_t[]){22, 3, 1, 0, 0}, 5);
	expect(empty, 5, SBX_EGRESS_MORE, NULL);
	expect(empty, sizeof empty, SBX_EGRESS_REFUSE, "malformed ClientHello");
	expect(not_tls, sizeof not_tls, SBX_EGRESS_OTHER, NULL);
	expect(not_tls, 1, SBX_EGRESS_MORE, NULL);
	expect(sslv2, sizeof sslv2, SBX_EGRESS_REFUSE, "SSLv2 ClientHello refused");
	srand(29);
	for (size_t i = 0; i < sizeof noise; i++)
		noise[i] = (uint8_t)rand();
	memcpy(noise, (const uint8_t[]){22, 3, 3, 2, 0, 1, 0, 1, 0xfc}, 9);
	expect(noise, sizeof noise, SBX_EGRESS_REFUSE, "malformed ClientHello");
}

static void http_host(void **state)
{
	static const char req[] =
	    "GET /index.html HTTP/1.1\r\nUser-Agent: t\r\nHost: Example.COM:8080\r\n\r\n";

	(void)state;
	expect_prefixes((const uint8_t *)req, strlen(req), SBX_EGRESS_HTTP, "example.com");
	expect_str("GET / HTTP/1.1\r\nhost:  pypi.org  \r\n\r\nbody", SBX_EGRESS_HTTP, "pypi.org");
	expect_str("GET / HTTP/1.0\r\n\r\n", SBX_EGRESS_HTTP, "");
	expect_str("GET / HTTP/1.1\r\nHost: 127.0.0.1:80\r\n\r\n", SBX_EGRESS_HTTP, "");
	expect_str("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", SBX_EGRESS_HTTP, "");
	expect_str("GET / HTTP/1.1\r\nHost: 0x7f.1\r\n\r\n", SBX_EGRESS_HTTP, "");
}

static void http_host_not_a_name(void **state)
{
	static const char *bad[] = {"bad_name.com",  "a..b", "-a.com", "a-.com",     "x.com:80x",
				    "[example.com]", "::1",  "a@b",    "x.com:80:80"};
	char req[600], label[70];

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", bad[i]);
		expect_str(req, SBX_EGRESS_REFUSE, "Host is not a name");
	}
	memset(label, 'a', 64);
	label[64] = '\0';
	snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: %s.com\r\n\r\n", label);
	expect_str(req, SBX_EGRESS_REFUSE, "Host is not a name");
	label[63] = '\0';
	snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: %s.com\r\n\r\n", label);
	expect_str(req, SBX_EGRESS_HTTP, NULL);
	/* 253 characters pass, 254 do not */
	snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: %s.%s.%s.%.61s\r\n\r\n", label, label, label,
		 label);
	expect_str(req, SBX_EGRESS_HTTP, NULL);
	snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: %s.%s.%s.%.62s\r\n\r\n", label, label, label,
		 label);
	expect_str(req, SBX_EGRESS_REFUSE, "Host is not a name");
}

/* RFC 9112 3.2.2: the target's authority is the request's host. */
static void http_absolute_form(void **state)
{
	(void)state;
	expect_str("GET http://Example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n", SBX_EGRESS_HTTP,
		   "example.com");
	expect_str("GET http://example.com HTTP/1.0\r\n\r\n", SBX_EGRESS_HTTP, "example.com");
	expect_str("GET http://example.com:81/?q HTTP/1.1\r\nHost: example.com:81\r\n\r\n", SBX_EGRESS_HTTP,
		   "example.com");
	expect_str("GET http://evil.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", SBX_EGRESS_REFUSE,
		   "Host disagrees with the request target");
	expect_str("GET http://u@evil.com/ HTTP/1.1\r\nHost: evil.com\r\n\r\n", SBX_EGRESS_REFUSE,
		   "request target is not a URL with a name");
	expect_str("GET ftp://evil.com/ HTTP/1.1\r\n\r\n", SBX_EGRESS_REFUSE,
		   "request target is not a URL with a name");
}

static void http_refused(void **state)
{
	char *big = malloc(SBX_EGRESS_PEEK_MAX);

	(void)state;
	expect_str("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", SBX_EGRESS_REFUSE,
		   "CONNECT refused");
	expect_str("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", SBX_EGRESS_REFUSE, "HTTP/2 without TLS refused");
	expect_str("PRI * HTTP/2", SBX_EGRESS_MORE, NULL);
	expect_str("GET / HTTP/1.1\r\nHost: a.com\r\nHost: b.com\r\n\r\n", SBX_EGRESS_REFUSE,
		   "two Host headers");
	expect_str("GET / HTTP/1.1\r\nHost:\r\nHost: b.com\r\n\r\n", SBX_EGRESS_REFUSE, "two Host headers");
	expect_str("GET / HTTP/1.1\r\nHost a.com\r\n\r\n", SBX_EGRESS_REFUSE, "malformed HTTP request");
	expect_str("GET / HTTP/3.0\r\nHost: a.com\r\n\r\n", SBX_EGRESS_REFUSE, "not HTTP/1.x");
	memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
	memset(big + 19, 'a', SBX_EGRESS_PEEK_MAX - 19);
	expect((const uint8_t *)big, SBX_EGRESS_PEEK_MAX - 1, SBX_EGRESS_MORE, NULL);
	expect((const uint8_t *)big, SBX_EGRESS_PEEK_MAX, SBX_EGRESS_REFUSE, "request head too long");
	free(big);
}

static void other_protocols(void **state)
{
	static const uint8_t zero[] = {0, 0, 0, 0};

	(void)state;
	expect_str("G", SBX_EGRESS_MORE, NULL);
	expect_str("GE", SBX_EGRESS_MORE, NULL);
	expect_str("GX", SBX_EGRESS_OTHER, NULL);
	expect_str("SSH-2.0-OpenSSH_9.2\r\n", SBX_EGRESS_OTHER, NULL);
	expect_str("get / HTTP/1.1\r\n", SBX_EGRESS_OTHER, NULL);
	expect(zero, sizeof zero, SBX_EGRESS_OTHER, NULL);
	expect(zero, 0, SBX_EGRESS_MORE, NULL);
}

/* The stream check fed s in pieces of step bytes: its last answer. */
static int feed(const char *name, const char *s, size_t step, char *why, size_t whysz)
{
	struct sbx_egress_http *h = sbx_egress_http_new(name);
	size_t n = strlen(s);
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i += step)
		rc = sbx_egress_http_feed(h, (const uint8_t *)s + i, n - i < step ? n - i : step, why, whysz);
	sbx_egress_http_free(&h);
	assert_null(h);
	return rc;
}

/* The same answer whatever the pieces. */
static void expect_stream(const char *name, const char *s, int want, const char *why_part)
{
	static const size_t steps[] = {1, 2, 7, 100000};
	char why[SBX_EGRESS_WHY_MAX];

	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		why[0] = '\0';
		if (feed(name, s, steps[i], why, sizeof why) != want)
			fail_msg("pieces of %zu: not %d (%s)", steps[i], want, why);
		if (why_part && !strstr(why, why_part))
			fail_msg("why '%s' lacks '%s'", why, why_part);
	}
}

static void stream_keep_alive(void **state)
{
	(void)state;
	expect_stream("a.com",
		      "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n"
		      "POST /x HTTP/1.1\r\nHost: A.com:80\r\nContent-Length: 5\r\n\r\nhello"
		      "GET / HTTP/1.0\r\n\r\n",
		      0, NULL);
	expect_stream("a.com",
		      "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n"
		      "GET / HTTP/1.1\r\nHost: b.com\r\n\r\n",
		      -EPERM, "request for b.com on a connection to a.com");
	expect_stream("a.com", "GET / HTTP/1.1\r\n\r\n", -EPERM, "request for no name");
	expect_stream("", "GET / HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\nGET / HTTP/1.1\r\nHost: b.com\r\n\r\n",
		      -EPERM, "request for b.com on a connection to an address");
	expect_stream("a.com", "CONNECT a.com:443 HTTP/1.1\r\nHost: a.com\r\n\r\n", -EPERM,
		      "CONNECT refused");
}

/* A body is skipped, whatever it holds: a Host line in it is not read. */
static void stream_bodies_not_read(void **state)
{
	(void)state;
	expect_stream("a.com",
		      "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n"
		      "14\r\n\r\nHost: evil.com\r\n\r\n\r\n0\r\n\r\n"
		      "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n",
		      0, NULL);
	expect_stream("a.com",
		      "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 34\r\n\r\n"
		      "GET / HTTP/1.1\r\nHost: evil.com\r\n\r\n",
		      0, NULL);
	/* both lengths: smuggling, refused by the parser */
	expect_stream(
	    "a.com",
	    "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "0\r\n\r\n",
	    -EPROTO, NULL);
}

static void stream_upgrade(void **state)
{
	(void)state;
	expect_stream("a.com",
		      "GET /ws HTTP/1.1\r\nHost: a.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
		      "\x81\x85 not http \r\nHost: evil.com\r\n\r\n",
		      0, NULL);
	expect_stream("a.com", "GET / HTTP/1.1\r\nHost: a.com\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
		      -EPROTO, "Upgrade to h2c refused");
}

static void stream_not_http(void **state)
{
	static const char head[] = "GET / HTTP/1.1\r\nHost: a.com\r\nX: ";
	char *big = malloc(SBX_EGRESS_PEEK_MAX + 64);

	(void)state;
	expect_stream("a.com", "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n\x16\x03\x01", -EPROTO, "not HTTP/1.x");
	memset(big, 'a', SBX_EGRESS_PEEK_MAX + 63);
	memcpy(big, head, strlen(head));
	big[SBX_EGRESS_PEEK_MAX + 63] = '\0';
	expect_stream("a.com", big, -EPROTO, "not HTTP/1.x");
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(tls13_sni_every_prefix),
	    cmocka_unit_test(tls12_sni_every_prefix),
	    cmocka_unit_test(tls_without_sni),
	    cmocka_unit_test(tls_sni_not_a_name),
	    cmocka_unit_test(tls_hello_across_records),
	    cmocka_unit_test(tls_hello_over_the_bound),
	    cmocka_unit_test(tls_ech_refused),
	    cmocka_unit_test(tls_truncated_lengths),
	    cmocka_unit_test(tls_garbage),
	    cmocka_unit_test(http_host),
	    cmocka_unit_test(http_host_not_a_name),
	    cmocka_unit_test(http_absolute_form),
	    cmocka_unit_test(http_refused),
	    cmocka_unit_test(other_protocols),
	    cmocka_unit_test(stream_keep_alive),
	    cmocka_unit_test(stream_bodies_not_read),
	    cmocka_unit_test(stream_upgrade),
	    cmocka_unit_test(stream_not_http),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
