/* The mount namespace that holds the tenants' images (see diskimg.h):
 * the server's own, so that its mounts die with it; what earlier runs of
 * the same data directory left in the host's namespace is swept first. */
#include "sandbox/diskimg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xmalloc.h"

#define LOOP_MAJOR_NR 7u
#define SWEEP_ROUNDS 16 /* stacked mounts: one layer a round */
#define LOCK_NAME "images.lock"

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
		    s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

static bool has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* One mountinfo line: a loop mount at a point under prefix whose image is
 * under prefix too (another server's, or a data disk holding the data
 * directory, is never that) is unmounted. 1 when one was. */
static int sweep_line(char *line, const char *prefix)
{
	char point[PATH_MAX], back[PATH_MAX];
	unsigned maj = 0, min = 0;
	if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &maj, &min, point) != 3 || maj != LOOP_MAJOR_NR)
		return 0;
	unescape(point);
	if (!has_prefix(point, prefix))
		return 0;
	sbx_diskimg_loop_file(min, back, sizeof back);
	if (!has_prefix(back, prefix))
		return 0;
	return umount2(point, MNT_DETACH | UMOUNT_NOFOLLOW) == 0 ? 1 : 0;
}

/* Unmount, in this (the host's) namespace, every image mount of
 * <data>/tenants: earlier versions mounted there and a crash left them.
 * The number unmounted. */
static int sweep_mounts(const char *prefix)
{
	int swept = 0, round_swept = 1;
	char line[2 * PATH_MAX];
	for (int r = 0; r < SWEEP_ROUNDS && round_swept > 0; r++) {
		round_swept = 0;
		FILE *f = fopen("/proc/self/mountinfo", "re");
		while (f && fgets(line, sizeof line, f))
			round_swept += sweep_line(line, prefix);
		if (f)
			fclose(f);
		swept += round_swept;
	}
	return swept;
}

/* Loop devices still attached to an image under prefix, mounted nowhere
 * now: released (LOOP_CLR_FD; on a device still in use it only sets
 * autoclear, so it goes when its last user does). */
static void sweep_loops(const char *prefix)
{
	DIR *d = opendir("/sys/block");
	for (struct dirent *e; d && (e = readdir(d));) {
		unsigned nr;
		char back[PATH_MAX], dev[300];
		if (sscanf(e->d_name, "loop%u", &nr) != 1)
			continue;
		char *path = xasprintf("/sys/block/%s/loop/backing_file", e->d_name);
		FILE *f = fopen(path, "re");
		bool ours = f && fgets(back, sizeof back, f) && has_prefix(back, prefix);
		if (f)
			fclose(f);
		free(path);
		snprintf(dev, sizeof dev, "/dev/%s", e->d_name);
		int fd = ours ? open(dev, O_RDWR | O_CLOEXEC) : -1;
		if (fd >= 0) {
			(void)ioctl(fd, LOOP_CLR_FD, 0);
			close(fd);
		}
	}
	if (d)
		closedir(d);
}

/* Threads share the mount namespace only while they share fs_struct; a
 * second thread would stay in the host's. */
static bool single_threaded(void)
{
	char line[128];
	long n = 0;
	FILE *f = fopen("/proc/self/status", "re");
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, "Threads:", 8) == 0)
			n = strtol(line + 8, NULL, 10);
	if (f)
		fclose(f);
	return n == 1;
}

/* <data>/images.lock, flocked exclusively, with this process's pid in it;
 * -EBUSY (the holder's pid in why) while another server holds it. */
static int take_lock(const char *data_dir, char *why, size_t whysz)
{
	char *path = xasprintf("%s/" LOCK_NAME, data_dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600), rc = fd;
	if (fd < 0) {
		rc = -errno;
		snprintf(why, whysz, "cannot open %s: %s", path, strerror(errno));
	} else if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		char pid[32] = "";
		ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		snprintf(why, whysz,
			 "another sandboxd (pid %s) has the disk images of this data directory mounted: "
			 "stop it first",
			 *pid ? pid : "?");
		close(fd);
	} else {
		char pid[32];
		int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
		if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)len, 0) != len)
			rc = -errno;
		if (rc < 0) {
			snprintf(why, whysz, "cannot write %s: %s", path, strerror(-rc));
			close(fd);
		}
	}
	free(path);
	return rc;
}

int sbx_diskimg_own_ns(const char *data_dir, int *lock_fd, int *swept, char *why, size_t whysz)
{
	*lock_fd = -1;
	*swept = 0;
	if (!single_threaded()) {
		snprintf(why, whysz, "the server must enter its mount namespace before any thread");
		return -EBUSY;
	}
	char *real = realpath(data_dir, NULL);
	if (!real) {
		snprintf(why, whysz, "cannot resolve %s: %s", data_dir, strerror(errno));
		return -errno;
	}
	char *prefix = xasprintf("%s/tenants/", real);
	free(real);
	int fd = take_lock(data_dir, why, whysz), rc = 0;
	if (fd >= 0) {
		*swept = sweep_mounts(prefix);
		sweep_loops(prefix);
		/* Slave, not private: mounts the host makes later (a data disk)
		 * still reach the server; none of the server's reach the host. */
		if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
			rc = -errno;
			snprintf(why, whysz, "cannot make a mount namespace of its own: %s", strerror(errno));
		}
	}
	free(prefix);
	if (fd >= 0 && rc < 0)
		close(fd);
	if (fd >= 0 && rc == 0)
		*lock_fd = fd;
	return fd < 0 ? fd : rc;
}

/* The pid of the server holding data_dir's lock, or 0 when none does. */
static pid_t lock_holder(const char *data_dir)
{
	char *path = xasprintf("%s/" LOCK_NAME, data_dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	free(path);
	if (fd < 0)
		return 0;
	pid_t pid = 0;
	if (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK) {
		char buf[32] = "";
		ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
		buf[n > 0 ? n : 0] = '\0';
		pid = (pid_t)strtol(buf, NULL, 10);
	}
	close(fd);
	return pid > 0 ? pid : 0;
}

/* Enter the mount namespace of pid, the holder of data_dir's lock. */
static int enter_ns(const char *data_dir, pid_t pid)
{
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0), rc = 0;
	/* Still the holder once its pidfd is open: not a pid reused since. */
	if (pfd < 0 || lock_holder(data_dir) != pid) {
		rc = pfd < 0 ? -errno : -ESRCH;
		if (pfd >= 0)
			close(pfd);
		return rc;
	}
	/* setns moves the working directory to the namespace's root, and a
	 * directory opened before would still resolve through the host's
	 * mounts: data_dir may be relative, so the same path, again. */
	char cwd[PATH_MAX];
	bool have_cwd = getcwd(cwd, sizeof cwd) != NULL;
	if (setns(pfd, CLONE_NEWNS) < 0)
		rc = -errno;
	else if (have_cwd && chdir(cwd) < 0)
		rc = -errno;
	close(pfd);
	return rc;
}

int sbx_diskimg_detach_in_server(const char *data_dir, const char *tdir, pid_t *pid)
{
	*pid = lock_holder(data_dir);
	if (*pid == 0)
		return -ESRCH;
	/* setns(CLONE_NEWNS) needs a single thread (the CLI's store has its
	 * audit writer): a child enters and unmounts. */
	pid_t child = fork();
	if (child < 0)
		return -errno;
	if (child == 0) {
		int rc = enter_ns(data_dir, *pid);
		rc = rc < 0 ? rc : sbx_diskimg_detach(tdir);
		_exit(rc >= 0 ? rc : 64 + (-rc < 128 ? -rc : EIO));
	}
	int st = 0;
	while (waitpid(child, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : 64 + EIO;
	return code < 64 ? code : -(code - 64);
}
