#pragma once
/* Internal to store/, its ground (db.c): the store struct, the statement
 * cache and the small helpers every table file uses, and the read
 * connection. Nothing outside store/ includes this; db.c calls only
 * SQLite and common/. */

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Cached statements on the write connection, one slot each. The SQL text
 * stays next to its use (store_stmt(s, ST_X, "...")); the slot only caches. */
enum store_stmt_id {
	ST_TENANT_FREE_SLOT,
	ST_TENANT_INSERT,
	ST_TENANT_GET,
	ST_TENANT_LIST,
	ST_TENANT_DELETE,
	ST_TENANT_LIFE_INSERT,
	ST_TENANT_LIFE_END,
	ST_TENANT_LAST_LIFE,
	ST_TENANT_SLOT_HELD,
	ST_DATA_VERSION,
	ST_TENANT_SET_APPROVER,
	ST_SESSION_GET,
	ST_SESSION_TOUCH,
	ST_SESSION_SEGMENT_TAKEN,
	ST_SESSION_INSERT,
	ST_SESSION_LIST,
	ST_SESSION_DELETE,
	ST_EXEC_INSERT,
	ST_EXEC_FINISH,
	ST_EXEC_GET,
	ST_EXEC_DELETE,
	ST_EXEC_LIST,
	ST_TRANSFER_INSERT,
	ST_TRANSFER_CLAIM,
	ST_TRANSFER_STATE,
	ST_TRANSFER_EXPIRE,
	ST_TRANSFER_FINISH,
	ST_TRANSFER_GET,
	ST_AUDIT_INSERT,
	ST_AUDIT_INSERT_MANY,
	ST_EGRESS_INSERT,
	ST_PROBE,
	ST_POLICY_GET,
	ST_POLICY_LOAD,
	ST_POLICY_PUT,
	ST_EXEC_DECIDE,
	ST_USAGE_GET,
	ST_BEGIN,
	ST_COMMIT,
	ST_ROLLBACK,
	ST__COUNT
};

struct scache;
struct store;

/* The kinds of record the batched writer (writer.c) writes, in the order
 * it writes each group: audit rows (audit.c), then egress rows (egress.c). */
enum store_wkind { STORE_WK_AUDIT, STORE_WK_EGRESS, STORE_WK__COUNT };
/* The head of every queued record: a kind's record struct starts with it. */
struct store_wrec {
	uint64_t seq;
};
/* A kind's write function, called by the writer thread without alock:
 * write b[0..n) in one transaction and free them; returns how many
 * failed, and raises *fail_seq to the highest seq among them. */
typedef size_t (*store_wwrite_fn)(struct store *s, struct store_wrec **b, size_t n, uint64_t *fail_seq);
/* One kind's queue. */
struct store_wqueue {
	struct store_wrec **q;
	size_t n, cap;
	uint64_t fail_seq;	       /* highest seq of a record of this kind not written */
	atomic_uint_fast64_t failures; /* records not written (queue full or SQLite errors) */
};

struct store {
	char *path;
	int opened_version; /* PRAGMA user_version as store_open found it */

	/* The one write connection. Every use holds lock: SQLite transactions
	 * are per connection, so two threads must never interleave on it. */
	sqlite3 *db;
	pthread_mutex_t lock;
	sqlite3_stmt *stmts[ST__COUNT];

	/* sessions.c's (tenant, key) -> segment cache; allocated on first use. */
	pthread_mutex_t scache_mu;
	struct scache *scache;

	/* Read-only connection for long reads (audit queries). */
	sqlite3 *rdb;
	pthread_mutex_t rlock;

	/* The batched writer (writer.c): a queue per kind of record, all
	 * under alock and written by one thread; seq is shared by the kinds. */
	pthread_mutex_t alock;
	pthread_cond_t awake; /* writer waits: records or stop */
	pthread_cond_t adone; /* flushers wait: committed advanced */
	struct store_wqueue wq[STORE_WK__COUNT];
	store_wwrite_fn wwrite[STORE_WK__COUNT]; /* each kind's, given at start */
	int64_t qfirst_ms;			 /* monotonic time of the oldest queued record */
	uint64_t appended;			 /* seq of the last accepted record */
	uint64_t committed;			 /* every seq <= this has been handled */
	uint64_t flush_target;			 /* a flusher waits for this seq */
	bool stop;
	bool thread_started;
	pthread_t thread;
	size_t eq_max; /* the egress queue's bound; 0: EGRESS_QUEUE_MAX (tests set a smaller one) */

	/* Whether the store can write: the outcome of its latest write (a
	 * commit, an autocommit write, an audit batch or a probe). */
	pthread_mutex_t hlock;
	int64_t health_mono_ms; /* when; 0: no write yet */
	int health_rc;		/* 0, or the failure as store_rc() says */
	char health_err[160];
};

/* The cached statement for id (prepared on first use, reset and unbound
 * before it is handed out). Caller holds s->lock. NULL on a prepare
 * failure (a schema/SQL bug), which callers report as -SBX_E_STORE. */
sqlite3_stmt *store_stmt(struct store *s, enum store_stmt_id id, const char *sql);
/* Map an SQLite result code (extended codes are on) to 0 / negative errno. */
int store_rc(int rc);
/* BEGIN IMMEDIATE / COMMIT / ROLLBACK on the write connection; s->lock held. */
int store_tx_begin(struct store *s);
int store_tx_commit(struct store *s);
void store_tx_rollback(struct store *s);
/* End the transaction as r says: commit when r is 0, else roll back.
 * Returns r, or the commit's error. */
int store_tx_end(struct store *s, int r);
/* Record the outcome of a write on the write connection (s->lock held):
 * r 0 is a success; a failure counts only when SQLite's error is the
 * disk's (full, I/O, read-only, cannot open, corrupt), not a constraint. */
void store_note_write(struct store *s, int r);
/* Step a statement expected to return no row (INSERT/UPDATE/DELETE). */
int store_step_done(sqlite3_stmt *st);
/* The same for an UPDATE/DELETE of one row: -ENOENT when none matched. */
int store_step_one(struct store *s, sqlite3_stmt *st);

/* One value for a statement parameter. Write a query's values in order
 * (?1, ?2, ...) next to its SQL: Q_ARGS(Q_TEXT(tenant), Q_INT(now)). */
struct store_val {
	enum { STORE_NULL, STORE_TEXT, STORE_BLOB, STORE_INT } type;
	const char *text; /* NULL binds NULL */
	const void *blob; /* NULL binds NULL; length 0 binds a zero-length blob */
	size_t len;
	int64_t i;
};
#define Q_NULL ((struct store_val){.type = STORE_NULL})
#define Q_TEXT(s) ((struct store_val){.type = STORE_TEXT, .text = (s)})
#define Q_BLOB(p, n) ((struct store_val){.type = STORE_BLOB, .blob = (p), .len = (n)})
#define Q_INT(v) ((struct store_val){.type = STORE_INT, .i = (v)})
#define Q_ARGS(...)                                                                                          \
	(const struct store_val[]){__VA_ARGS__},                                                             \
	    sizeof((const struct store_val[]){__VA_ARGS__}) / sizeof(struct store_val)
#define Q_NOARGS NULL, 0

/* How store_get and store_list read a row into a caller's struct. clear
 * undoes fill for store_list's error path; NULL for a row type that is
 * only read with store_get or store_step_row. */
struct store_row {
	size_t size;				   /* of the struct */
	void (*fill)(sqlite3_stmt *st, void *dst); /* from the current row */
	void (*clear)(void *dst);		   /* frees what fill allocated */
};

/* Caller holds s->lock. store_stmt with vals bound; NULL as store_stmt. */
sqlite3_stmt *store_prep(struct store *s, enum store_stmt_id id, const char *sql, const struct store_val *v,
			 size_t n);
/* Step st once: its row goes to dst through rt->fill. 0, -ENOENT when
 * there is no row, or an error. Resets st. */
int store_step_row(sqlite3_stmt *st, const struct store_row *rt, void *dst);

/* One cached statement under s->lock, each a whole query; a prepare
 * failure is -SBX_E_STORE.
 * store_run: no row to read (store_step_done).
 * store_run_one: an UPDATE/DELETE of one row (store_step_one: -ENOENT).
 * store_get: the first row into *dst (store_step_row: -ENOENT); dst is
 *   untouched on failure.
 * store_list: every row into a new array of rt->size elements, which the
 *   caller owns; *out and *n are set only on success. */
int store_run(struct store *s, enum store_stmt_id id, const char *sql, const struct store_val *v, size_t n);
int store_run_one(struct store *s, enum store_stmt_id id, const char *sql, const struct store_val *v,
		  size_t n);
int store_get(struct store *s, enum store_stmt_id id, const char *sql, const struct store_row *rt, void *dst,
	      const struct store_val *v, size_t n);
int store_list(struct store *s, enum store_stmt_id id, const char *sql, const struct store_row *rt,
	       void **out, size_t *nout, const struct store_val *v, size_t n);

/* Binding helpers: a zero-length blob must not become NULL. */
int store_bind_blob(sqlite3_stmt *st, int i, const void *p, size_t n);
int store_bind_text(sqlite3_stmt *st, int i, const char *str); /* NULL binds NULL */

/* Column helpers: copies owned by the caller, NUL-terminated. */
char *store_col_strdup(sqlite3_stmt *st, int i);	       /* NULL for SQL NULL */
char *store_col_blobdup(sqlite3_stmt *st, int i, size_t *len); /* "" for SQL NULL */
void store_col_copy(sqlite3_stmt *st, int i, char *dst, size_t dstsz);

/* fn(db, arg) on a read connection: the shared one when free, else a
 * private one opened for the call (readers never wait on readers). */
int store_read(struct store *s, int (*fn)(sqlite3 *db, void *arg), void *arg);
