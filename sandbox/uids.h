#pragma once
/* Which host uid a tenant's commands and files get (security.md item 9:
 * RLIMIT_NPROC counts per uid, and only distinct uids keep one tenant's
 * processes from signalling another's). Three modes, decided once at
 * start:
 *
 *   root    the server's euid is 0: a tenant runs as uid-base + slot, the
 *           command's child drops to it before exec'ing bwrap.
 *   subuid  not root, but /etc/subuid and /etc/subgid give the server's
 *           user a range and newuidmap/newgidmap are installed: the server
 *           moves itself into a user namespace of its own whose map
 *           newuidmap writes (as rootless Podman does), "0 <own uid> 1"
 *           plus the range mapped one to one. Inside it the server is
 *           uid 0 with every capability over the mapped ids and nothing
 *           else, so the root path above applies unchanged: a tenant runs
 *           as uid-base + slot, which is that same uid on the host, and its
 *           files are chowned to it. The last id of the range is kept for
 *           the backend's start probe.
 *   shared  neither: every tenant's commands run as the server's own uid.
 *
 * No HTTP here; the policy for shared uids (refusing a second tenant) is
 * the caller's. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum sbx_uid_mode {
	SBX_UIDS_ROOT,
	SBX_UIDS_SUBUID,
	SBX_UIDS_SHARED,
};

/* ids first .. first + count - 1 */
struct sbx_id_range {
	uint32_t first, count;
};

struct sbx_uids {
	enum sbx_uid_mode mode;
	uid_t outer_uid; /* the server's uid and gid as it started (host ids in subuid mode) */
	gid_t outer_gid;
	char user[64];			/* the server's user name ("" without a passwd entry) */
	struct sbx_id_range uids, gids; /* subuid mode: mapped one to one */
	uint64_t nproc_all;		/* subuid mode: processes of all tenants together (0: no bound) */
	char detail[256];		/* one line for /readyz and the log */
	char why_shared[256];		/* shared mode: why not subuid */
};

struct sbx_uids_config {
	int64_t uid_base;
	const char *subuid_path, *subgid_path; /* NULL: /etc/subuid, /etc/subgid */
	const char *newuidmap, *newgidmap;     /* NULL: /usr/bin/newuidmap, /usr/bin/newgidmap */
};

/* In text of /etc/subuid's format (lines "owner:first:count", owner a
 * user name or a decimal uid), find a range of the user called name or
 * numbered id: the one holding want, else the first. Lines that do not
 * parse are skipped, as shadow's tools skip them. 0, or -ENOENT. */
int sbx_subid_find(const char *text, const char *name, uid_t id, uint32_t want, struct sbx_id_range *out);

/* Decide the mode and, for subuid, enter the user namespace. Must run
 * while the process has a single thread (unshare(CLONE_NEWUSER) needs
 * it); it forks a helper that runs newuidmap and newgidmap on it. Raises
 * the soft RLIMIT_NPROC to the hard one first: in the kernel's count the
 * namespace as a whole is bounded by the limit its creator had.
 * Returns 0 with *u filled (shared mode says why in why_shared), or
 * -errno with err set when the server must not start: uid-base outside
 * the range, the server's own uid inside it, a range of fewer than two
 * ids, or newuidmap/unshare failing. */
int sbx_uids_setup(struct sbx_uids *u, const struct sbx_uids_config *cfg, char *err, size_t errsz);

/* Whether a tenant whose uid and gid are id can have them in this mode:
 * in subuid mode inside both ranges and not the probe's id; always in the
 * other modes. */
bool sbx_uids_tenant_ok(const struct sbx_uids *u, int64_t id);

/* The unprivileged uid (and gid) the backend's start probe drops to when
 * the server is (namespace) root: 65534 as real root, the last id of the
 * range in subuid mode. */
uid_t sbx_uids_probe_id(const struct sbx_uids *u);

/* "root", "subuid" or "shared". */
const char *sbx_uids_mode_name(enum sbx_uid_mode m);
