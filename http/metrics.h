#pragma once
/* Prometheus counters and histograms, lock-free on the request path
 * (atomics), rendered as text on GET /metrics. */
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

struct route;
struct route_metrics;

void metrics_new(struct route_metrics **out, const struct route *routes, size_t nroutes); /* routes: the labels, outlive m */
void metrics_free(struct route_metrics **m);
/* route_idx == nroutes: unmatched. */
void metrics_request(struct route_metrics *m, size_t route_idx, int status, double ms);
void metrics_inflight(struct route_metrics *m, int delta);
void metrics_audit_failure(struct route_metrics *m);
/* An audit row not written: its client address was over its rate. */
void metrics_audit_suppressed(struct route_metrics *m);
void metrics_exec_started(struct route_metrics *m);
/* outcome: exited, timed_out, cancelled, failed */
void metrics_exec_finished(struct route_metrics *m, const char *outcome, double ms);
void metrics_bytes_streamed(struct route_metrics *m, int64_t in, int64_t out);
void metrics_sse(struct route_metrics *m, int delta);
void metrics_heartbeat(struct route_metrics *m);
void metrics_store_error(struct route_metrics *m);
/* Render everything (extra: gauges the caller knows, appended as is). */
void metrics_render(struct route_metrics *m, struct buf *out, uint64_t audit_failures, size_t execs_running);
