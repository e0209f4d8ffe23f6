/* Streaming transfers (wire.md "Streaming transfers"): single-use tokens
 * minted by POST /fs/transfers and spent by GET / PUT /fs/stream/{token},
 * and the bearer shortcuts GET /fs/read_stream and PUT /fs/write_stream,
 * which mint and claim a token internally so that every transfer has the
 * same store row whichever door it came through.
 *
 * Downloads answer with a content reader that preads 256 KiB blocks from
 * the open file into libmicrohttpd's buffer: memory is constant whatever
 * the size. Where the work happens (http/pool.h): the token's lookup on
 * the event thread (a begin hook: it names the tenant whose pool queue
 * the rest waits in), the file's opening and checks on a pool worker, and
 * the block reads on the event thread, in the content reader: a pread of
 * the page cache costs less than a hand-over, and a pool round trip per
 * block would double the work of every download. Uploads likewise: the
 * temp file is made in the begin hook and written as the body arrives on
 * the event thread; the commit (fsync, rename, fsync) runs on the pool.
 * Uploads go through sbx_upload_* into a temp file beside the target,
 * hashed on the way, and appear by rename only when the body ended
 * cleanly; anything else removes the temp file and leaves the old file.
 *
 * A token is spent (claimed) only once everything that can be refused up
 * front has been checked (file, range, tenant slot, parent directory): a
 * 404, 416 or 429 leaves it usable. */
#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/response.h"
#include "routes/paths.h"
#include "routes/app.h"
#include "routes/admit.h"
#include "routes/tenant_cache.h"
#include "routes/provider.h"
#include "http/fields.h"
#include "routes/fs.h"
#include "routes/routes.h"
#include "routes/storage.h"
#include "http/metrics.h"
#include "sandbox/fsops.h"
#include "sandbox/workspace.h"
#include "store/store.h"

#define TOKEN_BYTES 32
#define TOKEN_CHARS 43				      /* base64url of 32 bytes, no padding */
#define TOKEN_MAX (SBX_NODE_ID_MAX + 1 + TOKEN_CHARS) /* "<node>_" and those */
#define DL_BLOCK (256u * 1024u) /* content-reader block: beat sendfile on loopback (performance.md) */
#define RETRY_AFTER_BUSY_S 1
#define UPLOAD_GUARD_BYTES (8u << 20) /* how often an upload rechecks the store's reserve */
/* An upload's body arrives in pieces of half the connection's memory
 * (connection-memory-bytes): gathered to this before each write(2). */
#define UPLOAD_GATHER_BYTES (128u << 10)

static const char b64url_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* ---- tokens ---- */

static void b64url_encode(const unsigned char *in, size_t n, char *out)
{
	size_t o = 0, i = 0;
	for (; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
		out[o++] = b64url_chars[(v >> 18) & 63];
		out[o++] = b64url_chars[(v >> 12) & 63];
		out[o++] = b64url_chars[(v >> 6) & 63];
		out[o++] = b64url_chars[v & 63];
	}
	if (n - i == 1) {
		uint32_t v = (uint32_t)in[i] << 16;
		out[o++] = b64url_chars[(v >> 18) & 63];
		out[o++] = b64url_chars[(v >> 12) & 63];
	} else if (n - i == 2) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
		out[o++] = b64url_chars[(v >> 18) & 63];
		out[o++] = b64url_chars[(v >> 12) & 63];
		out[o++] = b64url_chars[(v >> 6) & 63];
	}
	out[o] = '\0';
}

/* "<node>_" and 43 base64url characters (README "Running many nodes":
 * a balancer routes /fs/stream/{token} by the node); tokens minted
 * before node ids existed have the 43 characters alone. */
static bool token_well_formed(const char *t)
{
	char node[SBX_NODE_ID_MAX + 1];
	if (t && sbx_node_of(t, node, sizeof node))
		t += strlen(node) + 1;
	if (!t || strlen(t) != TOKEN_CHARS)
		return false;
	for (size_t i = 0; i < TOKEN_CHARS; i++)
		if (!strchr(b64url_chars, t[i]) || t[i] == '\0')
			return false;
	return true;
}

/* The store keys a transfer by SHA-256 of the token text; the token itself
 * is never stored. */
static void token_hash(const char *tok, unsigned char out[32])
{
	unsigned int n = 32;
	EVP_Digest(tok, strlen(tok), out, &n, EVP_sha256(), NULL);
}

static int token_new(const char *node, char tok[TOKEN_MAX + 1], unsigned char hash[32])
{
	unsigned char rnd[TOKEN_BYTES];
	int rc = auth_random(rnd, sizeof rnd);
	if (rc < 0)
		return rc;
	int o = snprintf(tok, TOKEN_MAX + 1, "%s_", node);
	b64url_encode(rnd, sizeof rnd, tok + o);
	token_hash(tok, hash);
	return 0;
}

static void hex(const unsigned char *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", p[i]);
}

/* ---- shared ---- */

static int token_refused(struct http_req *r, int rc)
{
	switch (rc) {
	case -ENOENT:
		return http_fail(r, rc, "unknown transfer token");
	case -SBX_E_TOKEN_USED:
		return http_fail(r, rc, "this transfer token has been used");
	case -SBX_E_TOKEN_EXPIRED:
		return http_fail(r, rc, "this transfer token has expired");
	default:
		return http_fail(r, rc, "cannot read the transfer record");
	}
}

/* One transfer as a request works on it. */
struct xfer {
	unsigned char hash[32];
	bool slot;     /* holds one of the tenant's transfer slots */
	bool finished; /* the store row has its final state */
};

static void xfer_finish(struct http_req *r, struct xfer *x, bool ok, int64_t bytes, const char *sha256,
			const char *why)
{
	if (x->finished)
		return;
	x->finished = true;
	if (store_transfer_finish(r->app->store, x->hash, ok ? "done" : "failed", bytes, sha256, why,
				  now_ms()) < 0)
		http_metrics_store_error(r->app->metrics);
}

static void xfer_release(struct http_req *r, struct xfer *x)
{
	if (x->slot && r->tenant)
		route_tenant_release_transfer(r->app, r->tenant);
	x->slot = false;
}

static int acquire_slot(struct http_req *r, struct xfer *x)
{
	int rc = route_tenant_acquire_transfer(r->app, r->tenant);
	if (rc == -SBX_E_BACKEND)
		return http_fail(r, rc,
				 "the tenant's stored policy cannot be applied (the operator must fix it)");
	if (rc < 0) {
		r->retry_after_s = RETRY_AFTER_BUSY_S;
		return http_fail(r, -SBX_E_TOO_MANY,
				 "tenant %s has as many transfers running as its policy allows",
				 r->tenant->name);
	}
	x->slot = true;
	return 0;
}

/* Spend the token: an existing one (have_hash), or, for the bearer
 * shortcuts, a fresh one minted and claimed at once so the store holds the
 * same row as for a minted token. */
static int claim(struct http_req *r, struct xfer *x, bool have_hash, const char *rel, const char *direction)
{
	int64_t now = now_ms();
	int rc;
	if (!have_hash) {
		char tok[TOKEN_MAX + 1];
		if ((rc = token_new(r->app->cfg->node_id, tok, x->hash)) < 0)
			return http_fail(r, rc, "no randomness for a transfer token");
		struct store_transfer t = {.session = r->session_key,
					   .session_len = r->session_key_len,
					   .path = (char *)rel,
					   .created_at = now,
					   .expires_at = now + r->app->cfg->transfer_ttl_default_s * 1000};
		memcpy(t.token_hash, x->hash, sizeof t.token_hash);
		snprintf(t.tenant, sizeof t.tenant, "%s", r->tenant->name);
		snprintf(t.direction, sizeof t.direction, "%s", direction);
		if ((rc = store_transfer_mint(r->app->store, &t)) < 0)
			return http_fail(r, rc, "cannot record the transfer");
	}
	rc = store_transfer_claim(r->app->store, x->hash, now, NULL);
	return rc < 0 ? token_refused(r, rc) : 0;
}

/* /fs/stream/{token}: look the token up without spending it, and take on
 * its tenant (workspace, audit row) and session (audit row). The request
 * stays unauthenticated: nothing else is granted by this. */
static int token_open(struct http_req *r, const char *direction, struct store_transfer *t, struct xfer *x)
{
	const char *tok = r->params[0];
	if (!token_well_formed(tok))
		return http_fail(r, -ENOENT, "unknown transfer token");
	token_hash(tok, x->hash);
	int rc = store_transfer_get(r->app->store, x->hash, t);
	if (rc < 0)
		return token_refused(r, rc);

	snprintf(r->claims.tenant, sizeof r->claims.tenant, "%s", t->tenant);
	r->audit_tenant = true;
	free(r->session_key);
	r->session_key = xmalloc(t->session_len + 1);
	memcpy(r->session_key, t->session, t->session_len);
	r->session_key[t->session_len] = '\0';
	r->session_key_len = t->session_len;
	char wire[SBX_PATH_MAX + 16];
	sbx_path_wire(t->path, wire, sizeof wire);
	http_set_target(r, wire);

	if (strcmp(t->direction, direction) != 0)
		return http_fail(r, -SBX_E_CONFLICT, "this token is for %s: use %s /fs/stream/{token}",
				 strcmp(t->direction, "write") == 0 ? "uploads" : "downloads",
				 strcmp(t->direction, "write") == 0 ? "PUT" : "GET");
	if (strcmp(t->state, "minted") != 0 || t->expires_at <= now_ms()) {
		/* The claim says which (used or expired) and records an expiry. */
		rc = store_transfer_claim(r->app->store, x->hash, now_ms(), NULL);
		if (rc == 0) { /* cannot happen: a row never goes back to minted */
			xfer_finish(r, x, false, 0, NULL, "claimed by a refused request");
			rc = -SBX_E_TOKEN_USED;
		}
		return token_refused(r, rc);
	}
	rc = route_tenant_get(r->app, t->tenant, &r->tenant);
	if (rc < 0)
		return rc == -ENOENT ? http_fail(r, rc, "unknown transfer token")
				     : http_fail(r, rc, "cannot load the tenant");
	/* Minted while the tenant was local: a remote tenant is never served
	 * from this server's disk. */
	if ((rc = route_provider_refuse(r, "/fs/stream/{token}")) < 0)
		return rc;
	return 0;
}

/* Why a transfer's connection ended before its end. */
static const char *closed_why(const struct http_req *r)
{
	return r->app->stopping ? "the server stopped" : "the client left";
}

/* ---- downloads ---- */

/* Shared by the request (on_free) and the response (its free callback):
 * libmicrohttpd destroys the response before or after the completion
 * callback depending on how the connection ended. */
struct dl {
	int refs;
	int fd;
	uint64_t start, len;
	uint64_t sent; /* read from the file and handed to the connection */
	int err;       /* positive errno of a failed read; EIO: the file shrank */
	struct xfer x;
};

static void dl_unref(struct dl *d)
{
	if (__atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	if (d->fd >= 0)
		close(d->fd);
	free(d);
}

static ssize_t dl_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct dl *d = cls;
	if (pos >= d->len)
		return HTTP_STREAM_END;
	size_t want = d->len - pos < max ? (size_t)(d->len - pos) : max;
	ssize_t n;
	do
		n = pread(d->fd, buf, want, (off_t)(d->start + pos));
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		/* A promised length cannot be met: end with an error, so the
		 * client sees a truncated body rather than a short "success". */
		d->err = n < 0 ? errno : EIO;
		return HTTP_STREAM_ERROR;
	}
	d->sent = pos + (uint64_t)n;
	return n;
}

static void dl_resp_free(void *cls)
{
	dl_unref(cls);
}

static void dl_req_free(struct http_req *r)
{
	struct dl *d = r->hstate;
	r->hstate = NULL;
	bool ok = r->completed_ok && !d->err && d->sent == d->len;
	char why[160] = "";
	if (d->err)
		snprintf(why, sizeof why, "read error after %" PRIu64 " of %" PRIu64 " bytes: %s", d->sent,
			 d->len, d->err == EIO ? "the file shrank" : strerror(d->err));
	else if (!ok)
		snprintf(why, sizeof why, "%s after %" PRIu64 " of %" PRIu64 " bytes", closed_why(r), d->sent,
			 d->len);
	xfer_finish(r, &d->x, ok, (int64_t)d->sent, NULL, ok ? NULL : why);
	xfer_release(r, &d->x);
	r->bytes_out = (int64_t)d->sent;
	http_metrics_bytes_streamed(r->app->metrics, 0, (int64_t)d->sent);
	dl_unref(d);
}

/* Answer a download of rel: x->hash names a minted token when have_hash,
 * else one is minted. HEAD answers the headers and spends nothing. */
static int download(struct http_req *r, const char *rel, struct xfer *x, bool have_hash)
{
	int fd = -1;
	uint64_t size = 0;
	int rc = sbx_fs_open_read(r->tenant->ws, rel, &fd, &size);
	if (rc < 0)
		return route_fail_path(r, rc, "read", rel);

	uint64_t start, end;
	int status;
	if ((rc = route_fs_range(r, fd, size, &start, &end, &status)) < 0)
		return rc;
	uint64_t len = size ? end - start + 1 : 0;

	if (strcmp(r->method, "HEAD") == 0) {
		/* libmicrohttpd sends the headers (Content-Length included) and
		 * no body; the fd is the response's. */
		struct http_response *resp = http_response_fd(fd, start, len);
		if (!resp) {
			close(fd);
			return http_fail(r, -ENOMEM, "cannot build the response");
		}
		route_fs_range_headers(resp, status, start, end, size);
		return http_reply_response(r, status, resp);
	}

	if ((rc = acquire_slot(r, x)) < 0 || (rc = claim(r, x, have_hash, rel, "read")) < 0) {
		xfer_release(r, x);
		close(fd);
		return rc;
	}
	struct dl *d = xcalloc(1, sizeof *d);
	d->refs = 1;
	d->fd = fd;
	d->start = start;
	d->len = len;
	d->x = *x;
	r->hstate = d;
	r->on_free = dl_req_free;
	struct http_response *resp = http_response_stream(len, DL_BLOCK, dl_read, d, dl_resp_free);
	if (!resp) {
		d->err = ENOMEM;
		return http_fail(r, -ENOMEM, "cannot build the response");
	}
	__atomic_add_fetch(&d->refs, 1, __ATOMIC_ACQ_REL);
	route_fs_range_headers(resp, status, start, end, size);
	return http_reply_response(r, status, resp);
}

/* What the begin hook of GET /fs/stream/{token} found, for its handler. */
struct get_stash {
	struct store_transfer t;
	struct xfer x;
};

static void stash_free(struct get_stash *g)
{
	store_transfer_clear(&g->t);
	free(g);
}

static void stash_req_free(struct http_req *r)
{
	stash_free(r->hstate);
	r->hstate = NULL;
}

/* Begin hook of GET /fs/stream/{token}, on the event thread: the token
 * names the tenant, and so the pool queue its download opens under. */
int route_transfer_get_begin(struct http_req *r)
{
	struct get_stash *g = xcalloc(1, sizeof *g);
	r->hstate = g;
	r->on_free = stash_req_free;
	return token_open(r, "read", &g->t, &g->x);
}

/* GET /fs/stream/{token}, on the pool. */
int route_transfer_get(struct http_req *r)
{
	struct get_stash *g = r->hstate;
	r->hstate = NULL;
	r->on_free = NULL;
	int rc = download(r, g->t.path, &g->x, true);
	stash_free(g);
	return rc;
}

/* The bearer shortcuts (path=P): a download or an upload of P of the
 * query, with no minted token behind it (claim mints one at once). */
static int by_query_path(struct http_req *r,
			 int (*fn)(struct http_req *r, const char *rel, struct xfer *x, bool have_hash))
{
	char rel[SBX_PATH_MAX];
	struct xfer x = {0};
	int rc = route_query_path(r, rel, sizeof rel);
	if (rc < 0)
		return rc;
	return fn(r, rel, &x, false);
}

/* GET /fs/read_stream?path=P */
int route_fs_read_stream(struct http_req *r)
{
	return by_query_path(r, download);
}

/* ---- uploads ---- */

struct ul {
	struct sbx_upload *up; /* NULL once committed or aborted */
	EVP_MD_CTX *md;
	uint64_t n, max;
	uint64_t guarded; /* n when the store's reserve was last checked */
	char *rel;
	char why[200]; /* why it failed, for the store */
	struct xfer x;
};

static void ul_fail(struct http_req *r, struct ul *u)
{
	sbx_upload_abort(&u->up);
	xfer_finish(r, &u->x, false, (int64_t)u->n, NULL, u->why);
}

static int ul_write(struct http_req *r, const char *data, size_t len)
{
	struct ul *u = r->hstate;
	if (!u->up)
		return 0;
	if (len > u->max - u->n) {
		snprintf(u->why, sizeof u->why, "body over max_upload_bytes (%" PRIu64 ")", u->max);
		ul_fail(r, u);
		return http_fail(r, -EFBIG, "the body is over the upload limit of %" PRIu64 " bytes", u->max);
	}
	/* The reserve is checked again as the body arrives: the server writes
	 * as root, which ext4 lets into its root-reserved blocks. */
	int rc = 0;
	if (u->n - u->guarded >= UPLOAD_GUARD_BYTES) {
		u->guarded = u->n;
		if ((rc = route_storage_guard(r)) < 0) {
			/* the reserve, or the tenant's store budget: as the 507 says */
			snprintf(u->why, sizeof u->why, "refused after %" PRIu64 " bytes: %s", u->n,
				 r->error_msg ? r->error_msg : "no room on the disk");
			ul_fail(r, u);
			return rc;
		}
	}
	rc = sbx_upload_write(u->up, data, len);
	if (rc < 0) {
		snprintf(u->why, sizeof u->why, "write failed after %" PRIu64 " bytes: %s", u->n,
			 sbx_strerror(rc));
		ul_fail(r, u);
		return route_fail_path(r, rc, "write", u->rel);
	}
	EVP_DigestUpdate(u->md, data, len);
	u->n += len;
	return 0;
}

static void ul_free(struct http_req *r)
{
	struct ul *u = r->hstate;
	r->hstate = NULL;
	if (u->up) {
		snprintf(u->why, sizeof u->why, "%s after %" PRIu64 " bytes; nothing was written",
			 closed_why(r), u->n);
		ul_fail(r, u);
	}
	/* A refusal between the claim and the first byte. */
	xfer_finish(r, &u->x, false, (int64_t)u->n, NULL, *u->why ? u->why : "refused");
	xfer_release(r, &u->x);
	http_metrics_bytes_streamed(r->app->metrics, (int64_t)u->n, 0);
	EVP_MD_CTX_free(u->md);
	free(u->rel);
	free(u);
}

/* Begin hook of both upload routes: everything that can be refused is
 * checked before the token is spent; then the temp file waits for the body. */
static int upload_begin(struct http_req *r, const char *rel, struct xfer *x, bool have_hash)
{
	uint64_t max = (uint64_t)r->app->cfg->max_upload_bytes;
	const char *cl = http_header(r, "Content-Length");
	if (cl) {
		char *end = NULL;
		errno = 0;
		unsigned long long n = strtoull(cl, &end, 10);
		if (!errno && end != cl && !*end && n > max)
			return http_fail(r, -EFBIG,
					 "Content-Length %llu is over the upload limit of %" PRIu64 " bytes",
					 n, max);
	}
	struct sbx_upload *up = NULL;
	int rc = route_storage_guard(r);
	if (rc < 0)
		return rc;
	if ((rc = acquire_slot(r, x)) < 0)
		return rc;
	if ((rc = sbx_upload_begin(&up, r->tenant->ws, rel, false)) < 0) {
		xfer_release(r, x);
		return route_fail_path(r, rc, "write", rel);
	}
	sbx_upload_gather(up, UPLOAD_GATHER_BYTES);
	if ((rc = claim(r, x, have_hash, rel, "write")) < 0) {
		sbx_upload_abort(&up);
		xfer_release(r, x);
		return rc;
	}
	struct ul *u = xcalloc(1, sizeof *u);
	u->up = up;
	u->max = max;
	u->rel = xstrdup(rel);
	u->x = *x;
	u->md = EVP_MD_CTX_new();
	if (!u->md)
		abort(); /* out of memory, as xmalloc would */
	EVP_DigestInit_ex(u->md, EVP_sha256(), NULL);
	r->hstate = u;
	r->on_upload = ul_write;
	r->on_free = ul_free;
	return 0;
}

/* Begin hook of PUT /fs/stream/{token}. */
int route_transfer_put_begin(struct http_req *r)
{
	struct store_transfer t = {0};
	struct xfer x = {0};
	int rc = token_open(r, "write", &t, &x);
	if (rc == 0)
		rc = upload_begin(r, t.path, &x, true);
	store_transfer_clear(&t);
	return rc;
}

/* Begin hook of PUT /fs/write_stream?path=P. */
int route_fs_write_stream_begin(struct http_req *r)
{
	return by_query_path(r, upload_begin);
}

/* The body ended cleanly: put the file in place. Both upload routes. */
int route_transfer_put(struct http_req *r)
{
	struct ul *u = r->hstate;
	if (!u || !u->up)
		return http_fail(r, -EIO, "the upload was not started");
	uint64_t size = 0;
	int rc = sbx_upload_commit(&u->up, &size);
	if (rc < 0) {
		snprintf(u->why, sizeof u->why, "commit failed: %s", sbx_strerror(rc));
		xfer_finish(r, &u->x, false, (int64_t)u->n, NULL, u->why);
		return route_fail_path(r, rc, "write", u->rel);
	}
	unsigned char dig[32];
	char sha[65];
	EVP_DigestFinal_ex(u->md, dig, NULL);
	hex(dig, sizeof dig, sha);
	xfer_finish(r, &u->x, true, (int64_t)size, sha, NULL);
	char wire[SBX_PATH_MAX + 16];
	sbx_path_wire(u->rel, wire, sizeof wire);
	return http_reply_json(
	    r, 201, json_pack("{s:s, s:I, s:s}", "path", wire, "size", (json_int_t)size, "sha256", sha));
}

/* ---- minting ---- */

/* POST /fs/transfers {path, direction, ttl_s} */
int route_transfers_post(struct http_req *r)
{
	const struct sbx_config *cfg = r->app->cfg;
	const char *path = NULL, *direction = NULL;
	size_t plen = 0, dlen = 0;
	int64_t ttl = cfg->transfer_ttl_default_s;
	const struct http_field f[] = {
	    {"path", F_STRING, true, &path, &plen, 0, 0, NULL},
	    {"direction", F_STRING, true, &direction, &dlen, 0, 0, NULL},
	    {"ttl_s", F_INT, false, &ttl, NULL, 1, INT32_MAX, NULL},
	};
	int rc = http_fields_read(r, r->json, f, 3);
	if (rc < 0)
		return rc;
	bool read;
	if (dlen == 4 && memcmp(direction, "read", 4) == 0)
		read = true;
	else if (dlen == 5 && memcmp(direction, "write", 5) == 0)
		read = false;
	else
		return http_fail(r, -EINVAL, "direction must be \"read\" or \"write\"");
	if (!(r->claims.scopes & (read ? AUTH_SCOPE_FS_READ : AUTH_SCOPE_FS_WRITE)))
		return http_fail(r, -SBX_E_SCOPE, "a %s transfer needs the scope fs:%s", direction,
				 direction);
	if (ttl > cfg->transfer_ttl_max_s)
		ttl = cfg->transfer_ttl_max_s;

	char rel[SBX_PATH_MAX];
	if ((rc = route_path(r, path, plen, rel, sizeof rel)) < 0)
		return rc;
	/* What would refuse the transfer now refuses the mint (it is checked
	 * again when the token is used). */
	if (read) {
		int fd = -1;
		uint64_t size = 0;
		if ((rc = sbx_fs_open_read(r->tenant->ws, rel, &fd, &size)) < 0)
			return route_fail_path(r, rc, "read", rel);
		close(fd);
	} else {
		struct sbx_upload *up = NULL;
		if ((rc = route_storage_guard(r)) < 0)
			return rc;
		if ((rc = sbx_upload_begin(&up, r->tenant->ws, rel, false)) < 0)
			return route_fail_path(r, rc, "write", rel);
		sbx_upload_abort(&up);
	}

	char tok[TOKEN_MAX + 1];
	int64_t now = now_ms();
	struct store_transfer t = {.session = r->session_key,
				   .session_len = r->session_key_len,
				   .path = rel,
				   .created_at = now,
				   .expires_at = now + ttl * 1000};
	if ((rc = token_new(r->app->cfg->node_id, tok, t.token_hash)) < 0)
		return http_fail(r, rc, "no randomness for a transfer token");
	snprintf(t.tenant, sizeof t.tenant, "%s", r->tenant->name);
	snprintf(t.direction, sizeof t.direction, "%s", read ? "read" : "write");
	if ((rc = store_transfer_mint(r->app->store, &t)) < 0)
		return http_fail(r, rc, "cannot record the transfer");

	char wire[SBX_PATH_MAX + 16], url[128], exp[40];
	sbx_path_wire(rel, wire, sizeof wire);
	snprintf(url, sizeof url, "/fs/stream/%s", tok);
	rfc3339_ms(t.expires_at, exp, sizeof exp);
	return http_reply_json(r, 201,
			       json_pack("{s:s, s:s, s:s, s:s, s:s}", "token", tok, "url", url, "direction",
					 t.direction, "path", wire, "expires_at", exp));
}
