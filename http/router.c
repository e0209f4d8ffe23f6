/* The dispatcher: matching against the program's route table,
 * authentication, scopes, body parsing, error rendering, and the
 * completion (audit through the program's hook, metrics, log). */
#include "http/route.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth/auth.h"
#include "common/nowait.h"
#include "common/utf8.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/config.h"
#include "common/xmalloc.h"
#include "http/auditgate.h"
#include "http/errors.h"
#include "http/metrics.h"
#include "http/pool.h"
#include "http/req_int.h"
#include "http/response.h"

static void free_params(struct http_req *r)
{
	for (size_t i = 0; i < REQ_MAX_PARAMS; i++) {
		free((char *)r->params[i]);
		r->params[i] = NULL;
	}
}

static int key_lookup(void *ctx, const char *tenant, struct auth_key *key)
{
	struct http_req *r = ctx;
	/* The reference is kept for the request. */
	return r->env->hooks.tenant_get(r->env->hooks.ctx, tenant, &r->tenant, key);
}

static bool session_key_ok(const char *k, size_t n)
{
	if (n < 1 || n > 512)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)k[i] < 0x20 || (unsigned char)k[i] > 0x7e)
			return false;
	return true;
}

static int authenticate(struct http_req *r)
{
	const char *h = http_header(r, "Authorization");
	const char *token = NULL;
	if (h && strncasecmp(h, "Bearer ", 7) == 0)
		token = h + 7;
	else if ((r->route->flags & RF_SSE) && http_query(r, "access_token"))
		token = http_query(r, "access_token");
	if (!token || !*token)
		return http_fail(r, -SBX_E_UNAUTHORIZED, "missing bearer token");

	const struct sbx_config *cfg = r->env->cfg;
	struct auth_config ac = {.audience = cfg->audience,
				 .leeway_s = cfg->leeway_s,
				 .max_token_bytes = 8192,
				 .cache = r->env->auth_cache};
	const char *why = NULL;
	int rc = auth_verify(token, strlen(token), &ac, now_ms() / 1000, key_lookup, r, &r->claims, &why);
	if (rc < 0) {
		if (r->tenant)
			r->env->hooks.tenant_put(r->env->hooks.ctx, &r->tenant);
		if (rc == -SBX_E_STORE || rc == -ENOSPC)
			return http_fail(r, -SBX_E_STORE, "cannot read the tenant registry");
		/* The client learns only "expired" or "invalid": which tenants
		 * exist, or which check failed, is for the log alone. */
		r->log_detail = why;
		return http_fail(r, -SBX_E_UNAUTHORIZED, "%s",
				 why && strcmp(why, "expired") == 0 ? "token expired" : "invalid token");
	}
	r->authed = true;
	const char *tid = http_header(r, "X-Tenant-Id");
	if (tid && strcmp(tid, r->claims.tenant) != 0)
		return http_fail(r, -SBX_E_FORBIDDEN, "X-Tenant-Id does not match the token's tenant");
	char refused[384] = "";
	if (r->env->hooks.tenant_admit &&
	    (rc = r->env->hooks.tenant_admit(r->env->hooks.ctx, r->tenant, r->route, refused,
					     sizeof refused)) < 0)
		return http_fail(r, rc, "%s", refused);
	return 0;
}

static int authorise(struct http_req *r)
{
	const struct http_route *rt = r->route;
	if (rt->flags & RF_ADMIN_ONLY) {
		if (!(r->claims.scopes & AUTH_SCOPE_ADMIN))
			return http_fail(r, -SBX_E_SCOPE,
					 "this route needs the admin scope of an operator tenant");
		return 0;
	}
	if (rt->scope == AUTH_SCOPE_APPROVE && r->claims.approve_refused)
		return http_fail(r, -SBX_E_SCOPE,
				 "only a token of the tenant's approver key approves or rejects (header kid "
				 "\"approver\"; `sandboxd tenant set-approver`): the main key cannot");
	if (rt->scope && !(r->claims.scopes & rt->scope) && r->claims.approver)
		return http_fail(r, -SBX_E_SCOPE,
				 "a token of the approver key only approves, rejects and reads (approve, "
				 "audit:read)");
	if (rt->scope && !(r->claims.scopes & rt->scope)) {
		char need[96];
		auth_scopes_format(rt->scope, need, sizeof need);
		return http_fail(r, -SBX_E_SCOPE, "this route needs one of the scopes: %s", need);
	}
	return 0;
}

/* Headers that must appear at most once: a second Content-Length or
 * Transfer-Encoding (or both together) frames the body two ways, and a
 * proxy that reads the other one smuggles a request past us; a second
 * credential, tenant or session header may be the one a proxy checked. */
static const char *const single_headers[] = {"Content-Length", "Transfer-Encoding", "Authorization",
					     "X-Tenant-Id", "X-Session-Key"};
#define NSINGLE (sizeof single_headers / sizeof single_headers[0])

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	unsigned *seen = cls;
	(void)kind;
	(void)value;
	for (size_t i = 0; key && i < NSINGLE; i++)
		if (strcasecmp(key, single_headers[i]) == 0)
			seen[i]++;
	return MHD_YES;
}

/* libmicrohttpd 0.9.75 takes the first of duplicate headers and lets
 * Transfer-Encoding win over Content-Length: refuse all of it. */
static int refuse_ambiguous(struct http_req *r)
{
	struct http_req_core *c = http_req_core_of(r);
	unsigned seen[NSINGLE] = {0};
	if (c->conn)
		MHD_get_connection_values(c->conn, MHD_HEADER_KIND, count_header, seen);
	else /* a fake request: one value per name */
		for (size_t i = 0; i < NSINGLE; i++)
			seen[i] = http_header(r, single_headers[i]) != NULL;
	for (size_t i = 0; i < NSINGLE; i++)
		if (seen[i] > 1) {
			c->refuse_now = true;
			return http_fail(r, -EINVAL, "the %s header appears more than once",
					 single_headers[i]);
		}
	if (seen[0] && seen[1]) {
		c->refuse_now = true;
		return http_fail(r, -EINVAL, "Content-Length and Transfer-Encoding together are ambiguous");
	}
	/* Any other coding leaves a request body without a length (0.9.75
	 * then reads it until the connection ends): RFC 9112 says 400. */
	const char *te = http_header(r, "Transfer-Encoding");
	if (te && strcasecmp(te, "chunked") != 0) {
		c->refuse_now = true;
		return http_fail(r, -EINVAL, "only Transfer-Encoding: chunked is understood");
	}
	return 0;
}

int http_begin(struct http_req *r)
{
	int arc = refuse_ambiguous(r);
	if (arc < 0)
		return arc;
	const struct http_route *found = NULL;
	char allow[128];
	int mrc = http_route_match(r->env->routes, r->env->nroutes, r->method, r->url, &found, r->params,
				   allow, sizeof allow);
	if (mrc == -SBX_E_METHOD) {
		http_req_core_of(r)->allow = xstrdup(allow);
		return http_fail(r, -SBX_E_METHOD, "method %s not allowed here; allowed: %s", r->method,
				 allow);
	}
	if (mrc < 0)
		return http_fail(r, -ENOENT, "no such route: %s %s", r->method, r->url);
	r->route = found;

	const char *sk = http_header(r, "X-Session-Key");
	if (sk) {
		size_t n = strlen(sk);
		if (!session_key_ok(sk, n))
			return http_fail(r, -EINVAL, "X-Session-Key must be 1 to 512 printable bytes");
		r->session_key = xstrndup(sk, n);
		r->session_key_len = n;
	} else {
		r->session_key = xstrdup("default");
		r->session_key_len = 7;
	}

	bool is_public =
	    (found->flags & RF_PUBLIC) || ((found->flags & RF_METRICS) && r->env->cfg->metrics_public);
	if (!is_public) {
		int rc = authenticate(r);
		if (rc < 0)
			return rc;
		rc = authorise(r);
		if (rc < 0)
			return rc;
	}
	/* A streaming body goes to r->on_upload from its first byte: the
	 * route sets that up now, after authentication, before the body (and
	 * a transfer token names the tenant whose pool queue its work joins). */
	if (found->begin)
		return found->begin(r);
	return 0;
}

int http_body(struct http_req *r, const char *data, size_t len)
{
	struct http_req_core *c = http_req_core_of(r);
	r->bytes_in += (int64_t)len;
	if (c->body_too_large)
		return 0;
	if (r->route && (r->route->flags & RF_STREAM_IN) && r->on_upload)
		return r->on_upload(r, data, len);
	if (!r->route || !(r->route->flags & (RF_JSON | RF_JSON_OPT | RF_RAW))) {
		/* A body where none is expected: keep reading (bounded) and ignore. */
		if (r->bytes_in > 65536) {
			c->body_too_large = true;
			return http_fail(r, -E2BIG, "this route takes no body");
		}
		return 0;
	}
	if (buf_append(&r->body, data, len) < 0) {
		c->body_too_large = true;
		buf_free(&r->body);
		return http_fail(r, -E2BIG, "request body over the limit of %zu bytes", r->body.max);
	}
	return 0;
}

/* An RF_NOWAIT route's handler, run here in no-wait mode: true when it
 * finished (answered or failed for a reason of its own), false when a
 * step would have waited for the disk; then nothing was answered, what
 * the failed run left is cleared, and the route must run on the pool. */
static bool run_nowait(struct http_req *r, int *rc)
{
	nowait_begin();
	*rc = r->route->handler(r);
	if (!nowait_end() || r->status) /* r->status: a reply was queued after all */
		return true;
	free(r->error_msg);
	r->error_msg = NULL;
	r->error_code = NULL;
	json_decref(r->error_details);
	r->error_details = NULL;
	*rc = 0;
	return false;
}

int http_run(struct http_req *r)
{
	if ((r->route->flags & RF_JSON) || ((r->route->flags & RF_JSON_OPT) && r->body.len)) {
		json_error_t jerr;
		if (r->body.len == 0)
			return http_fail(r, -EINVAL, "a JSON object body is required");
		r->json = json_loadb(r->body.ptr, r->body.len, JSON_REJECT_DUPLICATES, &jerr);
		if (!r->json)
			return http_fail(r, -EINVAL, "bad JSON at line %d column %d: %s", jerr.line,
					 jerr.column, jerr.text);
		if (!json_is_object(r->json))
			return http_fail(r, -EINVAL, "the body must be a JSON object");
	}
	r->ran = true;
	if ((r->route->flags & RF_POOL) && r->env->pool) {
		int rc = 0;
		if ((r->route->flags & RF_NOWAIT) && run_nowait(r, &rc)) {
			http_pool_count_inline(r->env->pool);
			return rc;
		}
		http_pool_submit(r->env->pool, r); /* answered on resume */
		return 0;
	}
	return r->route->handler(r);
}

/* RFC 6750's challenge; on RF_RESOURCE_META routes with the URL of the
 * route's protected-resource metadata (RFC 9728 section 5.1), so that a
 * client (an MCP client) finds out how to authenticate. */
static void www_authenticate(struct http_req *r, struct http_response *resp)
{
	char base[300], v[700];
	if (r->route && (r->route->flags & RF_RESOURCE_META) && http_base_url(r, base, sizeof base) &&
	    (size_t)snprintf(v, sizeof v,
			     "Bearer error=\"invalid_token\", resource_metadata=\"%s/.well-known/"
			     "oauth-protected-resource%s\"",
			     base, r->route->pattern) < sizeof v)
		http_response_header(resp, "WWW-Authenticate", v);
	else
		http_response_header(resp, "WWW-Authenticate", "Bearer error=\"invalid_token\"");
}

int http_render_error(struct http_req *r, int code)
{
	struct http_req_core *c = http_req_core_of(r);
	struct http_wire_error w = http_wire_error(code);
	const char *wcode = r->error_code ? r->error_code : w.code;
	json_t *hint = w.retry_hint ? json_string(w.retry_hint) : json_null();
	json_t *body = json_pack("{s:{s:s, s:s, s:o}}", "error", "code", wcode, "message",
				 r->error_msg ? r->error_msg : wcode, "retry_hint", hint);
	if (body && r->error_details)
		json_object_set(json_object_get(body, "error"), "details", r->error_details);
	if (r->envelope && body) /* carried inside the handler's protocol, as its answers are */
		return http_reply_json(r, w.status, body);
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text) /* never unanswered: the code alone (static ASCII) */
		text = xasprintf("{\"error\":{\"code\":\"%s\",\"message\":\"%s\",\"retry_hint\":null}}",
				 wcode, wcode);
	struct http_response *resp = http_json_response(r, text);
	if (!resp)
		return -ENOMEM;
	if (w.status == 401)
		www_authenticate(r, resp);
	if (w.status == 405 && c->allow)
		http_response_header(resp, "Allow", c->allow);
	if (w.status == 416 && c->content_range[0])
		http_response_header(resp, "Content-Range", c->content_range);
	if (w.status == 429 || w.status == 503) {
		char ra[24];
		snprintf(ra, sizeof ra, "%lld", (long long)(r->retry_after_s > 0 ? r->retry_after_s : 1));
		http_response_header(resp, "Retry-After", ra);
	}
	if (w.status == 413 || w.status == 400)
		http_response_header(resp, "Connection", "close");
	return http_reply_response(r, w.status, resp);
}

static const char *outcome_for(int status)
{
	if (status >= 200 && status < 300)
		return "ok";
	if (status == 401 || status == 403)
		return "denied";
	return "error";
}

/* Whether the audit row and log line name r->claims.tenant. */
static bool names_tenant(const struct http_req *r)
{
	return r->authed || r->audit_tenant;
}

static void log_line(struct http_req *r, double ms, const char *route)
{
	/* A capability in the path (/fs/stream/{token}) stays out of the log:
	 * the route pattern is logged instead. */
	bool secret_path = r->route && (r->route->flags & RF_PUBLIC) && strstr(r->route->pattern, "{token}");
	/* Unrouted (405, or a 404 whose message quotes the path) under the
	 * stream prefix: the token is in there all the same. */
	bool secret_unrouted = !r->route && strncmp(r->url, "/fs/stream/", 11) == 0;
	/* The path arrives percent-decoded: any bytes (jansson wants UTF-8). */
	size_t pn = 0;
	char *path = secret_path       ? xstrdup(route)
		     : secret_unrouted ? xstrdup("/fs/stream/{token}")
				       : utf8_sanitize(r->url, strlen(r->url), &pn);
	json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:f, s:I, s:I, s:s}", "ts", "", "request_id",
			      r->request_id, "method", r->method, "path", path, "route", route, "status",
			      r->status, "duration_ms", ms, "bytes_in", (json_int_t)r->bytes_in, "bytes_out",
			      (json_int_t)r->bytes_out, "tenant", names_tenant(r) ? r->claims.tenant : "");
	char ts[40];
	rfc3339_ms(now_ms(), ts, sizeof ts);
	json_object_set_new(j, "ts", json_string(ts));
	if (r->error_msg && !secret_unrouted)
		json_object_set_new(j, "error", json_string(r->error_msg));
	if (r->log_detail)
		json_object_set_new(j, "detail", json_string(r->log_detail));
	char *t = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
	if (t)
		log_line_write(t, strlen(t));
	free(t);
	json_decref(j);
	free(path);
}

/* Probes (and /metrics when public) are polled every few seconds by
 * machines: sandboxd_http_requests_total counts them, and an audit row
 * each would flood the table. */
static bool is_probe(const struct http_req *r)
{
	if (!r->route)
		return false;
	unsigned f = r->route->flags;
	return (f & RF_PROBE) || ((f & RF_METRICS) && r->env->cfg->metrics_public);
}

/* Whether this request's audit row is written. A request that names no
 * tenant is anyone's to send: its rows are rate-limited per address. */
static bool audit_wanted(struct http_req *r)
{
	if (is_probe(r))
		return false;
	if (names_tenant(r))
		return true;
	if (http_audit_gate_take(r->env->audit_gate, r->client, mono_ns() / 1000000))
		return true;
	http_metrics_audit_suppressed(r->env->metrics);
	return false;
}

void http_complete(struct http_req *r, bool ok)
{
	double ms = (double)(mono_ns() - http_req_core_of(r)->started_ns) / 1e6;
	const char *route = r->route ? r->route->pattern : "unmatched";
	if (r->status == 0)
		r->status = ok ? 200 : 499; /* 499: the client went away before an answer */
	r->completed_ok = ok;
	if (r->on_free)
		r->on_free(r);

	/* Refused before its handler ran: the audit still says what was
	 * asked for, where the request names it in its query. */
	if (!r->target && !r->ran && r->route) {
		size_t n = 0;
		const char *p = http_query_n(r, "path", &n);
		if (p)
			http_set_target_raw(r, p, n);
	}
	const struct http_hooks *hk = &r->env->hooks;
	int audited = r->audit_status ? r->audit_status : r->status; /* an envelope's answer: its own */
	if (audit_wanted(r) && hk->audit(hk->ctx, r, route, outcome_for(audited), ms) < 0)
		http_metrics_audit_failure(r->env->metrics);
	http_metrics_request(r->env->metrics,
			     r->route ? (size_t)(r->route - r->env->routes) : r->env->nroutes, r->status, ms);
	if (r->env->cfg->log_requests)
		log_line(r, ms, route);

	if (r->tenant)
		hk->tenant_put(hk->ctx, &r->tenant);
	http_req_free(r);
}

void http_req_free(struct http_req *r)
{
	struct http_req_core *c = http_req_core_of(r);
	free_params(r);
	/* made by a worker, never queued: the client left */
	http_response_free(&c->deferred);
	if (r->stash_free)
		r->stash_free(r->stash);
	if (r->envelope_free)
		r->envelope_free(r->envelope_ctx);
	json_decref(r->json);
	buf_free(&r->body);
	free(r->url);
	free(r->session_key);
	free(r->session_rel);
	free(r->error_msg);
	json_decref(r->error_details);
	free(c->allow);
	free(r->target);
	free(c);
}
