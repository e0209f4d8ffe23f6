#include "sandbox/quota.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <linux/quota.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "sandbox/workspace.h"

#ifndef XFS_SUPER_MAGIC
#define XFS_SUPER_MAGIC 0x58465342
#endif
#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443
#endif
#define WALK_DEPTH_MAX 256

struct sbx_quota {
	int fd;	      /* O_PATH on the probed directory: quotactl_fd's handle */
	char *device; /* the mount's source, for quotactl() where quotactl_fd is missing */
	bool enforced;
	char detail[1024];
};

/* ---- what the filesystem is ---- */

/* The mount holding dir: the /proc/self/mountinfo line with its device
 * whose mount point is the longest prefix of dir's real path. */
static void find_mount(const char *dir, dev_t dev, char *fstype, char *source, char *point, size_t sz)
{
	char *real = realpath(dir, NULL), line[4096];
	FILE *f = fopen("/proc/self/mountinfo", "re");
	size_t best = 0;

	while (real && f && fgets(line, sizeof line, f)) {
		unsigned maj, min;
		char mp[1024], fs[64], src[1024];
		const char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*u %*u %u:%u %*s %1023s", &maj, &min, mp) != 3 ||
		    sscanf(dash + 3, "%63s %1023s", fs, src) != 2 || makedev(maj, min) != dev)
			continue;
		size_t n = strlen(mp);
		bool prefix = strcmp(mp, "/") == 0 ||
			      (strncmp(real, mp, n) == 0 && (real[n] == '/' || real[n] == '\0'));
		if (prefix && n >= best) {
			best = n;
			snprintf(fstype, sz, "%s", fs);
			snprintf(source, sz, "%s", src);
			snprintf(point, sz, "%s", mp);
		}
	}
	if (f)
		fclose(f);
	free(real);
}

static long qctl(const struct sbx_quota *q, unsigned cmd, unsigned type, uint32_t id, void *addr)
{
	/* QCMD, without its signed overflow (Q_GETINFO << 8 is past INT_MAX). */
	int qcmd = (int)((cmd << SUBCMDSHIFT) | (type & SUBCMDMASK));
	long r = syscall(SYS_quotactl_fd, q->fd, qcmd, id, addr);
	if (r < 0 && errno == ENOSYS && q->device) /* before Linux 5.14 */
		r = syscall(SYS_quotactl, qcmd, q->device, id, addr);
	return r < 0 ? -errno : 0;
}

/* Whether project quotas are on and enforced; why not in why. */
static bool project_state(const struct sbx_quota *q, bool xfs, char *why, size_t sz)
{
	struct fs_quota_stat st = {.qs_version = FS_QSTAT_VERSION};
	struct if_dqinfo info;
	int r;

	if (!xfs && (r = (int)qctl(q, Q_GETINFO, PRJQUOTA, 0, &info)) < 0) {
		snprintf(why, sz,
			 "project quotas are %s%s: make the filesystem with `-O quota,project`"
			 " and mount it with `prjquota`",
			 r == -ESRCH ? "not turned on" : "unavailable: ", r == -ESRCH ? "" : strerror(-r));
		return false;
	}
	if ((r = (int)qctl(q, Q_XGETQSTAT, PRJQUOTA, 0, &st)) < 0) {
		snprintf(why, sz, "cannot read the quota state (%s)%s", strerror(-r),
			 xfs ? ": mount with `pquota`" : "");
		return false;
	}
	if (!(st.qs_flags & FS_QUOTA_PDQ_ACCT) || !(st.qs_flags & FS_QUOTA_PDQ_ENFD)) {
		snprintf(why, sz, "project quotas are %s, not enforced: mount with `%s`",
			 (st.qs_flags & FS_QUOTA_PDQ_ACCT) ? "only accounted" : "off",
			 xfs ? "pquota" : "prjquota");
		return false;
	}
	return true;
}

static const char *fs_name(long type)
{
	switch (type) {
	case EXT4_SUPER_MAGIC:
		return "ext4";
	case XFS_SUPER_MAGIC:
		return "xfs";
	case TMPFS_MAGIC:
		return "tmpfs";
	case BTRFS_SUPER_MAGIC:
		return "btrfs";
	case OVERLAYFS_SUPER_MAGIC:
		return "overlayfs";
	default:
		return NULL;
	}
}

int sbx_quota_probe(struct sbx_quota **out, const char *dir)
{
	char fstype[1024] = "?", source[1024] = "?", point[1024] = "?", why[400] = "";
	struct statfs sfs;
	struct stat st;
	struct sbx_quota *q;
	int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstatfs(fd, &sfs) < 0 || fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	q = xcalloc(1, sizeof *q);
	q->fd = fd;
	find_mount(dir, st.st_dev, fstype, source, point, sizeof fstype);
	const char *name = fs_name((long)sfs.f_type);
	bool ext4 = sfs.f_type == EXT4_SUPER_MAGIC, xfs = sfs.f_type == XFS_SUPER_MAGIC;
	if (source[0] == '/')
		q->device = xstrdup(source);
	if (!ext4 && !xfs)
		snprintf(why, sizeof why, "%.60s has no project quotas (ext4 or XFS needed)",
			 name ? name : fstype);
	else if (geteuid() != 0)
		snprintf(why, sizeof why, "sandboxd does not run as root, so it cannot set quotas");
	else
		q->enforced = project_state(q, xfs, why, sizeof why);
	if (q->enforced)
		snprintf(q->detail, sizeof q->detail, "project quotas on %s (%.200s at %.200s)", name, source,
			 point);
	else
		snprintf(q->detail, sizeof q->detail, "unavailable on %.60s (%.200s at %.200s): %s",
			 name ? name : fstype, source, point, why);
	*out = q;
	return 0;
}

void sbx_quota_free(struct sbx_quota **pq)
{
	if (!pq || !*pq)
		return;
	close((*pq)->fd);
	free((*pq)->device);
	free(*pq);
	*pq = NULL;
}

bool sbx_quota_enforced(const struct sbx_quota *q)
{
	return q && q->enforced;
}

const char *sbx_quota_detail(const struct sbx_quota *q)
{
	return q ? q->detail : "unavailable: not probed";
}

/* ---- limits and usage ---- */

static int set_limits(const struct sbx_quota *q, uint32_t projid, const struct sbx_quota_limits *lim)
{
	struct if_dqblk d = {
	    .dqb_bhardlimit = (lim->bytes + QIF_DQBLKSIZE - 1) / QIF_DQBLKSIZE,
	    .dqb_ihardlimit = lim->inodes,
	    .dqb_valid = QIF_LIMITS,
	};
	return (int)qctl(q, Q_SETQUOTA, PRJQUOTA, projid, &d);
}

int sbx_quota_usage(const struct sbx_quota *q, uint32_t projid, struct sbx_quota_usage *out)
{
	struct if_dqblk d;
	int r;

	if (!sbx_quota_enforced(q))
		return -ENOTSUP;
	memset(&d, 0, sizeof d);
	if ((r = (int)qctl(q, Q_GETQUOTA, PRJQUOTA, projid, &d)) < 0)
		return r;
	out->bytes = d.dqb_curspace;
	out->inodes = d.dqb_curinodes;
	out->bytes_limit = d.dqb_bhardlimit * QIF_DQBLKSIZE;
	out->inodes_limit = d.dqb_ihardlimit;
	return 0;
}

/* Set fd's project id (and, for a directory, PROJINHERIT). */
static int set_project(int fd, uint32_t projid, bool dir)
{
	struct fsxattr fa;

	if (ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0)
		return -errno;
	if (fa.fsx_projid == projid && (!dir || (fa.fsx_xflags & FS_XFLAG_PROJINHERIT)))
		return 0;
	fa.fsx_projid = projid;
	if (dir)
		fa.fsx_xflags |= FS_XFLAG_PROJINHERIT;
	return ioctl(fd, FS_IOC_FSSETXATTR, &fa) < 0 ? -errno : 0;
}

/* Move everything beneath dfd into the project, depth first, opening each
 * name without following links; what is neither a file nor a directory
 * (or vanished meanwhile) is left alone. */
static int walk_set(int dfd, uint32_t projid, int depth)
{
	int r = 0, dup = -1;
	DIR *d = NULL;

	if (depth > WALK_DEPTH_MAX)
		return -ELOOP;
	dup = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dup < 0 || !(d = fdopendir(dup))) {
		r = -errno;
		if (dup >= 0)
			close(dup);
		return r;
	}
	for (struct dirent *e; r == 0 && (e = readdir(d));) {
		struct stat st;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
			continue;
		int cfd = sbx_ws_open_child(dfd, e->d_name,
					    S_ISDIR(st.st_mode) ? O_RDONLY | O_DIRECTORY : O_RDONLY, 0);
		if (cfd < 0)
			continue; /* swapped for a link or a special file: not ours to follow */
		if (fstat(cfd, &st) == 0 && S_ISDIR(st.st_mode))
			r = walk_set(cfd, projid, depth + 1);
		if (r == 0 && fstat(cfd, &st) == 0 && (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
			r = set_project(cfd, projid, S_ISDIR(st.st_mode));
		close(cfd);
	}
	closedir(d);
	return r;
}

static bool limits_differ(const struct sbx_quota *q, uint32_t projid, const struct sbx_quota_limits *lim)
{
	struct sbx_quota_usage u;
	uint64_t want_b = (lim->bytes + QIF_DQBLKSIZE - 1) / QIF_DQBLKSIZE * QIF_DQBLKSIZE;
	return sbx_quota_usage(q, projid, &u) < 0 || u.bytes_limit != want_b || u.inodes_limit != lim->inodes;
}

int sbx_quota_apply(const struct sbx_quota *q, int dirfd, uint32_t projid, const struct sbx_quota_limits *lim)
{
	static const struct sbx_quota_limits none = {0, 0};
	struct fsxattr fa;
	int r;

	if (!sbx_quota_enforced(q))
		return -ENOTSUP;
	if (ioctl(dirfd, FS_IOC_FSGETXATTR, &fa) < 0)
		return -errno;
	if (fa.fsx_projid != projid || !(fa.fsx_xflags & FS_XFLAG_PROJINHERIT)) {
		/* Files moving in must not be refused by the limits: they are
		 * set once everything is in. */
		if ((r = set_limits(q, projid, &none)) < 0 || (r = walk_set(dirfd, projid, 0)) < 0 ||
		    (r = set_project(dirfd, projid, true)) < 0)
			return r;
	}
	return limits_differ(q, projid, lim) ? set_limits(q, projid, lim) : 0;
}

/* ---- the server's own writes ---- */

/* Let children set any value for the limits they set (backend.c). */
static void raise_hard_limits(void)
{
	static const int res[] = {RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC};
	struct rlimit rl;

	for (size_t i = 0; i < sizeof res / sizeof res[0]; i++) {
		if (getrlimit(res[i], &rl) == 0 && rl.rlim_max != RLIM_INFINITY) {
			rl.rlim_max = RLIM_INFINITY;
			setrlimit(res[i], &rl);
		}
	}
	FILE *f = fopen("/proc/sys/fs/nr_open", "re");
	unsigned long nr = 0;
	if (f && fscanf(f, "%lu", &nr) == 1 && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max < nr) {
		rl.rlim_max = nr;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (f)
		fclose(f);
}

int sbx_quota_drop_override(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2];
	const unsigned bit = CAP_SYS_RESOURCE;

	if (syscall(SYS_capget, &h, d) < 0)
		return -errno;
	if (d[bit / 32].effective & (1u << (bit % 32)))
		raise_hard_limits();
	/* Only with CAP_SETPCAP (root); a server without it cannot have the
	 * capability back but through a setuid-root or file-capability exec. */
	if ((d[0].effective & (1u << CAP_SETPCAP)) &&
	    prctl(PR_CAPBSET_READ, CAP_SYS_RESOURCE, 0, 0, 0) == 1 &&
	    prctl(PR_CAPBSET_DROP, CAP_SYS_RESOURCE, 0, 0, 0) < 0)
		return -errno;
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, CAP_SYS_RESOURCE, 0, 0);
	d[bit / 32].effective &= ~(1u << (bit % 32));
	d[bit / 32].permitted &= ~(1u << (bit % 32));
	d[bit / 32].inheritable &= ~(1u << (bit % 32));
	return syscall(SYS_capset, &h, d) < 0 ? -errno : 0;
}

int sbx_disk_space(const char *dir, struct sbx_disk_space *out)
{
	struct statvfs v;

	if (statvfs(dir, &v) < 0)
		return -errno;
	out->avail_bytes = (uint64_t)v.f_bavail * v.f_frsize;
	out->total_bytes = (uint64_t)v.f_blocks * v.f_frsize;
	return 0;
}
