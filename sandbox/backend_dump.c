/* sbx_backend_dump: what a backend would start for a request, written to
 * files instead of started (sandboxd debug bwrap-argv; the P2 benchmark
 * runs the bare bwrap line from them, so it never drifts from the
 * backend's). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "sandbox/backend_impl.h"

/* Write len bytes to a new file name in dfd (0644, never an existing
 * file or a symlink). 0 or -errno. */
static int put_file(int dfd, const char *name, const void *data, size_t len)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	size_t off = 0;
	int rc = 0;

	if (fd < 0)
		return -errno;
	while (off < len && rc == 0) {
		ssize_t n = write(fd, (const char *)data + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else
			off += (size_t)n;
	}
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* The contents of src from offset 0 (its offset untouched) into a new
 * file name in dfd. 0 or -errno. */
static int copy_fd(int dfd, const char *name, int src)
{
	char buf[65536];
	off_t off = 0;
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	int rc = 0;

	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n = pread(src, buf, sizeof(buf), off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : 0;
			break;
		}
		off += n;
		if (write(fd, buf, (size_t)n) != n) {
			rc = -EIO;
			break;
		}
	}
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

static int dump_argv(int dfd, const struct sbx_launch *l)
{
	size_t len = 0, i;
	char *all, *p;
	int rc;

	for (i = 0; i < l->argv.n; i++)
		len += strlen(l->argv.v[i]) + 1;
	all = p = xmalloc(len + 1);
	for (i = 0; i < l->argv.n; i++) {
		size_t n = strlen(l->argv.v[i]) + 1;

		memcpy(p, l->argv.v[i], n);
		p += n;
	}
	rc = put_file(dfd, "argv", all, len);
	free(all);
	return rc;
}

/* Create dir (0700; never an existing one, so never a symlink planted
 * there: run as root on a path others can write, the files cannot land
 * where a link points) and open it without following a link, checking
 * it is still the directory just made (ours, 0700). The fd or -errno. */
static int make_dir(const char *dir)
{
	struct stat st;
	if (mkdir(dir, 0700) < 0)
		return -errno;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	if (fstat(dfd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 07777) != 0700) {
		close(dfd);
		return -EPERM;
	}
	return dfd;
}

int sbx_backend_dump(struct sbx_backend *b, const struct sbx_spawn_req *req, const char *dir)
{
	struct sbx_launch l;
	char name[32];
	int dfd, rc, i;

	dfd = make_dir(dir);
	if (dfd < 0)
		return dfd;
	sbx_launch_init(&l);
	rc = b->ops->prepare(b, req, &l);
	if (rc == 0)
		rc = put_file(dfd, "path", l.path, strlen(l.path));
	if (rc == 0)
		rc = dump_argv(dfd, &l);
	for (i = 0; rc == 0 && i < l.n_keep; i++) {
		snprintf(name, sizeof(name), "fd-%d", 3 + i);
		rc = copy_fd(dfd, name, l.keep_fds[i]);
	}
	sbx_launch_release(&l);
	close(dfd);
	return rc;
}
