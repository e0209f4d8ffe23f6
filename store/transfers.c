/* Transfers: single-use upload/download tokens, stored by SHA-256 only. */
#include "store/store.h"
#include "store/db.h"

#include <stdlib.h>
#include <string.h>

#include "common/errors.h"

#define TRANSFER_COLS                                                                                        \
	"token_hash, tenant, session, path, direction, state, bytes, sha256, error, created_at, "            \
	"expires_at, "                                                                                       \
	"started_at, finished_at"

static void transfer_from_row(sqlite3_stmt *st, void *dst)
{
	struct store_transfer *t = dst;
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

static void transfer_clear(void *t)
{
	store_transfer_clear(t);
}

static const struct store_row transfer_row = {sizeof(struct store_transfer), transfer_from_row,
					      transfer_clear};

int store_transfer_mint(struct store *s, const struct store_transfer *t)
{
	return store_run(
	    s, ST_TRANSFER_INSERT,
	    "INSERT INTO transfers (token_hash, tenant, session, path, direction, state, created_at, "
	    "expires_at) VALUES (?1, ?2, ?3, ?4, ?5, 'minted', ?6, ?7)",
	    Q_ARGS(Q_BLOB(t->token_hash, sizeof t->token_hash), Q_TEXT(t->tenant),
		   Q_BLOB(t->session ? t->session : "", t->session_len), Q_TEXT(t->path),
		   Q_TEXT(t->direction), Q_INT(t->created_at), Q_INT(t->expires_at)));
}

struct token_state {
	char state[8];
	int64_t expires_at;
};

static void token_state_from_row(sqlite3_stmt *st, void *dst)
{
	struct token_state *t = dst;

	store_col_copy(st, 0, t->state, sizeof t->state);
	t->expires_at = sqlite3_column_int64(st, 1);
}

static const struct store_row token_state_row = {sizeof(struct token_state), token_state_from_row, NULL};

/* Why the claim UPDATE matched nothing. s->lock held. */
static int claim_refused(struct store *s, const unsigned char hash[32], int64_t now)
{
	struct token_state t = {"", 0};
	sqlite3_stmt *st;
	int r;

	st = store_prep(s, ST_TRANSFER_STATE, "SELECT state, expires_at FROM transfers WHERE token_hash = ?1",
			Q_ARGS(Q_BLOB(hash, 32)));
	r = st ? store_step_row(st, &token_state_row, &t) : -SBX_E_STORE;
	if (r)
		return r;
	if (strcmp(t.state, "expired") == 0)
		return -SBX_E_TOKEN_EXPIRED;
	if (strcmp(t.state, "minted") != 0 || t.expires_at > now)
		return -SBX_E_TOKEN_USED;

	/* Minted but past its expiry: record that, guarded so a concurrent
	 * claim from another process cannot be overwritten. */
	st = store_prep(s, ST_TRANSFER_EXPIRE,
			"UPDATE transfers SET state = 'expired' WHERE token_hash = ?1 AND state = 'minted' "
			"AND expires_at <= ?2",
			Q_ARGS(Q_BLOB(hash, 32), Q_INT(now)));
	r = st ? store_step_done(st) : -SBX_E_STORE;
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
	st = store_prep(
	    s, ST_TRANSFER_CLAIM,
	    "UPDATE transfers SET state = 'active', started_at = ?2 "
	    "WHERE token_hash = ?1 AND state = 'minted' AND expires_at > ?2 RETURNING " TRANSFER_COLS,
	    Q_ARGS(Q_BLOB(hash, 32), Q_INT(now)));
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
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
	return store_run_one(
	    s, ST_TRANSFER_FINISH,
	    "UPDATE transfers SET state = ?2, bytes = ?3, sha256 = ?4, error = ?5, finished_at = ?6 "
	    "WHERE token_hash = ?1",
	    Q_ARGS(Q_BLOB(hash, 32), Q_TEXT(state), Q_INT(bytes), Q_TEXT(sha256 && sha256[0] ? sha256 : NULL),
		   Q_TEXT(error), Q_INT(now)));
}

int store_transfer_get(struct store *s, const unsigned char hash[32], struct store_transfer *out)
{
	return store_get(s, ST_TRANSFER_GET, "SELECT " TRANSFER_COLS " FROM transfers WHERE token_hash = ?1",
			 &transfer_row, out, Q_ARGS(Q_BLOB(hash, 32)));
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
