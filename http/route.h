#pragma once
/* The dispatcher (http/router.c): matches a request against a route table
 * of {method, pattern, scope, flags, handler, begin} that the program
 * gives it (sandboxd's is routes/table.c; the matching itself is
 * http/match.c), authenticates, checks scopes, parses JSON bodies and
 * renders errors; only it does. http/daemon.c calls the http_begin ...
 * http_complete entry points below. It knows nothing of the routes'
 * state: what it needs of it (tenants' keys, the audit trail) it asks
 * through hooks. */
#include <stdbool.h>
#include <stddef.h>

#include "auth/auth.h"
#include "http/req.h"

enum http_route_flags {
	RF_PUBLIC = 1u << 0,	 /* no Authorization */
	RF_JSON = 1u << 1,	 /* buffered JSON object body */
	RF_RAW = 1u << 2,	 /* buffered raw body (max_buffered_bytes) */
	RF_STREAM_IN = 1u << 3,	 /* body handed to r->on_upload as it arrives */
	RF_SSE = 1u << 4,	 /* event stream: ?access_token= accepted */
	RF_ADMIN_ONLY = 1u << 5, /* needs the admin scope (operator tenants) */
	RF_SESSION = 1u << 6,	 /* audit the session key */
	RF_METRICS = 1u << 7,	 /* public when metrics_public */
	RF_PROBE = 1u << 8,	 /* health probe: counted in metrics, never audited */
	RF_JSON_OPT = 1u << 9,	 /* like RF_JSON, but the body may be empty (r->json NULL) */
	RF_POOL = 1u << 10,	 /* blocking work: the handler runs on the worker pool (http/pool.h) */
	RF_NOWAIT = 1u << 11,	 /* RF_POOL, read-only: first tried on the event thread in no-wait
				    mode (common/nowait.h), on the pool only when that would wait */
	RF_TAIL = 1u << 12,	 /* the last {x} takes the rest of the path: '/'s included, may be empty */
	RF_RESOURCE_META =
	    1u << 13,		 /* a 401 names the RFC 9728 metadata (WWW-Authenticate
				    resource_metadata="<base>/.well-known/oauth-protected-resource<pattern>") */
	RF_WORKSPACE = 1u << 14, /* needs the tenant's workspace on this server: the program's
				    tenant_admit refuses it for a tenant served elsewhere */
};

typedef int (*http_handler)(struct http_req *r);

struct http_route {
	const char *method;
	const char *pattern; /* "/exec/{id}/cancel" */
	unsigned scope;	     /* any of these scope bits suffices; 0: none */
	unsigned flags;
	http_handler handler;
	/* Run at the end of http_begin, on the event thread, once the request
	 * is authenticated and authorised and before any body byte arrives:
	 * RF_STREAM_IN routes set r->on_upload / r->on_free / r->hstate; any
	 * route may name the tenant its pool work is queued under (a transfer
	 * token's). A negative code is answered like any http_begin error.
	 * NULL: none. Rows written without it leave it zero. */
	http_handler begin;
};

struct tenant; /* the program's tenant: opaque here, held for the request */
struct sbx_config;
struct http_metrics;
struct http_audit_gate;
struct http_pool;

/* What the HTTP layer asks of the program that serves routes through it. */
struct http_hooks {
	void *ctx;
	/* Take a reference to tenant `name` into *t and copy its verification
	 * key (which stays valid while *t is held). 0, -ENOENT, other -errno. */
	int (*tenant_get)(void *ctx, const char *name, struct tenant **t, struct auth_key *key);
	void (*tenant_put)(void *ctx, struct tenant **t);
	/* Once the token is verified: 0 to serve the tenant, or a negative
	 * code with why (shown to the client) when the program will not (its
	 * uid mode cannot give it a uid of its own, or it cannot serve route
	 * rt for it). NULL: always served. */
	int (*tenant_admit)(void *ctx, struct tenant *t, const struct http_route *rt, char *why,
			    size_t whysz);
	/* Record a finished request in the audit trail (r->status, bytes,
	 * target... are final; route is the pattern or "unmatched"). */
	int (*audit)(void *ctx, const struct http_req *r, const char *route, const char *outcome, double ms);
};

/* Everything a request reaches in this layer; lives as long as the server. */
struct http_env {
	const struct sbx_config *cfg;
	const struct http_route *routes; /* the route table */
	size_t nroutes;
	struct http_metrics *metrics;
	struct http_audit_gate *audit_gate;
	struct http_pool *pool; /* runs RF_POOL handlers; NULL: they run inline */
	struct http_hooks hooks;
	struct app *app;	       /* handed to handlers as r->app; opaque here */
	struct auth_cache *auth_cache; /* tokens verified before; made and freed by http_daemon_start/stop */
};

/* The first route of routes[0..n) for method and path (HEAD: GET's, when
 * no HEAD route has the path) into *found, and what its {x} segments
 * captured into params[0..REQ_MAX_PARAMS) (owned: the caller frees them).
 * -ENOENT when no route has the path; -SBX_E_METHOD when routes of other
 * methods have it, their methods then in allow (", "-separated, for a
 * 405's Allow). The path is matched as it is given (libmicrohttpd has
 * percent-decoded it): bytewise, a trailing '/' only where the pattern
 * has one, and a {x} never empty (but RF_TAIL's last may be). No
 * connection needed (http/match.c). */
int http_route_match(const struct http_route *routes, size_t n, const char *method, const char *path,
		     const struct http_route **found, const char **params, char *allow, size_t allowsz);

/* The entry points http/daemon.c calls for each request. */
/* Called once headers are in: refuse an ambiguous framing, match,
 * authenticate, authorise, then the route's begin. Returns 0 to go on, or
 * a negative code after which http_render_error answers. */
int http_begin(struct http_req *r);
/* Body bytes as they arrive. 0, or negative (error rendered at the end). */
int http_body(struct http_req *r, const char *data, size_t len);
/* The body is complete: parse and run the handler. */
int http_run(struct http_req *r);
/* Render r->error_* (or code) as wire.md's JSON error and queue it. */
int http_render_error(struct http_req *r, int code);
/* Completion: audit, metrics, log line, free. */
void http_complete(struct http_req *r, bool ok);
