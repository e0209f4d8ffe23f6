#pragma once
/* What a connection's first bytes say about where it goes: the TLS
 * ClientHello's server name (parsed by OpenSSL: a server SSL on a memory
 * BIO with SSL_CTX_set_client_hello_cb and SSL_client_hello_get0_ext), or
 * the HTTP request's Host (libhttp-parser). Pure and thread-safe; no
 * allocation kept. Fuzzed by tests/fuzz/fuzz_peek.c. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandbox/egress/rules.h"

/* The most bytes the gateway reads before it decides (a ClientHello in
 * one or more records, or an HTTP request's head): beyond, refused. */
#define SBX_EGRESS_PEEK_MAX (16 * 1024 + 5)

enum sbx_egress_proto {
	SBX_EGRESS_MORE,   /* not decided yet: read more (until the bound or the deadline) */
	SBX_EGRESS_TLS,	   /* a TLS ClientHello; name: its SNI ("" without one) */
	SBX_EGRESS_HTTP,   /* an HTTP/1.x request head; name: its Host without port ("" without one) */
	SBX_EGRESS_OTHER,  /* neither: decided by the destination (the sandbox's DNS name, or the address) */
	SBX_EGRESS_REFUSE, /* refused whatever the rules say; why says why */
};

struct sbx_egress_peek {
	enum sbx_egress_proto proto;
	char name[SBX_EGRESS_NAME_MAX + 1]; /* lowercase, no trailing dot, validated as a DNS name */
	char why[SBX_EGRESS_WHY_MAX]; /* REFUSE: "ECH refused", "malformed ClientHello", "Host is not a name",
					 ... */
};

/* buf[0..len): everything the client sent so far (len may reach
 * SBX_EGRESS_PEEK_MAX; at that bound MORE is never the answer). */
void sbx_egress_peek(const uint8_t *buf, size_t len, struct sbx_egress_peek *out);

/* A plain HTTP connection stays on the name it was decided on: every
 * request on it (keep-alive, pipelined) is parsed and must carry the same
 * Host (or none, HTTP/1.0); a request for another name ends it. Fed the
 * client's bytes in order, from the first one. */
struct sbx_egress_http;
struct sbx_egress_http *sbx_egress_http_new(const char *name);
void sbx_egress_http_free(struct sbx_egress_http **h);
/* 0: go on; -EPERM: a request names another host (why says which);
 * -EPROTO: not HTTP/1.x any more (an Upgrade other than websocket, a parse
 * error, a head over SBX_EGRESS_PEEK_MAX). After an accepted Upgrade
 * (websocket) or CONNECT refusal nothing more is parsed. */
int sbx_egress_http_feed(struct sbx_egress_http *h, const uint8_t *p, size_t n, char *why, size_t whysz);
