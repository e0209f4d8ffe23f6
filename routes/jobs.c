/* Jobs of tenant-level providers (routes/provider.h): handles, the list
 * cancels look in, the threads that run them, and what /readyz says of
 * each provider. The providers themselves are routes/remote*.c and
 * routes/ssh*.c. */
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
#include "routes/policy.h"
#include "routes/provider.h"
#include "routes/remote.h"
#include "routes/ssh.h"
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

struct route_provider *route_provider_new(struct app *a, const char *tenant, const struct route_policy *p)
{
	if (strcmp(p->backend, "remote") == 0)
		return route_remote_new(a, p);
	if (strcmp(p->backend, "ssh") == 0)
		return route_ssh_new(a, tenant, p);
	return NULL;
}

void route_provider_free(struct route_provider **p)
{
	if (!p || !*p)
		return;
	(*p)->ops->free(*p);
	*p = NULL;
}

int route_provider_refuse(struct http_req *r, const char *what)
{
	if (!r->tenant || !r->tenant->provider)
		return 0;
	return http_fail(r, -SBX_E_FORBIDDEN,
			 "%s is not available for tenant %s: its files and commands are served %s", what,
			 r->tenant->name, r->tenant->provider->ops->where);
}

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

int route_job_start(struct app *a, struct route_job *j, void *(*main)(void *), uint64_t *job)
{
	struct route_jobs *o = a->jobs;
	if (!o)
		return -SBX_E_BACKEND; /* stopping */
	j->owner = o;
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

void route_job_leave(struct route_job *j)
{
	struct route_jobs *o = j->owner;
	pthread_mutex_lock(&o->mu);
	for (struct route_job **p = &o->jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
	pthread_mutex_unlock(&o->mu);
}

void route_job_ended(struct route_jobs *o)
{
	pthread_mutex_lock(&o->mu);
	o->running--;
	pthread_cond_broadcast(&o->gone);
	pthread_mutex_unlock(&o->mu);
}

int route_jobs_submit(struct app *a, struct route_provider *p, const char *session, size_t session_len,
		      const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx, uint64_t *job)
{
	if (!p)
		return sbx_runner_submit(a->runner, req, cb, ctx, job);
	struct sbx_rootimg_ref *img = req->rootimg; /* taken, as the runner does (none is chosen) */
	sbx_rootimg_close(&img);
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
