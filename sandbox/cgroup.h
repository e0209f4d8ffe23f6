#pragma once
/* cgroup v1 memory and pids limits, and the CPU budget where the host
 * has the v1 cpu (and cpuacct) hierarchies (the hierarchies this kind of
 * host gives root; the v2 mount has no controllers). Every name here is
 * made by the server, never taken from a client (security.md item 8):
 *
 *     /sys/fs/cgroup/{memory,pids,cpu,cpuacct}/<root>/u<uid>/j<n>
 *
 * (cpu and cpuacct mounted together, "cpu,cpuacct", are one hierarchy.)
 *
 * root is the server's own ("sandboxd/<uid-base>": distinct per server on
 * a host), u<uid> the tenant's parent (its budget: every command of the
 * tenant together), j<n> the group of one command at a time, n the seq (a
 * number the runner counts) of the command that made it. A command's
 * emptied group is kept for the tenant's next command when it is
 * verifiably empty and clean (cgroup.c says what is checked and reset),
 * else removed; an existing j<seq> that is not such a kept group is a
 * leftover, removed first, and a control file in its place is refused.
 *
 * Threads: any; the kept groups and the parents' memo are behind mutexes. */
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct sbx_limits;

#define SBX_CGROUP_MAX 4 /* hierarchies a command joins at most */

/* true when /sys/fs/cgroup/{memory,pids} are v1 hierarchies we can write;
 * creates <root> in both, and in cpu and cpuacct where those are v1
 * hierarchies we can write (optional: sbx_cgroup_cpu says). The layout
 * found is the process's (every root and backend). root: "a/b" of
 * [A-Za-z0-9_.-] components. Call before any command starts. */
bool sbx_cgroup_probe(const char *root);

/* After a successful probe: whether the CPU budget is in force (the v1 cpu
 * hierarchy); *acct (optional) the directory under /sys/fs/cgroup whose
 * cpuacct.usage is read ("cpuacct", "cpu,cpuacct", ...; NULL: no usage). */
bool sbx_cgroup_cpu(const char **acct);

/* The command seq's group in every hierarchy in use: a kept one of the
 * tenant's (no task in it, little charged to it), or a new j<seq>. Sets
 * the tenant's budget on its parent u<uid> where it changed (lim->tenant_mem_bytes,
 * lim->tenant_nproc; "max" when 0; with cpu: cpu.cfs_quota_us of
 * lim->tenant_cpu_millicores per 100 ms cpu.cfs_period_us, -1 when 0, and
 * cpu.shares 1024), sets memory.limit_in_bytes and pids.max from lim
 * (none when 0) and opens each cgroup.procs (O_WRONLY|O_CLOEXEC, the
 * caller's to close) into fds. Returns how many (2 to SBX_CGROUP_MAX), or
 * -errno with nothing left open and nothing new left behind: the command
 * must then not run. */
int sbx_cgroup_prepare(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim,
		       int fds[SBX_CGROUP_MAX]);

/* The group of the command seq's helpers (its pasta): u<uid>/n<seq> in
 * every hierarchy in use, below the tenant's budget (set as by
 * sbx_cgroup_prepare) and without limits of its own, so what the helpers
 * use counts against the tenant, not the server. cgroup.procs of each
 * opened into fds; how many, or -errno with nothing left behind. Remove
 * it (killing what is left) with sbx_cgroup_helper_remove once the
 * helpers are reaped. */
int sbx_cgroup_helper_prepare(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim,
			      int fds[SBX_CGROUP_MAX]);
void sbx_cgroup_helper_remove(const char *root, uid_t uid, uint64_t seq);

/* The tenant's current use: memory.usage_in_bytes and pids.current of
 * u<uid>. 0, -ENOENT (no group yet), other -errno. */
int sbx_cgroup_tenant_usage(const char *root, uid_t uid, uint64_t *mem_bytes, uint64_t *nproc);

/* The tenant's CPU time: cpuacct.usage of u<uid> (ns, all its commands
 * since its group was made), and throttled_time of its cpu.stat (ns its
 * commands waited because of its budget; 0 without the cpu hierarchy).
 * 0, -ENOENT (no group yet), -ENOTSUP (no cpuacct), other -errno. */
int sbx_cgroup_tenant_cpu(const char *root, uid_t uid, uint64_t *usage_ns, uint64_t *throttled_ns);

/* After the command seq was reaped: kill whatever is left in its groups,
 * then keep them for the tenant's next command (see above) or rmdir them.
 * Nothing the command started survives this call. */
void sbx_cgroup_remove(const char *root, uid_t uid, uint64_t seq);

/* How many of root's kept groups (all tenants) hold a command now, and
 * how many wait for the next one. */
void sbx_cgroup_kept(const char *root, unsigned *busy, unsigned *idle);

/* Claim <root> for this server (an exclusive, non-blocking flock on its
 * pids directory, released when the process ends, kill -9 included):
 * two servers sharing a root would sweep each other's commands and reuse
 * each other's group names. The fd (O_CLOEXEC), or -EBUSY when another
 * live server holds it, other -errno. */
int sbx_cgroup_claim(const char *root);

/* At start: kill every process left below <root> by an earlier run of this
 * server and remove its groups, bottom up (kept ones too: forgotten).
 * Returns how many groups were removed (>= 0). */
int sbx_cgroup_sweep(const char *root);

/* At a clean stop, after every command was reaped: remove what is left
 * below <root> (the tenants' parent groups), <root> itself, and release
 * the claim (lock_fd from sbx_cgroup_claim, closed). A stopped server
 * leaves no groups behind. */
void sbx_cgroup_release(const char *root, int lock_fd);
