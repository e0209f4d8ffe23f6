#pragma once
/* The cgroup layer: per-command limits and per-tenant budgets, behind one
 * interface with two drivers chosen at start from what the host has
 * (architecture.md, "cgroups"):
 *
 *   v2  the unified hierarchy holds the controllers (Debian 12, Ubuntu
 *       22.04+, RHEL 9, Kubernetes nodes): memory.max, memory.swap.max,
 *       memory.oom.group, pids.max, cpu.max and cpu.weight, io.max,
 *       cgroup.kill, memory.events and pids.events, PSI (cgroup_v2.c);
 *   v1  memory, pids (and cpu, cpuacct) v1 hierarchies, as on hybrid
 *       hosts (cgroup_v1.c, on cgroup_v1_pool.c and cgroup_v1_hier.c).
 *
 * Neither the routes nor the runner know which driver is in use. Every
 * name here is made by the server, never taken from a client (security.md
 * item 8). A group's path, below the driver's base (v1: each hierarchy's
 * mount; v2: the server's own cgroup as it found it at start):
 *
 *     <root>/u<uid>/j<seq>     a command (its limits)
 *     <root>/u<uid>            the tenant (its budget: every command together)
 *     <root>/server            v2: the server itself (the "no internal
 *                              processes" rule: it moves there at the probe)
 *
 * root is the server's own ("sandboxd/<uid-base>": distinct per server on
 * a host), seq a number the runner counts.
 *
 * Threads: any, once sbx_cgroup_probe returned. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sbx_limits;

#define SBX_CGROUP_MAX 4 /* cgroup.procs fds a command joins at most */

/* What the driver found (sbx_cgroup_probe). */
struct sbx_cgroup_caps {
	int version;	/* 2, 1, or 0: none usable (then why says what is missing) */
	bool memory;	/* per-command memory limit and the tenant's memory budget */
	bool pids;	/* per-command pids limit and the tenant's process budget */
	bool cpu;	/* the tenant's CPU budget (v2 cpu.max, v1 cpu.cfs_quota_us) */
	bool cpu_usage; /* the tenants' CPU time can be read (v2 cpu.stat, v1 cpuacct) */
	bool io;	/* the tenant's I/O budget (v2 io.max, v1 blkio.throttle) */
	bool psi;	/* the tenants' pressure (v2 *.pressure, kernel with PSI) */
	char why[512];	/* version 0, or a controller missing: what, and the fix */
};

/* Find and set up the driver for root ("a/b" of [A-Za-z0-9_.-]
 * components): v2 when /sys/fs/cgroup is the unified hierarchy and the
 * server can delegate to itself there (it moves into <root>/server and
 * enables memory, pids, cpu, io below), else v1 when the memory and pids
 * v1 hierarchies are writable, else none. Fills caps (every field, why
 * included). 0 with a driver in use, -errno without one (caps->why says
 * why). Once per process, before any command starts; the layout found is
 * every root's and backend's. */
int sbx_cgroup_probe(const char *root, struct sbx_cgroup_caps *caps);

/* The driver's caps after the probe ("" why, version 0 before it). */
const struct sbx_cgroup_caps *sbx_cgroup_caps(void);

/* The command seq's group (a new j<seq>, or on v1 a kept one of the
 * tenant's: cgroup_v1_pool.c). Sets the tenant's budget on u<uid> where it
 * changed (lim->tenant_*; 0: none), the command's limits from lim (0:
 * none), and opens the cgroup.procs the child joins (O_WRONLY|O_CLOEXEC,
 * the caller's to close) into fds. Returns how many (1 to
 * SBX_CGROUP_MAX), or -errno with nothing left open and nothing new left
 * behind: the command must then not run. A nonzero limit or budget the
 * driver cannot apply (its controller missing) is -EOPNOTSUPP. */
int sbx_cgroup_prepare(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim,
		       int fds[SBX_CGROUP_MAX]);

/* Why a command's group ended what it ran, read at its removal. */
struct sbx_cgroup_outcome {
	bool oom_killed;   /* the OOM killer ended a task of it: its memory limit or the tenant's budget */
	bool pids_limited; /* a fork in it was refused by a pids limit (its own or the tenant's) */
};

/* After the command seq was reaped: kill whatever is left in its group
 * (v2 cgroup.kill: the whole tree, no race with forks), read why it ended
 * into *out (optional), then remove the group (v1: or keep it for the
 * tenant's next command). Nothing the command started survives this. */
void sbx_cgroup_remove(const char *root, uid_t uid, uint64_t seq, struct sbx_cgroup_outcome *out);

/* The tenant's current use: memory and processes of u<uid>. 0, -ENOENT
 * (no group yet), other -errno. */
int sbx_cgroup_tenant_usage(const char *root, uid_t uid, uint64_t *mem_bytes, uint64_t *nproc);

/* The tenant's CPU time (ns, all its commands since its group was made)
 * and how long its budget held them back (ns; 0 where unknown). 0,
 * -ENOENT (no group yet), -ENOTSUP (no usage on this host), other -errno. */
int sbx_cgroup_tenant_cpu(const char *root, uid_t uid, uint64_t *usage_ns, uint64_t *throttled_ns);

/* Pressure stall information of one resource: the share of the last 10 s
 * some (at least one) or all (full) of the tenant's tasks stalled, in
 * percent, and the stalled time since the group was made (us). cpu's
 * full is 0 where the kernel does not report it. */
struct sbx_psi {
	double some_avg10, full_avg10;
	uint64_t some_total_us, full_total_us;
};
struct sbx_cgroup_pressure {
	struct sbx_psi memory, cpu, io;
};

/* The tenant's pressure (memory.pressure, cpu.pressure, io.pressure of
 * u<uid>). 0, -ENOENT (no group yet), -ENOTSUP (v1, or no PSI). */
int sbx_cgroup_tenant_pressure(const char *root, uid_t uid, struct sbx_cgroup_pressure *out);

/* How many of root's groups kept for reuse (v1; all tenants) hold a
 * command now, and how many wait for the next one. 0 and 0 on v2. */
void sbx_cgroup_kept(const char *root, unsigned *busy, unsigned *idle);

/* Claim <root> for this server (an exclusive, non-blocking flock on a
 * directory of it, released when the process ends, kill -9 included):
 * two servers sharing a root would sweep each other's commands and reuse
 * each other's group names. The fd (O_CLOEXEC), or -EBUSY when another
 * live server holds it, other -errno. */
int sbx_cgroup_claim(const char *root);

/* At start, after the claim: kill every process left below <root> by an
 * earlier run of this server and remove its groups, bottom up (the
 * server's own leaf excepted). Returns how many groups were removed. */
int sbx_cgroup_sweep(const char *root);

/* At a clean stop, after every command was reaped: remove what is left
 * below <root>, <root> itself where it can, and release the claim
 * (lock_fd from sbx_cgroup_claim, closed). */
void sbx_cgroup_release(const char *root, int lock_fd);
