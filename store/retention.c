/* Retention: old audit, egress, exec and transfer rows are deleted in
 * small batches, each its own short write transaction, so requests never
 * wait long for the write lock. An exec's egress rows ended before it
 * did, so the same cutoff takes them no later than the exec itself. */
#include "store/store.h"
#include "store/db.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/xmalloc.h"

struct table_rule {
	const char *table;
	const char *key;       /* ordering column: oldest first */
	const char *age;       /* SQL expression of the row's age reference */
	const char *deletable; /* rows that may go at all */
};

static const struct table_rule rules[] = {
    {"audit", "id", "at", "1"},
    {"egress", "id", "ended_at", "1"},
    {"execs", "rowid", "finished_at", "state NOT IN ('running', 'pending_approval')"},
    {"transfers", "rowid", "COALESCE(finished_at, expires_at)", "state IN ('done', 'failed', 'expired')"},
};

struct pruned {
	char tenant[64];
	char id[72];
};

/* One batch of one table; returns rows deleted or a negative errno. For
 * execs the (tenant, id) of each deleted row is appended to *out. */
static int prune_batch(struct store *s, const struct table_rule *t, int64_t cutoff, int64_t max_rows,
		       size_t batch, struct pruned **out, size_t *nout)
{
	bool is_execs = strcmp(t->table, "execs") == 0;
	char *sql = NULL;
	int64_t keep_from = 0;
	int n = 0;

	pthread_mutex_lock(&s->lock);
	if (max_rows > 0) {
		/* The key of the oldest row to keep when only max_rows may stay. */
		char *q = xasprintf("SELECT %s FROM %s ORDER BY %s DESC LIMIT 1 OFFSET %lld", t->key,
				    t->table, t->key, (long long)(max_rows - 1));
		sqlite3_stmt *st = NULL;
		if (sqlite3_prepare_v2(s->db, q, -1, &st, NULL) == SQLITE_OK &&
		    sqlite3_step(st) == SQLITE_ROW)
			keep_from = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
		free(q);
	}
	if (cutoff <= 0 && keep_from <= 0)
		goto out;
	sql =
	    xasprintf("DELETE FROM %s WHERE %s IN (SELECT %s FROM %s WHERE (%s) AND ((?1 > 0 AND %s < ?1) OR "
		      "(?2 > 0 AND %s < ?2)) ORDER BY %s LIMIT ?3)%s",
		      t->table, t->key, t->key, t->table, t->deletable, t->age, t->key, t->key,
		      is_execs ? " RETURNING tenant, id" : "");
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
		n = -SBX_E_STORE;
		goto out;
	}
	sqlite3_bind_int64(st, 1, cutoff);
	sqlite3_bind_int64(st, 2, keep_from);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)batch);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		*out = xrealloc(*out, (*nout + 1) * sizeof **out);
		struct pruned *p = &(*out)[(*nout)++];
		store_col_copy(st, 0, p->tenant, sizeof p->tenant);
		store_col_copy(st, 1, p->id, sizeof p->id);
	}
	n = rc == SQLITE_DONE ? sqlite3_changes(s->db) : store_rc(rc);
	sqlite3_finalize(st);
out:
	pthread_mutex_unlock(&s->lock);
	free(sql);
	return n;
}

int store_prune(struct store *s, int64_t cutoff, int64_t max_rows, size_t batch, store_pruned_exec_cb cb,
		void *ctx, int64_t *deleted)
{
	int64_t total = 0;
	int rc = 0;
	for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
		for (;;) {
			struct pruned *p = NULL;
			size_t np = 0;
			int n = prune_batch(s, &rules[i], cutoff, max_rows, batch, &p, &np);
			for (size_t k = 0; k < np && cb; k++)
				cb(ctx, p[k].tenant, p[k].id);
			free(p);
			if (n < 0) {
				rc = n;
				break;
			}
			total += n;
			if ((size_t)n < batch)
				break;
		}
	}
	if (deleted)
		*deleted = total;
	return rc;
}
