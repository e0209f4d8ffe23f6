/* Tenants: name, signing algorithm and key, operator flag and uid slot. */
#include "store/store.h"
#include "store/db.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/timeutil.h"
#include "common/errors.h"

#define TENANT_COLS "name, alg, key, operator, slot, created_at, incarnation"
/* Read with the tenant; written only by store_tenant_set_approver. */
#define TENANT_READ_COLS TENANT_COLS ", approver_alg, approver_key"

static void tenant_from_row(sqlite3_stmt *st, void *dst)
{
	struct store_tenant *t = dst;

	memset(t, 0, sizeof *t);
	store_col_copy(st, 0, t->name, sizeof t->name);
	store_col_copy(st, 1, t->alg, sizeof t->alg);
	t->key = (unsigned char *)store_col_blobdup(st, 2, &t->key_len);
	t->operator_tenant = sqlite3_column_int(st, 3) != 0;
	t->slot = sqlite3_column_int64(st, 4);
	t->created_at = sqlite3_column_int64(st, 5);
	t->incarnation = sqlite3_column_int64(st, 6);
	if (sqlite3_column_type(st, 7) == SQLITE_TEXT && sqlite3_column_type(st, 8) == SQLITE_BLOB) {
		store_col_copy(st, 7, t->approver_alg, sizeof t->approver_alg);
		t->approver_key = (unsigned char *)store_col_blobdup(st, 8, &t->approver_key_len);
	}
}

static void tenant_clear(void *t)
{
	store_tenant_clear(t);
}

static const struct store_row tenant_row = {sizeof(struct store_tenant), tenant_from_row, tenant_clear};

/* One integer of a one-row query (caller holds the lock, inside the
 * transaction). */
static int one_int(sqlite3_stmt *st, int64_t *out)
{
	if (!st)
		return -SBX_E_STORE;
	int r = sqlite3_step(st);
	if (r == SQLITE_ROW) {
		*out = sqlite3_column_int64(st, 0);
		r = 0;
	} else {
		r = store_rc(r == SQLITE_DONE ? SQLITE_ERROR : r);
	}
	sqlite3_reset(st);
	return r;
}

/* The slot a new life gets: reuse (>= 0) when no living tenant holds it,
 * else the lowest slot no life ever held (both probes use the index on
 * tenant_lives.slot). */
static int pick_slot(struct store *s, int64_t reuse, int64_t *slot)
{
	if (reuse >= 0) {
		int64_t held = 0;
		int r =
		    one_int(store_prep(s, ST_TENANT_SLOT_HELD, "SELECT COUNT(*) FROM tenants WHERE slot = ?1",
				       Q_ARGS(Q_INT(reuse))),
			    &held);
		if (r)
			return r;
		*slot = reuse;
		return held ? -EBUSY : 0;
	}
	return one_int(
	    store_stmt(s, ST_TENANT_FREE_SLOT,
		       "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM tenant_lives WHERE slot = 0) THEN 0 "
		       "ELSE (SELECT MIN(a.slot) + 1 FROM tenant_lives a WHERE a.slot >= 0 AND NOT EXISTS "
		       "(SELECT 1 FROM tenant_lives b WHERE b.slot = a.slot + 1)) END"),
	    slot);
}

int store_tenant_add(struct store *s, struct store_tenant *t, int64_t reuse_slot)
{
	sqlite3_stmt *st;
	int64_t slot = 0, life = 0, created = t->created_at ? t->created_at : now_ms();
	int r;

	pthread_mutex_lock(&s->lock);
	r = store_tx_begin(s);
	if (r)
		goto out;
	r = pick_slot(s, reuse_slot, &slot);
	if (r)
		goto out;
	st = store_prep(s, ST_TENANT_LIFE_INSERT,
			"INSERT INTO tenant_lives (name, slot, created_at) VALUES (?1, ?2, ?3)",
			Q_ARGS(Q_TEXT(t->name), Q_INT(slot), Q_INT(created)));
	r = st ? store_step_done(st) : -SBX_E_STORE;
	if (r)
		goto out;
	life = sqlite3_last_insert_rowid(s->db);
	st = store_prep(
	    s, ST_TENANT_INSERT, "INSERT INTO tenants (" TENANT_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	    Q_ARGS(Q_TEXT(t->name), Q_TEXT(t->alg), Q_BLOB(t->key ? (const void *)t->key : "", t->key_len),
		   Q_INT(t->operator_tenant ? 1 : 0), Q_INT(slot), Q_INT(created), Q_INT(life)));
	r = st ? store_step_done(st) : -SBX_E_STORE;
out:
	r = store_tx_end(s, r);
	pthread_mutex_unlock(&s->lock);
	if (!r) {
		t->slot = slot;
		t->created_at = created;
		t->incarnation = life;
	}
	return r;
}

int store_tenant_get(struct store *s, const char *name, struct store_tenant *out)
{
	return store_get(s, ST_TENANT_GET, "SELECT " TENANT_READ_COLS " FROM tenants WHERE name = ?1",
			 &tenant_row, out, Q_ARGS(Q_TEXT(name)));
}

int store_tenant_list(struct store *s, struct store_tenant **out, size_t *n)
{
	void *v;
	int r = store_list(s, ST_TENANT_LIST, "SELECT " TENANT_READ_COLS " FROM tenants ORDER BY name",
			   &tenant_row, &v, n, Q_NOARGS);

	if (!r)
		*out = v;
	return r;
}

int store_tenant_set_approver(struct store *s, const char *name, const char *alg, const unsigned char *key,
			      size_t key_len)
{
	bool set = alg && key && key_len;
	return store_run_one(
	    s, ST_TENANT_SET_APPROVER,
	    "UPDATE tenants SET approver_alg = ?2, approver_key = ?3 WHERE name = ?1",
	    Q_ARGS(Q_TEXT(name), set ? Q_TEXT(alg) : Q_NULL, set ? Q_BLOB(key, key_len) : Q_NULL));
}

int store_tenant_last_life(struct store *s, const char *name, int64_t *slot, int64_t *incarnation)
{
	pthread_mutex_lock(&s->lock);
	sqlite3_stmt *st =
	    store_prep(s, ST_TENANT_LAST_LIFE,
		       "SELECT slot, id FROM tenant_lives WHERE name = ?1 AND removed_at IS NOT NULL "
		       "ORDER BY id DESC LIMIT 1",
		       Q_ARGS(Q_TEXT(name)));
	int r = st ? sqlite3_step(st) : SQLITE_ERROR;
	if (r == SQLITE_ROW) {
		*slot = sqlite3_column_int64(st, 0);
		*incarnation = sqlite3_column_int64(st, 1);
		r = 0;
	} else {
		r = r == SQLITE_DONE ? -ENOENT : -SBX_E_STORE;
	}
	if (st)
		sqlite3_reset(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_tenant_remove(struct store *s, const char *name, int64_t *incarnation)
{
	struct store_tenant t;
	int r = store_tenant_get(s, name, &t);
	if (r)
		return r;
	pthread_mutex_lock(&s->lock);
	r = store_tx_begin(s);
	if (r)
		goto out;
	/* The cascade to sessions, execs, transfers and the policy is part
	 * of the DELETE; the life stays, marked, so its slot stays taken. */
	sqlite3_stmt *st =
	    store_prep(s, ST_TENANT_DELETE, "DELETE FROM tenants WHERE name = ?1 AND incarnation = ?2",
		       Q_ARGS(Q_TEXT(name), Q_INT(t.incarnation)));
	r = st ? store_step_one(s, st) : -SBX_E_STORE;
	if (r)
		goto out;
	st = store_prep(s, ST_TENANT_LIFE_END, "UPDATE tenant_lives SET removed_at = ?2 WHERE id = ?1",
			Q_ARGS(Q_INT(t.incarnation), Q_INT(now_ms())));
	r = st ? store_step_done(st) : -SBX_E_STORE;
out:
	r = store_tx_end(s, r);
	pthread_mutex_unlock(&s->lock);
	if (!r && incarnation)
		*incarnation = t.incarnation;
	store_tenant_clear(&t);
	return r;
}

bool store_changed_elsewhere(struct store *s, int64_t *seen)
{
	bool changed = false;
	/* Never wait for the lock (the audit writer's group commit holds
	 * it): a request must not queue behind the disk for this. A check
	 * skipped is made at a later request, and the tenant cache's own
	 * reload (every few seconds) compares lives too. */
	if (pthread_mutex_trylock(&s->lock) != 0)
		return false;
	sqlite3_stmt *st = store_stmt(s, ST_DATA_VERSION, "PRAGMA data_version");
	if (st && sqlite3_step(st) == SQLITE_ROW) {
		int64_t v = sqlite3_column_int64(st, 0);
		changed = v != *seen;
		*seen = v;
	}
	if (st)
		sqlite3_reset(st);
	pthread_mutex_unlock(&s->lock);
	return changed;
}

void store_tenant_clear(struct store_tenant *t)
{
	if (!t)
		return;
	free(t->key);
	free(t->approver_key);
	memset(t, 0, sizeof *t);
}

void store_tenants_free(struct store_tenant *t, size_t n)
{
	if (!t)
		return;
	for (size_t i = 0; i < n; i++)
		store_tenant_clear(&t[i]);
	free(t);
}
