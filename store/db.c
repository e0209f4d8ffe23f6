/* The ground of store/: the store struct's connections, the statement
 * cache, binding and column helpers, transactions, the write-health note
 * and the read connection. Calls only SQLite and common/. */
#include "store/db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"

int store_rc(int rc)
{
	switch (rc) {
	case SQLITE_OK:
	case SQLITE_DONE:
	case SQLITE_ROW:
		return 0;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_CONSTRAINT_PRIMARYKEY:
	case SQLITE_CONSTRAINT_UNIQUE:
		return -EEXIST;
	case SQLITE_CONSTRAINT_FOREIGNKEY:
		/* The referenced tenant does not exist (or went away). */
		return -ENOENT;
	case SQLITE_CONSTRAINT_CHECK:
	case SQLITE_CONSTRAINT_NOTNULL:
		/* A value outside the schema's domain: a caller bug or bad input. */
		return -EINVAL;
	default:
		return -SBX_E_STORE;
	}
}

sqlite3_stmt *store_stmt(struct store *s, enum store_stmt_id id, const char *sql)
{
	sqlite3_stmt *st = s->stmts[id];

	if (!st) {
		if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
			sqlite3_finalize(st);
			return NULL;
		}
		s->stmts[id] = st;
		return st;
	}
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return st;
}

int store_step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	if (rc == SQLITE_DONE || rc == SQLITE_ROW)
		rc = SQLITE_OK;
	sqlite3_reset(st);
	return store_rc(rc);
}

int store_step_one(struct store *s, sqlite3_stmt *st)
{
	int r = store_step_done(st);

	if (!r && sqlite3_changes(s->db) == 0)
		r = -ENOENT;
	return r;
}

static int run_cached(struct store *s, enum store_stmt_id id, const char *sql)
{
	sqlite3_stmt *st = store_stmt(s, id, sql);

	if (!st)
		return -SBX_E_STORE;
	return store_step_done(st);
}

int store_tx_begin(struct store *s)
{
	return run_cached(s, ST_BEGIN, "BEGIN IMMEDIATE");
}

int store_tx_commit(struct store *s)
{
	int r = run_cached(s, ST_COMMIT, "COMMIT");

	store_note_write(s, r);
	if (r)
		store_tx_rollback(s);
	return r;
}

void store_tx_rollback(struct store *s)
{
	if (!sqlite3_get_autocommit(s->db))
		run_cached(s, ST_ROLLBACK, "ROLLBACK");
}

int store_tx_end(struct store *s, int r)
{
	if (r) {
		store_tx_rollback(s);
		return r;
	}
	return store_tx_commit(s);
}

int store_bind_blob(sqlite3_stmt *st, int i, const void *p, size_t n)
{
	if (!p)
		return sqlite3_bind_null(st, i);
	if (n == 0)
		return sqlite3_bind_zeroblob(st, i, 0);
	return sqlite3_bind_blob64(st, i, p, n, SQLITE_TRANSIENT);
}

int store_bind_text(sqlite3_stmt *st, int i, const char *str)
{
	if (!str)
		return sqlite3_bind_null(st, i);
	return sqlite3_bind_text(st, i, str, -1, SQLITE_TRANSIENT);
}

sqlite3_stmt *store_prep(struct store *s, enum store_stmt_id id, const char *sql, const struct store_val *v,
			 size_t n)
{
	sqlite3_stmt *st = store_stmt(s, id, sql);

	if (!st)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		int at = (int)i + 1;

		switch (v[i].type) {
		case STORE_NULL:
			break; /* store_stmt cleared the bindings */
		case STORE_TEXT:
			store_bind_text(st, at, v[i].text);
			break;
		case STORE_BLOB:
			store_bind_blob(st, at, v[i].blob, v[i].len);
			break;
		case STORE_INT:
			sqlite3_bind_int64(st, at, v[i].i);
			break;
		}
	}
	return st;
}

int store_step_row(sqlite3_stmt *st, const struct store_row *rt, void *dst)
{
	int r = sqlite3_step(st);

	if (r == SQLITE_ROW) {
		rt->fill(st, dst);
		r = 0;
	} else {
		r = r == SQLITE_DONE ? -ENOENT : store_rc(r);
	}
	sqlite3_reset(st);
	return r;
}

int store_run(struct store *s, enum store_stmt_id id, const char *sql, const struct store_val *v, size_t n)
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_prep(s, id, sql, v, n);
	r = st ? store_step_done(st) : -SBX_E_STORE;
	store_note_write(s, r);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_run_one(struct store *s, enum store_stmt_id id, const char *sql, const struct store_val *v,
		  size_t n)
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_prep(s, id, sql, v, n);
	r = st ? store_step_one(s, st) : -SBX_E_STORE;
	store_note_write(s, r == -ENOENT ? 0 : r);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_get(struct store *s, enum store_stmt_id id, const char *sql, const struct store_row *rt, void *dst,
	      const struct store_val *v, size_t n)
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_prep(s, id, sql, v, n);
	r = st ? store_step_row(st, rt, dst) : -SBX_E_STORE;
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_list(struct store *s, enum store_stmt_id id, const char *sql, const struct store_row *rt,
	       void **out, size_t *nout, const struct store_val *v, size_t n)
{
	char *rows = NULL;
	size_t cnt = 0, cap = 0;
	sqlite3_stmt *st;
	int r = -SBX_E_STORE;

	pthread_mutex_lock(&s->lock);
	st = store_prep(s, id, sql, v, n);
	if (st) {
		while ((r = sqlite3_step(st)) == SQLITE_ROW) {
			if (cnt == cap) {
				cap = cap ? cap * 2 : 8;
				rows = xrealloc(rows, cap * rt->size);
			}
			rt->fill(st, rows + cnt++ * rt->size);
		}
		r = r == SQLITE_DONE ? 0 : store_rc(r);
		sqlite3_reset(st);
	}
	pthread_mutex_unlock(&s->lock);
	if (r) {
		for (size_t i = 0; i < cnt; i++)
			rt->clear(rows + i * rt->size);
		free(rows);
		return r;
	}
	*out = rows;
	*nout = cnt;
	return 0;
}

char *store_col_strdup(sqlite3_stmt *st, int i)
{
	const unsigned char *t;

	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		return NULL;
	t = sqlite3_column_text(st, i);
	return xstrndup(t ? (const char *)t : "", (size_t)sqlite3_column_bytes(st, i));
}

char *store_col_blobdup(sqlite3_stmt *st, int i, size_t *len)
{
	const void *b = sqlite3_column_blob(st, i);
	size_t n = (size_t)sqlite3_column_bytes(st, i);
	char *p = xmalloc(n + 1);

	if (n)
		memcpy(p, b, n);
	p[n] = '\0';
	if (len)
		*len = n;
	return p;
}

void store_col_copy(sqlite3_stmt *st, int i, char *dst, size_t dstsz)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	size_t n = (size_t)sqlite3_column_bytes(st, i);

	if (!dstsz)
		return;
	if (!t)
		n = 0;
	if (n >= dstsz)
		n = dstsz - 1;
	if (n)
		memcpy(dst, t, n);
	dst[n] = '\0';
}

static bool disk_failure(int code)
{
	switch (code & 0xff) {
	case SQLITE_FULL:
	case SQLITE_IOERR:
	case SQLITE_READONLY:
	case SQLITE_CANTOPEN:
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return true;
	default:
		return false;
	}
}

void store_note_write(struct store *s, int r)
{
	int code = r ? sqlite3_extended_errcode(s->db) : SQLITE_OK;

	if (r && !disk_failure(code))
		return;
	pthread_mutex_lock(&s->hlock);
	s->health_mono_ms = mono_ms();
	s->health_rc = r ? store_rc(code) : 0;
	if (r)
		snprintf(s->health_err, sizeof s->health_err, "%s", sqlite3_errmsg(s->db));
	pthread_mutex_unlock(&s->hlock);
}

int store_read(struct store *s, int (*fn)(sqlite3 *db, void *arg), void *arg)
{
	sqlite3 *tmp = NULL;
	int r;

	/* The shared read connection when free; otherwise (another query, or
	 * a callback querying again) a private one, so readers never wait on
	 * readers. */
	if (pthread_mutex_trylock(&s->rlock) == 0) {
		r = fn(s->rdb, arg);
		pthread_mutex_unlock(&s->rlock);
		return r;
	}
	if (sqlite3_open_v2(s->path, &tmp, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		r = -SBX_E_STORE;
		goto out;
	}
	sqlite3_extended_result_codes(tmp, 1);
	sqlite3_busy_timeout(tmp, 5000);
	r = fn(tmp, arg);
out:
	sqlite3_close(tmp);
	return r;
}
