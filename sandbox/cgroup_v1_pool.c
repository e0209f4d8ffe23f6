/* The cgroup v1 driver's kept groups (cgroup_v1_int.h): a command's
 * emptied groups kept, checked and reset for the tenant's next command,
 * the fds kept of each, the counters that say why a command ended, and
 * the reap that keeps or removes a command's groups. Apart from
 * cgroup_v1.c, which makes the groups, since what is kept, and why it is
 * safe to hand on, is a concern of its own; on cgroup_v1_hier.c. */
#include "sandbox/cgroup_v1_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/backend.h"

/* ---- the groups kept for a tenant's next command ----
 *
 * The mkdir of a v1 memory group (per-cpu counters, thirty control files)
 * costs ~100 us of kernel time, its rmdir ~60 us, its limits ~30 us more,
 * and the cpu and cpuacct groups add theirs: more than the rest of a
 * command's start (issue 15, P1). So a command's emptied groups are kept
 * for the tenant's next command when they are verifiably empty and clean,
 * checked when the command is reaped and again just before the next one
 * joins them:
 *   - no process is listed in them: what the command left is killed
 *     first, with cg1_rmdir_group's back-off (the condition an rmdir needs);
 *   - pids.current is 0 when the next command gets them: the pids
 *     controller counts a task until it is reaped, so this waits for the
 *     zombies a sandbox orphans (bwrap's outer process exits before the
 *     sandbox's init is reaped), which the server reaps at once as a
 *     subreaper (sandbox/reaper.h), or PID 1 when it cannot be one. A command's tasks are in all
 *     its groups: the child joins them all before it runs anything, its
 *     descendants inherit them, and no tenant uid can write a cgroup.procs;
 *   - memory.usage_in_bytes, what stays charged to the group (page cache
 *     of the files it wrote, kernel objects), is at most 4 MiB and 1/64
 *     of the next command's memory limit: the next command starts with
 *     (nearly) all of its limit, and the rest is reclaimable and goes
 *     first when it needs room. A bwrap `true` leaves 0.5-1.2 MiB at its
 *     reap, three quarters of it kernel memory (its namespaces, freed
 *     by the kernel's workers a little later): a 1 MiB bound removed
 *     every few groups and made the next command's anew;
 *   - memory.failcnt, memory.max_usage_in_bytes and cpuacct.usage are
 *     reset to 0, so that the limit hits, the peak and the CPU time a
 *     reader sees are the command's own (an OOM-killed command's are gone
 *     before its successor runs); the parents' counters are their own and
 *     keep counting;
 *   - the limits are rewritten when the next command's differ.
 * What the kernel cannot reset is cumulative over the group's commands:
 * memory.oom_control's oom_kill, pids.events' max, memory.stat's event
 * counters, cpu.stat. The first two say why a command ended
 * (sbx_cgroup_outcome): they are read when a kept group is handed to a
 * command (struct leaf's base) and again at its reap, and the command's
 * are the difference (a new group starts at 0). A group that fails a
 * check is removed as before, and a new one made for the next command.
 *
 * A kept group keeps its name (j<seq of the command that made it>), and
 * the table maps the command using it (by seq) to it; sweep and release
 * find it like any other group, after closing the fds kept here. The fds
 * (O_CLOEXEC, at most nine per group) are opened when a group is first
 * kept; at most POOL_MAX groups are tracked, POOL_PER_UID per tenant
 * (as many as the default tenant-max-execs runs at once: at 64 clients a
 * pool of 16 left half of each tenant's commands making and removing
 * groups, a quarter of the server's CPU at P3's load): beyond them
 * commands get groups made and removed as before. At most 576 fds. */
#define POOL_MAX 64
#define POOL_PER_UID 32
#define RESIDUAL_MAX (4u << 20)
#define POOL_SKIPS_MAX 64

struct leaf {
	bool used, busy;
	char root[64];
	uid_t uid;
	uint64_t name;	     /* j<name> */
	uint64_t seq;	     /* the command in it, when busy */
	uint64_t freed;	     /* when it was last released (pool_stamp) */
	unsigned skips;	     /* found still holding zombies, since its release */
	uint64_t limit[H_N]; /* memory.limit_in_bytes, pids.max as written (0: none) */
	uint64_t base[2];    /* oom_kill and pids.events' max when the command got it */
	int procs[H_N];	     /* cgroup.procs of each hierarchy in use, O_WRONLY: dup'ed per command */
	int usage, tasks;    /* memory.usage_in_bytes, pids.current: O_RDONLY */
	int reset[3];	     /* memory.failcnt, memory.max_usage_in_bytes, cpuacct.usage (-1: none) */
};
static struct leaf pool[POOL_MAX];
static uint64_t pool_stamp;
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;

static void leaf_close(struct leaf *l)
{
	int *fds[H_N + 5];
	size_t n = 0;
	for (size_t i = 0; i < H_N; i++)
		fds[n++] = &l->procs[i];
	fds[n++] = &l->usage;
	fds[n++] = &l->tasks;
	for (size_t k = 0; k < 3; k++)
		fds[n++] = &l->reset[k];
	for (size_t k = 0; k < n; k++) {
		if (*fds[k] >= 0)
			close(*fds[k]);
		*fds[k] = -1;
	}
}

static bool leaf_is(const struct leaf *l, const char *root, uid_t uid)
{
	return l->used && l->uid == uid && strcmp(l->root, root) == 0;
}

bool cg1_pool_has_name(const char *root, uid_t uid, uint64_t name)
{
	bool has = false;
	pthread_mutex_lock(&pool_mu);
	for (size_t k = 0; k < POOL_MAX && !has; k++)
		has = leaf_is(&pool[k], root, uid) && pool[k].name == name;
	pthread_mutex_unlock(&pool_mu);
	return has;
}

/* Before j<seq> is made: forget what the pool knows of that name or of
 * that command. Seqs are unique among running commands, so a group still
 * marked as the command seq's belongs to one that was never reaped, and
 * a free group named j<seq> is empty: both are leftovers, which
 * make_leaf removes by name. A group named j<seq> in use by another
 * command stays (make_leaf then refuses). */
void cg1_pool_evict(const char *root, uid_t uid, uint64_t seq)
{
	pthread_mutex_lock(&pool_mu);
	for (size_t k = 0; k < POOL_MAX; k++) {
		struct leaf *l = &pool[k];
		if (leaf_is(l, root, uid) && ((l->busy && l->seq == seq) || (!l->busy && l->name == seq))) {
			leaf_close(l);
			memset(l, 0, sizeof *l);
		}
	}
	pthread_mutex_unlock(&pool_mu);
}

/* The free group of the tenant released longest ago (after the one
 * released at stamp after: 0 for the first), now the command seq's;
 * NULL when none. The oldest first: the zombies a sandbox orphaned to
 * PID 1 have had the most time to be reaped there. */
static struct leaf *pool_take(const char *root, uid_t uid, uint64_t seq, uint64_t after)
{
	struct leaf *got = NULL;
	pthread_mutex_lock(&pool_mu);
	for (size_t k = 0; k < POOL_MAX; k++) {
		struct leaf *l = &pool[k];
		if (leaf_is(l, root, uid) && !l->busy && l->freed > after && (!got || l->freed < got->freed))
			got = l;
	}
	if (got) {
		got->busy = true;
		got->seq = seq;
	}
	pthread_mutex_unlock(&pool_mu);
	return got;
}

/* A slot for the new group j<seq> of the command seq; NULL when the pool
 * (or the tenant's share of it) is full, or when one of the tenant's kept
 * groups is idle: then it only waits for PID 1, and the pool grows with
 * the tenant's concurrent commands, not with PID 1's delay. */
struct leaf *cg1_pool_track(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim)
{
	struct leaf *slot = NULL;
	size_t mine = 0, idle = 0;
	pthread_mutex_lock(&pool_mu);
	for (size_t k = 0; k < POOL_MAX; k++) {
		if (leaf_is(&pool[k], root, uid)) {
			mine++;
			idle += !pool[k].busy;
		} else if (!pool[k].used && !slot) {
			slot = &pool[k];
		}
	}
	if (slot && mine < POOL_PER_UID && idle == 0) {
		*slot = (struct leaf){.used = true, .busy = true, .uid = uid, .name = seq, .seq = seq};
		snprintf(slot->root, sizeof slot->root, "%s", root);
		slot->limit[H_MEMORY] = lim->mem_bytes;
		slot->limit[H_PIDS] = lim->nproc;
		for (size_t i = 0; i < H_N; i++)
			slot->procs[i] = -1;
		slot->usage = slot->tasks = slot->reset[0] = slot->reset[1] = slot->reset[2] = -1;
	} else {
		slot = NULL;
	}
	pthread_mutex_unlock(&pool_mu);
	return slot;
}

void cg1_kept(const char *root, unsigned *busy, unsigned *idle)
{
	*busy = *idle = 0;
	pthread_mutex_lock(&pool_mu);
	for (size_t k = 0; k < POOL_MAX; k++) {
		if (pool[k].used && strcmp(pool[k].root, root) == 0) {
			*busy += pool[k].busy;
			*idle += !pool[k].busy;
		}
	}
	pthread_mutex_unlock(&pool_mu);
}

/* The group of the running command seq; NULL when it is not tracked. */
static struct leaf *pool_find(const char *root, uid_t uid, uint64_t seq)
{
	struct leaf *got = NULL;
	pthread_mutex_lock(&pool_mu);
	for (size_t k = 0; k < POOL_MAX && !got; k++)
		if (leaf_is(&pool[k], root, uid) && pool[k].busy && pool[k].seq == seq)
			got = &pool[k];
	pthread_mutex_unlock(&pool_mu);
	return got;
}

/* Back to the pool (free, released now), or forgotten. The caller owns
 * l (busy). */
static void pool_put(struct leaf *l, bool keep)
{
	pthread_mutex_lock(&pool_mu);
	if (keep) {
		l->busy = false;
		l->freed = ++pool_stamp;
		l->skips = 0;
	} else {
		leaf_close(l);
		memset(l, 0, sizeof *l);
	}
	pthread_mutex_unlock(&pool_mu);
}

/* Back to the pool as it was (not released anew): tried, not ready. */
static void pool_skip(struct leaf *l)
{
	pthread_mutex_lock(&pool_mu);
	l->busy = false;
	pthread_mutex_unlock(&pool_mu);
}

void cg1_pool_forget_root(const char *root)
{
	pthread_mutex_lock(&pool_mu);
	for (size_t k = 0; k < POOL_MAX; k++)
		if (pool[k].used && strcmp(pool[k].root, root) == 0) {
			leaf_close(&pool[k]);
			memset(&pool[k], 0, sizeof pool[k]);
		}
	pthread_mutex_unlock(&pool_mu);
}

/* A control file of l in the hierarchy directory dir, opened. */
static int leaf_file(const struct leaf *l, const char *dir, const char *file, int flags)
{
	char path[640];
	if (cg1_group_path(path, sizeof path - 40, dir, l->root, l->uid, l->name) < 0)
		return -ENAMETOOLONG;
	snprintf(path + strlen(path), 40, "/%s", file);
	int fd = open(path, flags | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return fd; /* the caller's */
}

/* The fds of a group kept for the first time. */
static int leaf_open(struct leaf *l)
{
	static const char *const resets[2] = {"memory.failcnt", "memory.max_usage_in_bytes"};
	for (size_t i = 0; i < H_N; i++)
		if (cg1_layout.dir[i][0] && l->procs[i] < 0 &&
		    (l->procs[i] = leaf_file(l, cg1_layout.dir[i], "cgroup.procs", O_WRONLY)) < 0)
			return l->procs[i];
	if (l->usage < 0 &&
	    (l->usage = leaf_file(l, cg1_layout.dir[H_MEMORY], "memory.usage_in_bytes", O_RDONLY)) < 0)
		return l->usage;
	if (l->tasks < 0 && (l->tasks = leaf_file(l, cg1_layout.dir[H_PIDS], "pids.current", O_RDONLY)) < 0)
		return l->tasks;
	for (size_t k = 0; k < 2; k++)
		if (l->reset[k] < 0 &&
		    (l->reset[k] = leaf_file(l, cg1_layout.dir[H_MEMORY], resets[k], O_WRONLY)) < 0)
			return l->reset[k];
	if (cg1_layout.acct_dir && l->reset[2] < 0 &&
	    (l->reset[2] = leaf_file(l, cg1_layout.acct_dir, "cpuacct.usage", O_WRONLY)) < 0)
		return l->reset[2];
	return 0;
}

/* A control file read again through its open fd (ENODEV: the group is gone). */
static int psbx_cgroup_read_u64(int fd, uint64_t *out)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	*out = strtoull(buf, NULL, 10);
	return 0;
}

/* What stays charged to l: at most RESIDUAL_MAX and 1/64 of mem_limit
 * (0: none); -ENOSPC beyond, -ENODEV when the group is gone. */
static int leaf_residue_ok(const struct leaf *l, uint64_t mem_limit)
{
	uint64_t charged = 0, cap = RESIDUAL_MAX;
	int rc = psbx_cgroup_read_u64(l->usage, &charged);
	if (mem_limit && mem_limit / 64 < cap)
		cap = mem_limit / 64;
	return rc < 0 ? rc : charged > cap ? -ENOSPC : 0;
}

/* At the reap: kill what the command left, with cg1_rmdir_group's back-off
 * while its last tasks are released (no task listed in cgroup.procs is
 * what an rmdir needs too), then check and reset the group for the next
 * command. Zombies orphaned to PID 1 are not waited for here: they hold
 * pids.current until PID 1 reaps them, which leaf_reuse checks. */
static int leaf_clean(struct leaf *l)
{
	char dir[600];
	long wait_ns = 50 * 1000, slept_ns = 0;
	int rc = leaf_open(l), listed;
	if (rc < 0 || cg1_group_path(dir, sizeof dir, cg1_layout.dir[H_PIDS], l->root, l->uid, l->name) < 0)
		return rc < 0 ? rc : -ENAMETOOLONG;
	while ((listed = sbx_cgroup_kill_listed(dir)) > 0 && slept_ns < 1000L * 1000 * 1000) {
		struct timespec ts = {0, wait_ns};
		nanosleep(&ts, NULL);
		slept_ns += wait_ns;
		wait_ns = wait_ns * 2 < 10L * 1000 * 1000 ? wait_ns * 2 : 10L * 1000 * 1000;
	}
	if (listed != 0)
		return listed < 0 ? listed : -EBUSY;
	if ((rc = leaf_residue_ok(l, l->limit[H_MEMORY])) < 0)
		return rc;
	for (size_t k = 0; k < 3; k++) {
		errno = EIO;
		if (l->reset[k] >= 0 && pwrite(l->reset[k], "0", 1, 0) != 1)
			return -errno;
	}
	return 0;
}

static int set_limit(const struct leaf *l, size_t i, uint64_t v)
{
	char path[640], val[32];
	if (cg1_group_path(path, sizeof path - 40, cg1_layout.dir[i], l->root, l->uid, l->name) < 0)
		return -ENAMETOOLONG;
	snprintf(path + strlen(path), 40, "/%s", cg1_ctrls[i].limit_file);
	if (v)
		snprintf(val, sizeof val, "%" PRIu64, v);
	else
		snprintf(val, sizeof val, "%s", i == H_PIDS ? "max" : "-1");
	return sbx_cgroup_write_file(path, val);
}

/* The cumulative counters of why a group's commands ended (v1 keeps them
 * in memory.oom_control and pids.events, "key N" lines): OUT_OOM the OOM
 * kills of its tasks (the memory limit's or an ancestor's: the victim's
 * group counts), OUT_PIDS the forks a pids limit refused in it (its own
 * or an ancestor's: on v1 the forking group counts). 0 where unread. */
enum { OUT_OOM, OUT_PIDS };
static void read_counters(const char *root, uid_t uid, uint64_t name, uint64_t v[2])
{
	static const struct {
		size_t hier;
		const char *file, *key;
	} src[2] = {{H_MEMORY, "memory.oom_control", "oom_kill "}, {H_PIDS, "pids.events", "max "}};
	for (size_t k = 0; k < 2; k++) {
		char path[640], buf[512];
		v[k] = 0;
		if (cg1_group_path(path, sizeof path - 40, cg1_layout.dir[src[k].hier], root, uid, name) < 0)
			continue;
		snprintf(path + strlen(path), 40, "/%s", src[k].file);
		if (sbx_cgroup_read_text(path, buf, sizeof buf) < 0)
			continue;
		size_t klen = strlen(src[k].key);
		const char *p = buf;
		while (p && strncmp(p, src[k].key, klen) != 0)
			p = (p = strchr(p, '\n')) ? p + 1 : NULL;
		if (p)
			v[k] = strtoull(p + klen, NULL, 10);
	}
}

/* A kept group made ready for the next command: still empty and clean,
 * its limits, and its cgroup.procs (dup'ed into fds, the caller's, in
 * the order of the hierarchies in use). */
static int leaf_reuse(struct leaf *l, const struct sbx_limits *lim, int fds[SBX_CGROUP_MAX])
{
	const uint64_t want[2] = {lim->mem_bytes, lim->nproc}; /* H_MEMORY, H_PIDS */
	uint64_t tasks = 0;
	int rc = psbx_cgroup_read_u64(l->tasks, &tasks), n = 0;
	if (rc == 0 && tasks)
		return -EBUSY; /* zombies not yet reaped by PID 1: later */
	if (rc == 0)
		rc = leaf_residue_ok(l, want[H_MEMORY]);
	for (size_t i = H_MEMORY; i <= H_PIDS && rc == 0; i++)
		if (want[i] != l->limit[i] && (rc = set_limit(l, i, want[i])) == 0)
			l->limit[i] = want[i];
	for (size_t i = 0; i < H_N && rc == 0; i++)
		if (cg1_layout.dir[i][0] && (fds[n++] = fcntl(l->procs[i], F_DUPFD_CLOEXEC, 3)) < 0)
			rc = -errno;
	if (rc == 0) /* where this command's counts start */
		read_counters(l->root, l->uid, l->name, l->base);
	if (rc < 0)
		for (size_t i = 0; i < SBX_CGROUP_MAX; i++) {
			if (fds[i] >= 0)
				close(fds[i]);
			fds[i] = -1;
		}
	return rc < 0 ? rc : n;
}

/* Remove a tracked group that cannot be used again, unless it is gone
 * already (its name may then be another command's). */
static void leaf_drop(struct leaf *l)
{
	uint64_t v;
	bool gone = l->tasks >= 0 && psbx_cgroup_read_u64(l->tasks, &v) == -ENODEV;
	char path[600];
	for (size_t i = 0; i < H_N && !gone; i++)
		if (cg1_layout.dir[i][0] &&
		    cg1_group_path(path, sizeof path, cg1_layout.dir[i], l->root, l->uid, l->name) == 0)
			cg1_rmdir_group(path);
	pool_put(l, false);
}

/* A kept group of the tenant for the command seq, fds its cgroup.procs:
 * how many, or -ENOENT when none is ready. */
int cg1_pool_reuse(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim,
		   int fds[SBX_CGROUP_MAX])
{
	struct leaf *l;
	uint64_t after = 0;
	/* The two released longest ago: when they still wait for PID 1, the
	 * later ones do too. One that waited POOL_SKIPS_MAX times (a PID 1
	 * that does not reap) gives its slot up (zombies do not stop an
	 * rmdir). */
	for (int tries = 0; tries < 2 && (l = pool_take(root, uid, seq, after)) != NULL; tries++) {
		int n = leaf_reuse(l, lim, fds);
		if (n > 0)
			return n;
		after = l->freed;
		if (n == -EBUSY && ++l->skips < POOL_SKIPS_MAX)
			pool_skip(l);
		else
			leaf_drop(l);
	}
	return -ENOENT;
}

void cg1_remove(const char *root, uid_t uid, uint64_t seq, struct sbx_cgroup_outcome *out)
{
	char path[600];

	if (out)
		*out = (struct sbx_cgroup_outcome){0};
	if (!sbx_cgroup_name_ok(root))
		return;
	struct leaf *l = pool_find(root, uid, seq);
	if (out) { /* before what the command left is killed: those kills are ours */
		uint64_t now[2], zero[2] = {0, 0};
		const uint64_t *base = l ? l->base : zero;
		read_counters(root, uid, l ? l->name : seq, now);
		out->oom_killed = now[OUT_OOM] > base[OUT_OOM];
		out->pids_limited = now[OUT_PIDS] > base[OUT_PIDS];
	}
	if (l && leaf_clean(l) == 0) {
		pool_put(l, true);
		return;
	}
	if (l) {
		leaf_drop(l);
		return;
	}
	for (size_t i = 0; i < H_N; i++) {
		if (cg1_layout.dir[i][0] &&
		    cg1_group_path(path, sizeof(path), cg1_layout.dir[i], root, uid, seq) == 0)
			cg1_rmdir_group(path);
	}
}
