/* Commands that wait for a person's approval (routes/exec_registry_int.h):
 * parking one, the decisions, their cancels, and the approvals thread
 * that rejects those nobody decided on in time. It calls the answers
 * (exec_answer.c), the exit path (exec_complete.c) and the floor
 * (exec_jobs.c), never the top (exec_registry.c). */
#include "routes/exec_registry_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/hub.h"
#include "http/metrics.h"
#include "http/req.h"
#include "routes/admit.h"
#include "routes/app.h"
#include "routes/provider.h"

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
			      by ? json_string(by) : json_null(), "decided_at", xr_time_json(at), "reason",
			      reason ? json_string(reason) : json_null());
	http_hub_feed_event(j->app->hub, j->tenant->name, "decision", d);
	json_decref(d);
}

/* Take j's pending decision for the caller (registry lock held): false
 * when it has been decided (or is being) already. */
bool xr_take_decision_locked(struct exec_job *j)
{
	if (!j->pend || j->pend->deciding || j->finished)
		return false;
	j->pend->deciding = true;
	return true;
}

/* End j (its decision taken) as cancelled without having run. */
void xr_end_cancelled(struct exec_job *j)
{
	struct sbx_event ev = {.kind = SBX_EV_EXIT, .at_ms = now_ms()};
	xr_set_exit(j, &ev, -ECANCELED);
	xr_queue_exit(j);
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
	xr_queue_exit(j);
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
	http_hub_channel_set_start(a->hub, j->chan, "started_at", xr_time_json(at));
	pthread_mutex_lock(&e->mu);
	rc = route_jobs_submit(a, j->tenant->provider, j->session, j->session_len, &j->pend->run, xr_on_event,
			       j, &j->handle);
	j->pend->run.rootimg = NULL; /* the runner's now, whatever it answered */
	if (rc == 0)
		http_metrics_exec_started(a->metrics);
	bool hung_up = j->hung_up;
	pthread_mutex_unlock(&e->mu);
	if (rc == 0 && hung_up)
		route_jobs_cancel(a, j->handle);
	if (rc < 0) {
		struct sbx_event ev = {.kind = SBX_EV_EXIT};
		xr_set_exit(j, &ev, rc);
		xr_complete(j, NULL);
	}
	return 0;
}

/* 202 with the view of a parked exec (as a background one's). */
static int reply_parked(struct http_req *r, const struct store_exec *row)
{
	json_t *v =
	    xr_start_json(row->id, row->command, row->session, row->session_len, row->cwd, row->started_at);
	json_object_set_new(v, "state", json_string(store_exec_state_name(EXEC_PENDING_APPROVAL)));
	json_object_set_new(v, "result", json_null());
	return http_reply_json(r, 202, v);
}

/* Park a new job until its decision (registry lock held, released here):
 * announce it on the feed, and let r wait, follow it, or (not waiting, or
 * background) be answered 202. */
int xr_park_locked(struct http_req *r, struct exec_job *j, const struct store_exec *row,
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
	    xr_start_json(j->id, row->command, row->session, row->session_len, row->cwd, row->started_at);
	json_object_set_new(d, "requested_by",
			    row->requested_by ? json_string(row->requested_by) : json_null());
	json_object_set_new(d, "expires_at", xr_time_json(row->started_at + o->approval_timeout_ms));
	http_hub_feed_event(a->hub, j->tenant->name, "pending_approval", d);
	json_decref(d);
	bool waits = o->wait && !o->background;
	if (o->stream) {
		http_hub_subscribe_exec(a->hub, r, j->tenant->name, j->id, 0, true);
	} else if (waits) {
		xr_wait_on_locked(r, j);
		xr_watch_hangup(r, j);
	}
	pthread_mutex_unlock(&e->mu);
	return o->stream || waits ? 0 : reply_parked(r, row);
}

/* A request cancelled while it waited for a slot (routes/admit.h), its
 * row written like any start: registered, answered as it asked (a
 * waiter or a stream subscriber), and ended at once as cancelled without
 * running, as a command cancelled while it waits for approval is. It
 * holds no slot. Called with the registry lock, which it releases. */
int xr_end_withdrawn_locked(struct http_req *r, struct exec_job *j, const struct store_exec *row,
			    const struct route_exec_opts *o)
{
	struct route_execs *e = r->app->execs;
	j->slot = SLOT_NONE;
	j->next = e->jobs;
	e->jobs = j;
	xr_first_answer_locked(r, j, row, o);
	pthread_mutex_unlock(&e->mu);
	xr_end_cancelled(j);
	return 0;
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
	xr_take_decision_locked(j);
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
	struct exec_job *j = xr_find_locked(e, r->tenant->name, r->tenant->incarnation, id);
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
	xr_job_put_locked(j);
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
	struct exec_job *j = xr_find_locked(e, tenant, 0, id);
	bool taken = j && xr_take_decision_locked(j);
	pthread_mutex_unlock(&e->mu);
	if (taken)
		xr_end_cancelled(j);
	return taken;
}

void route_execs_cancel_all_pending(struct route_execs *e)
{
	struct exec_job *list = NULL;
	pthread_mutex_lock(&e->mu);
	for (struct exec_job *j = e->jobs; j; j = j->next)
		if (xr_take_decision_locked(j)) {
			j->expired_next = list;
			list = j;
		}
	pthread_mutex_unlock(&e->mu);
	while (list) {
		struct exec_job *j = list;
		list = j->expired_next;
		xr_end_cancelled(j);
	}
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
			if (xr_take_decision_locked(j)) {
				j->expired_next = *gone;
				*gone = j;
				continue;
			}
			if (j->handle)
				route_jobs_cancel(j->app, j->handle);
		}
		if (j->pend->deciding || j->finished)
			continue;
		if (j->pend->deadline_ms <= now && xr_take_decision_locked(j)) {
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
void *xr_approvals_main(void *arg)
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
				xr_end_cancelled(j);
			}
			for (struct exec_job *j = expired, *n; j; j = n) {
				n = j->expired_next;
				end_rejected(j, NULL, why);
				pthread_mutex_lock(&e->mu);
				xr_job_put_locked(j);
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
