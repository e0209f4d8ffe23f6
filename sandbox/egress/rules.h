#pragma once
/* Egress rules: what a tenant policy's `network` value means, decided per
 * connection by the egress gateway (sandbox/egress/gateway.h). Pure: no
 * system state but the host's own addresses (sbx_egress_host_addrs_*).
 *
 * The grammar (a superset of the old allowlist, which keeps its meaning):
 * rules separated by commas, spaces around them allowed; each
 *     [!]HOST[:PORT|:LO-HI]
 * HOST being
 *     a DNS name            pypi.org          (that name only)
 *     a wildcard            *.github.com      (any name below it, not github.com itself)
 *     any name              *
 *     an IPv4 address/CIDR  10.0.0.0/8
 *     an IPv6 one           [fd00::/8]        (brackets, as before)
 * no port: every port. A leading `!` makes a deny rule: deny rules win over
 * allow rules, whatever their order (`*, !*.internal`, `!10.0.0.0/8`).
 * Names compare case-insensitively, without a trailing dot.
 *
 * Always refused (set time: 400 with the reason): bad syntax, more than
 * SBX_EGRESS_RULES_MAX rules or SBX_EGRESS_SPEC_MAX bytes, CIDRs with
 * host bits set, allow rules naming link-local or metadata addresses or
 * CIDRs around them other than 0.0.0.0/0 and [::/0]; host loopback other
 * than 127.0.0.1 / [::1] with a port (as before).
 *
 * Decisions (connection time):
 *   - a name is allowed on a port when an allow name rule matches it on
 *     that port and no deny name rule does;
 *   - the addresses the gateway resolved for an allowed name are then
 *     each checked: never link-local/metadata/IPv6 forms of IPv4
 *     (sbx_egress_addr_never); an internal one (loopback, private, CGNAT,
 *     site-local, or one of the host's own addresses) only when an allow
 *     address rule other than a /0 covers it on that port; a deny address
 *     rule covering it refuses it;
 *   - a connection with no name (the command dialled an address, no SNI,
 *     no Host, not one of the sandbox's DNS answers) is allowed only when
 *     an allow address rule covers the address and port, no deny one does,
 *     and (internal addresses) the covering rule is not a /0.
 * Thread-safe once parsed (immutable; reference counted). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX_EGRESS_SPEC_MAX 4096
#define SBX_EGRESS_RULES_MAX 64
#define SBX_EGRESS_NAME_MAX 253 /* a DNS name's text, without the trailing dot */
#define SBX_EGRESS_WHY_MAX 160	/* a decision's reason, with the rule's text */

struct sbx_egress_rules;

/* 0 and *out (one reference), or -EINVAL with a one-line reason naming
 * the rule in err. "none" and "" parse as no rules (everything refused). */
int sbx_egress_rules_parse(const char *spec, struct sbx_egress_rules **out, char *err, size_t errsz);
struct sbx_egress_rules *sbx_egress_rules_ref(struct sbx_egress_rules *r);
/* Accepts NULL; sets *r NULL. */
void sbx_egress_rules_unref(struct sbx_egress_rules **r);
/* The spec it was parsed from (owned by r). */
const char *sbx_egress_rules_spec(const struct sbx_egress_rules *r);
/* How many rules r holds: 0 for "none" and "" (a policy tells those from
 * the exact "none" of no network, routes/policy.c). */
size_t sbx_egress_rules_count(const struct sbx_egress_rules *r);

/* name: lowercase, no trailing dot. port 0: "some port" (a DNS question:
 * allowed when some allow rule matches the name on any port and no deny
 * rule matching the name covers every port). true: allowed; false: why
 * gets the reason ("not in the allowlist", "denied by rule !*.internal"). */
bool sbx_egress_rules_name(const struct sbx_egress_rules *r, const char *name, uint16_t port, char *why,
			   size_t whysz);
/* addr (4 or 16 bytes, network order) of family AF_INET/AF_INET6 on port.
 * from_name: the gateway resolved it for a name the rules allowed (else
 * the command dialled it). true: allowed; false: why ("resolves to a
 * private address", "metadata address", "denied by rule !10.0.0.0/8",
 * "address not in the allowlist"). */
bool sbx_egress_rules_addr(const struct sbx_egress_rules *r, int family, const uint8_t *addr, uint16_t port,
			   bool from_name, char *why, size_t whysz);
/* The host loopback ports the rules grant (allow rules naming exactly
 * 127.0.0.1 or [::1] with ports): ports[] gets up to cap lo-hi pairs
 * (inclusive) of that family; returns how many. The namespace redirects
 * exactly these of its own loopback to the gateway, which connects to the
 * host's. */
size_t sbx_egress_rules_loopback(const struct sbx_egress_rules *r, int family, uint16_t (*ports)[2],
				 size_t cap);

/* Address classes. */
bool sbx_egress_addr_never(int family, const uint8_t *addr); /* link-local, metadata, v4-mapped, NAT64 */
bool sbx_egress_addr_internal(int family,
			      const uint8_t *addr); /* loopback, private, CGNAT, site-local, host's own */
/* The host's own addresses (getifaddrs of the server's namespace),
 * refreshed at most once a second by the first caller after that. */
bool sbx_egress_host_addr(int family, const uint8_t *addr);
