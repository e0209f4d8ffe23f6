#pragma once
/* Internal to sandbox/cgroup_v1*.c, the cgroup v1 driver, and what its
 * files share (prefix cg1_). They stand on floors, each calling only
 * those below it: cgroup_v1.c (the tenants' parents and budgets, a
 * command's groups made, the driver's table) on top, cgroup_v1_pool.c
 * (the groups kept for a tenant's next command, a command's reap) below
 * it, and cgroup_v1_hier.c (the hierarchies and the host's layout of
 * them, a group's path, mkdir and rmdir) at the bottom. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/cgroup_impl.h"

struct leaf;

#define CG_ROOT "/sys/fs/cgroup"

/* The hierarchies, in the order their cgroup.procs fds are returned.
 * memory and pids are required (sbx_cgroup_probe fails without them); cpu
 * (the tenant's CFS quota and shares) and cpuacct (its usage) are used
 * where the host has them as v1 hierarchies, mounted apart ("cpu",
 * "cpuacct") or together ("cpu,cpuacct", the usual systemd layout, with
 * "cpu" and "cpuacct" links to it): together, one group serves both. */
enum { H_MEMORY, H_PIDS, H_CPU, H_CPUACCT, H_N };
struct ctrl {
	const char *mounts[3];	/* directory names under CG_ROOT to try, in order */
	const char *probe_file; /* a file only this v1 controller has */
	const char *limit_file; /* a command's own limit (NULL: none) */
};
extern const struct ctrl cg1_ctrls[H_N];

/* The host's layout, found by sbx_cgroup_probe (the same for every root
 * and backend of the process): each hierarchy's directory under CG_ROOT,
 * "" when not used. cpuacct's is "" when it shares cpu's (then
 * cpuacct.usage is read there). Written by the probe before any command,
 * read afterwards: a mutex for the writes, the runner reads after start. */
struct layout {
	char dir[H_N][16];
	const char *acct_dir; /* where cpuacct.usage is: dir[H_CPUACCT], dir[H_CPU] or NULL */
};
extern struct layout cg1_layout;

/* cgroup_v1_hier.c */
int cg1_mkdir_p(const char *hier, const char *rel);
int cg1_rmdir_group(const char *path);
int cg1_group_path(char *out, size_t outsz, const char *hier, const char *root, uid_t uid, uint64_t seq);
bool cg1_probe_layout(const char *root);

/* cgroup_v1_pool.c */
bool cg1_pool_has_name(const char *root, uid_t uid, uint64_t name);
void cg1_pool_evict(const char *root, uid_t uid, uint64_t seq);
struct leaf *cg1_pool_track(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim);
int cg1_pool_reuse(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim,
		   int fds[SBX_CGROUP_MAX]);
void cg1_pool_forget_root(const char *root);
void cg1_kept(const char *root, unsigned *busy, unsigned *idle);
void cg1_remove(const char *root, uid_t uid, uint64_t seq, struct sbx_cgroup_outcome *out);
