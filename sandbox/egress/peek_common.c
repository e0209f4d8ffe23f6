/* What every protocol's peek (peek_tls.c, peek_http.c) shares, below
 * them and below the dispatch of peek.c: the check that the SNI and the
 * Host name go through the same way, and the refusal verdict. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "sandbox/egress/peek_int.h"

static bool label_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

/* Labels of 1..63 of [a-z0-9-], not beginning or ending with '-', no
 * empty label (so no trailing dot). */
static bool hostname_ok(const char *s, size_t n)
{
	size_t i, start = 0;

	for (i = 0; i <= n; i++) {
		if (i < n && s[i] != '.') {
			if (!label_char(s[i]))
				return false;
			continue;
		}
		if (i == start || i - start > 63 || s[start] == '-' || s[i - 1] == '-')
			return false;
		start = i + 1;
	}
	return true;
}

/* What a resolver would take for an address rather than a name: anything
 * inet_aton reads (0x7f.1, 2130706433) or a last label of digits only
 * (no top-level domain is numeric, RFC 3696 2). */
static bool looks_ipv4(const char *s)
{
	struct in_addr a;
	const char *last = strrchr(s, '.');

	last = last ? last + 1 : s;
	return inet_aton(s, &a) != 0 || strspn(last, "0123456789") == strlen(last);
}

static enum peek_name ipv6_check(const char *s, size_t n, char out[SBX_EGRESS_NAME_MAX + 1])
{
	struct in6_addr a;

	if (n >= INET6_ADDRSTRLEN)
		return PEEK_NAME_BAD;
	memcpy(out, s, n);
	out[n] = '\0';
	if (inet_pton(AF_INET6, out, &a) != 1) {
		out[0] = '\0';
		return PEEK_NAME_BAD;
	}
	for (size_t i = 0; i < n; i++)
		out[i] = (char)(out[i] >= 'A' && out[i] <= 'Z' ? out[i] + 32 : out[i]);
	return PEEK_NAME_NONE;
}

enum peek_name peek_name_check(const char *s, size_t n, char out[SBX_EGRESS_NAME_MAX + 1])
{
	out[0] = '\0';
	if (memchr(s, ':', n))
		return ipv6_check(s, n, out);
	if (n == 0 || n > SBX_EGRESS_NAME_MAX)
		return PEEK_NAME_BAD;
	for (size_t i = 0; i < n; i++)
		out[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
	out[n] = '\0';
	if (!hostname_ok(out, n)) {
		out[0] = '\0';
		return PEEK_NAME_BAD;
	}
	return looks_ipv4(out) ? PEEK_NAME_NONE : PEEK_NAME_OK;
}

void peek_refuse(struct sbx_egress_peek *out, const char *why)
{
	out->proto = SBX_EGRESS_REFUSE;
	out->name[0] = '\0';
	snprintf(out->why, sizeof out->why, "%s", why);
}
