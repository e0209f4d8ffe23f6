/* What the store holds per tenant: one primary-key read of store_usage,
 * which triggers on execs and audit keep (migrations/0007_store_budget.sql). */
#include "store/store.h"
#include "store/db.h"

#include <errno.h>
#include <string.h>

struct usage_row {
	int64_t rows, bytes;
};

static void usage_from_row(sqlite3_stmt *st, void *dst)
{
	struct usage_row *u = dst;
	u->rows = sqlite3_column_int64(st, 0);
	u->bytes = sqlite3_column_int64(st, 1);
}

static const struct store_row usage_row = {sizeof(struct usage_row), usage_from_row, NULL};

int store_usage_get(struct store *s, const char *tenant, int64_t incarnation, int64_t *rows, int64_t *bytes)
{
	struct usage_row u = {0, 0};
	int r = store_get(s, ST_USAGE_GET,
			  "SELECT ifnull(sum(rows), 0), ifnull(sum(bytes), 0) FROM store_usage "
			  "WHERE tenant = ?1 AND (?2 = 0 OR life = ?2)",
			  &usage_row, &u, Q_ARGS(Q_TEXT(tenant), Q_INT(incarnation)));
	if (r == -ENOENT)
		r = 0;
	if (r == 0) {
		*rows = u.rows;
		*bytes = u.bytes;
	}
	return r;
}
