/* The egress gateway's shared core, below its other files: tenants and
 * their rules, the worker pool and the gateway's threads, token buckets.
 * It calls none of the gateway's other files. The gateway's public types
 * (sandbox/egress/gateway.h) are these files' common ground. */
#include "sandbox/egress/gateway.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/xmalloc.h"
#include "sandbox/egress/gateway_int.h"

/* Under g->mu. */
struct gw_tenant *gw_tenant_find(struct sbx_egress_gateway *g, const char *name)
{
	for (struct gw_tenant *t = g->tenants; t; t = t->next)
		if (strcmp(t->name, name) == 0)
			return t;
	struct gw_tenant *t = xcalloc(1, sizeof(*t));
	t->name = xstrdup(name);
	t->next = g->tenants;
	g->tenants = t;
	return t;
}

struct gw_tenant *gw_tenant_get(struct sbx_egress_gateway *g, const char *name)
{
	pthread_mutex_lock(&g->mu);
	struct gw_tenant *t = gw_tenant_find(g, name);
	pthread_mutex_unlock(&g->mu);
	return t;
}

struct sbx_egress_rules *gw_rules_now(struct sbx_egress_gateway *g, struct gw_tenant *t)
{
	pthread_mutex_lock(&g->mu);
	struct sbx_egress_rules *r = t->rules ? sbx_egress_rules_ref(t->rules) : NULL;
	pthread_mutex_unlock(&g->mu);
	return r;
}

void gw_tenants_free(struct sbx_egress_gateway *g)
{
	while (g->tenants) {
		struct gw_tenant *t = g->tenants;
		g->tenants = t->next;
		sbx_egress_rules_unref(&t->rules);
		free(t->name);
		free(t);
	}
}

void sbx_egress_gateway_counts(struct sbx_egress_gateway *g,
			       void (*cb)(void *ctx, const char *tenant, const struct sbx_egress_counts *c),
			       void *ctx)
{
	/* Tenants are never removed and their names never change: the list can
	 * be walked from its head as it was without holding mu over cb. */
	pthread_mutex_lock(&g->mu);
	struct gw_tenant *head = g->tenants;
	pthread_mutex_unlock(&g->mu);
	for (struct gw_tenant *t = head; t; t = t->next) {
		struct sbx_egress_counts c = {
		    .allowed = t->allowed,
		    .denied = t->denied,
		    .dns_refused = t->dns_refused,
		    .udp_dropped = t->udp_dropped,
		    .bytes_up = t->bytes_up,
		    .bytes_down = t->bytes_down,
		    .open = t->open,
		    .pending = t->pending,
		};
		cb(ctx, t->name, &c);
	}
}

/* The worker pool: getaddrinfo and loopback-set changes. A tenant's
 * names may be slow to resolve (a wildcard rule lets it pick any): it
 * gets at most GW_TENANT_WORKERS workers at once, so that the others'
 * names still resolve. Under wq_mu: the first job that may run now. */
static struct gw_work *work_take(struct sbx_egress_gateway *g)
{
	for (struct gw_work **p = &g->wq_head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
		struct gw_work *w = *p;
		if (w->t && w->t->resolving >= GW_TENANT_WORKERS)
			continue;
		*p = w->next;
		if (g->wq_tail == w)
			g->wq_tail = prev;
		if (w->t)
			w->t->resolving++;
		return w;
	}
	return NULL;
}

static void *worker_main(void *arg)
{
	struct sbx_egress_gateway *g = arg;
	struct gw_work *w = NULL;
	pthread_mutex_lock(&g->wq_mu);
	while (!g->wq_stop) {
		if (!(w = work_take(g))) {
			pthread_cond_wait(&g->wq_cv, &g->wq_mu);
			continue;
		}
		struct gw_tenant *t = w->t;
		pthread_mutex_unlock(&g->wq_mu);
		w->run(w); /* frees w */
		pthread_mutex_lock(&g->wq_mu);
		if (t) {
			t->resolving--;
			pthread_cond_broadcast(&g->wq_cv); /* its next one may run now */
		}
	}
	pthread_mutex_unlock(&g->wq_mu);
	return NULL;
}

/* The gateway's threads take no signals: the server's own threads handle
 * them, and a write to a socket reset by its peer (SIGPIPE) is an EPIPE
 * here, never the end of the process. */
int gw_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc == 0 ? 0 : -rc;
}

int gw_pool_start(struct sbx_egress_gateway *g)
{
	for (; g->n_workers < GW_POOL_THREADS; g->n_workers++)
		if (gw_thread_start(&g->workers[g->n_workers], worker_main, g) < 0)
			return -SBX_E_BACKEND;
	return 0;
}

void gw_pool_stop(struct sbx_egress_gateway *g)
{
	pthread_mutex_lock(&g->wq_mu);
	g->wq_stop = true;
	pthread_cond_broadcast(&g->wq_cv);
	pthread_mutex_unlock(&g->wq_mu);
	for (unsigned i = 0; i < g->n_workers; i++)
		pthread_join(g->workers[i], NULL);
	g->n_workers = 0;
	while (g->wq_head) {
		struct gw_work *w = g->wq_head;
		g->wq_head = w->next;
		w->drop(w);
	}
	g->wq_tail = NULL;
}

void gw_work_post(struct sbx_egress_gateway *g, struct gw_work *w)
{
	pthread_mutex_lock(&g->wq_mu);
	if (g->wq_stop) {
		pthread_mutex_unlock(&g->wq_mu);
		w->drop(w);
		return;
	}
	w->next = NULL;
	if (g->wq_tail)
		g->wq_tail->next = w;
	else
		g->wq_head = w;
	g->wq_tail = w;
	pthread_cond_signal(&g->wq_cv);
	pthread_mutex_unlock(&g->wq_mu);
}

/* A zeroed bucket is full at its first use (the monotonic clock is far
 * from 0). */
bool gw_bucket_take(struct gw_bucket *b, double rate, double burst, int64_t now)
{
	b->tokens += (double)(now - b->last_ms) * rate / 1000.0;
	if (b->tokens > burst)
		b->tokens = burst;
	b->last_ms = now;
	if (b->tokens < 1.0)
		return false;
	b->tokens -= 1.0;
	return true;
}
