#pragma once
/* Internal to sandbox/egress/: the address classes behind rules.h's
 * decisions (classes.c), for the rules' parser and decisions (rules.c). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The first bits bits of a and b are equal. */
bool sbx_egress_prefix_eq(const uint8_t *a, const uint8_t *b, unsigned bits);

/* What addr is, as a reason says it ("a private address", "a metadata
 * or link-local address", "an address of this host"), or NULL for an
 * address no class holds back. *never: no rule reaches it at all
 * (sbx_egress_addr_never); else it is internal (sbx_egress_addr_internal). */
const char *sbx_egress_addr_what(int family, const uint8_t *addr, bool *never);

/* The first range that no allow rule may name or overlap (link-local,
 * metadata, the IPv6 forms of IPv4) that addr/prefix lies within
 * (*inside) or else overlaps; its text ("169.254.0.0/16") into text.
 * false: none. [::1] is loopback, not an IPv4-compatible address. */
bool sbx_egress_never_named(int family, const uint8_t *addr, unsigned prefix, bool *inside, char *text,
			    size_t textsz);
