/* The worker pool of blocking work (see pool.h). */
#include "http/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/fairq.h"
#include "http/req.h"
#include "http/route.h"
#include "http/watch.h"

/* r->pool_state */
enum { JOB_NEW, JOB_QUEUED, JOB_RUNNING, JOB_DROPPED, JOB_REFUSED };

/* Upper bounds (seconds) of the wait histogram's buckets. */
static const double wait_bounds[] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10};
#define NWAIT (sizeof wait_bounds / sizeof wait_bounds[0])

struct http_pool {
	pthread_mutex_t mu;
	pthread_cond_t wake;
	struct http_fairq *q;
	struct http_watch *watch;
	pthread_t *threads;
	size_t nthreads, idle, busy, queue_max;
	bool stopping, stopped;
	/* Waits from queueing to a worker taking the job (under mu). */
	uint64_t wait_buckets[NWAIT + 1];
	double wait_sum;
	uint64_t wait_count;
	atomic_uint_fast64_t refused, dropped;
};

#define REQ_OF(it) ((struct http_req *)((char *)(it)-offsetof(struct http_req, pool_item)))

static void record_wait(struct http_pool *p, int64_t enq_ns)
{
	double s = (double)(mono_ns() - enq_ns) / 1e9;
	size_t i = 0;
	while (i < NWAIT && s > wait_bounds[i])
		i++;
	p->wait_buckets[i]++;
	p->wait_sum += s;
	p->wait_count++;
}

/* Worker: run the route's handler with replies kept for the event thread. */
static void run_job(struct http_req *r)
{
	r->defer = true;
	r->pool_rc = r->route->handler(r);
	r->defer = false;
}

static void *worker_main(void *arg)
{
	struct http_pool *p = arg;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		struct http_fairq_item *it = http_fairq_pop(p->q);
		if (!it) {
			if (p->stopping)
				break;
			p->idle++;
			pthread_cond_wait(&p->wake, &p->mu);
			p->idle--;
			continue;
		}
		struct http_req *r = REQ_OF(it);
		r->pool_state = JOB_RUNNING;
		record_wait(p, r->pool_enq_ns);
		p->busy++;
		int64_t watch = r->pool_watch;
		pthread_mutex_unlock(&p->mu);
		/* From here no hang-up callback touches r (it would find the job
		 * running and leave it); after this, none is running either. */
		if (watch > 0)
			http_watch_remove(p->watch, watch);
		r->pool_watch = 0;
		run_job(r);
		pthread_mutex_lock(&p->mu);
		http_fairq_done(p->q, it);
		p->busy--;
		pthread_mutex_unlock(&p->mu);
		http_resume(r); /* r may be gone once this returns */
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int http_pool_new(struct http_pool **out, const struct http_pool_config *cfg, struct http_watch *watch)
{
	struct http_pool *p = xcalloc(1, sizeof *p);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->wake, NULL);
	http_fairq_new(&p->q, cfg->threads_per_tenant, cfg->queue_per_tenant);
	p->watch = watch;
	p->queue_max = cfg->queue_per_tenant;
	p->threads = xcalloc(cfg->threads ? cfg->threads : 1, sizeof *p->threads);
	size_t want = cfg->threads ? cfg->threads : 1;
	for (; p->nthreads < want; p->nthreads++) {
		int rc = pthread_create(&p->threads[p->nthreads], NULL, worker_main, p);
		if (rc != 0) {
			http_pool_free(&p);
			return -rc;
		}
	}
	*out = p;
	return 0;
}

/* Watch thread: the client of a request whose job waits has hung up. */
static void on_hangup(void *ctx)
{
	struct http_req *r = ctx;
	struct http_pool *p = r->env->pool;
	pthread_mutex_lock(&p->mu);
	bool drop = r->pool_state == JOB_NEW || http_fairq_cancel(p->q, &r->pool_item);
	if (drop)
		r->pool_state = JOB_DROPPED;
	pthread_mutex_unlock(&p->mu);
	if (!drop)
		return; /* running (or refused): it ends on its own */
	atomic_fetch_add(&p->dropped, 1);
	r->log_detail = "the client left while its work was queued; it was not run";
	/* Queued: nobody else holds r now. New: the submitting event thread
	 * sees JOB_DROPPED and leaves r alone; the resume waits for it to
	 * return from the access handler. */
	http_resume(r);
}

/* Answer r's refusal through the resume path (the caller holds no lock). */
static void refuse(struct http_pool *p, struct http_req *r, int code)
{
	atomic_fetch_add(&p->refused, code == -SBX_E_TOO_MANY);
	r->retry_after_s = code == -SBX_E_TOO_MANY ? 1 : 5;
	r->pool_rc = code == -SBX_E_TOO_MANY
			 ? http_fail(r, code, "tenant %s already has %zu file requests waiting, its limit",
				     r->claims.tenant, p->queue_max)
			 : http_fail(r, code, "the server is shutting down");
	http_resume(r);
}

static int pool_answer(struct http_req *r);

static const char *key_of(const struct http_req *r)
{
	return r->authed || r->audit_tenant ? r->claims.tenant : "";
}

/* Watch the client while its job waits, so that a hang-up drops it. The
 * watch is added before the job is queued: once queued, a worker may run
 * and answer it (and the request be freed) at any moment. */
static void watch_client(struct http_pool *p, struct http_req *r)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci || ci->connect_fd < 0)
		return;
	int64_t h = http_watch_add(p->watch, ci->connect_fd, on_hangup, r);
	r->pool_watch = h > 0 ? h : 0;
}

void http_pool_submit(struct http_pool *p, struct http_req *r)
{
	const char *key = key_of(r);
	r->on_resume = pool_answer;
	r->pool_state = JOB_NEW;
	http_suspend(r);
	pthread_mutex_lock(&p->mu);
	bool direct = p->idle > 0 && http_fairq_runnable(p->q, key);
	pthread_mutex_unlock(&p->mu);
	if (!direct)
		watch_client(p, r);

	pthread_mutex_lock(&p->mu);
	int rc = 0;
	if (r->pool_state == JOB_DROPPED)
		rc = 1; /* hung up already: on_hangup resumes it */
	else if (p->stopping)
		rc = -SBX_E_BACKEND;
	else if (http_fairq_push(p->q, key, &r->pool_item) < 0)
		rc = -SBX_E_TOO_MANY;
	if (rc == 0) {
		r->pool_state = JOB_QUEUED;
		r->pool_enq_ns = mono_ns();
		if (p->idle > 0)
			pthread_cond_signal(&p->wake);
	}
	if (rc < 0)
		r->pool_state = JOB_REFUSED; /* a hang-up from now on leaves r alone */
	pthread_mutex_unlock(&p->mu);
	if (rc < 0) {
		http_watch_remove(p->watch, r->pool_watch);
		r->pool_watch = 0;
		refuse(p, r, rc);
	}
}

/* Event thread, on resume: the handler's reply, or its error. */
static int pool_answer(struct http_req *r)
{
	if (r->deferred)
		return http_reply_deferred(r);
	if (r->pool_state == JOB_DROPPED)
		return 0; /* nobody to answer: the connection closes */
	return r->pool_rc < 0 ? r->pool_rc : -EIO;
}

void http_pool_stop(struct http_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	if (p->stopped) {
		pthread_mutex_unlock(&p->mu);
		return;
	}
	p->stopping = true;
	/* Take what waits, chained through the items (ours once taken). */
	struct http_fairq_item *waiting = NULL, *it;
	while ((it = http_fairq_take(p->q))) {
		REQ_OF(it)->pool_state = JOB_REFUSED;
		it->next = waiting;
		waiting = it;
	}
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);
	while (waiting) {
		struct http_req *r = REQ_OF(waiting);
		waiting = waiting->next;
		http_watch_remove(p->watch, r->pool_watch);
		r->pool_watch = 0;
		refuse(p, r, -SBX_E_BACKEND);
	}
	for (size_t i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	p->nthreads = 0;
	p->stopped = true;
}

void http_pool_free(struct http_pool **pp)
{
	struct http_pool *p = pp ? *pp : NULL;
	if (!p)
		return;
	http_pool_stop(p);
	http_fairq_free(&p->q);
	free(p->threads);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->mu);
	free(p);
	*pp = NULL;
}

static void render_key(void *ctx, const char *key, size_t waiting, size_t running)
{
	struct buf *b = ctx;
	buf_appendf(b, "sandboxd_pool_waiting{tenant=\"%s\"} %zu\nsandboxd_pool_running{tenant=\"%s\"} %zu\n",
		    key, waiting, key, running);
}

void http_pool_render(struct http_pool *p, struct buf *out)
{
	pthread_mutex_lock(&p->mu);
	buf_appendf(out,
		    "# HELP sandboxd_pool_workers Workers running blocking file work.\n"
		    "# TYPE sandboxd_pool_workers gauge\nsandboxd_pool_workers %zu\n"
		    "# HELP sandboxd_pool_busy Workers running a job now.\n"
		    "# TYPE sandboxd_pool_busy gauge\nsandboxd_pool_busy %zu\n"
		    "# HELP sandboxd_pool_waiting File requests waiting for a worker, per tenant.\n"
		    "# TYPE sandboxd_pool_waiting gauge\n"
		    "# HELP sandboxd_pool_running File requests running on a worker, per tenant.\n"
		    "# TYPE sandboxd_pool_running gauge\n",
		    p->nthreads, p->busy);
	http_fairq_each(p->q, render_key, out);
	buf_appendf(out, "# HELP sandboxd_pool_wait_seconds Time file requests waited for a worker.\n"
			 "# TYPE sandboxd_pool_wait_seconds histogram\n");
	uint64_t cum = 0;
	for (size_t i = 0; i < NWAIT; i++) {
		cum += p->wait_buckets[i];
		buf_appendf(out, "sandboxd_pool_wait_seconds_bucket{le=\"%g\"} %llu\n", wait_bounds[i],
			    (unsigned long long)cum);
	}
	buf_appendf(out,
		    "sandboxd_pool_wait_seconds_bucket{le=\"+Inf\"} %llu\n"
		    "sandboxd_pool_wait_seconds_sum %.6f\nsandboxd_pool_wait_seconds_count %llu\n",
		    (unsigned long long)p->wait_count, p->wait_sum, (unsigned long long)p->wait_count);
	pthread_mutex_unlock(&p->mu);
	buf_appendf(
	    out,
	    "# HELP sandboxd_pool_refused_total File requests answered 429: their tenant's queue was full.\n"
	    "# TYPE sandboxd_pool_refused_total counter\nsandboxd_pool_refused_total %llu\n"
	    "# HELP sandboxd_pool_dropped_total File requests dropped unrun: the client left while queued.\n"
	    "# TYPE sandboxd_pool_dropped_total counter\nsandboxd_pool_dropped_total %llu\n",
	    (unsigned long long)atomic_load(&p->refused), (unsigned long long)atomic_load(&p->dropped));
}
