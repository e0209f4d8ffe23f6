/* The worker pool of blocking work (see pool.h). */
#include "http/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/fairq.h"
#include "http/req.h"
#include "http/req_int.h"
#include "http/route.h"

/* the core's pool_state */
enum { JOB_QUEUED = 1, JOB_RUNNING, JOB_DROPPED, JOB_REFUSED };

/* Upper bounds (seconds) of the wait histogram's buckets. */
static const double wait_bounds[] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10};
#define NWAIT (sizeof wait_bounds / sizeof wait_bounds[0])
/* A job that waited longer than this is run only if its client is still
 * there (a peek at the socket: one syscall, only for jobs that waited). */
#define PEEK_AFTER_NS 1000000

struct http_pool {
	pthread_mutex_t mu;
	pthread_cond_t wake;
	struct http_fairq *q;
	pthread_t *threads;
	size_t nthreads, idle, busy, queue_max;
	bool stopping, stopped;
	/* Waits from queueing to a worker taking the job (under mu). */
	uint64_t wait_buckets[NWAIT + 1];
	double wait_sum;
	uint64_t wait_count;
	atomic_uint_fast64_t refused, dropped, inline_done;
};

#define CORE_OF(it) ((struct http_req_core *)((char *)(it)-offsetof(struct http_req_core, pool_item)))

/* Under mu: a worker takes r. Returns how long it waited. */
static int64_t record_wait(struct http_pool *p, const struct http_req_core *c)
{
	int64_t ns = mono_ns() - c->pool_enq_ns;
	double s = (double)ns / 1e9;
	size_t i = 0;
	while (i < NWAIT && s > wait_bounds[i])
		i++;
	p->wait_buckets[i]++;
	p->wait_sum += s;
	p->wait_count++;
	return ns;
}

/* Whether the client of a suspended request has hung up (EOF or reset on
 * its socket; data of a next request, or nothing yet, is "still there"). */
static bool client_gone(struct http_req *r)
{
	int fd = http_client_fd(r);
	if (fd < 0)
		return false;
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN));
}

/* Worker, without the lock: run the route's handler with replies kept
 * for the event thread, or drop the job when its client left. */
static void run_job(struct http_pool *p, struct http_req_core *c, int64_t waited_ns)
{
	struct http_req *r = &c->req;
	if (waited_ns > PEEK_AFTER_NS && client_gone(r)) {
		c->pool_state = JOB_DROPPED;
		r->log_detail = "the client left while its work was queued; it was not run";
		atomic_fetch_add(&p->dropped, 1);
		return;
	}
	c->defer = true;
	c->pool_rc = c->pool_work ? c->pool_work(r) : r->route->handler(r);
	c->defer = false;
}

/* CPU time of the calling thread, ns. */
static int64_t thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One lock round per job: the finished job is accounted for and the next
 * one taken together. The finished request is resumed before (it may be
 * freed once resumed: only its fairq key, which lives as long as the
 * queue, is kept). */
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
		struct http_req_core *c = CORE_OF(it);
		c->pool_state = JOB_RUNNING;
		int64_t waited = record_wait(p, c);
		p->busy++;
		pthread_mutex_unlock(&p->mu);
		int64_t cpu0 = thread_cpu_ns(), t0 = mono_ns();
		run_job(p, c, waited);
		int64_t cpu = thread_cpu_ns() - cpu0, wall = mono_ns() - t0;
		struct http_fairq_key *key = it->key;
		int64_t charged = it->charged_ns;
		http_resume(&c->req);
		pthread_mutex_lock(&p->mu);
		http_fairq_done(p->q, key, charged, cpu, wall);
		p->busy--;
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int http_pool_new(struct http_pool **out, const struct http_pool_config *cfg)
{
	struct http_pool *p = xcalloc(1, sizeof *p);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->wake, NULL);
	http_fairq_new(&p->q, cfg->threads_per_tenant, cfg->queue_per_tenant);
	http_fairq_set_cpu_cores(p->q, cfg->cpu_cores_per_tenant);
	p->queue_max = cfg->queue_per_tenant;
	size_t want = cfg->threads ? cfg->threads : 1;
	p->threads = xcalloc(want, sizeof *p->threads);
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

/* Answer r's refusal through the resume path (the caller holds no lock). */
static void refuse(struct http_pool *p, struct http_req *r, int code)
{
	struct http_req_core *c = http_req_core_of(r);
	c->pool_state = JOB_REFUSED;
	r->retry_after_s = code == -SBX_E_TOO_MANY ? 1 : 5;
	if (code == -SBX_E_TOO_MANY) {
		atomic_fetch_add(&p->refused, 1);
		c->pool_rc = http_fail(r, code, "tenant %s already has %zu file requests waiting, its limit",
				       r->claims.tenant, p->queue_max);
	} else {
		c->pool_rc = http_fail(r, code, "the server is shutting down");
	}
	http_resume(r);
}

static int pool_answer(struct http_req *r);

void http_pool_submit(struct http_pool *p, struct http_req *r)
{
	struct http_req_core *c = http_req_core_of(r);
	const char *key = r->authed || r->audit_tenant ? r->claims.tenant : "";
	r->on_resume = pool_answer;
	c->pool_item = (struct http_fairq_item){0}; /* a request may come back (http_pool_then) */
	http_suspend(r);			    /* before a worker can possibly resume it */
	pthread_mutex_lock(&p->mu);
	int rc = p->stopping					 ? -SBX_E_BACKEND
		 : http_fairq_push(p->q, key, &c->pool_item) < 0 ? -SBX_E_TOO_MANY
								 : 0;
	if (rc == 0) {
		c->pool_state = JOB_QUEUED;
		c->pool_enq_ns = mono_ns();
		if (p->idle > 0)
			pthread_cond_signal(&p->wake);
	}
	pthread_mutex_unlock(&p->mu);
	if (rc < 0)
		refuse(p, r, rc);
}

/* Event thread, on resume: the handler's reply, or its error. */
static int pool_answer(struct http_req *r)
{
	struct http_req_core *c = http_req_core_of(r);
	if (c->deferred)
		return http_reply_deferred(r);
	if (c->pool_state == JOB_DROPPED) {
		r->hang_up = true; /* nobody to answer: the connection closes now */
		return 0;
	}
	http_resume_fn then = c->pool_then;
	c->pool_then = c->pool_work = NULL;
	if (c->pool_rc == 0 && then && c->pool_state == JOB_RUNNING)
		return then(r);
	return c->pool_rc < 0 ? c->pool_rc : -EIO;
}

int http_pool_then(struct http_pool *p, struct http_req *r, int (*work)(struct http_req *r),
		   int (*then)(struct http_req *r))
{
	if (!p) {
		int rc = work(r);
		return rc < 0 || r->status ? rc : then(r);
	}
	struct http_req_core *c = http_req_core_of(r);
	c->pool_work = work;
	c->pool_then = then;
	http_pool_submit(p, r);
	return 0;
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
		CORE_OF(it)->pool_state = JOB_REFUSED;
		it->next = waiting;
		waiting = it;
	}
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);
	while (waiting) {
		struct http_req_core *c = CORE_OF(waiting);
		waiting = waiting->next;
		refuse(p, &c->req, -SBX_E_BACKEND);
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

/* One per-tenant family at a time (the text format groups a family's
 * lines under its HELP and TYPE). */
struct render_ctx {
	struct buf *out;
	int which;
};

static void render_key(void *ctx, const struct http_fairq_stat *s)
{
	const struct render_ctx *c = ctx;
	switch (c->which) {
	case 0:
		buf_appendf(c->out, "sandboxd_pool_waiting{tenant=\"%s\"} %zu\n", s->key, s->waiting);
		break;
	case 1:
		buf_appendf(c->out, "sandboxd_pool_running{tenant=\"%s\"} %zu\n", s->key, s->running);
		break;
	case 2:
		buf_appendf(c->out, "sandboxd_pool_jobs_total{tenant=\"%s\"} %llu\n", s->key,
			    (unsigned long long)s->done);
		break;
	default:
		buf_appendf(c->out, "sandboxd_pool_cpu_seconds_total{tenant=\"%s\"} %.6f\n", s->key,
			    (double)s->cpu_ns / 1e9);
	}
}

static const char *const key_families[] = {
    "# HELP sandboxd_pool_waiting File requests waiting for a worker, per tenant.\n"
    "# TYPE sandboxd_pool_waiting gauge\n",
    "# HELP sandboxd_pool_running File requests running on a worker, per tenant.\n"
    "# TYPE sandboxd_pool_running gauge\n",
    "# HELP sandboxd_pool_jobs_total File requests a worker finished, per tenant.\n"
    "# TYPE sandboxd_pool_jobs_total counter\n",
    "# HELP sandboxd_pool_cpu_seconds_total Workers' CPU time in a tenant's file requests "
    "(what the pool's turns are fair by).\n"
    "# TYPE sandboxd_pool_cpu_seconds_total counter\n",
};

void http_pool_count_inline(struct http_pool *p)
{
	atomic_fetch_add(&p->inline_done, 1);
}

void http_pool_render(struct http_pool *p, struct buf *out)
{
	pthread_mutex_lock(&p->mu);
	buf_appendf(out,
		    "# HELP sandboxd_pool_workers Workers running blocking file work.\n"
		    "# TYPE sandboxd_pool_workers gauge\nsandboxd_pool_workers %zu\n"
		    "# HELP sandboxd_pool_busy Workers running a job now.\n"
		    "# TYPE sandboxd_pool_busy gauge\nsandboxd_pool_busy %zu\n",
		    p->nthreads, p->busy);
	for (int i = 0; i < 4; i++) {
		buf_appendf(out, "%s", key_families[i]);
		http_fairq_each(p->q, render_key, &(struct render_ctx){.out = out, .which = i});
	}
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
	    "# TYPE sandboxd_pool_dropped_total counter\nsandboxd_pool_dropped_total %llu\n"
	    "# HELP sandboxd_pool_inline_total Read-only file requests answered on an event thread: "
	    "everything they needed was in memory (no-wait mode).\n"
	    "# TYPE sandboxd_pool_inline_total counter\nsandboxd_pool_inline_total %llu\n",
	    (unsigned long long)atomic_load(&p->refused), (unsigned long long)atomic_load(&p->dropped),
	    (unsigned long long)atomic_load(&p->inline_done));
}
