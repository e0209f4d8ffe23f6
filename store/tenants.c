/* Tenants: name, signing algorithm and key, operator flag and uid slot. */
#include "store/store_impl.h"

#include <stdlib.h>
#include <string.h>

#include "common/timeutil.h"
#include "common/errors.h"

#define TENANT_COLS "name, alg, key, operator, slot, created_at"

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
}

static void tenant_clear(void *t)
{
	store_tenant_clear(t);
}

static const struct store_row tenant_row = {sizeof(struct store_tenant), tenant_from_row, tenant_clear};

int store_tenant_add(struct store *s, struct store_tenant *t)
{
	sqlite3_stmt *st;
	int64_t slot = 0, created = t->created_at ? t->created_at : now_ms();
	int r;

	pthread_mutex_lock(&s->lock);
	r = store_tx_begin(s);
	if (r)
		goto out;
	/* The lowest slot no tenant holds: 0, or the first n+1 that is free.
	 * Both probes use the UNIQUE index on slot. */
	st = store_stmt(s, ST_TENANT_FREE_SLOT,
			"SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM tenants WHERE slot = 0) THEN 0 "
			"ELSE (SELECT MIN(a.slot) + 1 FROM tenants a WHERE a.slot >= 0 AND NOT EXISTS "
			"(SELECT 1 FROM tenants b WHERE b.slot = a.slot + 1)) END");
	if (!st) {
		r = -SBX_E_STORE;
		goto out;
	}
	r = sqlite3_step(st);
	if (r == SQLITE_ROW) {
		slot = sqlite3_column_int64(st, 0);
		r = 0;
	} else {
		r = store_rc(r == SQLITE_DONE ? SQLITE_ERROR : r);
	}
	sqlite3_reset(st);
	if (r)
		goto out;

	st = store_prep(
	    s, ST_TENANT_INSERT, "INSERT INTO tenants (" TENANT_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	    Q_ARGS(Q_TEXT(t->name), Q_TEXT(t->alg), Q_BLOB(t->key ? (const void *)t->key : "", t->key_len),
		   Q_INT(t->operator_tenant ? 1 : 0), Q_INT(slot), Q_INT(created)));
	r = st ? store_step_done(st) : -SBX_E_STORE;
out:
	r = store_tx_end(s, r);
	pthread_mutex_unlock(&s->lock);
	if (!r) {
		t->slot = slot;
		t->created_at = created;
	}
	return r;
}

int store_tenant_get(struct store *s, const char *name, struct store_tenant *out)
{
	return store_get(s, ST_TENANT_GET, "SELECT " TENANT_COLS " FROM tenants WHERE name = ?1", &tenant_row,
			 out, Q_ARGS(Q_TEXT(name)));
}

int store_tenant_list(struct store *s, struct store_tenant **out, size_t *n)
{
	void *v;
	int r = store_list(s, ST_TENANT_LIST, "SELECT " TENANT_COLS " FROM tenants ORDER BY name",
			   &tenant_row, &v, n, Q_NOARGS);

	if (!r)
		*out = v;
	return r;
}

int store_tenant_remove(struct store *s, const char *name)
{
	/* One statement: the cascade to sessions, execs and transfers is
	 * part of it and atomic with it. */
	return store_run_one(s, ST_TENANT_DELETE, "DELETE FROM tenants WHERE name = ?1",
			     Q_ARGS(Q_TEXT(name)));
}

void store_tenant_clear(struct store_tenant *t)
{
	if (!t)
		return;
	free(t->key);
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
