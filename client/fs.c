/* The file methods (wire.md "Filesystem routes"): read_file,
 * read_file_buffer, write_file, stat, readdir, exists, mkdir, rm, move. */
#include "client/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"

/* GET path?path=P into *data (NUL-terminated). */
static int get_bytes(struct sbxc *h, const struct sbxc_call *c, const char *route, const char *path,
		     const char *const *headers, char **data, size_t *len, struct sbxc_err *err)
{
	struct buf q;
	buf_init(&q, 8192);
	sbxc__q(&q, "path", path);
	struct creq rq = {.method = "GET",
			  .path = route,
			  .query = &q,
			  .headers = headers,
			  .idempotent = true,
			  .retry = true};
	struct cresp r;
	int rc = sbxc__do(h, c, &rq, &r, err);
	if (rc == 0) {
		buf_cstr(&r.body);
		*len = r.body.len;
		*data = buf_steal(&r.body, NULL);
	}
	cresp_free(&r);
	buf_free(&q);
	return rc;
}

int sbxc_read_file(struct sbxc *h, const struct sbxc_call *c, const char *path, char **data, size_t *len,
		   struct sbxc_err *err)
{
	return get_bytes(h, c, "/fs/read", path, NULL, data, len, err);
}

int sbxc_read_file_buffer(struct sbxc *h, const struct sbxc_call *c, const char *path, uint64_t offset,
			  uint64_t length, char **data, size_t *len, struct sbxc_err *err)
{
	char range[96] = "";
	if (length > 0)
		snprintf(range, sizeof range, "Range: bytes=%" PRIu64 "-%" PRIu64, offset,
			 offset + length - 1);
	else if (offset > 0)
		snprintf(range, sizeof range, "Range: bytes=%" PRIu64 "-", offset);
	const char *hdrs[] = {range, NULL};
	return get_bytes(h, c, "/fs/read_buffer", path, range[0] ? hdrs : NULL, data, len, err);
}

int sbxc__post_json(struct sbxc *h, const struct sbxc_call *c, const char *route, json_t *body, json_t **out,
		    struct sbxc_err *err)
{
	if (!body)
		return sbxc__fail(err, -EINVAL, "a required argument is NULL");
	char *text = sbxc__dump(body);
	json_decref(body);
	struct creq rq = {.method = "POST",
			  .path = route,
			  .body = text,
			  .body_len = strlen(text),
			  .content_type = "application/json",
			  .retry = true};
	json_t *o = NULL;
	int rc = sbxc__json(h, c, &rq, &o, err);
	free(text);
	if (out)
		*out = o;
	else
		json_decref(o);
	return rc;
}

int sbxc__get_json(struct sbxc *h, const struct sbxc_call *c, const char *route, struct buf *q, json_t **out,
		   struct sbxc_err *err)
{
	struct creq rq = {.method = "GET", .path = route, .query = q, .idempotent = true, .retry = true};
	return sbxc__json(h, c, &rq, out, err);
}

int sbxc_write_file(struct sbxc *h, const struct sbxc_call *c, const char *path, const void *data, size_t len,
		    uint64_t *size_out, struct sbxc_err *err)
{
	struct buf q;
	buf_init(&q, 8192);
	sbxc__q(&q, "path", path);
	/* Replacing a file with the same bytes twice is the same as once:
	 * idempotent. */
	struct creq rq = {.method = "PUT",
			  .path = "/fs/write",
			  .query = &q,
			  .body = data ? data : "",
			  .body_len = len,
			  .content_type = "application/octet-stream",
			  .idempotent = true,
			  .retry = true};
	json_t *o = NULL;
	int rc = sbxc__json(h, c, &rq, &o, err);
	if (rc == 0 && size_out)
		*size_out = (uint64_t)sbxc__jint(o, "size", 0);
	json_decref(o);
	buf_free(&q);
	return rc;
}

static unsigned mode_of(json_t *o, bool *has)
{
	const char *m = json_string_value(json_object_get(o, "mode"));
	char *end = NULL;
	unsigned long v = m ? strtoul(m, &end, 8) : 0;
	*has = m && end != m && *end == '\0';
	return *has ? (unsigned)v : 0;
}

/* o's "mtime" (RFC 3339, maybe with a fraction) for a stat and an entry
 * alike: seconds and milliseconds, both 0 and *has false when absent. */
static void mtime_of(json_t *o, bool *has, int64_t *sec, int64_t *ms)
{
	const char *v = json_string_value(json_object_get(o, "mtime"));
	int64_t t = sbxc__time(v);
	*has = t >= 0;
	*sec = t >= 0 ? t : 0;
	*ms = t >= 0 ? t * 1000 + sbxc__time_frac_ms(v) : 0;
}

int sbxc_stat(struct sbxc *h, const struct sbxc_call *c, const char *path, struct sbxc_stat *st,
	      struct sbxc_err *err)
{
	struct buf q;
	buf_init(&q, 8192);
	sbxc__q(&q, "path", path);
	json_t *o = NULL;
	int rc = sbxc__get_json(h, c, "/fs/stat", &q, &o, err);
	buf_free(&q);
	if (rc < 0)
		return rc;
	*st = (struct sbxc_stat){0};
	st->path = sbxc__jstrdup(o, "path");
	st->type = sbxc__type(json_string_value(json_object_get(o, "type")));
	st->is_symlink = sbxc__jbool(o, "is_symlink");
	st->has_size = json_is_integer(json_object_get(o, "size"));
	st->size = (uint64_t)sbxc__jint(o, "size", 0);
	mtime_of(o, &st->has_mtime, &st->mtime, &st->mtime_ms);
	st->mode = mode_of(o, &st->has_mode);
	json_decref(o);
	return 0;
}

void sbxc_stat_clear(struct sbxc_stat *st)
{
	if (st) {
		free(st->path);
		*st = (struct sbxc_stat){0};
	}
}

static void dirent_from(json_t *e, struct sbxc_dirent *d)
{
	*d = (struct sbxc_dirent){0};
	if (json_is_string(e)) {
		d->name = xstrdup(json_string_value(e));
		return;
	}
	d->name = sbxc__jstrdup(e, "name");
	if (!d->name)
		d->name = xstrdup("");
	d->type = sbxc__type(json_string_value(json_object_get(e, "type")));
	d->has_size = json_is_integer(json_object_get(e, "size"));
	d->size = (uint64_t)sbxc__jint(e, "size", 0);
	mtime_of(e, &d->has_mtime, &d->mtime, &d->mtime_ms);
}

int sbxc_readdir_page(struct sbxc *h, const struct sbxc_call *c, const char *path, bool detail,
		      const char *after, int limit, struct sbxc_dirent **out, size_t *n, char **next,
		      struct sbxc_err *err)
{
	struct buf q;
	buf_init(&q, 8192);
	sbxc__q(&q, "path", path);
	if (detail)
		sbxc__q(&q, "detail", "true");
	sbxc__q(&q, "after", after);
	if (limit > 0)
		sbxc__qi(&q, "limit", limit);
	json_t *o = NULL;
	int rc = sbxc__get_json(h, c, "/fs/readdir", &q, &o, err);
	buf_free(&q);
	if (rc < 0)
		return rc;
	json_t *arr = json_object_get(o, "entries");
	size_t k = json_array_size(arr);
	struct sbxc_dirent *v = xcalloc(k ? k : 1, sizeof *v);
	for (size_t i = 0; i < k; i++)
		dirent_from(json_array_get(arr, i), &v[i]);
	bool more = sbxc__jbool(o, "more");
	*next = more ? sbxc__jstrdup(o, "next") : NULL;
	json_decref(o);
	*out = v;
	*n = k;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct sbxc_dirent *)a)->name, ((const struct sbxc_dirent *)b)->name);
}

int sbxc_readdir(struct sbxc *h, const struct sbxc_call *c, const char *path, bool detail,
		 struct sbxc_dirent **out, size_t *n, struct sbxc_err *err)
{
	struct sbxc_dirent *all = NULL;
	size_t total = 0;
	char *cursor = NULL;
	int pages = 0;
	do {
		struct sbxc_dirent *v = NULL;
		size_t k = 0;
		char *next = NULL;
		int rc = sbxc_readdir_page(h, c, path, detail, cursor, 0, &v, &k, &next, err);
		free(cursor);
		if (rc < 0) {
			sbxc_dirents_free(all, total);
			return rc;
		}
		all = xrealloc(all, (total + k + 1) * sizeof *all);
		memcpy(all + total, v, k * sizeof *v);
		total += k;
		free(v); /* the names moved to all */
		cursor = next;
		pages++;
	} while (cursor);
	/* The whole directory sorted bytewise, as wire.md promises, whatever
	 * order the pages came in. */
	if (pages > 1)
		qsort(all, total, sizeof *all, by_name);
	*out = all;
	*n = total;
	return 0;
}

void sbxc_dirents_free(struct sbxc_dirent *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i].name);
	free(v);
}

int sbxc_exists(struct sbxc *h, const struct sbxc_call *c, const char *path, bool *yes, struct sbxc_err *err)
{
	struct buf q;
	buf_init(&q, 8192);
	sbxc__q(&q, "path", path);
	json_t *o = NULL;
	int rc = sbxc__get_json(h, c, "/fs/exists", &q, &o, err);
	buf_free(&q);
	if (rc == 0)
		*yes = sbxc__jbool(o, "exists");
	json_decref(o);
	return rc;
}

int sbxc_mkdir(struct sbxc *h, const struct sbxc_call *c, const char *path, bool recursive,
	       struct sbxc_err *err)
{
	return sbxc__post_json(h, c, "/fs/mkdir",
			       json_pack("{s:s, s:b}", "path", path, "recursive", recursive), NULL, err);
}

int sbxc_rm(struct sbxc *h, const struct sbxc_call *c, const char *path, bool recursive, bool force,
	    bool *removed, struct sbxc_err *err)
{
	json_t *o = NULL;
	int rc = sbxc__post_json(
	    h, c, "/fs/rm",
	    json_pack("{s:s, s:b, s:b}", "path", path, "recursive", recursive, "force", force), &o, err);
	if (rc == 0 && removed)
		*removed = sbxc__jbool(o, "removed");
	json_decref(o);
	return rc;
}

int sbxc_move(struct sbxc *h, const struct sbxc_call *c, const char *from, const char *to, bool overwrite,
	      struct sbxc_err *err)
{
	return sbxc__post_json(h, c, "/fs/move",
			       json_pack("{s:s, s:s, s:b}", "from", from, "to", to, "overwrite", overwrite),
			       NULL, err);
}
