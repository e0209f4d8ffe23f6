/* The fair queue (see fairq.h): keys in a small hash table, each with its
 * FIFO of items; keys with items waiting form the round, a circular list
 * walked from its head, so a key that was served goes to the back.
 *
 * Fair by CPU time (virtual time, as in start-time fair queueing): each
 * key's vt grows by the CPU time its jobs used. A job is charged its
 * key's estimate (the moving average of its jobs' CPU time) when it is
 * popped, so jobs that are still running count at once, and the estimate
 * is corrected by what the job really used when it is done. pop takes the
 * key with the least vt, so a key whose jobs used more waits while the
 * others' go first. A key entering the round starts at the least vt of
 * the keys already there (no credit for time it had nothing waiting; one
 * that had nothing running either also sheds its debt), and among equal
 * vt the key served fewer times since it entered goes first, then the
 * round's order: with equal costs this is plain round-robin. */
#include "http/fairq.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/keytab.h"
#include "common/xmalloc.h"

struct http_fairq_key {
	struct keytab_node node;	     /* first: its name, in the keys' table */
	struct http_fairq_item *head, *tail; /* waiting, oldest first */
	size_t waiting, running;
	int64_t vt;			      /* virtual time: CPU ns charged */
	int64_t est;			      /* moving average of a job's CPU ns */
	int64_t est_wall;		      /* moving average of a job's wall ns */
	uint64_t served;		      /* pops since it entered the round */
	uint64_t done;			      /* jobs finished */
	int64_t cpu_ns;			      /* CPU used by its finished jobs */
	struct http_fairq_key *rnext, *rprev; /* the round, while waiting > 0 */
};

struct http_fairq {
	size_t running_max, queue_max;
	struct keytab keys;
	struct http_fairq_key *round; /* head of the round: served next */
	int64_t vclock;		      /* vt of the last key served */
	double cpu_cores;	      /* CPU one key's running jobs may use; 0: no bound */
};

static struct http_fairq_key *find_or_add(struct http_fairq *q, const char *name)
{
	return (struct http_fairq_key *)keytab_find_or_add(&q->keys, name, sizeof(struct http_fairq_key));
}

/* The least vt in the round, else that of the last key served. */
static int64_t vmin(const struct http_fairq *q)
{
	const struct http_fairq_key *k = q->round;
	if (!k)
		return q->vclock;
	int64_t m = k->vt;
	for (k = k->rnext; k != q->round; k = k->rnext)
		if (k->vt < m)
			m = k->vt;
	return m;
}

/* k enters the round: level with the least vt there (see above). */
static void enter_round(struct http_fairq *q, struct http_fairq_key *k)
{
	int64_t m = vmin(q);
	k->vt = k->running == 0 || k->vt < m ? m : k->vt;
	k->served = 0;
}

static void round_add(struct http_fairq *q, struct http_fairq_key *k)
{
	if (!q->round) {
		k->rnext = k->rprev = k;
		q->round = k;
		return;
	}
	/* At the back: just before the head. */
	k->rnext = q->round;
	k->rprev = q->round->rprev;
	k->rprev->rnext = k;
	q->round->rprev = k;
}

static void round_remove(struct http_fairq *q, struct http_fairq_key *k)
{
	if (k->rnext == k) {
		q->round = NULL;
	} else {
		k->rprev->rnext = k->rnext;
		k->rnext->rprev = k->rprev;
		if (q->round == k)
			q->round = k->rnext;
	}
	k->rnext = k->rprev = NULL;
}

void http_fairq_new(struct http_fairq **out, size_t running_max, size_t queue_max)
{
	struct http_fairq *q = xcalloc(1, sizeof *q);
	q->running_max = running_max ? running_max : 1;
	q->queue_max = queue_max ? queue_max : 1;
	*out = q;
}

void http_fairq_free(struct http_fairq **qp)
{
	struct http_fairq *q = qp ? *qp : NULL;
	if (!q)
		return;
	for (struct keytab_node *n; (n = keytab_first(&q->keys));) {
		keytab_remove(&q->keys, n);
		free(n);
	}
	free(q);
	*qp = NULL;
}

int http_fairq_push(struct http_fairq *q, const char *key, struct http_fairq_item *it)
{
	struct http_fairq_key *k = find_or_add(q, key);
	if (k->waiting >= q->queue_max)
		return -EAGAIN;
	it->key = k;
	it->next = NULL;
	it->prev = k->tail;
	if (k->tail)
		k->tail->next = it;
	else
		k->head = it;
	k->tail = it;
	it->queued = true;
	if (k->waiting++ == 0) {
		enter_round(q, k);
		round_add(q, k);
	}
	return 0;
}

static void unlink_item(struct http_fairq *q, struct http_fairq_item *it)
{
	struct http_fairq_key *k = it->key;
	if (it->prev)
		it->prev->next = it->next;
	else
		k->head = it->next;
	if (it->next)
		it->next->prev = it->prev;
	else
		k->tail = it->prev;
	it->next = it->prev = NULL;
	it->queued = false;
	k->waiting--;
}

void http_fairq_set_cpu_cores(struct http_fairq *q, double cores)
{
	q->cpu_cores = cores > 0 ? cores : 0;
}

/* How many of k's jobs may run at once: running_max, or fewer when its
 * jobs are busy on a CPU (CPU time over wall time) so that together they
 * would use more than cpu_cores. At least one. */
static size_t cap_of(const struct http_fairq *q, const struct http_fairq_key *k)
{
	if (q->cpu_cores <= 0 || k->est_wall <= 0 || k->est <= 0)
		return q->running_max;
	double busy = (double)k->est / (double)k->est_wall; /* cores per job */
	double n = q->cpu_cores / (busy < 1 ? busy : 1);
	return n < 1 ? 1 : n >= (double)q->running_max ? q->running_max : (size_t)n;
}

/* Whether a goes before b (both may run): less vt, then fewer turns. */
static bool before(const struct http_fairq_key *a, const struct http_fairq_key *b)
{
	return a->vt < b->vt || (a->vt == b->vt && a->served < b->served);
}

struct http_fairq_item *http_fairq_pop(struct http_fairq *q)
{
	struct http_fairq_key *k = q->round, *best = NULL;
	if (!k)
		return NULL;
	do {
		if (k->running < cap_of(q, k) && (!best || before(k, best)))
			best = k;
		k = k->rnext;
	} while (k != q->round);
	if (!best)
		return NULL; /* every key with work waiting runs its cap */
	k = best;
	struct http_fairq_item *it = k->head;
	unlink_item(q, it);
	k->running++;
	q->vclock = k->vt;
	it->charged_ns = k->est;
	k->vt += k->est;
	k->served++;
	round_remove(q, k);
	if (k->waiting > 0)
		round_add(q, k); /* served: to the back of the round */
	return it;
}

struct http_fairq_item *http_fairq_take(struct http_fairq *q)
{
	if (!q->round)
		return NULL;
	struct http_fairq_item *it = q->round->head;
	http_fairq_cancel(q, it);
	return it;
}

void http_fairq_done(struct http_fairq *q, struct http_fairq_key *key, int64_t charged_ns, int64_t cpu_ns,
		     int64_t wall_ns)
{
	(void)q;
	if (!key)
		return;
	if (key->running > 0)
		key->running--;
	if (cpu_ns < 0)
		cpu_ns = 0;
	key->vt += cpu_ns - charged_ns;
	if (wall_ns < cpu_ns)
		wall_ns = cpu_ns;
	key->est = key->done == 0 ? cpu_ns : key->est + (cpu_ns - key->est) / 4;
	key->est_wall = key->done == 0 ? wall_ns : key->est_wall + (wall_ns - key->est_wall) / 4;
	key->done++;
	key->cpu_ns += cpu_ns;
}

bool http_fairq_cancel(struct http_fairq *q, struct http_fairq_item *it)
{
	if (!it->queued)
		return false;
	struct http_fairq_key *k = it->key;
	unlink_item(q, it);
	if (k->waiting == 0)
		round_remove(q, k);
	return true;
}

void http_fairq_each(const struct http_fairq *q, http_fairq_each_fn fn, void *ctx)
{
	for (const struct keytab_node *n = keytab_first(&q->keys); n; n = keytab_next(&q->keys, n)) {
		const struct http_fairq_key *k = (const struct http_fairq_key *)n;
		fn(ctx, &(struct http_fairq_stat){.key = k->node.key,
						  .waiting = k->waiting,
						  .running = k->running,
						  .done = k->done,
						  .cpu_ns = k->cpu_ns});
	}
}
