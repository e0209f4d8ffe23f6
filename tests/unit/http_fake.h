#pragma once
/* Fake requests for unit tests: a struct http_req with no connection and
 * no socket, on which the handlers' helpers work as on a real one
 * (http_fail, http_reply_json and the other replies, http_header,
 * http_query*, http_suspend / http_resume, http_client_fd, which says -1),
 * and a test reads what was answered: r->status, r->error_msg, the body
 * (http_req_fake_body). Responses are still made (libmicrohttpd's
 * response objects, no daemon), then destroyed instead of queued.
 *
 *	struct http_req *r = http_req_fake_new(app, "POST", "/exec?wait=1");
 *	http_req_fake_header(r, "X-Session-Key", "s1");
 *	r->tenant = my_tenant;               // the test's; never put
 *	http_req_fake_answer(r, handler(r)); // renders an error as the daemon does
 *	assert_int_equal(r->status, 202);
 *	http_req_fake_free(r);               // on_free, then everything r owns
 *
 * r->env is NULL unless the test sets one (the router's tests give it a
 * route table). The query is split from the URL as given, not
 * percent-decoded, and "?name" without '=' reads as "". Headers of the
 * reply (Allow, Retry-After) are not recorded; the core's allow and
 * content_range say what they would be. Single-threaded, except resumes,
 * which any thread may count. Header-only (static inline): each test
 * executable stays one .c file. Include after <cmocka.h>. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/req_int.h"
#include "http/route.h"

#define HTTP_FAKE_VALUES 16

struct http_fake_req {
	struct http_req_core core; /* first: freed with it */
	struct http_req_fake ops;  /* core.fake */
	char *query;		   /* the URL's query, split in place */
	const char *q[HTTP_FAKE_VALUES][2];
	size_t nq;
	char *h[HTTP_FAKE_VALUES][2];
	size_t nh;
	char *body; /* the last reply's body, NUL-terminated; NULL: none */
	size_t body_len;
	int suspends;
	atomic_int resumes;
};

static inline struct http_fake_req *http_fake_of(struct http_req *r)
{
	return (struct http_fake_req *)http_req_core_of(r);
}

static inline struct http_fake_req *http_fake_from_ops(struct http_req_fake *ops)
{
	return (struct http_fake_req *)((char *)ops - offsetof(struct http_fake_req, ops));
}

static inline const char *http_fake_value(struct http_req_fake *ops, bool header, const char *name)
{
	struct http_fake_req *f = http_fake_from_ops(ops);
	const char *v = NULL;
	for (size_t i = 0; header && !v && i < f->nh; i++)
		if (strcasecmp(f->h[i][0], name) == 0)
			v = f->h[i][1];
	for (size_t i = 0; !header && !v && i < f->nq; i++)
		if (strcmp(f->q[i][0], name) == 0)
			v = f->q[i][1];
	return v;
}

static inline void http_fake_body(struct http_req_fake *ops, const void *p, size_t len)
{
	struct http_fake_req *f = http_fake_from_ops(ops);
	free(f->body);
	f->body = malloc(len + 1);
	memcpy(f->body, p, len);
	f->body[len] = '\0';
	f->body_len = len;
}

static inline void http_fake_suspend(struct http_req_fake *ops)
{
	struct http_fake_req *f = http_fake_from_ops(ops);
	f->suspends++;
}

static inline void http_fake_resume(struct http_req_fake *ops)
{
	struct http_fake_req *f = http_fake_from_ops(ops);
	atomic_fetch_add(&f->resumes, 1);
}

/* A request for method and url ("/path?a=1&b=2"), of app (r->app; may be
 * NULL). */
static inline struct http_req *http_req_fake_new(struct app *app, const char *method, const char *url)
{
	struct http_fake_req *f = calloc(1, sizeof *f);
	struct http_req *r = &f->core.req;
	f->ops = (struct http_req_fake){.value = http_fake_value,
					.body = http_fake_body,
					.suspend = http_fake_suspend,
					.resume = http_fake_resume};
	atomic_init(&f->resumes, 0);
	f->core.fake = &f->ops;
	r->app = app;
	snprintf(r->request_id, sizeof r->request_id, "fake");
	snprintf(r->method, sizeof r->method, "%s", method);
	snprintf(r->client, sizeof r->client, "127.0.0.1");
	const char *qm = strchr(url, '?');
	r->url = qm ? strndup(url, (size_t)(qm - url)) : strdup(url);
	buf_init(&r->body, (size_t)1 << 26);
	if (qm) {
		f->query = strdup(qm + 1);
		for (char *p = f->query; p && *p && f->nq < HTTP_FAKE_VALUES;) {
			char *amp = strchr(p, '&'), *eq;
			if (amp)
				*amp = '\0';
			eq = strchr(p, '=');
			if (eq)
				*eq = '\0';
			f->q[f->nq][0] = p;
			f->q[f->nq++][1] = eq ? eq + 1 : "";
			p = amp ? amp + 1 : NULL;
		}
	}
	return r;
}

/* Give r the request header name: value (both copied). */
static inline void http_req_fake_header(struct http_req *r, const char *name, const char *value)
{
	struct http_fake_req *f = http_fake_of(r);
	if (f->nh == HTTP_FAKE_VALUES)
		abort();
	f->h[f->nh][0] = strdup(name);
	f->h[f->nh++][1] = strdup(value);
}

/* The body of the last reply that had its bytes (JSON, text, static),
 * NUL-terminated; NULL when none. */
static inline const char *http_req_fake_body(struct http_req *r)
{
	return http_fake_of(r)->body;
}

/* How often r was suspended, and resumed. */
static inline int http_req_fake_suspends(struct http_req *r)
{
	return http_fake_of(r)->suspends;
}

static inline int http_req_fake_resumes(struct http_req *r)
{
	return atomic_load(&http_fake_of(r)->resumes);
}

/* What the daemon does with a handler's (or on_resume's) return rc: a
 * negative one unanswered is rendered as the wire error (r->status then
 * set). Returns rc. */
static inline int http_req_fake_answer(struct http_req *r, int rc)
{
	if (rc < 0 && !r->status)
		http_render_error(r, rc);
	return rc;
}

/* The daemon's resume of a suspended r: its on_resume runs (when set),
 * and a negative return is answered. Returns on_resume's return (0 when
 * none). */
static inline int http_req_fake_resume(struct http_req *r)
{
	http_req_core_of(r)->suspended = false;
	return r->on_resume ? http_req_fake_answer(r, r->on_resume(r)) : 0;
}

/* The completion: completed_ok when an answer was queued, on_free, then
 * everything r owns (its params, body, error, target, stash...); never
 * r->tenant, which is the test's. */
static inline void http_req_fake_free(struct http_req *r)
{
	struct http_fake_req *f = http_fake_of(r);
	r->completed_ok = r->status != 0;
	if (r->on_free)
		r->on_free(r);
	for (size_t i = 0; i < f->nh; i++) {
		free(f->h[i][0]);
		free(f->h[i][1]);
	}
	free(f->query);
	free(f->body);
	http_req_free(r); /* frees f: the core is its first member */
}
