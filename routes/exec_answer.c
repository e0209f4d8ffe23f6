/* The requests of the exec registry (routes/exec_registry_int.h): a
 * waiter's suspension and resume, the first answer of a new exec, the
 * answers from an earlier exec of the same id (running, waiting for
 * approval or finished), and the 404 and 409 of an exec id. It calls the
 * exit path (exec_complete.c) and the floor (exec_jobs.c), nothing
 * above. */
#include "routes/exec_registry_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/nodes.h"
#include "common/utf8.h"
#include "common/xmalloc.h"
#include "http/hub.h"
#include "http/req.h"
#include "http/watch.h"
#include "routes/app.h"
#include "routes/exec_row.h"
#include "routes/provider.h"

/* Watch thread: the first request's client hung up. It must not take the
 * registry lock (xr_complete() removes watches under it): a command still
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
	xr_take_direct(r, false);
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
		xr_take_direct(r, true); /* no longer a waiter xr_complete() would resume */
		xr_job_put_locked(ew->job);
		pthread_mutex_unlock(&e->mu);
	}
	json_decref(ew->result);
	free(ew->reason);
	free(ew);
	r->hstate = NULL;
}

/* Wait on a running job (registry lock held): suspend r until its exit. */
void xr_wait_on_locked(struct http_req *r, struct exec_job *j)
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
json_t *xr_start_json(const char *id, const char *command, const char *session, size_t session_len,
		      const char *cwd, int64_t started_at)
{
	size_t n = 0;
	char *sk = utf8_sanitize(session, session_len, &n);
	json_t *o = json_pack("{s:s, s:s, s:s%, s:s, s:o}", "id", id, "command", command, "session", sk, n,
			      "cwd", cwd, "started_at", xr_time_json(started_at));
	free(sk);
	return o;
}

json_t *route_exec_start_json(const struct store_exec *ex)
{
	return xr_start_json(ex->id, ex->command, ex->session, ex->session_len, ex->cwd, ex->started_at);
}

/* A row read as running: wait on (or subscribe to) its job. -ENOENT when
 * it finished between the two looks. */
static int join_running(struct http_req *r, const char *id, bool stream)
{
	int rc = -ENOENT;
	struct route_execs *e = r->app->execs;
	pthread_mutex_lock(&e->mu);
	struct exec_job *j = xr_find_locked(e, r->tenant->name, r->tenant->incarnation, id);
	if (j && !j->finished) {
		if (!stream) {
			xr_wait_on_locked(r, j);
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

/* The same id again: the same request waits for or reads that exec; a
 * different one is a conflict. -ENOENT: no such exec (any more: a failed
 * start), the caller may start it. */
int xr_answer_existing(struct http_req *r, const char *id, const char *hash, const struct route_exec_opts *o)
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

/* Cancel the job when the client of r hangs up. */
void xr_watch_hangup(struct http_req *r, struct exec_job *j)
{
	int fd = http_client_fd(r);
	if (fd >= 0) {
		int64_t w = http_watch_add(r->app->watch, fd, on_hangup, j);
		j->watch = w > 0 ? w : 0;
	}
}

/* The first answer: a waiter or a subscriber until the exit, or (background) 202 now. */
void xr_first_answer_locked(struct http_req *r, struct exec_job *j, const struct store_exec *row,
			    const struct route_exec_opts *o)
{
	if (o->background) {
		json_t *v = xr_start_json(j->id, row->command, row->session, row->session_len, row->cwd,
					  row->started_at);
		json_object_set_new(v, "state", json_string(store_exec_state_name(EXEC_RUNNING)));
		json_object_set_new(v, "result", json_null());
		http_reply_json(r, 202, v);
	} else if (o->stream) {
		http_hub_subscribe_exec(r->app->hub, r, j->tenant->name, j->id, 0, true);
	} else {
		xr_wait_on_locked(r, j);
	}
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
