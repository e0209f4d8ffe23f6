#pragma once
/* Internal to sandbox/: what an allowlist becomes in a command's network
 * namespace (sandbox/network.c), and the namespace's life (netns.c). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/network.h"

struct buf;

/* addr/prefix lies within a link-local or metadata range. */
bool sbx_net_is_never(int family, const uint8_t *addr, unsigned prefix);
/* addr (a full address) is internal or never reachable (the classes of
 * sandbox/egress/rules.h: loopback, private, CGNAT, site-local, the
 * host's own, link-local, metadata, ...): reached through a name only
 * when a literal entry covers it (sbx_net_covers: e is an address entry
 * and addr lies within it). */
bool sbx_net_is_internal(int family, const uint8_t *addr);
bool sbx_net_covers(const struct sbx_net_entry *e, int family, const uint8_t *addr);
/* Exactly 127.0.0.1/32 or ::1/128: the host loopback pasta forwards to. */
bool sbx_net_is_host_loopback(int family, const uint8_t *addr, unsigned prefix);

/* d[0..n) are address entries (family != 0; names are skipped). Appends
 * pasta's -T spec (the host loopback ports, "none" without any), or the
 * nft ruleset (table inet sandboxd) for the namespace, with lim's bounds
 * on new connections (NULL: the defaults). 0, or -E2BIG. */
int sbx_net_pasta_ports(const struct sbx_net_entry *d, size_t n, struct buf *out);
int sbx_net_ruleset(const struct sbx_net_entry *d, size_t n, const struct sbx_net_limits *lim,
		    struct buf *out);
