/* The admission queue of POST /exec (see admit.h). */
#include "routes/admit.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/metrics.h"
#include "http/req.h"
#include "http/watch.h"
#include "routes/app.h"
#include "routes/policy.h"

enum admit_state { Q_WAITING, Q_ADMITTED, Q_EXPIRED, Q_STOPPED, Q_GONE, Q_CANCELLED };

/* A waiting request's place (r->hstate while it waits and until its
 * handler takes the slot). */
struct route_admit {
	struct http_req *r;
	struct app *app;
	struct tenant_load *load;
	struct route_admit *next;	  /* in the queue, then in a list to resume */
	int (*rerun)(struct http_req *r); /* its handler, run again once admitted */
	int64_t limit;			  /* its tenant's max_execs when it asked */
	int64_t since_ms, deadline_ms;	  /* monotonic */
	int64_t watch;			  /* its hang-up watch (its HTTP thread's) */
	int64_t held;			  /* inline stdin its parsed body keeps, counted while it waits */
	enum admit_state state;		  /* under app->tenants_lock */
};

/* Under the lock: take t out of its tenant's queue, now in state s. */
static void unlink_locked(struct route_admit *t, enum admit_state s)
{
	struct tenant_load *l = t->load;
	struct route_admit *prev = NULL;
	for (struct route_admit *q = l->qhead; q; prev = q, q = q->next)
		if (q == t) {
			if (prev)
				prev->next = t->next;
			else
				l->qhead = t->next;
			if (l->qtail == t)
				l->qtail = prev;
			break;
		}
	t->next = NULL;
	t->state = s;
	l->queued--;
	route_tenant_unhold_locked(t->app, l, t->held);
	struct admit_stats *st = &t->app->admit;
	st->queued--;
	if (s == Q_ADMITTED)
		http_metrics_exec_queue_wait(t->app->metrics, (double)(mono_ms() - t->since_ms));
	st->expired += s == Q_EXPIRED;
	st->stopped += s == Q_STOPPED;
	st->left += s == Q_GONE;
	st->cancelled += s == Q_CANCELLED;
}

struct route_admit *route_admit_next_locked(struct app *a, struct tenant_load *l)
{
	(void)a;
	struct route_admit *list = NULL, **tail = &list;
	while (l->qhead && l->execs < l->qhead->limit) {
		struct route_admit *t = l->qhead;
		unlink_locked(t, Q_ADMITTED);
		l->execs++; /* the slot is t's */
		*tail = t;
		tail = &t->next;
	}
	return list;
}

void route_admit_resume(struct route_admit *list)
{
	while (list) {
		struct route_admit *t = list;
		list = t->next;
		http_resume(t->r); /* t may be gone from here on */
	}
}

/* Watch thread: the client of a waiting request hung up: it leaves the
 * queue at once (and its place with it). */
static void on_hangup(void *ctx)
{
	struct route_admit *t = ctx;
	struct app *a = t->app;
	pthread_mutex_lock(&a->tenants_lock);
	bool waiting = t->state == Q_WAITING;
	if (waiting)
		unlink_locked(t, Q_GONE);
	pthread_mutex_unlock(&a->tenants_lock);
	if (waiting)
		http_resume(t->r);
}

/* r's place is done with (it left the queue and is answered otherwise). */
static void ticket_drop(struct http_req *r)
{
	free(r->hstate);
	r->hstate = NULL;
	r->on_resume = NULL;
	r->on_free = NULL;
}

/* A request that ends still holding its place: a slot it was given and
 * never took (its handler failed before) passes on. */
static void admit_free(struct http_req *r)
{
	struct route_admit *t = r->hstate;
	struct app *a = t->app;
	struct route_admit *next = NULL;
	pthread_mutex_lock(&a->tenants_lock);
	if (t->state == Q_WAITING) {
		unlink_locked(t, Q_GONE);
	} else if (t->state == Q_ADMITTED) {
		t->load->execs--;
		next = route_admit_next_locked(a, t->load);
	}
	pthread_mutex_unlock(&a->tenants_lock);
	route_admit_resume(next);
	if (t->watch)
		http_watch_remove(a->watch, t->watch);
	ticket_drop(r);
}

/* r's HTTP thread, resumed: run the handler again (admitted), or say
 * why not. */
static int admit_resumed(struct http_req *r)
{
	struct route_admit *t = r->hstate;
	if (t->watch)
		http_watch_remove(r->app->watch, t->watch);
	t->watch = 0;
	enum admit_state s = t->state; /* no longer changes: it left the queue */
	int64_t waited = mono_ms() - t->since_ms, limit = t->limit;
	if (s == Q_ADMITTED || s == Q_CANCELLED)
		return t->rerun(r); /* route_admit_take finds t */
	ticket_drop(r);
	if (s == Q_GONE) {
		r->log_detail = "the client left while its exec waited for a slot; it was not run";
		r->hang_up = true; /* nobody to answer: the connection closes now */
		return 0;
	}
	if (s == Q_STOPPED) {
		r->retry_after_s = 5;
		return http_fail(r, -SBX_E_BACKEND, "the server is shutting down");
	}
	r->retry_after_s = 1;
	return http_fail(r, -SBX_E_TOO_MANY,
			 "tenant %s ran %lld commands for all of the %lld ms this one waited for a slot",
			 r->tenant->name, (long long)limit, (long long)waited);
}

/* r's HTTP thread: watch the client of the waiting request t. t->watch
 * is read by this thread only, which runs r until the handler returns: a
 * resume is acted on after that. */
static void watch_ticket(struct http_req *r, struct route_admit *t)
{
	int fd = http_client_fd(r);
	if (fd >= 0) {
		int64_t w = http_watch_add(r->app->watch, fd, on_hangup, t);
		t->watch = w > 0 ? w : 0;
	}
}

/* Under the lock: the newest max_execs read for l's tenant applies to
 * every request waiting there (a policy changed while they waited). */
static void set_limit_locked(struct tenant_load *l, int64_t limit)
{
	for (struct route_admit *q = l->qhead; q; q = q->next)
		q->limit = limit;
}

int route_admit_take(struct http_req *r, int64_t limit)
{
	if (r->on_free != admit_free)
		return 0;
	struct route_admit *t = r->hstate;
	if (t->state == Q_CANCELLED) {
		ticket_drop(r); /* its watch went at the resume */
		return 2;
	}
	if (t->state != Q_ADMITTED)
		return 0;
	struct app *a = t->app;
	struct tenant_load *l = t->load;
	pthread_mutex_lock(&a->tenants_lock);
	/* Its slot counts in l->execs: over the limit its policy now says
	 * (lowered while it waited), it waits again, first in line. */
	bool over = l->execs > limit && !a->stopping;
	if (over) {
		l->execs--;
		t->state = Q_WAITING;
		t->next = l->qhead;
		l->qhead = t;
		if (!l->qtail)
			l->qtail = t;
		l->queued++;
		a->admit.queued++;
		/* Counted again without a check: it held its bytes a moment ago. */
		l->held_stdin += t->held;
		a->held_stdin += t->held;
		set_limit_locked(l, limit);
		http_suspend(r);
	}
	struct route_admit *now = over ? route_admit_next_locked(a, l) : NULL;
	pthread_mutex_unlock(&a->tenants_lock);
	if (!over) {
		ticket_drop(r); /* its watch went at the resume */
		return 1;
	}
	watch_ticket(r, t);
	route_admit_resume(now);
	return -1;
}

/* The inline stdin r's parsed body keeps while r waits. */
static int64_t stdin_bytes(const struct http_req *r)
{
	return (int64_t)json_string_length(json_object_get(r->json, "stdin"));
}

/* Under the lock: queue r (suspended before anyone can resume it); its
 * stdin bytes are counted already (held). */
static struct route_admit *enqueue_locked(struct http_req *r, int64_t limit, int (*rerun)(struct http_req *),
					  int64_t held)
{
	struct app *a = r->app;
	struct tenant_load *l = r->tenant->load;
	struct route_admit *t = xcalloc(1, sizeof *t);
	t->r = r;
	t->app = a;
	t->load = l;
	t->limit = limit;
	t->rerun = rerun;
	t->held = held;
	t->since_ms = mono_ms();
	t->deadline_ms = t->since_ms + a->cfg->exec_queue_wait_ms;
	if (l->qtail)
		l->qtail->next = t;
	else
		l->qhead = t;
	l->qtail = t;
	l->queued++;
	a->admit.queued++;
	r->hstate = t;
	r->on_resume = admit_resumed;
	r->on_free = admit_free;
	/* The handler reruns from r->json: the raw body it was parsed from
	 * is not kept while r waits (a stdin of many MiB is held once). */
	buf_free(&r->body);
	http_suspend(r);
	return t;
}

int route_admit_exec(struct http_req *r, int64_t limit, int64_t queue_max, int (*rerun)(struct http_req *))
{
	struct app *a = r->app;
	struct tenant_load *l = r->tenant->load;
	pthread_mutex_lock(&a->tenants_lock);
	if (!l->qhead && l->execs < limit) {
		l->execs++;
		pthread_mutex_unlock(&a->tenants_lock);
		return 0;
	}
	if (l->queued >= queue_max || a->stopping) {
		a->admit.full +=
		    queue_max > 0; /* no queue (background, exec_queue 0): not a queue's refusal */
		pthread_mutex_unlock(&a->tenants_lock);
		return -SBX_E_TOO_MANY;
	}
	int64_t held = stdin_bytes(r);
	int rc = route_tenant_hold_locked(a, l, held);
	if (rc < 0) {
		pthread_mutex_unlock(&a->tenants_lock);
		return rc;
	}
	struct route_admit *t = enqueue_locked(r, limit, rerun, held);
	set_limit_locked(l, limit);
	/* A limit raised meanwhile admits at once (this request, if next). */
	struct route_admit *now = route_admit_next_locked(a, l);
	pthread_mutex_unlock(&a->tenants_lock);
	watch_ticket(r, t);
	route_admit_resume(now);
	return 1;
}

/* Whether the waiting request t asked for the client-chosen exec id
 * (its parsed body does not change while it waits). */
static bool asked_id(const struct route_admit *t, const char *id)
{
	const char *v = json_string_value(json_object_get(t->r->json, "id"));
	return v && strcmp(v, id) == 0;
}

int route_admit_cancel(struct app *a, struct tenant_load *l, const char *id)
{
	struct route_admit *list = NULL, **tail = &list;
	int n = 0;
	pthread_mutex_lock(&a->tenants_lock);
	for (struct route_admit *t = l->qhead, *next; t; t = next) {
		next = t->next;
		if (!asked_id(t, id))
			continue;
		unlink_locked(t, Q_CANCELLED);
		*tail = t;
		tail = &t->next;
		n++;
	}
	pthread_mutex_unlock(&a->tenants_lock);
	route_admit_resume(list);
	return n;
}

/* Under the lock: every waiting request that matches, out of its queue in
 * state s, chained for the resume. */
static struct route_admit *take_all_locked(struct app *a, enum admit_state s, int64_t now, int64_t *next)
{
	struct route_admit *list = NULL;
	for (size_t i = 0; i < a->nloads; i++) {
		struct tenant_load *l = a->loads[i];
		while (l->qhead && (s == Q_STOPPED || l->qhead->deadline_ms <= now)) {
			struct route_admit *t = l->qhead;
			unlink_locked(t, s);
			t->next = list;
			list = t;
		}
		if (l->qhead && l->qhead->deadline_ms < *next)
			*next = l->qhead->deadline_ms;
	}
	return list;
}

int64_t route_admit_expire(struct app *a)
{
	int64_t next = INT64_MAX;
	pthread_mutex_lock(&a->tenants_lock);
	struct route_admit *list = a->admit.queued ? take_all_locked(a, Q_EXPIRED, mono_ms(), &next) : NULL;
	pthread_mutex_unlock(&a->tenants_lock);
	route_admit_resume(list);
	return next;
}

void route_admit_stop(struct app *a)
{
	int64_t next = INT64_MAX;
	pthread_mutex_lock(&a->tenants_lock);
	struct route_admit *list = take_all_locked(a, Q_STOPPED, 0, &next);
	pthread_mutex_unlock(&a->tenants_lock);
	route_admit_resume(list);
}

void route_admit_render(struct app *a, struct buf *out)
{
	pthread_mutex_lock(&a->tenants_lock);
	const struct admit_stats *st = &a->admit;
	buf_appendf(out, "# HELP sandboxd_exec_queued POST /exec requests waiting for one of their tenant's "
			 "exec slots, per tenant.\n"
			 "# TYPE sandboxd_exec_queued gauge\n");
	for (size_t i = 0; i < a->nloads; i++)
		if (a->loads[i]->queued > 0)
			buf_appendf(out, "sandboxd_exec_queued{tenant=\"%s\"} %d\n", a->loads[i]->name,
				    a->loads[i]->queued);
	buf_appendf(out,
		    "# HELP sandboxd_exec_queue_refused_total POST /exec requests refused at the exec limit: "
		    "the queue was full (full), the wait bound passed (expired), the server stopped "
		    "(stopping); left: the client went away while waiting; cancelled: POST "
		    "/exec/{id}/cancel withdrew it.\n"
		    "# TYPE sandboxd_exec_queue_refused_total counter\n"
		    "sandboxd_exec_queue_refused_total{reason=\"full\"} %llu\n"
		    "sandboxd_exec_queue_refused_total{reason=\"expired\"} %llu\n"
		    "sandboxd_exec_queue_refused_total{reason=\"stopping\"} %llu\n"
		    "sandboxd_exec_queue_refused_total{reason=\"left\"} %llu\n"
		    "sandboxd_exec_queue_refused_total{reason=\"cancelled\"} %llu\n",
		    (unsigned long long)st->full, (unsigned long long)st->expired,
		    (unsigned long long)st->stopped, (unsigned long long)st->left,
		    (unsigned long long)st->cancelled);
	pthread_mutex_unlock(&a->tenants_lock);
}

/* ---- the tenants' slots: commands, approvals, transfers ---- */

static int acquire(struct app *a, int *counter, int64_t limit)
{
	int rc = 0;
	pthread_mutex_lock(&a->tenants_lock);
	if (*counter >= limit)
		rc = -SBX_E_TOO_MANY;
	else
		(*counter)++;
	pthread_mutex_unlock(&a->tenants_lock);
	return rc;
}

static void release(struct app *a, int *counter)
{
	pthread_mutex_lock(&a->tenants_lock);
	(*counter)--;
	pthread_mutex_unlock(&a->tenants_lock);
}

int route_tenant_acquire_exec(struct app *a, struct tenant *t, int64_t limit)
{
	return acquire(a, &t->load->execs, limit);
}

void route_tenant_release_exec(struct app *a, struct tenant *t)
{
	pthread_mutex_lock(&a->tenants_lock);
	t->load->execs--;
	struct route_admit *next = route_admit_next_locked(a, t->load);
	pthread_mutex_unlock(&a->tenants_lock);
	route_admit_resume(next);
}

/* Issue 26, item 7: 32 commands waiting for approval with 14 MB of
 * inline stdin each kept 619 MiB in the server, outside every tenant's
 * budget, for up to the approval timeout. */
int route_tenant_hold_locked(struct app *a, struct tenant_load *l, int64_t n)
{
	int64_t per = a->cfg->wait_stdin_bytes_per_tenant;
	if (n <= 0)
		return 0;
	if (n > per)
		return -E2BIG;
	if (l->held_stdin > per - n || a->held_stdin > a->cfg->wait_stdin_bytes - n)
		return -ENOBUFS;
	l->held_stdin += n;
	a->held_stdin += n;
	return 0;
}

void route_tenant_unhold_locked(struct app *a, struct tenant_load *l, int64_t n)
{
	if (n <= 0)
		return;
	l->held_stdin -= n;
	a->held_stdin -= n;
}

int route_tenant_hold_fail(struct http_req *r, int rc, int64_t n)
{
	const struct sbx_config *c = r->app->cfg;
	if (rc == -E2BIG)
		return http_fail(r, -E2BIG,
				 "an inline stdin of %lld bytes cannot wait (for approval or an exec slot): "
				 "wait-stdin-bytes-per-tenant is %lld; send it with stdin_pipe or as a file",
				 (long long)n, (long long)c->wait_stdin_bytes_per_tenant);
	r->retry_after_s = 1;
	return http_fail(
	    r, -SBX_E_TOO_MANY,
	    "requests waiting (for approval or an exec slot) already keep their bound of inline "
	    "stdin (wait-stdin-bytes-per-tenant %lld, wait-stdin-bytes %lld in all); retry later, "
	    "or send it with stdin_pipe or as a file",
	    (long long)c->wait_stdin_bytes_per_tenant, (long long)c->wait_stdin_bytes);
}

int route_tenant_acquire_pending(struct app *a, struct tenant *t, int64_t limit, int64_t stdin_bytes)
{
	struct tenant_load *l = t->load;
	int rc = 0;
	pthread_mutex_lock(&a->tenants_lock);
	if (l->pending >= limit)
		rc = -SBX_E_TOO_MANY;
	else if ((rc = route_tenant_hold_locked(a, l, stdin_bytes)) == 0)
		l->pending++;
	pthread_mutex_unlock(&a->tenants_lock);
	return rc;
}

void route_tenant_release_pending(struct app *a, struct tenant *t, int64_t stdin_bytes)
{
	pthread_mutex_lock(&a->tenants_lock);
	t->load->pending--;
	route_tenant_unhold_locked(a, t->load, stdin_bytes);
	pthread_mutex_unlock(&a->tenants_lock);
}

/* The limit is read at each transfer: a policy change applies to the next one. */
int route_tenant_acquire_transfer(struct app *a, struct tenant *t)
{
	struct route_policy p;
	int64_t limit = a->cfg->tenant_max_transfers;
	int rc = route_policy_load(a->store, a->cfg, t->name, &p, NULL, NULL);
	if (rc == -SBX_E_BACKEND)
		return rc; /* a stored limit it cannot apply: refused, not the default */
	if (rc == 0) {
		limit = p.max_transfers;
		route_policy_clear(&p);
	}
	return acquire(a, &t->load->transfers, limit);
}

void route_tenant_release_transfer(struct app *a, struct tenant *t)
{
	release(a, &t->load->transfers);
}
