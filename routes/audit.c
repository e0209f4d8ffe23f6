/* GET /audit: the audit history, oldest first, paged by an opaque cursor,
 * as JSON pages or as an NDJSON stream. */
#include "routes/audit.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/response.h"
#include "routes/app.h"
#include "routes/audit_nodes.h"
#include "routes/routes.h"

#define AUDIT_LIMIT_MAX 1000
#define NDJSON_BATCH 500

/* The filter strings point into the request (query values), which live as
 * long as the connection; the ndjson reader keeps its own copies. */
struct audit_query {
	struct store *store;
	struct store_audit_filter f;
	char *tenant, *session, *route, *outcome;
	struct buf out;
	size_t out_off;
	size_t remaining;
	bool done;
	bool merged; /* nodes=all: after is a merged cursor */
	const char *node;
};

static int parse_filter(struct http_req *r, struct audit_query *q)
{
	const char *v;
	int64_t limit;
	int rc = http_query_int(r, "limit", 100, 1, AUDIT_LIMIT_MAX, &limit);
	if (rc < 0)
		return rc;
	q->f.limit = (size_t)limit;
	if ((v = http_query(r, "since")) && rfc3339_parse(v, &q->f.since) < 0)
		return http_fail(r, -EINVAL, "since must be an RFC 3339 time");
	if ((v = http_query(r, "until")) && rfc3339_parse(v, &q->f.until) < 0)
		return http_fail(r, -EINVAL, "until must be an RFC 3339 time");
	if ((v = http_query(r, "after")) && *v && !q->merged) {
		char *end = NULL;
		errno = 0;
		long long x = strtoll(v, &end, 10);
		if (errno || *end || x < 0)
			return http_fail(r, -EINVAL, "after must be a cursor returned as next");
		q->f.after = x;
	}
	if ((v = http_query(r, "outcome"))) {
		if (strcmp(v, "ok") && strcmp(v, "denied") && strcmp(v, "error"))
			return http_fail(r, -EINVAL, "outcome must be ok, denied or error");
		q->outcome = xstrdup(v);
	}
	if ((v = http_query(r, "egress"))) {
		/* Static texts: the filter is copied as is for other nodes. */
		if (strcmp(v, "denied") && strcmp(v, "any"))
			return http_fail(r, -EINVAL, "egress must be denied or any");
		q->f.egress = strcmp(v, "denied") == 0 ? "denied" : "any";
	}
	if ((v = http_query(r, "route")))
		q->route = xstrdup(v);
	if ((v = http_query(r, "session"))) {
		q->session = xstrdup(v);
		q->f.session_len = strlen(v);
	}
	v = http_query(r, "tenant");
	if (r->claims.scopes & AUTH_SCOPE_ADMIN) {
		if (v)
			q->tenant = xstrdup(v);
	} else {
		if (v && strcmp(v, r->claims.tenant) != 0)
			return http_fail(r, -SBX_E_SCOPE,
					 "tenant= needs the admin scope of an operator tenant");
		q->tenant = xstrdup(r->claims.tenant);
		/* Its own life only: a tenant removed and added again under
		 * this name was another tenant (issue 26 item 10). */
		q->f.incarnation = r->tenant ? r->tenant->incarnation : -1;
	}
	q->f.tenant = q->tenant;
	q->f.session = q->session;
	q->f.route = q->route;
	q->f.outcome = q->outcome;
	return 0;
}

static void query_free(struct audit_query *q)
{
	free(q->tenant);
	free(q->session);
	free(q->route);
	free(q->outcome);
	buf_free(&q->out);
	free(q);
}

struct ndjson_batch {
	struct buf *out;
	size_t count;
	const char *node;
};

static int collect_ndjson(struct ndjson_batch *nb, const struct store_audit *a)
{
	struct buf *b = nb->out;
	json_t *j = route_audit_json(a, nb->node);
	char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!t)
		return 0;
	/* Past the buffer's bound the line is dropped whole, never cut. */
	if (b->len + strlen(t) + 1 <= b->max && buf_append(b, t, strlen(t)) == 0)
		buf_append(b, "\n", 1);
	free(t);
	return 0;
}

/* NDJSON: fetch a batch whenever the previous one has been sent, so the
 * answer is never held whole. */
static int collect_batch(void *ctx, const struct store_audit *a)
{
	struct ndjson_batch *b = ctx;
	b->count++;
	return collect_ndjson(b, a);
}

static ssize_t ndjson_reader(void *cls, uint64_t pos, char *out, size_t max)
{
	struct audit_query *q = cls;
	(void)pos;
	while (q->out_off == q->out.len) {
		if (q->done || q->remaining == 0)
			return HTTP_STREAM_END;
		buf_reset(&q->out);
		q->out_off = 0;
		struct store_audit_filter f = q->f;
		f.limit = q->remaining < NDJSON_BATCH ? q->remaining : NDJSON_BATCH;
		struct ndjson_batch b = {&q->out, 0, q->node};
		int64_t last = 0;
		if (store_audit_query(q->store, &f, collect_batch, &b, &last) < 0)
			return HTTP_STREAM_ERROR;
		q->remaining -= b.count;
		if (b.count < f.limit)
			q->done = true;
		else
			q->f.after = last;
	}
	size_t n = q->out.len - q->out_off;
	if (n > max)
		n = max;
	memcpy(out, q->out.ptr + q->out_off, n);
	q->out_off += n;
	return (ssize_t)n;
}

static void ndjson_free(void *cls)
{
	query_free(cls);
}

/* nodes=all: every node's records as one history (operators only; JSON
 * pages: a merged walk is paged by its cursor, never streamed). */
static int audit_all(struct http_req *r, struct audit_query *q)
{
	if (!(r->claims.scopes & AUTH_SCOPE_ADMIN))
		return http_fail(r, -SBX_E_SCOPE, "nodes=all needs the admin scope of an operator tenant");
	const char *format = http_query(r, "format");
	if (format && strcmp(format, "json") != 0)
		return http_fail(r, -EINVAL, "nodes=all pages are JSON: page with next instead of format=%s",
				 format);
	const char *auth = http_header(r, "Authorization");
	struct route_audit_ask ask = {.f = q->f,
				      .cursor = http_query(r, "after"),
				      .bearer = auth && strlen(auth) > 7 ? auth + 7 : NULL};
	return route_audit_nodes_reply(r, &ask);
}

int route_audit(struct http_req *r)
{
	struct audit_query *q = xcalloc(1, sizeof *q);
	q->store = r->app->store;
	q->node = r->app->cfg->node_id;
	buf_init(&q->out, 64u << 20);
	const char *nodes = http_query(r, "nodes");
	q->merged = nodes && strcmp(nodes, "all") == 0;
	int rc = nodes && !q->merged ? http_fail(r, -EINVAL, "nodes must be all (or absent: this node)")
				     : parse_filter(r, q);
	if (rc == 0 && q->merged)
		rc = audit_all(r, q);
	if (rc < 0 || q->merged) {
		query_free(q);
		return rc;
	}
	const char *format = http_query(r, "format");
	if (format && strcmp(format, "ndjson") == 0) {
		/* NDJSON streams everything that matches, up to limit when given. */
		q->remaining = http_query(r, "limit") ? q->f.limit : SIZE_MAX;
		struct http_response *resp =
		    http_response_stream(HTTP_SIZE_UNKNOWN, 64 * 1024, ndjson_reader, q, ndjson_free);
		if (!resp) {
			query_free(q);
			return -ENOMEM;
		}
		http_response_header(resp, "Content-Type", "application/x-ndjson");
		return http_reply_response(r, 200, resp);
	}
	if (format && strcmp(format, "json") != 0) {
		query_free(q);
		return http_fail(r, -EINVAL, "format must be json or ndjson");
	}
	json_t *records = json_array();
	struct route_audit_page page = {records, q->node};
	int64_t last = 0;
	rc = store_audit_query(q->store, &q->f, route_audit_collect, &page, &last);
	if (rc < 0) {
		json_decref(records);
		query_free(q);
		return http_fail(r, rc, "cannot read the audit history");
	}
	json_t *next = json_null();
	if (json_array_size(records) == q->f.limit) {
		char cur[24];
		snprintf(cur, sizeof cur, "%lld", (long long)last);
		next = json_string(cur);
	}
	query_free(q);
	return http_reply_json(r, 200, json_pack("{s:o, s:o}", "records", records, "next", next));
}
