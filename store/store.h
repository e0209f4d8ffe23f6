#pragma once
/* The SQLite store: the only place with SQL. One file per table family
 * (store.c: open, pragmas, recovery; migrate.c: migrations; tenants.c, sessions.c,
 * execs.c, transfers.c, audit.c, egress.c; audit.h, egress.h, execs.h and
 * migrate.h hold those families' part of this API). Knows nothing of HTTP
 * or of sandbox/.
 * Times are Unix epoch milliseconds. Every function returns 0 or a
 * negative errno: -ENOENT (no such row), -EEXIST (unique key taken),
 * -ENOSPC (SQLITE_FULL: 507), -SBX_E_STORE (any other SQLite failure:
 * 503 store_unavailable), -EPROTO (database newer than this binary).
 * Thread-safe: one serialised write connection (BEGIN IMMEDIATE for write
 * transactions) and a batched audit writer thread. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/audit.h"
#include "store/egress.h"
#include "store/execs.h"
#include "store/migrate.h"

struct store;

/* Open (creating) the database file at path: WAL, busy_timeout,
 * synchronous=NORMAL, foreign_keys=ON. Migrations run only when migrate
 * is true; without it a database behind the binary answers -ESTALE. A
 * database newer than the binary: -EPROTO. err gets a human message. */
int store_open(struct store **out, const char *path, bool migrate, char *err, size_t errsz);
/* Flush the audit queue, stop its thread, close. Accepts NULL. */
void store_close(struct store **s);

/* Readiness: whether the store can write, as its latest write (of any
 * kind) within the last second says, or else as a real write of the
 * probe row says now (so a disk that refuses writes, full or failing, is
 * seen, and so is its recovery). 0, or the failure (-ENOSPC,
 * -SBX_E_STORE) with SQLite's message in why. */
int store_check_writable(struct store *s, char *why, size_t whysz);

/* Start-up recovery: execs left 'running' become 'lost', transfers left
 * 'active' become 'failed', minted transfers past expiry 'expired'. */
int store_recover(struct store *s, int *lost_execs, int *failed_transfers);

/* ---- retention.c ---- */
typedef void (*store_pruned_exec_cb)(void *ctx, const char *tenant, const char *id);
/* Delete audit rows, egress rows (by ended_at), finished execs and ended
 * transfers older than cutoff (epoch ms; 0: no age limit) and those beyond
 * the newest max_rows of each table (0: no row limit), in transactions of
 * at most batch rows. cb gets
 * each deleted exec (to remove its spill files). *deleted: rows removed. */
int store_prune(struct store *s, int64_t cutoff, int64_t max_rows, size_t batch, store_pruned_exec_cb cb,
		void *ctx, int64_t *deleted);

/* ---- usage.c ---- */
/* What the store holds on tenant's behalf (its exec and audit rows, kept
 * up to date by triggers of migration 0007): *rows, and *bytes their
 * texts and blobs plus a fixed overhead per row. 0 and 0 for a tenant
 * with no rows. Deleting rows (retention, removal) lowers both. Counted
 * per life: incarnation names one (store_tenant.incarnation), 0 sums every
 * life of the name (an earlier life's audit rows, kept until retention,
 * never count against a tenant added again under its name). */
int store_usage_get(struct store *s, const char *tenant, int64_t incarnation, int64_t *rows, int64_t *bytes);

/* ---- tenants.c ---- */
struct store_tenant {
	char name[64];
	char alg[8];	    /* "HS256", "RS256", "ES256" */
	unsigned char *key; /* secret or PEM public key; owned */
	size_t key_len;
	bool operator_tenant;
	int64_t slot; /* sandbox uid = uid_base + slot; assigned by add */
	int64_t created_at;
	int64_t incarnation;  /* this life of the name (tenant_lives.id): assigned by add, never reused */
	char approver_alg[8]; /* "" when no approver key is registered */
	unsigned char *approver_key; /* owned; NULL when none */
	size_t approver_key_len;
};
/* Insert with a new incarnation. The slot is the lowest one no life
 * (living or removed) ever held, so a new tenant never gets a uid whose
 * files or processes another left; reuse_slot >= 0 asks for that slot
 * instead (the name's own earlier slot, `tenant add --reuse-leftovers`):
 * -EBUSY when a living tenant holds it. -EEXIST. */
int store_tenant_add(struct store *s, struct store_tenant *t, int64_t reuse_slot);
/* The last removed life of name: its slot and incarnation. -ENOENT. */
int store_tenant_last_life(struct store *s, const char *name, int64_t *slot, int64_t *incarnation);
/* Changes another connection (the CLI) committed since the last call
 * differ from *seen: true then, and *seen is updated. Cheap (no I/O), and
 * false without looking when the store's lock is held (never waits). */
bool store_changed_elsewhere(struct store *s, int64_t *seen);
/* -ENOENT. Free with store_tenant_clear. */
int store_tenant_get(struct store *s, const char *name, struct store_tenant *out);
/* All tenants by name. Free with store_tenants_free. */
int store_tenant_list(struct store *s, struct store_tenant **out, size_t *n);
/* Register (alg and key) or, with alg NULL, drop the tenant's approver
 * key (the key of its approve tokens). -ENOENT: no such tenant. */
int store_tenant_set_approver(struct store *s, const char *name, const char *alg, const unsigned char *key,
			      size_t key_len);
/* Removes the tenant and, by cascade, its sessions, execs, transfers and
 * policy; its life is marked removed (its slot stays taken). *incarnation
 * (may be NULL) gets the removed life's. -ENOENT. */
int store_tenant_remove(struct store *s, const char *name, int64_t *incarnation);
void store_tenant_clear(struct store_tenant *t);
void store_tenants_free(struct store_tenant *t, size_t n);

/* ---- policies.c ---- */
/* The overrides of tenant's policy (a JSON object text, owned: free();
 * NULL when none was ever set) and when they last changed (0: never), in
 * one statement and so one read transaction. -ENOENT: no such tenant. */
int store_policy_get(struct store *s, const char *tenant, char **policy, int64_t *updated_at);
/* Replace them with policy, provided they still are expect (NULL: no row
 * yet); -EAGAIN when another writer came first (read and try again). */
int store_policy_replace(struct store *s, const char *tenant, const char *expect, const char *policy,
			 int64_t now);

/* ---- sessions.c ---- */
/* Derives a directory segment for a key; salt 0 first, then 1, 2, ... on
 * a collision with another key's segment. out holds at least 64 bytes. */
typedef void (*store_segment_fn)(const char *key, size_t len, unsigned salt, char *out);

struct store_session {
	char *key; /* owned; key_len bytes + NUL */
	size_t key_len;
	char segment[64];
	int64_t created_at, last_used_at;
};
/* Find the session (tenant, key) or create it with a segment no other key
 * of the tenant has. last_used_at is refreshed at most once a minute
 * (so a request does not pay a write for it). *created tells whether the
 * row is new. */
int store_session_get_or_create(struct store *s, const char *tenant, const char *key, size_t key_len,
				store_segment_fn seg, int64_t now, char segment[64], bool *created);
/* The same answer from memory alone, for a caller that must not wait
 * (common/nowait.h): true and segment filled when the session is known
 * and needs no write now; false when only get_or_create can answer. */
bool store_session_cached(struct store *s, const char *tenant, const char *key, size_t key_len, int64_t now,
			  char segment[64]);
/* The tenant's sessions, most recently used first. Free with store_sessions_free. */
int store_session_list(struct store *s, const char *tenant, size_t limit, struct store_session **out,
		       size_t *n);
/* The segment of (tenant, key) without creating or touching the row; -ENOENT. */
int store_session_find(struct store *s, const char *tenant, const char *key, size_t key_len,
		       char segment[64]);
/* Delete the row; -ENOENT. The segment is returned so the caller can remove the directory. */
int store_session_delete(struct store *s, const char *tenant, const char *key, size_t key_len,
			 char segment[64]);
void store_sessions_free(struct store_session *v, size_t n);

/* ---- transfers.c ---- */
struct store_transfer {
	unsigned char token_hash[32];
	char tenant[64];
	char *session; /* owned */
	size_t session_len;
	char *path;	   /* owned: rel path */
	char direction[8]; /* read, write */
	char state[8];	   /* minted, active, done, failed, expired */
	int64_t bytes;
	char sha256[65]; /* hex or "" */
	char *error;	 /* owned or NULL */
	int64_t created_at, expires_at, started_at, finished_at;
};
int store_transfer_mint(struct store *s, const struct store_transfer *t);
/* Atomically move a 'minted', unexpired transfer to 'active' and return
 * it (one UPDATE ... WHERE state='minted'): of two racing callers one
 * wins. -ENOENT unknown; -SBX_E_TOKEN_USED when not 'minted' any more;
 * -SBX_E_TOKEN_EXPIRED when past expires_at (the row becomes 'expired'). */
int store_transfer_claim(struct store *s, const unsigned char hash[32], int64_t now,
			 struct store_transfer *out);
/* Final state 'done' or 'failed', bytes, sha256 (may be NULL), error (may be NULL). */
int store_transfer_finish(struct store *s, const unsigned char hash[32], const char *state, int64_t bytes,
			  const char *sha256, const char *error, int64_t now);
int store_transfer_get(struct store *s, const unsigned char hash[32], struct store_transfer *out);
void store_transfer_clear(struct store_transfer *t);
