#pragma once
/* The egress ledger (egress.c), part of store.h's API. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;

/* The egress ledger: one record per connection, DNS refusal or dropped
 * datagram of a command with network (the gateway's record, with the
 * tenant's life). Strings may be NULL where the column allows (sub, name,
 * name_source, addr, reason); exec_id and dialled NULL are stored "". */
struct store_egress {
	int64_t id; /* assigned by the store */
	const char *tenant;
	int64_t incarnation; /* the tenant's life; 0: its living one's when written (a
				gateway thread cannot look it up without waiting) */
	const char *exec_id, *sub;
	const char *proto; /* "tls", "http", "tcp", "dns", "udp" */
	const char *name, *name_source, *dialled, *addr;
	uint16_t port;
	bool allowed;
	const char *reason;
	uint64_t bytes_up, bytes_down;
	int64_t started_at, ended_at;
};
/* Queue one record for the store's batched writer (the audit's thread;
 * strings are copied): never blocks on the disk, so a gateway thread may
 * call it. Commits happen in groups, as the audit's. Its queue is bounded
 * apart from the audit's, so a flood of connections never costs an audit
 * record. 0, or -SBX_E_STORE when the queue is over its bound or the
 * store is closing (dropped and counted); -EINVAL without a tenant. */
int store_egress_append(struct store *s, const struct store_egress *e);
/* Wait until every record queued before this call is committed; 0, or
 * -SBX_E_STORE when one of them could not be written. */
int store_egress_flush(struct store *s);
/* Records that could not be written (queue full or SQLite errors). */
uint64_t store_egress_failures(struct store *s);

struct store_egress_filter {
	const char *tenant;  /* required */
	int64_t incarnation; /* 0: every life */
	const char *exec_id; /* NULL: every exec */
	const char *verdict; /* "allowed", "denied"; NULL: both */
	int64_t after;	     /* cursor: only ids > after */
	size_t limit;	     /* 0: no limit */
};
/* Oldest first (by id); cb as store_audit_query's (strings borrowed for
 * the call, non-zero stops, a negative errno is returned). *last_id: id
 * of the last record given to cb. On the read connection. */
typedef int (*store_egress_cb)(void *ctx, const struct store_egress *e);
int store_egress_query(struct store *s, const struct store_egress_filter *f, store_egress_cb cb, void *ctx,
		       int64_t *last_id);

/* ---- internal to store/ ---- */
struct store_wrec;
/* For the writer thread, without alock: write b[0..n) in one
 * transaction and free them; returns how many failed, and raises
 * *fail_seq to the highest seq among them. */
size_t store_egress_write(struct store *s, struct store_wrec **b, size_t n, uint64_t *fail_seq);
