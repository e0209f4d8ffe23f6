/* The fair queue (see fairq.h): keys in a small hash table, each with its
 * FIFO of items; keys with items waiting form the round, a circular list
 * walked from its head, so a key that was served goes to the back. */
#include "http/fairq.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"

#define NBUCKETS 256

struct http_fairq_key {
	char name[64];
	struct http_fairq_item *head, *tail; /* waiting, oldest first */
	size_t waiting, running;
	struct http_fairq_key *hnext;	      /* hash chain */
	struct http_fairq_key *rnext, *rprev; /* the round, while waiting > 0 */
};

struct http_fairq {
	size_t running_max, queue_max;
	struct http_fairq_key *buckets[NBUCKETS];
	struct http_fairq_key *round; /* head of the round: served next */
};

static unsigned bucket_of(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % NBUCKETS;
}

static struct http_fairq_key *find(const struct http_fairq *q, const char *name)
{
	for (struct http_fairq_key *k = q->buckets[bucket_of(name)]; k; k = k->hnext)
		if (strncmp(k->name, name, sizeof k->name - 1) == 0)
			return k;
	return NULL;
}

static struct http_fairq_key *find_or_add(struct http_fairq *q, const char *name)
{
	struct http_fairq_key *k = find(q, name);
	if (k)
		return k;
	k = xcalloc(1, sizeof *k);
	snprintf(k->name, sizeof k->name, "%s", name);
	unsigned b = bucket_of(k->name);
	k->hnext = q->buckets[b];
	q->buckets[b] = k;
	return k;
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
	for (size_t b = 0; b < NBUCKETS; b++)
		while (q->buckets[b]) {
			struct http_fairq_key *k = q->buckets[b];
			q->buckets[b] = k->hnext;
			free(k);
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
	if (k->waiting++ == 0)
		round_add(q, k);
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

struct http_fairq_item *http_fairq_pop(struct http_fairq *q)
{
	struct http_fairq_key *k = q->round;
	if (!k)
		return NULL;
	do {
		if (k->running < q->running_max) {
			struct http_fairq_item *it = k->head;
			unlink_item(q, it);
			k->running++;
			if (k->waiting == 0) {
				round_remove(q, k);
			} else {
				/* Served: to the back of the round. */
				round_remove(q, k);
				round_add(q, k);
			}
			return it;
		}
		k = k->rnext;
	} while (k != q->round);
	return NULL; /* every key with work waiting runs its cap */
}

struct http_fairq_item *http_fairq_take(struct http_fairq *q)
{
	if (!q->round)
		return NULL;
	struct http_fairq_item *it = q->round->head;
	http_fairq_cancel(q, it);
	return it;
}

void http_fairq_done(struct http_fairq *q, struct http_fairq_key *key)
{
	(void)q;
	if (key && key->running > 0)
		key->running--;
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
	for (size_t b = 0; b < NBUCKETS; b++)
		for (const struct http_fairq_key *k = q->buckets[b]; k; k = k->hnext)
			fn(ctx, k->name, k->waiting, k->running);
}
