#pragma once
/* The worker pool of blocking work (file routes): handlers of RF_POOL
 * routes run here, off libmicrohttpd's event threads, so that one
 * tenant's slow file work cannot hold the threads every other request
 * needs.
 *
 * Fairness: each tenant (the request's claims.tenant; "" for requests
 * that name none) has its own FIFO; free workers take the tenants in
 * turn (http/fairq.h), and one tenant never runs more than
 * `threads_per_tenant` jobs at once, so at least one worker is left to
 * the others, nor jobs that keep more than `cpu_cores_per_tenant` CPUs
 * busy together (measured per tenant: CPU over wall time of its jobs). A tenant with `queue_per_tenant` jobs
 * waiting is answered 429 too_many_requests (Retry-After) rather than queued.
 *
 * A request handed over is suspended; its handler runs on a worker with
 * its replies deferred (the core's defer, http/req_int.h): a reply is
 * kept (http_reply_response) instead of queued, and the event thread
 * queues it on resume (libmicrohttpd must only be driven from the
 * connection's own thread). One wake-up each
 * way: a condition variable to a worker (signalled only when one is
 * idle), libmicrohttpd's resume (its eventfd) back; no thread is made per
 * request. A client that hangs up while its job waits has the job dropped
 * when its turn comes, never run: a job that waited is first checked with
 * a peek at its socket (EOF or reset: gone). That costs one syscall, and
 * only for jobs that waited, where watching each queued socket
 * (http/watch.c, as exec does) would cost two epoll_ctl and a lock round
 * on every queued request. Stopping refuses what waits (503
 * backend_unavailable) and lets running jobs end.
 *
 * Threads: submit runs on event threads; the workers and http_pool_stop
 * meet under one mutex, never held across I/O. */
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

struct http_pool;
struct http_req;

struct http_pool_config {
	size_t threads;		     /* workers (>= 1) */
	size_t threads_per_tenant;   /* jobs of one tenant running at once (>= 1) */
	size_t queue_per_tenant;     /* jobs of one tenant waiting (>= 1) */
	double cpu_cores_per_tenant; /* CPUs one tenant's running jobs may keep busy (0: no bound) */
};

/* Start the workers. 0 or -errno (no thread could be made). */
int http_pool_new(struct http_pool **out, const struct http_pool_config *cfg);
/* Refuse new work, answer every waiting job 503, wait for running jobs
 * to end and the workers to exit. Their requests are resumed before it
 * returns (the daemon may then stop). Idempotent; accepts NULL. */
void http_pool_stop(struct http_pool *p);
/* Stop, then free; *p = NULL. */
void http_pool_free(struct http_pool **p);

/* Event thread, inside the access handler: suspend r and run its route's
 * handler on a worker; r is answered on resume. Never fails: a refusal
 * (429, 503) is answered through the same resume. */
void http_pool_submit(struct http_pool *p, struct http_req *r);

/* Event thread, inside the handler of a route that is not RF_POOL: its
 * blocking part (file writes, a walk of a directory). r is suspended and
 * work(r) runs on a worker as an RF_POOL handler does (the same queues,
 * caps and refusals; its replies kept); once work returns 0 without
 * answering, then(r) runs back on the event thread as the connection's
 * resume, where it may answer, fail or suspend again (an exec waiting for
 * its exit). The handler returns what this returns: 0 with a pool; without
 * one (p NULL) both parts run here, at once. */
int http_pool_then(struct http_pool *p, struct http_req *r, int (*work)(struct http_req *r),
		   int (*then)(struct http_req *r));

/* Event thread: an RF_NOWAIT request was answered without the pool. */
void http_pool_count_inline(struct http_pool *p);

/* Prometheus text: workers, per-tenant waiting and running jobs, waits. */
void http_pool_render(struct http_pool *p, struct buf *out);
