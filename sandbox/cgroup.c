#include "sandbox/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/backend.h"

#define CG_ROOT "/sys/fs/cgroup"
#define CG_NAME_MAX 200

static const struct {
	const char *hier;
	const char *limit_file; /* NULL: none */
} ctrls[2] = {
    {"memory", "memory.limit_in_bytes"},
    {"pids", "pids.max"},
};

static int write_file(const char *path, const char *s)
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

bool sbx_cgroup_probe(void)
{
	char path[256];
	size_t i;

	for (i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), CG_ROOT "/%s/cgroup.procs", ctrls[i].hier);
		if (access(path, W_OK) < 0)
			return false;
		/* v1 only: the controller's own files sit in the hierarchy. */
		snprintf(path, sizeof(path), CG_ROOT "/%s/sandboxd", ctrls[i].hier);
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return false;
		snprintf(path, sizeof(path), CG_ROOT "/%s/sandboxd/%s", ctrls[i].hier, ctrls[i].limit_file);
		if (access(path, W_OK) < 0)
			return false;
	}
	return true;
}

bool sbx_cgroup_name_ok(const char *name)
{
	size_t i, len, comp = 0;

	if (!name)
		return false;
	len = strlen(name);
	if (len == 0 || len > CG_NAME_MAX || name[0] == '/' || name[len - 1] == '/')
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

/* mkdir -p below <root>/<hier>; the leaf must be new (EEXIST means a
 * leftover or a name reused: take it over, it is ours). */
static int mkdir_p(const char *hier, const char *name)
{
	char path[512];
	size_t base, i;
	int n;

	n = snprintf(path, sizeof(path), CG_ROOT "/%s/%s", hier, name);
	if (n < 0 || (size_t)n >= sizeof(path))
		return -ENAMETOOLONG;
	base = strlen(CG_ROOT) + 1 + strlen(hier) + 1;
	for (i = base;; i++) {
		if (path[i] != '/' && path[i] != '\0')
			continue;
		char saved = path[i];

		path[i] = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
		path[i] = saved;
		if (saved == '\0')
			break;
	}
	return 0;
}

static void rmdir_leaf(const char *hier, const char *name)
{
	char path[512], procs[560], buf[4096];
	int attempt;
	long wait_ns = 50 * 1000, slept_ns = 0;

	snprintf(path, sizeof(path), CG_ROOT "/%s/%s", hier, name);
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", path);
	/* EBUSY right after the reap is common (3-37 % of bwrap execs on a
	 * busy 2-vCPU VM): the sandbox's last tasks are still being released.
	 * Back off from 50 us, doubling to 10 ms, so the usual case costs well
	 * under a millisecond rather than a fixed 10 ms on the runner thread.
	 * The bound is the old one: it gives up after ~1 s of sleep (the old
	 * 100 x 10 ms), now at most ~107 attempts. */
	for (attempt = 0; attempt < 200 && slept_ns < 1000L * 1000 * 1000; attempt++) {
		struct timespec ts = {0, wait_ns};
		ssize_t n;
		int fd;

		if (rmdir(path) == 0 || errno == ENOENT)
			return;
		if (errno != EBUSY)
			return;
		/* Something still runs in there (a detached child): kill it. */
		fd = open(procs, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n > 0) {
			char *p = buf, *end;

			buf[n] = '\0';
			for (;;) {
				long pid = strtol(p, &end, 10);

				if (end == p)
					break;
				if (pid > 1)
					kill((pid_t)pid, SIGKILL);
				p = end;
			}
		}
		nanosleep(&ts, NULL);
		slept_ns += wait_ns;
		if (wait_ns < 10L * 1000 * 1000)
			wait_ns = wait_ns * 2 < 10L * 1000 * 1000 ? wait_ns * 2 : 10L * 1000 * 1000;
	}
}

int sbx_cgroup_prepare(const char *name, const struct sbx_limits *lim, int fds[2])
{
	char path[560], val[32];
	size_t i;
	int made = 0;
	int rc;

	fds[0] = fds[1] = -1;
	if (!sbx_cgroup_name_ok(name))
		return -EINVAL;
	for (i = 0; i < 2; i++) {
		uint64_t v = i == 0 ? lim->mem_bytes : lim->nproc;

		rc = mkdir_p(ctrls[i].hier, name);
		if (rc < 0)
			goto fail;
		made++;
		if (v) {
			snprintf(path, sizeof(path), CG_ROOT "/%s/%s/%s", ctrls[i].hier, name,
				 ctrls[i].limit_file);
			snprintf(val, sizeof(val), "%" PRIu64, v);
			rc = write_file(path, val);
			if (rc < 0)
				goto fail;
		}
		snprintf(path, sizeof(path), CG_ROOT "/%s/%s/cgroup.procs", ctrls[i].hier, name);
		fds[i] = open(path, O_WRONLY | O_CLOEXEC);
		if (fds[i] < 0) {
			rc = -errno;
			goto fail;
		}
	}
	return 2;
fail:
	for (i = 0; i < 2; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
	for (i = 0; i < (size_t)made; i++)
		rmdir_leaf(ctrls[i].hier, name);
	return rc;
}

void sbx_cgroup_remove(const char *name)
{
	size_t i;

	if (!sbx_cgroup_name_ok(name))
		return;
	for (i = 0; i < 2; i++)
		rmdir_leaf(ctrls[i].hier, name);
}
