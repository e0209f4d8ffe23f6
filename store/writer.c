/* The batched writer: one thread takes the queued audit and egress
 * records in groups and has each kind written by its file (audit.c,
 * egress.c), so that no appender waits for the disk. Calls db.c and the
 * kinds' write functions. */
#include "store/writer.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "store/audit.h"
#include "store/db.h"
#include "store/egress.h"

/* The writer waits this long after the first record of a batch for more
 * (bounded well under the 50 ms promise), unless a flush, a stop or a
 * full batch cuts it short. */
#define AUDIT_WINDOW_MS 10
#define AUDIT_BATCH_WAKE 1024

void store_writer_queued_locked(struct store *s, size_t qn)
{
	if (s->qn + s->eqn == 1)
		s->qfirst_ms = mono_ms();
	if (s->qn + s->eqn == 1 || qn == AUDIT_BATCH_WAKE)
		pthread_cond_signal(&s->awake);
}

static void deadline_after(struct timespec *ts, int64_t mono_ms)
{
	ts->tv_sec = mono_ms / 1000;
	ts->tv_nsec = (mono_ms % 1000) * 1000000;
}

static void *writer_main(void *arg)
{
	struct store *s = arg;
	struct audit_rec **b = NULL;
	struct egress_rec **eb = NULL;
	size_t bcap = 0, ebcap = 0;
	uint64_t efail_seq;

	pthread_setname_np(pthread_self(), "sbx-audit"); /* for top -H and perf */
	pthread_mutex_lock(&s->alock);
	for (;;) {
		struct audit_rec **tq;
		struct timespec ts;
		uint64_t last, fail_seq;
		size_t n, tcap, failed;

		while (!s->stop && s->qn + s->eqn == 0)
			pthread_cond_wait(&s->awake, &s->alock);
		if (s->qn + s->eqn == 0)
			break; /* stopping, and everything is written */
		/* Gather a group for a short window, unless someone waits. */
		deadline_after(&ts, s->qfirst_ms + AUDIT_WINDOW_MS);
		while (!s->stop && s->qn < AUDIT_BATCH_WAKE && s->eqn < AUDIT_BATCH_WAKE &&
		       s->flush_target <= s->committed && mono_ms() < s->qfirst_ms + AUDIT_WINDOW_MS)
			pthread_cond_timedwait(&s->awake, &s->alock, &ts);

		/* Take the whole queues; hand the spent arrays back for reuse. */
		tq = s->q;
		tcap = s->qcap;
		n = s->qn;
		s->q = b;
		s->qcap = bcap;
		s->qn = 0;
		b = tq;
		bcap = tcap;
		struct egress_rec **te = s->eq;
		size_t tecap = s->eqcap, en = s->eqn;
		s->eq = eb;
		s->eqcap = ebcap;
		s->eqn = 0;
		eb = te;
		ebcap = tecap;
		last = s->appended;
		fail_seq = s->fail_seq;
		efail_seq = s->efail_seq;
		pthread_mutex_unlock(&s->alock);

		failed = n ? store_audit_write(s, b, n, &fail_seq) : 0;
		if (failed)
			atomic_fetch_add(&s->audit_failures, failed);
		for (size_t i = 0; i < n; i++)
			free(b[i]);
		failed = en ? store_egress_write(s, eb, en, &efail_seq) : 0;
		if (failed)
			atomic_fetch_add(&s->egress_failures, failed);

		pthread_mutex_lock(&s->alock);
		s->committed = last;
		s->fail_seq = fail_seq;
		s->efail_seq = efail_seq;
		pthread_cond_broadcast(&s->adone);
	}
	pthread_mutex_unlock(&s->alock);
	free(b);
	free(eb);
	return NULL;
}

int store_audit_start(struct store *s)
{
	if (pthread_create(&s->thread, NULL, writer_main, s) != 0)
		return -SBX_E_STORE;
	s->thread_started = true;
	return 0;
}

void store_audit_stop(struct store *s)
{
	if (!s->thread_started)
		return;
	pthread_mutex_lock(&s->alock);
	s->stop = true;
	pthread_cond_signal(&s->awake);
	pthread_mutex_unlock(&s->alock);
	/* The writer drains the queue before it returns. */
	pthread_join(s->thread, NULL);
	s->thread_started = false;
}

int store_writer_flush(struct store *s, const uint64_t *fail_seq)
{
	uint64_t target, start;
	int r = 0;

	pthread_mutex_lock(&s->alock);
	target = s->appended;
	start = s->committed;
	if (s->committed < target) {
		if (s->flush_target < target)
			s->flush_target = target;
		pthread_cond_signal(&s->awake);
		while (s->committed < target)
			pthread_cond_wait(&s->adone, &s->alock);
		if (*fail_seq > start)
			r = -SBX_E_STORE;
	}
	pthread_mutex_unlock(&s->alock);
	return r;
}
