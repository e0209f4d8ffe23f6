/* Disk for tenants: project quotas applied per tenant, the store's
 * reserve guarded before new work, and the 507 answers with their
 * numbers. */
#include "routes/storage.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/xmalloc.h"
#include "http/req.h"
#include "routes/app.h"
#include "sandbox/diskimg.h"
#include "sandbox/quota.h"
#include "sandbox/workspace.h"
#include "store/store.h"

/* Below this much free space an ENOSPC is the filesystem's, not a quota's. */
#define FS_FULL_BYTES (1u << 20)

int route_storage_attach_image(struct app *a, struct tenant *t)
{
	if (a->disk_mode != DISK_IMAGE)
		return 0;
	const struct sbx_quota_limits lim = {.bytes = (uint64_t)a->cfg->tenant_disk_quota_bytes,
					     .inodes = (uint64_t)a->cfg->tenant_disk_quota_inodes};
	char *tdir = xasprintf("%s/tenants/%s", a->cfg->data_dir, t->name);
	int rc =
	    sbx_diskimg_attach(a->diskimg, tdir, t->uid, t->gid, &lim, t->quota_why, sizeof t->quota_why);
	/* The device its I/O budget throttles (io.max "MAJ:MIN ..."). */
	if (rc == 0 && sbx_diskimg_dev(tdir, &t->io_dev) < 0)
		t->io_dev = 0;
	free(tdir);
	if (rc < 0)
		log_msg("error", "cannot attach the disk image of tenant %s: %s (%s); it is not served",
			t->name, t->quota_why, sbx_strerror(rc));
	else if (t->quota_why[0])
		log_msg("warn", "tenant %s: %s", t->name, t->quota_why);
	return rc;
}

void route_storage_forget(struct app *a, const char *name)
{
	if (a->disk_mode != DISK_IMAGE)
		return;
	char *tdir = xasprintf("%s/tenants/%s", a->cfg->data_dir, name);
	if (sbx_diskimg_detach(tdir) > 0)
		log_msg("info", "tenant %s was removed: its disk image is unmounted", name);
	free(tdir);
}

int route_storage_admit(const struct app *a, const struct tenant *t, char *why, size_t whysz)
{
	if (a->disk_mode != DISK_IMAGE || t->quota_rc >= 0)
		return 0;
	snprintf(why, whysz, "the disk of this tenant cannot be attached: %s", t->quota_why);
	return -SBX_E_BACKEND;
}

/* The tenant's use and limits, by the mode in force. */
static int tenant_usage(struct app *a, const struct tenant *t, struct sbx_quota_usage *u)
{
	if (a->disk_mode == DISK_IMAGE) {
		char *tdir = xasprintf("%s/tenants/%s", a->cfg->data_dir, t->name);
		int rc = sbx_diskimg_usage(tdir, u);
		free(tdir);
		return rc;
	}
	return sbx_quota_usage(a->quota, (uint32_t)t->uid, u);
}

int route_storage_apply_quota(struct app *a, struct tenant *t)
{
	if (a->disk_mode != DISK_PROJECT)
		return 0;
	const struct sbx_quota_limits lim = {.bytes = (uint64_t)a->cfg->tenant_disk_quota_bytes,
					     .inodes = (uint64_t)a->cfg->tenant_disk_quota_inodes};
	int fd = sbx_ws_openat(t->ws, "", O_RDONLY | O_DIRECTORY, 0);
	int rc = fd < 0 ? fd : sbx_quota_apply(a->quota, fd, (uint32_t)t->uid, &lim);
	if (fd >= 0)
		close(fd);
	if (rc < 0)
		log_msg("error",
			"cannot apply the disk quota of tenant %s (project %u): %s; its writes are refused",
			t->name, (unsigned)t->uid, sbx_strerror(rc));
	return rc;
}

bool route_storage_low(struct app *a, uint64_t *avail, uint64_t *total)
{
	struct sbx_disk_space ds = {0, 0};
	bool known = sbx_disk_space(a->store_dir, &ds) == 0;
	*avail = ds.avail_bytes;
	*total = ds.total_bytes;
	return known && ds.avail_bytes < (uint64_t)a->cfg->store_reserve_bytes;
}

/* The tenant's own limit on the store: the rows and bytes its exec and
 * audit rows take (store_usage_get). Only it is refused at its budget;
 * a store that cannot say lets the work through (the reserve still
 * guards the disk). */
static int budget_guard(struct http_req *r)
{
	const struct tenant *t = r->tenant;
	int64_t rows = 0, bytes = 0;
	if (!t || (t->store_max_bytes <= 0 && t->store_max_rows <= 0))
		return 0;
	if (store_usage_get(r->app->store, t->name, t->incarnation, &rows, &bytes) < 0)
		return 0;
	bool over_bytes = t->store_max_bytes > 0 && bytes >= t->store_max_bytes;
	bool over_rows = t->store_max_rows > 0 && rows >= t->store_max_rows;
	if (!over_bytes && !over_rows)
		return 0;
	json_decref(r->error_details);
	r->error_details = json_pack("{s:I, s:I, s:I, s:I}", "usage_bytes", (json_int_t)bytes, "limit_bytes",
				     (json_int_t)t->store_max_bytes, "usage_rows", (json_int_t)rows,
				     "limit_rows", (json_int_t)t->store_max_rows);
	return http_fail(r, -SBX_E_STORE_BUDGET,
			 "the server's records of tenant %s are at its store budget: %" PRId64 " of %" PRId64
			 " bytes, %" PRId64 " of %" PRId64 " rows; new work is refused",
			 t->name, bytes, t->store_max_bytes, rows, t->store_max_rows);
}

int route_storage_guard(struct http_req *r)
{
	struct app *a = r->app;
	uint64_t avail = 0, total = 0;
	if (r->tenant && r->tenant->quota_rc < 0)
		return http_fail(r, -SBX_E_BACKEND, "the disk quota of this tenant cannot be applied (%s)",
				 sbx_strerror(r->tenant->quota_rc));
	int rc = budget_guard(r);
	if (rc < 0)
		return rc;
	if (!route_storage_low(a, &avail, &total))
		return 0;
	json_decref(r->error_details);
	r->error_details = json_pack("{s:I, s:I}", "available_bytes", (json_int_t)avail, "reserve_bytes",
				     (json_int_t)a->cfg->store_reserve_bytes);
	return http_fail(r, -SBX_E_RESERVE,
			 "the server's disk is nearly full (%" PRIu64 " bytes free, %" PRId64
			 " kept for its records): new work is refused",
			 avail, a->cfg->store_reserve_bytes);
}

/* Whether the tenant's quota, not a full filesystem, refused the write:
 * EDQUOT is only ever a quota's; XFS says ENOSPC for a project quota, so
 * there an ENOSPC with space left on the filesystem is too. In image mode
 * the tenant's filesystem is its quota. */
static bool quota_refused(struct http_req *r, int rc, struct sbx_quota_usage *u)
{
	struct sbx_disk_space ds = {0, 0};
	const char *dir = sbx_workspace_host_dir(r->tenant->ws);
	if (r->app->disk_mode == DISK_NONE || tenant_usage(r->app, r->tenant, u) < 0)
		return false;
	if (rc == -EDQUOT || r->app->disk_mode == DISK_IMAGE)
		return true;
	return sbx_disk_space(dir, &ds) == 0 && ds.avail_bytes > FS_FULL_BYTES;
}

int route_storage_fail(struct http_req *r, int rc, const char *wire)
{
	struct sbx_quota_usage u;
	if (!r->tenant || !quota_refused(r, rc, &u))
		return http_fail(r, rc, "no space left on the disk for %s", wire);
	json_decref(r->error_details);
	r->error_details = json_pack("{s:I, s:I, s:I, s:I}", "usage_bytes", (json_int_t)u.bytes,
				     "limit_bytes", (json_int_t)u.bytes_limit, "usage_inodes",
				     (json_int_t)u.inodes, "limit_inodes", (json_int_t)u.inodes_limit);
	return http_fail(r, -SBX_E_QUOTA,
			 "the tenant's disk quota is reached writing %s: %" PRIu64 " of %" PRIu64
			 " bytes, %" PRIu64 " of %" PRIu64 " files",
			 wire, u.bytes, u.bytes_limit, u.inodes, u.inodes_limit);
}
