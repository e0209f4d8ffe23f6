#include "http/metrics.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "common/xmalloc.h"
#include "http/route.h"

static const double buckets_ms[] = {1,	 2.5,  5,    10,   25,	  50,	 100,  250,
				    500, 1000, 2500, 5000, 10000, 30000, 60000};
#define NB (sizeof buckets_ms / sizeof buckets_ms[0])

/* Status classes kept per route: exact codes would be unbounded. */
static const int statuses[] = {200, 201, 202, 206, 304, 400, 401, 403, 404, 405,
			       409, 410, 413, 416, 422, 429, 499, 500, 503, 507};
#define NS (sizeof statuses / sizeof statuses[0])

struct hist {
	atomic_uint_fast64_t le[NB];
	atomic_uint_fast64_t count;
	atomic_uint_fast64_t sum_us;
};

#define EXEC_OUTCOMES 5 /* exited, timed_out, cancelled, failed (never started), rejected */

struct http_metrics {
	const struct http_route *routes; /* labels */
	size_t nroutes;
	atomic_uint_fast64_t *req; /* (nroutes + 1) * (NS + 1) */
	struct hist *dur;	   /* nroutes + 1 */
	atomic_int inflight;
	atomic_uint_fast64_t audit_failures;
	atomic_uint_fast64_t audit_suppressed;
	atomic_uint_fast64_t exec_started;
	atomic_uint_fast64_t exec_finished[EXEC_OUTCOMES];
	struct hist exec_dur;
	struct hist exec_queue_wait; /* admitted POST /exec requests' waits for a slot */
	atomic_uint_fast64_t bytes_in, bytes_out;
	atomic_int sse;
	atomic_uint_fast64_t heartbeats;
	atomic_uint_fast64_t store_errors;
};

static const char *exec_outcomes[EXEC_OUTCOMES] = {"exited", "timed_out", "cancelled", "failed", "rejected"};

void http_metrics_new(struct http_metrics **out, const struct http_route *routes, size_t nroutes)
{
	struct http_metrics *m = xcalloc(1, sizeof *m);
	m->routes = routes;
	m->nroutes = nroutes;
	m->req = xcalloc((nroutes + 1) * (NS + 1), sizeof *m->req);
	m->dur = xcalloc(nroutes + 1, sizeof *m->dur);
	*out = m;
}

void http_metrics_free(struct http_metrics **m)
{
	if (!*m)
		return;
	free((*m)->req);
	free((*m)->dur);
	free(*m);
	*m = NULL;
}

static void observe(struct hist *h, double ms)
{
	for (size_t i = 0; i < NB; i++)
		if (ms <= buckets_ms[i])
			atomic_fetch_add(&h->le[i], 1);
	atomic_fetch_add(&h->count, 1);
	atomic_fetch_add(&h->sum_us, (uint_fast64_t)(ms * 1000.0));
}

void http_metrics_request(struct http_metrics *m, size_t idx, int status, double ms)
{
	if (idx > m->nroutes)
		idx = m->nroutes;
	size_t s = NS;
	for (size_t i = 0; i < NS; i++)
		if (statuses[i] == status)
			s = i;
	atomic_fetch_add(&m->req[idx * (NS + 1) + s], 1);
	observe(&m->dur[idx], ms);
}

void http_metrics_inflight(struct http_metrics *m, int delta)
{
	atomic_fetch_add(&m->inflight, delta);
}

void http_metrics_audit_failure(struct http_metrics *m)
{
	atomic_fetch_add(&m->audit_failures, 1);
}

void http_metrics_audit_suppressed(struct http_metrics *m)
{
	atomic_fetch_add(&m->audit_suppressed, 1);
}

void http_metrics_exec_queue_wait(struct http_metrics *m, double ms)
{
	observe(&m->exec_queue_wait, ms);
}

void http_metrics_exec_started(struct http_metrics *m)
{
	atomic_fetch_add(&m->exec_started, 1);
}

void http_metrics_exec_finished(struct http_metrics *m, const char *outcome, double ms)
{
	for (size_t i = 0; i < EXEC_OUTCOMES; i++)
		if (strcmp(outcome, exec_outcomes[i]) == 0)
			atomic_fetch_add(&m->exec_finished[i], 1);
	observe(&m->exec_dur, ms);
}

void http_metrics_bytes_streamed(struct http_metrics *m, int64_t in, int64_t out)
{
	atomic_fetch_add(&m->bytes_in, (uint_fast64_t)in);
	atomic_fetch_add(&m->bytes_out, (uint_fast64_t)out);
}

void http_metrics_sse(struct http_metrics *m, int delta)
{
	atomic_fetch_add(&m->sse, delta);
}

void http_metrics_heartbeat(struct http_metrics *m)
{
	atomic_fetch_add(&m->heartbeats, 1);
}

void http_metrics_store_error(struct http_metrics *m)
{
	atomic_fetch_add(&m->store_errors, 1);
}

static void render_hist(struct buf *out, const char *name, const char *labels, struct hist *h)
{
	const char *sep = *labels ? "," : "";
	for (size_t i = 0; i < NB; i++)
		buf_appendf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, buckets_ms[i] / 1000.0,
			    (unsigned long long)atomic_load(&h->le[i]));
	buf_appendf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
		    (unsigned long long)atomic_load(&h->count));
	buf_appendf(out, "%s_sum{%s} %.6f\n", name, labels, (double)atomic_load(&h->sum_us) / 1e6);
	buf_appendf(out, "%s_count{%s} %llu\n", name, labels, (unsigned long long)atomic_load(&h->count));
}

static const char *route_label(struct http_metrics *m, size_t i, char *tmp, size_t n)
{
	if (i == m->nroutes)
		return "unmatched";
	snprintf(tmp, n, "%s %s", m->routes[i].method, m->routes[i].pattern);
	return tmp;
}

/* Requests by route and status, their durations, and those in flight. */
static void render_requests(struct http_metrics *m, struct buf *out)
{
	char tmp[160], labels[200];
	buf_appendf(out, "# HELP sandboxd_http_requests_total HTTP requests by route and status.\n"
			 "# TYPE sandboxd_http_requests_total counter\n");
	for (size_t i = 0; i <= m->nroutes; i++)
		for (size_t s = 0; s <= NS; s++) {
			unsigned long long v = atomic_load(&m->req[i * (NS + 1) + s]);
			if (!v)
				continue;
			const char *st = s == NS ? "other" : NULL;
			char code[8];
			if (!st) {
				snprintf(code, sizeof code, "%d", statuses[s]);
				st = code;
			}
			buf_appendf(out, "sandboxd_http_requests_total{route=\"%s\",status=\"%s\"} %llu\n",
				    route_label(m, i, tmp, sizeof tmp), st, v);
		}
	buf_appendf(out, "# HELP sandboxd_http_request_duration_seconds Request duration by route.\n"
			 "# TYPE sandboxd_http_request_duration_seconds histogram\n");
	for (size_t i = 0; i <= m->nroutes; i++) {
		if (!atomic_load(&m->dur[i].count))
			continue;
		snprintf(labels, sizeof labels, "route=\"%s\"", route_label(m, i, tmp, sizeof tmp));
		render_hist(out, "sandboxd_http_request_duration_seconds", labels, &m->dur[i]);
	}
	buf_appendf(out,
		    "# HELP sandboxd_http_requests_in_flight Requests being served.\n"
		    "# TYPE sandboxd_http_requests_in_flight gauge\nsandboxd_http_requests_in_flight %d\n",
		    atomic_load(&m->inflight));
}

/* Commands: running, started, finished by outcome, their durations and
 * their waits for a slot. */
static void render_execs(struct http_metrics *m, struct buf *out, size_t execs_running)
{
	buf_appendf(out,
		    "# HELP sandboxd_execs_running Commands running now.\n"
		    "# TYPE sandboxd_execs_running gauge\nsandboxd_execs_running %zu\n",
		    execs_running);
	buf_appendf(out,
		    "# HELP sandboxd_execs_started_total Commands started.\n"
		    "# TYPE sandboxd_execs_started_total counter\nsandboxd_execs_started_total %llu\n",
		    (unsigned long long)atomic_load(&m->exec_started));
	buf_appendf(out, "# HELP sandboxd_execs_finished_total Commands finished, by outcome.\n"
			 "# TYPE sandboxd_execs_finished_total counter\n");
	for (size_t i = 0; i < EXEC_OUTCOMES; i++)
		buf_appendf(out, "sandboxd_execs_finished_total{outcome=\"%s\"} %llu\n", exec_outcomes[i],
			    (unsigned long long)atomic_load(&m->exec_finished[i]));
	buf_appendf(out, "# HELP sandboxd_exec_duration_seconds Command duration.\n"
			 "# TYPE sandboxd_exec_duration_seconds histogram\n");
	render_hist(out, "sandboxd_exec_duration_seconds", "", &m->exec_dur);
	buf_appendf(out, "# HELP sandboxd_exec_queue_wait_seconds How long admitted POST /exec requests "
			 "waited for one of their tenant's exec slots.\n"
			 "# TYPE sandboxd_exec_queue_wait_seconds histogram\n");
	render_hist(out, "sandboxd_exec_queue_wait_seconds", "", &m->exec_queue_wait);
}

void http_metrics_render(struct http_metrics *m, struct buf *out, uint64_t audit_failures,
			 size_t execs_running)
{
	render_requests(m, out);
	render_execs(m, out, execs_running);
	buf_appendf(out,
		    "# HELP sandboxd_stream_bytes_total Bytes moved by streaming transfers.\n"
		    "# TYPE sandboxd_stream_bytes_total counter\n"
		    "sandboxd_stream_bytes_total{direction=\"in\"} %llu\n"
		    "sandboxd_stream_bytes_total{direction=\"out\"} %llu\n",
		    (unsigned long long)atomic_load(&m->bytes_in),
		    (unsigned long long)atomic_load(&m->bytes_out));
	buf_appendf(out,
		    "# HELP sandboxd_sse_subscribers Server-sent-event subscribers connected.\n"
		    "# TYPE sandboxd_sse_subscribers gauge\nsandboxd_sse_subscribers %d\n",
		    atomic_load(&m->sse));
	buf_appendf(out,
		    "# HELP sandboxd_heartbeats_total Heartbeat events computed.\n"
		    "# TYPE sandboxd_heartbeats_total counter\nsandboxd_heartbeats_total %llu\n",
		    (unsigned long long)atomic_load(&m->heartbeats));
	buf_appendf(
	    out,
	    "# HELP sandboxd_audit_write_failures_total Audit records that could not be written.\n"
	    "# TYPE sandboxd_audit_write_failures_total counter\nsandboxd_audit_write_failures_total %llu\n",
	    (unsigned long long)(atomic_load(&m->audit_failures) + audit_failures));
	buf_appendf(
	    out,
	    "# HELP sandboxd_audit_suppressed_total Audit records of requests naming no tenant not written:"
	    " their client address was over its rate.\n"
	    "# TYPE sandboxd_audit_suppressed_total counter\nsandboxd_audit_suppressed_total %llu\n",
	    (unsigned long long)atomic_load(&m->audit_suppressed));
	buf_appendf(out,
		    "# HELP sandboxd_store_errors_total Store operations that failed.\n"
		    "# TYPE sandboxd_store_errors_total counter\nsandboxd_store_errors_total %llu\n",
		    (unsigned long long)atomic_load(&m->store_errors));
}

void http_metrics_label_all(const char *in, size_t len, const char *name, const char *value, struct buf *out)
{
	const char *p = in, *end = in + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
		size_t name_len = strcspn(p, "{ \n"), ln = strlen(name);
		bool has = p[name_len] == '{' && strncmp(p + name_len + 1, name, ln) == 0 &&
			   p[name_len + 1 + ln] == '=';
		if (*p == '#' || name_len >= n || name_len == 0 || has)
			buf_append(out, p, n);
		else if (p[name_len] == '{')
			/* "x{}" (a histogram without labels) gets no trailing comma. */
			buf_appendf(out, "%.*s{%s=\"%s\"%s%.*s", (int)name_len, p, name, value,
				    p[name_len + 1] == '}' ? "" : ",", (int)(n - name_len - 1),
				    p + name_len + 1);
		else
			buf_appendf(out, "%.*s{%s=\"%s\"}%.*s", (int)name_len, p, name, value,
				    (int)(n - name_len), p + name_len);
		p += n;
	}
}
