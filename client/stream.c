/* Streaming transfers (wire.md "Streaming transfers"): the bearer routes
 * GET /fs/read_stream and PUT /fs/write_stream, in constant memory (the
 * bytes go from libcurl's buffer to the caller's sink, and from the
 * caller's source to libcurl's), and POST /fs/transfers for tokens. */
#include "client/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A stream's connection counts as broken after this long without a byte
 * (the call's own deadline, when it has one, still applies). */
#define STREAM_IDLE_MS 60000

struct counted {
	sbxc_sink_fn sink;
	void *arg;
	uint64_t n;
};

static int count_sink(void *arg, const void *data, size_t len)
{
	struct counted *k = arg;
	int r = k->sink(k->arg, data, len);
	if (r == 0)
		k->n += len;
	return r;
}

int sbxc_read_file_stream(struct sbxc *h, const struct sbxc_call *c, const char *path, uint64_t offset,
			  sbxc_sink_fn sink, void *arg, uint64_t *total, struct sbxc_err *err)
{
	struct buf q;
	buf_init(&q, 8192);
	sbxc__q(&q, "path", path);
	char range[64];
	snprintf(range, sizeof range, "Range: bytes=%" PRIu64 "-", offset);
	const char *hdrs[] = {range, NULL};
	struct counted k = {sink, arg, 0};
	struct creq rq = {.method = "GET",
			  .path = "/fs/read_stream",
			  .query = &q,
			  .headers = offset ? hdrs : NULL,
			  .sink = count_sink,
			  .sink_arg = &k,
			  .idempotent = true,
			  .open_ended = true,
			  .idle_ms = STREAM_IDLE_MS,
			  .retry = true};
	struct cresp r;
	int rc = sbxc__do(h, c, &rq, &r, err);
	cresp_free(&r);
	buf_free(&q);
	if (total)
		*total = k.n;
	return rc;
}

static int fd_sink(void *arg, const void *data, size_t len)
{
	int fd = *(int *)arg;
	const char *p = data;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int sbxc_read_file_to_fd(struct sbxc *h, const struct sbxc_call *c, const char *path, int fd, uint64_t *total,
			 struct sbxc_err *err)
{
	int rc = sbxc_read_file_stream(h, c, path, 0, fd_sink, &fd, total, err);
	if (rc == -ECANCELED && !sbxc_cancel_fired(c ? c->cancel : NULL))
		rc = sbxc__fail(err, -EIO, "cannot write to the local file");
	return rc;
}

int sbxc_write_file_stream(struct sbxc *h, const struct sbxc_call *c, const char *path, int64_t size,
			   sbxc_source_fn source, void *arg, struct sbxc_upload *out, struct sbxc_err *err)
{
	struct buf q;
	buf_init(&q, 8192);
	sbxc__q(&q, "path", path);
	struct creq rq = {.method = "PUT",
			  .path = "/fs/write_stream",
			  .query = &q,
			  .content_type = "application/octet-stream",
			  .source = source,
			  .source_arg = arg,
			  .source_size = size < 0 ? -1 : size,
			  .open_ended = true,
			  .idle_ms = STREAM_IDLE_MS,
			  .retry = true};
	json_t *o = NULL;
	int rc = sbxc__json(h, c, &rq, &o, err);
	buf_free(&q);
	if (rc == 0 && out) {
		*out = (struct sbxc_upload){.size = (uint64_t)sbxc__jint(o, "size", 0)};
		sbxc__jcopy(o, "sha256", out->sha256, sizeof out->sha256);
		sbxc__jcopy(o, "path", out->path, sizeof out->path);
	}
	json_decref(o);
	return rc;
}

static ssize_t fd_source(void *arg, void *buf, size_t cap)
{
	int fd = *(int *)arg;
	for (;;) {
		ssize_t r = read(fd, buf, cap);
		if (r >= 0)
			return r;
		if (errno != EINTR)
			return -errno;
	}
}

int sbxc_write_file_from_fd(struct sbxc *h, const struct sbxc_call *c, const char *path, int fd,
			    struct sbxc_upload *out, struct sbxc_err *err)
{
	struct stat st;
	int64_t size = -1;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		off_t at = lseek(fd, 0, SEEK_CUR);
		size = at >= 0 && at <= st.st_size ? (int64_t)(st.st_size - at) : -1;
	}
	return sbxc_write_file_stream(h, c, path, size, fd_source, &fd, out, err);
}

int sbxc_transfer_mint(struct sbxc *h, const struct sbxc_call *c, const char *path, bool write, long ttl_s,
		       struct sbxc_transfer *out, struct sbxc_err *err)
{
	json_t *body =
	    path ? json_pack("{s:s, s:s}", "path", path, "direction", write ? "write" : "read") : NULL;
	if (body && ttl_s > 0)
		json_object_set_new(body, "ttl_s", json_integer(ttl_s));
	json_t *o = NULL;
	int rc = sbxc__post_json(h, c, "/fs/transfers", body, &o, err);
	if (rc == 0) {
		*out = (struct sbxc_transfer){0};
		sbxc__jcopy(o, "token", out->token, sizeof out->token);
		sbxc__jcopy(o, "url", out->url, sizeof out->url);
		sbxc__jcopy(o, "direction", out->direction, sizeof out->direction);
		sbxc__jcopy(o, "path", out->path, sizeof out->path);
		sbxc__jcopy(o, "expires_at", out->expires_at, sizeof out->expires_at);
	}
	json_decref(o);
	return rc;
}
