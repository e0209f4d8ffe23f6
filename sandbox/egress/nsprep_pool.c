/* The pool of ready egress namespaces: one thread of its own keeps
 * `ready` made, so that a command with network takes one instead of
 * waiting for one to be made. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/xmalloc.h"
#include "sandbox/egress/nsprep.h"

/* After a failed make the thread waits, doubling up to the maximum, so a
 * host that cannot make one is not asked in a loop. */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 30000

struct sbx_egress_nspool {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* taken from, or stopping */
	struct sbx_egress_ns *ns;
	unsigned n, ready;
	bool started, stop;
	pthread_t thread;
	char logged[256]; /* the last failure logged ("": none since a success) */
};

struct sbx_egress_nspool *sbx_egress_nspool_new(unsigned ready)
{
	struct sbx_egress_nspool *p = xcalloc(1, sizeof(*p));
	pthread_condattr_t ca;

	pthread_mutex_init(&p->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	p->ready = ready;
	p->ns = xcalloc(ready ? ready : 1, sizeof(*p->ns));
	return p;
}

/* Sleep ms unless the pool stops (mu held): a take's signal does not
 * cut a backoff short. */
static void backoff(struct sbx_egress_nspool *p, unsigned ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	while (!p->stop && pthread_cond_timedwait(&p->cv, &p->mu, &ts) != ETIMEDOUT)
		;
}

/* A failure is logged once, until the next success or another failure. */
static void note_failure(struct sbx_egress_nspool *p, const char *err)
{
	if (!strcmp(p->logged, err))
		return;
	snprintf(p->logged, sizeof(p->logged), "%s", err);
	log_msg("warn", "egress namespace pool: cannot make one ahead: %s", err);
}

static void *refill(void *arg)
{
	struct sbx_egress_nspool *p = arg;
	unsigned delay = 0; /* ms, after failures */

	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		struct sbx_egress_ns ns;
		char err[256];
		int rc;

		if (p->n >= p->ready) {
			pthread_cond_wait(&p->cv, &p->mu);
			continue;
		}
		pthread_mutex_unlock(&p->mu);
		rc = sbx_egress_ns_make(&ns, err, sizeof(err));
		pthread_mutex_lock(&p->mu);
		if (rc < 0) {
			note_failure(p, err);
			delay = delay ? delay * 2 : BACKOFF_MIN_MS;
			delay = delay > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay;
			backoff(p, delay);
			continue;
		}
		delay = 0;
		p->logged[0] = '\0';
		if (p->stop || p->n >= p->ready)
			sbx_egress_ns_close(&ns);
		else
			p->ns[p->n++] = ns;
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* The first take starts the thread (a server that never runs a command
 * with network makes none). mu held. */
static void start(struct sbx_egress_nspool *p)
{
	int rc;

	p->started = true;
	rc = pthread_create(&p->thread, NULL, refill, p);
	if (rc) {
		/* Takes still work, each on its caller's thread. */
		p->started = false;
		p->ready = 0;
		log_msg("warn", "egress namespace pool: no refill thread: %s", strerror(rc));
	}
}

int sbx_egress_nspool_take(struct sbx_egress_nspool *p, struct sbx_egress_ns *ns, char *err, size_t errsz)
{
	bool got = false;

	pthread_mutex_lock(&p->mu);
	if (!p->started && p->ready)
		start(p);
	if (p->n) {
		*ns = p->ns[--p->n];
		got = true;
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	return got ? 0 : sbx_egress_ns_make(ns, err, errsz);
}

void sbx_egress_nspool_free(struct sbx_egress_nspool **pp)
{
	struct sbx_egress_nspool *p = pp ? *pp : NULL;

	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	if (p->started)
		pthread_join(p->thread, NULL);
	while (p->n)
		sbx_egress_ns_close(&p->ns[--p->n]);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p->ns);
	free(p);
	*pp = NULL;
}
