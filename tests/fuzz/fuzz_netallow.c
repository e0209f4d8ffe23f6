/* libFuzzer: the network allowlist (sandbox/network.h) and the egress
 * rules it grew into (sandbox/egress/rules.h). Invariants: an accepted
 * allowlist has at most SBX_NET_ENTRIES_MAX entries, each a name of
 * [A-Za-z0-9._-] or an address with its host bits clear, never a
 * link-local or metadata range, loopback only as 127.0.0.1 / ::1 with a
 * port, ports 1..65535 in order; what it becomes (pasta's -T spec, the
 * nft ruleset) holds only digits, addresses and the fixed rule text, so
 * no entry can add a rule. The rules accept what the allowlist check
 * does (and no more but deny rules, wildcards, `*` and no rules at
 * all), and their decisions never let a never-reachable address through,
 * an internal one only under a literal rule that is not a /0, always say
 * why they refuse, and grant loopback ports sorted, apart, at most 256.
 * Build: scripts/fuzz. */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "sandbox/egress/rule.h"
#include "sandbox/egress/rules.h"
#include "sandbox/netplan.h"

static void check_entry(const struct sbx_net_entry *e)
{
	if (e->lo < 1 || e->lo > e->hi)
		abort();
	if (!e->family) {
		if (!e->name || !e->name[0] ||
		    strspn(e->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				    "0123456789.-_") != strlen(e->name))
			abort();
		return;
	}
	if (e->name || (e->family != AF_INET && e->family != AF_INET6) ||
	    e->prefix > (e->family == AF_INET ? 32u : 128u))
		abort();
	if (sbx_net_is_never(e->family, e->addr, e->prefix))
		abort();
	if (e->family == AF_INET && e->addr[0] == 127 && e->prefix >= 8 &&
	    (!sbx_net_is_host_loopback(e->family, e->addr, e->prefix) || !e->has_port))
		abort();
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
		struct sbx_net_entry x = {.family = e->family, .prefix = e->prefix};

		memcpy(x.addr, e->addr, sizeof(x.addr));
		if (!e->deny && e->kind == SBX_EGRESS_ADDR && e->prefix > 0 && e->lo <= port &&
		    port <= e->hi && sbx_net_covers(&x, family, addr))
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

/* The rules of spec against the allowlist's check, then some decisions:
 * names made of the input's own bytes, fixed addresses, its ports. */
static void check_rules(const char *spec, const uint8_t *data, size_t size, bool allow_ok)
{
	struct sbx_egress_rules *r = NULL;
	char err[256] = "", why[SBX_EGRESS_WHY_MAX], name[32] = "";
	uint16_t port = size >= 2 ? (uint16_t)(data[0] << 8 | data[1]) : 443;

	if (sbx_egress_rules_parse(spec, &r, err, sizeof err) != 0) {
		if (allow_ok || !err[0])
			abort();
		return;
	}
	if (sbx_egress_rules_count(r) && !allow_ok)
		abort();
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
	struct sbx_net_allow a = {0};
	struct buf rules, ports;
	char err[256];
	char *spec = malloc(size + 1);

	memcpy(spec, data, size);
	spec[size] = '\0';
	check_rules(spec, data, size, sbx_net_allow_check(spec, err, sizeof err) == 0);
	if (sbx_net_allow_parse(spec, &a, err, sizeof err) != 0) {
		if (!err[0])
			abort(); /* a refusal always says why */
		free(spec);
		return 0;
	}
	if (a.n > SBX_NET_ENTRIES_MAX)
		abort();
	for (size_t i = 0; i < a.n; i++)
		check_entry(&a.e[i]);
	buf_init(&rules, 1 << 22);
	buf_init(&ports, 1 << 22);
	if (sbx_net_ruleset(a.e, a.n, NULL, &rules) != 0 || sbx_net_pasta_ports(a.e, a.n, &ports) != 0)
		abort();
	if (strcmp(buf_cstr(&ports), "none") != 0 && strspn(buf_cstr(&ports), "0123456789,-") != ports.len)
		abort();
	/* names never reach the ruleset; addresses come from inet_ntop (and
	 * "oif != lo" from the connection bounds) */
	if (strspn(buf_cstr(&rules), "abcdefghijklmnopqrstuvwxyz0123456789 \t\n{}:;,./-\"!=") != rules.len)
		abort();
	buf_free(&rules);
	buf_free(&ports);
	sbx_net_allow_clear(&a);
	free(spec);
	return 0;
}
