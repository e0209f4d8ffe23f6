/* The first bytes of a connection (sandbox/egress/peek.h): which protocol
 * they begin. TLS is peek_tls.c, HTTP peek_http.c; the name check both
 * go through, peek_common.c. */
#include "sandbox/egress/peek.h"

#include <string.h>

#include "sandbox/egress/peek_int.h"

#define TLS_HANDSHAKE 22

/* An SSLv2-format ClientHello (a two-byte header with its high bit set,
 * message type 1, version 0.2 or 3.x): OpenSSL would still read one, and
 * it carries no server name. Refused rather than passed on as OTHER. */
static void peek_sslv2(const uint8_t *buf, size_t len, struct sbx_egress_peek *out)
{
	if (len < 4)
		return;
	if (buf[2] == 1 && (buf[3] == 0 || buf[3] == 3))
		peek_refuse(out, "SSLv2 ClientHello refused");
	else
		out->proto = SBX_EGRESS_OTHER;
}

void sbx_egress_peek(const uint8_t *buf, size_t len, struct sbx_egress_peek *out)
{
	memset(out, 0, sizeof *out);
	out->proto = SBX_EGRESS_MORE;
	if (len > SBX_EGRESS_PEEK_MAX)
		len = SBX_EGRESS_PEEK_MAX;
	if (len == 0)
		return;
	if (buf[0] == TLS_HANDSHAKE)
		peek_tls(buf, len, out);
	else if (buf[0] & 0x80)
		peek_sslv2(buf, len, out);
	else
		peek_http(buf, len, out);
}
