/* libFuzzer: the network allowlist, a tenant policy's `network` value:
 * the egress rules (sandbox/egress/rules.h). Invariants: a refusal says
 * why; an accepted allowlist has at most SBX_EGRESS_RULES_MAX rules,
 * each with ports 1..65535 in order, a name of [a-z0-9._-] (lowercased)
 * or an address with its host bits clear; an allow rule never names a
 * link-local or metadata range (nor a CIDR around one but a /0), nor the
 * unspecified address, and loopback only as 127.0.0.1 / ::1 with a port.
 * The decisions never let a never-reachable address through, an internal
 * one only under a literal rule that is not a /0, always say why they
 * refuse, and grant loopback ports sorted, apart, at most 256.
 * Build: scripts/fuzz. */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "sandbox/egress/classes.h"
#include "sandbox/egress/rule.h"
#include "sandbox/egress/rules.h"

static bool host_bits_clear(const struct sbx_egress_rule *e, unsigned bits)
{
	for (unsigned b = e->prefix; b < bits; b++) {
		if (e->addr[b / 8] & (0x80 >> (b % 8)))
			return false;
	}
	return true;
}

static void check_addr_rule(const struct sbx_egress_rule *e)
{
	static const uint8_t zero[16], lo6[16] = {[15] = 1};
	unsigned bits = e->family == AF_INET ? 32 : 128;
	char text[64];
	bool inside;

	if ((e->family != AF_INET && e->family != AF_INET6) || e->prefix > bits || !host_bits_clear(e, bits))
		abort();
	if (e->deny)
		return; /* a deny rule may name anything */
	if (e->prefix > 0 &&
	    sbx_egress_never_named(e->family, e->addr, e->prefix, &inside, text, sizeof(text)))
		abort();
	if (e->prefix == bits && memcmp(e->addr, zero, bits / 8) == 0)
		abort();
	if (e->family == AF_INET && e->addr[0] == 127 && e->prefix >= 8 &&
	    (e->prefix != 32 || e->addr[1] || e->addr[2] || e->addr[3] != 1 || !e->has_port))
		abort();
	if (e->family == AF_INET6 && e->prefix == 128 && memcmp(e->addr, lo6, 16) == 0 && !e->has_port)
		abort();
}

/* spec: the rules' own copy, which e's text points into. */
static void check_rule(const char *spec, const struct sbx_egress_rule *e)
{
	if (e->lo < 1 || e->lo > e->hi || (!e->has_port && (e->lo != 1 || e->hi != 65535)))
		abort();
	if (e->textlen < 1 || e->text < spec || e->text + e->textlen > spec + strlen(spec))
		abort();
	switch (e->kind) {
	case SBX_EGRESS_NAME:
	case SBX_EGRESS_WILD:
		if (!e->namelen || e->namelen > SBX_EGRESS_NAME_MAX || strlen(e->name) != e->namelen ||
		    strspn(e->name, "abcdefghijklmnopqrstuvwxyz0123456789.-_") != e->namelen)
			abort();
		break;
	case SBX_EGRESS_ADDR:
		check_addr_rule(e);
		break;
	case SBX_EGRESS_ANY:
		break;
	default:
		abort();
	}
}

static void check_why(bool ok, const char *why)
{
	if (!ok && (!why[0] || strlen(why) >= SBX_EGRESS_WHY_MAX))
		abort();
}

/* An allow address rule other than a /0 covers addr on port. */
static bool literal_covers(const struct sbx_egress_rules *r, int family, const uint8_t *addr, uint16_t port)
{
	for (size_t i = 0; i < sbx_egress_rules_count(r); i++) {
		const struct sbx_egress_rule *e = sbx_egress_rules_at(r, i);

		if (!e->deny && e->kind == SBX_EGRESS_ADDR && e->family == family && e->prefix > 0 &&
		    e->lo <= port && port <= e->hi && sbx_egress_prefix_eq(addr, e->addr, e->prefix))
			return true;
	}
	return false;
}

static void check_addrs(const struct sbx_egress_rules *r, uint16_t port)
{
	static const char *const addrs[] = {"10.0.0.5", "127.0.0.1",	 "169.254.169.254", "192.0.2.1",
					    "::1",	"fd00:ec2::254", "::ffff:10.0.0.5", "2001:db8::1"};
	char why[SBX_EGRESS_WHY_MAX];

	for (size_t i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
		uint8_t a[16];
		int f = strchr(addrs[i], ':') ? AF_INET6 : AF_INET;

		inet_pton(f, addrs[i], a);
		for (int from_name = 0; from_name < 2; from_name++) {
			bool ok = sbx_egress_rules_addr(r, f, a, port, from_name, why, sizeof(why));

			check_why(ok, why);
			if (ok && (sbx_egress_addr_never(f, a) ||
				   (sbx_egress_addr_internal(f, a) && !literal_covers(r, f, a, port))))
				abort();
		}
	}
}

static void check_loopback(const struct sbx_egress_rules *r)
{
	uint16_t p[SBX_EGRESS_RULES_MAX][2];
	size_t total = 0;

	for (int f = AF_INET; f <= AF_INET6; f += AF_INET6 - AF_INET) {
		size_t n = sbx_egress_rules_loopback(r, f, p, SBX_EGRESS_RULES_MAX);

		for (size_t i = 0; i < n; i++) {
			if (p[i][0] < 1 || p[i][0] > p[i][1] || (i && p[i][0] <= p[i - 1][1] + 1))
				abort();
			total += (size_t)(p[i][1] - p[i][0]) + 1;
		}
	}
	if (total > 256)
		abort();
}

/* The rules of spec, each checked, then some decisions: names made of
 * the input's own bytes, fixed addresses, its ports. */
static void check_rules(const char *spec, const uint8_t *data, size_t size)
{
	struct sbx_egress_rules *r = NULL;
	char err[256] = "", why[SBX_EGRESS_WHY_MAX], name[32] = "";
	uint16_t port = size >= 2 ? (uint16_t)(data[0] << 8 | data[1]) : 443;

	if (sbx_egress_rules_parse(spec, &r, err, sizeof err) != 0) {
		if (!err[0])
			abort(); /* a refusal always says why */
		return;
	}
	if (sbx_egress_rules_count(r) > SBX_EGRESS_RULES_MAX)
		abort();
	for (size_t i = 0; i < sbx_egress_rules_count(r); i++)
		check_rule(sbx_egress_rules_spec(r), sbx_egress_rules_at(r, i));
	for (size_t i = 0; i < size && i + 1 < sizeof(name); i++)
		name[i] = (char)(data[i] >= 'a' && data[i] <= 'z' ? data[i] : 'a' + data[i] % 26);
	check_why(sbx_egress_rules_name(r, name[0] ? name : "example.com", port, why, sizeof(why)), why);
	check_why(sbx_egress_rules_name(r, "api.github.com", 0, why, sizeof(why)), why);
	check_addrs(r, port);
	check_loopback(r);
	sbx_egress_rules_unref(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *spec = malloc(size + 1);

	memcpy(spec, data, size);
	spec[size] = '\0';
	check_rules(spec, data, size);
	free(spec);
	return 0;
}
