#pragma once
/* What the parts of sandbox/egress/peek.h share: the name check both the
 * SNI and the Host go through, and the two protocol peeks. Private to
 * peek*.c (the shared part is peek_common.c). */
#include <stddef.h>
#include <stdint.h>

#include "sandbox/egress/peek.h"

enum peek_name {
	PEEK_NAME_OK,	/* a DNS hostname */
	PEEK_NAME_NONE, /* an address literal (or, for a Host, nothing): no name */
	PEEK_NAME_BAD,	/* neither */
};

/* s[0..n) lowercased into out (NUL-terminated): the name, or the address
 * literal's text (IPv6 without brackets); "" when BAD. */
enum peek_name peek_name_check(const char *s, size_t n, char out[SBX_EGRESS_NAME_MAX + 1]);

/* One protocol's verdict on buf[0..len), the whole of what was read so far. */
void peek_tls(const uint8_t *buf, size_t len, struct sbx_egress_peek *out);
void peek_http(const uint8_t *buf, size_t len, struct sbx_egress_peek *out);
/* out: REFUSE, why. */
void peek_refuse(struct sbx_egress_peek *out, const char *why);
