/* Execs: one row per command run, keyed by (tenant, client-chosen id). */
#include "store/store_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/xmalloc.h"

#define EXEC_COLS                                                                                            \
	"tenant, id, session, command, cwd, request_hash, state, exit_code, result, started_at, finished_at"

static void exec_from_row(sqlite3_stmt *st, struct store_exec *e)
{
	memset(e, 0, sizeof *e);
	store_col_copy(st, 0, e->tenant, sizeof e->tenant);
	store_col_copy(st, 1, e->id, sizeof e->id);
	e->session = store_col_blobdup(st, 2, &e->session_len);
	e->command = store_col_strdup(st, 3);
	e->cwd = store_col_strdup(st, 4);
	e->request_hash = store_col_strdup(st, 5);
	store_col_copy(st, 6, e->state, sizeof e->state);
	if (sqlite3_column_type(st, 7) != SQLITE_NULL) {
		e->has_exit_code = true;
		e->exit_code = sqlite3_column_int(st, 7);
	}
	e->result = store_col_strdup(st, 8);
	e->started_at = sqlite3_column_int64(st, 9);
	e->finished_at = sqlite3_column_int64(st, 10);
}

int store_exec_begin(struct store *s, const struct store_exec *e)
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_stmt(
	    s, ST_EXEC_INSERT,
	    "INSERT INTO execs (tenant, id, session, command, cwd, request_hash, state, started_at) "
	    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7)");
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	store_bind_text(st, 1, e->tenant);
	store_bind_text(st, 2, e->id);
	store_bind_blob(st, 3, e->session ? e->session : "", e->session_len);
	store_bind_text(st, 4, e->command);
	store_bind_text(st, 5, e->cwd);
	store_bind_text(st, 6, e->request_hash);
	sqlite3_bind_int64(st, 7, e->started_at);
	r = store_step_done(st);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* A negative exit_code (killed, never started) is stored as NULL. */
int store_exec_finish(struct store *s, const char *tenant, const char *id, const char *state, int exit_code,
		      const char *result, int64_t finished_at)
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_stmt(s, ST_EXEC_FINISH,
			"UPDATE execs SET state = ?3, exit_code = ?4, result = ?5, finished_at = ?6 "
			"WHERE tenant = ?1 AND id = ?2");
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	store_bind_text(st, 1, tenant);
	store_bind_text(st, 2, id);
	store_bind_text(st, 3, state);
	if (exit_code >= 0)
		sqlite3_bind_int(st, 4, exit_code);
	store_bind_text(st, 5, result);
	sqlite3_bind_int64(st, 6, finished_at);
	r = store_step_one(s, st);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_exec_delete(struct store *s, const char *tenant, const char *id)
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_stmt(s, ST_EXEC_DELETE, "DELETE FROM execs WHERE tenant = ?1 AND id = ?2 AND state = 'running'");
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	store_bind_text(st, 1, tenant);
	store_bind_text(st, 2, id);
	r = store_step_one(s, st);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_exec_get(struct store *s, const char *tenant, const char *id, struct store_exec *out)
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_stmt(s, ST_EXEC_GET, "SELECT " EXEC_COLS " FROM execs WHERE tenant = ?1 AND id = ?2");
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	store_bind_text(st, 1, tenant);
	store_bind_text(st, 2, id);
	r = sqlite3_step(st);
	if (r == SQLITE_ROW) {
		exec_from_row(st, out);
		r = 0;
	} else {
		r = r == SQLITE_DONE ? -ENOENT : store_rc(r);
	}
	sqlite3_reset(st);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_exec_list(struct store *s, const char *tenant, const char *state, const char *session,
		    size_t session_len, size_t limit, bool with_result, struct store_exec **out, size_t *n)
{
	struct store_exec *v = NULL;
	size_t cnt = 0, cap = 0;
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	/* One statement for every filter combination: NULL parameters match
	 * all, and the (tenant, started_at DESC) index serves the order. */
	st = store_stmt(s, ST_EXEC_LIST,
			"SELECT tenant, id, session, command, cwd, request_hash, state, exit_code, "
			"CASE WHEN ?5 THEN result END, started_at, finished_at FROM execs "
			"WHERE tenant = ?1 AND (?2 IS NULL OR state = ?2) AND (?3 IS NULL OR session = ?3) "
			"ORDER BY started_at DESC LIMIT ?4");
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	store_bind_text(st, 1, tenant);
	store_bind_text(st, 2, state);
	store_bind_blob(st, 3, session, session_len);
	sqlite3_bind_int64(st, 4, limit ? (int64_t)limit : -1);
	sqlite3_bind_int(st, 5, with_result ? 1 : 0);
	while ((r = sqlite3_step(st)) == SQLITE_ROW) {
		if (cnt == cap) {
			cap = cap ? cap * 2 : 8;
			v = xrealloc(v, cap * sizeof *v);
		}
		exec_from_row(st, &v[cnt++]);
	}
	r = r == SQLITE_DONE ? 0 : store_rc(r);
	sqlite3_reset(st);
out:
	pthread_mutex_unlock(&s->lock);
	if (r) {
		store_execs_free(v, cnt);
		return r;
	}
	*out = v;
	*n = cnt;
	return 0;
}

void store_exec_clear(struct store_exec *e)
{
	if (!e)
		return;
	free(e->session);
	free(e->command);
	free(e->cwd);
	free(e->request_hash);
	free(e->result);
	memset(e, 0, sizeof *e);
}

void store_execs_free(struct store_exec *v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		store_exec_clear(&v[i]);
	free(v);
}
