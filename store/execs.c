/* Execs: one row per command run, keyed by (tenant, client-chosen id).
 *
 * The insert of a command's row (before it starts, fail closed) writes the
 * row and its three indexes, and each is a query's (EXPLAIN QUERY PLAN,
 * issue 15): the primary key (tenant, id) every look-up by id, finish,
 * decide, delete and the tenant's ON DELETE CASCADE; execs_tenant_started
 * GET /execs, newest first without a sort; execs_state the recovery at
 * every start (running and pending_approval rows become lost), which
 * without it would read the whole table, results included. Merging state
 * into execs_tenant_started would save one page per insert at the price of
 * a scan of that whole index at every start, so all three stay. */
#include "store/db.h"
#include "store/execs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"

#define EXEC_COLS                                                                                            \
	"tenant, id, session, command, cwd, request_hash, state, exit_code, result, started_at, "            \
	"finished_at, exit_event_id, policy, requested_by, decision, decided_by, decided_at, reason, "       \
	"incarnation, oom_killed, pids_limited, uncontained"

static void exec_from_row(sqlite3_stmt *st, void *dst)
{
	struct store_exec *e = dst;

	memset(e, 0, sizeof *e);
	store_col_copy(st, 0, e->tenant, sizeof e->tenant);
	store_col_copy(st, 1, e->id, sizeof e->id);
	e->session = store_col_blobdup(st, 2, &e->session_len);
	e->command = store_col_strdup(st, 3);
	e->cwd = store_col_strdup(st, 4);
	e->request_hash = store_col_strdup(st, 5);
	const char *state = (const char *)sqlite3_column_text(st, 6);
	if (store_exec_state_parse(state ? state : "", &e->state) < 0)
		e->state = EXEC_LOST;
	if (sqlite3_column_type(st, 7) != SQLITE_NULL) {
		e->has_exit_code = true;
		e->exit_code = sqlite3_column_int(st, 7);
	}
	e->result = store_col_strdup(st, 8);
	e->started_at = sqlite3_column_int64(st, 9);
	e->finished_at = sqlite3_column_int64(st, 10);
	e->exit_event_id = sqlite3_column_int64(st, 11);
	e->policy = store_col_strdup(st, 12);
	e->requested_by = store_col_strdup(st, 13);
	store_col_copy(st, 14, e->decision, sizeof e->decision);
	e->decided_by = store_col_strdup(st, 15);
	e->decided_at = sqlite3_column_int64(st, 16);
	e->reason = store_col_strdup(st, 17);
	e->incarnation = sqlite3_column_int64(st, 18);
	e->why.oom_killed = sqlite3_column_int(st, 19) != 0;
	e->why.pids_limited = sqlite3_column_int(st, 20) != 0;
	e->why.uncontained = sqlite3_column_int(st, 21) != 0;
}

static void exec_clear(void *e)
{
	store_exec_clear(e);
}

/* The names, as the execs table and the wire have them. */
static const char *const state_names[EXEC_STATES] = {
    [EXEC_RUNNING] = "running",	    [EXEC_PENDING_APPROVAL] = "pending_approval",
    [EXEC_EXITED] = "exited",	    [EXEC_TIMED_OUT] = "timed_out",
    [EXEC_CANCELLED] = "cancelled", [EXEC_REJECTED] = "rejected",
    [EXEC_LOST] = "lost",
};

const char *store_exec_state_name(enum store_exec_state s)
{
	return (unsigned)s < EXEC_STATES ? state_names[s] : "lost";
}

int store_exec_state_parse(const char *name, enum store_exec_state *out)
{
	for (int i = 0; name && i < EXEC_STATES; i++)
		if (strcmp(name, state_names[i]) == 0) {
			*out = (enum store_exec_state)i;
			return 0;
		}
	return -EINVAL;
}

static const struct store_row exec_row = {sizeof(struct store_exec), exec_from_row, exec_clear};

int store_exec_begin(struct store *s, const struct store_exec *e)
{
	return store_run(
	    s, ST_EXEC_INSERT,
	    "INSERT INTO execs (tenant, id, session, command, cwd, request_hash, state, started_at, policy, "
	    "requested_by, incarnation) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
	    "COALESCE(NULLIF(?11, 0), (SELECT incarnation FROM tenants WHERE name = ?1), 0))",
	    Q_ARGS(Q_TEXT(e->tenant), Q_TEXT(e->id), Q_BLOB(e->session ? e->session : "", e->session_len),
		   Q_TEXT(e->command), Q_TEXT(e->cwd), Q_TEXT(e->request_hash),
		   Q_TEXT(store_exec_state_name(e->state)), Q_INT(e->started_at), Q_TEXT(e->policy),
		   Q_TEXT(e->requested_by), Q_INT(e->incarnation)));
}

int store_exec_decide(struct store *s, const char *tenant, const char *id, const char *decision,
		      const char *decided_by, const char *reason, int64_t at)
{
	bool approved = strcmp(decision, "approved") == 0;
	return store_run_one(s, ST_EXEC_DECIDE,
			     "UPDATE execs SET decision = ?3, decided_by = ?4, reason = ?5, decided_at = ?6, "
			     "state = CASE WHEN ?7 THEN 'running' ELSE 'rejected' END, "
			     "started_at = CASE WHEN ?7 THEN ?6 ELSE started_at END, "
			     "finished_at = CASE WHEN ?7 THEN NULL ELSE ?6 END "
			     "WHERE tenant = ?1 AND id = ?2 AND state = 'pending_approval'",
			     Q_ARGS(Q_TEXT(tenant), Q_TEXT(id), Q_TEXT(decision), Q_TEXT(decided_by),
				    Q_TEXT(reason), Q_INT(at), Q_INT(approved ? 1 : 0)));
}

/* A negative exit_code (killed, never started) is stored as NULL. */
int store_exec_finish(struct store *s, const char *tenant, const char *id, enum store_exec_state state,
		      int exit_code, const char *result, int64_t finished_at, int64_t exit_event_id,
		      const struct store_exec_why *why)
{
	const struct store_exec_why none = {0};
	if (!why)
		why = &none;
	return store_run_one(s, ST_EXEC_FINISH,
			     "UPDATE execs SET state = ?3, exit_code = ?4, result = ?5, finished_at = ?6, "
			     "exit_event_id = ?7, oom_killed = ?8, pids_limited = ?9, uncontained = ?10 "
			     "WHERE tenant = ?1 AND id = ?2",
			     Q_ARGS(Q_TEXT(tenant), Q_TEXT(id), Q_TEXT(store_exec_state_name(state)),
				    exit_code >= 0 ? Q_INT(exit_code) : Q_NULL, Q_TEXT(result),
				    Q_INT(finished_at), Q_INT(exit_event_id), Q_INT(why->oom_killed),
				    Q_INT(why->pids_limited), Q_INT(why->uncontained)));
}

int store_exec_delete(struct store *s, const char *tenant, const char *id)
{
	return store_run_one(s, ST_EXEC_DELETE,
			     "DELETE FROM execs WHERE tenant = ?1 AND id = ?2 AND state = 'running'",
			     Q_ARGS(Q_TEXT(tenant), Q_TEXT(id)));
}

int store_exec_get(struct store *s, const char *tenant, const char *id, struct store_exec *out)
{
	return store_get(s, ST_EXEC_GET, "SELECT " EXEC_COLS " FROM execs WHERE tenant = ?1 AND id = ?2",
			 &exec_row, out, Q_ARGS(Q_TEXT(tenant), Q_TEXT(id)));
}

int store_exec_list(struct store *s, const char *tenant, const enum store_exec_state *state,
		    const char *session, size_t session_len, size_t limit, bool with_result,
		    struct store_exec **out, size_t *n)
{
	void *v;
	int r;

	/* One statement for every filter combination: NULL parameters match
	 * all, and the (tenant, started_at DESC) index serves the order. */
	r = store_list(s, ST_EXEC_LIST,
		       "SELECT tenant, id, session, command, cwd, request_hash, state, exit_code, "
		       "CASE WHEN ?5 THEN result END, started_at, finished_at, exit_event_id, policy, "
		       "requested_by, decision, decided_by, decided_at, reason, NULL, oom_killed, "
		       "pids_limited, uncontained FROM execs "
		       "WHERE tenant = ?1 AND (?2 IS NULL OR state = ?2) AND (?3 IS NULL OR session = ?3) "
		       "ORDER BY started_at DESC LIMIT ?4",
		       &exec_row, &v, n,
		       Q_ARGS(Q_TEXT(tenant), Q_TEXT(state ? store_exec_state_name(*state) : NULL),
			      Q_BLOB(session, session_len), Q_INT(limit ? (int64_t)limit : -1),
			      Q_INT(with_result ? 1 : 0)));
	if (!r)
		*out = v;
	return r;
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
	free(e->policy);
	free(e->requested_by);
	free(e->decided_by);
	free(e->reason);
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
