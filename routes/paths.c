/* Where a request's paths lead: its session (found or made, with its
 * directory: the one visible step that creates a session), a wire path
 * resolved against it, and the one table of file errors' answers. Below
 * every route family that takes a path. */
#include "routes/paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/nowait.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/errors.h"
#include "http/req.h"
#include "routes/app.h"
#include "routes/storage.h"
#include "sandbox/fsops.h"
#include "sandbox/workspace.h"
#include "store/store.h"

static void segment_fn(const char *key, size_t len, unsigned salt, char *out)
{
	sbx_session_segment(key, len, salt, out);
}

int route_session(struct http_req *r)
{
	if (r->session_rel)
		return 0;
	char segment[64];
	bool created = false;
	int rc = 0;
	if (!nowait_on())
		rc = store_session_get_or_create(r->app->store, r->tenant->name, r->session_key,
						 r->session_key_len, segment_fn, now_ms(), segment, &created);
	else if (!store_session_cached(r->app->store, r->tenant->name, r->session_key, r->session_key_len,
				       now_ms(), segment)) {
		nowait_blocked(); /* a lookup or a write in SQLite may wait */
		rc = -EAGAIN;
	}
	if (rc < 0)
		return http_fail(r, rc, "cannot record the session");
	rc = sbx_session_dir_ensure(r->tenant->ws, segment);
	if (rc == -ENOSPC || rc == -EDQUOT)
		return route_storage_fail(r, rc, "the session's directory");
	if (rc < 0)
		return http_fail(r, rc, "cannot create the session directory: %s", sbx_strerror(rc));
	r->session_rel = xasprintf("sessions/%s", segment);
	return 0;
}

int route_path(struct http_req *r, const char *wire, size_t len, char *out, size_t outsz)
{
	int rc = route_session(r);
	if (rc < 0)
		return rc;
	rc = sbx_path_normalize(wire, len, r->session_rel, out, outsz);
	if (rc < 0)
		http_set_target_raw(r, wire, len);
	if (rc == -EXDEV)
		return http_fail(r, rc, "path leaves the workspace");
	if (rc < 0)
		return http_fail(r, rc, "bad path: empty, NUL byte, or a component or the whole too long");
	char wirebuf[SBX_PATH_MAX + 16];
	sbx_path_wire(out, wirebuf, sizeof wirebuf);
	http_set_target(r, wirebuf);
	return 0;
}

int route_query_path(struct http_req *r, char *rel, size_t relsz)
{
	size_t n = 0;
	const char *p = http_query_n(r, "path", &n);
	if (!p)
		return http_fail(r, -EINVAL, "query parameter path is required");
	return route_path(r, p, n, rel, relsz);
}

/* The answers of file errors that name the path: before, the path as
 * the wire spells it, after. */
static const struct {
	int rc;
	const char *before, *after;
} path_errors[] = {
    {-ENOENT, "no such file or directory: ", ""},
    {-SBX_E_PARENT_MISSING, "parent directory missing: ", ""},
    {-EXDEV, "", " leaves the workspace (through a symlink or ..)"},
    {-EISDIR, "is a directory: ", ""},
    {-ENOTDIR, "not a directory (or a parent is not): ", ""},
    {-EEXIST, "already exists: ", ""},
    {-ENOTEMPTY, "directory not empty: ", " (use recursive)"},
    {-SBX_E_SPECIAL, "not a regular file (FIFO, socket or device): ", ""},
    {-ELOOP, "too many levels of symbolic links: ", ""},
    {-EFBIG, "file too large for ", ""},
};

int route_fail_path(struct http_req *r, int rc, const char *what, const char *rel)
{
	char wire[SBX_PATH_MAX + 16];
	sbx_path_wire(rel, wire, sizeof wire);
	for (size_t i = 0; i < sizeof path_errors / sizeof path_errors[0]; i++)
		if (path_errors[i].rc == rc)
			return http_fail(r, rc, "%s%s%s", path_errors[i].before, wire, path_errors[i].after);
	if (rc == -SBX_E_ROOT)
		return http_fail(r, rc, "cannot %s the workspace root or a session's root directory", what);
	if (rc == -EINVAL)
		return http_fail(r, rc, "cannot %s %s: not a valid path", what, wire);
	if (rc == -ENOSPC || rc == -EDQUOT)
		return route_storage_fail(r, rc, wire);
	return http_fail(r, rc, "cannot %s %s: %s", what, wire, sbx_strerror(rc));
}
