/* The exit of an exec (routes/exec_registry_int.h): the result's JSON, the
 * runner's event callback, the hand-off of an exit to the waiting request
 * or the completion thread, and the recording of it (store row, metrics,
 * the `exit` event, the tenant's slot) before the waiters are answered.
 * It calls the floor (exec_jobs.c) only. */
#include "routes/exec_registry_int.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/xmalloc.h"
#include "http/errors.h"
#include "http/hub.h"
#include "http/metrics.h"
#include "http/req.h"
#include "http/watch.h"
#include "routes/admit.h"
#include "routes/app.h"
#include "routes/exec_extras.h"
#include "routes/exec_row.h"

static enum store_exec_state state_of(const struct sbx_exec_result *res)
{
	return res->timed_out ? EXEC_TIMED_OUT : res->cancelled ? EXEC_CANCELLED : EXEC_EXITED;
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
	    xr_time_json(res->started_at_ms), "finished_at", xr_time_json(res->finished_at_ms), "duration_ms",
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
			 ev->last_output_at_ms ? xr_time_json(ev->last_output_at_ms) : json_null(), "tail",
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
 * refused the job, or on the thread of self, the waiter xr_queue_exit resumed
 * to do it (it answers itself once this returns). */
void xr_complete(struct exec_job *j, struct http_req *self)
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
	xr_job_put_locked(j); /* the runner's reference */
	pthread_mutex_unlock(&e->mu);
	json_decref(result);
}

void *xr_completion_main(void *arg)
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
			xr_complete(j, NULL);
		}
		pthread_mutex_lock(&e->done_mu);
		e->done_busy = false;
		pthread_cond_broadcast(&e->done_idle);
	}
	pthread_mutex_unlock(&e->done_mu);
	return NULL;
}

/* Keep what an exit says (its result is only borrowed). */
void xr_set_exit(struct exec_job *j, const struct sbx_event *ev, int spawn_error)
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
void xr_queue_exit(struct exec_job *j)
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

/* r's thread, resumed by xr_queue_exit to record the exit (gone: r ended
 * before it could; then the completion thread records it). */
void xr_take_direct(struct http_req *r, bool gone)
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
		xr_complete(ew->job, r);
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
void xr_on_event(void *ctx, const struct sbx_event *ev, int spawn_error)
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
		xr_set_exit(j, ev, spawn_error);
		xr_queue_exit(j);
		return;
	}
}
