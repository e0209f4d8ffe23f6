#pragma once
/* The SQLite store: the only place with SQL. One file per table family
 * (store.c: open, pragmas, recovery; migrate.c: migrations; tenants.c, sessions.c,
 * execs.c, transfers.c, audit.c). Knows nothing of HTTP or of sandbox/.
 * Times are Unix epoch milliseconds. Every function returns 0 or a
 * negative errno: -ENOENT (no such row), -EEXIST (unique key taken),
 * -ENOSPC (SQLITE_FULL: 507), -SBX_E_STORE (any other SQLite failure:
 * 503 store_unavailable), -EPROTO (database newer than this binary).
 * Thread-safe: one serialised write connection (BEGIN IMMEDIATE for write
 * transactions) and a batched audit writer thread. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;

/* Open (creating) the database file at path: WAL, busy_timeout,
 * synchronous=NORMAL, foreign_keys=ON. Migrations run only when migrate
 * is true; without it a database behind the binary answers -ESTALE. A
 * database newer than the binary: -EPROTO. err gets a human message. */
int store_open(struct store **out, const char *path, bool migrate, char *err, size_t errsz);
/* Flush the audit queue, stop its thread, close. Accepts NULL. */
void store_close(struct store **s);

/* Apply embedded migrations (migrations/NNNN_name.sql) above PRAGMA
 * user_version, all in one transaction. from and to receive the versions. */
int store_migrate(struct store *s, int *from, int *to);
int store_schema_version(struct store *s);
/* The highest migration number embedded in this binary. */
int store_known_version(void);
/* The i-th embedded migration in the order they run (by name, so by
 * number): its file name ("0006_tenant_incarnation.sql"), its number into
 * *number (may be NULL); NULL past the last. A store at schema version v
 * has to run those numbered above v. */
const char *store_migration_name(size_t i, int *number);
/* The schema version of the database file at path into *version, read
 * without changing anything: no write, no lock, no -wal, -shm or
 * -journal created (a file with no -wal beside it is the whole database
 * and is read immutable; with one, a server holds it, or a crash left
 * transactions there, and it is read read-only through it, which may
 * create its -shm). An empty file is version 0. -ENOENT (or another
 * -errno): no file; -EPROTO: newer than this binary (*version set);
 * -SBX_E_STORE: not a database. err gets a human message. */
int store_peek_version(const char *path, int *version, char *err, size_t errsz);
/* The schema version the file had when store_open opened it, before the
 * migrations it ran (equal to store_schema_version when it ran none). */
int store_opened_version(struct store *s);

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

/* ---- execs.c ---- */
/* Why a command ended, as its cgroup saw it (sandbox/cgroup.h), kept on
 * its exec row and the audit record of the request that ran it. */
struct store_exec_why {
	bool oom_killed, pids_limited, uncontained;
};

/* An exec's state; the store keeps its name (the wire's `state`). Zero is
 * running, what store_exec_begin writes unless told otherwise. */
enum store_exec_state {
	EXEC_RUNNING,
	EXEC_PENDING_APPROVAL,
	EXEC_EXITED,
	EXEC_TIMED_OUT,
	EXEC_CANCELLED,
	EXEC_REJECTED,
	EXEC_LOST,
};
#define EXEC_STATES 7
/* The wire name of s ("running", "pending_approval", ...). */
const char *store_exec_state_name(enum store_exec_state s);
/* The state named name: 0, or -EINVAL for no state. */
int store_exec_state_parse(const char *name, enum store_exec_state *out);
/* Not over yet: running, or waiting for a person's decision. */
static inline bool store_exec_state_live(enum store_exec_state s)
{
	return s == EXEC_RUNNING || s == EXEC_PENDING_APPROVAL;
}

struct store_exec {
	char tenant[64];
	char id[72];
	char *session; /* owned */
	size_t session_len;
	char *command;		     /* owned */
	char *cwd;		     /* owned: wire path */
	char *request_hash;	     /* owned: hex digest of the canonical request */
	enum store_exec_state state; /* the table's CHECK admits only these names */
	bool has_exit_code;
	int exit_code;
	char *result; /* owned: ShellResult JSON, or NULL */
	int64_t started_at;
	int64_t finished_at;   /* 0 while running */
	int64_t exit_event_id; /* id of its `exit` event (0: not recorded) */
	char *policy;	       /* owned: the effective policy (JSON), or NULL */
	char *requested_by;    /* owned: the requesting token's sub, or NULL */
	char decision[12];     /* "", approved, rejected */
	char *decided_by;      /* owned: the approver's sub, or NULL */
	int64_t decided_at;    /* 0: no decision */
	char *reason;	       /* owned: why it was rejected, or NULL */
	int64_t incarnation;   /* its tenant's life (store_tenant.incarnation); 0 at begin: the living one */
	struct store_exec_why why; /* set by store_exec_finish */
};
/* Insert a row in e->state, 'running' or 'pending_approval', with its
 * policy and requester (fail closed: the command must not start unless
 * this returns 0). -EEXIST when (tenant, id) exists. */
int store_exec_begin(struct store *s, const struct store_exec *e);
/* Decide on a 'pending_approval' row: decision "approved" makes it
 * 'running' (started_at = at), "rejected" makes it 'rejected'
 * (finished_at = at). decided_by and reason may be NULL. -ENOENT when the
 * row is not pending (any more). */
int store_exec_decide(struct store *s, const char *tenant, const char *id, const char *decision,
		      const char *decided_by, const char *reason, int64_t at);
/* Finish: state, exit code, result JSON, finished_at, the id its
 * `exit` event has on the live stream, and why it ended (NULL: nothing
 * said, all false). */
int store_exec_finish(struct store *s, const char *tenant, const char *id, enum store_exec_state state,
		      int exit_code, const char *result, int64_t finished_at, int64_t exit_event_id,
		      const struct store_exec_why *why);
/* Remove a row still 'running' whose command never started (the backend
 * refused it), so the id can be retried. -ENOENT. */
int store_exec_delete(struct store *s, const char *tenant, const char *id);
/* -ENOENT. Free with store_exec_clear. */
int store_exec_get(struct store *s, const char *tenant, const char *id, struct store_exec *out);
/* Newest first; state/session may be NULL (no filter); results omitted
 * (result NULL) when with_result is false. */
int store_exec_list(struct store *s, const char *tenant, const enum store_exec_state *state,
		    const char *session, size_t session_len, size_t limit, bool with_result,
		    struct store_exec **out, size_t *n);
void store_exec_clear(struct store_exec *e);
void store_execs_free(struct store_exec *v, size_t n);

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

/* ---- audit.c ---- */
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

/* ---- egress.c ---- */
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
