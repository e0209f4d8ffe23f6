/* libFuzzer: the network allowlist (sandbox/network.h). Invariants: an
 * accepted allowlist has 1..SBX_NET_ENTRIES_MAX entries, each a name of
 * [A-Za-z0-9._-] or an address with its host bits clear, never a
 * link-local or metadata range, loopback only as 127.0.0.1 / ::1 with a
 * port, ports 1..65535 in order; what it becomes (pasta's -T spec, the
 * nft ruleset) holds only digits, addresses and the fixed rule text, so
 * no entry can add a rule. Build: scripts/fuzz. */
#include <arpa/inet.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/buf.h"
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_net_allow a = {0};
	struct buf rules, ports;
	char err[256];
	char *spec = malloc(size + 1);

	memcpy(spec, data, size);
	spec[size] = '\0';
	if (sbx_net_allow_parse(spec, &a, err, sizeof err) != 0) {
		if (!err[0])
			abort(); /* a refusal always says why */
		free(spec);
		return 0;
	}
	if (a.n < 1 || a.n > SBX_NET_ENTRIES_MAX)
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
