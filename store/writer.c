/* The batched writer: one thread takes the queued records of every kind
 * (audit rows, egress rows) in groups and has each kind's group written
 * by the write function store.c gave it at start, so that no appender
 * waits for the disk. Calls db.c and those functions, never a kind's
 * file by name; audit.c and egress.c call it to queue and to flush. */
#include "store/writer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"

/* The writer waits this long after the first record of a batch for more
 * (bounded well under the 50 ms promise), unless a flush, a stop or a
 * full batch cuts it short. */
#define AUDIT_WINDOW_MS 10
#define AUDIT_BATCH_WAKE 1024

/* Records queued, of every kind; alock held. */
static size_t queued_locked(const struct store *s)
{
	size_t n = 0;

	for (int k = 0; k < STORE_WK__COUNT; k++)
		n += s->wq[k].n;
	return n;
}

/* Whether a queue holds a full batch; alock held. */
static bool batch_full_locked(const struct store *s)
{
	for (int k = 0; k < STORE_WK__COUNT; k++)
		if (s->wq[k].n >= AUDIT_BATCH_WAKE)
			return true;
	return false;
}

/* With alock held and a record just queued on a queue now qn long, open
 * the writer's batch window or cut it short. */
static void queued_now_locked(struct store *s, size_t qn)
{
	if (queued_locked(s) == 1)
		s->qfirst_ms = mono_ms();
	if (queued_locked(s) == 1 || qn == AUDIT_BATCH_WAKE)
		pthread_cond_signal(&s->awake);
}

int store_writer_append(struct store *s, enum store_wkind k, struct store_wrec *rec, size_t max)
{
	struct store_wqueue *q = &s->wq[k];

	pthread_mutex_lock(&s->alock);
	if (s->stop || q->n >= max) {
		pthread_mutex_unlock(&s->alock);
		free(rec);
		atomic_fetch_add(&q->failures, 1);
		return -SBX_E_STORE;
	}
	if (q->n == q->cap) {
		q->cap = q->cap ? q->cap * 2 : 256;
		q->q = xrealloc(q->q, q->cap * sizeof *q->q);
	}
	rec->seq = ++s->appended;
	q->q[q->n++] = rec;
	queued_now_locked(s, q->n);
	pthread_mutex_unlock(&s->alock);
	return 0;
}

static void deadline_after(struct timespec *ts, int64_t mono_ms)
{
	ts->tv_sec = mono_ms / 1000;
	ts->tv_nsec = (mono_ms % 1000) * 1000000;
}

/* One group taken from the queues: each kind's records and its fail_seq. */
struct group {
	struct store_wrec **b[STORE_WK__COUNT];
	size_t n[STORE_WK__COUNT], cap[STORE_WK__COUNT];
	uint64_t fail_seq[STORE_WK__COUNT];
};

/* Take the whole queues into g; hand g's spent arrays back for reuse.
 * alock held. */
static void take_locked(struct store *s, struct group *g)
{
	for (int k = 0; k < STORE_WK__COUNT; k++) {
		struct store_wqueue *q = &s->wq[k];
		struct store_wrec **tq = q->q;
		size_t tcap = q->cap;

		g->n[k] = q->n;
		q->q = g->b[k];
		q->cap = g->cap[k];
		q->n = 0;
		g->b[k] = tq;
		g->cap[k] = tcap;
		g->fail_seq[k] = q->fail_seq;
	}
}

static void *writer_main(void *arg)
{
	struct store *s = arg;
	struct group g = {0};

	pthread_setname_np(pthread_self(), "sbx-audit"); /* for top -H and perf */
	pthread_mutex_lock(&s->alock);
	for (;;) {
		struct timespec ts;
		uint64_t last;

		while (!s->stop && queued_locked(s) == 0)
			pthread_cond_wait(&s->awake, &s->alock);
		if (queued_locked(s) == 0)
			break; /* stopping, and everything is written */
		/* Gather a group for a short window, unless someone waits. */
		deadline_after(&ts, s->qfirst_ms + AUDIT_WINDOW_MS);
		while (!s->stop && !batch_full_locked(s) && s->flush_target <= s->committed &&
		       mono_ms() < s->qfirst_ms + AUDIT_WINDOW_MS)
			pthread_cond_timedwait(&s->awake, &s->alock, &ts);

		take_locked(s, &g);
		last = s->appended;
		pthread_mutex_unlock(&s->alock);

		for (int k = 0; k < STORE_WK__COUNT; k++) {
			size_t failed = g.n[k] ? s->wwrite[k](s, g.b[k], g.n[k], &g.fail_seq[k]) : 0;
			if (failed)
				atomic_fetch_add(&s->wq[k].failures, failed);
		}

		pthread_mutex_lock(&s->alock);
		s->committed = last;
		for (int k = 0; k < STORE_WK__COUNT; k++)
			s->wq[k].fail_seq = g.fail_seq[k];
		pthread_cond_broadcast(&s->adone);
	}
	pthread_mutex_unlock(&s->alock);
	for (int k = 0; k < STORE_WK__COUNT; k++)
		free(g.b[k]);
	return NULL;
}

int store_writer_start(struct store *s, const store_wwrite_fn write[STORE_WK__COUNT])
{
	for (int k = 0; k < STORE_WK__COUNT; k++)
		s->wwrite[k] = write[k];
	if (pthread_create(&s->thread, NULL, writer_main, s) != 0)
		return -SBX_E_STORE;
	s->thread_started = true;
	return 0;
}

void store_writer_stop(struct store *s)
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

int store_writer_flush(struct store *s, enum store_wkind k)
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
		if (s->wq[k].fail_seq > start)
			r = -SBX_E_STORE;
	}
	pthread_mutex_unlock(&s->alock);
	return r;
}

uint64_t store_writer_failures(struct store *s, enum store_wkind k)
{
	return atomic_load(&s->wq[k].failures);
}

size_t store_wrec_size(const char *p)
{
	return p ? strlen(p) + 1 : 0;
}

const char *store_wrec_pack(char **cur, const void *p, size_t n, bool nul)
{
	char *dst = *cur;

	if (!p)
		return NULL;
	if (n)
		memcpy(dst, p, n);
	if (nul)
		dst[n++] = '\0';
	*cur += n;
	return dst;
}

const char *store_wrec_put(char **cur, const char *p)
{
	return store_wrec_pack(cur, p, p ? strlen(p) : 0, true);
}
