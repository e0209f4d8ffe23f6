/* Sessions: (tenant, key) -> directory segment. Keys are blobs and are
 * always bound as blobs, so any byte compares exactly. */
#include "store/store.h"
#include "store/db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/xmalloc.h"

/* last_used_at is written at most this often per session. */
#define TOUCH_INTERVAL_MS 60000
/* A segment function that collides this often is broken. */
#define MAX_SALT 1024

/* ---- hot-path cache: (tenant, key) -> segment ----
 *
 * Every request that names a session asked SQLite for its segment: a
 * cached SELECT, but under the write connection's lock (held by the audit
 * writer for a whole batch) and with the WAL read-lock fcntl pair. The
 * cache answers exactly what that hot path answered: a row seen within
 * SCACHE_TTL_MS whose last_used_at is under TOUCH_INTERVAL_MS old. Deletes
 * through this process drop the entry (under s->lock, so no lookup can
 * put it back from a stale read); a change by another process (a tenant
 * removed with the CLI cascades to its sessions) is seen within
 * SCACHE_TTL_MS, well inside the tenant cache's own 5 s. */
#define SCACHE_SLOTS 128 /* direct-mapped; ~75 KiB per store once used */
#define SCACHE_TTL_MS 1000
#define SCACHE_KEY_MAX 512

struct scache_ent {
	bool used;
	uint64_t hash;
	int64_t cached_at, last_used;
	size_t key_len;
	char tenant[64];
	char segment[64];
	char key[SCACHE_KEY_MAX];
};

struct scache {
	struct scache_ent ent[SCACHE_SLOTS];
};

static uint64_t scache_hash(const char *tenant, const char *key, size_t key_len)
{
	uint64_t h = 1469598103934665603ULL;

	for (const char *p = tenant; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	h = (h ^ 0xff) * 1099511628211ULL;
	for (size_t i = 0; i < key_len; i++)
		h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
	return h;
}

static bool scache_cacheable(const char *tenant, size_t key_len)
{
	return strlen(tenant) < sizeof(((struct scache_ent *)0)->tenant) && key_len <= SCACHE_KEY_MAX;
}

static bool ent_is(const struct scache_ent *e, uint64_t h, const char *tenant, const char *key,
		   size_t key_len)
{
	return e->used && e->hash == h && e->key_len == key_len && strcmp(e->tenant, tenant) == 0 &&
	       memcmp(e->key, key, key_len) == 0;
}

/* 1 and segment filled on a hit the database would have answered alike. */
static int scache_get(struct store *s, const char *tenant, const char *key, size_t key_len, int64_t now,
		      char segment[64])
{
	int hit = 0;

	if (!scache_cacheable(tenant, key_len))
		return 0;
	uint64_t h = scache_hash(tenant, key, key_len);
	pthread_mutex_lock(&s->scache_mu);
	if (s->scache) {
		struct scache_ent *e = &s->scache->ent[h % SCACHE_SLOTS];

		if (ent_is(e, h, tenant, key, key_len) && now - e->cached_at < SCACHE_TTL_MS &&
		    now >= e->cached_at && now - e->last_used < TOUCH_INTERVAL_MS) {
			memcpy(segment, e->segment, 64);
			hit = 1;
		}
	}
	pthread_mutex_unlock(&s->scache_mu);
	return hit;
}

/* Caller holds s->lock. */
static void scache_put(struct store *s, const char *tenant, const char *key, size_t key_len, int64_t now,
		       int64_t last_used, const char segment[64])
{
	if (!scache_cacheable(tenant, key_len))
		return;
	uint64_t h = scache_hash(tenant, key, key_len);
	pthread_mutex_lock(&s->scache_mu);
	if (!s->scache)
		s->scache = xcalloc(1, sizeof *s->scache);
	struct scache_ent *e = &s->scache->ent[h % SCACHE_SLOTS];
	e->used = true;
	e->hash = h;
	e->cached_at = now;
	e->last_used = last_used;
	e->key_len = key_len;
	snprintf(e->tenant, sizeof e->tenant, "%s", tenant);
	memcpy(e->key, key, key_len);
	memcpy(e->segment, segment, 64);
	pthread_mutex_unlock(&s->scache_mu);
}

/* Caller holds s->lock. */
static void scache_drop(struct store *s, const char *tenant, const char *key, size_t key_len)
{
	if (!scache_cacheable(tenant, key_len))
		return;
	uint64_t h = scache_hash(tenant, key, key_len);
	pthread_mutex_lock(&s->scache_mu);
	if (s->scache && ent_is(&s->scache->ent[h % SCACHE_SLOTS], h, tenant, key, key_len))
		s->scache->ent[h % SCACHE_SLOTS].used = false;
	pthread_mutex_unlock(&s->scache_mu);
}

/* SELECT segment, last_used_at for (tenant, key). 1 found, 0 not, <0 error. */
static int session_lookup(struct store *s, const char *tenant, const char *key, size_t key_len,
			  char segment[64], int64_t *last_used)
{
	sqlite3_stmt *st = store_prep(
	    s, ST_SESSION_GET, "SELECT segment, last_used_at FROM sessions WHERE tenant = ?1 AND key = ?2",
	    Q_ARGS(Q_TEXT(tenant), Q_BLOB(key, key_len)));
	int r;

	if (!st)
		return -SBX_E_STORE;
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
	sqlite3_stmt *st = store_prep(s, ST_SESSION_TOUCH,
				      "UPDATE sessions SET last_used_at = ?3 WHERE tenant = ?1 AND key = ?2 "
				      "AND last_used_at < ?3",
				      Q_ARGS(Q_TEXT(tenant), Q_BLOB(key, key_len), Q_INT(now)));

	return st ? store_step_done(st) : -SBX_E_STORE;
}

/* 1 when another key of the tenant holds segment. */
static int segment_taken(struct store *s, const char *tenant, const char *segment)
{
	sqlite3_stmt *st = store_prep(s, ST_SESSION_SEGMENT_TAKEN,
				      "SELECT 1 FROM sessions WHERE tenant = ?1 AND segment = ?2",
				      Q_ARGS(Q_TEXT(tenant), Q_TEXT(segment)));
	int r;

	if (!st)
		return -SBX_E_STORE;
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

	st = store_prep(s, ST_SESSION_INSERT,
			"INSERT INTO sessions (tenant, key, segment, created_at, last_used_at) "
			"VALUES (?1, ?2, ?3, ?4, ?4)",
			Q_ARGS(Q_TEXT(tenant), Q_BLOB(key, key_len), Q_TEXT(cand), Q_INT(now)));
	if (!st)
		return -SBX_E_STORE;
	r = store_step_done(st);
	if (!r)
		memcpy(segment, cand, 64);
	return r;
}

bool store_session_cached(struct store *s, const char *tenant, const char *key, size_t key_len, int64_t now,
			  char segment[64])
{
	return scache_get(s, tenant, key, key_len, now, segment) != 0;
}

int store_session_get_or_create(struct store *s, const char *tenant, const char *key, size_t key_len,
				store_segment_fn seg, int64_t now, char segment[64], bool *created)
{
	char found[64] = {0};
	int64_t last_used = 0;
	bool made = false;
	int r;

	/* The hottest path: answered from the cache, no lock, no SQLite. */
	if (scache_get(s, tenant, key, key_len, now, found)) {
		memcpy(segment, found, 64);
		if (created)
			*created = false;
		return 0;
	}
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
		if (now - last_used >= TOUCH_INTERVAL_MS) {
			r = session_touch(s, tenant, key, key_len, now);
			if (last_used < now)
				last_used = now; /* what the UPDATE wrote */
		} else {
			r = 0;
		}
	} else {
		r = session_insert(s, tenant, key, key_len, seg, now, found);
		last_used = now;
		made = true;
	}
	if (r)
		goto out;
	r = store_tx_commit(s);
	if (r)
		goto out;
done:
	scache_put(s, tenant, key, key_len, now, last_used, found);
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

static void session_from_row(sqlite3_stmt *st, void *dst)
{
	struct store_session *e = dst;

	memset(e, 0, sizeof *e);
	e->key = store_col_blobdup(st, 0, &e->key_len);
	store_col_copy(st, 1, e->segment, sizeof e->segment);
	e->created_at = sqlite3_column_int64(st, 2);
	e->last_used_at = sqlite3_column_int64(st, 3);
}

static void session_clear(void *e)
{
	free(((struct store_session *)e)->key);
}

static const struct store_row session_row = {sizeof(struct store_session), session_from_row, session_clear};

int store_session_list(struct store *s, const char *tenant, size_t limit, struct store_session **out,
		       size_t *n)
{
	void *v;
	int r = store_list(s, ST_SESSION_LIST,
			   "SELECT key, segment, created_at, last_used_at FROM sessions WHERE tenant = ?1 "
			   "ORDER BY last_used_at DESC, created_at DESC LIMIT ?2",
			   &session_row, &v, n, Q_ARGS(Q_TEXT(tenant), Q_INT(limit ? (int64_t)limit : -1)));

	if (!r)
		*out = v;
	return r;
}

int store_session_delete(struct store *s, const char *tenant, const char *key, size_t key_len,
			 char segment[64])
{
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	/* Before the DELETE and under s->lock: no lookup can re-cache the row. */
	scache_drop(s, tenant, key, key_len);
	st = store_prep(s, ST_SESSION_DELETE,
			"DELETE FROM sessions WHERE tenant = ?1 AND key = ?2 RETURNING segment",
			Q_ARGS(Q_TEXT(tenant), Q_BLOB(key, key_len)));
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
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
