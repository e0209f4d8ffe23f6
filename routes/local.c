/* The local provider (routes/provider.h): a tenant's files in its
 * workspace on this server, beneath the workspace fd (sandbox/fsops.c),
 * and its commands on this server's runner and backends (bwrap, local).
 * Its files are here: read_file_buffer answers with the file itself
 * (open), and writes pass the disk's guard in routes/fs.c first. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <unistd.h>

#include "common/errors.h"
#include "routes/app.h"
#include "routes/provider.h"
#include "sandbox/fsops.h"
#include "sandbox/runner.h"
#include "sandbox/workspace.h"

static struct sbx_workspace *ws(const struct route_call *c)
{
	return c->tenant->ws;
}

/* A regular file whole, bounded by max_buffered_bytes (never ranged:
 * open is there for that). */
static int local_read(struct route_call *c, const char *rel, uint64_t start, uint64_t want, char **data,
		      size_t *len)
{
	uint64_t size = 0;
	if (start || want)
		return -EINVAL;
	int rc = sbx_fs_read_all(ws(c), rel, (size_t)c->max_bytes, data, len, &size);
	if (rc == -EFBIG)
		return route_call_why(
		    c, rc, "file is %" PRIu64 " bytes or more, over the buffered limit of %" PRIu64, size,
		    c->max_bytes);
	return rc;
}

static int local_open(struct route_call *c, const char *rel, int *fd, uint64_t *size)
{
	return sbx_fs_open_read(ws(c), rel, fd, size);
}

static int local_write(struct route_call *c, const char *rel, const char *data, size_t len, uint64_t *size)
{
	*size = len;
	return sbx_fs_write(ws(c), rel, data, len, true);
}

static int local_stat(struct route_call *c, const char *rel, struct sbx_stat *st)
{
	return sbx_fs_stat(ws(c), rel, st);
}

static int local_readdir(struct route_call *c, const char *rel, const char *after, size_t limit, bool detail,
			 struct sbx_dir_page *page)
{
	return sbx_fs_readdir_page(ws(c), rel, after, limit, detail, page);
}

static int local_exists(struct route_call *c, const char *rel, bool *exists)
{
	return sbx_fs_exists(ws(c), rel, exists);
}

static int local_mkdir(struct route_call *c, const char *rel, bool recursive)
{
	return sbx_fs_mkdir(ws(c), rel, recursive);
}

static int local_rm(struct route_call *c, const char *rel, bool recursive, bool force, bool *removed)
{
	return sbx_fs_rm(ws(c), rel, recursive, force, removed);
}

static int local_move(struct route_call *c, const char *from, const char *to, bool overwrite)
{
	return sbx_fs_move(ws(c), from, to, overwrite);
}

/* The cwd, once, before the command is accepted. Resolved beneath the
 * workspace fd: a symlink (made by a command) that leads out is an escape
 * (403 outside_workspace), not "not a directory"; a dangling one is
 * missing (404); one that stays inside is followed. The backend keeps only
 * its cheap defences (a relative path without dot components; an openat2
 * beneath the workspace just before the spawn). */
static int local_cwd(struct route_call *c, const char *rel, const char *asked)
{
	int fd = sbx_ws_openat(ws(c), rel, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
	if (fd < 0) {
		int rc = fd == -EXDEV || fd == -ENOTDIR || fd == -ELOOP ? fd : -ENOENT;
		return route_call_why(c, rc, "cwd %s %s", asked ? asked : "(session)",
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
    .open = local_open,
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
