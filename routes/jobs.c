/* Jobs of the providers whose commands run elsewhere (routes/provider.h):
 * handles, the list cancels look in, the threads that run them, the copy
 * of a command each keeps, the events they report (one shape for every
 * provider), and what /readyz says of each provider. The providers are
 * routes/remote*.c and routes/ssh.c; the local provider's jobs are the
 * runner's (sandbox/runner.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/errors.h"
#include "routes/app.h"
#include "routes/provider.h"
#include "sandbox/rootimg.h"

#define PROVIDER_BIT (1ULL << 63)
#define NOTES_MAX 4

struct down_note {
	char backend[16];
	int64_t at_ms; /* the last time it could not be reached (0: never) */
	int64_t up_ms; /* the last time it was reached (0: never, or not noted) */
	char what[400];
};

struct route_jobs {
	pthread_mutex_t mu;
	pthread_cond_t gone;
	struct route_job *jobs;
	uint64_t next;
	size_t running; /* threads not yet ended (they outlive their list entry) */
	struct down_note notes[NOTES_MAX];
};

static struct down_note *note_locked(struct route_jobs *o, const char *backend)
{
	for (size_t i = 0; i < NOTES_MAX; i++)
		if (strcmp(o->notes[i].backend, backend) == 0)
			return &o->notes[i];
	for (size_t i = 0; i < NOTES_MAX; i++)
		if (!o->notes[i].backend[0]) {
			snprintf(o->notes[i].backend, sizeof o->notes[i].backend, "%s", backend);
			return &o->notes[i];
		}
	return NULL;
}

void route_jobs_note_down(struct app *a, const char *backend, const char *what)
{
	struct route_jobs *o = a->jobs;
	if (!o)
		return;
	pthread_mutex_lock(&o->mu);
	struct down_note *n = note_locked(o, backend);
	if (n) {
		n->at_ms = now_ms();
		snprintf(n->what, sizeof n->what, "%s", what);
	}
	pthread_mutex_unlock(&o->mu);
}

void route_jobs_note_up(struct app *a, const char *backend)
{
	struct route_jobs *o = a->jobs;
	if (!o)
		return;
	pthread_mutex_lock(&o->mu);
	struct down_note *n = note_locked(o, backend);
	if (n)
		n->up_ms = now_ms();
	pthread_mutex_unlock(&o->mu);
}

void route_jobs_describe(struct app *a, const char *backend, char *out, size_t outsz)
{
	struct route_jobs *o = a->jobs;
	if (!o) {
		snprintf(out, outsz, "stopping");
		return;
	}
	pthread_mutex_lock(&o->mu);
	size_t n = 0;
	for (struct route_job *j = o->jobs; j; j = j->next)
		n++;
	struct down_note *d = note_locked(o, backend);
	char at[40] = "", t[40] = "", up[80] = "";
	if (d && d->at_ms)
		rfc3339_ms(d->at_ms, at, sizeof at);
	if (d && d->up_ms) {
		rfc3339_ms(d->up_ms, t, sizeof t);
		snprintf(up, sizeof up, "last reached at %s; ", t);
	}
	snprintf(out, outsz, "%zu %s commands running; %s%s%s%s%s", n, backend, up,
		 at[0] ? "last found unreachable at " : "none found unreachable", at, at[0] ? ": " : "",
		 at[0] ? d->what : "");
	pthread_mutex_unlock(&o->mu);
}

void route_jobs_new(struct route_jobs **out)
{
	struct route_jobs *j = xcalloc(1, sizeof *j);
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->gone, NULL);
	*out = j;
}

void route_jobs_free(struct route_jobs **pj)
{
	struct route_jobs *o = *pj;
	if (!o)
		return;
	pthread_mutex_lock(&o->mu);
	for (struct route_job *j = o->jobs; j; j = j->next)
		j->fire(j);
	while (o->running)
		pthread_cond_wait(&o->gone, &o->mu);
	pthread_mutex_unlock(&o->mu);
	pthread_mutex_destroy(&o->mu);
	pthread_cond_destroy(&o->gone);
	free(o);
	*pj = NULL;
}

void route_job_init(struct route_job *j, const struct sbx_exec_req *req, void (*fire)(struct route_job *j))
{
	*j = (struct route_job){.fire = fire};
	j->command = xstrdup(req->spawn.command);
	j->cwd_rel = xstrdup(req->spawn.cwd_rel);
	for (const char *const *e = req->spawn.env; e && *e; e++)
		j->nenv++;
	j->env = xcalloc(j->nenv + 1, sizeof *j->env);
	for (size_t i = 0; i < j->nenv; i++)
		j->env[i] = xstrdup(req->spawn.env[i]);
	if (req->stdin_data) {
		j->stdin_data = xmalloc(req->stdin_len + 1);
		memcpy(j->stdin_data, req->stdin_data, req->stdin_len);
		j->stdin_data[req->stdin_len] = '\0';
		j->stdin_len = req->stdin_len;
	}
}

void route_job_clear(struct route_job *j)
{
	for (size_t i = 0; i < j->nenv; i++)
		free(j->env[i]);
	free(j->env);
	free(j->command);
	free(j->cwd_rel);
	free(j->stdin_data);
	j->env = NULL;
	j->command = j->cwd_rel = j->stdin_data = NULL;
	j->nenv = j->stdin_len = 0;
}

int route_job_start(struct app *a, struct route_job *j, void *(*main)(void *), sbx_event_cb cb, void *ctx,
		    uint64_t *job)
{
	struct route_jobs *o = a->jobs;
	if (!o)
		return -SBX_E_BACKEND; /* stopping */
	j->owner = o;
	j->cb = cb;
	j->ctx = ctx;
	pthread_mutex_lock(&o->mu);
	j->handle = PROVIDER_BIT | ++o->next;
	j->next = o->jobs;
	o->jobs = j;
	*job = j->handle; /* before any event of it can be reported */
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_t th;
	int rc = -pthread_create(&th, &at, main, j);
	pthread_attr_destroy(&at);
	if (rc < 0)
		o->jobs = j->next;
	else
		o->running++;
	pthread_mutex_unlock(&o->mu);
	return rc;
}

void route_job_started(struct route_job *j)
{
	struct sbx_event ev = {.kind = SBX_EV_START, .job = j->handle, .at_ms = now_ms()};
	j->cb(j->ctx, &ev, 0);
}

void route_job_output(struct route_job *j, int stream, const char *data, size_t len)
{
	struct sbx_event ev = {.kind = SBX_EV_OUTPUT,
			       .job = j->handle,
			       .at_ms = now_ms(),
			       .stream = stream,
			       .data = data,
			       .len = len};
	j->cb(j->ctx, &ev, 0);
}

void route_job_heartbeat(struct route_job *j, const struct sbx_event *hb)
{
	struct sbx_event ev = *hb;
	ev.job = j->handle;
	j->cb(j->ctx, &ev, 0);
}

void route_job_exit(struct route_job *j, struct sbx_exec_result *res, int err, const char *message,
		    int64_t retry_after_s, void (*free_job)(struct route_job *j))
{
	struct route_jobs *o = j->owner;
	/* Unlist first: after the exit the registry may free the tenant (and
	 * what j borrows of it), and a cancel must then find nothing. */
	pthread_mutex_lock(&o->mu);
	for (struct route_job **p = &o->jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
	pthread_mutex_unlock(&o->mu);
	struct sbx_event ev = {.kind = SBX_EV_EXIT,
			       .job = j->handle,
			       .at_ms = now_ms(),
			       .result = res,
			       .message = res ? NULL : message,
			       .retry_after_s = res ? 0 : retry_after_s};
	j->cb(j->ctx, &ev, res ? 0 : err);
	if (res)
		sbx_exec_result_clear(res);
	free_job(j);
	/* Last: route_jobs_free may free o once every thread has ended. */
	pthread_mutex_lock(&o->mu);
	o->running--;
	pthread_cond_broadcast(&o->gone);
	pthread_mutex_unlock(&o->mu);
}

int route_jobs_submit(struct app *a, struct route_provider *p, const char *session, size_t session_len,
		      const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx, uint64_t *job)
{
	if (!(p->ops->caps & ROUTE_CAN_RUN_HERE)) {
		struct sbx_rootimg_ref *img = req->rootimg; /* taken, as the runner does (none is chosen) */
		sbx_rootimg_close(&img);
	}
	return p->ops->submit(a, p, session, session_len, req, cb, ctx, job);
}

int route_jobs_cancel(struct app *a, uint64_t job)
{
	if (!(job & PROVIDER_BIT))
		return sbx_runner_cancel(a->runner, job);
	struct route_jobs *o = a->jobs;
	if (!o)
		return -ESRCH;
	pthread_mutex_lock(&o->mu);
	struct route_job *j = o->jobs;
	while (j && j->handle != job)
		j = j->next;
	if (j)
		j->fire(j);
	pthread_mutex_unlock(&o->mu);
	return j ? 0 : -ESRCH;
}

int route_jobs_kill(struct app *a, uint64_t job)
{
	return job & PROVIDER_BIT ? route_jobs_cancel(a, job) : sbx_runner_kill(a->runner, job);
}

void route_jobs_cancel_all(struct app *a)
{
	struct route_jobs *o = a->jobs;
	if (!o)
		return;
	pthread_mutex_lock(&o->mu);
	for (struct route_job *j = o->jobs; j; j = j->next)
		j->fire(j);
	pthread_mutex_unlock(&o->mu);
}
