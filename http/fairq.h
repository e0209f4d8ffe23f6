#pragma once
/* A fair queue of jobs between tenants (keys), for http/pool.c: one FIFO
 * per key, served round-robin (one job per key per turn), with a cap on
 * how many jobs of one key may run at once and a bound on how many may
 * wait. No threads and no locks here: the caller serialises every call.
 * Jobs are intrusive items the caller owns; this only links them. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_fairq;
struct http_fairq_key;

/* Embed one in each job; all fields are the queue's (zero it before push). */
struct http_fairq_item {
	struct http_fairq_item *next, *prev;
	struct http_fairq_key *key;
	bool queued;
};

/* running_max: jobs of one key running at once (>= 1); queue_max: jobs of
 * one key waiting (>= 1). Aborts on out-of-memory like xmalloc. */
void http_fairq_new(struct http_fairq **out, size_t running_max, size_t queue_max);
/* Accepts NULL; *q = NULL. Items still queued are only forgotten. */
void http_fairq_free(struct http_fairq **q);

/* Queue it at the tail of key's FIFO (key is copied; at most 63 bytes are
 * kept). 0, or -EAGAIN when key already has queue_max items waiting. */
int http_fairq_push(struct http_fairq *q, const char *key, struct http_fairq_item *it);
/* The next item to run, counted as running for its key: the first item of
 * the first key, in round-robin order, that has items waiting and fewer
 * than running_max running. That key then goes to the back of the round.
 * NULL when nothing may run now. */
struct http_fairq_item *http_fairq_pop(struct http_fairq *q);
/* Take any waiting item out, whatever the caps (draining at a stop);
 * not counted as running. NULL when nothing waits. */
struct http_fairq_item *http_fairq_take(struct http_fairq *q);
/* An item returned by pop has finished: its key (it->key, which stays
 * valid as long as the queue, so the item itself may be gone) runs one
 * fewer. */
void http_fairq_done(struct http_fairq *q, struct http_fairq_key *key);
/* Take a waiting item out without running it. false when it was not
 * waiting (already popped, or never pushed). */
bool http_fairq_cancel(struct http_fairq *q, struct http_fairq_item *it);
/* Every key seen so far with its waiting and running counts (metrics).
 * Keys are kept once seen: their number is that of tenants. */
typedef void (*http_fairq_each_fn)(void *ctx, const char *key, size_t waiting, size_t running);
void http_fairq_each(const struct http_fairq *q, http_fairq_each_fn fn, void *ctx);
