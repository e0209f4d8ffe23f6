#pragma once
/* Disk budgets per tenant: the filesystem's own project quotas (ext4 with
 * the `quota` and `project` features mounted with `prjquota`; XFS mounted
 * with `pquota`), the way Kubernetes and Docker bound local storage. No
 * HTTP here.
 *
 * A tenant's workspace directory gets a project id of its own with
 * FS_XFLAG_PROJINHERIT, so everything created beneath it (files the
 * tenant's commands write, and everything the server writes on its
 * behalf: buffered writes, upload and transfer temp files, spill files,
 * session directories; all of them live inside the workspace) is
 * charged to that project. The server never writes a tenant's bytes
 * outside the workspace. A sandboxed command cannot move its files out
 * of the project: the kernel lets only the initial user namespace change
 * a project id, and renames or links across projects fail with EXDEV.
 *
 * The project id is the tenant's uid (uid-base + slot): distinct per
 * tenant, and per server on a host as uid ranges are.
 *
 * Quota limits bind no process that holds CAP_SYS_RESOURCE (the kernel's
 * ignore_hardlimit): sbx_quota_drop_override() takes that capability
 * from the server at start, so what it writes as root obeys them too. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbx_quota_limits {
	uint64_t bytes;	 /* hard block limit in bytes (0: none) */
	uint64_t inodes; /* hard inode limit (0: none) */
};

struct sbx_quota_usage {
	uint64_t bytes, inodes;		    /* charged to the project now */
	uint64_t bytes_limit, inodes_limit; /* 0: none */
};

struct sbx_quota;

/* Find out whether the filesystem holding dir enforces project quotas
 * (statfs for the type, /proc/self/mountinfo for the device and mount
 * point, quotactl_fd Q_GETINFO and Q_XGETQSTAT for the state) and keep an
 * fd on dir. Always gives a *out (unless dir cannot be opened: -errno);
 * sbx_quota_enforced() and sbx_quota_detail() say what was found. Call
 * it as root, after sbx_quota_drop_override (it needs CAP_SYS_ADMIN). */
int sbx_quota_probe(struct sbx_quota **out, const char *dir);
void sbx_quota_free(struct sbx_quota **q);
/* Whether limits can be set and are enforced. Accepts NULL (false). */
bool sbx_quota_enforced(const struct sbx_quota *q);
/* One line for the log and /readyz: "project quotas on ext4 (/dev/loop3
 * at /mnt/x)", or the reason they are unavailable. Never NULL. */
const char *sbx_quota_detail(const struct sbx_quota *q);

/* Put the directory dirfd (opened O_RDONLY|O_DIRECTORY) under project
 * projid with FS_XFLAG_PROJINHERIT and set the project's hard limits to
 * lim. When the directory was not yet in the project (a new workspace,
 * or one from before quotas), everything beneath it is moved into the
 * project first (never following a symlink; symlinks and special files
 * keep their id, the kernel offers no way to set it), then the directory
 * itself, so an interrupted walk is redone at the next start. Cheap when
 * nothing changed (two ioctls and one quotactl). Thread-safe. -ENOTSUP
 * when !sbx_quota_enforced(q); other -errno. */
int sbx_quota_apply(const struct sbx_quota *q, int dirfd, uint32_t projid,
		    const struct sbx_quota_limits *lim);

/* The project's use and limits. -ENOTSUP when not enforced; -errno. */
int sbx_quota_usage(const struct sbx_quota *q, uint32_t projid, struct sbx_quota_usage *out);

/* Drop CAP_SYS_RESOURCE from every capability set of the process (the
 * bounding set too, so no child regains it), after raising the hard
 * rlimits a child may set for a command (address space, file size,
 * processes, open files): raising a hard limit is what the capability
 * was needed for. Nothing else needs it: cgroup files are written by
 * permission, bwrap runs as the tenant's uid, RLIMIT_NPROC never binds
 * root, the 1 MiB pipes stay within pipe-max-size. Without CAP_SETPCAP
 * (not root) the bounding set is left as it is. Capabilities are per thread: call it before the
 * process starts any thread. 0 (also when not held), or -errno. */
int sbx_quota_drop_override(void);

/* Space of the filesystem holding dir, as an unprivileged writer sees it
 * (statvfs f_bavail: without the root-reserved blocks). */
struct sbx_disk_space {
	uint64_t avail_bytes, total_bytes;
};
int sbx_disk_space(const char *dir, struct sbx_disk_space *out);
