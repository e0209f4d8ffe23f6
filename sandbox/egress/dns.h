#pragma once
/* The sandbox's DNS: the egress gateway answers every UDP query a
 * networked command sends (its resolv.conf names 127.0.0.53; any other
 * port-53 destination is redirected there too). An allowed name gets a
 * synthetic IPv4 address from 198.18.0.0/15, one per name per command,
 * which the gateway maps back to the name when the command connects to it
 * (protocols without SNI or Host are decided on that name); AAAA and other
 * types of an allowed name get an empty answer (NOERROR, no records:
 * clients use the A); a name not allowed gets REFUSED. Nothing is ever
 * forwarded to a real resolver: the sandbox learns no real address, and no
 * data leaves through DNS. Pure (no sockets); fuzzed by
 * tests/fuzz/fuzz_dns.c. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandbox/egress/rules.h"

#define SBX_EGRESS_DNS_MAX 512	  /* the largest query or answer (no EDNS larger answers) */
#define SBX_EGRESS_NAMES_MAX 4096 /* synthetic names per command */
#define SBX_EGRESS_DNS_TTL 60	  /* seconds, in every answer */

struct sbx_egress_dns_query {
	uint16_t id;
	uint16_t qtype, qclass;
	char name[SBX_EGRESS_NAME_MAX + 1]; /* lowercase, no trailing dot */
};

/* One standard query with one question (QR 0, OPCODE 0, QDCOUNT 1; an
 * EDNS OPT record in additional is accepted). 0, or -EINVAL (anything
 * else: the gateway drops it and records a refusal). */
int sbx_egress_dns_parse(const uint8_t *p, size_t n, struct sbx_egress_dns_query *q);

enum { SBX_DNS_NOERROR = 0, SBX_DNS_FORMERR = 1, SBX_DNS_NXDOMAIN = 3, SBX_DNS_REFUSED = 5 };
/* The answer to query p[0..n) (parsed as q): rcode, and with a4 (NULL:
 * none) one A record. Returns its length in out, or 0 when cap is too
 * small. */
size_t sbx_egress_dns_answer(const uint8_t *p, size_t n, const struct sbx_egress_dns_query *q, int rcode,
			     const uint8_t *a4, uint8_t *out, size_t cap);

/* The synthetic addresses of one command. Thread-safe. */
struct sbx_egress_names;
struct sbx_egress_names *sbx_egress_names_new(void);
void sbx_egress_names_free(struct sbx_egress_names **m);
/* name's address (the same one each time), assigned on first use. 0, or
 * -ENOSPC past SBX_EGRESS_NAMES_MAX names, -EINVAL for an empty name or
 * one longer than SBX_EGRESS_NAME_MAX. */
int sbx_egress_names_addr(struct sbx_egress_names *m, const char *name, uint8_t a4[4]);
/* The name a4 was given to: true and name (namesz >= SBX_EGRESS_NAME_MAX+1). */
bool sbx_egress_names_lookup(struct sbx_egress_names *m, const uint8_t a4[4], char *name, size_t namesz);
/* a4 lies in 198.18.0.0/15. */
bool sbx_egress_names_synthetic(const uint8_t a4[4]);
