#pragma once
/* Prometheus counters and histograms, lock-free on the request path
 * (atomics), rendered as text on GET /metrics. */
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

struct http_route;
struct http_metrics;

void http_metrics_new(struct http_metrics **out, const struct http_route *routes,
		      size_t nroutes); /* routes: the labels, outlive m */
void http_metrics_free(struct http_metrics **m);
/* route_idx == nroutes: unmatched. */
void http_metrics_request(struct http_metrics *m, size_t route_idx, int status, double ms);
void http_metrics_inflight(struct http_metrics *m, int delta);
void http_metrics_audit_failure(struct http_metrics *m);
/* An audit row not written: its client address was over its rate. */
void http_metrics_audit_suppressed(struct http_metrics *m);
void http_metrics_exec_started(struct http_metrics *m);
/* A POST /exec admitted after waiting ms for a slot (routes/admit.h). */
void http_metrics_exec_queue_wait(struct http_metrics *m, double ms);
/* outcome: exited, timed_out, cancelled, failed */
void http_metrics_exec_finished(struct http_metrics *m, const char *outcome, double ms);
void http_metrics_bytes_streamed(struct http_metrics *m, int64_t in, int64_t out);
void http_metrics_sse(struct http_metrics *m, int delta);
void http_metrics_heartbeat(struct http_metrics *m);
void http_metrics_store_error(struct http_metrics *m);
/* Copy the Prometheus text in to out with label name="value" first in
 * every sample (comment lines as they are): one node's series stay apart
 * from another's when a scraper or a federation merges them. value must
 * need no escaping (a node id). */
void http_metrics_label_all(const char *in, size_t len, const char *name, const char *value, struct buf *out);
/* Render everything (extra: gauges the caller knows, appended as is). */
void http_metrics_render(struct http_metrics *m, struct buf *out, uint64_t audit_failures,
			 size_t execs_running);
