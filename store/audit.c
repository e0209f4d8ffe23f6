/* Audit: one row per request, queued on the batched writer (writer.c) so
 * a request never waits for the disk (performance.md: a commit per row
 * costs ~13 us with synchronous=NORMAL; a group commit amortises it),
 * and the audit queries. Calls db.c and writer.c. */
#include "store/audit.h"
#include "store/db.h"
#include "store/writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/timeutil.h"
#include "common/errors.h"
#include "common/utf8.h"
#include "common/xmalloc.h"

/* Records queued and not yet taken by the writer; past it, drop and count. */
#define AUDIT_QUEUE_MAX 65536
/* Room kept for the truncation marker, so a capped target is at most
 * STORE_AUDIT_TARGET_MAX bytes and capping it again changes nothing. */
#define AUDIT_MARKER_ROOM 96

struct audit_rec {
	struct store_wrec w; /* first: the writer queues it */
	struct store_audit a;
	char data[]; /* the record's strings, packed */
};

static struct audit_rec *rec_of(struct store_wrec *w)
{
	return (struct audit_rec *)w;
}

char *store_audit_target_cap(const char *target, size_t n)
{
	size_t keep = n, len = 0;

	if (n > STORE_AUDIT_TARGET_MAX)
		keep = utf8_cut_end(target, STORE_AUDIT_TARGET_MAX - AUDIT_MARKER_ROOM);
	char *clean = utf8_sanitize(target, keep, &len);
	if (keep == n)
		return clean;
	char *out =
	    xasprintf("%s [... sandboxd: target truncated: %zu of %zu bytes kept ...]", clean, keep, n);
	free(clean);
	return out;
}

static struct audit_rec *rec_copy(const struct store_audit *in)
{
	/* Whatever a caller gives, a row's target stays bounded: a 15 MB
	 * command must not become 15 MB of audit. */
	struct store_audit capped = *in;
	const struct store_audit *a = &capped;
	char *target = NULL;
	if (in->target && strlen(in->target) > STORE_AUDIT_TARGET_MAX)
		capped.target = target = store_audit_target_cap(in->target, strlen(in->target));
	/* NOT NULL columns get "" for NULL; outcome is stored as given. */
	const char *tenant = a->tenant ? a->tenant : "";
	const char *request_id = a->request_id ? a->request_id : "";
	const char *method = a->method ? a->method : "";
	const char *route = a->route ? a->route : "";
	size_t sz = store_wrec_size(tenant) + (a->session ? a->session_len : 0) +
		    store_wrec_size(request_id) + store_wrec_size(method) + store_wrec_size(route) +
		    store_wrec_size(a->target) + store_wrec_size(a->outcome) + store_wrec_size(a->client) +
		    store_wrec_size(a->sub) + store_wrec_size(a->exec_id);
	struct audit_rec *r = xmalloc(sizeof *r + sz);
	char *cur = r->data;

	r->a = *a;
	r->a.tenant = store_wrec_put(&cur, tenant);
	r->a.session = store_wrec_pack(&cur, a->session, a->session ? a->session_len : 0, false);
	r->a.session_len = a->session ? a->session_len : 0;
	r->a.request_id = store_wrec_put(&cur, request_id);
	r->a.method = store_wrec_put(&cur, method);
	r->a.route = store_wrec_put(&cur, route);
	r->a.target = store_wrec_put(&cur, a->target);
	r->a.outcome = store_wrec_put(&cur, a->outcome);
	r->a.client = store_wrec_put(&cur, a->client);
	r->a.sub = store_wrec_put(&cur, a->sub);
	r->a.exec_id = store_wrec_put(&cur, a->exec_id);
	r->w.seq = 0;
	free(target);
	return r;
}

int store_audit_append(struct store *s, const struct store_audit *a)
{
	if (!a)
		return -EINVAL;
	/* Copy outside the lock: appenders contend only for the enqueue. */
	return store_writer_append(s, STORE_WK_AUDIT, &rec_copy(a)->w, AUDIT_QUEUE_MAX);
}

#define AUDIT_COLS 20
/* Records per multi-row INSERT: one statement for AUDIT_ROWS records costs
 * a third less per row than one each (the statement's setup, halt and
 * reset are per statement). A group holding a bad record is written again
 * one record at a time, so that record fails alone. */
#define AUDIT_ROWS 16
#define AUDIT_INSERT                                                                                         \
	"INSERT INTO audit (at, tenant, session, request_id, method, route, target, status, outcome, "       \
	"exit_code, bytes_in, bytes_out, duration_ms, client, sub, incarnation, oom_killed, pids_limited, "  \
	"uncontained, exec_id) VALUES "
#define AUDIT_VALUES "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"

static char insert_many_sql[sizeof AUDIT_INSERT + AUDIT_ROWS * sizeof AUDIT_VALUES];

static void build_insert_many(void)
{
	size_t o = (size_t)snprintf(insert_many_sql, sizeof insert_many_sql, "%s", AUDIT_INSERT);
	for (int i = 0; i < AUDIT_ROWS; i++)
		o += (size_t)snprintf(insert_many_sql + o, sizeof insert_many_sql - o, "%s" AUDIT_VALUES,
				      i ? "," : "");
}

/* Text and blobs bound SQLITE_STATIC: the records stay until their batch
 * is written, and every statement's bindings are cleared before they go. */
static int bind_str(sqlite3_stmt *st, int i, const char *str)
{
	return str ? sqlite3_bind_text(st, i, str, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

/* a as the values base+1 .. base+AUDIT_COLS of st. */
static int bind_rec(sqlite3_stmt *st, int base, const struct store_audit *a)
{
	int rc = SQLITE_OK;

	rc |= sqlite3_bind_int64(st, base + 1, a->at);
	rc |= bind_str(st, base + 2, a->tenant);
	if (a->session)
		rc |= sqlite3_bind_blob64(st, base + 3, a->session, a->session_len, SQLITE_STATIC);
	rc |= bind_str(st, base + 4, a->request_id);
	rc |= bind_str(st, base + 5, a->method);
	rc |= bind_str(st, base + 6, a->route);
	rc |= bind_str(st, base + 7, a->target);
	rc |= sqlite3_bind_int(st, base + 8, a->status);
	rc |= bind_str(st, base + 9, a->outcome);
	if (a->has_exit_code)
		rc |= sqlite3_bind_int(st, base + 10, a->exit_code);
	rc |= sqlite3_bind_int64(st, base + 11, a->bytes_in);
	rc |= sqlite3_bind_int64(st, base + 12, a->bytes_out);
	rc |= sqlite3_bind_double(st, base + 13, a->duration_ms);
	rc |= bind_str(st, base + 14, a->client);
	rc |= bind_str(st, base + 15, a->sub);
	if (a->incarnation > 0)
		rc |= sqlite3_bind_int64(st, base + 16, a->incarnation);
	rc |= sqlite3_bind_int(st, base + 17, a->why.oom_killed);
	rc |= sqlite3_bind_int(st, base + 18, a->why.pids_limited);
	rc |= sqlite3_bind_int(st, base + 19, a->why.uncontained);
	rc |= bind_str(st, base + 20, a->exec_id);
	return rc == SQLITE_OK ? 0 : -SBX_E_STORE;
}

/* AUDIT_ROWS records in one statement: 0, or an error after which none
 * of them is written (the statement is undone, the transaction goes on). */
static int insert_many(struct store *s, struct store_wrec **b)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, build_insert_many);
	sqlite3_stmt *st = store_stmt(s, ST_AUDIT_INSERT_MANY, insert_many_sql);
	if (!st)
		return -SBX_E_STORE;
	for (int i = 0; i < AUDIT_ROWS; i++)
		if (bind_rec(st, i * AUDIT_COLS, &rec_of(b[i])->a) < 0)
			return -SBX_E_STORE;
	int r = store_step_done(st);
	sqlite3_clear_bindings(st);
	return r;
}

/* One record; a failure is noted for the store's health. */
static int insert_one(struct store *s, struct audit_rec *rec)
{
	sqlite3_stmt *st = store_stmt(s, ST_AUDIT_INSERT, AUDIT_INSERT AUDIT_VALUES);
	if (!st)
		return -SBX_E_STORE;
	int sr = 0, r = bind_rec(st, 0, &rec->a);
	if (r == 0 && (sr = store_step_done(st)) != 0) {
		store_note_write(s, sr);
		r = sr;
	}
	sqlite3_clear_bindings(st);
	return r;
}

/* Write one batch in one transaction and free it. Returns the number of
 * records not written; *fail_seq gets the highest seq among them. */
size_t store_audit_write(struct store *s, struct store_wrec **b, size_t n, uint64_t *fail_seq)
{
	size_t failed = 0;
	uint64_t worst = 0;
	int r;

	pthread_mutex_lock(&s->lock);
	r = store_tx_begin(s);
	if (r) {
		store_note_write(s, r);
		goto out;
	}
	for (size_t i = 0; i < n;) {
		if (n - i >= AUDIT_ROWS && insert_many(s, b + i) == 0) {
			i += AUDIT_ROWS;
			continue;
		}
		/* The tail, or a group that failed: one by one, so that a bad
		 * record (e.g. an outcome outside the CHECK) fails alone. */
		for (size_t end = n - i >= AUDIT_ROWS ? i + AUDIT_ROWS : n; i < end; i++)
			if (insert_one(s, rec_of(b[i])) < 0) {
				failed++;
				worst = b[i]->seq;
			}
	}
	r = store_tx_commit(s);
out:
	if (r) {
		store_tx_rollback(s);
		/* Nothing of this batch is on disk. */
		failed = n;
		worst = n ? b[n - 1]->seq : 0;
	}
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n; i++)
		free(b[i]);
	if (failed && worst > *fail_seq)
		*fail_seq = worst;
	return failed;
}

int store_audit_flush(struct store *s)
{
	return store_writer_flush(s, STORE_WK_AUDIT);
}

uint64_t store_audit_failures(struct store *s)
{
	return store_writer_failures(s, STORE_WK_AUDIT);
}

/* ---- queries ---- */

struct sqlbuf {
	char s[1024];
	size_t len;
	bool overflow;
};

static void sql_add(struct sqlbuf *b, const char *str)
{
	int n = snprintf(b->s + b->len, sizeof b->s - b->len, "%s", str);

	if (n < 0 || (size_t)n >= sizeof b->s - b->len)
		b->overflow = true;
	else
		b->len += (size_t)n;
}

/* Build the query for f and bind its parameters. Only the filters given
 * appear in the SQL; every value is a bound parameter. */
static int prepare_query(sqlite3 *db, const struct store_audit_filter *f, const char *prefix,
			 sqlite3_stmt **out)
{
	struct sqlbuf b = {.len = 0};
	sqlite3_stmt *st = NULL;
	int i = 1, r = 0;

	sql_add(&b, prefix);
	sql_add(&b, "SELECT id, at, tenant, session, request_id, method, route, target, status, outcome, "
		    "exit_code, bytes_in, bytes_out, duration_ms, client, sub, oom_killed, pids_limited, "
		    "uncontained, exec_id FROM audit WHERE 1");
	if (f->after > 0)
		sql_add(&b, " AND id > ?");
	/* "Since" with no cursor (a first page): start at the smallest id
	 * stamped at or after it, found on audit(at), instead of walking the
	 * table from its oldest row. Exact: every match has an id >= it. */
	if (f->since && f->after <= 0)
		sql_add(&b, " AND id >= (SELECT min(id) FROM audit INDEXED BY audit_at WHERE at >= ?)");
	if (f->tenant)
		sql_add(&b, " AND tenant = ?");
	if (f->tenant && f->incarnation != 0)
		sql_add(&b, " AND incarnation = ?");
	if (f->since)
		sql_add(&b, " AND at >= ?");
	if (f->until)
		sql_add(&b, " AND at <= ?");
	if (f->session)
		sql_add(&b, " AND session = ?");
	if (f->route)
		sql_add(&b, " AND route = ?");
	if (f->outcome)
		sql_add(&b, " AND outcome = ?");
	/* On egress_denied (a partial index) or egress_exec, one probe per
	 * audit row of an exec. */
	if (f->egress) {
		sql_add(&b, " AND exec_id IS NOT NULL AND EXISTS (SELECT 1 FROM egress e WHERE "
			    "e.tenant = audit.tenant AND e.exec_id = audit.exec_id");
		sql_add(&b, strcmp(f->egress, "denied") == 0 ? " AND e.verdict = 'denied')" : ")");
	}
	sql_add(&b, " ORDER BY id ASC LIMIT ?");
	if (b.overflow)
		return -SBX_E_STORE;
	if (sqlite3_prepare_v2(db, b.s, (int)b.len, &st, NULL) != SQLITE_OK) {
		r = -SBX_E_STORE;
		goto out;
	}
	if (f->after > 0)
		sqlite3_bind_int64(st, i++, f->after);
	if (f->since && f->after <= 0)
		sqlite3_bind_int64(st, i++, f->since);
	if (f->tenant)
		store_bind_text(st, i++, f->tenant);
	if (f->tenant && f->incarnation != 0)
		sqlite3_bind_int64(st, i++, f->incarnation);
	if (f->since)
		sqlite3_bind_int64(st, i++, f->since);
	if (f->until)
		sqlite3_bind_int64(st, i++, f->until);
	if (f->session)
		store_bind_blob(st, i++, f->session, f->session_len);
	if (f->route)
		store_bind_text(st, i++, f->route);
	if (f->outcome)
		store_bind_text(st, i++, f->outcome);
	sqlite3_bind_int64(st, i++, f->limit ? (int64_t)f->limit : -1);
	*out = st;
	st = NULL;
out:
	sqlite3_finalize(st);
	return r;
}

static const char *col_text(sqlite3_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st, i);
}

static int run_query(sqlite3 *db, const struct store_audit_filter *f, store_audit_cb cb, void *ctx,
		     int64_t *last_id)
{
	sqlite3_stmt *st = NULL;
	int64_t last = 0;
	int r, rc;

	r = prepare_query(db, f, "", &st);
	if (r)
		goto out;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_audit a = {0};
		int c;

		a.id = sqlite3_column_int64(st, 0);
		a.at = sqlite3_column_int64(st, 1);
		a.tenant = col_text(st, 2);
		if (sqlite3_column_type(st, 3) != SQLITE_NULL) {
			a.session = sqlite3_column_blob(st, 3);
			a.session_len = (size_t)sqlite3_column_bytes(st, 3);
			if (!a.session)
				a.session = "";
		}
		a.request_id = col_text(st, 4);
		a.method = col_text(st, 5);
		a.route = col_text(st, 6);
		a.target = col_text(st, 7);
		a.status = sqlite3_column_int(st, 8);
		a.outcome = col_text(st, 9);
		if (sqlite3_column_type(st, 10) != SQLITE_NULL) {
			a.has_exit_code = true;
			a.exit_code = sqlite3_column_int(st, 10);
		}
		a.bytes_in = sqlite3_column_int64(st, 11);
		a.bytes_out = sqlite3_column_int64(st, 12);
		a.duration_ms = sqlite3_column_double(st, 13);
		a.client = col_text(st, 14);
		a.sub = col_text(st, 15);
		a.why.oom_killed = sqlite3_column_int(st, 16) != 0;
		a.why.pids_limited = sqlite3_column_int(st, 17) != 0;
		a.why.uncontained = sqlite3_column_int(st, 18) != 0;
		a.exec_id = col_text(st, 19);
		last = a.id;
		c = cb(ctx, &a);
		if (c) {
			/* A positive value only stops; a negative errno is passed on. */
			if (c < 0)
				r = c;
			rc = SQLITE_DONE;
			break;
		}
	}
	if (rc != SQLITE_DONE)
		r = store_rc(rc);
out:
	sqlite3_finalize(st);
	if (last_id)
		*last_id = last;
	return r;
}

struct audit_read {
	const struct store_audit_filter *f;
	store_audit_cb cb;
	void *ctx;
	int64_t *last_id;
};

static int audit_read(sqlite3 *db, void *arg)
{
	struct audit_read *q = arg;
	return run_query(db, q->f, q->cb, q->ctx, q->last_id);
}

int store_audit_query(struct store *s, const struct store_audit_filter *f, store_audit_cb cb, void *ctx,
		      int64_t *last_id)
{
	if (!f || !cb)
		return -EINVAL;
	struct audit_read q = {f, cb, ctx, last_id};
	return store_read(s, audit_read, &q);
}

int store_audit_query_plan(struct store *s, const struct store_audit_filter *f, char *out, size_t outsz)
{
	struct sqlbuf b = {.len = 0};
	sqlite3_stmt *st = NULL;
	int r, rc;

	pthread_mutex_lock(&s->rlock);
	r = prepare_query(s->rdb, f, "EXPLAIN QUERY PLAN ", &st);
	if (r)
		goto out;
	/* Rows: id, parent, notused, detail. */
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		sql_add(&b, col_text(st, 3) ? col_text(st, 3) : "");
		sql_add(&b, "\n");
	}
	if (rc != SQLITE_DONE)
		r = store_rc(rc);
	if (!r && out && outsz)
		snprintf(out, outsz, "%s", b.s);
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return r;
}
