#pragma once
/* cgroup v1 memory and pids limits (the hierarchies this kind of host
 * gives root; the v2 mount has no controllers). Every name here is made by
 * the server, never taken from a client (security.md item 8):
 *
 *     /sys/fs/cgroup/{memory,pids}/<root>/u<uid>/j<seq>
 *
 * root is the server's own ("sandboxd/<uid-base>": distinct per server on
 * a host), u<uid> the tenant's parent (its budget: every command of the
 * tenant together), j<seq> one command, seq a number the runner counts. A command's group is always new: an
 * existing one is a leftover, removed first, and a control file in its place is refused. */
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct sbx_limits;

/* true when /sys/fs/cgroup/{memory,pids} are v1 hierarchies we can write;
 * creates <root> in both. root: "a/b" of [A-Za-z0-9_.-] components. */
bool sbx_cgroup_probe(const char *root);

/* Create the command's group in memory and pids, set the tenant's budget
 * on its parent u<uid> (lim->tenant_mem_bytes, lim->tenant_nproc; "max"
 * when 0), set memory.limit_in_bytes and pids.max from lim (when non-zero) and open each cgroup.procs
 * (O_WRONLY|O_CLOEXEC) into fds[0..1]. Returns 2, or -errno with nothing
 * left open and nothing left behind: the command must then not run. */
int sbx_cgroup_prepare(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim, int fds[2]);

/* The tenant's current use: memory.usage_in_bytes and pids.current of
 * u<uid>. 0, -ENOENT (no group yet), other -errno. */
int sbx_cgroup_tenant_usage(const char *root, uid_t uid, uint64_t *mem_bytes, uint64_t *nproc);

/* Kill whatever is left in the command's groups and rmdir them. */
void sbx_cgroup_remove(const char *root, uid_t uid, uint64_t seq);

/* Claim <root> for this server (an exclusive, non-blocking flock on its
 * pids directory, released when the process ends, kill -9 included):
 * two servers sharing a root would sweep each other's commands and reuse
 * each other's group names. The fd (O_CLOEXEC), or -EBUSY when another
 * live server holds it, other -errno. */
int sbx_cgroup_claim(const char *root);

/* At start: kill every process left below <root> by an earlier run of this
 * server and remove its groups, bottom up. Returns how many groups were
 * removed (>= 0). */
int sbx_cgroup_sweep(const char *root);

/* At a clean stop, after every command was reaped: remove what is left
 * below <root> (the tenants' parent groups), <root> itself, and release
 * the claim (lock_fd from sbx_cgroup_claim, closed). A stopped server
 * leaves no groups behind. */
void sbx_cgroup_release(const char *root, int lock_fd);
