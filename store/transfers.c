/* Transfers: single-use upload/download tokens, stored by SHA-256 only. */
#include "store/store_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/xmalloc.h"

#define TRANSFER_COLS                                                                                        \
	"token_hash, tenant, session, path, direction, state, bytes, sha256, error, created_at, "            \
	"expires_at, "                                                                                       \
	"started_at, finished_at"

static void transfer_from_row(sqlite3_stmt *st, struct store_transfer *t)
{
	const void *h;

	memset(t, 0, sizeof *t);
	h = sqlite3_column_blob(st, 0);
	if (h && sqlite3_column_bytes(st, 0) == (int)sizeof t->token_hash)
		memcpy(t->token_hash, h, sizeof t->token_hash);
	store_col_copy(st, 1, t->tenant, sizeof t->tenant);
	t->session = store_col_blobdup(st, 2, &t->session_len);
	t->path = store_col_strdup(st, 3);
	store_col_copy(st, 4, t->direction, sizeof t->direction);
	store_col_copy(st, 5, t->state, sizeof t->state);
	t->bytes = sqlite3_column_int64(st, 6);
	store_col_copy(st, 7, t->sha256, sizeof t->sha256);
	t->error = store_col_strdup(st, 8);
	t->created_at = sqlite3_column_int64(st, 9);
	t->expires_at = sqlite3_column_int64(st, 10);
	t->started_at = sqlite3_column_int64(st, 11);
	t->finished_at = sqlite3_column_int64(st, 12);
}

int store_transfer_mint(struct store *s, const struct store_transfer *t)
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_stmt(
	    s, ST_TRANSFER_INSERT,
	    "INSERT INTO transfers (token_hash, tenant, session, path, direction, state, created_at, "
	    "expires_at) VALUES (?1, ?2, ?3, ?4, ?5, 'minted', ?6, ?7)");
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	store_bind_blob(st, 1, t->token_hash, sizeof t->token_hash);
	store_bind_text(st, 2, t->tenant);
	store_bind_blob(st, 3, t->session ? t->session : "", t->session_len);
	store_bind_text(st, 4, t->path);
	store_bind_text(st, 5, t->direction);
	sqlite3_bind_int64(st, 6, t->created_at);
	sqlite3_bind_int64(st, 7, t->expires_at);
	r = store_step_done(st);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Why the claim UPDATE matched nothing. s->lock held. */
static int claim_refused(struct store *s, const unsigned char hash[32], int64_t now)
{
	sqlite3_stmt *st =
	    store_stmt(s, ST_TRANSFER_STATE, "SELECT state, expires_at FROM transfers WHERE token_hash = ?1");
	char state[8] = "";
	int64_t expires = 0;
	int r;

	if (!st)
		return -SBX_E_STORE;
	store_bind_blob(st, 1, hash, 32);
	r = sqlite3_step(st);
	if (r == SQLITE_ROW) {
		store_col_copy(st, 0, state, sizeof state);
		expires = sqlite3_column_int64(st, 1);
		r = 0;
	} else {
		r = r == SQLITE_DONE ? -ENOENT : store_rc(r);
	}
	sqlite3_reset(st);
	if (r)
		return r;
	if (strcmp(state, "expired") == 0)
		return -SBX_E_TOKEN_EXPIRED;
	if (strcmp(state, "minted") != 0 || expires > now)
		return -SBX_E_TOKEN_USED;

	/* Minted but past its expiry: record that, guarded so a concurrent
	 * claim from another process cannot be overwritten. */
	st = store_stmt(s, ST_TRANSFER_EXPIRE,
			"UPDATE transfers SET state = 'expired' WHERE token_hash = ?1 AND state = 'minted' "
			"AND expires_at <= ?2");
	if (!st)
		return -SBX_E_STORE;
	store_bind_blob(st, 1, hash, 32);
	sqlite3_bind_int64(st, 2, now);
	r = store_step_done(st);
	return r ? r : -SBX_E_TOKEN_EXPIRED;
}

int store_transfer_claim(struct store *s, const unsigned char hash[32], int64_t now,
			 struct store_transfer *out)
{
	struct store_transfer t;
	sqlite3_stmt *st;
	bool won = false;
	int r;

	pthread_mutex_lock(&s->lock);
	/* The one atomic step: whoever's UPDATE matches the 'minted' row wins,
	 * across threads and across connections. */
	st = store_stmt(
	    s, ST_TRANSFER_CLAIM,
	    "UPDATE transfers SET state = 'active', started_at = ?2 "
	    "WHERE token_hash = ?1 AND state = 'minted' AND expires_at > ?2 RETURNING " TRANSFER_COLS);
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	store_bind_blob(st, 1, hash, 32);
	sqlite3_bind_int64(st, 2, now);
	r = sqlite3_step(st);
	if (r == SQLITE_ROW) {
		transfer_from_row(st, &t);
		won = true;
		r = sqlite3_step(st);
	}
	r = r == SQLITE_DONE ? 0 : store_rc(r);
	sqlite3_reset(st);
	if (r)
		goto out;
	if (!won)
		r = claim_refused(s, hash, now);
out:
	pthread_mutex_unlock(&s->lock);
	if (won) {
		if (r || !out)
			store_transfer_clear(&t);
		else
			*out = t;
	}
	return r;
}

int store_transfer_finish(struct store *s, const unsigned char hash[32], const char *state, int64_t bytes,
			  const char *sha256, const char *error, int64_t now)
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_stmt(
	    s, ST_TRANSFER_FINISH,
	    "UPDATE transfers SET state = ?2, bytes = ?3, sha256 = ?4, error = ?5, finished_at = ?6 "
	    "WHERE token_hash = ?1");
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	store_bind_blob(st, 1, hash, 32);
	store_bind_text(st, 2, state);
	sqlite3_bind_int64(st, 3, bytes);
	store_bind_text(st, 4, sha256 && sha256[0] ? sha256 : NULL);
	store_bind_text(st, 5, error);
	sqlite3_bind_int64(st, 6, now);
	r = store_step_one(s, st);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_transfer_get(struct store *s, const unsigned char hash[32], struct store_transfer *out)
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	st = store_stmt(s, ST_TRANSFER_GET, "SELECT " TRANSFER_COLS " FROM transfers WHERE token_hash = ?1");
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	store_bind_blob(st, 1, hash, 32);
	r = sqlite3_step(st);
	if (r == SQLITE_ROW) {
		transfer_from_row(st, out);
		r = 0;
	} else {
		r = r == SQLITE_DONE ? -ENOENT : store_rc(r);
	}
	sqlite3_reset(st);
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

void store_transfer_clear(struct store_transfer *t)
{
	if (!t)
		return;
	free(t->session);
	free(t->path);
	free(t->error);
	memset(t, 0, sizeof *t);
}
