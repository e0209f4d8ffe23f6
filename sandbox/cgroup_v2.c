/* The cgroup layer's v2 driver (sandbox/cgroup.h): the unified hierarchy,
 * below the server's own cgroup as the probe found it (base):
 *
 *     <base>/<root>/server      the server (and, in a container, its init)
 *     <base>/<root>/u<uid>      the tenant: memory.max, memory.swap.max,
 *                               pids.max, cpu.max, cpu.weight, io.max
 *     <base>/<root>/u<uid>/j<n> a command: memory.max, memory.swap.max 0,
 *                               memory.oom.group 1, pids.max
 *
 * The "no internal processes" rule: a group that enables controllers for
 * its children (cgroup.subtree_control) holds no process itself (the root
 * group excepted). So the probe first moves the server, and every other
 * process of base (a container's init), into the leaf <root>/server, then
 * enables memory, pids, cpu (and io) from base down to <root>; each
 * tenant's group enables them for its commands.
 *
 * No group is kept for reuse (v1 keeps emptied ones: cgroup_v1_pool.c): a
 * command's group is made at its start and removed at its end. That costs
 * a mkdir and an rmdir of a memory group per command (some 100-200 us of
 * kernel time); what it buys is that every counter the end reads
 * (memory.events, pids.events) is the command's own, and no check of a
 * group's cleanliness can be wrong.
 *
 * Threads: the probe once, before any command; afterwards the tenants'
 * memo is behind a mutex, the rest is the kernel's. */
#include "sandbox/cgroup_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/backend.h"

#define CG_MNT "/sys/fs/cgroup"
#define LEAF "server"
#define CPU_PERIOD_US 100000 /* cpu.max's period, written explicitly */
#define CPU_WEIGHT "100"     /* every tenant the same: equal shares under contention */

/* What the probe found (written once, before any command). */
static struct {
	char base[512]; /* the server's own group at its first probe, absolute */
	bool moved;	/* the server is in a leaf <base>/<some root>/server */
	bool ns_root;	/* base is the root of the process's cgroup namespace ("0::/") */
	bool cpu, io, psi;
	char ctrls[64]; /* "+memory +pids[ +cpu][ +io]" for cgroup.subtree_control */
} v2;

/* dir/file into out; -ENAMETOOLONG when it does not fit. */
static int path_of(char *out, size_t outsz, const char *dir, const char *file)
{
	int n = snprintf(out, outsz, "%s/%s", dir, file);

	return n < 0 || (size_t)n >= outsz ? -ENAMETOOLONG : 0;
}

static int write_in(const char *dir, const char *file, const char *val)
{
	char path[700];
	int rc = path_of(path, sizeof path, dir, file);

	return rc < 0 ? rc : sbx_cgroup_write_file(path, val);
}

static int read_in(const char *dir, const char *file, char *buf, size_t bufsz)
{
	char path[700];
	int rc = path_of(path, sizeof path, dir, file);

	return rc < 0 ? rc : sbx_cgroup_read_text(path, buf, bufsz);
}

/* The value of "key N" in a flat-keyed file's text (cgroup.events,
 * memory.events, pids.events, cpu.stat); false when absent. */
static bool keyed_u64(const char *text, const char *key, uint64_t *out)
{
	size_t klen = strlen(key);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, key, klen) == 0 && p[klen] == ' ') {
			*out = strtoull(p + klen + 1, NULL, 10);
			return true;
		}
	}
	return false;
}

static int group_dir(char *out, size_t outsz, const char *root, uid_t uid, char kind, uint64_t seq)
{
	int n = kind ? snprintf(out, outsz, "%s/%s/u%u/%c%" PRIu64, v2.base, root, (unsigned)uid, kind, seq)
		     : snprintf(out, outsz, "%s/%s/u%u", v2.base, root, (unsigned)uid);

	return n < 0 || (size_t)n >= outsz ? -ENAMETOOLONG : 0;
}

/* True when dir holds no process, itself or below (cgroup.events
 * "populated 0"); an unreadable one (gone) counts as empty. */
static bool unpopulated(const char *dir)
{
	char buf[256];
	uint64_t v = 1;

	if (read_in(dir, "cgroup.events", buf, sizeof buf) < 0)
		return true;
	return keyed_u64(buf, "populated", &v) && v == 0;
}

/* Kill everything in dir and below, and remove dir (its children must be
 * gone already). cgroup.kill (5.14+) ends the whole tree at once, forks in
 * flight included; older kernels get SIGKILL for every listed process
 * until none is left. Waits for the tasks to go with a back-off from
 * 50 us doubling to 10 ms, ~2 s at most. 0 when the group is gone. */
static int kill_remove(const char *dir)
{
	long wait_ns = 50 * 1000, slept_ns = 0;
	bool has_kill = write_in(dir, "cgroup.kill", "1") != -ENOENT;

	for (;;) {
		struct timespec ts = {0, wait_ns};

		if (unpopulated(dir)) {
			if (rmdir(dir) == 0 || errno == ENOENT)
				return 0;
			if (errno != EBUSY)
				return -errno;
		}
		if (slept_ns >= 2000L * 1000 * 1000)
			return -EBUSY;
		if (has_kill)
			write_in(dir, "cgroup.kill", "1");
		else
			sbx_cgroup_kill_listed(dir);
		nanosleep(&ts, NULL);
		slept_ns += wait_ns;
		wait_ns = wait_ns * 2 < 10L * 1000 * 1000 ? wait_ns * 2 : 10L * 1000 * 1000;
	}
}

/* mkdir of dir: 0 when made, 1 when a directory was there already;
 * anything else in its place (a control file) is -ENOTDIR. */
static int mkdir_or_found(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0755) == 0)
		return 0;
	if (errno != EEXIST)
		return -errno;
	if (lstat(dir, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 1 : -ENOTDIR;
}

/* mkdir of dir; an existing directory is success. */
static int mkdir_dir(const char *dir)
{
	int rc = mkdir_or_found(dir);
	return rc > 0 ? 0 : rc;
}

/* ---- the tenants' groups ----
 *
 * What this process wrote to each tenant's group, so that a command of a
 * known tenant skips the mkdir and the writes. A cache, not the truth: a
 * slot may be taken by another tenant (which then pays the full path
 * once), a sweep forgets the root's tenants, and a group that vanished
 * anyway shows up as ENOENT at the command's mkdir, which forgets it and
 * makes it again. */
struct budget {
	uint64_t mem, nproc, cpu_mc;
	uint64_t rbps, wbps, riops, wiops;
	dev_t io_dev;
};
#define TENANT_SLOTS 256
static struct tenant_memo {
	char root[64];
	uid_t uid;
	bool known;
	struct budget b;
} tenants[TENANT_SLOTS];
static pthread_mutex_t tenants_mu = PTHREAD_MUTEX_INITIALIZER;

/* What this process last wrote to the tenant's group, if it knows. */
static bool tenant_had(const char *root, uid_t uid, struct budget *had)
{
	struct tenant_memo *m = &tenants[uid % TENANT_SLOTS];
	bool known;

	pthread_mutex_lock(&tenants_mu);
	known = m->known && m->uid == uid && strcmp(m->root, root) == 0;
	if (known)
		*had = m->b;
	pthread_mutex_unlock(&tenants_mu);
	return known;
}

static void tenant_set(const char *root, uid_t uid, const struct budget *b)
{
	struct tenant_memo *m = &tenants[uid % TENANT_SLOTS];

	pthread_mutex_lock(&tenants_mu);
	memset(m, 0, sizeof *m);
	if (b) {
		snprintf(m->root, sizeof m->root, "%s", root);
		m->uid = uid;
		m->known = true;
		m->b = *b;
	}
	pthread_mutex_unlock(&tenants_mu);
}

static void tenants_forget_root(const char *root)
{
	pthread_mutex_lock(&tenants_mu);
	for (size_t k = 0; k < TENANT_SLOTS; k++)
		if (strcmp(tenants[k].root, root) == 0)
			memset(&tenants[k], 0, sizeof tenants[k]);
	pthread_mutex_unlock(&tenants_mu);
}

static void budget_of(const struct sbx_limits *lim, struct budget *b)
{
	memset(b, 0, sizeof *b); /* padding too: compared with memcmp */
	b->mem = lim->tenant_mem_bytes;
	b->nproc = lim->tenant_nproc;
	b->cpu_mc = lim->tenant_cpu_millicores;
	if (lim->io_dev) {
		b->io_dev = lim->io_dev;
		b->rbps = lim->tenant_io_read_bps;
		b->wbps = lim->tenant_io_write_bps;
		b->riops = lim->tenant_io_read_iops;
		b->wiops = lim->tenant_io_write_iops;
	}
}

static bool io_any(const struct budget *b)
{
	return b->io_dev && (b->rbps || b->wbps || b->riops || b->wiops);
}

static void u64_or_max(char *out, size_t outsz, uint64_t v)
{
	if (v)
		snprintf(out, outsz, "%" PRIu64, v);
	else
		snprintf(out, outsz, "max");
}

/* io.max's line for dev: each of the four a number or "max" (all "max"
 * removes the device's line). */
static int write_io(const char *dir, dev_t dev, const struct budget *b)
{
	char line[200], v[4][24];

	u64_or_max(v[0], sizeof v[0], b ? b->rbps : 0);
	u64_or_max(v[1], sizeof v[1], b ? b->wbps : 0);
	u64_or_max(v[2], sizeof v[2], b ? b->riops : 0);
	u64_or_max(v[3], sizeof v[3], b ? b->wiops : 0);
	snprintf(line, sizeof line, "%u:%u rbps=%s wbps=%s riops=%s wiops=%s", major(dev), minor(dev), v[0],
		 v[1], v[2], v[3]);
	return write_in(dir, "io.max", line);
}

/* The budget b on the tenant's group dir (made, its controllers enabled
 * for its commands); had: what an earlier call wrote there, NULL when not
 * known (then everything is written). */
static int set_budget(const char *dir, const struct budget *b, const struct budget *had)
{
	char val[64];
	int rc = 0;

	if (!had) {
		rc = mkdir_dir(dir);
		if (rc == 0)
			rc = write_in(dir, "cgroup.subtree_control", v2.ctrls);
	}
	if (rc == 0 && (!had || had->mem != b->mem)) {
		u64_or_max(val, sizeof val, b->mem);
		rc = write_in(dir, "memory.max", val);
		/* No swap for a tenant with a budget (or swap defeats it); a
		 * kernel without swap accounting has no swap.max to write. */
		if (rc == 0) {
			rc = write_in(dir, "memory.swap.max", b->mem ? "0" : "max");
			rc = rc == -ENOENT ? 0 : rc;
		}
	}
	if (rc == 0 && (!had || had->nproc != b->nproc)) {
		u64_or_max(val, sizeof val, b->nproc);
		rc = write_in(dir, "pids.max", val);
	}
	if (rc == 0 && v2.cpu && (!had || had->cpu_mc != b->cpu_mc)) {
		if (b->cpu_mc)
			snprintf(val, sizeof val, "%" PRIu64 " %d", b->cpu_mc * (CPU_PERIOD_US / 1000),
				 CPU_PERIOD_US);
		else
			snprintf(val, sizeof val, "max %d", CPU_PERIOD_US);
		rc = write_in(dir, "cpu.max", val);
		if (rc == 0 && !had)
			rc = write_in(dir, "cpu.weight", CPU_WEIGHT);
	}
	if (rc == 0 && v2.io) {
		/* Another device than before: its line goes first. */
		if (had && had->io_dev && had->io_dev != b->io_dev)
			rc = write_io(dir, had->io_dev, NULL);
		if (rc == 0 && b->io_dev &&
		    (!had || had->io_dev != b->io_dev || had->rbps != b->rbps || had->wbps != b->wbps ||
		     had->riops != b->riops || had->wiops != b->wiops))
			rc = write_io(dir, b->io_dev, b);
	}
	return rc;
}

/* The tenant's group with the budget of lim; -EOPNOTSUPP when it holds a
 * budget this host cannot enforce. */
static int ensure_tenant(const char *root, uid_t uid, const struct sbx_limits *lim, bool fresh)
{
	char dir[600];
	struct budget b, had;
	bool have_had;
	int rc;

	budget_of(lim, &b);
	if ((b.cpu_mc && !v2.cpu) || (io_any(&b) && !v2.io))
		return -EOPNOTSUPP;
	have_had = !fresh && tenant_had(root, uid, &had);
	if (have_had && memcmp(&had, &b, sizeof b) == 0)
		return 0;
	rc = group_dir(dir, sizeof dir, root, uid, 0, 0);
	if (rc == 0)
		rc = set_budget(dir, &b, have_had ? &had : NULL);
	tenant_set(root, uid, rc == 0 ? &b : NULL);
	return rc;
}

/* ---- commands ---- */

static void close_fds(int fds[SBX_CGROUP_MAX])
{
	for (size_t i = 0; i < SBX_CGROUP_MAX; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

/* A new group j<seq> of the tenant: an existing one is a leftover of an
 * earlier run (seq numbers restart), killed and removed first; a control
 * file of that name is refused. ENOENT: the tenant's group is gone. */
static int make_group(const char *dir)
{
	int rc = mkdir_or_found(dir);

	if (rc <= 0)
		return rc;
	rc = kill_remove(dir);
	if (rc < 0)
		return rc;
	return mkdir(dir, 0755) < 0 ? -errno : 0;
}

/* The tenant's group and the command's new j<seq> below it, made. */
static int make_below_tenant(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim,
			     char *dir, size_t dirsz)
{
	int rc = ensure_tenant(root, uid, lim, false);

	if (rc == 0)
		rc = group_dir(dir, dirsz, root, uid, 'j', seq);
	if (rc == 0)
		rc = make_group(dir);
	if (rc == -ENOENT) { /* the tenant's group vanished behind the memo */
		rc = ensure_tenant(root, uid, lim, true);
		if (rc == 0)
			rc = make_group(dir);
	}
	return rc;
}

static int open_procs(const char *dir, int fds[SBX_CGROUP_MAX])
{
	char path[700];
	int rc = path_of(path, sizeof path, dir, "cgroup.procs");

	if (rc < 0)
		return rc;
	fds[0] = open(path, O_WRONLY | O_CLOEXEC);
	return fds[0] < 0 ? -errno : 1;
}

static int v2_prepare(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim,
		      int fds[SBX_CGROUP_MAX])
{
	char dir[600], val[32];
	int rc;

	for (size_t i = 0; i < SBX_CGROUP_MAX; i++)
		fds[i] = -1;
	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	rc = make_below_tenant(root, uid, seq, lim, dir, sizeof dir);
	if (rc == -ENOTDIR || rc == -EOPNOTSUPP || rc == -ENAMETOOLONG)
		return rc; /* nothing of ours made */
	if (rc == 0 && lim->mem_bytes) {
		snprintf(val, sizeof val, "%" PRIu64, lim->mem_bytes);
		rc = write_in(dir, "memory.max", val);
	}
	if (rc == 0) {
		rc = write_in(dir, "memory.swap.max", "0");
		rc = rc == -ENOENT ? 0 : rc; /* no swap accounting: no swap.max */
	}
	if (rc == 0)
		rc = write_in(dir, "memory.oom.group", "1");
	if (rc == 0 && lim->nproc) {
		snprintf(val, sizeof val, "%" PRIu64, lim->nproc);
		rc = write_in(dir, "pids.max", val);
	}
	if (rc == 0)
		rc = open_procs(dir, fds);
	if (rc > 0)
		return rc;
	close_fds(fds);
	if (group_dir(dir, sizeof dir, root, uid, 'j', seq) == 0)
		kill_remove(dir);
	return rc;
}

static void v2_remove(const char *root, uid_t uid, uint64_t seq, struct sbx_cgroup_outcome *out)
{
	char dir[600], buf[512];
	uint64_t v;

	if (!sbx_cgroup_name_ok(root) || group_dir(dir, sizeof dir, root, uid, 'j', seq) < 0)
		return;
	/* Why it ended, before the kill (which adds nothing to these, but
	 * the group must still be there). memory.events counts the kills of
	 * the group's tasks whichever limit was hit (its own or the
	 * tenant's); pids.events counts the forks refused to its tasks. */
	if (read_in(dir, "memory.events", buf, sizeof buf) == 0)
		out->oom_killed = (keyed_u64(buf, "oom_kill", &v) && v > 0) ||
				  (keyed_u64(buf, "oom_group_kill", &v) && v > 0);
	if (read_in(dir, "pids.events", buf, sizeof buf) == 0)
		out->pids_limited = keyed_u64(buf, "max", &v) && v > 0;
	kill_remove(dir);
}

/* ---- reading the tenants' use ---- */

static int v2_tenant_usage(const char *root, uid_t uid, uint64_t *mem_bytes, uint64_t *nproc)
{
	char dir[600], path[700];
	int rc;

	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	rc = group_dir(dir, sizeof dir, root, uid, 0, 0);
	if (rc == 0)
		rc = path_of(path, sizeof path, dir, "memory.current");
	if (rc == 0)
		rc = sbx_cgroup_read_u64(path, mem_bytes);
	if (rc == 0)
		rc = path_of(path, sizeof path, dir, "pids.current");
	return rc < 0 ? rc : sbx_cgroup_read_u64(path, nproc);
}

static int v2_tenant_cpu(const char *root, uid_t uid, uint64_t *usage_ns, uint64_t *throttled_ns)
{
	char dir[600], buf[1024];
	uint64_t us = 0;
	int rc;

	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	rc = group_dir(dir, sizeof dir, root, uid, 0, 0);
	if (rc == 0)
		rc = read_in(dir, "cpu.stat", buf, sizeof buf);
	if (rc < 0)
		return rc;
	if (!keyed_u64(buf, "usage_usec", &us))
		return -EIO;
	*usage_ns = us * 1000;
	us = 0;
	keyed_u64(buf, "throttled_usec", &us); /* only with the cpu controller */
	*throttled_ns = us * 1000;
	return 0;
}

/* One PSI file: "some avg10=A avg60=B avg300=C total=T" and the same for
 * "full" (cpu.pressure's full line: kernels 5.13+; 0 without). */
static int read_psi(const char *dir, const char *file, struct sbx_psi *out)
{
	char buf[512];
	int rc = read_in(dir, file, buf, sizeof buf);

	if (rc < 0)
		return rc;
	for (char *line = buf; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		bool some = strncmp(line, "some ", 5) == 0, full = strncmp(line, "full ", 5) == 0;
		char *a = strstr(line, "avg10="), *t = strstr(line, "total="), *nl = strchr(line, '\n');

		if ((!some && !full) || !a || !t || (nl && (a > nl || t > nl)))
			continue;
		double avg = strtod(a + 6, NULL);
		uint64_t total = strtoull(t + 6, NULL, 10);

		if (some) {
			out->some_avg10 = avg;
			out->some_total_us = total;
		} else {
			out->full_avg10 = avg;
			out->full_total_us = total;
		}
	}
	return 0;
}

static int v2_tenant_pressure(const char *root, uid_t uid, struct sbx_cgroup_pressure *out)
{
	char dir[600];
	int rc;

	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	if (!v2.psi)
		return -ENOTSUP;
	rc = group_dir(dir, sizeof dir, root, uid, 0, 0);
	if (rc == 0)
		rc = read_psi(dir, "memory.pressure", &out->memory);
	if (rc == 0)
		rc = read_psi(dir, "cpu.pressure", &out->cpu);
	if (rc == 0 && v2.io)
		rc = read_psi(dir, "io.pressure", &out->io);
	return rc;
}

/* ---- the root: claim, sweep, release ---- */

static int root_dir(char *out, size_t outsz, const char *root)
{
	int n = snprintf(out, outsz, "%s/%s", v2.base, root);

	return n < 0 || (size_t)n >= outsz ? -ENAMETOOLONG : 0;
}

static int v2_claim(const char *root)
{
	char path[600];

	if (!sbx_cgroup_name_ok(root) || root_dir(path, sizeof path, root) < 0)
		return -EINVAL;
	return sbx_cgroup_lock_dir(path);
}

/* A group's whole subtree killed before the groups below it are removed,
 * so that nothing forks into a group being removed below it. */
static void kill_tree(const char *dir)
{
	write_in(dir, "cgroup.kill", "1");
}

static int v2_sweep(const char *root)
{
	char path[600];

	if (!sbx_cgroup_name_ok(root) || root_dir(path, sizeof path, root) < 0)
		return 0;
	tenants_forget_root(root);
	return sbx_cgroup_sweep_below(path, 0, LEAF, kill_tree, kill_remove); /* the server's leaf stays */
}

/* What stays: <root>/server holds this process until it exits (the "no
 * internal processes" rule leaves it nowhere else to go: every group
 * above has controllers enabled for its children), and with it <root>
 * and the levels above it. The next start finds and reuses them. */
static void v2_release(const char *root, int lock_fd)
{
	v2_sweep(root);
	if (lock_fd >= 0)
		close(lock_fd);
}

/* ---- the probe ---- */

/* The server's own group from /proc/self/cgroup's "0::<path>", absolute
 * under CG_MNT. */
static int own_group(char *out, size_t outsz)
{
	char buf[4096], *p, *nl;
	int n, rc = sbx_cgroup_read_text("/proc/self/cgroup", buf, sizeof buf);

	if (rc < 0)
		return rc;
	p = strncmp(buf, "0::", 3) == 0 ? buf : strstr(buf, "\n0::");
	if (!p)
		return -ENOENT;
	p += p == buf ? 3 : 4;
	nl = strchr(p, '\n');
	if (nl)
		*nl = '\0';
	if (p[0] != '/' || strstr(p, "/..") || strstr(p, " (deleted)"))
		return -EINVAL;
	n = snprintf(out, outsz, "%s%s", CG_MNT, strcmp(p, "/") == 0 ? "" : p);
	return n < 0 || (size_t)n >= outsz ? -ENAMETOOLONG : 0;
}

/* Whether the word w is in the space-separated list text. */
static bool has_word(const char *text, const char *w)
{
	size_t len = strlen(w);

	for (const char *p = text; (p = strstr(p, w)) != NULL; p += len)
		if ((p == text || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\n' || p[len] == '\0'))
			return true;
	return false;
}

static void why_write_fail(struct sbx_cgroup_caps *caps, const char *path, int rc)
{
	if (rc == -EACCES || rc == -EROFS || rc == -EPERM)
		snprintf(
		    caps->why, sizeof caps->why,
		    "cgroup tree %.300s is not writable: run under systemd with Delegate=yes, or give the "
		    "container a private cgroup namespace with a writable /sys/fs/cgroup",
		    path);
	else
		snprintf(caps->why, sizeof caps->why, "cgroup %.300s: %s", path, strerror(-rc));
}

/* The pids still in dir, listed into caps->why after "what". */
static void why_busy(struct sbx_cgroup_caps *caps, const char *dir, const char *what)
{
	char buf[512], list[160] = "";
	size_t used = 0;

	if (read_in(dir, "cgroup.procs", buf, sizeof buf) == 0) {
		for (char *p = buf, *end;; p = end) {
			long pid = strtol(p, &end, 10);

			if (end == p || used + 24 >= sizeof list)
				break;
			used +=
			    (size_t)snprintf(list + used, sizeof list - used, "%s%ld", used ? " " : "", pid);
		}
	}
	snprintf(caps->why, sizeof caps->why,
		 "%s %.200s: processes stay in it (pids %.100s) and a group that enables controllers for its "
		 "children cannot hold any: move them into a leaf group",
		 what, dir, used ? list : "unknown");
}

/* Every process of base into the leaf, where base is the root of a
 * private cgroup namespace (a container's: its init, tini say, shares the
 * group with the server, and is the container's own). Nowhere else: in
 * a login session's or another unit's group the others are not the
 * server's to move (another sandboxd, a shell), and the subtree_control
 * write then reports them (EBUSY, naming the pids and the fix). The host's
 * root group is exempt from the rule (and its kernel threads cannot
 * move): nothing to do there. */
static void move_others(const char *leaf)
{
	char buf[8192], path[700];
	struct stat st;

	if (!v2.ns_root)
		return;
	if (path_of(path, sizeof path, v2.base, "cgroup.type") < 0 || stat(path, &st) < 0)
		return; /* the root group: no cgroup.type, no rule */
	if (read_in(v2.base, "cgroup.procs", buf, sizeof buf) < 0)
		return;
	for (char *p = buf, *end;; p = end) {
		char pid[24];
		long v = strtol(p, &end, 10);

		if (end == p)
			break;
		snprintf(pid, sizeof pid, "%ld", v);
		write_in(leaf, "cgroup.procs", pid);
	}
}

/* v2.base: the group this process was started in (above <root>/server
 * when an earlier probe already moved it there), once. */
static int v2_find_base(const char *root, struct sbx_cgroup_caps *caps)
{
	char own[sizeof v2.base], suffix[300];
	size_t len;
	int rc;

	if (v2.base[0])
		return 0;
	rc = own_group(own, sizeof own);
	if (rc < 0) {
		snprintf(caps->why, sizeof caps->why,
			 "cannot find this process's cgroup v2 group in /proc/self/cgroup: %s",
			 strerror(-rc));
		return rc;
	}
	/* Already in <base>/<root>/server (an earlier probe, or a
	 * restart under the same container init): base is above it. */
	snprintf(suffix, sizeof suffix, "/%s/" LEAF, root);
	len = strlen(own);
	if (len > strlen(suffix) && strcmp(own + len - strlen(suffix), suffix) == 0) {
		own[len - strlen(suffix)] = '\0';
		v2.moved = true;
	}
	memcpy(v2.base, own, sizeof v2.base);
	v2.ns_root = strcmp(own, CG_MNT) == 0;
	return 0;
}

/* The controllers delegated to v2.base: memory and pids needed, cpu and
 * io used where there; v2.ctrls is what the groups below enable. */
static int v2_controllers(struct sbx_cgroup_caps *caps)
{
	static const char *const need[] = {"memory", "pids"};
	char buf[512];
	int rc;

	rc = read_in(v2.base, "cgroup.controllers", buf, sizeof buf);
	if (rc < 0) {
		snprintf(caps->why, sizeof caps->why, "cannot read %.300s/cgroup.controllers: %s", v2.base,
			 strerror(-rc));
		return rc;
	}
	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
		if (!has_word(buf, need[i])) {
			snprintf(caps->why, sizeof caps->why,
				 "controller %s is not delegated to %.300s: enable it in the parent's "
				 "cgroup.subtree_control (systemd: Delegate=yes)",
				 need[i], v2.base);
			return -ENOTSUP;
		}
	}
	v2.cpu = has_word(buf, "cpu");
	v2.io = has_word(buf, "io");
	snprintf(v2.ctrls, sizeof v2.ctrls, "+memory +pids%s%s", v2.cpu ? " +cpu" : "", v2.io ? " +io" : "");
	return 0;
}

/* <root> (dir), each component below v2.base (len its length), and the
 * leaf, which this process moves into (with the others of a namespace's
 * root group) the first time. */
static int v2_make_groups(struct sbx_cgroup_caps *caps, char *dir, size_t len, const char *leaf)
{
	int rc;

	for (size_t i = len + 1;; i++) {
		if (dir[i] != '/' && dir[i] != '\0')
			continue;
		char saved = dir[i];

		dir[i] = '\0';
		rc = mkdir_dir(dir);
		if (rc < 0) {
			why_write_fail(caps, dir, rc);
			return rc;
		}
		dir[i] = saved;
		if (saved == '\0')
			break;
	}
	rc = mkdir_dir(leaf);
	if (rc == 0 && !v2.moved) {
		rc = write_in(leaf, "cgroup.procs", "0");
		if (rc == 0) {
			v2.moved = true;
			move_others(leaf);
		}
	}
	if (rc < 0) {
		why_write_fail(caps, leaf, rc);
		return rc;
	}
	return 0;
}

/* The controllers, from base (dir[0..len)) down to <root>. */
static int v2_enable(struct sbx_cgroup_caps *caps, char *dir, size_t len)
{
	int rc;

	for (size_t i = len;; i++) {
		if (dir[i] != '/' && dir[i] != '\0')
			continue;
		char saved = dir[i];

		dir[i] = '\0';
		rc = write_in(dir, "cgroup.subtree_control", v2.ctrls);
		if (rc == -EBUSY)
			why_busy(caps, dir, "cannot enable controllers in");
		else if (rc < 0)
			why_write_fail(caps, dir, rc);
		if (rc < 0)
			return rc;
		dir[i] = saved;
		if (saved == '\0')
			break;
	}
	return 0;
}

/* caps of a probe that succeeded, and what is missing in caps->why. */
static void v2_caps_fill(struct sbx_cgroup_caps *caps)
{
	size_t len;

	caps->version = 2;
	caps->memory = caps->pids = true;
	caps->cpu = v2.cpu;
	caps->cpu_usage = true; /* cpu.stat's usage_usec: every group has it */
	caps->io = v2.io;
	caps->psi = v2.psi;
	snprintf(caps->why, sizeof caps->why, "%s%s%s", v2.cpu ? "" : "no cpu controller: no CPU budget; ",
		 v2.io ? "" : "no io controller: no I/O budget; ", v2.psi ? "" : "no PSI (kernel psi=0?)");
	len = strlen(caps->why);
	while (len > 0 && (caps->why[len - 1] == ' ' || caps->why[len - 1] == ';'))
		caps->why[--len] = '\0';
}

static int v2_probe(const char *root, struct sbx_cgroup_caps *caps)
{
	char buf[512], dir[600], leaf[700];
	size_t len;
	int rc;

	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	rc = v2_find_base(root, caps);
	if (rc == 0)
		rc = v2_controllers(caps);
	if (rc < 0)
		return rc;

	/* <root>, each component, and the leaf. */
	rc = root_dir(dir, sizeof dir, root);
	if (rc == 0)
		rc = path_of(leaf, sizeof leaf, dir, LEAF);
	if (rc < 0) {
		snprintf(caps->why, sizeof caps->why, "cgroup path %.300s/%.100s is too long", v2.base, root);
		return rc;
	}
	len = strlen(v2.base);
	rc = v2_make_groups(caps, dir, len, leaf);
	if (rc == 0)
		rc = v2_enable(caps, dir, len);
	if (rc < 0)
		return rc;
	v2.psi = read_in(dir, "memory.pressure", buf, sizeof buf) == 0 &&
		 read_in(dir, "cpu.pressure", buf, sizeof buf) == 0;
	v2_caps_fill(caps);
	return 0;
}

const struct sbx_cgroup_driver sbx_cgroup_v2 = {
    .name = "v2",
    .probe = v2_probe,
    .prepare = v2_prepare,
    .remove = v2_remove,
    .tenant_usage = v2_tenant_usage,
    .tenant_cpu = v2_tenant_cpu,
    .tenant_pressure = v2_tenant_pressure,
    .kept = NULL,
    .claim = v2_claim,
    .sweep = v2_sweep,
    .release = v2_release,
};
