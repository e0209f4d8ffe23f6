/* Sessions: (tenant, key) -> directory segment. Keys are blobs and are
 * always bound as blobs, so any byte compares exactly. */
#include "store/store_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/xmalloc.h"

/* last_used_at is written at most this often per session. */
#define TOUCH_INTERVAL_MS 60000
/* A segment function that collides this often is broken. */
#define MAX_SALT 1024

/* SELECT segment, last_used_at for (tenant, key). 1 found, 0 not, <0 error. */
static int session_lookup(struct store *s, const char *tenant, const char *key, size_t key_len,
			  char segment[64], int64_t *last_used)
{
	sqlite3_stmt *st = store_stmt(
	    s, ST_SESSION_GET, "SELECT segment, last_used_at FROM sessions WHERE tenant = ?1 AND key = ?2");
	int r;

	if (!st)
		return -SBX_E_STORE;
	store_bind_text(st, 1, tenant);
	store_bind_blob(st, 2, key, key_len);
	r = sqlite3_step(st);
	if (r == SQLITE_ROW) {
		store_col_copy(st, 0, segment, 64);
		*last_used = sqlite3_column_int64(st, 1);
		r = 1;
	} else {
		r = r == SQLITE_DONE ? 0 : store_rc(r);
	}
	sqlite3_reset(st);
	return r;
}

static int session_touch(struct store *s, const char *tenant, const char *key, size_t key_len, int64_t now)
{
	sqlite3_stmt *st = store_stmt(s, ST_SESSION_TOUCH,
				      "UPDATE sessions SET last_used_at = ?3 WHERE tenant = ?1 AND key = ?2 "
				      "AND last_used_at < ?3");

	if (!st)
		return -SBX_E_STORE;
	store_bind_text(st, 1, tenant);
	store_bind_blob(st, 2, key, key_len);
	sqlite3_bind_int64(st, 3, now);
	return store_step_done(st);
}

/* 1 when another key of the tenant holds segment. */
static int segment_taken(struct store *s, const char *tenant, const char *segment)
{
	sqlite3_stmt *st = store_stmt(s, ST_SESSION_SEGMENT_TAKEN,
				      "SELECT 1 FROM sessions WHERE tenant = ?1 AND segment = ?2");
	int r;

	if (!st)
		return -SBX_E_STORE;
	store_bind_text(st, 1, tenant);
	store_bind_text(st, 2, segment);
	r = sqlite3_step(st);
	r = r == SQLITE_ROW ? 1 : r == SQLITE_DONE ? 0 : store_rc(r);
	sqlite3_reset(st);
	return r;
}

static int session_insert(struct store *s, const char *tenant, const char *key, size_t key_len,
			  store_segment_fn seg, int64_t now, char segment[64])
{
	char cand[64];
	sqlite3_stmt *st;
	unsigned salt;
	int r = 0;

	for (salt = 0; salt < MAX_SALT; salt++) {
		memset(cand, 0, sizeof cand);
		seg(key, key_len, salt, cand);
		cand[63] = '\0';
		r = segment_taken(s, tenant, cand);
		if (r <= 0)
			break;
	}
	if (r < 0)
		return r;
	if (salt == MAX_SALT)
		return -SBX_E_STORE;

	st = store_stmt(s, ST_SESSION_INSERT,
			"INSERT INTO sessions (tenant, key, segment, created_at, last_used_at) "
			"VALUES (?1, ?2, ?3, ?4, ?4)");
	if (!st)
		return -SBX_E_STORE;
	store_bind_text(st, 1, tenant);
	store_bind_blob(st, 2, key, key_len);
	store_bind_text(st, 3, cand);
	sqlite3_bind_int64(st, 4, now);
	r = store_step_done(st);
	if (!r)
		memcpy(segment, cand, 64);
	return r;
}

int store_session_get_or_create(struct store *s, const char *tenant, const char *key, size_t key_len,
				store_segment_fn seg, int64_t now, char segment[64], bool *created)
{
	char found[64] = {0};
	int64_t last_used = 0;
	bool made = false;
	int r;

	pthread_mutex_lock(&s->lock);
	/* The hot path: the session exists and was used within the minute,
	 * so one cached SELECT and no write transaction. */
	r = session_lookup(s, tenant, key, key_len, found, &last_used);
	if (r < 0)
		goto out;
	if (r == 1 && now - last_used < TOUCH_INTERVAL_MS) {
		r = 0;
		goto done;
	}

	r = store_tx_begin(s);
	if (r)
		goto out;
	/* Look again inside the write transaction: another process (the
	 * CLI) may have changed the row in between. */
	r = session_lookup(s, tenant, key, key_len, found, &last_used);
	if (r < 0)
		goto out;
	if (r == 1) {
		r = now - last_used >= TOUCH_INTERVAL_MS ? session_touch(s, tenant, key, key_len, now) : 0;
	} else {
		r = session_insert(s, tenant, key, key_len, seg, now, found);
		made = true;
	}
	if (r)
		goto out;
	r = store_tx_commit(s);
	if (r)
		goto out;
done:
	memcpy(segment, found, 64);
	if (created)
		*created = made;
out:
	if (r)
		store_tx_rollback(s);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_session_find(struct store *s, const char *tenant, const char *key, size_t key_len, char segment[64])
{
	char found[64] = {0};
	int64_t last_used = 0;
	int r;

	pthread_mutex_lock(&s->lock);
	r = session_lookup(s, tenant, key, key_len, found, &last_used);
	pthread_mutex_unlock(&s->lock);
	if (r < 0)
		return r;
	if (r == 0)
		return -ENOENT;
	memcpy(segment, found, 64);
	return 0;
}

int store_session_list(struct store *s, const char *tenant, size_t limit, struct store_session **out,
		       size_t *n)
{
	struct store_session *v = NULL;
	size_t cnt = 0, cap = 0;
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_stmt(s, ST_SESSION_LIST,
			"SELECT key, segment, created_at, last_used_at FROM sessions WHERE tenant = ?1 "
			"ORDER BY last_used_at DESC, created_at DESC LIMIT ?2");
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	store_bind_text(st, 1, tenant);
	sqlite3_bind_int64(st, 2, limit ? (int64_t)limit : -1);
	while ((r = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_session *e;

		if (cnt == cap) {
			cap = cap ? cap * 2 : 8;
			v = xrealloc(v, cap * sizeof *v);
		}
		e = &v[cnt++];
		memset(e, 0, sizeof *e);
		e->key = store_col_blobdup(st, 0, &e->key_len);
		store_col_copy(st, 1, e->segment, sizeof e->segment);
		e->created_at = sqlite3_column_int64(st, 2);
		e->last_used_at = sqlite3_column_int64(st, 3);
	}
	r = r == SQLITE_DONE ? 0 : store_rc(r);
	sqlite3_reset(st);
out:
	pthread_mutex_unlock(&s->lock);
	if (r) {
		store_sessions_free(v, cnt);
		return r;
	}
	*out = v;
	*n = cnt;
	return 0;
}

int store_session_delete(struct store *s, const char *tenant, const char *key, size_t key_len,
			 char segment[64])
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_stmt(s, ST_SESSION_DELETE,
			"DELETE FROM sessions WHERE tenant = ?1 AND key = ?2 RETURNING segment");
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	store_bind_text(st, 1, tenant);
	store_bind_blob(st, 2, key, key_len);
	r = sqlite3_step(st);
	if (r == SQLITE_ROW) {
		char seg[64];

		store_col_copy(st, 0, seg, sizeof seg);
		/* Step to the end: RETURNING commits when the statement completes. */
		r = sqlite3_step(st);
		r = r == SQLITE_DONE ? 0 : store_rc(r);
		if (!r && segment)
			memcpy(segment, seg, sizeof seg);
	} else {
		r = r == SQLITE_DONE ? -ENOENT : store_rc(r);
	}
	sqlite3_reset(st);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

void store_sessions_free(struct store_session *v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i].key);
	free(v);
}
