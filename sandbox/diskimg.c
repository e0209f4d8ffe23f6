/* Filesystem images per tenant (see diskimg.h). */
#include "sandbox/diskimg.h"
#include "sandbox/reaper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/loop.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "common/xmalloc.h"

#define LOOP_MAJOR_NR 7u
#define STALE_WAIT_MS 10000
#define ATTACH_TRIES 8
#define MOUNT_OPTS "discard,errors=remount-ro"

struct sbx_diskimg {
	bool usable;
	char detail[512];
	char mkfs[64], fsck[64], resize[64];
	pthread_mutex_t lock;
	char **attached; /* tdirs this process mounted, for detach_all */
	size_t nattached;
};

static bool find_tool(const char *name, char *out, size_t outsz)
{
	static const char *const dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		snprintf(out, outsz, "%s/%s", dirs[i], name);
		if (access(out, X_OK) == 0)
			return true;
	}
	return false;
}

/* Loop devices and mount(2) need CAP_SYS_ADMIN; root may run without it
 * (systemd's CapabilityBoundingSet, a container). */
static bool has_sys_admin(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct c[2];
	if (syscall(SYS_capget, &h, c) < 0)
		return false;
	return (c[CAP_SYS_ADMIN / 32].effective >> (CAP_SYS_ADMIN % 32)) & 1;
}

static bool kernel_has_ext4(void)
{
	char line[128];
	bool found = false;
	FILE *f = fopen("/proc/filesystems", "re");
	while (f && !found && fgets(line, sizeof line, f))
		found = strstr(line, "\text4\n") != NULL;
	if (f)
		fclose(f);
	return found;
}

void sbx_diskimg_probe(struct sbx_diskimg **out)
{
	struct sbx_diskimg *d = xcalloc(1, sizeof *d);
	pthread_mutex_init(&d->lock, NULL);
	int ctl = -1, err = 0;
	const char *why = NULL;
	if (geteuid() != 0)
		why = "sandboxd does not run as root, so it cannot attach loop devices";
	else if (!has_sys_admin())
		why = "sandboxd lacks CAP_SYS_ADMIN (loop devices and mounts need it)";
	else if (!kernel_has_ext4())
		why = "the kernel has no ext4";
	else if (!find_tool("mkfs.ext4", d->mkfs, sizeof d->mkfs) ||
		 !find_tool("e2fsck", d->fsck, sizeof d->fsck) ||
		 !find_tool("resize2fs", d->resize, sizeof d->resize))
		why = "e2fsprogs (mkfs.ext4, e2fsck, resize2fs) is not installed";
	else if ((ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC)) < 0)
		why = "/dev/loop-control cannot be opened (no loop devices here)", err = errno;
	else if (ioctl(ctl, LOOP_CTL_GET_FREE) < 0)
		why = "no loop device is free", err = errno;
	if (ctl >= 0)
		close(ctl);
	d->usable = why == NULL;
	if (why)
		snprintf(d->detail, sizeof d->detail, "filesystem images unavailable: %s%s%s", why,
			 err ? ": " : "", err ? strerror(err) : "");
	else
		snprintf(d->detail, sizeof d->detail,
			 "an ext4 image per tenant (<data>/tenants/<name>/disk.img, loop-mounted on its "
			 "workspace)");
	*out = d;
}

void sbx_diskimg_free(struct sbx_diskimg **pd)
{
	struct sbx_diskimg *d = pd ? *pd : NULL;
	if (!d)
		return;
	for (size_t i = 0; i < d->nattached; i++)
		free(d->attached[i]);
	free(d->attached);
	pthread_mutex_destroy(&d->lock);
	free(d);
	*pd = NULL;
}

bool sbx_diskimg_usable(const struct sbx_diskimg *d)
{
	return d && d->usable;
}

const char *sbx_diskimg_detail(const struct sbx_diskimg *d)
{
	return d ? d->detail : "filesystem images: not probed";
}

/* ---- running e2fsprogs ---- */

/* Run argv[0] with output captured; its last line goes to why. The exit
 * status (0..255), or -errno when it could not run. */
static int run_tool(char *const argv[], char *why, size_t whysz)
{
	static char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
	int p[2], status = 0;
	pid_t pid;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	int rc = sbx_reaper_spawn(&pid, argv[0], &fa, argv, envp, false);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	char buf[4096];
	size_t n = 0;
	ssize_t got;
	while (rc == 0 && (got = read(p[0], buf + n, sizeof buf - 1 - n)) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			break;
		n += (size_t)got;
		if (n == sizeof buf - 1) { /* keep the tail */
			memmove(buf, buf + n / 2, n - n / 2);
			n -= n / 2;
		}
	}
	close(p[0]);
	if (rc != 0)
		return -rc;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	const char *last = strrchr(buf, '\n');
	snprintf(why, whysz, "%s: %s", argv[0], last ? last + 1 : buf);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* ---- the image ---- */

static uint64_t image_bytes(const struct sbx_quota_limits *lim)
{
	return lim->bytes / 4096 * 4096;
}

/* Make tdir/disk.img: a sparse file of the quota's size made into ext4
 * under another name, renamed into place when complete. */
static int make_image(struct sbx_diskimg *d, const char *tdir, uid_t uid, gid_t gid,
		      const struct sbx_quota_limits *lim, char *why, size_t whysz)
{
	char *tmp = xasprintf("%s/disk.img.new", tdir), *img = xasprintf("%s/disk.img", tdir);
	char owner[64], inodes[32];
	int rc = 0, fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)image_bytes(lim)) < 0) {
		rc = -errno;
		snprintf(why, whysz, "cannot make %s: %s", tmp, strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	snprintf(owner, sizeof owner, "root_owner=%u:%u,nodiscard", (unsigned)uid, (unsigned)gid);
	/* At most one inode per 4 KiB: the inode tables (256 bytes an inode)
	 * then take at most 1/16 of the image, and mkfs accepts it. */
	uint64_t n = lim->inodes < image_bytes(lim) / 4096 ? lim->inodes : image_bytes(lim) / 4096;
	snprintf(inodes, sizeof inodes, "%llu", (unsigned long long)n);
	char *argv[] = {d->mkfs, "-q", "-F", "-m", "0", "-L", "sandboxd", "-E", owner, tmp, NULL, NULL, NULL};
	if (lim->inodes > 0 && n >= 64) { /* -N before the device */
		argv[9] = "-N";
		argv[10] = inodes;
		argv[11] = tmp;
	}
	int st = rc == 0 ? run_tool(argv, why, whysz) : 0;
	if (rc == 0 && st != 0)
		rc = st < 0 ? st : -EIO;
	if (rc == 0 && rename(tmp, img) < 0) {
		rc = -errno;
		snprintf(why, whysz, "cannot rename %s: %s", tmp, strerror(errno));
	}
	if (rc < 0)
		unlink(tmp);
	free(tmp);
	free(img);
	return rc;
}

/* Bring an unmounted image to the quota's size, when it differs. A shrink
 * the data does not fit is refused by resize2fs: the image keeps its size
 * (logged by the caller through why, rc 1). */
static int resize_image(struct sbx_diskimg *d, const char *img, const struct sbx_quota_limits *lim, char *why,
			size_t whysz)
{
	struct stat st;
	uint64_t want = image_bytes(lim);
	if (stat(img, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size == want)
		return 0;
	char *fsck[] = {d->fsck, "-f", "-p", (char *)img, NULL};
	int r = run_tool(fsck, why, whysz);
	if (r < 0 || r > 1)
		return r < 0 ? r : -EIO;
	char size[32];
	snprintf(size, sizeof size, "%lluK", (unsigned long long)(want / 1024));
	char *rs[] = {d->resize, (char *)img, size, NULL};
	bool grow = want > (uint64_t)st.st_size;
	if (grow && truncate(img, (off_t)want) < 0)
		return -errno;
	if ((r = run_tool(rs, why, whysz)) != 0) {
		if (grow && truncate(img, st.st_size) < 0)
			return -errno;
		return grow ? -EIO : 1;
	}
	if (!grow && truncate(img, (off_t)want) < 0)
		return -errno;
	return 0;
}

/* ---- mounts ---- */

void sbx_diskimg_loop_file(unsigned min, char *out, size_t outsz)
{
	char path[96];
	snprintf(path, sizeof path, "/sys/dev/block/%u:%u/loop/backing_file", LOOP_MAJOR_NR, min);
	out[0] = '\0';
	FILE *f = fopen(path, "re");
	if (f && fgets(out, (int)outsz, f))
		out[strcspn(out, "\n")] = '\0';
	if (f)
		fclose(f);
}

/* 1 when tdir/workspace is a mount of tdir/disk.img, 0 when it is no
 * mount point (or missing), -EBUSY when something else is mounted. */
static int mounted_state(const char *tdir, const char *ws, const char *img)
{
	struct stat sw, st;
	if (stat(tdir, &st) < 0)
		return -errno;
	if (stat(ws, &sw) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (sw.st_dev == st.st_dev)
		return 0;
	char back[PATH_MAX], *real = realpath(img, NULL);
	sbx_diskimg_loop_file(minor(sw.st_dev), back, sizeof back);
	bool ours = major(sw.st_dev) == LOOP_MAJOR_NR && real && strcmp(back, real) == 0;
	free(real);
	return ours ? 1 : -EBUSY;
}

/* A free loop device configured on img with autoclear: its fd, and its
 * path in dev. Another process may take the device between GET_FREE and
 * CONFIGURE (EBUSY): asked again, a few times. */
static int loop_attach(const char *img, char *dev, size_t devsz)
{
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC), rc = -EBUSY;
	int ifd = open(img, O_RDWR | O_CLOEXEC);
	if (ctl < 0 || ifd < 0) {
		rc = -errno;
		goto out;
	}
	for (int i = 0; i < ATTACH_TRIES && rc == -EBUSY; i++) {
		int nr = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (nr < 0) {
			rc = errno == ENODEV || errno == ENOSPC ? -ENOSPC : -errno;
			break;
		}
		snprintf(dev, devsz, "/dev/loop%d", nr);
		int lfd = open(dev, O_RDWR | O_CLOEXEC);
		if (lfd < 0) {
			rc = -errno;
			break;
		}
		struct loop_config lc = {.fd = (unsigned)ifd};
		lc.info.lo_flags = LO_FLAGS_AUTOCLEAR;
		snprintf((char *)lc.info.lo_file_name, sizeof lc.info.lo_file_name, "%s", img);
		if (ioctl(lfd, LOOP_CONFIGURE, &lc) == 0) {
			rc = lfd;
			break;
		}
		rc = -errno;
		close(lfd);
	}
out:
	if (ctl >= 0)
		close(ctl);
	if (ifd >= 0)
		close(ifd);
	return rc;
}

/* Whether dir holds anything (lost+found of an old mount aside). */
static bool has_entries(const char *dir)
{
	DIR *d = opendir(dir);
	bool any = false;
	for (struct dirent *e; d && !any && (e = readdir(d));)
		any = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	if (d)
		closedir(d);
	return any;
}

/* Keep tdir for detach_all (once). Called with d->lock held. */
static void remember(struct sbx_diskimg *d, const char *tdir)
{
	for (size_t i = 0; i < d->nattached; i++)
		if (strcmp(d->attached[i], tdir) == 0)
			return;
	d->attached = xrealloc(d->attached, (d->nattached + 1) * sizeof *d->attached);
	d->attached[d->nattached++] = xstrdup(tdir);
}

/* The loop device ("loop3") attached to the image at real path real, or
 * false. */
static bool image_attached(const char *real, char *dev, size_t devsz)
{
	DIR *d = opendir("/sys/block");
	bool found = false;
	for (struct dirent *e; d && !found && (e = readdir(d));) {
		unsigned nr;
		char back[PATH_MAX];
		if (sscanf(e->d_name, "loop%u", &nr) != 1)
			continue;
		sbx_diskimg_loop_file(nr, back, sizeof back);
		found = strcmp(back, real) == 0;
		if (found)
			snprintf(dev, devsz, "loop%u", nr);
	}
	if (d)
		closedir(d);
	return found;
}

/* An image still attached to a loop device, yet not mounted here, is an
 * earlier run's whose namespace the kernel is still tearing down (a
 * crash a moment ago; its autoclear device goes with it): waited for,
 * bounded. Mounting it a second time through another device would
 * corrupt it. */
static int wait_released(const char *img, char *why, size_t whysz)
{
	char *real = realpath(img, NULL), dev[64] = "";
	int64_t until = mono_ns() + (int64_t)STALE_WAIT_MS * 1000000;
	bool busy = real && image_attached(real, dev, sizeof dev);
	while (busy && mono_ns() < until) {
		usleep(50000);
		busy = image_attached(real, dev, sizeof dev);
	}
	free(real);
	if (busy)
		snprintf(why, whysz,
			 "%s is still attached to /dev/%s (another mount of it, elsewhere, is in use): not "
			 "mounted a second time",
			 img, dev);
	return busy ? -EBUSY : 0;
}

/* Called with d->lock held. */
static int mount_image(struct sbx_diskimg *d, const char *tdir, const char *ws, const char *img, char *why,
		       size_t whysz)
{
	char dev[64];
	int lfd = wait_released(img, why, whysz);
	if (lfd < 0)
		return lfd;
	lfd = loop_attach(img, dev, sizeof dev);
	if (lfd < 0) {
		snprintf(why, whysz, "%s",
			 lfd == -ENOSPC ? "no loop device is free on the host"
					: "cannot attach a loop device");
		return lfd;
	}
	int rc = mount(dev, ws, "ext4", MS_NODEV | MS_NOSUID, MOUNT_OPTS) < 0 ? -errno : 0;
	if (rc < 0)
		snprintf(why, whysz, "cannot mount %s (%s) on %s: %s", img, dev, ws, strerror(-rc));
	close(lfd); /* mounted: the mount holds it; else autoclear frees it now */
	if (rc == 0) {
		/* The tenant's workspace starts empty; e2fsck makes it again
		 * when it needs it. */
		char *lf = xasprintf("%s/lost+found", ws);
		(void)rmdir(lf);
		free(lf);
		remember(d, tdir);
	}
	return rc;
}

static int attach_locked(struct sbx_diskimg *d, const char *tdir, const char *ws, const char *img, uid_t uid,
			 gid_t gid, const struct sbx_quota_limits *lim, char *why, size_t whysz)
{
	int m = mounted_state(tdir, ws, img);
	if (m == 1) { /* mounted by us, or by a run that crashed: reused */
		remember(d, tdir);
		return 0;
	}
	if (m < 0) {
		snprintf(why, whysz, "%s is a mount point of something other than %s", ws, img);
		return m;
	}
	if (mkdir(ws, 0700) < 0 && errno != EEXIST)
		return -errno;
	int rc = 0;
	if (access(img, F_OK) < 0) {
		if (has_entries(ws)) {
			snprintf(why, whysz,
				 "%s holds files from before disk-quota=image; move them into the image as "
				 "docs/backends.md, \"Existing files\", says",
				 ws);
			return -ENOTEMPTY;
		}
		rc = make_image(d, tdir, uid, gid, lim, why, whysz);
		if (rc == 0)
			why[0] = '\0';
	} else {
		char rwhy[512] = "";
		rc = resize_image(d, img, lim, rwhy, sizeof rwhy);
		if (rc != 0)
			snprintf(why, whysz, "%s keeps its size (%s)", img, rwhy);
		rc = rc > 0 ? 0 : rc;
	}
	return rc < 0 ? rc : mount_image(d, tdir, ws, img, why, whysz);
}

int sbx_diskimg_attach(struct sbx_diskimg *d, const char *tdir, uid_t uid, gid_t gid,
		       const struct sbx_quota_limits *lim, char *why, size_t whysz)
{
	if (!sbx_diskimg_usable(d))
		return -ENOTSUP;
	if (image_bytes(lim) == 0) {
		snprintf(why, whysz, "image mode needs tenant-disk-quota-bytes");
		return -EINVAL;
	}
	char *ws = xasprintf("%s/workspace", tdir), *img = xasprintf("%s/disk.img", tdir);
	why[0] = '\0';
	pthread_mutex_lock(&d->lock);
	int rc = attach_locked(d, tdir, ws, img, uid, gid, lim, why, whysz);
	pthread_mutex_unlock(&d->lock);
	free(ws);
	free(img);
	return rc;
}

/* tdir/workspace (the caller's to free) when it is a mount of tdir/disk.img
 * (mounted_state: a loop device backed by the image), else NULL. */
static char *mounted_ws(const char *tdir)
{
	char *ws = xasprintf("%s/workspace", tdir), *img = xasprintf("%s/disk.img", tdir);
	int m = mounted_state(tdir, ws, img);
	free(img);
	if (m == 1)
		return ws;
	free(ws);
	return NULL;
}

int sbx_diskimg_detach(const char *tdir)
{
	char *ws = mounted_ws(tdir);
	int rc = 0;
	if (ws)
		rc = umount2(ws, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 ? -errno : 1;
	free(ws);
	return rc;
}

void sbx_diskimg_detach_all(struct sbx_diskimg *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < d->nattached; i++) {
		sbx_diskimg_detach(d->attached[i]);
		free(d->attached[i]);
	}
	d->nattached = 0;
	pthread_mutex_unlock(&d->lock);
}

int sbx_diskimg_dev(const char *tdir, dev_t *out)
{
	struct stat sw;
	char *ws = mounted_ws(tdir);
	if (!ws)
		return -ENOENT;
	int rc = stat(ws, &sw) < 0 ? -errno : 0;
	free(ws);
	if (rc < 0)
		return rc;
	*out = sw.st_dev;
	return 0;
}

int sbx_diskimg_usage(const char *tdir, struct sbx_quota_usage *out)
{
	struct statfs s;
	char *ws = mounted_ws(tdir);
	if (!ws)
		return -ENOENT;
	int rc = statfs(ws, &s) < 0 ? -errno : 0;
	free(ws);
	if (rc < 0)
		return rc;
	out->bytes = (uint64_t)(s.f_blocks - s.f_bfree) * (uint64_t)s.f_bsize;
	out->bytes_limit = (uint64_t)s.f_blocks * (uint64_t)s.f_bsize;
	out->inodes = (uint64_t)(s.f_files - s.f_ffree);
	out->inodes_limit = (uint64_t)s.f_files;
	return 0;
}

void sbx_diskimg_loops(int *attached, int *total, int *max)
{
	*attached = *total = *max = 0;
	DIR *d = opendir("/sys/block");
	for (struct dirent *e; d && (e = readdir(d));) {
		unsigned nr;
		char path[300], back[PATH_MAX];
		if (sscanf(e->d_name, "loop%u", &nr) != 1)
			continue;
		(*total)++;
		snprintf(path, sizeof path, "/sys/block/%s/loop/backing_file", e->d_name);
		FILE *f = fopen(path, "re");
		if (f && fgets(back, sizeof back, f))
			(*attached)++;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	FILE *f = fopen("/sys/module/loop/parameters/max_loop", "re");
	if (f && fscanf(f, "%d", max) != 1)
		*max = 0;
	if (f)
		fclose(f);
}
