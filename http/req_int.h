#pragma once
/* The HTTP layer's own part of a request: what http/ keeps per request
 * and a handler never reads or sets (the connection, the refusal of a
 * body, the headers of particular errors, the worker pool's bookkeeping,
 * the reply a worker kept). Only http/ includes this header (and the
 * fake requests of the unit tests, tests/unit/http_fake.h).
 *
 * struct http_req (http/req.h) is the first member of struct
 * http_req_core, and http/daemon.c allocates the core: one allocation per
 * request, as before, no pointer from the handler's view to keep right,
 * and the core is found from r at a constant offset (http_req_core_of).
 * An opaque pointer in struct http_req would have cost a second
 * allocation, or a pointer into the same one, for nothing. So every
 * struct http_req the layer is handed must be the req of a core: never
 * one of a handler's own. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/fairq.h"
#include "http/req.h"

struct MHD_Connection;
struct http_response;
struct http_req_fake;

struct http_req_core {
	struct http_req req; /* what the handlers see; first */
	/* libmicrohttpd's connection; NULL for a fake request (a unit test's,
	 * no socket), which fake answers instead. */
	struct MHD_Connection *conn;
	struct http_req_fake *fake;
	int64_t started_ns; /* monotonic: the request's duration */
	bool suspended;	    /* http_suspend ran; the next callback is its resume */

	/* refused requests (http/daemon.c, http/router.c) */
	bool body_too_large;
	int pending_error; /* refused before a body-less request ended */
	bool refuse_now;   /* answer pending_error before reading any body (and close) */

	/* headers of particular errors (http_render_error) */
	char *allow;		/* Allow header for 405, owned */
	char content_range[48]; /* Content-Range of a 416, "bytes * /size" */

	/* work handed to the pool (http/pool.c; RF_POOL routes, http_pool_then) */
	struct http_fairq_item pool_item;
	int pool_state;			/* http/pool.c's */
	int pool_rc;			/* the handler's return, or the refusal */
	int64_t pool_enq_ns;		/* when it was queued */
	http_resume_fn pool_work;	/* the blocking part a handler handed over (http_pool_then);
					   NULL: the route's handler */
	http_resume_fn pool_then;	/* its next part, on the event thread, once pool_work returned 0 */
	bool defer;			/* a worker runs the handler: replies are kept, not queued */
	struct http_response *deferred; /* the kept reply */
	int deferred_status;
};

static inline struct http_req_core *http_req_core_of(struct http_req *r)
{
	return (struct http_req_core *)((char *)r - offsetof(struct http_req_core, req));
}

/* What a request without a connection answers with instead of
 * libmicrohttpd (the unit tests' fake requests): embedded in the test's
 * own state, which these are handed. */
struct http_req_fake {
	/* A request header (header true; names case-insensitive) or query
	 * argument named name (a string: no NUL inside); NULL when absent. */
	const char *(*value)(struct http_req_fake *f, bool header, const char *name);
	/* The len bytes of a reply's body, when the reply has them as bytes
	 * (JSON, text, static); counted in bytes_out as they are given. */
	void (*body)(struct http_req_fake *f, const void *p, size_t len);
	/* http_suspend / http_resume of the request (resume: any thread). */
	void (*suspend)(struct http_req_fake *f);
	void (*resume)(struct http_req_fake *f);
};

/* Queue the reply a handler made on a pool worker (the core's deferred);
 * event thread, on resume. 0 or -EIO. */
int http_reply_deferred(struct http_req *r);

/* Free what r owns and r itself (its core), without the completion's
 * audit, metrics, log line or tenant reference (http_complete does those
 * first). */
void http_req_free(struct http_req *r);
