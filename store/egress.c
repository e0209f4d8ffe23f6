/* The egress ledger: a record per connection, DNS refusal or dropped
 * datagram, queued by the gateway's threads and written in groups by the
 * batched writer (writer.c), so a gateway thread never waits for the
 * disk, and its queries. Calls db.c and writer.c. */
#include "store/db.h"
#include "store/egress.h"
#include "store/writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/xmalloc.h"

/* Records queued and not yet taken by the writer; past it, drop and
 * count. Apart from the audit's bound: a tenant's flood of connections
 * never costs another request's audit record. */
#define EGRESS_QUEUE_MAX 65536

struct egress_rec {
	struct store_wrec w; /* first: the writer queues it */
	struct store_egress e;
	char data[]; /* the record's strings, packed */
};

static struct egress_rec *rec_of(struct store_wrec *w)
{
	return (struct egress_rec *)w;
}

static struct egress_rec *rec_copy(const struct store_egress *in)
{
	const char *exec_id = in->exec_id ? in->exec_id : "";
	const char *dialled = in->dialled ? in->dialled : "";
	const char *proto = in->proto ? in->proto : "";
	size_t sz = store_wrec_size(in->tenant) + store_wrec_size(exec_id) + store_wrec_size(in->sub) +
		    store_wrec_size(proto) + store_wrec_size(in->name) + store_wrec_size(in->name_source) +
		    store_wrec_size(dialled) + store_wrec_size(in->addr) + store_wrec_size(in->reason);
	struct egress_rec *r = xmalloc(sizeof *r + sz);
	char *cur = r->data;
	r->e = *in;
	r->e.tenant = store_wrec_put(&cur, in->tenant);
	r->e.exec_id = store_wrec_put(&cur, exec_id);
	r->e.sub = store_wrec_put(&cur, in->sub);
	r->e.proto = store_wrec_put(&cur, proto);
	r->e.name = store_wrec_put(&cur, in->name);
	r->e.name_source = store_wrec_put(&cur, in->name_source);
	r->e.dialled = store_wrec_put(&cur, dialled);
	r->e.addr = store_wrec_put(&cur, in->addr);
	r->e.reason = store_wrec_put(&cur, in->reason);
	r->w.seq = 0;
	return r;
}

int store_egress_append(struct store *s, const struct store_egress *e)
{
	if (!e || !e->tenant)
		return -EINVAL;
	/* Copy outside the lock: appenders contend only for the enqueue. */
	return store_writer_append(s, STORE_WK_EGRESS, &rec_copy(e)->w,
				   s->eq_max ? s->eq_max : EGRESS_QUEUE_MAX);
}

int store_egress_flush(struct store *s)
{
	return store_writer_flush(s, STORE_WK_EGRESS);
}

uint64_t store_egress_failures(struct store *s)
{
	return store_writer_failures(s, STORE_WK_EGRESS);
}

/* One record (s->lock held); a failure is noted for the store's health. */
static int insert_one(struct store *s, const struct store_egress *e)
{
	sqlite3_stmt *st = store_prep(
	    s, ST_EGRESS_INSERT,
	    "INSERT INTO egress (tenant, incarnation, exec_id, sub, proto, name, name_source, dialled, addr, "
	    "port, verdict, reason, bytes_up, bytes_down, started_at, ended_at) "
	    "VALUES (?1, coalesce(nullif(?2, 0), (SELECT incarnation FROM tenants WHERE name = ?1), 0), "
	    "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
	    Q_ARGS(Q_TEXT(e->tenant), Q_INT(e->incarnation), Q_TEXT(e->exec_id), Q_TEXT(e->sub),
		   Q_TEXT(e->proto), Q_TEXT(e->name), Q_TEXT(e->name_source), Q_TEXT(e->dialled),
		   Q_TEXT(e->addr), Q_INT(e->port), Q_TEXT(e->allowed ? "allowed" : "denied"),
		   Q_TEXT(e->reason), Q_INT((int64_t)e->bytes_up), Q_INT((int64_t)e->bytes_down),
		   Q_INT(e->started_at), Q_INT(e->ended_at)));
	int r = st ? store_step_done(st) : -SBX_E_STORE;
	if (r)
		store_note_write(s, r);
	return r;
}

size_t store_egress_write(struct store *s, struct store_wrec **b, size_t n, uint64_t *fail_seq)
{
	size_t failed = 0;
	uint64_t worst = 0;

	pthread_mutex_lock(&s->lock);
	int r = store_tx_begin(s);
	for (size_t i = 0; r == 0 && i < n; i++)
		if (insert_one(s, &rec_of(b[i])->e) < 0) {
			failed++;
			worst = b[i]->seq;
		}
	r = r ? r : store_tx_commit(s);
	if (r) {
		store_note_write(s, r);
		store_tx_rollback(s);
		failed = n; /* nothing of this batch is on disk */
		worst = b[n - 1]->seq;
	}
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n; i++)
		free(b[i]);
	if (failed && worst > *fail_seq)
		*fail_seq = worst;
	return failed;
}

/* ---- queries ---- */

struct egress_read {
	const struct store_egress_filter *f;
	store_egress_cb cb;
	void *ctx;
	int64_t last;
};

static const char *col_text(sqlite3_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st, i);
}

static void row_egress(sqlite3_stmt *st, struct store_egress *e)
{
	e->id = sqlite3_column_int64(st, 0);
	e->tenant = col_text(st, 1);
	e->incarnation = sqlite3_column_int64(st, 2);
	e->exec_id = col_text(st, 3);
	e->sub = col_text(st, 4);
	e->proto = col_text(st, 5);
	e->name = col_text(st, 6);
	e->name_source = col_text(st, 7);
	e->dialled = col_text(st, 8);
	e->addr = col_text(st, 9);
	e->port = (uint16_t)sqlite3_column_int(st, 10);
	e->allowed = strcmp(col_text(st, 11), "allowed") == 0;
	e->reason = col_text(st, 12);
	e->bytes_up = (uint64_t)sqlite3_column_int64(st, 13);
	e->bytes_down = (uint64_t)sqlite3_column_int64(st, 14);
	e->started_at = sqlite3_column_int64(st, 15);
	e->ended_at = sqlite3_column_int64(st, 16);
}

/* Only the filters given appear in the SQL (an exec's rows are read on
 * egress_exec); every value is a bound parameter. */
static int egress_read(sqlite3 *db, void *arg)
{
	struct egress_read *q = arg;
	const struct store_egress_filter *f = q->f;
	char sql[640];
	snprintf(
	    sql, sizeof sql,
	    "SELECT id, tenant, incarnation, exec_id, sub, proto, name, name_source, dialled, addr, port, "
	    "verdict, reason, bytes_up, bytes_down, started_at, ended_at FROM egress WHERE tenant = ?1 "
	    "AND id > ?2%s%s%s ORDER BY id ASC LIMIT ?6",
	    f->incarnation ? " AND incarnation = ?3" : "", f->exec_id ? " AND exec_id = ?4" : "",
	    f->verdict ? " AND verdict = ?5" : "");
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		sqlite3_finalize(st);
		return -SBX_E_STORE;
	}
	store_bind_text(st, 1, f->tenant);
	sqlite3_bind_int64(st, 2, f->after > 0 ? f->after : 0);
	sqlite3_bind_int64(st, 3, f->incarnation);
	store_bind_text(st, 4, f->exec_id);
	store_bind_text(st, 5, f->verdict);
	sqlite3_bind_int64(st, 6, f->limit ? (int64_t)f->limit : -1);
	int rc, r = 0;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_egress e;
		row_egress(st, &e);
		q->last = e.id;
		int c = q->cb(q->ctx, &e);
		if (c) {
			/* A positive value only stops; a negative errno is passed on. */
			r = c < 0 ? c : 0;
			rc = SQLITE_DONE;
			break;
		}
	}
	if (rc != SQLITE_DONE)
		r = store_rc(rc);
	sqlite3_finalize(st);
	return r;
}

int store_egress_query(struct store *s, const struct store_egress_filter *f, store_egress_cb cb, void *ctx,
		       int64_t *last_id)
{
	if (!f || !f->tenant || !cb)
		return -EINVAL;
	struct egress_read q = {f, cb, ctx, 0};
	int r = store_read(s, egress_read, &q);
	if (last_id)
		*last_id = q.last;
	return r;
}
