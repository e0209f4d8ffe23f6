/* The setup threads of network on request (sandbox/netpool.h). One lock
 * for the queue and the tenants' counts: a setup takes it twice, the
 * session's opening runs without it. */
#include "sandbox/netpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/xmalloc.h"
#include "sandbox/backend.h"
#include "sandbox/backend_impl.h"

struct item {
	struct sbx_backend *b;
	const struct sbx_spawn_req *req;
	sbx_netpool_done_fn done;
	sbx_netpool_skip_fn skip;
	void *ctx;
	struct item *next;
};

struct tenant {
	uid_t uid;
	unsigned running; /* setups on a thread now */
	unsigned held;	  /* submitted, not released */
};

struct sbx_netpool {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct sbx_netpool_config cfg;
	struct item *head, *tail;
	struct tenant *t;
	size_t nt, capt;
	pthread_t *threads;
	unsigned nthreads, waiting, running;
	bool started, stop;
};

void sbx_netpool_new(struct sbx_netpool **out)
{
	struct sbx_netpool *p = xcalloc(1, sizeof(*p));

	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	sbx_netpool_configure(p, NULL);
	*out = p;
}

void sbx_netpool_configure(struct sbx_netpool *p, const struct sbx_netpool_config *c)
{
	struct sbx_netpool_config d = c ? *c : (struct sbx_netpool_config){0};

	pthread_mutex_lock(&p->mu);
	if (!p->started) {
		d.threads = d.threads ? d.threads : SBX_NETPOOL_THREADS;
		d.setups_per_tenant =
		    d.setups_per_tenant ? d.setups_per_tenant : SBX_NETPOOL_SETUPS_PER_TENANT;
		d.commands_per_tenant =
		    d.commands_per_tenant ? d.commands_per_tenant : SBX_NETPOOL_COMMANDS_PER_TENANT;
		p->cfg = d;
	}
	pthread_mutex_unlock(&p->mu);
}

/* The tenant's counts (made at its first submission). */
static struct tenant *tenant_locked(struct sbx_netpool *p, uid_t uid, bool make)
{
	for (size_t i = 0; i < p->nt; i++) {
		if (p->t[i].uid == uid)
			return &p->t[i];
	}
	if (!make)
		return NULL;
	if (p->nt == p->capt) {
		p->capt = p->capt ? p->capt * 2 : 8;
		p->t = xrealloc(p->t, p->capt * sizeof(*p->t));
	}
	p->t[p->nt] = (struct tenant){.uid = uid};
	return &p->t[p->nt++];
}

/* The oldest waiting setup whose tenant is under its bound, unlinked. */
static struct item *take_locked(struct sbx_netpool *p)
{
	for (struct item **pp = &p->head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
		struct item *it = *pp;
		struct tenant *t = tenant_locked(p, it->req->uid, true);

		if (t->running >= p->cfg.setups_per_tenant)
			continue;
		*pp = it->next;
		if (p->tail == it)
			p->tail = prev;
		t->running++;
		p->waiting--;
		p->running++;
		return it;
	}
	return NULL;
}

static void run_one(struct sbx_netpool *p, struct item *it)
{
	struct sbx_egress_session *ns = NULL;
	int rc = it->skip && it->skip(it->ctx) ? -ECANCELED : 0;

	if (rc == 0)
		rc = sbx_backend_net_prepare(it->b, it->req, &ns);
	pthread_mutex_lock(&p->mu);
	tenant_locked(p, it->req->uid, true)->running--;
	p->running--;
	pthread_cond_broadcast(&p->cv); /* that tenant's next may run now */
	pthread_mutex_unlock(&p->mu);
	it->done(it->ctx, ns, rc);
	free(it);
}

static void *pool_main(void *arg)
{
	struct sbx_netpool *p = arg;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		struct item *it = take_locked(p);

		if (it) {
			pthread_mutex_unlock(&p->mu);
			run_one(p, it);
			pthread_mutex_lock(&p->mu);
			continue;
		}
		if (p->stop && !p->head)
			break;
		pthread_cond_wait(&p->cv, &p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static int start_locked(struct sbx_netpool *p)
{
	if (p->started)
		return 0;
	p->threads = xcalloc(p->cfg.threads, sizeof(*p->threads));
	for (; p->nthreads < p->cfg.threads; p->nthreads++) {
		int rc = pthread_create(&p->threads[p->nthreads], NULL, pool_main, p);

		if (rc)
			return p->nthreads ? 0 : -rc;
		(void)pthread_setname_np(p->threads[p->nthreads], "netsetup");
	}
	p->started = true;
	return 0;
}

int sbx_netpool_submit(struct sbx_netpool *p, struct sbx_backend *b, const struct sbx_spawn_req *req,
		       sbx_netpool_done_fn done, sbx_netpool_skip_fn skip, void *ctx)
{
	struct item *it;
	struct tenant *t;
	int rc;

	pthread_mutex_lock(&p->mu);
	rc = p->stop ? -ESHUTDOWN : start_locked(p);
	t = rc == 0 ? tenant_locked(p, req->uid, true) : NULL;
	if (t && t->held >= p->cfg.commands_per_tenant)
		rc = -SBX_E_TOO_MANY;
	if (rc == 0) {
		it = xcalloc(1, sizeof(*it));
		*it = (struct item){.b = b, .req = req, .done = done, .skip = skip, .ctx = ctx};
		if (p->tail)
			p->tail->next = it;
		else
			p->head = it;
		p->tail = it;
		t->held++;
		p->waiting++;
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

int sbx_netpool_hold(struct sbx_netpool *p, uid_t uid)
{
	struct tenant *t;
	int rc = 0;

	pthread_mutex_lock(&p->mu);
	t = tenant_locked(p, uid, true);
	if (t->held >= p->cfg.commands_per_tenant)
		rc = -SBX_E_TOO_MANY;
	else
		t->held++;
	pthread_mutex_unlock(&p->mu);
	return rc;
}

void sbx_netpool_release(struct sbx_netpool *p, uid_t uid)
{
	struct tenant *t;

	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	t = tenant_locked(p, uid, false);
	if (t && t->held)
		t->held--;
	pthread_mutex_unlock(&p->mu);
}

void sbx_netpool_counts(struct sbx_netpool *p, unsigned *waiting, unsigned *running)
{
	pthread_mutex_lock(&p->mu);
	*waiting = p->waiting;
	*running = p->running;
	pthread_mutex_unlock(&p->mu);
}

void sbx_netpool_free(struct sbx_netpool **pp)
{
	struct sbx_netpool *p = pp ? *pp : NULL;
	struct item *left;

	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	left = p->head; /* the runner has stopped: nobody waits for these */
	p->head = p->tail = NULL;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (struct item *next; left; left = next) {
		next = left->next;
		left->done(left->ctx, NULL, -ECANCELED);
		free(left);
	}
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	free(p->t);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p);
	*pp = NULL;
}
