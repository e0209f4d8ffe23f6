#include "http/req.h"

#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/utf8.h"
#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/req_int.h"
#include "http/response.h"
#include "http/route.h"

int http_fail(struct http_req *r, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	/* Messages quote the URL and query, which arrive percent-decoded and
	 * may be any bytes: jansson refuses invalid UTF-8, and the error body
	 * and the log line must still be written. */
	size_t n = strlen(msg);
	if (!utf8_valid(msg, n)) {
		char *s = utf8_sanitize(msg, n, &n);
		free(msg);
		msg = s;
	}
	free(r->error_msg);
	r->error_msg = msg;
	return code;
}

const char *http_header(struct http_req *r, const char *name)
{
	struct http_req_core *c = http_req_core_of(r);
	if (!c->conn)
		return c->fake->value(c->fake, true, name);
	return MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, name);
}

const char *http_query(struct http_req *r, const char *name)
{
	struct http_req_core *c = http_req_core_of(r);
	if (!c->conn)
		return c->fake->value(c->fake, false, name);
	return MHD_lookup_connection_value(c->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *http_query_n(struct http_req *r, const char *name, size_t *len)
{
	struct http_req_core *c = http_req_core_of(r);
	const char *v = NULL;
	size_t n = 0;
	if (!c->conn) {
		if (!(v = c->fake->value(c->fake, false, name)))
			return NULL;
		n = strlen(v);
	} else if (MHD_lookup_connection_value_n(c->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v,
						 &n) != MHD_YES) {
		return NULL;
	}
	if (!v) /* "?path" without "=": present, empty */
		v = "";
	*len = n;
	return v;
}

int http_query_int(struct http_req *r, const char *name, int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
	const char *v = http_query(r, name);
	if (!v || !*v) {
		*out = def;
		return 0;
	}
	char *end = NULL;
	errno = 0;
	long long x = strtoll(v, &end, 10);
	if (errno || *end || x < lo || x > hi)
		return http_fail(r, -EINVAL, "query parameter %s must be an integer in [%lld, %lld]", name,
				 (long long)lo, (long long)hi);
	*out = x;
	return 0;
}

bool http_query_bool(struct http_req *r, const char *name)
{
	const char *v = http_query(r, name);
	return v && (strcmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

int http_client_fd(struct http_req *r)
{
	struct http_req_core *c = http_req_core_of(r);
	if (!c->conn)
		return -1;
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci ? ci->connect_fd : -1;
}

void http_set_target(struct http_req *r, const char *target)
{
	/* Targets come from URL segments too (ids): keep the audit UTF-8. */
	size_t n = strlen(target);
	free(r->target);
	r->target = utf8_valid(target, n) ? xstrdup(target) : utf8_sanitize(target, n, &n);
}

void http_set_exec_result(struct http_req *r, const json_t *result)
{
	json_t *code = json_object_get(result, "exit_code");
	if (json_is_integer(code)) {
		r->has_exit_code = true;
		r->exit_code = (int)json_integer_value(code);
	}
	r->oom_killed = json_is_true(json_object_get(result, "oom_killed"));
	r->pids_limited = json_is_true(json_object_get(result, "pids_limited"));
	r->uncontained = json_is_true(json_object_get(result, "uncontained"));
}

void http_reply_common_headers(struct http_req *r, struct http_response *resp)
{
	http_response_header(resp, "X-Request-Id", r->request_id);
	/* Which node answered (docs/nodes.md): a balancer's
	 * routing can be checked from outside, and logs of a client name it. */
	if (r->env && r->env->cfg->node_id)
		http_response_header(resp, "Sandboxd-Node", r->env->cfg->node_id);
	http_response_header(resp, "Cache-Control", "no-store");
	http_response_header(resp, "X-Content-Type-Options", "nosniff");
}

/* Queue resp (libmicrohttpd's, http/response.c) on r's connection and
 * destroy our reference; false when nothing was queued. A fake request
 * has nothing to queue on: the response is only destroyed. */
static bool queue(struct http_req *r, int status, struct http_response *resp)
{
	struct http_req_core *c = http_req_core_of(r);
	struct MHD_Response *m = (struct MHD_Response *)resp;
	enum MHD_Result ok = c->conn ? MHD_queue_response(c->conn, (unsigned)status, m) : MHD_YES;
	MHD_destroy_response(m);
	return ok == MHD_YES;
}

/* The n bytes at p are a reply's body: counted (and a fake request's
 * test sees them). */
static void count_out(struct http_req *r, const void *p, size_t n)
{
	struct http_req_core *c = http_req_core_of(r);
	r->bytes_out += (int64_t)n;
	if (!c->conn)
		c->fake->body(c->fake, p, n);
}

int http_reply_response(struct http_req *r, int status, struct http_response *resp)
{
	if (!resp)
		return -ENOMEM;
	http_reply_common_headers(r, resp);
	struct http_req_core *c = http_req_core_of(r);
	if (c->defer) {
		/* A pool worker: libmicrohttpd is driven only from the
		 * connection's thread, which queues this on resume. */
		http_response_free(&c->deferred);
		c->deferred = resp;
		c->deferred_status = status;
		return 0;
	}
	if (!queue(r, status, resp))
		return -EIO; /* nothing queued: the dispatcher may still answer */
	r->status = status;
	return 0;
}

int http_reply_deferred(struct http_req *r)
{
	struct http_req_core *c = http_req_core_of(r);
	struct http_response *resp = c->deferred;
	c->deferred = NULL;
	if (!queue(r, c->deferred_status, resp))
		return -EIO;
	r->status = c->deferred_status;
	return 0;
}

int http_reply_static(struct http_req *r, int status, const char *content_type, const void *p, size_t n)
{
	struct http_response *resp = http_response_static(p, n);
	if (!resp)
		return -ENOMEM;
	if (content_type)
		http_response_header(resp, "Content-Type", content_type);
	count_out(r, p, n);
	return http_reply_response(r, status, resp);
}

struct http_response *http_json_response(struct http_req *r, char *text)
{
	size_t n = strlen(text);
	struct http_response *resp = http_response_bytes(text, n);
	if (!resp)
		return NULL;
	http_response_header(resp, "Content-Type", "application/json");
	count_out(r, text, n);
	return resp;
}

/* The answer inside r's envelope (taken off r: it wraps one answer):
 * the body to send with 200, or NULL for a 202 without one. */
static json_t *enveloped(struct http_req *r, int status, json_t *body)
{
	http_envelope_fn wrap = r->envelope;
	r->envelope = NULL;
	r->audit_status = status;
	return wrap(r, status, body);
}

int http_reply_json(struct http_req *r, int status, json_t *body)
{
	if (r->envelope) {
		body = enveloped(r, status, body);
		if (!body)
			return http_reply_static(r, 202, NULL, "", 0);
		status = 200;
	}
	char *text = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
	json_decref(body);
	struct http_response *resp = text ? http_json_response(r, text) : NULL;
	return resp ? http_reply_response(r, status, resp) : -ENOMEM;
}

int http_reply_text(struct http_req *r, int status, char *data, size_t len)
{
	if (r->envelope) {
		json_t *o = json_pack("{s:s%}", "text", data, len);
		free(data);
		return o ? http_reply_json(r, status, o) : -ENOMEM;
	}
	struct http_response *resp = http_response_bytes(data, len);
	if (!resp)
		return -ENOMEM;
	http_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
	count_out(r, data, len);
	return http_reply_response(r, status, resp);
}

/* A Host header's value as a URL's authority: a name, an IPv4 address or
 * a bracketed IPv6 one, an optional port; nothing that could end the
 * quoted string of a header or start a path. */
static bool host_ok(const char *h)
{
	size_t n = strlen(h);
	if (n == 0 || n > 255)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = h[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == ':' || c == '[' || c == ']'))
			return false;
	}
	return true;
}

bool http_base_url(struct http_req *r, char *out, size_t outsz)
{
	const char *host = http_header(r, "Host");
	if (!host || !host_ok(host))
		return false;
	bool tls = r->env && r->env->cfg && r->env->cfg->tls_cert;
	int n = snprintf(out, outsz, "%s://%s", tls ? "https" : "http", host);
	return n > 0 && (size_t)n < outsz;
}

void http_suspend(struct http_req *r)
{
	struct http_req_core *c = http_req_core_of(r);
	c->suspended = true;
	if (c->conn)
		MHD_suspend_connection(c->conn);
	else
		c->fake->suspend(c->fake);
}

void http_resume(struct http_req *r)
{
	struct http_req_core *c = http_req_core_of(r);
	if (c->conn)
		MHD_resume_connection(c->conn);
	else
		c->fake->resume(c->fake);
}

int http_fail_range(struct http_req *r, uint64_t size)
{
	struct http_req_core *c = http_req_core_of(r);
	snprintf(c->content_range, sizeof c->content_range, "bytes */%" PRIu64, size);
	return http_fail(r, -ERANGE, "the range starts past the end of the file");
}

#define RAW_TARGET_MAX 1024

/* A refused path is audited as it was asked for (bounded, NUL spelled
 * "\\0", valid UTF-8): an escape attempt must say what it tried. */
void http_set_target_raw(struct http_req *r, const char *wire, size_t len)
{
	struct buf b;
	buf_init(&b, 2 * RAW_TARGET_MAX + 8);
	for (size_t i = 0; i < len && i < RAW_TARGET_MAX; i++)
		buf_append(&b, wire[i] ? &wire[i] : "\\0", wire[i] ? 1 : 2);
	if (len > RAW_TARGET_MAX)
		buf_append(&b, "...", 3);
	size_t n = 0;
	char *s = utf8_sanitize(b.ptr ? b.ptr : "", b.len, &n);
	buf_free(&b);
	free(r->target);
	r->target = s;
}
