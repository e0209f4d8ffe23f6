/* The registry of running execs, idempotency, waiters and the runner
 * callback, moved out of routes/exec.c. */
#include "routes/exec_registry.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "routes/app.h"
#include "routes/errors.h"
#include "routes/exec.h"
#include "routes/hub.h"
#include "routes/metrics.h"
#include "routes/req.h"
#include "routes/watch.h"
#include "sandbox/collector.h"
#include "sandbox/runner.h"
#include "store/store.h"

void route_exec_init(struct app *a)
{
	struct route_execs *e = xcalloc(1, sizeof *e);
	pthread_mutex_init(&e->mu, NULL);
	a->execs = e;
}

void route_exec_fini(struct app *a)
{
	struct route_execs *e = a->execs;
	if (!e)
		return;
	pthread_mutex_destroy(&e->mu);
	free(e);
	a->execs = NULL;
}

static void job_put_locked(struct exec_job *j)
{
	if (--j->refs > 0)
		return;
	app_tenant_put(j->app, &j->tenant);
	free(j);
}

struct exec_job *find_locked(struct route_execs *e, const char *tenant, const char *id)
{
	for (struct exec_job *j = e->jobs; j; j = j->next)
		if (strcmp(j->id, id) == 0 && strcmp(j->tenant->name, tenant) == 0)
			return j;
	return NULL;
}

static const char *state_of(const struct sbx_exec_result *res)
{
	return res->timed_out ? "timed_out" : res->cancelled ? "cancelled" : "exited";
}

static json_t *time_json(int64_t ms)
{
	char t[40];
	rfc3339_ms(ms, t, sizeof t);
	return json_string(t);
}

static json_t *result_json(const char *id, const struct sbx_exec_result *res)
{
	return json_pack("{s:s, s:i, s:s%, s:s%, s:b, s:b, s:b, s:b, s:I, s:I, s:o, s:o, s:o, s:o, s:I}", "id", id,
			 "exit_code", res->exit_code, "stdout", res->stdout_text ? res->stdout_text : "",
			 res->stdout_len, "stderr", res->stderr_text ? res->stderr_text : "", res->stderr_len,
			 "timed_out", res->timed_out, "idle", res->idle, "cancelled", res->cancelled, "truncated",
			 res->truncated, "stdout_bytes", (json_int_t)res->stdout_bytes, "stderr_bytes",
			 (json_int_t)res->stderr_bytes, "stdout_spill",
			 res->stdout_spill ? json_string(res->stdout_spill) : json_null(), "stderr_spill",
			 res->stderr_spill ? json_string(res->stderr_spill) : json_null(), "started_at",
			 time_json(res->started_at_ms), "finished_at", time_json(res->finished_at_ms), "duration_ms",
			 (json_int_t)(res->finished_at_ms - res->started_at_ms));
}

static json_t *heartbeat_json(const char *id, const struct sbx_event *ev)
{
	return json_pack("{s:s, s:I, s:I, s:I, s:o, s:s}", "id", id, "elapsed_ms", (json_int_t)ev->elapsed_ms,
			 "stdout_bytes", (json_int_t)ev->stdout_bytes, "stderr_bytes", (json_int_t)ev->stderr_bytes,
			 "last_output_at", ev->last_output_at_ms ? time_json(ev->last_output_at_ms) : json_null(),
			 "tail", ev->tail ? ev->tail : "");
}

/* Runner thread: every event of a job. */
void on_event(void *ctx, const struct sbx_event *ev, int spawn_error)
{
	struct exec_job *j = ctx;
	struct app *a = j->app;
	switch (ev->kind) {
	case SBX_EV_START:
		hub_channel_started(a->hub, j->chan);
		return;
	case SBX_EV_HEARTBEAT:
		metrics_heartbeat(a->metrics);
		hub_channel_heartbeat(a->hub, j->chan, heartbeat_json(j->id, ev));
		return;
	case SBX_EV_OUTPUT:
		hub_channel_output(a->hub, j->chan, ev->stream, ev->data, ev->len);
		return;
	case SBX_EV_EXIT:
		break;
	}

	json_t *result = NULL;
	int error = 0;
	const struct sbx_exec_result *res = ev->result;
	struct sbx_exec_result never_ran = { 0 };
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
	if (!res) {
		/* Never started: forget the row so the id can be retried. */
		error = spawn_error ? spawn_error : -SBX_E_BACKEND;
		store_exec_delete(a->store, j->tenant->name, j->id);
		metrics_exec_finished(a->metrics, "failed", 0);
		struct wire_error w = wire_error_for(error);
		json_t *err = json_pack("{s:{s:s, s:s, s:o}}", "error", "code", w.code, "message",
					"the command could not be started", "retry_hint",
					w.retry_hint ? json_string(w.retry_hint) : json_null());
		hub_channel_exit(a->hub, j->chan, NULL, err);
		json_decref(err);
	} else {
		result = result_json(j->id, res);
		char *text = json_dumps(result, JSON_COMPACT);
		if (store_exec_finish(a->store, j->tenant->name, j->id, state_of(res), res->exit_code, text,
				      res->finished_at_ms) < 0)
			metrics_store_error(a->metrics);
		free(text);
		metrics_exec_finished(a->metrics, state_of(res),
				      (double)(res->finished_at_ms - res->started_at_ms));
		hub_channel_exit(a->hub, j->chan, result, NULL);
	}
	j->chan = NULL;
	app_tenant_release_exec(a, j->tenant);

	struct route_execs *e = a->execs;
	pthread_mutex_lock(&e->mu);
	j->finished = true;
	for (struct exec_job **p = &e->jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
	watch_remove(a->watch, j->watch);
	j->watch = 0;
	while (j->waiters) {
		struct waiter *w = j->waiters;
		j->waiters = w->next;
		struct exec_wait *ew = w->r->hstate;
		ew->result = result ? json_incref(result) : NULL;
		ew->error = error;
		req_resume(w->r);
		free(w);
	}
	job_put_locked(j); /* the runner's reference */
	pthread_mutex_unlock(&e->mu);
	json_decref(result);
}

/* Watch thread: the first request's client hung up. */
void on_hangup(void *ctx)
{
	struct exec_job *j = ctx;
	sbx_runner_cancel(j->app->runner, j->handle);
}

static int exec_resume(struct req *r)
{
	struct exec_wait *ew = r->hstate;
	if (ew->error)
		return req_fail(r, ew->error,
				ew->error == -SBX_E_BACKEND ? "the isolation backend could not start the command"
							    : "the command could not be started");
	json_t *res = ew->result;
	ew->result = NULL;
	json_t *code = json_object_get(res, "exit_code");
	r->has_exit_code = true;
	r->exit_code = (int)json_integer_value(code);
	return reply_json(r, 200, res);
}

static void exec_free(struct req *r)
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
		job_put_locked(ew->job);
		pthread_mutex_unlock(&e->mu);
	}
	json_decref(ew->result);
	free(ew);
	r->hstate = NULL;
}

/* Wait on a running job (registry lock held): suspend r until its exit. */
void wait_on_locked(struct req *r, struct exec_job *j)
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
	req_suspend(r);
}

/* The data of an exec's `start` event. */
json_t *start_json(const char *id, const char *command, const char *session, size_t session_len,
			  const char *cwd, int64_t started_at)
{
	size_t n = 0;
	char *sk = sbx_utf8_sanitize(session, session_len, &n);
	json_t *o = json_pack("{s:s, s:s, s:s%, s:s, s:o}", "id", id, "command", command, "session", sk, n, "cwd",
			      cwd, "started_at", time_json(started_at));
	free(sk);
	return o;
}

json_t *exec_start_json(const struct store_exec *ex)
{
	return start_json(ex->id, ex->command, ex->session, ex->session_len, ex->cwd, ex->started_at);
}

/* The same id again: the same request waits for or reads that exec; a
 * different one is a conflict. */
int answer_existing(struct req *r, const char *id, const char *hash, bool stream)
{
	struct store_exec ex;
	int rc = store_exec_get(r->app->store, r->tenant->name, id, &ex);
	if (rc == -ENOENT)
		return rc; /* gone meanwhile (a failed start): the caller retries */
	if (rc < 0)
		return req_fail(r, rc, "cannot read the exec record");
	if (strcmp(ex.request_hash, hash) != 0) {
		store_exec_clear(&ex);
		return req_fail(r, -SBX_E_CONFLICT, "exec id %s was used for a different request", id);
	}
	if (strcmp(ex.state, "running") == 0) {
		store_exec_clear(&ex);
		struct route_execs *e = r->app->execs;
		pthread_mutex_lock(&e->mu);
		struct exec_job *j = find_locked(e, r->tenant->name, id);
		if (j && !j->finished) {
			if (!stream) {
				wait_on_locked(r, j);
				pthread_mutex_unlock(&e->mu);
				return 0;
			}
			rc = hub_subscribe_exec(r->app->hub, r, r->tenant->name, id, 0, false);
			if (rc != -ENOENT) {
				/* Answered, or a subscriber that could not answer:
				 * never a second subscriber for r. */
				pthread_mutex_unlock(&e->mu);
				return rc;
			}
		}
		pthread_mutex_unlock(&e->mu);
		/* It finished between the two looks: read it again (gone: its
		 * start failed, and the caller may start it anew). */
		if ((rc = store_exec_get(r->app->store, r->tenant->name, id, &ex)) == -ENOENT)
			return rc;
		if (rc < 0)
			return req_fail(r, rc, "cannot read the exec record");
	}
	if (strcmp(ex.state, "lost") == 0 || !ex.result) {
		store_exec_clear(&ex);
		return req_fail(r, -SBX_E_CONFLICT, "exec %s was lost in a restart of the server; use a new id", id);
	}
	json_t *res = json_loads(ex.result, 0, NULL);
	json_t *start = exec_start_json(&ex);
	store_exec_clear(&ex);
	if (!res) {
		json_decref(start);
		return req_fail(r, -SBX_E_STORE, "the stored result is unreadable");
	}
	if (stream) {
		hub_reply_ended(r->app->hub, r, start, res);
		json_decref(start);
		json_decref(res);
		return 0;
	}
	json_decref(start);
	r->has_exit_code = true;
	r->exit_code = (int)json_integer_value(json_object_get(res, "exit_code"));
	return reply_json(r, 200, res);
}

