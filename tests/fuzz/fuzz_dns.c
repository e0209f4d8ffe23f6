/* libFuzzer: the sandbox's DNS (sandbox/egress/dns.h), which reads what
 * a sandboxed command sends to 127.0.0.53. Invariants: a query parses only
 * with a name of lowercase [a-z0-9_-] labels of 1..63 bytes, at most 253
 * characters; its answer, into any buffer, is either nothing (too small)
 * or exactly the header, the question as sent and the A record asked
 * for, under 512 bytes, and parses back (as a query, once its response
 * bits and record are taken off) to the same id, name, type and class.
 * Build: scripts/fuzz. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/egress/dns.h"

static void check_name(const char *name)
{
	size_t len = strlen(name), label = 0;

	if (len < 1 || len > SBX_EGRESS_NAME_MAX ||
	    strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != len)
		abort();
	for (size_t i = 0; i <= len; i++) {
		if (name[i] != '.' && name[i] != '\0') {
			label++;
			continue;
		}
		if (label < 1 || label > 63)
			abort();
		label = 0;
	}
}

/* a[0..len) answers q (rcode, a4): re-read it as the query it came from. */
static void check_answer(const uint8_t *a, size_t len, const struct sbx_egress_dns_query *q, int rcode,
			 const uint8_t *a4)
{
	static const uint8_t rr[12] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, SBX_EGRESS_DNS_TTL, 0, 4};
	size_t qend = 12 + strlen(q->name) + 2 + 4;
	struct sbx_egress_dns_query back;
	uint8_t copy[SBX_EGRESS_DNS_MAX];

	if (len != qend + (a4 ? 16 : 0) || len >= 512)
		abort();
	if ((a[2] & 0xfe) != 0x84 || a[3] != rcode || a[6] != 0 || a[7] != (a4 ? 1 : 0))
		abort();
	if (a4 && (memcmp(a + qend, rr, sizeof rr) != 0 || memcmp(a + qend + 12, a4, 4) != 0))
		abort();
	memcpy(copy, a, qend);
	copy[2] &= 0x01;
	copy[3] = 0;
	copy[7] = 0;
	if (sbx_egress_dns_parse(copy, qend, &back) != 0 || back.id != q->id || back.qtype != q->qtype ||
	    back.qclass != q->qclass || strcmp(back.name, q->name) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t caps[] = {0, 11, 12, 29, 30, 45, 46, 200, 283, 286, 287, SBX_EGRESS_DNS_MAX};
	static const uint8_t a4[4] = {198, 18, 0, 2};
	struct sbx_egress_dns_query q;

	if (sbx_egress_dns_parse(data, size, &q) != 0)
		return 0;
	check_name(q.name);
	for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
		for (int with = 0; with < 2; with++) {
			size_t need = 12 + strlen(q.name) + 2 + 4 + (with ? 16 : 0);
			int rcode = with ? SBX_DNS_NOERROR : SBX_DNS_REFUSED;
			/* exactly cap bytes, so that ASan sees a write past them */
			uint8_t *out = malloc(caps[i] ? caps[i] : 1);
			size_t len =
			    sbx_egress_dns_answer(data, size, &q, rcode, with ? a4 : NULL, out, caps[i]);
			if (caps[i] < need ? len != 0 : len == 0)
				abort();
			if (len)
				check_answer(out, len, &q, rcode, with ? a4 : NULL);
			free(out);
		}
	}
	return 0;
}
