/* The cgroup layer's v1 driver (sandbox/cgroup.h): memory and pids
 * limits, and the CPU budget where the host has the v1 cpu (and cpuacct)
 * hierarchies (the hierarchies a hybrid host gives root; its v2 mount has
 * no controllers):
 *
 *     /sys/fs/cgroup/{memory,pids,cpu,cpuacct}/<root>/u<uid>/j<n>
 *
 * (cpu and cpuacct mounted together, "cpu,cpuacct", are one hierarchy.)
 * A command's emptied group is kept for the tenant's next command when it
 * is verifiably empty and clean (cgroup_v1_pool.c: what is checked and
 * reset), else removed; an existing j<seq> that is not such a kept group
 * is a leftover, removed first, and a control file in its place is
 * refused. The kept groups and the parents' memo are behind mutexes.
 * This file, the driver's top: the tenants' parent groups with their
 * budgets and usage, a command's groups made, claim, sweep and release,
 * and the driver's table; on cgroup_v1_pool.c (the kept groups, a
 * command's reap) and cgroup_v1_hier.c (the hierarchies found, a group's
 * path, mkdir and rmdir), through cgroup_v1_int.h. */
#include "sandbox/cgroup_v1_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stddef.h>

#include "sandbox/backend.h"

#define CPU_PERIOD_US 100000 /* the kernel's default CFS period, written explicitly */
#define CPU_SHARES "1024"    /* every tenant the same: equal shares under contention */

/* The tenant's budget on its parent group in hierarchy i; 0 means none
 * ("max" for pids, -1 for memory and the CFS quota). cpu also gets its
 * period and the tenants' equal shares; cpuacct has nothing to set.
 * Written when it changes (ensure_parent): a changed policy takes effect
 * at the tenant's next command. A value the kernel refuses (a quota above
 * one set on an ancestor, say) fails the command. */
static int set_budget(size_t i, const char *rel, uint64_t budget)
{
	char dir[600], file[640], val[32];
	int rc;

	snprintf(dir, sizeof(dir), CG_ROOT "/%s/%s", cg1_layout.dir[i], rel);
	switch (i) {
	case H_CPU:
		snprintf(file, sizeof(file), "%s/cpu.shares", dir);
		rc = sbx_cgroup_write_file(file, CPU_SHARES);
		snprintf(file, sizeof(file), "%s/cpu.cfs_period_us", dir);
		snprintf(val, sizeof(val), "%d", CPU_PERIOD_US);
		if (rc == 0)
			rc = sbx_cgroup_write_file(file, val);
		snprintf(file, sizeof(file), "%s/cpu.cfs_quota_us", dir);
		snprintf(val, sizeof(val), "%" PRIu64, budget * (CPU_PERIOD_US / 1000));
		return rc < 0 ? rc : sbx_cgroup_write_file(file, budget ? val : "-1");
	case H_CPUACCT:
		return 0;
	default:
		snprintf(file, sizeof(file), "%s/%s", dir, cg1_ctrls[i].limit_file);
		snprintf(val, sizeof(val), "%" PRIu64, budget);
		return sbx_cgroup_write_file(file, budget ? val : i == H_PIDS ? "max" : "-1");
	}
}

/* The tenants' parent groups this process made, with the budget it wrote
 * to each: a command of a known tenant skips the mkdir -p (six mkdir and
 * lstat calls) and the budget write. A cache, not the truth: a slot may
 * be taken by another tenant (then that tenant pays the full path once),
 * a sweep or release of the root forgets its tenants, and a parent that
 * vanished anyway shows up as ENOENT at the command's own mkdir, which
 * forgets it and makes it again. Runner thread and tests: a mutex. */
#define PARENT_SLOTS 256
static struct parent_memo {
	char root[64];
	uid_t uid;
	bool known[H_N];
	uint64_t budget[H_N];
} parents[PARENT_SLOTS];
static pthread_mutex_t parents_mu = PTHREAD_MUTEX_INITIALIZER;

static bool parent_known(const char *root, uid_t uid, size_t i, uint64_t budget)
{
	struct parent_memo *m = &parents[uid % PARENT_SLOTS];
	pthread_mutex_lock(&parents_mu);
	bool known = m->uid == uid && strcmp(m->root, root) == 0 && m->known[i] && m->budget[i] == budget;
	pthread_mutex_unlock(&parents_mu);
	return known;
}

static void parent_set(const char *root, uid_t uid, size_t i, bool known, uint64_t budget)
{
	struct parent_memo *m = &parents[uid % PARENT_SLOTS];
	pthread_mutex_lock(&parents_mu);
	if (m->uid != uid || strcmp(m->root, root) != 0) {
		memset(m, 0, sizeof *m);
		snprintf(m->root, sizeof m->root, "%s", root);
		m->uid = uid;
	}
	m->known[i] = known;
	m->budget[i] = budget;
	pthread_mutex_unlock(&parents_mu);
}

static void parents_forget_root(const char *root)
{
	pthread_mutex_lock(&parents_mu);
	for (size_t k = 0; k < PARENT_SLOTS; k++)
		if (strcmp(parents[k].root, root) == 0)
			memset(&parents[k], 0, sizeof parents[k]);
	pthread_mutex_unlock(&parents_mu);
}

/* The tenant's parent group in hierarchy i, made and holding budget. */
static int ensure_parent(size_t i, const char *root, const char *rel, uid_t uid, uint64_t budget)
{
	if (parent_known(root, uid, i, budget))
		return 0;
	int rc = cg1_mkdir_p(cg1_layout.dir[i], rel);
	if (rc == 0)
		rc = set_budget(i, rel, budget);
	parent_set(root, uid, i, rc == 0, budget);
	return rc;
}

static int v1_tenant_usage(const char *root, uid_t uid, uint64_t *mem_bytes, uint64_t *nproc)
{
	char path[600];
	int rc;

	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	snprintf(path, sizeof(path), CG_ROOT "/memory/%s/u%u/memory.usage_in_bytes", root, (unsigned)uid);
	rc = sbx_cgroup_read_u64(path, mem_bytes);
	if (rc < 0)
		return rc;
	snprintf(path, sizeof(path), CG_ROOT "/pids/%s/u%u/pids.current", root, (unsigned)uid);
	return sbx_cgroup_read_u64(path, nproc);
}

/* "throttled_time N" of a v1 cpu.stat (nanoseconds). */
static int read_throttled(const char *path, uint64_t *out)
{
	char buf[512];
	int rc = sbx_cgroup_read_text(path, buf, sizeof buf);
	const char *p = rc == 0 ? strstr(buf, "throttled_time ") : NULL;

	if (rc == 0 && !p)
		rc = -EIO;
	if (rc == 0)
		*out = strtoull(p + strlen("throttled_time "), NULL, 10);
	return rc;
}

static int v1_tenant_cpu(const char *root, uid_t uid, uint64_t *usage_ns, uint64_t *throttled_ns)
{
	char path[600];
	int rc;

	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	if (!cg1_layout.acct_dir)
		return -ENOTSUP;
	snprintf(path, sizeof(path), CG_ROOT "/%s/%s/u%u/cpuacct.usage", cg1_layout.acct_dir, root,
		 (unsigned)uid);
	rc = sbx_cgroup_read_u64(path, usage_ns);
	*throttled_ns = 0;
	if (rc < 0 || !cg1_layout.dir[H_CPU][0])
		return rc;
	snprintf(path, sizeof(path), CG_ROOT "/%s/%s/u%u/cpu.stat", cg1_layout.dir[H_CPU], root,
		 (unsigned)uid);
	return read_throttled(path, throttled_ns);
}

/* mkdir of the command's own group; a leftover of an earlier run with
 * the same number is removed first, never a group kept for reuse (one
 * of this run's, which may hold a running command). ENOENT: the parent
 * is gone. */
static int make_leaf(const char *path, const char *root, uid_t uid, uint64_t seq)
{
	if (mkdir(path, 0755) == 0)
		return 0;
	if (errno != EEXIST)
		return -errno;
	if (cg1_pool_has_name(root, uid, seq))
		return -EEXIST;
	int rc = cg1_rmdir_group(path);
	if (rc < 0)
		return rc;
	return mkdir(path, 0755) < 0 ? -errno : 0;
}

/* The tenant's budget in hierarchy i (cpuacct has none). */
static uint64_t budget_of(size_t i, const struct sbx_limits *lim)
{
	static const size_t budget_off[H_N] = {offsetof(struct sbx_limits, tenant_mem_bytes),
					       offsetof(struct sbx_limits, tenant_nproc),
					       offsetof(struct sbx_limits, tenant_cpu_millicores), 0};
	return i == H_CPUACCT ? 0 : *(const uint64_t *)((const char *)lim + budget_off[i]);
}

/* The command's group in hierarchy i, its limit set and its cgroup.procs
 * opened into *fd; *made is set once the group exists. */
static int prepare_one(size_t i, const char *root, const char *rel, uid_t uid, uint64_t seq,
		       const struct sbx_limits *lim, int *fd, bool *made)
{
	uint64_t v = i == H_MEMORY ? lim->mem_bytes : i == H_PIDS ? lim->nproc : 0;
	uint64_t budget = budget_of(i, lim);
	char path[600], file[640], val[32];
	int rc = ensure_parent(i, root, rel, uid, budget);

	if (rc == 0)
		rc = cg1_group_path(path, sizeof(path), cg1_layout.dir[i], root, uid, seq);
	if (rc == 0)
		rc = make_leaf(path, root, uid, seq);
	if (rc == -ENOENT) { /* the parent vanished behind the memo */
		parent_set(root, uid, i, false, 0);
		rc = ensure_parent(i, root, rel, uid, budget);
		if (rc == 0)
			rc = make_leaf(path, root, uid, seq);
	}
	if (rc < 0)
		return rc;
	*made = true;
	if (v && cg1_ctrls[i].limit_file) {
		snprintf(file, sizeof(file), "%s/%s", path, cg1_ctrls[i].limit_file);
		snprintf(val, sizeof(val), "%" PRIu64, v);
		rc = sbx_cgroup_write_file(file, val);
		if (rc < 0)
			return rc;
	}
	snprintf(file, sizeof(file), "%s/cgroup.procs", path);
	*fd = open(file, O_WRONLY | O_CLOEXEC);
	return *fd < 0 ? -errno : 0;
}

static int v1_prepare(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim,
		      int fds[SBX_CGROUP_MAX])
{
	/* A budget this host cannot enforce refuses the command. */
	if ((lim->tenant_cpu_millicores && !cg1_layout.dir[H_CPU][0]) ||
	    (lim->io_dev && (lim->tenant_io_read_bps || lim->tenant_io_write_bps ||
			     lim->tenant_io_read_iops || lim->tenant_io_write_iops)))
		return -EOPNOTSUPP;
	char rel[300], path[600];
	bool made[H_N] = {false};
	size_t i;
	int n = 0, rc = 0;

	for (i = 0; i < SBX_CGROUP_MAX; i++)
		fds[i] = -1;
	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	snprintf(rel, sizeof(rel), "%s/u%u", root, (unsigned)uid);
	for (i = 0; i < H_N && rc == 0; i++) /* the budgets apply to kept groups too */
		if (cg1_layout.dir[i][0])
			rc = ensure_parent(i, root, rel, uid, budget_of(i, lim));
	if (rc == 0 && (n = cg1_pool_reuse(root, uid, seq, lim, fds)) > 0)
		return n;
	n = 0;
	cg1_pool_evict(root, uid, seq);
	for (i = 0; i < H_N && rc == 0; i++) {
		if (cg1_layout.dir[i][0])
			rc = prepare_one(i, root, rel, uid, seq, lim, &fds[n++], &made[i]);
	}
	if (rc == 0) {
		cg1_pool_track(root, uid, seq, lim);
		return n;
	}
	for (i = 0; i < SBX_CGROUP_MAX; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
	for (i = 0; i < H_N; i++) {
		if (made[i] && cg1_group_path(path, sizeof(path), cg1_layout.dir[i], root, uid, seq) == 0)
			cg1_rmdir_group(path);
	}
	return rc;
}

static int v1_claim(const char *root)
{
	char path[512];

	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	snprintf(path, sizeof(path), CG_ROOT "/pids/%s", root);
	return sbx_cgroup_lock_dir(path);
}

static int v1_sweep(const char *root)
{
	char path[512];
	int removed = 0;

	if (!sbx_cgroup_name_ok(root))
		return 0;
	parents_forget_root(root);
	cg1_pool_forget_root(root);
	for (size_t i = 0; i < H_N; i++) {
		if (!cg1_layout.dir[i][0])
			continue;
		snprintf(path, sizeof(path), CG_ROOT "/%s/%s", cg1_layout.dir[i], root);
		removed += sbx_cgroup_sweep_below(path, 0, NULL, NULL, cg1_rmdir_group);
	}
	return removed;
}

static void v1_release(const char *root, int lock_fd)
{
	char path[512];

	if (sbx_cgroup_name_ok(root)) {
		v1_sweep(root);
		for (size_t i = 0; i < H_N; i++) {
			if (!cg1_layout.dir[i][0])
				continue;
			snprintf(path, sizeof(path), CG_ROOT "/%s/%s", cg1_layout.dir[i], root);
			cg1_rmdir_group(path);
		}
	}
	if (lock_fd >= 0)
		close(lock_fd);
}

static int v1_probe(const char *root, struct sbx_cgroup_caps *caps)
{
	if (!cg1_probe_layout(root)) {
		snprintf(caps->why, sizeof caps->why,
			 "/sys/fs/cgroup/memory and /sys/fs/cgroup/pids are not v1 hierarchies this process "
			 "can write (run as root on a host with them, or on a cgroup v2 host)");
		return -ENOTSUP;
	}
	caps->version = 1;
	caps->memory = caps->pids = true;
	caps->cpu = cg1_layout.dir[H_CPU][0] != '\0';
	caps->cpu_usage = cg1_layout.acct_dir != NULL;
	caps->io = false;
	caps->psi = false;
	snprintf(caps->why, sizeof caps->why, "%s%s",
		 caps->cpu ? "" : "no writable v1 cpu hierarchy: no CPU budget; ",
		 "no v1 blkio: no I/O budget");
	return 0;
}

const struct sbx_cgroup_driver sbx_cgroup_v1 = {
    .name = "v1",
    .probe = v1_probe,
    .prepare = v1_prepare,
    .remove = cg1_remove,
    .tenant_usage = v1_tenant_usage,
    .tenant_cpu = v1_tenant_cpu,
    .tenant_pressure = NULL,
    .kept = cg1_kept,
    .claim = v1_claim,
    .sweep = v1_sweep,
    .release = v1_release,
};
