/* The local provider (routes/provider.h): a tenant's files in its
 * workspace on this server, beneath the workspace fd (sandbox/fsops.c),
 * and its commands on this server's runner and backends (bwrap, local).
 * It answers as every provider does, with routes/fs.h's helpers. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/errors.h"
#include "http/response.h"
#include "routes/paths.h"
#include "routes/app.h"
#include "routes/fs.h"
#include "routes/provider.h"
#include "routes/routes.h"
#include "routes/storage.h"
#include "sandbox/fsops.h"
#include "sandbox/runner.h"
#include "sandbox/workspace.h"

/* Read a regular file whole, bounded by max_buffered_bytes. */
static int read_whole(struct http_req *r, const char *rel, char **data, size_t *len)
{
	size_t max = (size_t)r->app->cfg->max_buffered_bytes;
	uint64_t size = 0;
	int rc = sbx_fs_read_all(r->tenant->ws, rel, max, data, len, &size);
	if (rc == -EFBIG)
		return http_fail(r, rc, "file is %" PRIu64 " bytes or more, over the buffered limit of %zu",
				 size, max);
	return rc < 0 ? route_fail_path(r, rc, "read", rel) : 0;
}

static int local_read(struct http_req *r, const char *rel)
{
	char *data = NULL;
	size_t len = 0;
	int rc;
	if ((rc = read_whole(r, rel, &data, &len)) < 0)
		return rc;
	return route_fs_reply_text(r, data, len);
}

static int local_read_buffer(struct http_req *r, const char *rel)
{
	int rc;
	int fd = -1;
	uint64_t size = 0;
	if ((rc = sbx_fs_open_read(r->tenant->ws, rel, &fd, &size)) < 0)
		return route_fail_path(r, rc, "read", rel);
	return route_fs_reply_fd(r, fd, size, (uint64_t)r->app->cfg->max_buffered_bytes);
}

static int local_write(struct http_req *r, const char *rel)
{
	int rc;
	if ((rc = route_storage_guard(r)) < 0)
		return rc;
	rc = sbx_fs_write(r->tenant->ws, rel, r->body.ptr ? r->body.ptr : "", r->body.len, true);
	if (rc < 0)
		return route_fail_path(r, rc, "write", rel);
	return http_reply_json(
	    r, 200,
	    json_pack("{s:o, s:I}", "path", route_fs_path_json(rel), "size", (json_int_t)r->body.len));
}

static int local_stat(struct http_req *r, const char *rel)
{
	int rc;
	struct sbx_stat st;
	if ((rc = sbx_fs_stat(r->tenant->ws, rel, &st)) < 0)
		return route_fail_path(r, rc, "stat", rel);
	json_t *o = route_fs_stat_json(rel, &st);
	return http_reply_json(r, 200, o);
}

static int local_readdir(struct http_req *r, const char *rel, const char *after, int64_t limit, bool detail)
{
	int rc;
	struct sbx_dir_page page;
	rc = sbx_fs_readdir_page(r->tenant->ws, rel, after, (size_t)limit, detail, &page);
	if (rc == -EBADMSG)
		return http_fail(r, -EINVAL,
				 "after is not a cursor of this directory (use the next of the page before)");
	if (rc < 0)
		return route_fail_path(r, rc, "list", rel);
	json_t *o = route_fs_page_json(&page, detail);
	sbx_dir_page_clear(&page);
	return http_reply_json(r, 200, o);
}

static int local_exists(struct http_req *r, const char *rel)
{
	int rc;
	bool exists = false;
	if ((rc = sbx_fs_exists(r->tenant->ws, rel, &exists)) < 0)
		return route_fail_path(r, rc, "look up", rel);
	return http_reply_json(r, 200, json_pack("{s:b}", "exists", exists));
}

static int local_mkdir(struct http_req *r, const char *rel, bool recursive)
{
	int rc;
	if ((rc = route_storage_guard(r)) < 0)
		return rc;
	if ((rc = sbx_fs_mkdir(r->tenant->ws, rel, recursive)) < 0)
		return route_fail_path(r, rc, "create", rel);
	return http_reply_json(r, 201, json_pack("{s:o}", "path", route_fs_path_json(rel)));
}

static int local_rm(struct http_req *r, const char *rel, bool recursive, bool force)
{
	int rc;
	bool removed = false;
	if ((rc = sbx_fs_rm(r->tenant->ws, rel, recursive, force, &removed)) < 0)
		return route_fail_path(r, rc, "remove", rel);
	return http_reply_json(r, 200,
			       json_pack("{s:o, s:b}", "path", route_fs_path_json(rel), "removed", removed));
}

static int local_move(struct http_req *r, const char *rfrom, const char *rto, bool overwrite)
{
	int rc;
	if ((rc = sbx_fs_move(r->tenant->ws, rfrom, rto, overwrite)) < 0)
		return route_fail_path(r, rc, "move",
				       rc == -EEXIST || rc == -SBX_E_PARENT_MISSING ? rto : rfrom);
	return http_reply_json(r, 200, json_pack("{s:o}", "path", route_fs_path_json(rto)));
}

/* The cwd, once, before the command is accepted. Resolved beneath the
 * workspace fd: a symlink (made by a command) that leads out is an escape
 * (403 outside_workspace), not "not a directory"; a dangling one is
 * missing (404); one that stays inside is followed. The backend keeps only
 * its cheap defences (a relative path without dot components; an openat2
 * beneath the workspace just before the spawn). */
static int local_cwd(struct http_req *r, const char *rel, const char *asked)
{
	int fd = sbx_ws_openat(r->tenant->ws, rel, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
	if (fd < 0) {
		int rc = fd == -EXDEV || fd == -ENOTDIR || fd == -ELOOP ? fd : -ENOENT;
		return http_fail(r, rc, "cwd %s %s", asked ? asked : "(session)",
				 rc == -EXDEV ? "leaves the workspace"
					      : "is not a directory in the workspace");
	}
	close(fd);
	return 0;
}

static int local_submit(struct app *a, struct route_provider *p, const char *session, size_t session_len,
			const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx, uint64_t *job)
{
	(void)p;
	(void)session;
	(void)session_len;
	return sbx_runner_submit(a->runner, req, cb, ctx, job);
}

static void local_free(struct route_provider *p)
{
	(void)p; /* shared by every local tenant */
}

static const struct route_provider_ops local_ops = {
    .name = "local",
    .where = "on this server",
    .down = NULL,
    .caps = ROUTE_CAN_WORKSPACE | ROUTE_CAN_RUN_HERE,
    .check = NULL,
    .read = local_read,
    .read_buffer = local_read_buffer,
    .write = local_write,
    .stat = local_stat,
    .readdir = local_readdir,
    .exists = local_exists,
    .mkdir = local_mkdir,
    .rm = local_rm,
    .move = local_move,
    .cwd = local_cwd,
    .submit = local_submit,
    .free = local_free,
};

struct route_provider route_local_provider = {.ops = &local_ops};
