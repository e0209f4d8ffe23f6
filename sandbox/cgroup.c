#include "sandbox/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "sandbox/cgroup_impl.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

/* The drivers, most capable first: v2 is tried only where /sys/fs/cgroup
 * is the unified hierarchy, v1 only where it is not. */
static const struct sbx_cgroup_driver *const drivers[] = {&sbx_cgroup_v2, &sbx_cgroup_v1};

/* Set once by the probe, before any command; read afterwards. */
static const struct sbx_cgroup_driver *drv;
static struct sbx_cgroup_caps caps_found;

bool sbx_cgroup_name_ok(const char *name)
{
	size_t i, len, comp = 0;

	if (!name)
		return false;
	len = strlen(name);
	if (len == 0 || len > 200 || name[0] == '/' || name[len - 1] == '/')
		return false;
	for (i = 0; i <= len; i++) {
		char c = name[i];

		if (c == '/' || c == '\0') {
			const char *start = name + i - comp;

			if (comp == 0 || (comp == 1 && start[0] == '.') ||
			    (comp == 2 && start[0] == '.' && start[1] == '.'))
				return false;
			comp = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-' || c == '.'))
			return false;
		comp++;
	}
	return true;
}

int sbx_cgroup_write_file(const char *path, const char *s)
{
	size_t len = strlen(s);
	ssize_t n;
	int fd, rc = 0;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = write(fd, s, len);
	if (n < 0)
		rc = -errno;
	else if ((size_t)n != len)
		rc = -EIO;
	close(fd);
	return rc;
}

int sbx_cgroup_read_text(const char *path, char *buf, size_t bufsz)
{
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, bufsz - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	return 0;
}

int sbx_cgroup_read_u64(const char *path, uint64_t *out)
{
	char buf[64];
	int rc = sbx_cgroup_read_text(path, buf, sizeof buf);

	if (rc == 0)
		*out = strtoull(buf, NULL, 10);
	return rc;
}

int sbx_cgroup_kill_listed(const char *dir)
{
	char procs[600], buf[8192];
	ssize_t n;
	int fd, listed = 0;

	snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
	fd = open(procs, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -EIO : 0;
	buf[n] = '\0';
	for (char *p = buf, *end;; p = end) {
		long pid = strtol(p, &end, 10);

		if (end == p)
			break;
		listed++;
		if (pid > 1)
			kill((pid_t)pid, SIGKILL);
	}
	return listed;
}

int sbx_cgroup_sweep_below(const char *dir, int depth, const char *keep, void (*before)(const char *group),
			   int (*remove)(const char *group))
{
	DIR *d;
	struct dirent *de;
	int removed = 0;

	if (depth > 4)
		return 0;
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR || de->d_name[0] == '.' ||
		    (depth == 0 && keep && strcmp(de->d_name, keep) == 0))
			continue;
		char *sub = xasprintf("%s/%s", dir, de->d_name);

		if (before)
			before(sub);
		removed += sbx_cgroup_sweep_below(sub, depth + 1, NULL, before, remove);
		if (remove(sub) == 0)
			removed++;
		free(sub);
	}
	closedir(d);
	return removed;
}

int sbx_cgroup_lock_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int rc = errno == EWOULDBLOCK ? -EBUSY : -errno;

		close(fd);
		return rc;
	}
	return fd;
}

static bool unified(void)
{
	struct statfs sf;

	return statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC;
}

int sbx_cgroup_probe(const char *root, struct sbx_cgroup_caps *caps)
{
	const char *want = unified() ? "v2" : "v1";
	int rc = -ENOTSUP;

	memset(caps, 0, sizeof *caps);
	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	snprintf(caps->why, sizeof caps->why, "/sys/fs/cgroup is %s and this build has no driver for it",
		 want[1] == '2' ? "the unified cgroup v2 hierarchy" : "not cgroup2");
	for (size_t i = 0; i < sizeof drivers / sizeof drivers[0]; i++) {
		if (strcmp(drivers[i]->name, want) != 0)
			continue;
		rc = drivers[i]->probe(root, caps);
		if (rc == 0) {
			drv = drivers[i];
			caps_found = *caps;
		}
		break;
	}
	if (rc < 0)
		caps->version = 0;
	return rc;
}

const struct sbx_cgroup_caps *sbx_cgroup_caps(void)
{
	return &caps_found;
}

int sbx_cgroup_prepare(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim,
		       int fds[SBX_CGROUP_MAX])
{
	for (size_t i = 0; i < SBX_CGROUP_MAX; i++)
		fds[i] = -1;
	if (!drv)
		return -ENOTSUP;
	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	return drv->prepare(root, uid, seq, lim, fds);
}

void sbx_cgroup_remove(const char *root, uid_t uid, uint64_t seq, struct sbx_cgroup_outcome *out)
{
	struct sbx_cgroup_outcome none = {false, false};

	if (out)
		*out = none;
	if (drv && sbx_cgroup_name_ok(root))
		drv->remove(root, uid, seq, out ? out : &none);
}

int sbx_cgroup_tenant_usage(const char *root, uid_t uid, uint64_t *mem_bytes, uint64_t *nproc)
{
	if (!drv)
		return -ENOTSUP;
	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	return drv->tenant_usage(root, uid, mem_bytes, nproc);
}

int sbx_cgroup_tenant_cpu(const char *root, uid_t uid, uint64_t *usage_ns, uint64_t *throttled_ns)
{
	*usage_ns = *throttled_ns = 0;
	if (!drv || !caps_found.cpu_usage)
		return -ENOTSUP;
	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	return drv->tenant_cpu(root, uid, usage_ns, throttled_ns);
}

int sbx_cgroup_tenant_pressure(const char *root, uid_t uid, struct sbx_cgroup_pressure *out)
{
	memset(out, 0, sizeof *out);
	if (!drv || !drv->tenant_pressure || !caps_found.psi)
		return -ENOTSUP;
	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	return drv->tenant_pressure(root, uid, out);
}

void sbx_cgroup_kept(const char *root, unsigned *busy, unsigned *idle)
{
	*busy = *idle = 0;
	if (drv && drv->kept && sbx_cgroup_name_ok(root))
		drv->kept(root, busy, idle);
}

int sbx_cgroup_claim(const char *root)
{
	if (!drv)
		return -ENOTSUP;
	if (!sbx_cgroup_name_ok(root))
		return -EINVAL;
	return drv->claim(root);
}

int sbx_cgroup_sweep(const char *root)
{
	return drv && sbx_cgroup_name_ok(root) ? drv->sweep(root) : 0;
}

void sbx_cgroup_release(const char *root, int lock_fd)
{
	if (drv && sbx_cgroup_name_ok(root))
		drv->release(root, lock_fd);
	else if (lock_fd >= 0)
		close(lock_fd);
}
