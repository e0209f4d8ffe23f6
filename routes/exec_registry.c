/* The registry of running execs, idempotency, waiters, the runner
 * callback and the completion thread (see exec_registry.h). */
#include "routes/exec_registry.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/nodes.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "routes/admit.h"
#include "routes/app.h"
#include "routes/tenant_cache.h"
#include "http/errors.h"
#include "routes/exec_row.h"
#include "http/hub.h"
#include "http/metrics.h"
#include "http/req.h"
#include "http/watch.h"
#include "common/utf8.h"
#include "routes/code.h"
#include "routes/exec_extras.h"
#include "sandbox/changes.h"
#include "sandbox/registry.h"
#include "sandbox/rootimg.h"
#include "routes/provider.h"
#include "routes/routes.h"
#include "sandbox/runner.h"
#include "sandbox/workspace.h"
#include "store/store.h"

#define TAIL_BYTES 1024

struct waiter {
	struct http_req *r;
	struct waiter *next;
};

/* A command waiting for approval: what to run once approved (copies). */
struct pending {
	struct sbx_exec_req run; /* its pointers lead into the copies below */
	char *command, *cwd_rel, *net_allow, *net_tenant, *net_sub, *rootfs;
	char **env; /* run.rootimg: the root image, held (owned) until submitted */
	void *stdin_data;
	int64_t deadline_ms; /* monotonic: rejected when undecided by then */
	bool deciding;	     /* under registry lock: approved, rejected or cancelled */
};

/* A job's share of its tenant's limits, released when it ends: a pending
 * slot while it waits for approval, an exec slot once it runs, none when
 * it was cancelled while it waited for one (routes/admit.h). */
enum job_slot { SLOT_PENDING, SLOT_EXEC, SLOT_NONE };

struct exec_job {
	struct app *app;
	struct tenant *tenant; /* referenced until the exit */
	char id[72];
	uint64_t handle;	       /* the runner's */
	int64_t watch;		       /* disconnect watch of the first request */
	struct http_hub_channel *chan; /* live events */
	int refs;		       /* under registry lock */
	bool finished;
	struct waiter *waiters; /* under registry lock */
	struct exec_job *next;
	/* The exit, set by whoever queues it, read by the completion thread. */
	json_t *result;	     /* NULL: never started */
	bool spill_whole[2]; /* stdout, stderr: the row may keep less (routes/exec_row.h) */
	size_t window;
	int error;		     /* with result NULL */
	enum store_exec_state state; /* with result: exited, timed_out, cancelled */
	int exit_code;
	int64_t finished_at_ms, duration_ms;
	struct exec_job *done_next; /* under done_mu */
	/* The waiting request that records this exit itself (under done_mu):
	 * queue_exit resumes it rather than wake the completion thread. */
	struct http_req *direct;
	/* set at the start, read by the completion thread and lookups */
	struct sbx_snapshot *before; /* files_changed at the exit */
	char *session;		     /* the session key, for DELETE /session */
	size_t session_len;
	/* progress for GET /exec/{id}: the runner thread writes, under pmu */
	pthread_mutex_t pmu;
	uint64_t bytes[2]; /* stdout, stderr */
	int64_t last_output_at, started_mono;
	char tail[TAIL_BYTES];
	size_t tail_len;
	/* Approval. */
	struct pending *pend;  /* non-NULL: it waited (or waits) for approval; owned */
	char *requested_by;    /* the requesting token's sub; owned */
	char *reason;	       /* with error: the message (-SBX_E_REJECTED, or a remote's); owned */
	int64_t retry_after_s; /* with error: a remote's Retry-After (0: none) */
	int64_t max_execs;
	int64_t held_bytes;	       /* with SLOT_PENDING: the inline stdin it keeps (counted) */
	enum job_slot slot;	       /* which of its tenant's slots it holds */
	_Atomic bool hung_up;	       /* the waiting client went away (the watch thread says) */
	bool hangup_handled;	       /* under registry lock */
	struct exec_job *expired_next; /* the approvals thread's list */
};

struct route_execs {
	struct app *app;
	struct sbx_exec_req base;
	pthread_mutex_t mu;
	struct exec_job *jobs;
	/* Exits waiting for the completion thread, oldest first. */
	pthread_mutex_t done_mu;
	pthread_cond_t done_wake, done_idle;
	struct exec_job *done_head, *done_tail;
	bool done_busy, done_stop;
	size_t done_direct;  /* exits handed to a waiter, not recorded yet */
	pthread_cond_t gone; /* under mu: a job left the registry */
	pthread_t done_thread;
	/* Approval deadlines and hang-ups of waiting clients (under mu). */
	pthread_cond_t pend_wake;
	bool pend_stop;
	pthread_t pend_thread;
};

/* A suspended request's view of its exec. */
struct exec_wait {
	struct exec_job *job;
	json_t *result; /* set before the resume */
	int error;	/* or this */
	char *reason;	/* with error: its message, when there is one */
	int64_t retry_after_s;
	bool records; /* under done_mu: resumed to record the exit (complete) first */
};

static void pending_free(struct pending *p)
{
	if (!p)
		return;
	free(p->command);
	free(p->cwd_rel);
	free(p->net_allow);
	free(p->net_tenant);
	free(p->net_sub);
	free(p->rootfs);
	sbx_rootimg_close(&p->run.rootimg);
	for (char **v = p->env; v && *v; v++)
		free(*v);
	free(p->env);
	free(p->stdin_data);
	free(p);
}

static void job_put_locked(struct exec_job *j)
{
	if (--j->refs > 0)
		return;
	route_tenant_put(j->app, &j->tenant);
	sbx_snapshot_free(&j->before);
	pthread_mutex_destroy(&j->pmu);
	free(j->session);
	pending_free(j->pend);
	free(j->requested_by);
	free(j->reason);
	free(j);
}

/* life: the tenant's life whose exec it must be (0: any life of the
 * name, for callers that found its row in the store first). */
static struct exec_job *find_locked(struct route_execs *e, const char *tenant, int64_t life, const char *id)
{
	for (struct exec_job *j = e->jobs; j; j = j->next)
		if (strcmp(j->id, id) == 0 && strcmp(j->tenant->name, tenant) == 0 &&
		    (!life || j->tenant->incarnation == life))
			return j;
	return NULL;
}

static enum store_exec_state state_of(const struct sbx_exec_result *res)
{
	return res->timed_out ? EXEC_TIMED_OUT : res->cancelled ? EXEC_CANCELLED : EXEC_EXITED;
}

static json_t *time_json(int64_t ms)
{
	char t[40];
	rfc3339_ms(ms, t, sizeof t);
	return json_string(t);
}

static json_t *result_fields(const char *id, const struct sbx_exec_result *res)
{
	return json_pack(
	    "{s:s, s:i, s:s%, s:s%, s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:I, s:I, s:o, s:o, s:o, s:o, s:I}",
	    "id", id, "exit_code", res->exit_code, "stdout", res->stdout_text ? res->stdout_text : "",
	    res->stdout_len, "stderr", res->stderr_text ? res->stderr_text : "", res->stderr_len, "timed_out",
	    res->timed_out, "idle", res->idle, "cancelled", res->cancelled, "truncated", res->truncated,
	    "oom_killed", res->oom_killed, "pids_limited", res->pids_limited, "uncontained", res->uncontained,
	    "stdout_bytes", (json_int_t)res->stdout_bytes, "stderr_bytes", (json_int_t)res->stderr_bytes,
	    "stdout_spill", res->stdout_spill ? json_string(res->stdout_spill) : json_null(), "stderr_spill",
	    res->stderr_spill ? json_string(res->stderr_spill) : json_null(), "started_at",
	    time_json(res->started_at_ms), "finished_at", time_json(res->finished_at_ms), "duration_ms",
	    (json_int_t)(res->finished_at_ms - res->started_at_ms));
}

/* What the egress gateway refused a command with network: the first
 * destinations, each with the reason, so that a model stops retrying a
 * host it will never reach. */
static json_t *egress_denied_json(const struct sbx_egress_summary *sum)
{
	json_t *a = json_array();

	for (size_t i = 0; i < sum->n_denied; i++)
		json_array_append_new(
		    a, json_pack("{s:s, s:s}", "dest", sum->denied[i].dest, "reason", sum->denied[i].reason));
	return a;
}

static json_t *result_json(const char *id, const struct sbx_exec_result *res)
{
	json_t *j = result_fields(id, res);

	if (j && res->networked)
		json_object_set_new(j, "egress_denied", egress_denied_json(&res->egress));
	return j;
}

static json_t *heartbeat_json(const char *id, const struct sbx_event *ev)
{
	return json_pack("{s:s, s:I, s:I, s:I, s:o, s:s}", "id", id, "elapsed_ms", (json_int_t)ev->elapsed_ms,
			 "stdout_bytes", (json_int_t)ev->stdout_bytes, "stderr_bytes",
			 (json_int_t)ev->stderr_bytes, "last_output_at",
			 ev->last_output_at_ms ? time_json(ev->last_output_at_ms) : json_null(), "tail",
			 ev->tail ? ev->tail : "");
}

/* Completion thread: the store row, metrics and the `exit` event. */
static void record_exit(struct app *a, struct exec_job *j)
{
	if (!j->result && j->error == -SBX_E_REJECTED) {
		/* Its row says so already (store_exec_decide). */
		http_metrics_exec_finished(a->metrics, "rejected", 0);
		json_t *err = json_pack("{s:{s:s, s:s, s:n}}", "error", "code", "rejected", "message",
					j->reason, "retry_hint");
		http_hub_channel_exit(a->hub, j->chan, NULL, err);
		json_decref(err);
	} else if (!j->result) {
		/* Never started: forget the row so the id can be retried. */
		store_exec_delete(a->store, j->tenant->name, j->id);
		http_metrics_exec_finished(a->metrics, "failed", 0);
		struct http_wire_error w = http_wire_error(j->error);
		json_t *err = json_pack("{s:{s:s, s:s, s:o}}", "error", "code", w.code, "message",
					j->reason ? j->reason : "the command could not be started",
					"retry_hint", w.retry_hint ? json_string(w.retry_hint) : json_null());
		http_hub_channel_exit(a->hub, j->chan, NULL, err);
		json_decref(err);
	} else {
		if (j->before)
			route_code_add_changes(a, j->tenant->ws, j->before, j->result);
		char *text = route_exec_row_text(j->result, j->spill_whole, j->window);
		int64_t exit_id = http_hub_channel_exit_id(a->hub, j->chan);
		const struct store_exec_why why = {
		    json_is_true(json_object_get(j->result, "oom_killed")),
		    json_is_true(json_object_get(j->result, "pids_limited")),
		    json_is_true(json_object_get(j->result, "uncontained")),
		};
		if (store_exec_finish(a->store, j->tenant->name, j->id, j->state, j->exit_code, text,
				      j->finished_at_ms, exit_id, &why) < 0)
			http_metrics_store_error(a->metrics);
		free(text);
		http_metrics_exec_finished(a->metrics, store_exec_state_name(j->state),
					   (double)j->duration_ms);
		http_hub_channel_exit(a->hub, j->chan, j->result, NULL);
	}
	j->chan = NULL;
	if (j->slot == SLOT_EXEC)
		route_tenant_release_exec(a, j->tenant);
	else if (j->slot == SLOT_PENDING)
		route_tenant_release_pending(a, j->tenant, j->held_bytes);
}

/* Record the exit, then leave the registry and answer the waiters: on
 * the completion thread, on the starting request's thread when the runner
 * refused the job, or on the thread of self, the waiter queue_exit resumed
 * to do it (it answers itself once this returns). */
static void complete(struct exec_job *j, struct http_req *self)
{
	struct app *a = j->app;
	json_t *result = j->result;
	int error = j->error;
	record_exit(a, j);

	struct route_execs *e = a->execs;
	pthread_mutex_lock(&e->mu);
	j->finished = true;
	for (struct exec_job **p = &e->jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
	http_watch_remove(a->watch, j->watch);
	j->watch = 0;
	pthread_cond_broadcast(&e->gone);
	while (j->waiters) {
		struct waiter *w = j->waiters;
		j->waiters = w->next;
		struct exec_wait *ew = w->r->hstate;
		ew->result = result ? json_incref(result) : NULL;
		ew->error = error;
		ew->reason = j->reason ? xstrdup(j->reason) : NULL;
		ew->retry_after_s = j->retry_after_s;
		if (w->r != self)
			http_resume(w->r);
		free(w);
	}
	j->result = NULL;
	job_put_locked(j); /* the runner's reference */
	pthread_mutex_unlock(&e->mu);
	json_decref(result);
}

static void *completion_main(void *arg)
{
	struct route_execs *e = arg;
	pthread_mutex_lock(&e->done_mu);
	for (;;) {
		while (!e->done_head && !e->done_stop)
			pthread_cond_wait(&e->done_wake, &e->done_mu);
		if (!e->done_head)
			break; /* stopping, and everything queued is done */
		struct exec_job *batch = e->done_head;
		e->done_head = e->done_tail = NULL;
		e->done_busy = true;
		pthread_mutex_unlock(&e->done_mu);
		while (batch) {
			struct exec_job *j = batch;
			batch = j->done_next;
			complete(j, NULL);
		}
		pthread_mutex_lock(&e->done_mu);
		e->done_busy = false;
		pthread_cond_broadcast(&e->done_idle);
	}
	pthread_mutex_unlock(&e->done_mu);
	return NULL;
}

/* Keep what an exit says (its result is only borrowed). */
static void set_exit(struct exec_job *j, const struct sbx_event *ev, int spawn_error)
{
	const struct sbx_exec_result *res = ev->result;
	struct sbx_exec_result never_ran = {0};
	if (!res && spawn_error == -ECANCELED) {
		/* Cancelled (by the route, a hang-up or the server stopping)
		 * before the runner started it: nothing ran. That is a cancel,
		 * as the caller asked, not a server error; exit_code is that of
		 * the SIGTERM a running command would have got. */
		never_ran.exit_code = 128 + SIGTERM;
		never_ran.cancelled = true;
		never_ran.started_at_ms = never_ran.finished_at_ms = ev->at_ms;
		res = &never_ran;
	}
	if (res) {
		j->result = result_json(j->id, res);
		j->spill_whole[0] = res->stdout_spill_whole;
		j->spill_whole[1] = res->stderr_spill_whole;
		j->window = res->window;
		j->state = state_of(res);
		j->exit_code = res->exit_code;
		j->finished_at_ms = res->finished_at_ms;
		j->duration_ms = res->finished_at_ms - res->started_at_ms;
	} else {
		j->error = spawn_error ? spawn_error : -SBX_E_BACKEND;
		j->reason = ev->message ? xstrdup(ev->message) : NULL;
		j->retry_after_s = ev->retry_after_s;
	}
}

/* Queue j for the completion thread (done_mu held). */
static void enqueue_exit_locked(struct route_execs *e, struct exec_job *j)
{
	j->done_next = NULL;
	if (e->done_tail)
		e->done_tail->done_next = j;
	else
		e->done_head = j;
	e->done_tail = j;
	pthread_cond_signal(&e->done_wake);
}

/* Runner thread: hand the exit on, under a short lock no one holds across
 * I/O. A request waiting for the result is resumed to record it itself
 * (one thread hand-off instead of two: issue 15, P1); a background or
 * streamed exec, or one whose waiter left, goes to the completion thread.
 * The resumed request is still suspended until this resume, so it cannot
 * have been freed. */
static void queue_exit(struct exec_job *j)
{
	struct route_execs *e = j->app->execs;
	pthread_mutex_lock(&e->done_mu);
	struct http_req *r = j->direct;
	j->direct = NULL;
	if (r) {
		((struct exec_wait *)r->hstate)->records = true;
		e->done_direct++;
	} else {
		enqueue_exit_locked(e, j);
	}
	pthread_mutex_unlock(&e->done_mu);
	if (r)
		http_resume(r);
}

/* r's thread, resumed by queue_exit to record the exit (gone: r ended
 * before it could; then the completion thread records it). */
static void take_direct(struct http_req *r, bool gone)
{
	struct exec_wait *ew = r->hstate;
	struct route_execs *e = r->app->execs;
	pthread_mutex_lock(&e->done_mu);
	bool records = ew->records;
	ew->records = false;
	if (ew->job->direct == r)
		ew->job->direct = NULL;
	if (records && gone)
		enqueue_exit_locked(e, ew->job);
	pthread_mutex_unlock(&e->done_mu);
	if (!records)
		return;
	if (!gone)
		complete(ew->job, r);
	pthread_mutex_lock(&e->done_mu);
	e->done_direct--;
	pthread_cond_broadcast(&e->done_idle);
	pthread_mutex_unlock(&e->done_mu);
}

/* Runner thread: count the output and keep its last KiB. */
static void note_output(struct exec_job *j, const struct sbx_event *ev)
{
	pthread_mutex_lock(&j->pmu);
	j->bytes[ev->stream == 2] += ev->len;
	j->last_output_at = ev->at_ms;
	if (ev->len >= TAIL_BYTES) {
		memcpy(j->tail, ev->data + ev->len - TAIL_BYTES, TAIL_BYTES);
		j->tail_len = TAIL_BYTES;
	} else {
		size_t keep = j->tail_len + ev->len > TAIL_BYTES ? TAIL_BYTES - ev->len : j->tail_len;
		memmove(j->tail, j->tail + j->tail_len - keep, keep);
		memcpy(j->tail + keep, ev->data, ev->len);
		j->tail_len = keep + ev->len;
	}
	pthread_mutex_unlock(&j->pmu);
}

/* Runner thread: every event of a job. */
static void on_event(void *ctx, const struct sbx_event *ev, int spawn_error)
{
	struct exec_job *j = ctx;
	struct app *a = j->app;
	switch (ev->kind) {
	case SBX_EV_START:
		http_hub_channel_started(a->hub, j->chan);
		return;
	case SBX_EV_HEARTBEAT:
		http_metrics_heartbeat(a->metrics);
		http_hub_channel_heartbeat(a->hub, j->chan, heartbeat_json(j->id, ev));
		return;
	case SBX_EV_OUTPUT:
		note_output(j, ev);
		http_hub_channel_output(a->hub, j->chan, ev->stream, ev->data, ev->len);
		return;
	case SBX_EV_EXIT:
		set_exit(j, ev, spawn_error);
		queue_exit(j);
		return;
	}
}

static void *approvals_main(void *arg);

void route_execs_new(struct route_execs **out, struct app *a, const struct sbx_exec_req *base)
{
	struct route_execs *e = xcalloc(1, sizeof *e);
	e->app = a;
	e->base = *base;
	pthread_mutex_init(&e->mu, NULL);
	pthread_mutex_init(&e->done_mu, NULL);
	pthread_cond_init(&e->done_wake, NULL);
	pthread_cond_init(&e->done_idle, NULL);
	pthread_cond_init(&e->gone, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->pend_wake, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&e->done_thread, NULL, completion_main, e) != 0 ||
	    pthread_create(&e->pend_thread, NULL, approvals_main, e) != 0) {
		log_msg("error", "cannot start the exec completion or approvals thread");
		abort();
	}
	*out = e;
}

void route_execs_wake(struct route_execs *e)
{
	pthread_mutex_lock(&e->mu);
	pthread_cond_signal(&e->pend_wake);
	pthread_mutex_unlock(&e->mu);
}

void route_execs_flush(struct route_execs *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->done_mu);
	while (e->done_head || e->done_busy || e->done_direct)
		pthread_cond_wait(&e->done_idle, &e->done_mu);
	pthread_mutex_unlock(&e->done_mu);
}

void route_execs_free(struct route_execs **ep)
{
	struct route_execs *e = ep ? *ep : NULL;
	if (!e)
		return;
	pthread_mutex_lock(&e->mu);
	e->pend_stop = true;
	pthread_cond_signal(&e->pend_wake);
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->pend_thread, NULL);
	pthread_mutex_lock(&e->done_mu);
	e->done_stop = true;
	pthread_cond_signal(&e->done_wake);
	pthread_mutex_unlock(&e->done_mu);
	pthread_join(e->done_thread, NULL); /* it drains the queue first */
	pthread_cond_destroy(&e->pend_wake);
	pthread_cond_destroy(&e->done_idle);
	pthread_cond_destroy(&e->done_wake);
	pthread_cond_destroy(&e->gone);
	pthread_mutex_destroy(&e->done_mu);
	pthread_mutex_destroy(&e->mu);
	free(e);
	*ep = NULL;
}

const struct sbx_exec_req *route_execs_base(const struct route_execs *e)
{
	return &e->base;
}

json_t *route_execs_progress(struct route_execs *e, const char *tenant, const char *id)
{
	json_t *o = NULL;
	pthread_mutex_lock(&e->mu);
	struct exec_job *j = find_locked(e, tenant, 0, id);
	if (j && !j->finished) {
		size_t n = 0;
		pthread_mutex_lock(&j->pmu);
		char *tail = utf8_sanitize(j->tail, j->tail_len, &n);
		o = json_pack("{s:I, s:I, s:o, s:I, s:s%}", "stdout_bytes", (json_int_t)j->bytes[0],
			      "stderr_bytes", (json_int_t)j->bytes[1], "last_output_at",
			      j->last_output_at ? time_json(j->last_output_at) : json_null(), "elapsed_ms",
			      (json_int_t)(mono_ms() - j->started_mono), "tail", tail, n);
		pthread_mutex_unlock(&j->pmu);
		free(tail);
	}
	pthread_mutex_unlock(&e->mu);
	return o;
}

static bool session_running_locked(struct route_execs *e, const char *tenant, const char *key, size_t len,
				   bool kill)
{
	bool any = false;
	for (struct exec_job *j = e->jobs; j; j = j->next) {
		if (j->finished || strcmp(j->tenant->name, tenant) != 0 || j->session_len != len ||
		    memcmp(j->session, key, len) != 0)
			continue;
		any = true;
		if (kill && j->handle)
			route_jobs_kill(e->app, j->handle);
	}
	return any;
}

int route_execs_stop_session(struct route_execs *e, const char *tenant, const char *key, size_t key_len,
			     int64_t wait_ms)
{
	int n = 0;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (wait_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&e->mu);
	for (struct exec_job *j = e->jobs; j; j = j->next)
		n += !j->finished && strcmp(j->tenant->name, tenant) == 0 && j->session_len == key_len &&
		     memcmp(j->session, key, key_len) == 0;
	/* SIGKILL cannot be ignored: each ends within a runner turn, unless
	 * the kernel holds it (then the wait is bounded). */
	bool any = session_running_locked(e, tenant, key, key_len, true);
	while (any && pthread_cond_timedwait(&e->gone, &e->mu, &until) == 0)
		any = session_running_locked(e, tenant, key, key_len, false);
	pthread_mutex_unlock(&e->mu);
	return n;
}

uint64_t route_execs_handle(struct route_execs *e, const char *tenant, const char *id)
{
	uint64_t handle = 0;
	pthread_mutex_lock(&e->mu);
	struct exec_job *j = find_locked(e, tenant, 0, id);
	if (j && !j->finished)
		handle = j->handle;
	pthread_mutex_unlock(&e->mu);
	return handle;
}

/* Watch thread: the first request's client hung up. It must not take the
 * registry lock (complete() removes watches under it): a command still
 * waiting for approval is cancelled by the approvals thread. */
static void on_hangup(void *ctx)
{
	struct exec_job *j = ctx;
	if (j->pend) {
		j->hung_up = true;
		pthread_cond_signal(&j->app->execs->pend_wake);
	}
	if (j->handle)
		route_jobs_cancel(j->app, j->handle);
}

/* A 200 with a ShellResult (stolen). */
static int reply_result(struct http_req *r, json_t *res)
{
	http_set_exec_result(r, res);
	r->has_exit_code = true; /* as before: a result without one says -1 */
	r->exit_code = (int)json_integer_value(json_object_get(res, "exit_code"));
	return http_reply_json(r, 200, res);
}

static int exec_resume(struct http_req *r)
{
	struct exec_wait *ew = r->hstate;
	take_direct(r, false);
	if (ew->error == -SBX_E_REJECTED)
		return http_fail(r, ew->error, "%s", ew->reason ? ew->reason : "the command was rejected");
	if (ew->error && ew->retry_after_s > 0)
		r->retry_after_s = ew->retry_after_s;
	if (ew->error && ew->reason)
		return http_fail(r, ew->error, "%s", ew->reason);
	const char *down = ew->job->tenant->provider->ops->down;
	if (ew->error && down)
		return http_fail(r, ew->error, "%s",
				 ew->error == -SBX_E_BACKEND ? down
							     : "the tenant's backend refused the command");
	if (ew->error)
		return http_fail(r, ew->error,
				 ew->error == -SBX_E_BACKEND
				     ? "the isolation backend could not start the command"
				     : "the command could not be started");
	json_t *res = ew->result;
	ew->result = NULL;
	return reply_result(r, res);
}

static void exec_free(struct http_req *r)
{
	struct exec_wait *ew = r->hstate;
	if (!ew)
		return;
	if (ew->job) {
		struct route_execs *e = r->app->execs;
		pthread_mutex_lock(&e->mu);
		for (struct waiter **p = &ew->job->waiters; *p; p = &(*p)->next)
			if ((*p)->r == r) {
				struct waiter *w = *p;
				*p = w->next;
				free(w);
				break;
			}
		take_direct(r, true); /* no longer a waiter complete() would resume */
		job_put_locked(ew->job);
		pthread_mutex_unlock(&e->mu);
	}
	json_decref(ew->result);
	free(ew->reason);
	free(ew);
	r->hstate = NULL;
}

/* Wait on a running job (registry lock held): suspend r until its exit. */
static void wait_on_locked(struct http_req *r, struct exec_job *j)
{
	struct exec_wait *ew = xcalloc(1, sizeof *ew);
	ew->job = j;
	j->refs++;
	r->hstate = ew;
	r->on_resume = exec_resume;
	r->on_free = exec_free;
	struct waiter *w = xcalloc(1, sizeof *w);
	w->r = r;
	w->next = j->waiters;
	j->waiters = w;
	struct route_execs *e = r->app->execs;
	pthread_mutex_lock(&e->done_mu);
	/* Resumed at the exit to record it, unless recording means walking
	 * the workspace for files_changed: that stays off the HTTP threads. */
	if (!j->direct && !j->before)
		j->direct = r;
	pthread_mutex_unlock(&e->done_mu);
	http_suspend(r);
}

/* The data of an exec's `start` event. */
static json_t *start_json(const char *id, const char *command, const char *session, size_t session_len,
			  const char *cwd, int64_t started_at)
{
	size_t n = 0;
	char *sk = utf8_sanitize(session, session_len, &n);
	json_t *o = json_pack("{s:s, s:s, s:s%, s:s, s:o}", "id", id, "command", command, "session", sk, n,
			      "cwd", cwd, "started_at", time_json(started_at));
	free(sk);
	return o;
}

json_t *route_exec_start_json(const struct store_exec *ex)
{
	return start_json(ex->id, ex->command, ex->session, ex->session_len, ex->cwd, ex->started_at);
}

/* A row read as running: wait on (or subscribe to) its job. -ENOENT when
 * it finished between the two looks. */
static int join_running(struct http_req *r, const char *id, bool stream)
{
	int rc = -ENOENT;
	struct route_execs *e = r->app->execs;
	pthread_mutex_lock(&e->mu);
	struct exec_job *j = find_locked(e, r->tenant->name, r->tenant->incarnation, id);
	if (j && !j->finished) {
		if (!stream) {
			wait_on_locked(r, j);
			rc = 0;
		} else {
			/* Answered, or a subscriber that could not answer
			 * (never a second subscriber for r), or -ENOENT. */
			rc = http_hub_subscribe_exec(r->app->hub, r, r->tenant->name, id, 0, false);
		}
	}
	pthread_mutex_unlock(&e->mu);
	return rc;
}

/* A finished exec's row: its result again, the rejection, or a conflict
 * when it was lost. */
static int answer_finished(struct http_req *r, const char *id, struct store_exec *ex, bool stream)
{
	if (ex->state == EXEC_REJECTED) {
		char why[512];
		snprintf(why, sizeof why, "exec %s was rejected%s%s%s%s", id, ex->decided_by ? " by " : "",
			 ex->decided_by ? ex->decided_by : "", ex->reason ? ": " : "",
			 ex->reason ? ex->reason : "");
		store_exec_clear(ex);
		return http_fail(r, -SBX_E_REJECTED, "%s", why);
	}
	if (ex->state == EXEC_LOST || !ex->result) {
		store_exec_clear(ex);
		return http_fail(r, -SBX_E_CONFLICT,
				 "exec %s was lost in a restart of the server; use a new id", id);
	}
	json_t *res = route_exec_row_result(r->tenant, ex);
	json_t *start = route_exec_start_json(ex);
	int64_t exit_id = ex->exit_event_id;
	store_exec_clear(ex);
	if (!res) {
		json_decref(start);
		return http_fail(r, -SBX_E_STORE, "the stored result is unreadable");
	}
	if (stream) {
		http_hub_reply_ended(r->app->hub, r, start, res, exit_id, 0);
		json_decref(start);
		json_decref(res);
		return 0;
	}
	json_decref(start);
	return reply_result(r, res);
}

/* The same id again: the same request waits for or reads that exec; a
 * different one is a conflict. -ENOENT: no such exec (any more: a failed
 * start), the caller may start it. */
/* A background request's answer (and that of one that does not wait for
 * approval): the exec's view, 202 while it runs or waits. */
static int reply_view(struct http_req *r, struct store_exec *ex)
{
	json_t *o = route_exec_start_json(ex);
	json_t *res = route_exec_row_result(r->tenant, ex);
	bool running = store_exec_state_live(ex->state);
	json_object_set_new(o, "state", json_string(store_exec_state_name(ex->state)));
	json_object_set_new(o, "result", res ? res : json_null());
	store_exec_clear(ex);
	return http_reply_json(r, running ? 202 : 200, o);
}

static int answer_existing(struct http_req *r, const char *id, const char *hash,
			   const struct route_exec_opts *o)
{
	struct store_exec ex;
	int rc = store_exec_get(r->app->store, r->tenant->name, id, &ex);
	if (rc == -ENOENT)
		return rc; /* gone meanwhile (a failed start): the caller retries */
	if (rc < 0)
		return http_fail(r, rc, "cannot read the exec record");
	if (strcmp(ex.request_hash, hash) != 0) {
		store_exec_clear(&ex);
		return http_fail(r, -SBX_E_CONFLICT, "exec id %s was used for a different request", id);
	}
	bool pending = ex.state == EXEC_PENDING_APPROVAL;
	if (o->background || (pending && !o->wait && !o->stream))
		return reply_view(r, &ex);
	if (pending || ex.state == EXEC_RUNNING) {
		store_exec_clear(&ex);
		if ((rc = join_running(r, id, o->stream)) != -ENOENT)
			return rc;
		/* It finished between the two looks: read it again (gone: its
		 * start failed, and the caller may start it anew). */
		if ((rc = store_exec_get(r->app->store, r->tenant->name, id, &ex)) == -ENOENT)
			return rc;
		if (rc < 0)
			return http_fail(r, rc, "cannot read the exec record");
	}
	return answer_finished(r, id, &ex, o->stream);
}

/* Record the start of a new exec. Returns 1 with the registry lock held
 * (the row exists; the job must be registered before the unlock), or r's
 * answer: 0 (from the earlier exec of the same id) or an error.
 *
 * The row of a new exec and its registry entry appear together, under the
 * registry lock: a concurrent request with the same id that reads the row
 * as running always finds the job to wait on (never a "running" row
 * without a job, which looks like one lost in a restart). A command that
 * waits for approval holds a pending slot (as many as max_execs), not a
 * running one. */
static int begin_locked(struct http_req *r, struct store_exec *row, const struct route_exec_opts *o,
			bool *withdrawn)
{
	struct app *a = r->app;
	struct route_execs *e = a->execs;
	int rc;
	int took = route_admit_take(r, o->max_execs); /* the queue admitted r: its slot */
	if (took < 0)
		return 0; /* the limit was lowered: waits again, first in line */
	/* Cancelled while it waited: recorded and ended without a slot. */
	*withdrawn = took == 2;
	row->state = o->approval && !*withdrawn ? EXEC_PENDING_APPROVAL : EXEC_RUNNING;
	bool held = took == 1;
	if (held && o->approval) {
		route_tenant_release_exec(a, r->tenant); /* its policy changed while it waited */
		held = false;
	}
	for (int attempt = 0;; attempt++) {
		if (o->id_given && (rc = answer_existing(r, row->id, row->request_hash, o)) != -ENOENT) {
			if (held)
				route_tenant_release_exec(a, r->tenant);
			return rc; /* answered (or waiting) from the earlier exec */
		}
		rc = held || *withdrawn ? 0
		     : o->approval
			 ? route_tenant_acquire_pending(a, r->tenant, o->max_execs, o->held_bytes)
			 : route_admit_exec(r, o->max_execs, o->background ? 0 : o->exec_queue, o->rerun);
		held = false;
		if (rc == 1) {
			route_execs_wake(a->execs); /* the approvals thread learns of its deadline */
			return 0;		    /* waits for a slot, suspended */
		}
		if (rc == -E2BIG || rc == -ENOBUFS)
			return route_tenant_hold_fail(r, rc, o->held_bytes);
		if (rc < 0) {
			r->retry_after_s = 1;
			return http_fail(r, rc, "tenant %s already %s %lld commands%s", r->tenant->name,
					 o->approval ? "has, waiting for approval," : "runs",
					 (long long)o->max_execs,
					 o->approval || o->background || !o->exec_queue
					     ? ""
					     : ", and its queue of requests waiting for one is full");
		}
		row->started_at = now_ms();
		row->incarnation = r->tenant->incarnation;
		pthread_mutex_lock(&e->mu);
		rc = store_exec_begin(a->store, row);
		if (rc == 0)
			return 1; /* e->mu stays held until the job is registered */
		pthread_mutex_unlock(&e->mu);
		if (o->approval && !*withdrawn)
			route_tenant_release_pending(a, r->tenant, o->held_bytes);
		else if (!*withdrawn)
			route_tenant_release_exec(a, r->tenant);
		if (rc == -EEXIST && o->id_given && attempt < 3)
			continue; /* a concurrent request started it: answer from that exec */
		if (rc == -EEXIST && o->id_given)
			return http_fail(r, -SBX_E_CONFLICT, "exec id %s is being started by another request",
					 row->id);
		if (rc == -EEXIST)
			return http_fail(r, -SBX_E_CONFLICT, "generated exec id collided; retry");
		r->retry_after_s = 1;
		return http_fail(r, -SBX_E_STORE, "cannot record the start of the command; it was not run");
	}
}

/* A new job for the recorded row, with its tenant reference and channel. */
static struct exec_job *job_new(struct http_req *r, const struct store_exec *row)
{
	struct app *a = r->app;
	struct exec_job *j = xcalloc(1, sizeof *j);
	j->app = a;
	snprintf(j->id, sizeof j->id, "%s", row->id);
	if (route_tenant_get(a, r->tenant->name, &j->tenant) < 0) {
		/* Removed this instant: run under the request's reference. */
		j->tenant = r->tenant;
		r->tenant = NULL;
	}
	j->refs = 1; /* the runner's */
	pthread_mutex_init(&j->pmu, NULL);
	j->started_mono = mono_ms();
	j->session = xmalloc(row->session_len + 1);
	memcpy(j->session, row->session, row->session_len);
	j->session[row->session_len] = '\0';
	j->session_len = row->session_len;
	j->chan = http_hub_channel_open(
	    a->hub, j->tenant->name, j->id,
	    start_json(j->id, row->command, row->session, row->session_len, row->cwd, row->started_at));
	return j;
}

/* Cancel the job when the client of r hangs up. */
static void watch_hangup(struct http_req *r, struct exec_job *j)
{
	int fd = http_client_fd(r);
	if (fd >= 0) {
		int64_t w = http_watch_add(r->app->watch, fd, on_hangup, j);
		j->watch = w > 0 ? w : 0;
	}
}

/* The first answer: a waiter or a subscriber until the exit, or (background) 202 now. */
static void first_answer_locked(struct http_req *r, struct exec_job *j, const struct store_exec *row,
				const struct route_exec_opts *o)
{
	if (o->background) {
		json_t *v = start_json(j->id, row->command, row->session, row->session_len, row->cwd,
				       row->started_at);
		json_object_set_new(v, "state", json_string(store_exec_state_name(EXEC_RUNNING)));
		json_object_set_new(v, "result", json_null());
		http_reply_json(r, 202, v);
	} else if (o->stream) {
		http_hub_subscribe_exec(r->app->hub, r, j->tenant->name, j->id, 0, true);
	} else {
		wait_on_locked(r, j);
	}
}

/* ---- approval ---- */

/* Copy what run points at, for a start after the request is gone; takes
 * run->rootimg. */
static struct pending *pending_new(struct sbx_exec_req *run, int64_t timeout_ms)
{
	struct pending *p = xcalloc(1, sizeof *p);
	size_t n = 0;
	p->run = *run;
	p->command = xstrdup(run->spawn.command);
	p->cwd_rel = xstrdup(run->spawn.cwd_rel ? run->spawn.cwd_rel : "");
	p->net_allow = run->spawn.net_allow ? xstrdup(run->spawn.net_allow) : NULL;
	p->net_tenant = run->spawn.net_tenant ? xstrdup(run->spawn.net_tenant) : NULL;
	p->net_sub = run->spawn.net_sub ? xstrdup(run->spawn.net_sub) : NULL;
	p->rootfs = run->spawn.rootfs ? xstrdup(run->spawn.rootfs) : NULL;
	run->rootimg = NULL; /* the pending start's now */
	while (run->spawn.env && run->spawn.env[n])
		n++;
	p->env = xcalloc(n + 1, sizeof *p->env);
	for (size_t i = 0; i < n; i++)
		p->env[i] = xstrdup(run->spawn.env[i]);
	if (run->stdin_len) {
		p->stdin_data = xmalloc(run->stdin_len);
		memcpy(p->stdin_data, run->stdin_data, run->stdin_len);
	}
	p->run.spawn.command = p->command;
	p->run.spawn.cwd_rel = p->cwd_rel;
	p->run.spawn.net_allow = p->net_allow;
	p->run.spawn.net_tenant = p->net_tenant;
	p->run.spawn.net_sub = p->net_sub;
	p->run.spawn.rootfs = p->rootfs;
	p->run.spawn.env = (const char *const *)p->env;
	p->run.stdin_data = p->stdin_data;
	p->deadline_ms = mono_ms() + timeout_ms;
	return p;
}

/* The feed's `decision` event. */
static void publish_decision(struct exec_job *j, const char *decision, const char *by, const char *reason,
			     int64_t at)
{
	json_t *d = json_pack("{s:s, s:s, s:o, s:o, s:o}", "id", j->id, "decision", decision, "decided_by",
			      by ? json_string(by) : json_null(), "decided_at", time_json(at), "reason",
			      reason ? json_string(reason) : json_null());
	http_hub_feed_event(j->app->hub, j->tenant->name, "decision", d);
	json_decref(d);
}

/* Take j's pending decision for the caller (registry lock held): false
 * when it has been decided (or is being) already. */
static bool take_decision_locked(struct exec_job *j)
{
	if (!j->pend || j->pend->deciding || j->finished)
		return false;
	j->pend->deciding = true;
	return true;
}

/* End j (its decision taken) as cancelled without having run. */
static void end_cancelled(struct exec_job *j)
{
	struct sbx_event ev = {.kind = SBX_EV_EXIT, .at_ms = now_ms()};
	set_exit(j, &ev, -ECANCELED);
	queue_exit(j);
}

/* End j (its decision taken) as rejected: the row first (fail closed: a
 * store that cannot say so leaves it waiting), then the feed, then the
 * answer of whoever waits (403 rejected). by NULL: the timeout. */
static int end_rejected(struct exec_job *j, const char *by, const char *reason)
{
	struct app *a = j->app;
	int64_t at = now_ms();
	int rc = store_exec_decide(a->store, j->tenant->name, j->id, "rejected", by, reason, at);
	if (rc < 0 && rc != -ENOENT) {
		pthread_mutex_lock(&a->execs->mu);
		j->pend->deciding = false;
		j->pend->deadline_ms = mono_ms() + 1000; /* the timeout tries again */
		pthread_mutex_unlock(&a->execs->mu);
		return rc;
	}
	publish_decision(j, "rejected", by, reason, at);
	j->reason = xasprintf("exec %s was rejected%s%s%s%s", j->id, by ? " by " : "", by ? by : "",
			      reason ? ": " : "", reason ? reason : "");
	j->error = -SBX_E_REJECTED;
	queue_exit(j);
	return 0;
}

/* Start j (its decision taken, an exec slot held) now that it is approved. */
static int start_approved(struct exec_job *j, const char *by)
{
	struct app *a = j->app;
	struct route_execs *e = a->execs;
	int64_t at = now_ms();
	int rc = a->stopping ? -SBX_E_BACKEND
			     : store_exec_decide(a->store, j->tenant->name, j->id, "approved", by, NULL, at);
	if (rc < 0) {
		pthread_mutex_lock(&e->mu);
		j->pend->deciding = false;
		pthread_mutex_unlock(&e->mu);
		route_tenant_release_exec(a, j->tenant);
		return rc;
	}
	route_tenant_release_pending(a, j->tenant, j->held_bytes);
	j->slot = SLOT_EXEC;
	publish_decision(j, "approved", by, NULL, at);
	pthread_mutex_lock(&j->pmu);
	j->started_mono = mono_ms(); /* its progress counts from now */
	pthread_mutex_unlock(&j->pmu);
	/* It starts now, as its row says, not when it was asked for. */
	http_hub_channel_set_start(a->hub, j->chan, "started_at", time_json(at));
	pthread_mutex_lock(&e->mu);
	rc = route_jobs_submit(a, j->tenant->provider, j->session, j->session_len, &j->pend->run, on_event, j,
			       &j->handle);
	j->pend->run.rootimg = NULL; /* the runner's now, whatever it answered */
	if (rc == 0)
		http_metrics_exec_started(a->metrics);
	bool hung_up = j->hung_up;
	pthread_mutex_unlock(&e->mu);
	if (rc == 0 && hung_up)
		route_jobs_cancel(a, j->handle);
	if (rc < 0) {
		struct sbx_event ev = {.kind = SBX_EV_EXIT};
		set_exit(j, &ev, rc);
		complete(j, NULL);
	}
	return 0;
}

/* 202 with the view of a parked exec (as a background one's). */
static int reply_parked(struct http_req *r, const struct store_exec *row)
{
	json_t *v =
	    start_json(row->id, row->command, row->session, row->session_len, row->cwd, row->started_at);
	json_object_set_new(v, "state", json_string(store_exec_state_name(EXEC_PENDING_APPROVAL)));
	json_object_set_new(v, "result", json_null());
	return http_reply_json(r, 202, v);
}

/* Park a new job until its decision (registry lock held, released here):
 * announce it on the feed, and let r wait, follow it, or (not waiting, or
 * background) be answered 202. */
static int park_locked(struct http_req *r, struct exec_job *j, const struct store_exec *row,
		       struct sbx_exec_req *run, const struct route_exec_opts *o)
{
	struct app *a = r->app;
	struct route_execs *e = a->execs;
	j->pend = pending_new(run, o->approval_timeout_ms);
	j->slot = SLOT_PENDING;
	j->held_bytes = o->held_bytes;
	j->requested_by = row->requested_by ? xstrdup(row->requested_by) : NULL;
	j->next = e->jobs;
	e->jobs = j;
	pthread_cond_signal(&e->pend_wake);
	json_t *d =
	    start_json(j->id, row->command, row->session, row->session_len, row->cwd, row->started_at);
	json_object_set_new(d, "requested_by",
			    row->requested_by ? json_string(row->requested_by) : json_null());
	json_object_set_new(d, "expires_at", time_json(row->started_at + o->approval_timeout_ms));
	http_hub_feed_event(a->hub, j->tenant->name, "pending_approval", d);
	json_decref(d);
	bool waits = o->wait && !o->background;
	if (o->stream) {
		http_hub_subscribe_exec(a->hub, r, j->tenant->name, j->id, 0, true);
	} else if (waits) {
		wait_on_locked(r, j);
		watch_hangup(r, j);
	}
	pthread_mutex_unlock(&e->mu);
	return o->stream || waits ? 0 : reply_parked(r, row);
}

/* A request cancelled while it waited for a slot (routes/admit.h), its
 * row written like any start: registered, answered as it asked (a
 * waiter or a stream subscriber), and ended at once as cancelled without
 * running, as a command cancelled while it waits for approval is. It
 * holds no slot. Called with the registry lock, which it releases. */
static int end_withdrawn_locked(struct http_req *r, struct exec_job *j, const struct store_exec *row,
				const struct route_exec_opts *o)
{
	struct route_execs *e = r->app->execs;
	j->slot = SLOT_NONE;
	j->next = e->jobs;
	e->jobs = j;
	first_answer_locked(r, j, row, o);
	pthread_mutex_unlock(&e->mu);
	end_cancelled(j);
	return 0;
}

int route_execs_start(struct http_req *r, struct store_exec *row, struct sbx_exec_req *run,
		      struct route_exec_opts *o)
{
	struct app *a = r->app;
	struct route_execs *e = a->execs;
	bool withdrawn = false;
	o->held_bytes = (int64_t)run->stdin_len;
	int rc = begin_locked(r, row, o, &withdrawn);
	if (rc != 1 || withdrawn) /* nothing runs: no files_changed */
		sbx_snapshot_free(&o->before);
	if (rc != 1)
		return rc;
	struct exec_job *j = job_new(r, row);
	j->before = o->before;
	o->before = NULL;
	run->ws = j->tenant->ws;
	run->spawn.workspace_host_dir = sbx_workspace_host_dir(j->tenant->ws);
	run->spawn.uid = j->tenant->uid;
	run->spawn.gid = j->tenant->gid;
	run->id = j->id;
	j->max_execs = o->max_execs;
	if (withdrawn)
		return end_withdrawn_locked(r, j, row, o);
	if ((j->tenant->provider->ops->caps & ROUTE_CAN_RUN_HERE) &&
	    !sbx_backend_kind_named(sbx_backend_name(run->backend))->isolated)
		log_msg("warn", "exec %s of tenant %s runs on the host without isolation (backend local)",
			j->id, j->tenant->name);
	if (o->approval)
		return park_locked(r, j, row, run, o);
	j->slot = SLOT_EXEC;

	j->next = e->jobs;
	e->jobs = j;
	/* Wait (or subscribe) before the runner can possibly answer; a
	 * background exec is answered once it is queued. */
	if (!o->background)
		first_answer_locked(r, j, row, o);
	rc = route_jobs_submit(a, j->tenant->provider, j->session, j->session_len, run, on_event, j,
			       &j->handle);
	run->rootimg = NULL; /* the runner's now, whatever it answered */
	if (rc == 0) {
		http_metrics_exec_started(a->metrics);
		if (o->background)
			first_answer_locked(r, j, row, o);
		else if (o->stream)
			http_hub_set_cancel(a->hub, r, j->handle);
		else
			watch_hangup(r, j);
	}
	pthread_mutex_unlock(&e->mu);
	if (rc < 0) {
		/* Could not even queue it: report through the resume path, here
		 * (a request thread may wait on the store). */
		struct sbx_event ev = {.kind = SBX_EV_EXIT};
		set_exit(j, &ev, rc);
		complete(j, NULL);
		if (o->background)
			return http_fail(r, rc, "the command could not be started");
	}
	return 0;
}

/* 404 for an exec id; one that names another node says so: a balancer
 * sent it to the wrong node (README "Running many nodes"). */
int route_exec_unknown(struct http_req *r, const char *id)
{
	char node[SBX_NODE_ID_MAX + 1];
	if (sbx_node_of(id, node, sizeof node) && strcmp(node, r->app->cfg->node_id) != 0)
		return http_fail(r, -ENOENT,
				 "no exec %s on node %s: its id names node %s (route /exec/{id} by it)", id,
				 r->app->cfg->node_id, node);
	return http_fail(r, -ENOENT, "no exec %s", id);
}

int route_execs_answer_state(struct http_req *r, const char *id, const char *why)
{
	struct store_exec ex;
	int rc = store_exec_get(r->app->store, r->tenant->name, id, &ex);
	if (rc == -ENOENT || rc == -EINVAL)
		return route_exec_unknown(r, id);
	if (rc < 0)
		return http_fail(r, rc, "cannot read the exec record");
	enum store_exec_state state = ex.state;
	store_exec_clear(&ex);
	return http_fail(r, -SBX_E_CONFLICT, "exec %s %s (%s)", id, why, store_exec_state_name(state));
}

/* The checks of a decision (registry lock held): 0 with the decision
 * taken (and, to approve, an exec slot), or r's error. */
static int decide_checks_locked(struct http_req *r, struct exec_job *j, bool approve)
{
	const char *sub = r->claims.sub;
	if (approve && j->requested_by && strcmp(j->requested_by, sub) == 0)
		return http_fail(r, -SBX_E_FORBIDDEN,
				 "a token never approves its own request (%s asked for it)", sub);
	if (approve && route_tenant_acquire_exec(r->app, j->tenant, j->max_execs) < 0) {
		r->retry_after_s = 1;
		return http_fail(r, -SBX_E_TOO_MANY, "tenant %s already runs %lld commands; approve it later",
				 j->tenant->name, (long long)j->max_execs);
	}
	take_decision_locked(j);
	j->refs++; /* the decider's, until it is done */
	return 0;
}

int route_execs_decide(struct http_req *r, const char *id, bool approve, const char *reason)
{
	struct route_execs *e = r->app->execs;
	http_set_target(r, id);
	if (!r->claims.sub[0])
		return http_fail(r, -SBX_E_FORBIDDEN,
				 "deciding needs a token that names its holder (a sub claim)");
	pthread_mutex_lock(&e->mu);
	struct exec_job *j = find_locked(e, r->tenant->name, r->tenant->incarnation, id);
	if (!j || !j->pend || j->pend->deciding || j->finished) {
		pthread_mutex_unlock(&e->mu);
		return route_execs_answer_state(r, id, "is not waiting for approval");
	}
	int rc = decide_checks_locked(r, j, approve);
	pthread_mutex_unlock(&e->mu);
	if (rc < 0)
		return rc;
	rc = approve ? start_approved(j, r->claims.sub) : end_rejected(j, r->claims.sub, reason);
	pthread_mutex_lock(&e->mu);
	job_put_locked(j);
	pthread_mutex_unlock(&e->mu);
	if (rc < 0) {
		r->retry_after_s = 1;
		return http_fail(r, rc, "the decision could not be recorded; the exec still waits");
	}
	char at[40];
	rfc3339_ms(now_ms(), at, sizeof at);
	return http_reply_json(
	    r, 200,
	    json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "id", id, "state", approve ? "running" : "rejected",
		      "decision", approve ? "approved" : "rejected", "decided_by", r->claims.sub,
		      "decided_at", at, "reason", reason ? json_string(reason) : json_null()));
}

bool route_execs_cancel_pending(struct route_execs *e, const char *tenant, const char *id)
{
	pthread_mutex_lock(&e->mu);
	struct exec_job *j = find_locked(e, tenant, 0, id);
	bool taken = j && take_decision_locked(j);
	pthread_mutex_unlock(&e->mu);
	if (taken)
		end_cancelled(j);
	return taken;
}

void route_execs_cancel_all_pending(struct route_execs *e)
{
	struct exec_job *list = NULL;
	pthread_mutex_lock(&e->mu);
	for (struct exec_job *j = e->jobs; j; j = j->next)
		if (take_decision_locked(j)) {
			j->expired_next = list;
			list = j;
		}
	pthread_mutex_unlock(&e->mu);
	while (list) {
		struct exec_job *j = list;
		list = j->expired_next;
		end_cancelled(j);
	}
}

void route_execs_stop_life(struct route_execs *e, const char *tenant, int64_t incarnation)
{
	struct exec_job *list = NULL;
	int killed = 0;
	pthread_mutex_lock(&e->mu);
	for (struct exec_job *j = e->jobs; j; j = j->next) {
		if (j->finished || strcmp(j->tenant->name, tenant) != 0 ||
		    j->tenant->incarnation != incarnation)
			continue;
		if (take_decision_locked(j)) {
			j->expired_next = list;
			list = j;
		} else if (j->handle) {
			route_jobs_kill(e->app, j->handle);
			killed++;
		}
	}
	pthread_mutex_unlock(&e->mu);
	while (list) {
		struct exec_job *j = list;
		list = j->expired_next;
		end_cancelled(j);
	}
	if (killed)
		log_msg("info", "tenant %s was removed: %d of its commands killed", tenant, killed);
}

/* The approvals thread's look at the jobs (lock held): those past their
 * deadline, and those whose waiting client left, taken into *expired and
 * *gone; returns the next deadline (INT64_MAX: none). */
static int64_t scan_locked(struct route_execs *e, struct exec_job **expired, struct exec_job **gone)
{
	int64_t now = mono_ms(), next = INT64_MAX;
	for (struct exec_job *j = e->jobs; j; j = j->next) {
		if (!j->pend)
			continue;
		if (j->hung_up && !j->hangup_handled) {
			j->hangup_handled = true;
			if (take_decision_locked(j)) {
				j->expired_next = *gone;
				*gone = j;
				continue;
			}
			if (j->handle)
				route_jobs_cancel(j->app, j->handle);
		}
		if (j->pend->deciding || j->finished)
			continue;
		if (j->pend->deadline_ms <= now && take_decision_locked(j)) {
			j->refs++;
			j->expired_next = *expired;
			*expired = j;
		} else if (j->pend->deadline_ms < next) {
			next = j->pend->deadline_ms;
		}
	}
	return next;
}

/* Rejects commands nobody decided on in time, and cancels those whose
 * waiting client went away; refuses the requests that waited too long
 * for an exec slot (routes/admit.h). */
static void *approvals_main(void *arg)
{
	struct route_execs *e = arg;
	char why[64];
	snprintf(why, sizeof why, "approval timed out after %lld s",
		 (long long)e->app->cfg->approval_timeout_s);
	pthread_mutex_lock(&e->mu);
	while (!e->pend_stop) {
		struct exec_job *expired = NULL, *gone = NULL;
		int64_t next = scan_locked(e, &expired, &gone), queued = route_admit_expire(e->app);
		next = queued < next ? queued : next;
		if (expired || gone) {
			pthread_mutex_unlock(&e->mu);
			for (struct exec_job *j = gone, *n; j; j = n) {
				n = j->expired_next;
				end_cancelled(j);
			}
			for (struct exec_job *j = expired, *n; j; j = n) {
				n = j->expired_next;
				end_rejected(j, NULL, why);
				pthread_mutex_lock(&e->mu);
				job_put_locked(j);
				pthread_mutex_unlock(&e->mu);
			}
			pthread_mutex_lock(&e->mu);
			continue;
		}
		/* At most a second: a hang-up signalled between the scan and the
		 * wait is not lost for longer. */
		int64_t wait_ms = next == INT64_MAX ? 1000 : next - mono_ms();
		if (wait_ms > 1000)
			wait_ms = 1000;
		if (wait_ms < 1)
			wait_ms = 1;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		int64_t ns = ts.tv_nsec + (wait_ms % 1000) * 1000000;
		ts.tv_sec += wait_ms / 1000 + ns / 1000000000;
		ts.tv_nsec = ns % 1000000000;
		pthread_cond_timedwait(&e->pend_wake, &e->mu, &ts);
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}
