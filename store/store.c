/* The store's public face: open (pragmas, migrations, the writer's
 * start with each record kind's write function), close, readiness and
 * recovery. Calls migrate.c, writer.c, audit.c's and egress.c's write
 * functions (handed to the writer) and db.c.
 *
 * Durability: WAL with synchronous=NORMAL. A commit survives a crash of
 * the process at any instant; a power loss (or kernel crash) can lose the
 * last transactions committed since the previous WAL checkpoint sync, but
 * never corrupts the database. */
#include "store/store.h"

#include "store/db.h"
#include "store/writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"

/* How long the outcome of a write tells whether the store can write;
 * after that /readyz writes the probe row to find out. */
#define STORE_PROBE_MS 1000

/* ---- open / close ---- */

static int exec_pragma(sqlite3 *db, const char *sql, const char *want)
{
	sqlite3_stmt *st = NULL;
	int rc, r = 0;

	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK) {
		r = store_rc(rc);
		goto out;
	}
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		r = store_rc(rc);
		goto out;
	}
	if (want && (rc != SQLITE_ROW || !sqlite3_column_text(st, 0) ||
		     strcmp((const char *)sqlite3_column_text(st, 0), want) != 0))
		r = -SBX_E_STORE;
out:
	sqlite3_finalize(st);
	return r;
}

static int open_conn(sqlite3 **out, const char *path, int flags, char *err, size_t errsz)
{
	sqlite3 *db = NULL;
	int rc;

	rc = sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		if (err && errsz)
			snprintf(err, errsz, "cannot open %s: %s", path,
				 db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		sqlite3_close(db);
		return rc == SQLITE_FULL ? -ENOSPC : -SBX_E_STORE;
	}
	sqlite3_extended_result_codes(db, 1);
	sqlite3_busy_timeout(db, 5000);
	*out = db;
	return 0;
}

/* SQLite's memory statistics take a global mutex around every malloc and
 * free of every connection (the audit writer makes several per row);
 * nothing here reads them. Must precede SQLite's initialisation (the
 * first open); later it is refused, harmlessly. */
static void sqlite_config_once(void)
{
	(void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

/* A store with its locks and conditions made and no connection yet. */
static struct store *store_new(const char *path)
{
	struct store *s = xcalloc(1, sizeof *s);
	pthread_condattr_t ca;

	s->path = xstrdup(path);
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->scache_mu, NULL);
	pthread_mutex_init(&s->rlock, NULL);
	pthread_mutex_init(&s->alock, NULL);
	pthread_mutex_init(&s->hlock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->awake, &ca);
	pthread_cond_init(&s->adone, &ca);
	pthread_condattr_destroy(&ca);
	for (int k = 0; k < STORE_WK__COUNT; k++)
		atomic_init(&s->wq[k].failures, 0);
	return s;
}

/* The write connection's schema made ready: its version read (a newer
 * one than this binary's refused before anything writes to it), the
 * pragmas set, and the migrations run when migrate allows them. */
static int open_schema(struct store *s, const char *path, bool migrate, char *err, size_t errsz)
{
	int known = store_known_version();
	int v = 0, r;

	/* The version first: a database newer than this binary is refused
	 * before anything here writes to it (journal_mode=WAL would). */
	r = store_read_user_version(s->db, &v);
	if (r) {
		if (err && errsz)
			snprintf(err, errsz, "cannot read the schema version of %s: %s", path,
				 sqlite3_errmsg(s->db));
		return r;
	}
	if (v > known) {
		store_newer_msg(err, errsz, v, known);
		return -EPROTO;
	}
	s->opened_version = v;
	if ((r = exec_pragma(s->db, "PRAGMA journal_mode=WAL", "wal")) ||
	    (r = exec_pragma(s->db, "PRAGMA synchronous=NORMAL", NULL)) ||
	    (r = exec_pragma(s->db, "PRAGMA foreign_keys=ON", NULL))) {
		if (err && errsz)
			snprintf(err, errsz, "cannot configure %s: %s", path, sqlite3_errmsg(s->db));
		return r;
	}
	if (v < known) {
		if (!migrate) {
			if (err && errsz)
				snprintf(err, errsz,
					 "database schema version %d is behind this binary (%d); run "
					 "`sandboxd migrate`",
					 v, known);
			return -ESTALE;
		}
		pthread_mutex_lock(&s->lock);
		r = store_migrate_locked(s, &s->opened_version, NULL, err, errsz);
		pthread_mutex_unlock(&s->lock);
	}
	return r;
}

/* Each kind of record's write function, for the batched writer. */
static const store_wwrite_fn writers[STORE_WK__COUNT] = {
    [STORE_WK_AUDIT] = store_audit_write,
    [STORE_WK_EGRESS] = store_egress_write,
};

int store_open(struct store **out, const char *path, bool migrate, char *err, size_t errsz)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, sqlite_config_once);
	struct store *s = store_new(path);
	int r;

	if (err && errsz)
		err[0] = '\0';
	r = open_conn(&s->db, path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, err, errsz);
	if (r)
		goto fail;
	r = open_schema(s, path, migrate, err, errsz);
	if (r)
		goto fail;
	/* A read-only connection for long reads, opened after the schema
	 * exists; in WAL mode its reads never block the writer. */
	r = open_conn(&s->rdb, path, SQLITE_OPEN_READONLY, err, errsz);
	if (r)
		goto fail;
	r = store_writer_start(s, writers);
	if (r) {
		if (err && errsz)
			snprintf(err, errsz, "cannot start the audit writer thread");
		goto fail;
	}
	*out = s;
	return 0;
fail:
	store_close(&s);
	return r;
}

void store_close(struct store **p)
{
	struct store *s;

	if (!p || !*p)
		return;
	s = *p;
	store_writer_stop(s);
	for (size_t i = 0; i < ST__COUNT; i++)
		sqlite3_finalize(s->stmts[i]);
	sqlite3_close(s->rdb);
	sqlite3_close(s->db);
	pthread_cond_destroy(&s->awake);
	pthread_cond_destroy(&s->adone);
	pthread_mutex_destroy(&s->alock);
	pthread_mutex_destroy(&s->hlock);
	pthread_mutex_destroy(&s->rlock);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->scache_mu);
	free(s->scache);
	for (int k = 0; k < STORE_WK__COUNT; k++)
		free(s->wq[k].q);
	free(s->path);
	free(s);
	*p = NULL;
}

/* A real write: rewrite the probe row in its own transaction. */
static void probe_write(struct store *s)
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	r = store_tx_begin(s);
	if (r) {
		store_note_write(s, r);
	} else {
		st = store_prep(s, ST_PROBE, "INSERT OR REPLACE INTO store_probe (id, at) VALUES (1, ?1)",
				Q_ARGS(Q_INT(now_ms())));
		r = st ? store_step_done(st) : -SBX_E_STORE;
		if (r)
			store_note_write(s, r);
		store_tx_end(s, r);
	}
	pthread_mutex_unlock(&s->lock);
}

int store_check_writable(struct store *s, char *why, size_t whysz)
{
	int64_t now = mono_ms();
	bool fresh;
	int r;

	pthread_mutex_lock(&s->hlock);
	fresh = s->health_mono_ms && now - s->health_mono_ms < STORE_PROBE_MS;
	pthread_mutex_unlock(&s->hlock);
	if (!fresh)
		probe_write(s);
	pthread_mutex_lock(&s->hlock);
	r = s->health_mono_ms ? s->health_rc : -SBX_E_STORE;
	if (why && whysz)
		snprintf(why, whysz, "%s", r == 0 ? "writes succeed" : s->health_err);
	pthread_mutex_unlock(&s->hlock);
	return r;
}

int store_recover(struct store *s, int *lost_execs, int *failed_transfers)
{
	static const char *const sql[] = {
	    "UPDATE execs SET state = 'lost', finished_at = ?1 WHERE state IN ('running', "
	    "'pending_approval')",
	    ("UPDATE transfers SET state = 'failed', error = 'interrupted by a restart', finished_at = ?1 "
	     "WHERE state = 'active'"),
	    "UPDATE transfers SET state = 'expired' WHERE state = 'minted' AND expires_at <= ?1",
	};
	int counts[3] = {0, 0, 0};
	int64_t now = now_ms();
	sqlite3_stmt *st = NULL;
	int r;

	pthread_mutex_lock(&s->lock);
	r = store_tx_begin(s);
	if (r)
		goto out;
	for (size_t i = 0; i < 3; i++) {
		/* Run once at start-up: not worth a cache slot. */
		if (sqlite3_prepare_v2(s->db, sql[i], -1, &st, NULL) != SQLITE_OK) {
			r = -SBX_E_STORE;
			goto out;
		}
		sqlite3_bind_int64(st, 1, now);
		r = store_step_done(st);
		sqlite3_finalize(st);
		st = NULL;
		if (r)
			goto out;
		counts[i] = sqlite3_changes(s->db);
	}
out:
	r = store_tx_end(s, r);
	pthread_mutex_unlock(&s->lock);
	if (!r) {
		if (lost_execs)
			*lost_execs = counts[0];
		if (failed_transfers)
			*failed_transfers = counts[1];
	}
	return r;
}
