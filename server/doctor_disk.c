/* The checks of storage: the data directory and who can reach it, the
 * disk quotas and the disk images (loop devices, mkfs.ext4), the store
 * and the stored tenants' uids. */
#include "server/doctor_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/xmalloc.h"
#include "routes/policy.h"
#include "routes/tenant_cache.h"
#include "sandbox/backend.h"
#include "sandbox/cgroup.h"
#include "sandbox/diskimg.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/quota.h"
#include "sandbox/registry.h"
#include "sandbox/seccomp.h"
#include "sandbox/workspace.h"
#include "server/cli.h"
#include "server/datadir.h"
#include "store/store.h"

/* ---- the data directory ---- */

void srv_check_reach(const char *dir, uid_t uid, gid_t gid, const char *who, struct srv_check *c)
{
	char blocked[4096] = "";
	int r = sbx_workspace_reachable(dir, uid, gid, blocked, sizeof blocked);
	if (r == -EACCES) {
		struct stat st = {0};
		stat(blocked, &st);
		DETAIL(
		    c,
		    "%.200s cannot reach %.400s: %.400s (mode %04o, owner %u) is not searchable by that uid",
		    who, dir, blocked, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
		FIX(c,
		    "chmod o+x %.600s (0711 is enough), or put --data-dir where every parent directory is "
		    "searchable",
		    blocked);
		doctor_missing(c, true);
	} else if (r < 0) {
		DETAIL(c, "cannot check that %s reaches %s: %s", who, dir, sbx_strerror(r));
		FIX(c, "see the error");
		doctor_missing(c, false);
	}
}

/* What the data directory's filesystem means for it ("" when nothing). */
static const char *fs_note(long type, const char **name)
{
	switch (type) {
	case EXT4_SUPER_MAGIC:
		*name = "ext4";
		return "";
	case XFS_SUPER_MAGIC:
		*name = "xfs";
		return "";
	case BTRFS_SUPER_MAGIC:
		*name = "btrfs";
		return "; no project quotas on btrfs";
	case TMPFS_MAGIC:
		*name = "tmpfs";
		return "; warning: tmpfs is memory, emptied at reboot (the store and every workspace), "
		       "and has no project quotas";
	case OVERLAYFS_SUPER_MAGIC:
		*name = "overlayfs";
		return "; warning: a container's overlay goes with the container: mount a volume there";
	case NFS_SUPER_MAGIC:
		*name = "nfs";
		return "; warning: SQLite's locks are unreliable on NFS: keep the store on a local disk";
	default:
		*name = "other";
		return "";
	}
}

/* The first directory on the way to path (path included) that this
 * process cannot search, into out ("" when there is none). */
static void first_unsearchable(const char *path, char *out, size_t outsz)
{
	char *p = xstrdup(path);
	out[0] = '\0';
	for (char *q = p + 1;; q++) {
		if (*q != '/' && *q != '\0')
			continue;
		char saved = *q;
		*q = '\0';
		if (access(p, X_OK) < 0) {
			snprintf(out, outsz, "%s", p);
			break;
		}
		*q = saved;
		if (saved == '\0')
			break;
	}
	free(p);
}

/* The data directory cannot even be looked at (not "does not exist"):
 * a directory on the way is not searchable by the server's uid. */
static bool data_dir_hidden(const struct sbx_config *cfg, struct srv_check *c)
{
	struct stat st;
	if (stat(cfg->data_dir, &st) == 0 || errno == ENOENT || errno == ENOTDIR)
		return false;
	int err = errno;
	char blocked[2048];
	first_unsearchable(cfg->data_dir, blocked, sizeof blocked);
	if (!blocked[0] || stat(blocked, &st) < 0)
		memset(&st, 0, sizeof st);
	DETAIL(c,
	       "cannot look at the data directory %.400s: %s%s%.400s (mode %04o, owner %u) is not "
	       "searchable by the server's uid %u",
	       cfg->data_dir, strerror(err), blocked[0] ? ": " : "", blocked[0] ? blocked : "?",
	       (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, (unsigned)geteuid());
	FIX(c,
	    "chmod o+x %.600s (0711 is enough), or run the server (and doctor) as a user that can reach "
	    "the data directory",
	    blocked[0] ? blocked : cfg->data_dir);
	doctor_missing(c, true);
	return true;
}

void check_data_dir(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	if (data_dir_hidden(cfg, c))
		return;
	char *at = doctor_existing_parent(cfg->data_dir);
	bool exists = strcmp(at, cfg->data_dir) == 0;
	struct statfs sfs = {0};
	const char *fsname = "?";
	const char *note = statfs(at, &sfs) == 0 ? fs_note((long)sfs.f_type, &fsname) : "";
	/* serve sets a data directory of its own to 0711 (server/datadir.c):
	 * then the server can write it, and the way to it is what the tenants'
	 * uids must search. */
	struct stat own;
	bool narrowed =
	    exists && stat(at, &own) == 0 && own.st_uid == geteuid() && (own.st_mode & 0777) != 0711;
	char mode[48] = "";
	if (narrowed)
		snprintf(mode, sizeof mode, " (serve sets its mode %04o to 0711)",
			 (unsigned)(own.st_mode & 0777));
	if (!narrowed && access(at, W_OK | X_OK) < 0 && (!exists || access(cfg->db_path, R_OK | W_OK) < 0)) {
		DETAIL(c, "%s %s is not writable by the server's uid %u",
		       exists ? "the data directory" : "its parent", at, (unsigned)geteuid());
		FIX(c, "%s (or run the server as that directory's owner)",
		    exists ? "chown the data directory to the server's user"
			   : "mkdir -p the data directory and chown it to the server's user");
		doctor_missing(c, true);
		free(at);
		return;
	}
	if (h->uids_ready && h->uids.mode != SBX_UIDS_SHARED) {
		char who[96];
		char *way = xstrdup(at), *slash = strrchr(way, '/');
		if (narrowed && slash)
			slash[slash == way ? 1 : 0] = '\0';
		snprintf(who, sizeof who, "the tenants' uids (uid-base %lld)", (long long)cfg->uid_base);
		srv_check_reach(narrowed ? way : at, (uid_t)cfg->uid_base, (gid_t)cfg->uid_base, who, c);
		free(way);
		if (c->status == SRV_CHECK_MISSING) {
			free(at);
			return;
		}
	}
	if (exists)
		DETAIL(c, "%s on %s, reachable by the tenants' uids%s%s", at, fsname, mode, note);
	else
		DETAIL(c,
		       "%s does not exist yet: serve makes it (0711) in %s, on %s, reachable by the "
		       "tenants' uids%s",
		       cfg->data_dir, at, fsname, note);
	free(at);
}

/* ---- disk quotas ---- */

/* Image mode, serving: the images are mounted in a mount namespace of the
 * server's own, so that a crash (SIGKILL, OOM) releases them with the
 * process instead of leaving loop mounts on the host (sandbox/diskimg.h).
 * What earlier runs of this data directory left on the host goes first.
 * Before any thread: a thread made before would stay in the host's. */
static void own_mount_ns(struct srv_host *h, struct srv_check *c)
{
	char why[512] = "";
	int swept = 0;
	if (sbx_diskimg_own_ns(h->cfg->data_dir, &h->images_lock, &swept, why, sizeof why) < 0) {
		DETAIL(c, "disk-quota=image: %s", why);
		FIX(c, "one server per data directory: stop the other one");
		doctor_missing(c, true);
		return;
	}
	if (swept > 0)
		log_msg("info",
			"unmounted %d disk images an earlier run of this data directory left mounted on "
			"the host",
			swept);
}

/* disk-quota: project quotas where the workspaces' filesystem enforces
 * them, else (auto) a filesystem image per tenant where loop devices
 * work, else none; an explicit mode that cannot work stops the start. */
void check_disk_quota(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	const char *want = cfg->disk_quota;
	bool is_auto = strcmp(want, "auto") == 0, bytes = cfg->tenant_disk_quota_bytes > 0;
	bool project = strcmp(want, "project") == 0, image = strcmp(want, "image") == 0;
	if (!is_auto && !project && !image && strcmp(want, "none") != 0) {
		DETAIL(c, "disk-quota must be auto, project, image or none (it is \"%s\")", want);
		FIX(c, "--set disk-quota=auto");
		doctor_missing(c, true);
		return;
	}
	if (h->serving && srv_prepare_data_dir(cfg) < 0) {
		DETAIL(c, "cannot prepare the data directory %s (said above)", cfg->data_dir);
		FIX(c, "see data-dir");
		doctor_missing(c, true);
		return;
	}
	char *tenants = xasprintf("%s/tenants", cfg->data_dir), *at = doctor_existing_parent(tenants);
	int rc = sbx_quota_probe(&h->quota, at);
	if (rc < 0)
		log_msg("warn", "disk quotas: cannot look at %s: %s", at, sbx_strerror(rc));
	free(tenants);
	free(at);
	if (strcmp(want, "none") != 0 && !project)
		sbx_diskimg_probe(&h->diskimg);
	enum disk_mode m = DISK_NONE;
	if ((is_auto || project) && sbx_quota_enforced(h->quota))
		m = DISK_PROJECT;
	else if ((is_auto || image) && sbx_diskimg_usable(h->diskimg) && bytes)
		m = DISK_IMAGE;
	h->disk_mode = m;
	if (m != DISK_NONE) {
		DETAIL(c, "%s; each tenant %lld bytes and %lld inodes",
		       m == DISK_PROJECT ? sbx_quota_detail(h->quota) : sbx_diskimg_detail(h->diskimg),
		       (long long)cfg->tenant_disk_quota_bytes, (long long)cfg->tenant_disk_quota_inodes);
		if (m == DISK_IMAGE && h->serving)
			own_mount_ns(h, c);
		return;
	}
	if (strcmp(want, "none") == 0 || (is_auto && !bytes)) {
		DETAIL(c, "%s",
		       is_auto ? "tenant-disk-quota-bytes=0: no disk quota asked for" : "disk-quota=none");
		doctor_not_needed(c);
		return;
	}
	const char *proj_fix = "put data-dir on ext4 made with -O quota,project and mounted with prjquota "
			       "(XFS: pquota), as root";
	const char *img_fix = "run as root with loop devices and e2fsprogs (see loop-devices, mkfs.ext4)";
	if (!is_auto) {
		DETAIL(c, "disk-quota=%s cannot work here: %s", want,
		       project ? sbx_quota_detail(h->quota)
		       : bytes ? sbx_diskimg_detail(h->diskimg)
			       : "tenant-disk-quota-bytes is 0");
		FIX(c, "%s, or --set disk-quota=auto",
		    project ? proj_fix
		    : bytes ? img_fix
			    : "set tenant-disk-quota-bytes");
		doctor_missing(c, true);
		return;
	}
	DETAIL(c,
	       "no per-tenant disk quota (project quotas %s; %s); enforced instead: fsize-limit-bytes "
	       "per file, max-upload-bytes per upload, and store-reserve-bytes (%lld) kept for the store",
	       sbx_quota_detail(h->quota), sbx_diskimg_detail(h->diskimg),
	       (long long)cfg->store_reserve_bytes);
	FIX(c, "%s; or %s; or --set disk-quota=none to accept none", proj_fix, img_fix);
	doctor_missing(c, false);
}

/* Loop devices and mkfs.ext4 matter where images may be the choice:
 * disk-quota=image, or auto with a quota and no project quotas. */
static bool images_wanted(const struct srv_host *h)
{
	const struct sbx_config *cfg = h->cfg;
	return strcmp(cfg->disk_quota, "image") == 0 ||
	       (strcmp(cfg->disk_quota, "auto") == 0 && cfg->tenant_disk_quota_bytes > 0 &&
		!sbx_quota_enforced(h->quota));
}

static void images_not_needed(const struct srv_host *h, struct srv_check *c)
{
	DETAIL(c, "no disk images: %s",
	       h->disk_mode == DISK_PROJECT ? "project quotas are in force"
					    : "disk-quota or its bytes say none");
	doctor_not_needed(c);
}

void check_loop(struct srv_host *h, struct srv_check *c)
{
	if (!images_wanted(h)) {
		images_not_needed(h, c);
		return;
	}
	FIX(c, "modprobe loop (a container needs /dev/loop-control and the /dev/loopN devices passed in, "
	       "and CAP_SYS_ADMIN)");
	int fd = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		DETAIL(c, "/dev/loop-control: %s", strerror(errno));
		if (errno == EACCES || errno == EPERM)
			FIX(c, "run the server as root (loop devices and mounts need it)");
		doctor_missing(c, false);
		return;
	}
	int n = ioctl(fd, LOOP_CTL_GET_FREE);
	int err = errno;
	close(fd);
	if (n < 0) {
		DETAIL(c, "/dev/loop-control gives no free loop device: %s", strerror(err));
		FIX(c, "free loop devices (losetup -D detaches unused ones) or raise max_loop");
		doctor_missing(c, false);
		return;
	}
	DETAIL(c, "/dev/loop-control gives a free loop device (/dev/loop%d)", n);
	c->fix[0] = '\0';
}

void check_mkfs(struct srv_host *h, struct srv_check *c)
{
	if (!images_wanted(h)) {
		images_not_needed(h, c);
		return;
	}
	static const char *const where[] = {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4", "/usr/bin/mkfs.ext4"};
	for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
		char *argv[] = {(char *)"mkfs.ext4", (char *)"-V", NULL};
		if (access(where[i], X_OK) < 0)
			continue;
		int st = doctor_run_quiet(where[i], argv);
		if (st == 0) {
			DETAIL(c, "%s runs (e2fsprogs)", where[i]);
			return;
		}
		DETAIL(c, "%s -V fails (status %d)", where[i], st);
		FIX(c, "apt-get install --reinstall e2fsprogs");
		doctor_missing(c, false);
		return;
	}
	DETAIL(c, "mkfs.ext4 is not installed");
	FIX(c, "apt-get install e2fsprogs");
	doctor_missing(c, false);
}

/* ---- the store ---- */

void check_store(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	char err[512] = "";
	struct stat st;
	if (!h->serving && stat(cfg->db_path, &st) < 0) {
		int why = errno;
		if (why == ENOENT) {
			DETAIL(c, "%s does not exist yet: serve makes it, at schema version %d", cfg->db_path,
			       store_known_version());
			return;
		}
		DETAIL(c, "cannot look at %s: %s", cfg->db_path, strerror(why));
		FIX(c, "see data-dir: the server's user must reach and write the data directory");
		doctor_missing(c, true);
		return;
	}
	int rc = store_open(&h->store, cfg->db_path, h->serving, err, sizeof err);
	if (rc == 0) {
		DETAIL(c, "%s at schema version %d (this binary's)", cfg->db_path,
		       store_schema_version(h->store));
		return;
	}
	if (rc == -ESTALE) {
		DETAIL(c, "%s: %s; serve applies the pending migrations at start", cfg->db_path, err);
		return;
	}
	DETAIL(c, "%s: %s", cfg->db_path, *err ? err : sbx_strerror(rc));
	FIX(c, "%s",
	    rc == -EPROTO ? "run a sandboxd at least as new as the one that last migrated it"
			  : "make it a sandboxd database the server's user can read and write "
			    "(ls -l it; move a damaged one aside and restore a backup)");
	doctor_missing(c, true);
}

/* ---- the stored tenants' uids ---- */

/* What serve refuses once the store is open (route_uids_check_start):
 * tenants that would share the server's uid without allow-shared-uid, a
 * tenant whose uid lies beyond the subordinate range. */
void check_tenants(struct srv_host *h, struct srv_check *c)
{
	struct stat st;
	if (!h->uids_ready) {
		DETAIL(c, "not checked: no uids set up (see uids)");
		FIX(c, "see uids");
		doctor_missing(c, false);
		return;
	}
	if (!h->store) {
		bool none = stat(h->cfg->db_path, &st) < 0 && errno == ENOENT;
		DETAIL(c, "%s",
		       none ? "no tenants yet"
			    : "not checked: the store was not read (see store; serve checks them once it "
			      "has opened it)");
		return;
	}
	struct app *a = xcalloc(1, sizeof *a);
	char err[1024] = "";
	a->cfg = h->cfg;
	a->store = h->store;
	a->uids = &h->uids;
	int rc = route_uids_check_start(a, err, sizeof err);
	free(a);
	if (rc < 0) {
		char *fix = strstr(err, ". Fix: ");
		if (fix) {
			*fix = '\0';
			FIX(c, "%s", fix + strlen(". Fix: "));
		} else {
			FIX(c, "see the error");
		}
		DETAIL(c, "%s", err);
		doctor_missing(c, true);
		return;
	}
	struct store_tenant *v = NULL;
	size_t n = 0;
	if (store_tenant_list(h->store, &v, &n) == 0)
		store_tenants_free(v, n);
	DETAIL(c, "%zu tenants; %s", n,
	       h->uids.mode == SBX_UIDS_SHARED ? "all run as the server's uid (shared)"
					       : "each runs as a uid of its own");
}
