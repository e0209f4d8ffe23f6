/* libFuzzer: what a connection's first bytes say (sandbox/egress/peek.h).
 * Invariants: a verdict is one of the five; a refusal says why; a name is
 * "" or a lowercase DNS hostname; at SBX_EGRESS_PEEK_MAX bytes the answer
 * is never MORE; a prefix that decides decides as the whole does (a
 * later byte cannot change a verdict already given); the HTTP stream
 * check answers the same whatever the pieces it is fed in, and a refusal
 * says why. Build: scripts/fuzz. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/egress/peek.h"

static void check_name(const char *s)
{
	size_t n = strlen(s), start = 0;

	if (n > SBX_EGRESS_NAME_MAX || strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") != n)
		abort();
	for (size_t i = 0; n && i <= n; i++) {
		if (i < n && s[i] != '.')
			continue;
		if (i == start || i - start > 63 || s[start] == '-' || s[i - 1] == '-')
			abort();
		start = i + 1;
	}
}

static void check_verdict(const struct sbx_egress_peek *p)
{
	if (p->proto < SBX_EGRESS_MORE || p->proto > SBX_EGRESS_REFUSE)
		abort();
	if (p->proto == SBX_EGRESS_REFUSE && (!p->why[0] || p->name[0]))
		abort();
	if (p->proto != SBX_EGRESS_TLS && p->proto != SBX_EGRESS_HTTP && p->name[0])
		abort();
	check_name(p->name);
}

/* The data repeated to the bound: never MORE there. */
static void check_bound(const uint8_t *data, size_t size)
{
	uint8_t *big = malloc(SBX_EGRESS_PEEK_MAX);
	struct sbx_egress_peek p;

	for (size_t i = 0; i < SBX_EGRESS_PEEK_MAX; i++)
		big[i] = data[i % size];
	sbx_egress_peek(big, SBX_EGRESS_PEEK_MAX, &p);
	check_verdict(&p);
	if (p.proto == SBX_EGRESS_MORE)
		abort();
	free(big);
}

/* The stream check's answer to data in pieces whose sizes come from seed
 * (0: one piece). */
static int stream(const char *name, const uint8_t *data, size_t size, uint32_t seed, char *why, size_t whysz)
{
	struct sbx_egress_http *h = sbx_egress_http_new(name);
	size_t off = 0, step;
	int rc = 0;

	why[0] = '\0';
	while (off < size && rc == 0) {
		step = size - off;
		if (seed) {
			seed = seed * 1103515245u + 12345u;
			step = 1 + (seed >> 16) % 64 < step ? 1 + (seed >> 16) % 64 : step;
		}
		rc = sbx_egress_http_feed(h, data + off, step, why, whysz);
		off += step;
	}
	sbx_egress_http_free(&h);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_egress_peek whole, part;
	char why[SBX_EGRESS_WHY_MAX], why1[SBX_EGRESS_WHY_MAX];
	uint32_t seed = 0;
	int rc;

	sbx_egress_peek(data, size, &whole);
	check_verdict(&whole);
	for (size_t i = 0; i < size; i++)
		seed = seed * 31 + data[i];
	/* a prefix that decides already gave the whole's verdict */
	sbx_egress_peek(data, size ? seed % size : 0, &part);
	check_verdict(&part);
	if (part.proto != SBX_EGRESS_MORE &&
	    (part.proto != whole.proto || strcmp(part.name, whole.name) || strcmp(part.why, whole.why)))
		abort();
	/* a 16 KiB parse per input would be most of the run: one in eight */
	if (size && seed % 8 == 0)
		check_bound(data, size);
	rc = stream(whole.proto == SBX_EGRESS_HTTP ? whole.name : "a.com", data, size, 0, why, sizeof why);
	if (rc != 0 && rc != -EPERM && rc != -EPROTO)
		abort();
	if (rc && !why[0])
		abort();
	if (stream(whole.proto == SBX_EGRESS_HTTP ? whole.name : "a.com", data, size, seed | 1, why1,
		   sizeof why1) != rc ||
	    strcmp(why, why1) != 0)
		abort();
	return 0;
}
