#pragma once
/* The per-request context (libmicrohttpd's *con_cls), freed only in the
 * completion callback, and the helpers handlers answer with. A handler
 * returns 0 after queueing a response with one of the reply_* helpers (or
 * after suspending its connection), or a negative errno / -SBX_E_* after
 * http_fail(): only the dispatcher renders error bodies. The handler of
 * an RF_POOL route runs on a pool worker (http/pool.h): the reply helpers
 * then keep the response for the event thread, and the handler must not
 * suspend. The HTTP layer's own per-request state is in http/req_int.h. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth/auth.h"
#include "common/buf.h"

struct app;
struct http_env;
struct tenant;
struct http_route;
struct http_req;
struct http_response;

#define REQ_MAX_PARAMS 2

/* Handlers of a suspended request (exec, events, streams) set these. */
typedef int (*http_resume_fn)(struct http_req *r); /* called when the connection is resumed */
typedef int (*http_upload_fn)(struct http_req *r, const char *data, size_t len); /* streaming body */
typedef void (*http_free_fn)(struct http_req *r); /* completion: free handler state */
/* A protocol that carries the routes' answers inside its own answer (POST
 * /mcp's JSON-RPC, routes/mcp.c): the answer a route's code gives (status
 * and JSON body, stolen) goes in, the body to send with 200 comes out
 * (NULL: 202 without a body). */
typedef json_t *(*http_envelope_fn)(struct http_req *r, int status, json_t *body);

/* What a handler reads and sets. The HTTP layer allocates it (as the
 * first member of its own per-request state, http/req_int.h) and frees it
 * at completion; a handler never makes one. */
struct http_req {
	struct http_env *env; /* the HTTP layer's (its pool: http_pool_then) */
	struct app *app;      /* the routes' (env->app) */
	char request_id[72];
	char method[12];
	char *url; /* path without query, owned */
	int64_t at_ms;
	char client[64];

	/* routing and auth */
	const struct http_route *route;
	const char *params[REQ_MAX_PARAMS]; /* captured {x} segments, owned */
	struct auth_claims claims;
	bool authed;
	bool audit_tenant;     /* not authed, but claims.tenant and session_key name the tenant
				  and session the audit row belongs to (transfer-token routes) */
	struct tenant *tenant; /* referenced while the request lives */
	char *session_key;     /* X-Session-Key or "default", owned */
	size_t session_key_len;
	char *session_rel; /* "sessions/<segment>", after route_session() */

	/* request body */
	struct buf body; /* buffered bodies (JSON or raw) */
	json_t *json;	 /* parsed JSON body for JSON routes */
	int64_t bytes_in;
	bool ran; /* the handler ran */

	/* reply and errors */
	int status; /* of the response queued; 0: none yet */
	int64_t bytes_out;
	char *error_msg;	/* set by http_fail */
	const char *log_detail; /* static text for the log line only, never the client */
	const char *error_code; /* wire code override, e.g. "token_used" */
	json_t *error_details;	/* owned: rendered as error.details (e.g. a quota's usage) */
	int64_t retry_after_s;	/* Retry-After of a 429 or 503; 0: 1 */
	bool completed_ok;	/* set before on_free: the response went out whole */

	/* audit extras */
	char *target;
	bool has_exit_code;
	int exit_code;
	bool oom_killed, pids_limited, uncontained; /* why the command it ran ended */
	char exec_id[72]; /* the exec it ran (POST /exec): joins its egress records; "" none */
	int audit_status; /* the status of the answer an envelope carried (audited); 0: r->status */

	/* handler state for suspended / streaming requests */
	void *hstate;
	http_resume_fn on_resume;
	http_upload_fn on_upload;
	http_free_fn on_free;
	bool hang_up; /* set by on_resume when no one is left to answer: the
			 connection is closed at once, not left to its idle timeout */

	/* Set by a handler that runs other routes' code inside its own
	 * protocol (routes/mcp.c): every JSON answer and error rendered for r
	 * (http_reply_json, http_reply_text, http_render_error) is handed to
	 * envelope, once, and what it returns is sent instead. envelope_ctx is
	 * its state, freed with envelope_free at completion. */
	http_envelope_fn envelope;
	void *envelope_ctx;
	void (*envelope_free)(void *ctx);

	/* What a handler's pool part left for its next part (http_pool_then),
	 * owned: freed with stash_free at completion unless a part took it. */
	void *stash;
	void (*stash_free)(void *stash);
};

/* Record an error for the dispatcher to render; returns code (negative). */
int http_fail(struct http_req *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* http_fail for a Range that starts past the end of a file of size bytes:
 * 416 with "Content-Range: bytes * /size" (RFC 9110). Returns -ERANGE. */
int http_fail_range(struct http_req *r, uint64_t size);

/* Headers and query. */
const char *http_header(struct http_req *r, const char *name);
const char *http_query(struct http_req *r, const char *name);
/* The same with the value's length: a decoded %00 stays in the value
 * (http_query would cut it there), so paths can refuse it. NULL if absent. */
const char *http_query_n(struct http_req *r, const char *name, size_t *len);
/* Query parameter as an integer in [lo, hi]; def when absent. -EINVAL (with http_fail) when bad. */
int http_query_int(struct http_req *r, const char *name, int64_t def, int64_t lo, int64_t hi, int64_t *out);
bool http_query_bool(struct http_req *r, const char *name);

/* The socket of r's client, to watch for a hang-up (http/watch.h), or -1
 * when the connection has none. Read only; the connection owns it. */
int http_client_fd(struct http_req *r);

/* Set the audit target to what the client asked for, as it was (bounded
 * to 1 KiB, a NUL spelled "\\0", made valid UTF-8): a refused path must
 * say what it tried. */
void http_set_target_raw(struct http_req *r, const char *wire, size_t len);
/* Set the audit target (copied). */
void http_set_target(struct http_req *r, const char *target);
/* The audit extras of a request that ran a command, from its ShellResult:
 * its exit code and why it ended (oom_killed, pids_limited, uncontained). */
void http_set_exec_result(struct http_req *r, const json_t *result);

/* Responses. Each queues the response, records status and bytes, and
 * returns 0 (or -EIO when libmicrohttpd refuses). Common headers
 * (X-Request-Id, Cache-Control) are added for every response. */
int http_reply_json(struct http_req *r, int status, json_t *body); /* steals body */
/* An application/json response of text (taken: freed with the response,
 * or here when none can be made, then NULL); its bytes are counted. */
struct http_response *http_json_response(struct http_req *r, char *text);
int http_reply_static(struct http_req *r, int status, const char *content_type, const void *p, size_t n);
/* 200-class text/plain; charset=utf-8 of data (taken, len bytes); inside
 * an envelope, the JSON {"text": data} instead (data must be UTF-8). */
int http_reply_text(struct http_req *r, int status, char *data, size_t len);
/* "http(s)://host[:port]" of this server as the request reached it (its
 * Host header, checked to be a host name or address; the scheme from the
 * TLS configuration), into out; false when Host is absent or unusable. */
bool http_base_url(struct http_req *r, char *out, size_t outsz);
/* Queue resp (http/response.h) with status; destroys resp, and answers
 * -ENOMEM for a NULL one (a constructor that failed). */
int http_reply_response(struct http_req *r, int status, struct http_response *resp);
void http_reply_common_headers(struct http_req *r, struct http_response *resp);

/* Suspend the connection until http_resume() (thread-safe; once). */
void http_suspend(struct http_req *r);
void http_resume(struct http_req *r);
