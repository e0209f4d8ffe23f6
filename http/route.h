#pragma once
/* The route table and the dispatcher (routes/router.c). One static const
 * table of {method, pattern, scope, flags, handler}; only the dispatcher
 * answers 404/405, authenticates, checks scopes, parses JSON bodies and
 * renders errors. server/http.c calls the route_* entry points. */
#include <stdbool.h>
#include <stddef.h>

#include "http/req.h"

enum route_flags {
	RF_PUBLIC = 1u << 0,      /* no Authorization */
	RF_JSON = 1u << 1,        /* buffered JSON object body */
	RF_RAW = 1u << 2,         /* buffered raw body (max_buffered_bytes) */
	RF_STREAM_IN = 1u << 3,   /* body handed to r->on_upload as it arrives */
	RF_SSE = 1u << 4,         /* event stream: ?access_token= accepted */
	RF_ADMIN_ONLY = 1u << 5,  /* needs the admin scope (operator tenants) */
	RF_SESSION = 1u << 6,     /* audit the session key */
	RF_METRICS = 1u << 7,     /* public when metrics_public */
	RF_PROBE = 1u << 8,       /* health probe: counted in metrics, never audited */
};

typedef int (*route_handler)(struct req *r);

struct route {
	const char *method;
	const char *pattern;      /* "/exec/{id}/cancel" */
	unsigned scope;           /* any of these scope bits suffices; 0: none */
	unsigned flags;
	route_handler handler;
	/* RF_STREAM_IN routes: run at the end of route_begin, once the request
	 * is authenticated and authorised and before any body byte arrives, to
	 * set r->on_upload / r->on_free / r->hstate (or refuse: a negative code
	 * is answered like any route_begin error). NULL: none. Rows written
	 * without it leave it zero. */
	route_handler begin;
};

extern const struct route route_table[];
extern const size_t route_count;

/* server/http.c entry points. */
/* Called once headers are in: match, authenticate, authorise. Returns 0
 * to go on, or a negative code after which route_render_error answers. */
int route_begin(struct req *r);
/* Body bytes as they arrive. 0, or negative (error rendered at the end). */
int route_body(struct req *r, const char *data, size_t len);
/* The body is complete: parse and run the handler. */
int route_run(struct req *r);
/* Render r->error_* (or code) as wire.md's JSON error and queue it. */
int route_render_error(struct req *r, int code);
/* Completion: audit, metrics, log line, free. */
void route_complete(struct req *r, bool ok);

/* Handlers, one file per family. */
int route_healthz(struct req *r);
int route_readyz(struct req *r);
int route_metrics(struct req *r);
int route_openapi(struct req *r);
int route_dashboard(struct req *r);
