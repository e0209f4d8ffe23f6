/* The buffered file routes of the SandboxApi: read_file, read_file_buffer,
 * write_file, stat, readdir, exists, mkdir, rm, and move. Paths are
 * resolved (routes/paths.c) and handed to the tenant's provider
 * (routes/provider.h), whose ops return data: this file parses, calls,
 * and renders every answer, for every provider alike. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/utf8.h"
#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/response.h"
#include "routes/paths.h"
#include "routes/app.h"
#include "http/fields.h"
#include "routes/fs.h"
#include "routes/provider.h"
#include "routes/routes.h"
#include "routes/storage.h"
#include "sandbox/fsops.h"
#include "sandbox/workspace.h"

json_t *route_fs_path_json(const char *rel)
{
	char wire[SBX_PATH_MAX + 16];
	sbx_path_wire(rel, wire, sizeof wire);
	return json_string(wire);
}

int route_fs_read(struct http_req *r)
{
	char rel[SBX_PATH_MAX];
	int rc = route_query_path(r, rel, sizeof rel);
	return rc < 0 ? rc : route_fs_read_at(r, rel);
}

static const struct route_provider_ops *ops_of(const struct http_req *r)
{
	return r->tenant->provider->ops;
}

int route_fs_read_at(struct http_req *r, const char *rel)
{
	struct route_call c;
	char *data = NULL;
	size_t len = 0;
	route_call_init(&c, r);
	int rc = ops_of(r)->read(&c, rel, 0, 0, &data, &len);
	if (rc < 0)
		return route_call_fail(r, &c, rc, "read", rel);
	if (!utf8_valid(data, len)) {
		free(data);
		return http_fail(r, -SBX_E_NOT_TEXT, "the file is not UTF-8 text");
	}
	return http_reply_text(r, 200, data, len);
}

int route_fs_parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *end)
{
	/* bytes=a-b | bytes=a- | bytes=-n ; one range only. */
	if (strncmp(h, "bytes=", 6) != 0)
		return -EINVAL;
	const char *p = h + 6;
	if (strchr(p, ','))
		return -EINVAL;
	char *e = NULL;
	if (*p == '-') {
		if (!isdigit((unsigned char)p[1]))
			return -EINVAL;
		errno = 0;
		unsigned long long n = strtoull(p + 1, &e, 10);
		if (errno || e == p + 1 || *e)
			return -EINVAL;
		if (n == 0 || size == 0)
			return -ERANGE;
		*start = n >= size ? 0 : size - n;
		*end = size - 1;
		return 0;
	}
	/* strtoull alone would take " 1", "+1" and "-1" (as a huge number). */
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	errno = 0;
	unsigned long long a = strtoull(p, &e, 10);
	if (errno || e == p || *e != '-')
		return -EINVAL;
	p = e + 1;
	unsigned long long b = size ? size - 1 : 0;
	if (*p) {
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		b = strtoull(p, &e, 10);
		if (errno || *e)
			return -EINVAL;
		if (b < a)
			return -EINVAL;
		if (size && b >= size)
			b = size - 1;
	}
	if (a >= size)
		return -ERANGE;
	*start = a;
	*end = b;
	return 0;
}

/* Answer with the bytes of an open file (whole, or the request's Range),
 * straight from the fd: the kernel copies, nothing is buffered here. Takes
 * fd. limit: the largest body allowed (0: none). */
int route_fs_range(struct http_req *r, int fd, uint64_t size, uint64_t *start, uint64_t *end, int *status)
{
	const char *range = http_header(r, "Range");
	*start = 0;
	*end = size ? size - 1 : 0;
	*status = 200;
	if (!range)
		return 0;
	int rc = route_fs_parse_range(range, size, start, end);
	if (rc == -ERANGE) {
		close(fd);
		return http_fail_range(r, size);
	}
	if (rc == 0)
		*status = 206;
	/* A malformed Range is ignored, as RFC 9110 allows: the whole file. */
	return 0;
}

void route_fs_range_headers(struct http_response *resp, int status, uint64_t start, uint64_t end,
			    uint64_t size)
{
	http_response_header(resp, "Content-Type", "application/octet-stream");
	http_response_header(resp, "Accept-Ranges", "bytes");
	if (status == 206) {
		char cr[80];
		snprintf(cr, sizeof cr, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, start, end, size);
		http_response_header(resp, "Content-Range", cr);
	}
}

int route_fs_reply_fd(struct http_req *r, int fd, uint64_t size, uint64_t limit)
{
	uint64_t start, end;
	int status;
	int rc = route_fs_range(r, fd, size, &start, &end, &status);
	if (rc < 0)
		return rc;
	uint64_t len = size ? end - start + 1 : 0;
	if (limit && len > limit) {
		close(fd);
		return http_fail(r, -EFBIG, "%" PRIu64 " bytes is over the buffered limit of %" PRIu64, len,
				 limit);
	}
	struct http_response *resp = http_response_fd(fd, start, len);
	if (!resp) {
		close(fd);
		return -ENOMEM;
	}
	route_fs_range_headers(resp, status, start, end, size);
	r->bytes_out += (int64_t)len;
	return http_reply_response(r, status, resp);
}

/* The request's Range against a file of size bytes elsewhere: [*start,
 * *start + *want) to fetch (want 0: the whole file) and the status. */
static int range_elsewhere(struct http_req *r, uint64_t size, uint64_t *start, uint64_t *want, int *status)
{
	uint64_t end = 0;
	int rc = route_fs_parse_range(http_header(r, "Range"), size, start, &end);
	if (rc == -ERANGE)
		return http_fail_range(r, size);
	*status = rc == 0 && size ? 206 : 200;
	*want = *status == 206 ? end - *start + 1 : 0;
	if (*status == 200)
		*start = 0; /* a malformed Range is ignored, as locally */
	return 0;
}

/* read_file_buffer from a provider without open: the size first (from
 * stat) when a Range is asked, then the bytes, copied once. */
static int read_buffer_elsewhere(struct http_req *r, struct route_call *c, const char *rel)
{
	uint64_t start = 0, want = 0, size = 0;
	int status = 200, rc;
	if (http_header(r, "Range")) {
		struct sbx_stat st;
		if ((rc = ops_of(r)->stat(c, rel, &st)) < 0)
			return route_call_fail(r, c, rc, "read", rel);
		if ((rc = range_elsewhere(r, size = st.size, &start, &want, &status)) < 0)
			return rc;
		if ((want ? want : size) > c->max_bytes)
			return http_fail(r, -EFBIG,
					 "%" PRIu64 " bytes is over the buffered limit of %" PRIu64,
					 want ? want : size, c->max_bytes);
	}
	char *data = NULL;
	size_t len = 0;
	if ((rc = ops_of(r)->read(c, rel, start, want, &data, &len)) < 0)
		return route_call_fail(r, c, rc, "read", rel);
	if (status == 206 && len != want) {
		free(data);
		r->retry_after_s = 1;
		return http_fail(r, -EAGAIN, "the file changed while it was read; read it again");
	}
	if (status == 200)
		size = len;
	struct http_response *resp = http_response_bytes(data, len);
	route_fs_range_headers(resp, status, start, len ? start + len - 1 : 0, size);
	r->bytes_out += (int64_t)len;
	return http_reply_response(r, status, resp);
}

int route_fs_read_buffer(struct http_req *r)
{
	char rel[SBX_PATH_MAX];
	int rc = route_query_path(r, rel, sizeof rel);
	if (rc < 0)
		return rc;
	struct route_call c;
	route_call_init(&c, r);
	if (!ops_of(r)->open)
		return read_buffer_elsewhere(r, &c, rel);
	int fd = -1;
	uint64_t size = 0;
	if ((rc = ops_of(r)->open(&c, rel, &fd, &size)) < 0)
		return route_call_fail(r, &c, rc, "read", rel);
	return route_fs_reply_fd(r, fd, size, c.max_bytes);
}

int route_fs_write(struct http_req *r)
{
	char rel[SBX_PATH_MAX];
	int rc = route_query_path(r, rel, sizeof rel);
	return rc < 0 ? rc : route_fs_write_at(r, rel);
}

/* Writes to a workspace on this server pass the disk's guard first. */
static int guard(struct http_req *r)
{
	return ops_of(r)->caps & ROUTE_CAN_WORKSPACE ? route_storage_guard(r) : 0;
}

int route_fs_write_at(struct http_req *r, const char *rel)
{
	struct route_call c;
	uint64_t size = 0;
	int rc;
	if ((rc = guard(r)) < 0)
		return rc;
	route_call_init(&c, r);
	if ((rc = ops_of(r)->write(&c, rel, r->body.ptr ? r->body.ptr : "", r->body.len, &size)) < 0)
		return route_call_fail(r, &c, rc, "write", rel);
	return http_reply_json(
	    r, 200, json_pack("{s:o, s:I}", "path", route_fs_path_json(rel), "size", (json_int_t)size));
}

static void put_mtime(json_t *o, const struct timespec *ts)
{
	char t[40];
	rfc3339_ms((int64_t)ts->tv_sec * 1000 + ts->tv_nsec / 1000000, t, sizeof t);
	json_object_set_new(o, "mtime", json_string(t));
}

json_t *route_fs_stat_json(const char *rel, const struct sbx_stat *st)
{
	json_t *o = json_pack("{s:o, s:s, s:b}", "path", route_fs_path_json(rel), "type",
			      sbx_ftype_name(st->type), "is_symlink", st->is_symlink);
	/* A link that dangles or leaves the workspace is described as itself,
	 * without fields of a target we will not look at. */
	if (!st->is_symlink || st->followed) {
		char mode[8];
		snprintf(mode, sizeof mode, "%04o", (unsigned)(st->mode & 07777));
		json_object_set_new(o, "size", json_integer((json_int_t)st->size));
		put_mtime(o, &st->mtime);
		json_object_set_new(o, "mode", json_string(mode));
	}
	return o;
}

int route_fs_stat(struct http_req *r)
{
	char rel[SBX_PATH_MAX];
	int rc = route_query_path(r, rel, sizeof rel);
	return rc < 0 ? rc : route_fs_stat_at(r, rel);
}

int route_fs_stat_at(struct http_req *r, const char *rel)
{
	struct route_call c;
	struct sbx_stat st;
	route_call_init(&c, r);
	int rc = ops_of(r)->stat(&c, rel, &st);
	if (rc < 0)
		return route_call_fail(r, &c, rc, "stat", rel);
	return http_reply_json(r, 200, route_fs_stat_json(rel, &st));
}

/* readdir pages (wire.md amended in openapi.yaml): limit entries after
 * the cursor `after`; `more` and `next` say whether and where to go on. */
#define READDIR_LIMIT_DEFAULT 1000
#define READDIR_LIMIT_MAX ROUTE_FS_READDIR_LIMIT_MAX

static json_t *entry_json(const struct sbx_dirent *d, bool detail)
{
	size_t len = 0;
	char *name = utf8_sanitize(d->name, strlen(d->name), &len);
	json_t *e;
	if (!detail) {
		e = json_stringn(name, len);
	} else {
		e = json_pack("{s:s%, s:s, s:I}", "name", name, len, "type", sbx_ftype_name(d->type), "size",
			      (json_int_t)d->size);
		put_mtime(e, &d->mtime);
	}
	free(name);
	return e;
}

json_t *route_fs_page_json(const struct sbx_dir_page *page, bool detail)
{
	json_t *entries = json_array();
	for (size_t i = 0; i < page->n; i++)
		json_array_append_new(entries, entry_json(&page->ents[i], detail));
	return json_pack("{s:o, s:b, s:o}", "entries", entries, "more", page->more, "next",
			 page->more ? json_string(page->next) : json_null());
}

int route_fs_readdir(struct http_req *r)
{
	char rel[SBX_PATH_MAX];
	int64_t limit = 0;
	int rc = route_query_path(r, rel, sizeof rel);
	if (rc < 0)
		return rc;
	if ((rc = http_query_int(r, "limit", READDIR_LIMIT_DEFAULT, 1, READDIR_LIMIT_MAX, &limit)) < 0)
		return rc;
	return route_fs_readdir_at(r, rel, http_query(r, "after"), limit, http_query_bool(r, "detail"));
}

int route_fs_readdir_at(struct http_req *r, const char *rel, const char *after, int64_t limit, bool detail)
{
	struct route_call c;
	struct sbx_dir_page page;
	route_call_init(&c, r);
	int rc = ops_of(r)->readdir(&c, rel, after, (size_t)limit, detail, &page);
	if (rc == -EBADMSG)
		return http_fail(r, -EINVAL,
				 "after is not a cursor of this directory (use the next of the page before)");
	if (rc < 0)
		return route_call_fail(r, &c, rc, "list", rel);
	json_t *o = route_fs_page_json(&page, detail);
	sbx_dir_page_clear(&page);
	return http_reply_json(r, 200, o);
}

int route_fs_exists(struct http_req *r)
{
	char rel[SBX_PATH_MAX];
	struct route_call c;
	bool exists = false;
	int rc = route_query_path(r, rel, sizeof rel);
	if (rc < 0)
		return rc;
	route_call_init(&c, r);
	if ((rc = ops_of(r)->exists(&c, rel, &exists)) < 0)
		return route_call_fail(r, &c, rc, "look up", rel);
	return http_reply_json(r, 200, json_pack("{s:b}", "exists", exists));
}

/* The "path" field of a JSON body, resolved. */
static int body_path(struct http_req *r, const char *p, size_t len, char *rel, size_t relsz)
{
	return route_path(r, p, len, rel, relsz);
}

int route_fs_mkdir(struct http_req *r)
{
	const char *path = NULL;
	size_t plen = 0;
	bool recursive = false;
	const struct http_field f[] = {
	    {"path", F_STRING, true, &path, &plen, 0, 0, NULL},
	    {"recursive", F_BOOL, false, &recursive, NULL, 0, 0, NULL},
	};
	int rc = http_fields_read(r, r->json, f, 2);
	if (rc < 0)
		return rc;
	char rel[SBX_PATH_MAX];
	if ((rc = body_path(r, path, plen, rel, sizeof rel)) < 0 || (rc = guard(r)) < 0)
		return rc;
	struct route_call c;
	route_call_init(&c, r);
	if ((rc = ops_of(r)->mkdir(&c, rel, recursive)) < 0)
		return route_call_fail(r, &c, rc, "create", rel);
	return http_reply_json(r, 201, json_pack("{s:o}", "path", route_fs_path_json(rel)));
}

int route_fs_rm(struct http_req *r)
{
	const char *path = NULL;
	size_t plen = 0;
	bool recursive = false, force = false;
	const struct http_field f[] = {
	    {"path", F_STRING, true, &path, &plen, 0, 0, NULL},
	    {"recursive", F_BOOL, false, &recursive, NULL, 0, 0, NULL},
	    {"force", F_BOOL, false, &force, NULL, 0, 0, NULL},
	};
	int rc = http_fields_read(r, r->json, f, 3);
	if (rc < 0)
		return rc;
	char rel[SBX_PATH_MAX];
	if ((rc = body_path(r, path, plen, rel, sizeof rel)) < 0)
		return rc;
	struct route_call c;
	bool removed = false;
	route_call_init(&c, r);
	if ((rc = ops_of(r)->rm(&c, rel, recursive, force, &removed)) < 0)
		return route_call_fail(r, &c, rc, "remove", rel);
	return http_reply_json(r, 200,
			       json_pack("{s:o, s:b}", "path", route_fs_path_json(rel), "removed", removed));
}

int route_fs_move(struct http_req *r)
{
	const char *from = NULL, *to = NULL;
	size_t flen = 0, tlen = 0;
	bool overwrite = false;
	const struct http_field f[] = {
	    {"from", F_STRING, true, &from, &flen, 0, 0, NULL},
	    {"to", F_STRING, true, &to, &tlen, 0, 0, NULL},
	    {"overwrite", F_BOOL, false, &overwrite, NULL, 0, 0, NULL},
	};
	int rc = http_fields_read(r, r->json, f, 3);
	if (rc < 0)
		return rc;
	char rfrom[SBX_PATH_MAX], rto[SBX_PATH_MAX];
	if ((rc = body_path(r, from, flen, rfrom, sizeof rfrom)) < 0)
		return rc;
	if ((rc = body_path(r, to, tlen, rto, sizeof rto)) < 0)
		return rc;
	char target[2 * SBX_PATH_MAX + 64], wf[SBX_PATH_MAX + 16], wt[SBX_PATH_MAX + 16];
	sbx_path_wire(rfrom, wf, sizeof wf);
	sbx_path_wire(rto, wt, sizeof wt);
	snprintf(target, sizeof target, "%s -> %s", wf, wt);
	http_set_target(r, target);
	struct route_call c;
	route_call_init(&c, r);
	if ((rc = ops_of(r)->move(&c, rfrom, rto, overwrite)) < 0)
		return route_call_fail(r, &c, rc, "move",
				       rc == -EEXIST || rc == -SBX_E_PARENT_MISSING ? rto : rfrom);
	return http_reply_json(r, 200, json_pack("{s:s}", "path", wt));
}
