/* The pull reader and the push writer of the streaming routes: the same
 * request engine, driven step by step by the caller's reads and writes
 * instead of running to the end, with libcurl paused while the caller's
 * side is not ready (CURL_WRITEFUNC_PAUSE / CURL_READFUNC_PAUSE). */
#include "client/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"

#define READER_BUF (256u * 1024u)
#define STREAM_IDLE_MS 60000
#define STEP_MS 1000

struct sbxc_reader {
	struct sbxc__xfer *x;
	struct creq q;
	struct cresp resp;
	struct buf query;
	char range[64];
	const char *hdrs[2];
	char *buf;
	size_t cap, off, len; /* unread bytes: buf[off, len) */
	bool ended;
	int rc;
};

static int reader_sink(void *arg, const void *data, size_t n)
{
	struct sbxc_reader *r = arg;
	if (r->off > 0 && n > r->cap - r->len) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	if (n > r->cap - r->len) {
		if (r->len > 0)
			return SBXC__PAUSE;   /* delivered again once the caller has read */
		r->buf = xrealloc(r->buf, n); /* libcurl's pieces are smaller: never in practice */
		r->cap = n;
	}
	memcpy(r->buf + r->len, data, n);
	r->len += n;
	return 0;
}

/* Run the transfer until there are bytes to read, or its end
 * (r->ended). A paused transfer waits for nothing: the first step after
 * unpausing does not sleep. */
static void reader_step(struct sbxc_reader *r, struct sbxc_err *err)
{
	sbxc__xfer_unpause(r->x);
	for (int wait = 0; sbxc__xfer_step(r->x, wait); wait = STEP_MS)
		if (r->off < r->len)
			return;
	int rc = sbxc__xfer_outcome(r->x, err);
	if (rc == 1)
		return; /* a retry is under way */
	r->ended = true;
	r->rc = rc;
}

int sbxc_reader_open(struct sbxc *h, const struct sbxc_call *c, const char *path, uint64_t offset,
		     struct sbxc_reader **out, int64_t *size, struct sbxc_err *err)
{
	struct sbxc_reader *r = xcalloc(1, sizeof *r);
	buf_init(&r->query, 8192);
	sbxc__q(&r->query, "path", path);
	snprintf(r->range, sizeof r->range, "Range: bytes=%" PRIu64 "-", offset);
	r->hdrs[0] = offset ? r->range : NULL;
	r->q = (struct creq){.method = "GET",
			     .path = "/fs/read_stream",
			     .query = &r->query,
			     .headers = r->hdrs,
			     .sink = reader_sink,
			     .sink_arg = r,
			     .idempotent = true,
			     .open_ended = true,
			     .idle_ms = STREAM_IDLE_MS,
			     .retry = true};
	r->cap = READER_BUF;
	r->buf = xmalloc(r->cap);
	int rc = sbxc__xfer_open(h, c, &r->q, &r->resp, &r->x, err);
	/* Until the answer's head says 2xx, or the transfer ended. */
	while (rc == 0 && !r->ended && sbxc__xfer_status(r->x) / 100 != 2)
		reader_step(r, err);
	if (rc == 0 && r->ended)
		rc = r->rc;
	if (rc < 0) {
		sbxc_reader_close(&r);
		return rc;
	}
	if (size)
		*size = r->ended ? (int64_t)r->len : sbxc__xfer_length(r->x);
	*out = r;
	return 0;
}

ssize_t sbxc_reader_read(struct sbxc_reader *r, void *buf, size_t cap, struct sbxc_err *err)
{
	for (;;) {
		if (r->off < r->len) {
			size_t n = r->len - r->off < cap ? r->len - r->off : cap;
			memcpy(buf, r->buf + r->off, n);
			r->off += n;
			return (ssize_t)n;
		}
		if (r->ended)
			return r->rc;
		reader_step(r, err);
	}
}

void sbxc_reader_close(struct sbxc_reader **rp)
{
	struct sbxc_reader *r = rp ? *rp : NULL;
	if (!r)
		return;
	sbxc__xfer_close(&r->x);
	cresp_free(&r->resp);
	buf_free(&r->query);
	free(r->buf);
	free(r);
	*rp = NULL;
}

struct sbxc_writer {
	struct sbxc__xfer *x;
	struct creq q;
	struct cresp resp;
	struct buf query;
	const char *pending;
	size_t pending_len;
	bool eof, wanted, ended;
	int rc;
};

static ssize_t writer_source(void *arg, void *buf, size_t cap)
{
	struct sbxc_writer *w = arg;
	w->wanted = true;
	if (w->pending_len > 0) {
		size_t n = w->pending_len < cap ? w->pending_len : cap;
		memcpy(buf, w->pending, n);
		w->pending += n;
		w->pending_len -= n;
		return (ssize_t)n;
	}
	return w->eof ? 0 : SBXC__PAUSE;
}

/* Run the transfer until the server wants the body and has taken what
 * is pending (before the end of the body), or its end (w->ended). */
static void writer_step(struct sbxc_writer *w, struct sbxc_err *err)
{
	sbxc__xfer_unpause(w->x);
	for (int wait = 0; sbxc__xfer_step(w->x, wait); wait = STEP_MS)
		if (w->wanted && w->pending_len == 0 && !w->eof)
			return;
	int rc = sbxc__xfer_outcome(w->x, err);
	if (rc == 1) {
		w->wanted = false; /* a retry (of a refusal before the body) is under way */
		return;
	}
	w->ended = true;
	w->rc = rc;
}

int sbxc_writer_open(struct sbxc *h, const struct sbxc_call *c, const char *path, int64_t size,
		     struct sbxc_writer **out, struct sbxc_err *err)
{
	struct sbxc_writer *w = xcalloc(1, sizeof *w);
	buf_init(&w->query, 8192);
	sbxc__q(&w->query, "path", path);
	w->q = (struct creq){.method = "PUT",
			     .path = "/fs/write_stream",
			     .query = &w->query,
			     .content_type = "application/octet-stream",
			     .source = writer_source,
			     .source_arg = w,
			     .source_size = size < 0 ? -1 : size,
			     .open_ended = true,
			     .idle_ms = STREAM_IDLE_MS,
			     .retry = true};
	int rc = sbxc__xfer_open(h, c, &w->q, &w->resp, &w->x, err);
	/* Until the server asks for the body (100 Continue), or answers. */
	while (rc == 0 && !w->ended && !w->wanted)
		writer_step(w, err);
	if (rc == 0 && w->ended)
		rc = w->rc; /* refused; or an empty body already answered */
	if (rc < 0) {
		sbxc_writer_close(&w);
		return rc;
	}
	*out = w;
	return 0;
}

/* The writer ended before its body did: the server's refusal. */
static int early_end(struct sbxc_writer *w, struct sbxc_err *err)
{
	return w->rc < 0 ? w->rc : sbxc__fail(err, -EPROTO, "the server answered before the end of the body");
}

int sbxc_writer_write(struct sbxc_writer *w, const void *data, size_t len, struct sbxc_err *err)
{
	if (w->eof)
		return sbxc__fail(err, -EINVAL, "the writer was finished");
	if (len == 0)
		return 0;
	w->pending = data;
	w->pending_len = len;
	while (w->pending_len > 0 && !w->ended)
		writer_step(w, err);
	w->pending = NULL;
	if (w->ended) {
		w->pending_len = 0;
		return early_end(w, err);
	}
	return 0;
}

int sbxc_writer_finish(struct sbxc_writer *w, struct sbxc_upload *out, struct sbxc_err *err)
{
	if (w->ended && w->rc == 0 && !w->eof && w->q.source_size != 0)
		return early_end(w, err); /* answered 2xx before the body was all sent */
	w->eof = true;
	while (!w->ended)
		writer_step(w, err);
	if (w->rc < 0)
		return w->rc;
	json_t *o = json_loadb(w->resp.body.ptr ? w->resp.body.ptr : "", w->resp.body.len, 0, NULL);
	if (!o)
		return sbxc__fail(err, -EPROTO, "the answer of the upload is not JSON");
	if (out) {
		*out = (struct sbxc_upload){.size = (uint64_t)sbxc__jint(o, "size", 0)};
		sbxc__jcopy(o, "sha256", out->sha256, sizeof out->sha256);
		sbxc__jcopy(o, "path", out->path, sizeof out->path);
	}
	json_decref(o);
	return 0;
}

void sbxc_writer_close(struct sbxc_writer **wp)
{
	struct sbxc_writer *w = wp ? *wp : NULL;
	if (!w)
		return;
	sbxc__xfer_close(&w->x);
	cresp_free(&w->resp);
	buf_free(&w->query);
	free(w);
	*wp = NULL;
}
