/* A TLS ClientHello's server name, read by OpenSSL (sandbox/egress/peek.h):
 * a server SSL on a memory BIO holding what the client sent, stopped in
 * its ClientHello callback. We never answer: the callback refuses the
 * handshake once it has read the extensions.
 *
 * Cost (measured once, -O2, OpenSSL 3.0.19): SSL_new and the parse of a
 * 317-byte hello take 10-15 us, a 100-byte prefix of it 7-11 us. A hello
 * sent a byte per read would cost that per byte, so hello_short() first
 * reads the record framing (not the hello) and OpenSSL is asked only once
 * the first handshake message could be whole. */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/tls1.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/egress/peek_int.h"

/* encrypted_client_hello (RFC 9849), and the ESNI drafts' older code
 * point. Refused even when it is GREASE: a client offering real ECH puts
 * only its public name (the ECH provider's) in the outer SNI, so that SNI
 * says nothing about where it goes, and GREASE is built to look exactly
 * like real ECH from outside. Clients then fall back to the plain SNI. */
static const unsigned ech_types[] = {0xfe0d, 0xffce};

struct hello {
	bool seen; /* the callback ran: OpenSSL read a whole ClientHello */
	bool ech;
	bool malformed; /* its server_name extension is not one host_name */
	enum peek_name kind;
	char name[SBX_EGRESS_NAME_MAX + 1];
};

static SSL_CTX *ctx;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static bool has_ext(SSL *s, unsigned type)
{
	const unsigned char *p;
	size_t n;

	return SSL_client_hello_get0_ext(s, type, &p, &n) == 1;
}

/* RFC 6066 3: a list (two-byte length) of {type, two-byte length, name};
 * like OpenSSL, exactly one entry, of type host_name. */
static void sni_parse(const unsigned char *p, size_t n, struct hello *h)
{
	size_t len;

	h->kind = PEEK_NAME_NONE;
	if (n < 5 || (size_t)(p[0] << 8 | p[1]) != n - 2 || p[2] != TLSEXT_NAMETYPE_host_name) {
		h->malformed = true;
		return;
	}
	len = (size_t)(p[3] << 8 | p[4]);
	if (len == 0 || len != n - 5) {
		h->malformed = true;
		return;
	}
	h->kind = peek_name_check((const char *)p + 5, len, h->name);
}

static int on_client_hello(SSL *s, int *al, void *arg)
{
	struct hello *h = SSL_get_app_data(s);
	const unsigned char *p;
	size_t n;

	(void)arg;
	h->seen = true;
	for (size_t i = 0; i < sizeof ech_types / sizeof ech_types[0]; i++)
		h->ech = h->ech || has_ext(s, ech_types[i]);
	h->kind = PEEK_NAME_NONE;
	if (SSL_client_hello_get0_ext(s, TLSEXT_TYPE_server_name, &p, &n) == 1)
		sni_parse(p, n, h);
	*al = SSL_AD_HANDSHAKE_FAILURE;
	return SSL_CLIENT_HELLO_ERROR;
}

static void ctx_make(void)
{
	ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx)
		abort();
	/* OpenSSL keeps an extension it does not know for
	 * SSL_client_hello_get0_ext only when it is registered. */
	for (size_t i = 0; i < sizeof ech_types / sizeof ech_types[0]; i++)
		if (SSL_CTX_add_custom_ext(ctx, ech_types[i], SSL_EXT_CLIENT_HELLO, NULL, NULL, NULL, NULL,
					   NULL) != 1)
			abort();
	SSL_CTX_set_client_hello_cb(ctx, on_client_hello, NULL);
	ERR_clear_error();
}

/* SSL_get_error of a handshake over buf[0..len), h filled by the callback. */
static int handshake(const uint8_t *buf, size_t len, struct hello *h)
{
	SSL *s = SSL_new(ctx);
	BIO *in = BIO_new_mem_buf(buf, (int)len), *sink = BIO_new(BIO_s_null());
	int rc;

	if (!s || !in || !sink)
		abort();
	/* the end of what was read so far is "not yet", not end of stream */
	BIO_set_mem_eof_return(in, -1);
	SSL_set_bio(s, in, sink);
	SSL_set_app_data(s, h);
	SSL_set_accept_state(s);
	rc = SSL_get_error(s, SSL_do_handshake(s));
	SSL_free(s);
	/* the refusal (ours or OpenSSL's) stays out of the thread's queue */
	ERR_clear_error();
	return rc;
}

/* buf[0..len) certainly holds less than the first handshake message:
 * non-empty handshake records so far, their payload short of the length
 * the message's header gives. Anything else is OpenSSL's to judge. */
static bool hello_short(const uint8_t *buf, size_t len)
{
	uint8_t hs[4];
	size_t off = 0, got = 0, rlen, avail;

	while (off < len) {
		if (len - off < 5)
			return true;
		rlen = (size_t)(buf[off + 3] << 8 | buf[off + 4]);
		if (buf[off] != 22 || buf[off + 1] != 3 || rlen == 0)
			return false;
		avail = rlen < len - off - 5 ? rlen : len - off - 5;
		for (size_t i = 0; i < avail && got + i < sizeof hs; i++)
			hs[got + i] = buf[off + 5 + i];
		got += avail;
		if (got >= 1 && hs[0] != SSL3_MT_CLIENT_HELLO)
			return false;
		if (got >= sizeof hs && got >= sizeof hs + ((size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3]))
			return false;
		if (avail < rlen)
			return true;
		off += 5 + rlen;
	}
	return true;
}

void peek_tls(const uint8_t *buf, size_t len, struct sbx_egress_peek *out)
{
	struct hello h = {0};
	int err;

	if (len < 2)
		return;
	if (buf[1] != 3) {
		out->proto = SBX_EGRESS_OTHER;
		return;
	}
	if (len < SBX_EGRESS_PEEK_MAX && hello_short(buf, len))
		return;
	pthread_once(&ctx_once, ctx_make);
	err = handshake(buf, len, &h);
	if (!h.seen) {
		if (err != SSL_ERROR_WANT_READ)
			peek_refuse(out, "malformed ClientHello");
		else if (len >= SBX_EGRESS_PEEK_MAX)
			peek_refuse(out, "ClientHello too long");
		return;
	}
	if (h.ech)
		peek_refuse(out, "ECH refused");
	else if (h.malformed)
		peek_refuse(out, "malformed ClientHello");
	else if (h.kind == PEEK_NAME_BAD)
		peek_refuse(out, "SNI is not a name");
	else {
		out->proto = SBX_EGRESS_TLS;
		snprintf(out->name, sizeof out->name, "%s", h.kind == PEEK_NAME_OK ? h.name : "");
	}
}
