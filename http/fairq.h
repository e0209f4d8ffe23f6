#pragma once
/* A fair queue of jobs between tenants (keys), for http/pool.c: one FIFO
 * per key, served fairly by the CPU time their jobs use (the key whose
 * jobs used least goes first; with equal costs, round-robin: one job per
 * key per turn; fairq.c says how), with a cap on how many jobs of one key
 * may run at once (a count, and optionally the CPUs they keep busy) and a
 * bound on how many may wait. No threads and no locks here: the caller serialises every
 * call. Jobs are intrusive items the caller owns; this only links them. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_fairq;
struct http_fairq_key;

/* Embed one in each job; all fields are the queue's (zero it before push). */
struct http_fairq_item {
	struct http_fairq_item *next, *prev;
	struct http_fairq_key *key;
	int64_t charged_ns; /* set by pop: pass it to done */
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
 * the key, among those with items waiting and fewer than running_max
 * running, whose jobs have been charged the least CPU time (ties: the
 * one served fewer times since it had items waiting, then round-robin).
 * The key is charged its jobs' average CPU time at once (corrected at
 * done). NULL when nothing may run now. */
struct http_fairq_item *http_fairq_pop(struct http_fairq *q);
/* Take any waiting item out, whatever the caps (draining at a stop);
 * not counted as running. NULL when nothing waits. */
struct http_fairq_item *http_fairq_take(struct http_fairq *q);
/* An item returned by pop has finished: its key (it->key, which stays
 * valid as long as the queue, so the item itself may be gone) runs one
 * fewer, and is charged cpu_ns (the CPU time the job used) instead of
 * charged_ns (the item's charged_ns, what pop charged); wall_ns is how
 * long it ran. */
void http_fairq_done(struct http_fairq *q, struct http_fairq_key *key, int64_t charged_ns, int64_t cpu_ns,
		     int64_t wall_ns);
/* Bound what one key's running jobs may use together to `cores` CPUs
 * (0: no bound, the default): a key whose jobs keep a CPU busy (their
 * CPU time near their wall time) runs that many at once, one whose jobs
 * wait on a disk still up to running_max. At least one. */
void http_fairq_set_cpu_cores(struct http_fairq *q, double cores);
/* Take a waiting item out without running it. false when it was not
 * waiting (already popped, or never pushed). */
bool http_fairq_cancel(struct http_fairq *q, struct http_fairq_item *it);
/* Every key seen so far with its counts (metrics). Keys are kept once
 * seen: their number is that of tenants. */
struct http_fairq_stat {
	const char *key;
	size_t waiting, running;
	uint64_t done;	/* jobs finished */
	int64_t cpu_ns; /* their CPU time together */
};
typedef void (*http_fairq_each_fn)(void *ctx, const struct http_fairq_stat *s);
void http_fairq_each(const struct http_fairq *q, http_fairq_each_fn fn, void *ctx);
