/* Policies: per tenant, the keys an operator set, as one JSON object text.
 * What the keys mean is routes/policy.c's; here they are only stored. */
#include "store/store.h"
#include "store/db.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"

struct policy_row {
	char *policy;
	int64_t updated_at;
};

static void policy_from_row(sqlite3_stmt *st, void *dst)
{
	struct policy_row *p = dst;
	p->policy = store_col_strdup(st, 0);
	p->updated_at = sqlite3_column_int64(st, 1);
}

static void policy_clear(void *dst)
{
	struct policy_row *p = dst;
	free(p->policy);
	p->policy = NULL;
}

static const struct store_row policy_row = {sizeof(struct policy_row), policy_from_row, policy_clear};

#define POLICY_GET_SQL "SELECT policy, updated_at FROM policies WHERE tenant = ?1"

/* Every exec reads this: the tenant and its overrides in one statement
 * (one read transaction), a tenant without overrides being a row of
 * NULLs rather than a second look-up (issue 15, P1). */
int store_policy_get(struct store *s, const char *tenant, char **policy, int64_t *updated_at)
{
	struct policy_row p = {0};
	int r = store_get(s, ST_POLICY_LOAD,
			  "SELECT p.policy, p.updated_at FROM tenants t LEFT JOIN policies p ON p.tenant = "
			  "t.name WHERE t.name = ?1",
			  &policy_row, &p, Q_ARGS(Q_TEXT(tenant)));
	if (r == 0) {
		*policy = p.policy;
		if (updated_at)
			*updated_at = p.updated_at;
	}
	return r;
}

/* Compare and set, in one write transaction: of two writers that read the
 * same row, one wins and the other reads again (-EAGAIN). */
int store_policy_replace(struct store *s, const char *tenant, const char *expect, const char *policy,
			 int64_t now)
{
	struct policy_row cur = {0};
	sqlite3_stmt *st;
	int r;

	pthread_mutex_lock(&s->lock);
	r = store_tx_begin(s);
	if (r)
		goto out;
	st = store_prep(s, ST_POLICY_GET, POLICY_GET_SQL, Q_ARGS(Q_TEXT(tenant)));
	r = st ? store_step_row(st, &policy_row, &cur) : -SBX_E_STORE;
	if (r == -ENOENT)
		r = 0;
	if (r)
		goto out;
	if ((expect == NULL) != (cur.policy == NULL) || (expect && strcmp(expect, cur.policy) != 0)) {
		r = -EAGAIN;
		goto out;
	}
	st = store_prep(s, ST_POLICY_PUT,
			"INSERT INTO policies (tenant, policy, updated_at) VALUES (?1, ?2, ?3) "
			"ON CONFLICT (tenant) DO UPDATE SET policy = ?2, updated_at = ?3",
			Q_ARGS(Q_TEXT(tenant), Q_TEXT(policy), Q_INT(now)));
	r = st ? store_step_done(st) : -SBX_E_STORE;
out:
	r = store_tx_end(s, r);
	pthread_mutex_unlock(&s->lock);
	policy_clear(&cur);
	return r;
}
