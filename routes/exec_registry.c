/* The registry of running execs (see exec_registry.h), its top floor: the
 * registry's life (it starts the completion and approvals threads), the
 * start of an exec and its steps, progress and runner handles, the stop
 * of a session's or a tenant's execs. It may call every file below it
 * (exec_approval.c, exec_answer.c, exec_complete.c, exec_jobs.c; see
 * exec_registry_int.h); none of them calls it. */
#include "routes/exec_registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "common/xmalloc.h"
#include "http/hub.h"
#include "http/metrics.h"
#include "http/req.h"
#include "routes/admit.h"
#include "routes/app.h"
#include "routes/exec_registry_int.h"
#include "routes/provider.h"
#include "routes/tenant_cache.h"
#include "sandbox/changes.h"
#include "sandbox/registry.h"
#include "sandbox/workspace.h"

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
	if (pthread_create(&e->done_thread, NULL, xr_completion_main, e) != 0 ||
	    pthread_create(&e->pend_thread, NULL, xr_approvals_main, e) != 0) {
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
	struct exec_job *j = xr_find_locked(e, tenant, 0, id);
	if (j && !j->finished) {
		size_t n = 0;
		pthread_mutex_lock(&j->pmu);
		char *tail = utf8_sanitize(j->tail, j->tail_len, &n);
		o = json_pack("{s:I, s:I, s:o, s:I, s:s%}", "stdout_bytes", (json_int_t)j->bytes[0],
			      "stderr_bytes", (json_int_t)j->bytes[1], "last_output_at",
			      j->last_output_at ? xr_time_json(j->last_output_at) : json_null(), "elapsed_ms",
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
	struct exec_job *j = xr_find_locked(e, tenant, 0, id);
	if (j && !j->finished)
		handle = j->handle;
	pthread_mutex_unlock(&e->mu);
	return handle;
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
		if (o->id_given && (rc = xr_answer_existing(r, row->id, row->request_hash, o)) != -ENOENT) {
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
	    xr_start_json(j->id, row->command, row->session, row->session_len, row->cwd, row->started_at));
	return j;
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
		return xr_end_withdrawn_locked(r, j, row, o);
	if ((j->tenant->provider->ops->caps & ROUTE_CAN_RUN_HERE) &&
	    !sbx_backend_kind_named(sbx_backend_name(run->backend))->isolated)
		log_msg("warn", "exec %s of tenant %s runs on the host without isolation (backend local)",
			j->id, j->tenant->name);
	if (o->approval)
		return xr_park_locked(r, j, row, run, o);
	j->slot = SLOT_EXEC;

	j->next = e->jobs;
	e->jobs = j;
	/* Wait (or subscribe) before the runner can possibly answer; a
	 * background exec is answered once it is queued. */
	if (!o->background)
		xr_first_answer_locked(r, j, row, o);
	rc = route_jobs_submit(a, j->tenant->provider, j->session, j->session_len, run, xr_on_event, j,
			       &j->handle);
	run->rootimg = NULL; /* the runner's now, whatever it answered */
	if (rc == 0) {
		http_metrics_exec_started(a->metrics);
		if (o->background)
			xr_first_answer_locked(r, j, row, o);
		else if (o->stream)
			http_hub_set_cancel(a->hub, r, j->handle);
		else
			xr_watch_hangup(r, j);
	}
	pthread_mutex_unlock(&e->mu);
	if (rc < 0) {
		/* Could not even queue it: report through the resume path, here
		 * (a request thread may wait on the store). */
		struct sbx_event ev = {.kind = SBX_EV_EXIT};
		xr_set_exit(j, &ev, rc);
		xr_complete(j, NULL);
		if (o->background)
			return http_fail(r, rc, "the command could not be started");
	}
	return 0;
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
		if (xr_take_decision_locked(j)) {
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
		xr_end_cancelled(j);
	}
	if (killed)
		log_msg("info", "tenant %s was removed: %d of its commands killed", tenant, killed);
}
