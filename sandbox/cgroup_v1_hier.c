/* The cgroup v1 driver's hierarchies (cgroup_v1_int.h): which ones the
 * host has and where (the probe), a group's path in one, and the mkdir
 * and rmdir of groups. The driver's ground floor: cgroup_v1.c and
 * cgroup_v1_pool.c stand on it, and it calls neither. */
#include "sandbox/cgroup_v1_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const struct ctrl cg1_ctrls[H_N] = {
    {{"memory"}, "memory.limit_in_bytes", "memory.limit_in_bytes"},
    {{"pids"}, "pids.max", "pids.max"},
    {{"cpu", "cpu,cpuacct", "cpuacct,cpu"}, "cpu.cfs_quota_us", NULL},
    {{"cpuacct", "cpu,cpuacct", "cpuacct,cpu"}, "cpuacct.usage", NULL},
};

/* The host's layout (cgroup_v1_int.h): a mutex for the probe's writes. */
struct layout cg1_layout = {.dir = {"memory", "pids", "", ""}};
static pthread_mutex_t layout_mu = PTHREAD_MUTEX_INITIALIZER;

/* mkdir -p of <CG_ROOT>/<hier>/<rel>; each step must end as a directory
 * (EEXIST of a control file is not success). */
int cg1_mkdir_p(const char *hier, const char *rel)
{
	char path[512];
	size_t base, i;
	struct stat st;
	int n;

	n = snprintf(path, sizeof(path), CG_ROOT "/%s/%s", hier, rel);
	if (n < 0 || (size_t)n >= sizeof(path))
		return -ENAMETOOLONG;
	base = strlen(CG_ROOT) + 1 + strlen(hier) + 1;
	for (i = base;; i++) {
		if (path[i] != '/' && path[i] != '\0')
			continue;
		char saved = path[i];

		path[i] = '\0';
		if (mkdir(path, 0755) < 0) {
			if (errno != EEXIST)
				return -errno;
			if (lstat(path, &st) < 0)
				return -errno;
			if (!S_ISDIR(st.st_mode))
				return -ENOTDIR;
		}
		path[i] = saved;
		if (saved == '\0')
			break;
	}
	return 0;
}

/* rmdir one group, killing what is left in it. EBUSY right after the reap
 * is common (3-37 % of bwrap execs on a busy 2-vCPU VM): the sandbox's
 * last tasks are still being released. Back off from 50 us, doubling to
 * 10 ms, so the usual case costs well under a millisecond; give up after
 * ~1 s of sleep. Returns 0 when the group is gone. */
int cg1_rmdir_group(const char *path)
{
	long wait_ns = 50 * 1000, slept_ns = 0;

	for (int attempt = 0; attempt < 200 && slept_ns < 1000L * 1000 * 1000; attempt++) {
		struct timespec ts = {0, wait_ns};

		if (rmdir(path) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return -errno;
		sbx_cgroup_kill_listed(path);
		nanosleep(&ts, NULL);
		slept_ns += wait_ns;
		if (wait_ns < 10L * 1000 * 1000)
			wait_ns = wait_ns * 2 < 10L * 1000 * 1000 ? wait_ns * 2 : 10L * 1000 * 1000;
	}
	return -EBUSY;
}

int cg1_group_path(char *out, size_t outsz, const char *hier, const char *root, uid_t uid, uint64_t seq)
{
	int n = snprintf(out, outsz, CG_ROOT "/%s/%s/u%u/j%" PRIu64, hier, root, (unsigned)uid, seq);

	return n < 0 || (size_t)n >= outsz ? -ENAMETOOLONG : 0;
}

/* Hierarchy i usable for root: a v1 hierarchy root may write, <root>
 * made in it, the controller's own file there (v1 only: the controller's
 * files sit in every group). */
static bool hier_ok(const char *dir, size_t i, const char *root)
{
	char path[512];

	snprintf(path, sizeof(path), CG_ROOT "/%s/cgroup.procs", dir);
	if (access(path, W_OK) < 0 || cg1_mkdir_p(dir, root) < 0)
		return false;
	snprintf(path, sizeof(path), CG_ROOT "/%s/%s/%s", dir, root, cg1_ctrls[i].probe_file);
	return access(path, i == H_CPUACCT ? R_OK : W_OK) == 0;
}

/* cpu's and cpuacct's directories: the first of their mount names that
 * works; cpuacct's dropped (usage read in cpu's) when both name one
 * hierarchy. Neither is required: without cpu there is no CPU budget,
 * without cpuacct no usage. */
static void probe_cpu(const char *root)
{
	struct stat st[2];
	bool same;

	for (size_t i = H_CPU; i <= H_CPUACCT; i++) {
		cg1_layout.dir[i][0] = '\0';
		for (size_t k = 0; k < 3 && cg1_ctrls[i].mounts[k]; k++) {
			if (hier_ok(cg1_ctrls[i].mounts[k], i, root)) {
				snprintf(cg1_layout.dir[i], sizeof cg1_layout.dir[i], "%s",
					 cg1_ctrls[i].mounts[k]);
				break;
			}
		}
	}
	same = cg1_layout.dir[H_CPU][0] && cg1_layout.dir[H_CPUACCT][0];
	if (same) {
		char a[64], b[64];
		snprintf(a, sizeof a, CG_ROOT "/%s", cg1_layout.dir[H_CPU]);
		snprintf(b, sizeof b, CG_ROOT "/%s", cg1_layout.dir[H_CPUACCT]);
		same = stat(a, &st[0]) == 0 && stat(b, &st[1]) == 0 && st[0].st_dev == st[1].st_dev &&
		       st[0].st_ino == st[1].st_ino;
	}
	if (same)
		cg1_layout.dir[H_CPUACCT][0] = '\0';
	cg1_layout.acct_dir = cg1_layout.dir[H_CPUACCT][0] ? cg1_layout.dir[H_CPUACCT]
			      : same			   ? cg1_layout.dir[H_CPU]
							   : NULL;
}

bool cg1_probe_layout(const char *root)
{
	bool ok = sbx_cgroup_name_ok(root);

	pthread_mutex_lock(&layout_mu);
	for (size_t i = H_MEMORY; ok && i <= H_PIDS; i++)
		ok = hier_ok(cg1_layout.dir[i], i, root);
	if (ok)
		probe_cpu(root);
	pthread_mutex_unlock(&layout_mu);
	return ok;
}
