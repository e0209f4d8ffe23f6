#pragma once
/* Disk budgets per tenant where the kernel has no project quotas: each
 * tenant's workspace directory is the mount point of an ext4 filesystem
 * image of its own, <data>/tenants/<name>/disk.img, a sparse file on the
 * data directory's filesystem sized by the tenant's disk quota. The
 * filesystem's size is the quota: it binds every writer, root included
 * (no blocks are reserved for root), and everything kept for the tenant
 * (workspace, spill, temp and upload files) lives inside the workspace.
 * No HTTP here.
 *
 * Made with mkfs.ext4 (e2fsprogs, exec'd: `-m 0`, `-N` from the inode
 * quota, at most one per 4 KiB of image; `-E root_owner=uid:gid`); attached through the kernel:
 * LOOP_CTL_GET_FREE on /dev/loop-control, LOOP_CONFIGURE with
 * LO_FLAGS_AUTOCLEAR (the loop device frees itself when its last mount
 * goes), then mount(2) with nodev,nosuid,discard (freed blocks go back
 * to the data directory's filesystem). The mounts are made in a mount
 * namespace of the server's own (sbx_diskimg_own_ns, slave of the
 * host's: nothing propagates out), so they die with the server however it
 * ends: the kernel tears the namespace down when its last process exits
 * (bwrap children have --die-with-parent), and autoclear frees the loop
 * devices. Only the server and what it spawns see them; the CLI enters
 * the running server's namespace to unmount (sbx_diskimg_detach_in_server).
 * An image still attached to a loop device (a namespace not yet torn
 * down) is waited for, never mounted a second time.
 *
 * Size changes are made offline, while the image is not mounted (at
 * start, after a graceful shutdown unmounted it): e2fsck -fp, then
 * resize2fs (growing: the file first; shrinking: the filesystem first,
 * refused by resize2fs when the data does not fit, the image then keeps
 * its size). Online growth would need CAP_SYS_RESOURCE, which the server
 * drops at start. The inode count is fixed by mkfs and scales with the
 * size on resize.
 *
 * Threading: every function is thread-safe (one lock around attaching and
 * detaching). Errors: negative errno, with a reason in `why`. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/quota.h"

struct sbx_diskimg;

/* Whether images can be used here: the server is root with CAP_SYS_ADMIN,
 * /dev/loop-control
 * gives a loop device, ext4 is known to the kernel, mkfs.ext4 is
 * installed. Always gives *out; sbx_diskimg_usable() and
 * sbx_diskimg_detail() say what was found. */
void sbx_diskimg_probe(struct sbx_diskimg **out);
void sbx_diskimg_free(struct sbx_diskimg **d);
bool sbx_diskimg_usable(const struct sbx_diskimg *d);
const char *sbx_diskimg_detail(const struct sbx_diskimg *d);

/* Make sure tdir/workspace is the mount point of tdir/disk.img: made
 * (owned by uid:gid) if missing, resized to lim if not mounted and its
 * size differs, mounted if not already. Refuses (-ENOTEMPTY) a workspace
 * directory that holds files but has no image (files from before image
 * mode: docs/backends.md says how to move them in); -EBUSY when something else is
 * mounted there; -ENOSPC when no loop device is free. 0 or -errno, with
 * the reason in why. */
int sbx_diskimg_attach(struct sbx_diskimg *d, const char *tdir, uid_t uid, gid_t gid,
		       const struct sbx_quota_limits *lim, char *why, size_t whysz);

/* Unmount tdir/workspace if it is this image's mount (MNT_DETACH: a
 * command still using it keeps it until it ends; autoclear then frees
 * the loop device). 0 when nothing was mounted; 1 when unmounted. */
int sbx_diskimg_detach(const char *tdir);
/* Detach every image this process attached (shutdown). */
void sbx_diskimg_detach_all(struct sbx_diskimg *d);

/* The block device of tdir's mounted image (its loop device, /dev/loopN's
 * st_rdev: what the tenant's cgroup io.max names). 0, or -ENOENT when
 * tdir/workspace is not the mount of tdir/disk.img. */
int sbx_diskimg_dev(const char *tdir, dev_t *out);

/* Use and size of tdir's image (statfs of its mounted filesystem);
 * -ENOENT when it is not mounted. */
int sbx_diskimg_usage(const char *tdir, struct sbx_quota_usage *out);

/* Image mode, before any thread: take <data_dir>/images.lock (-EBUSY, the
 * holder's pid in why, while another server holds it: two servers must
 * not mount one image), unmount what earlier runs of this data directory
 * left mounted in the host's namespace (image mounts at a point under
 * <data_dir>/tenants whose loop device's file is under it too: other
 * servers' are never touched) and release their loop devices, then move
 * the process into a mount namespace of its own, a slave of the host's.
 * *lock_fd stays open for the process's life; *swept counts the mounts
 * swept. 0 or -errno with why. */
int sbx_diskimg_own_ns(const char *data_dir, int *lock_fd, int *swept, char *why, size_t whysz);

/* sbx_diskimg_detach(tdir) in the mount namespace of the server holding
 * data_dir's images.lock (its pid in *pid), from a child process (setns
 * needs a single thread): 0 or 1 as sbx_diskimg_detach, -ESRCH when no
 * server holds the lock, else -errno. For the CLI. */
int sbx_diskimg_detach_in_server(const char *data_dir, const char *tdir, pid_t *pid);

/* The file behind loop device minor min ("" when it is detached; sysfs
 * adds " (deleted)" to one removed while attached). */
void sbx_diskimg_loop_file(unsigned min, char *out, size_t outsz);

/* Loop devices on the host: *attached of *total have a backing file now;
 * *max is the loop module's max_loop (0: created on demand). */
void sbx_diskimg_loops(int *attached, int *total, int *max);
