#pragma once
/* What the files of libsandboxd share: one request engine (core.c) that
 * every method goes through, so that deadlines, cancellation, retries and
 * error parsing live in one place. Not installed. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "client/sandboxd.h"
#include "common/buf.h"

/* One request as a method describes it. Strings are borrowed. */
struct creq {
	const char *method;	    /* GET, PUT, POST */
	const char *path;	    /* "/fs/read" */
	struct buf *query;	    /* "a=b&c=d" already escaped, or NULL */
	const char *const *headers; /* extra "Name: value" lines, NULL-terminated, or NULL */
	/* A buffered body (sent as is, with its content type), or ... */
	const void *body;
	size_t body_len;
	const char *content_type;
	/* ... a streamed one (PUT with Expect: 100-continue). */
	sbxc_source_fn source;
	void *source_arg;
	int64_t source_size; /* -1: chunked */
	/* A 2xx answer's body goes to sink instead of being buffered. */
	sbxc_sink_fn sink;
	void *sink_arg;
	/* Safe to repeat after the request may have reached the server. */
	bool idempotent;
	/* A stream with no end in sight: no total timeout for the attempt,
	 * but a low-speed limit of idle_ms (0: none). */
	bool open_ended;
	long idle_ms;
	/* Retry 429/503 and refused connections (false: one attempt). */
	bool retry;
};

/* A sink or source may return this to pause the transfer until
 * sbxc__xfer_unpause (the reader and the writer do). */
#define SBXC__PAUSE 0x7ffffff1

/* What came back. body holds a non-2xx answer's body, or a 2xx one when
 * no sink was given. */
struct cresp {
	long status;
	struct buf body;
	char content_type[128];
	bool delivered;	  /* the sink got at least one byte */
	bool source_read; /* the source was asked for bytes */
};

/* Runs the request with the call's deadline, cancel and retries; fills
 * err. 0 for a 2xx answer, else the negative errno described in
 * sandboxd.h. resp is always initialised; free it with cresp_free. */
int sbxc__do(struct sbxc *h, const struct sbxc_call *c, const struct creq *q, struct cresp *resp,
	     struct sbxc_err *err);
void cresp_free(struct cresp *r);

/* The same engine driven by its owner, for the reader and the writer:
 * open starts the first attempt; step runs it for at most wait_ms and
 * says whether it is still running (1) or ended (0); outcome, once ended,
 * is its result, or 1 when a retry was due and has been started (after
 * its wait); close ends everything (a transfer not done is cut, which
 * tells the server). */
struct sbxc__xfer;
int sbxc__xfer_open(struct sbxc *h, const struct sbxc_call *c, const struct creq *q, struct cresp *resp,
		    struct sbxc__xfer **out, struct sbxc_err *err);
int sbxc__xfer_step(struct sbxc__xfer *x, int wait_ms);
int sbxc__xfer_outcome(struct sbxc__xfer *x, struct sbxc_err *err);
/* The status of the answer so far (0 before its head). */
long sbxc__xfer_status(struct sbxc__xfer *x);
/* The answer's Content-Length, or -1. */
int64_t sbxc__xfer_length(struct sbxc__xfer *x);
void sbxc__xfer_unpause(struct sbxc__xfer *x);
void sbxc__xfer_close(struct sbxc__xfer **x);
/* The same for a JSON answer: *out a new reference (NULL on failure). A
 * 2xx answer that is not JSON is -EPROTO. */
int sbxc__json(struct sbxc *h, const struct sbxc_call *c, const struct creq *q, json_t **out,
	       struct sbxc_err *err);
/* POST a JSON body (reference taken; NULL: -EINVAL, a required argument
 * was NULL) to route, retried on 429/503; *out (may be NULL: dropped) the
 * answer. GET route?q (q may be NULL) as an idempotent read. */
int sbxc__post_json(struct sbxc *h, const struct sbxc_call *c, const char *route, json_t *body, json_t **out,
		    struct sbxc_err *err);
int sbxc__get_json(struct sbxc *h, const struct sbxc_call *c, const char *route, struct buf *q, json_t **out,
		   struct sbxc_err *err);
/* A JSON body for a creq (the caller frees the text). */
char *sbxc__dump(json_t *o);

/* Append "&name=value" (the '&' only when query is not empty), value
 * percent-encoded. value NULL: nothing. */
void sbxc__q(struct buf *query, const char *name, const char *value);
void sbxc__qi(struct buf *query, const char *name, long long value);

/* Local failures into err (status 0). Returns rc. */
int sbxc__fail(struct sbxc_err *err, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A millisecond deadline of the call (INT64_MAX: none) and the cancel
 * object's fd (-1: none), for code that waits outside sbxc__do. */
int64_t sbxc__now_ms(void);
int64_t sbxc__deadline(struct sbxc *h, const struct sbxc_call *c, bool open_ended);
/* The handle's max_retries (0: none). */
int sbxc__max_retries(const struct sbxc *h);
/* Wait ms or until c's cancel fires: 0, or -ECANCELED. */
int sbxc__sleep(const struct sbxc_call *c, long ms);

/* JSON readers that tolerate a missing or ill-typed member. */
char *sbxc__jstrdup(json_t *o, const char *key); /* NULL when absent */
void sbxc__jcopy(json_t *o, const char *key, char *dst, size_t dstsz);
int64_t sbxc__jint(json_t *o, const char *key, int64_t dflt);
bool sbxc__jbool(json_t *o, const char *key);
/* ShellResult JSON into r (zeroed first). */
void sbxc__result_from(json_t *o, struct sbxc_result *r);
/* RFC 3339 (UTC, "Z" or an offset) to epoch seconds; -1 if unreadable. */
int64_t sbxc__time(const char *s);
/* The milliseconds of an RFC 3339 time's fraction ("...:05.123Z": 123). */
int sbxc__time_frac_ms(const char *s);
enum sbxc_type sbxc__type(const char *s);
/* An exec id as the server accepts it: [A-Za-z0-9_-]{1,64} (it goes into
 * a URL path). */
bool sbxc__id_ok(const char *id);
/* The `tenant` claim of a JWT, read without verifying it (the server
 * does), for X-Tenant-Id; NULL when there is none. */
char *sbxc__token_tenant(const char *token);

/* An incremental server-sent-events parser (the WHATWG rules the server's
 * events need: fields id, event, data; comments; \n or \r\n lines). One
 * per connection; last_id survives across them (the caller copies it). */
struct sse {
	struct buf line, data;
	char id[128], name[64], last_id[128];
	bool has_id; /* this event carried an id */
	int stopped; /* on_event asked to stop */
	sbxc_event_fn on_event;
	void *arg;
};
void sse_init(struct sse *s, sbxc_event_fn fn, void *arg, size_t max_event);
/* A sbxc_sink_fn over struct sse. */
int sse_feed(void *arg, const void *p, size_t n);
void sse_free(struct sse *s);
