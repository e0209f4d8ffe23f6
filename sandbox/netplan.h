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

/* One command's network namespace, set up (filter, pasta) and torn down
 * by the server. Runner thread (or any one thread) per value. */
struct sbx_netns;

/* Parse spec, resolve its names (lim->resolve_ms at most), make the
 * namespace, install the filter (with lim's bounds; NULL: the defaults),
 * attach pasta (with cg: in the tenant's helper group u<uid>/n<seq>,
 * sandbox/cgroup.h, removed by sbx_netns_down; NULL: where the server
 * is) and wait until it is ready. Blocks for as long: call it
 * from a setup thread (sandbox/netpool.h), never a runner's, and from a
 * long-lived one (pasta's PR_SET_PDEATHSIG follows the thread). On failure nothing is left behind and err
 * says why (logged by the caller). Errors: -EINVAL (bad spec), -SBX_E_BACKEND (the host cannot: no pasta,
 * nft, root; a step failed). */
struct sbx_limits;
struct sbx_net_cgroup {
	const char *root; /* the backend's cgroup root */
	uid_t uid;
	uint64_t seq;
	const struct sbx_limits *lim; /* the tenant's budgets */
};
int sbx_netns_up(const char *spec, const struct sbx_net_limits *lim, const struct sbx_net_cgroup *cg,
		 struct sbx_netns **out, char *err, size_t errsz);
/* The namespace (for setns; owned by n) and the /etc/hosts text for the
 * sandbox (localhost plus the resolved names; owned by n). */
int sbx_netns_fd(const struct sbx_netns *n);
const char *sbx_netns_hosts(const struct sbx_netns *n);
/* Kill and reap pasta, close the namespace. Accepts NULL; sets *n NULL. */
void sbx_netns_down(struct sbx_netns **n);
/* pasta's pid (-1: none). */
pid_t sbx_netns_helper_pid(const struct sbx_netns *n);

/* The namespace of req (with net_allow) for backend b, made with lim:
 * the backend's network health, then sbx_netns_up; failures are logged
 * with the command's seq. 0, -EINVAL, -SBX_E_BACKEND. (sandbox/backend.c) */
struct sbx_backend;
struct sbx_spawn_req;
int sbx_backend_net_prepare(struct sbx_backend *b, const struct sbx_spawn_req *req,
			    const struct sbx_net_limits *lim, struct sbx_netns **out);
