#pragma once
/* The audit rows (audit.c), part of store.h's API. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/execs.h"

struct store;

struct store_audit {
	int64_t id; /* assigned by the store */
	int64_t at;
	const char *tenant;  /* "" when unauthenticated */
	const char *session; /* may be NULL */
	size_t session_len;
	const char *request_id;
	const char *method;
	const char *route;
	const char *target; /* may be NULL */
	int status;
	const char *outcome; /* ok, denied, error */
	bool has_exit_code;
	int exit_code;
	struct store_exec_why why; /* of the command the request ran (false: none) */
	int64_t bytes_in, bytes_out;
	double duration_ms;
	const char *client;
	const char *sub;     /* the token's sub claim; may be NULL */
	int64_t incarnation; /* the tenant's life (0: none known, stored NULL) */
	const char *exec_id; /* the exec the request ran (POST /exec); NULL: none */
};
/* The most bytes of a target an audit row keeps. A longer target (a
 * command, a path, a policy change) is cut at a character boundary and
 * ends with " [... sandboxd: target truncated: K of N bytes kept ...]",
 * N its full length; the whole row stays within this bound. */
#define STORE_AUDIT_TARGET_MAX 4096
/* target[0..n) as an audit row keeps it: valid UTF-8, capped as above.
 * Caller frees. */
char *store_audit_target_cap(const char *target, size_t n);
/* Queue one record for the batched writer (strings are copied; the
 * target is capped by store_audit_target_cap). Never
 * blocks on the disk; commits happen in groups at least every 50 ms.
 * Returns 0, or -SBX_E_STORE when the queue is over its bound (the record
 * is dropped and counted). */
int store_audit_append(struct store *s, const struct store_audit *a);
/* Wait until everything queued before this call is committed. */
int store_audit_flush(struct store *s);
/* Records that could not be written (queue full or SQLite errors). */
uint64_t store_audit_failures(struct store *s);

struct store_audit_filter {
	const char *tenant;   /* NULL: all tenants (admin) */
	int64_t incarnation;  /* with tenant: only rows of that life (0: every life, operators) */
	int64_t since, until; /* 0: open */
	const char *session;  /* NULL: any */
	size_t session_len;
	const char *route;   /* NULL: any */
	const char *outcome; /* NULL: any */
	const char *egress;  /* "denied", "any": only rows whose exec has such an egress record; NULL */
	int64_t after;	     /* cursor: only ids > after */
	size_t limit;
};
/* Oldest first (by id). cb gets each record (strings borrowed for the
 * call); return non-zero from cb to stop. *last_id = id of the last record
 * given to cb. Runs on its own read connection so it never blocks writers. */
typedef int (*store_audit_cb)(void *ctx, const struct store_audit *a);
int store_audit_query(struct store *s, const struct store_audit_filter *f, store_audit_cb cb, void *ctx,
		      int64_t *last_id);

/* ---- internal to store/ ---- */
struct store_wrec;
/* For the writer thread, without alock: write b[0..n) in one
 * transaction and free them; returns how many failed, and raises *fail_seq to the
 * highest seq among them. */
size_t store_audit_write(struct store *s, struct store_wrec **b, size_t n, uint64_t *fail_seq);
/* For tests: the EXPLAIN QUERY PLAN details (one per line) of the query
 * store_audit_query would run for f. */
int store_audit_query_plan(struct store *s, const struct store_audit_filter *f, char *out, size_t outsz);
