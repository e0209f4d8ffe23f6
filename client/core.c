/* The request engine of libsandboxd: handles, the pool of libcurl
 * handles, deadlines, cancellation, retries and the wire error body.
 *
 * Every call runs its own transfer on a (multi, easy) pair borrowed from
 * the handle's pool: the multi keeps the connection cache, so a gateway's
 * calls reuse connections (and TLS sessions), and driving the transfer
 * with curl_multi_poll lets the cancel object's eventfd wake it at once,
 * with no signal and no polling interval. */
#include "client/internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/curlopt.h"
#include "common/xmalloc.h"

#define POOL_MAX 8
#define BACKOFF_FIRST_MS 200

struct conn {
	CURLM *multi;
	CURL *easy;
};

struct sbxc {
	char *base, *token, *tenant, *ca_file, *user_agent, *auth_header, *tenant_header;
	bool insecure;
	long connect_timeout_ms, timeout_ms, max_backoff_ms;
	int max_retries;
	size_t max_body;
	pthread_mutex_t lock; /* guards the pool */
	struct conn pool[POOL_MAX];
	size_t npool;
};

struct sbxc_cancel {
	atomic_bool fired;
	int fd; /* eventfd, readable once fired */
};

/* ---- small helpers ---- */

int64_t sbxc__now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sbxc__fail(struct sbxc_err *err, int rc, const char *fmt, ...)
{
	if (!err)
		return rc;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
	return rc;
}

static void err_reset(struct sbxc_err *err)
{
	if (err)
		*err = (struct sbxc_err){.retry_after_s = -1};
}

void sbxc__q(struct buf *query, const char *name, const char *value)
{
	if (!value)
		return;
	if (query->len)
		buf_append(query, "&", 1);
	buf_appendf(query, "%s=", name);
	for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		    strchr("-._~/", *p))
			buf_append(query, p, 1);
		else
			buf_appendf(query, "%%%02X", *p);
	}
}

void sbxc__qi(struct buf *query, const char *name, long long value)
{
	char v[32];
	snprintf(v, sizeof v, "%lld", value);
	sbxc__q(query, name, v);
}

char *sbxc__dump(json_t *o)
{
	char *s = json_dumps(o, JSON_COMPACT);
	if (!s)
		abort(); /* jansson fails only when out of memory */
	return s;
}

/* ---- handles ---- */

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

int sbxc_new(struct sbxc **out, const struct sbxc_opts *o)
{
	if (!o || !o->base_url || !o->token || !*o->token || strlen(o->base_url) > 4000 ||
	    (strncmp(o->base_url, "http://", 7) != 0 && strncmp(o->base_url, "https://", 8) != 0) ||
	    strpbrk(o->token, "\r\n") || (o->tenant && strpbrk(o->tenant, "\r\n")))
		return -EINVAL;
	curl_global_init(CURL_GLOBAL_ALL);
	struct sbxc *h = xcalloc(1, sizeof *h);
	h->base = xstrdup(o->base_url);
	size_t n = strlen(h->base);
	while (n > 0 && h->base[n - 1] == '/')
		h->base[--n] = '\0';
	h->token = xstrdup(o->token);
	h->tenant = o->tenant ? xstrdup(o->tenant) : sbxc__token_tenant(o->token);
	h->ca_file = dup_or_null(o->ca_file);
	h->user_agent = o->user_agent ? xstrdup(o->user_agent) : xstrdup("libsandboxd/" SANDBOXD_VERSION);
	h->auth_header = xasprintf("Authorization: Bearer %s", o->token);
	h->tenant_header = h->tenant ? xasprintf("X-Tenant-Id: %s", h->tenant) : NULL;
	h->insecure = o->insecure;
	h->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
	h->timeout_ms = o->timeout_ms ? o->timeout_ms : 60000;
	h->max_retries = o->max_retries == 0 ? 4 : (o->max_retries < 0 ? 0 : o->max_retries);
	h->max_backoff_ms = o->max_backoff_ms > 0 ? o->max_backoff_ms : 30000;
	h->max_body = o->max_body_bytes ? o->max_body_bytes : 64u << 20;
	pthread_mutex_init(&h->lock, NULL);
	*out = h;
	return 0;
}

void sbxc_free(struct sbxc **hp)
{
	struct sbxc *h = hp ? *hp : NULL;
	if (!h)
		return;
	for (size_t i = 0; i < h->npool; i++) {
		curl_multi_cleanup(h->pool[i].multi);
		curl_easy_cleanup(h->pool[i].easy);
	}
	pthread_mutex_destroy(&h->lock);
	/* The token is a secret: do not leave it in freed memory. */
	explicit_bzero(h->token, strlen(h->token));
	explicit_bzero(h->auth_header, strlen(h->auth_header));
	free(h->base);
	free(h->token);
	free(h->tenant);
	free(h->ca_file);
	free(h->user_agent);
	free(h->auth_header);
	free(h->tenant_header);
	free(h);
	*hp = NULL;
}

static struct conn conn_get(struct sbxc *h)
{
	struct conn c = {NULL, NULL};
	pthread_mutex_lock(&h->lock);
	if (h->npool > 0)
		c = h->pool[--h->npool];
	pthread_mutex_unlock(&h->lock);
	if (!c.multi) {
		c.multi = curl_multi_init();
		c.easy = curl_easy_init();
		if (!c.multi || !c.easy)
			abort(); /* libcurl fails these only when out of memory */
	}
	return c;
}

static void conn_put(struct sbxc *h, struct conn c, bool reusable)
{
	if (reusable) {
		pthread_mutex_lock(&h->lock);
		if (h->npool < POOL_MAX) {
			h->pool[h->npool++] = c;
			c.multi = NULL;
		}
		pthread_mutex_unlock(&h->lock);
	}
	if (c.multi) {
		curl_multi_cleanup(c.multi);
		curl_easy_cleanup(c.easy);
	}
}

/* ---- cancel objects ---- */

void sbxc_cancel_new(struct sbxc_cancel **out)
{
	struct sbxc_cancel *c = xcalloc(1, sizeof *c);
	atomic_init(&c->fired, false);
	c->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->fd < 0)
		abort(); /* only for lack of fds or memory */
	*out = c;
}

void sbxc_cancel_fire(struct sbxc_cancel *c)
{
	if (!c || atomic_exchange(&c->fired, true))
		return;
	uint64_t one = 1;
	ssize_t w = write(c->fd, &one, sizeof one);
	(void)w;
}

bool sbxc_cancel_fired(const struct sbxc_cancel *c)
{
	return c && atomic_load(&c->fired);
}

void sbxc_cancel_free(struct sbxc_cancel **cp)
{
	if (!cp || !*cp)
		return;
	close((*cp)->fd);
	free(*cp);
	*cp = NULL;
}

int sbxc__max_retries(const struct sbxc *h)
{
	return h->max_retries;
}

int64_t sbxc__deadline(struct sbxc *h, const struct sbxc_call *c, bool open_ended)
{
	long t = c && c->timeout_ms ? c->timeout_ms : (open_ended ? -1 : h->timeout_ms);
	return t < 0 ? INT64_MAX : sbxc__now_ms() + t;
}

int sbxc__sleep(const struct sbxc_call *c, long ms)
{
	struct sbxc_cancel *k = c ? c->cancel : NULL;
	if (sbxc_cancel_fired(k))
		return -ECANCELED;
	struct pollfd p = {.fd = k ? k->fd : -1, .events = POLLIN};
	int64_t end = sbxc__now_ms() + ms;
	for (;;) {
		int64_t left = end - sbxc__now_ms();
		if (left <= 0)
			return 0;
		int r = poll(&p, 1, (int)left);
		if (r > 0 || sbxc_cancel_fired(k))
			return -ECANCELED;
	}
}

/* ---- one attempt ---- */

struct attempt {
	struct sbxc *h;
	const struct creq *q;
	struct cresp *resp;
	struct conn c;
	int sink_rc, source_rc;
	bool too_big, cancelled;
	long retry_after;
	char request_id[80], node[72];
};

/* "Name: value\r\n" -> value into dst when the name matches. */
static bool header_is(const char *p, size_t len, const char *name, char *dst, size_t dstsz)
{
	size_t n = strlen(name);
	if (len <= n || p[n] != ':' || strncasecmp(p, name, n) != 0)
		return false;
	const char *v = p + n + 1, *end = p + len;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
		end--;
	snprintf(dst, dstsz, "%.*s", (int)(end - v), v);
	return true;
}

static size_t on_header(char *p, size_t sz, size_t n, void *arg)
{
	struct attempt *a = arg;
	size_t len = sz * n;
	char v[64];
	if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) { /* a new answer (after a 100 Continue, say) */
		a->retry_after = -1;
		a->request_id[0] = '\0';
		a->node[0] = '\0';
		a->resp->content_type[0] = '\0';
	} else if (header_is(p, len, "Retry-After", v, sizeof v)) {
		char *end = NULL;
		long long s = strtoll(v, &end, 10);
		a->retry_after = end != v && *end == '\0' && s >= 0 && s < 86400 ? (long)s : -1;
	} else if (!header_is(p, len, "X-Request-Id", a->request_id, sizeof a->request_id) &&
		   !header_is(p, len, "Sandboxd-Node", a->node, sizeof a->node)) {
		header_is(p, len, "Content-Type", a->resp->content_type, sizeof a->resp->content_type);
	}
	return len;
}

static size_t on_write(char *p, size_t sz, size_t n, void *arg)
{
	struct attempt *a = arg;
	size_t len = sz * n;
	long st = 0;
	curl_easy_getinfo(a->c.easy, CURLINFO_RESPONSE_CODE, &st);
	if (st / 100 == 2 && a->q->sink) {
		int r = a->q->sink(a->q->sink_arg, p, len);
		if (r == SBXC__PAUSE)
			return CURL_WRITEFUNC_PAUSE; /* delivered again once unpaused */
		a->resp->delivered = true;
		if (r != 0) {
			a->sink_rc = r;
			return 0; /* libcurl ends the transfer with CURLE_WRITE_ERROR */
		}
		return len;
	}
	if (buf_append(&a->resp->body, p, len) < 0) {
		a->too_big = true;
		return 0;
	}
	return len;
}

static size_t on_read(char *p, size_t sz, size_t n, void *arg)
{
	struct attempt *a = arg;
	ssize_t r = a->q->source(a->q->source_arg, p, sz * n);
	if (r == SBXC__PAUSE)
		return CURL_READFUNC_PAUSE;
	a->resp->source_read = true;
	if (r < 0) {
		a->source_rc = (int)r;
		return CURL_READFUNC_ABORT;
	}
	return (size_t)r;
}

static struct curl_slist *headers_of(struct sbxc *h, const struct sbxc_call *c, const struct creq *q)
{
	struct curl_slist *l = curl_slist_append(NULL, h->auth_header);
	if (h->tenant_header)
		l = curl_slist_append(l, h->tenant_header);
	char line[640];
	if (c && c->session) {
		snprintf(line, sizeof line, "X-Session-Key: %s", c->session);
		l = curl_slist_append(l, line);
	}
	if (c && c->request_id) {
		snprintf(line, sizeof line, "X-Request-Id: %s", c->request_id);
		l = curl_slist_append(l, line);
	}
	if (q->content_type) {
		snprintf(line, sizeof line, "Content-Type: %s", q->content_type);
		l = curl_slist_append(l, line);
	}
	if (q->source)
		l = curl_slist_append(l, "Expect: 100-continue");
	else if (q->body)
		l = curl_slist_append(l, "Expect:"); /* a buffered body is bounded: no round trip */
	for (size_t i = 0; q->headers && q->headers[i]; i++)
		l = curl_slist_append(l, q->headers[i]);
	if (!l)
		abort();
	return l;
}

static void set_body(CURL *e, const struct creq *q, struct attempt *a)
{
	if (q->source) {
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(e, CURLOPT_READDATA, a);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->source_size);
		curl_easy_setopt(e, CURLOPT_EXPECT_100_TIMEOUT_MS, 10000L);
		return;
	}
	if (strcmp(q->method, "GET") == 0)
		return;
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, q->body ? (const char *)q->body : "");
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(q->body ? q->body_len : 0));
	if (strcmp(q->method, "POST") != 0)
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, q->method);
}

static void setup(struct attempt *a, const struct sbxc_call *c, struct curl_slist *hdrs, const char *url,
		  int64_t deadline)
{
	struct sbxc *h = a->h;
	const struct creq *q = a->q;
	CURL *e = a->c.easy;
	curl_easy_reset(e);
	sbx_curl_base(e, url, hdrs, h->connect_timeout_ms, h->ca_file, on_write, a);
	curl_easy_setopt(e, CURLOPT_USERAGENT, h->user_agent);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	if (deadline != INT64_MAX) {
		int64_t left = deadline - sbxc__now_ms();
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(left > 1 ? left : 1));
	}
	if (q->open_ended && q->idle_ms > 0) {
		curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (q->idle_ms + 999) / 1000);
	}
	if (h->insecure) {
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, a);
	set_body(e, q, a);
}

/* ---- errors ---- */

static const struct {
	const char *code;
	int err;
} code_table[] = {
    {"not_found", ENOENT},
    {"parent_missing", ENOENT},
    {"exists", EEXIST},
    {"not_empty", ENOTEMPTY},
    {"not_a_directory", ENOTDIR},
    {"is_a_directory", EISDIR},
    {"outside_workspace", EXDEV},
    {"forbidden", EPERM},
    {"insufficient_scope", EACCES},
    {"unauthorized", EACCES},
    {"conflict", EBUSY},
    {"token_used", ESTALE},
    {"token_expired", ESTALE},
    {"too_large", EFBIG},
    {"not_text", EILSEQ},
    {"range_not_satisfiable", ERANGE},
    {"too_many_requests", EAGAIN},
    {"backend_unavailable", EHOSTDOWN},
    {"store_unavailable", EHOSTDOWN},
    {"insufficient_storage", ENOSPC},
    {"quota_exceeded", EDQUOT},
    {"store_budget_exceeded", EDQUOT},
    {"bad_request", EINVAL},
    {"method_not_allowed", EOPNOTSUPP},
};

int sbxc_errno_of_code(const char *code)
{
	for (size_t i = 0; code && i < sizeof code_table / sizeof code_table[0]; i++)
		if (strcmp(code, code_table[i].code) == 0)
			return -code_table[i].err;
	return -EIO;
}

static int errno_of_status(long st)
{
	switch (st) {
	case 400:
		return -EINVAL;
	case 401:
	case 403:
		return -EACCES;
	case 404:
		return -ENOENT;
	case 409:
		return -EBUSY;
	case 413:
		return -EFBIG;
	case 416:
		return -ERANGE;
	case 429:
		return -EAGAIN;
	case 503:
		return -EHOSTDOWN;
	default:
		return -EIO;
	}
}

/* A non-2xx answer: the wire error body into err, its errno back. */
static int http_error(struct attempt *a, struct sbxc_err *err)
{
	struct cresp *r = a->resp;
	json_t *o = r->body.len ? json_loadb(r->body.ptr, r->body.len, 0, NULL) : NULL;
	json_t *e = json_object_get(o, "error");
	const char *code = json_string_value(json_object_get(e, "code"));
	int rc = code ? sbxc_errno_of_code(code) : errno_of_status(r->status);
	if (err) {
		sbxc__jcopy(e, "code", err->code, sizeof err->code);
		sbxc__jcopy(e, "message", err->message, sizeof err->message);
		sbxc__jcopy(e, "retry_hint", err->retry_hint, sizeof err->retry_hint);
		if (!e)
			snprintf(err->message, sizeof err->message, "HTTP %ld without a wire error body",
				 r->status);
	}
	json_decref(o);
	return rc;
}

static int transport_error(CURLcode res, struct attempt *a, bool *retryable, struct sbxc_err *err)
{
	const struct creq *q = a->q;
	if (a->cancelled)
		return sbxc__fail(err, -ECANCELED, "cancelled");
	if (a->sink_rc)
		return sbxc__fail(err, -ECANCELED, "the receiver stopped the transfer");
	if (a->source_rc)
		return sbxc__fail(err, a->source_rc, "the upload's source failed: %s",
				  strerror(-a->source_rc));
	if (a->too_big)
		return sbxc__fail(err, -EFBIG, "the answer is larger than max_body_bytes");
	const char *what = curl_easy_strerror(res);
	switch (res) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
		*retryable = q->retry;
		return sbxc__fail(err, -ECONNREFUSED, "cannot connect: %s", what);
	case CURLE_OPERATION_TIMEDOUT:
		return sbxc__fail(err, -ETIMEDOUT, "%s", what);
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CIPHER:
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
		return sbxc__fail(err, -EPROTO, "%s", what);
	default:
		*retryable = q->retry && q->idempotent && !a->resp->delivered && !a->resp->source_read;
		return sbxc__fail(err, -EIO, "the connection broke: %s", what);
	}
}

/* The outcome of an ended attempt: 0 for 2xx, else its errno (and
 * whether to retry). */
static int outcome(struct attempt *a, CURLcode res, bool *retryable, struct sbxc_err *err)
{
	*retryable = false;
	if (err) {
		err->attempts++;
		snprintf(err->request_id, sizeof err->request_id, "%s", a->request_id);
		snprintf(err->node, sizeof err->node, "%s", a->node);
	}
	if (res != CURLE_OK)
		return transport_error(res, a, retryable, err);
	curl_easy_getinfo(a->c.easy, CURLINFO_RESPONSE_CODE, &a->resp->status);
	if (err)
		err->status = a->resp->status;
	if (a->resp->status / 100 == 2)
		return 0;
	if (err)
		err->retry_after_s = a->retry_after;
	/* An upload whose body was already being read cannot be replayed. */
	*retryable = a->q->retry && (a->resp->status == 429 || a->resp->status == 503) &&
		     !(a->q->source && a->resp->source_read);
	return http_error(a, err);
}

/* How long to wait before attempt n+1 (n from 0): the server's
 * Retry-After, else 200 ms doubling, within [50 ms, max_backoff] with a
 * little jitter so that many clients do not return in step. */
static long backoff_ms(struct sbxc *h, int n, long retry_after_s)
{
	long ms = retry_after_s >= 0 ? retry_after_s * 1000 : (long)BACKOFF_FIRST_MS << (n < 16 ? n : 16);
	if (retry_after_s < 0)
		ms += (long)(sbxc__now_ms() % (ms / 4 + 1));
	if (ms < 50)
		ms = 50;
	return ms > h->max_backoff_ms ? h->max_backoff_ms : ms;
}

/* ---- a transfer, attempt after attempt, driven step by step ---- */

struct sbxc__xfer {
	struct sbxc *h;
	struct sbxc_call call; /* a copy: its strings are the caller's */
	const struct creq *q;
	struct cresp *resp;
	char *url;
	int64_t deadline;
	int max_retries, n; /* n: attempts made before the current one */
	struct attempt a;
	struct curl_slist *hdrs;
	bool running; /* the current attempt is in the multi handle */
	CURLcode res;
};

static void begin(struct sbxc__xfer *x)
{
	x->a =
	    (struct attempt){.h = x->h, .q = x->q, .resp = x->resp, .c = conn_get(x->h), .retry_after = -1};
	buf_reset(&x->resp->body);
	x->resp->status = 0;
	x->hdrs = headers_of(x->h, &x->call, x->q);
	setup(&x->a, &x->call, x->hdrs, x->url, x->deadline);
	curl_multi_add_handle(x->a.c.multi, x->a.c.easy);
	x->running = true;
	x->res = CURLE_OK;
}

/* The attempt's end: out of the multi handle (a transfer not done is
 * closed, which tells the server) and its connection back to the pool. */
static void finish(struct sbxc__xfer *x)
{
	if (!x->running)
		return;
	struct attempt *a = &x->a;
	curl_multi_remove_handle(a->c.multi, a->c.easy);
	curl_slist_free_all(x->hdrs);
	x->hdrs = NULL;
	conn_put(x->h, a->c, !a->cancelled && !a->sink_rc && !a->source_rc);
	x->running = false;
}

int sbxc__xfer_open(struct sbxc *h, const struct sbxc_call *c, const struct creq *q, struct cresp *resp,
		    struct sbxc__xfer **out, struct sbxc_err *err)
{
	*resp = (struct cresp){0};
	buf_init(&resp->body, h->max_body);
	err_reset(err);
	if (c && ((c->session && strpbrk(c->session, "\r\n")) ||
		  (c->request_id && strpbrk(c->request_id, "\r\n"))))
		return sbxc__fail(err, -EINVAL, "a header value holds a line break");
	if (sbxc_cancel_fired(c ? c->cancel : NULL))
		return sbxc__fail(err, -ECANCELED, "cancelled");
	struct sbxc__xfer *x = xcalloc(1, sizeof *x);
	x->h = h;
	x->call = c ? *c : (struct sbxc_call){0};
	x->q = q;
	x->resp = resp;
	x->url = xasprintf("%s%s%s%s", h->base, q->path, q->query && q->query->len ? "?" : "",
			   q->query && q->query->len ? buf_cstr(q->query) : "");
	x->deadline = sbxc__deadline(h, c, q->open_ended);
	x->max_retries = c && c->max_retries ? (c->max_retries < 0 ? 0 : c->max_retries) : h->max_retries;
	begin(x);
	*out = x;
	return 0;
}

int sbxc__xfer_step(struct sbxc__xfer *x, int wait_ms)
{
	if (!x->running)
		return 0;
	struct sbxc_cancel *k = x->call.cancel;
	CURLM *m = x->a.c.multi;
	int running = 0;
	if (curl_multi_perform(m, &running) != CURLM_OK) {
		x->res = CURLE_OUT_OF_MEMORY;
		return 0;
	}
	if (running) {
		struct curl_waitfd w = {.fd = k ? k->fd : -1, .events = CURL_WAIT_POLLIN};
		curl_multi_poll(m, k ? &w : NULL, k ? 1 : 0, wait_ms, NULL);
		if (!sbxc_cancel_fired(k))
			return 1;
		x->a.cancelled = true;
		x->res = CURLE_ABORTED_BY_CALLBACK;
		return 0;
	}
	int left = 0;
	CURLMsg *msg;
	while ((msg = curl_multi_info_read(m, &left)))
		if (msg->msg == CURLMSG_DONE)
			x->res = msg->data.result;
	return 0;
}

int sbxc__xfer_outcome(struct sbxc__xfer *x, struct sbxc_err *err)
{
	bool retryable = false;
	int rc = outcome(&x->a, x->res, &retryable, err);
	long retry_after = x->a.retry_after;
	finish(x);
	if (rc == 0 || !retryable || x->n >= x->max_retries)
		return rc;
	long wait = backoff_ms(x->h, x->n, retry_after);
	if (x->deadline != INT64_MAX && sbxc__now_ms() + wait >= x->deadline)
		return rc; /* the answer we have beats a timeout */
	if (sbxc__sleep(&x->call, wait) < 0)
		return sbxc__fail(err, -ECANCELED, "cancelled");
	x->n++;
	begin(x);
	return 1;
}

long sbxc__xfer_status(struct sbxc__xfer *x)
{
	long st = 0;
	if (x->running)
		curl_easy_getinfo(x->a.c.easy, CURLINFO_RESPONSE_CODE, &st);
	return st;
}

int64_t sbxc__xfer_length(struct sbxc__xfer *x)
{
	curl_off_t n = -1;
	if (x->running)
		curl_easy_getinfo(x->a.c.easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &n);
	return (int64_t)n;
}

void sbxc__xfer_unpause(struct sbxc__xfer *x)
{
	if (x->running)
		curl_easy_pause(x->a.c.easy, CURLPAUSE_CONT);
}

void sbxc__xfer_close(struct sbxc__xfer **xp)
{
	struct sbxc__xfer *x = *xp;
	if (!x)
		return;
	x->a.cancelled = x->a.cancelled || x->running; /* not reusable: closed mid-way */
	finish(x);
	free(x->url);
	free(x);
	*xp = NULL;
}

int sbxc__do(struct sbxc *h, const struct sbxc_call *c, const struct creq *q, struct cresp *resp,
	     struct sbxc_err *err)
{
	struct sbxc__xfer *x = NULL;
	int rc = sbxc__xfer_open(h, c, q, resp, &x, err);
	while (rc == 0 || rc == 1) {
		while (sbxc__xfer_step(x, 1000))
			;
		rc = sbxc__xfer_outcome(x, err);
		if (rc != 1)
			break;
	}
	sbxc__xfer_close(&x);
	return rc;
}

void cresp_free(struct cresp *r)
{
	buf_free(&r->body);
}

int sbxc__json(struct sbxc *h, const struct sbxc_call *c, const struct creq *q, json_t **out,
	       struct sbxc_err *err)
{
	struct cresp r;
	*out = NULL;
	int rc = sbxc__do(h, c, q, &r, err);
	if (rc == 0) {
		*out = json_loadb(r.body.ptr ? r.body.ptr : "", r.body.len, 0, NULL);
		if (!*out)
			rc = sbxc__fail(err, -EPROTO, "the answer of %s %s is not JSON", q->method, q->path);
	}
	cresp_free(&r);
	return rc;
}

const char *sbxc_err_text(const struct sbxc_err *e, int rc, char *buf, size_t bufsz)
{
	bool hint = e && e->retry_hint[0];
	if (e && e->code[0])
		snprintf(buf, bufsz, "%s: %s%s%s%s", e->code, e->message, hint ? " (" : "",
			 hint ? e->retry_hint : "", hint ? ")" : "");
	else if (e && e->message[0])
		snprintf(buf, bufsz, "%s", e->message);
	else
		snprintf(buf, bufsz, "%s", strerror(rc < 0 ? -rc : rc));
	return buf;
}
