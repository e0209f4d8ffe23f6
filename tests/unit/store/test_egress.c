/* Unit tests of store/egress.c: the egress ledger on a real SQLite file. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "common/errors.h"
#include "store/store.h"
#include "store/db.h"
#include "store/store.h"
#include "unit.h"

struct fx {
	char dir[64];
	char path[128];
	struct store *s;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	char err[256];

	if (!f || unit_tmpdir(f->dir, sizeof f->dir, "egress")) {
		free(f);
		return -1;
	}
	snprintf(f->path, sizeof f->path, "%s/sandboxd.db", f->dir);
	if (store_open(&f->s, f->path, true, err, sizeof err) != 0) {
		print_error("store_open: %s\n", err);
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	store_close(&f->s);
	unit_rm_rf(f->dir);
	free(f);
	return 0;
}

static struct store_egress rec(const char *tenant, const char *exec_id, bool allowed, int64_t ended)
{
	return (struct store_egress){
	    .tenant = tenant,
	    .incarnation = 1,
	    .exec_id = exec_id,
	    .sub = "agent-7",
	    .proto = "tls",
	    .name = "api.example.com",
	    .name_source = "sni",
	    .dialled = "198.18.0.7:443",
	    .addr = allowed ? "192.0.2.10:443" : NULL,
	    .port = 443,
	    .allowed = allowed,
	    .reason = allowed ? NULL : "not in allowlist",
	    .bytes_up = 517,
	    .bytes_down = 1u << 20,
	    .started_at = ended - 10,
	    .ended_at = ended,
	};
}

struct got {
	struct store_egress e[64];
	char name[64][64], reason[64][64], addr[64][64];
	size_t n;
};

static int collect(void *ctx, const struct store_egress *e)
{
	struct got *g = ctx;
	if (g->n == 64)
		return 1;
	g->e[g->n] = *e;
	snprintf(g->name[g->n], 64, "%s", e->name ? e->name : "(null)");
	snprintf(g->reason[g->n], 64, "%s", e->reason ? e->reason : "(null)");
	snprintf(g->addr[g->n], 64, "%s", e->addr ? e->addr : "(null)");
	g->n++;
	return 0;
}

static size_t count(struct store *s, struct store_egress_filter f)
{
	struct got g = {.n = 0};
	assert_int_equal(store_egress_query(s, &f, collect, &g, NULL), 0);
	return g.n;
}

/* A record comes back as given, its NULLs NULL, once flushed. */
static void test_append_roundtrip(void **state)
{
	struct fx *f = *state;
	struct store_egress a = rec("acme", "e1", true, 5000), d = rec("acme", "e1", false, 6000);
	d.sub = NULL;
	d.name = NULL;
	d.name_source = NULL;
	assert_int_equal(store_egress_append(f->s, &a), 0);
	assert_int_equal(store_egress_append(f->s, &d), 0);
	assert_int_equal(store_egress_flush(f->s), 0);

	struct got g = {.n = 0};
	int64_t last = 0;
	struct store_egress_filter q = {.tenant = "acme", .exec_id = "e1"};
	assert_int_equal(store_egress_query(f->s, &q, collect, &g, &last), 0);
	assert_int_equal(g.n, 2);
	assert_true(g.e[0].id < g.e[1].id);
	assert_int_equal(last, g.e[1].id);
	assert_true(g.e[0].allowed);
	assert_string_equal(g.name[0], "api.example.com");
	assert_string_equal(g.addr[0], "192.0.2.10:443");
	assert_string_equal(g.reason[0], "(null)");
	assert_int_equal(g.e[0].port, 443);
	assert_int_equal(g.e[0].bytes_up, 517);
	assert_int_equal(g.e[0].bytes_down, 1u << 20);
	assert_int_equal(g.e[0].started_at, 4990);
	assert_int_equal(g.e[0].ended_at, 5000);
	assert_int_equal(g.e[0].incarnation, 1);
	assert_false(g.e[1].allowed);
	assert_string_equal(g.reason[1], "not in allowlist");
	assert_string_equal(g.name[1], "(null)");
	assert_string_equal(g.addr[1], "(null)");
	assert_int_equal(store_egress_failures(f->s), 0);
	/* Without a tenant nothing is queued. */
	a.tenant = NULL;
	assert_int_equal(store_egress_append(f->s, &a), -EINVAL);
}

/* Each filter narrows: another tenant, another life, another exec and the
 * other verdict are never in the answer. */
static void test_query_filters(void **state)
{
	struct fx *f = *state;
	struct store_egress v[] = {
	    rec("acme", "e1", true, 1000), rec("acme", "e1", false, 1001), rec("acme", "e2", false, 1002),
	    rec("bob", "e1", false, 1003), rec("acme", "e1", false, 1004),
	};
	v[4].incarnation = 2; /* a later life of the name */
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		assert_int_equal(store_egress_append(f->s, &v[i]), 0);
	assert_int_equal(store_egress_flush(f->s), 0);

	assert_int_equal(count(f->s, (struct store_egress_filter){.tenant = "acme"}), 4);
	assert_int_equal(count(f->s, (struct store_egress_filter){.tenant = "acme", .incarnation = 1}), 3);
	assert_int_equal(count(f->s, (struct store_egress_filter){.tenant = "acme", .exec_id = "e1"}), 3);
	assert_int_equal(
	    count(f->s, (struct store_egress_filter){.tenant = "acme", .incarnation = 1, .exec_id = "e1"}),
	    2);
	assert_int_equal(count(f->s,
			       (struct store_egress_filter){
				   .tenant = "acme", .incarnation = 1, .exec_id = "e1", .verdict = "denied"}),
			 1);
	assert_int_equal(count(f->s, (struct store_egress_filter){.tenant = "acme", .verdict = "allowed"}),
			 1);
	assert_int_equal(count(f->s, (struct store_egress_filter){.tenant = "bob"}), 1);
	assert_int_equal(count(f->s, (struct store_egress_filter){.tenant = "nobody"}), 0);
	struct store_egress_filter none = {.tenant = NULL};
	assert_int_equal(store_egress_query(f->s, &none, collect, &(struct got){.n = 0}, NULL), -EINVAL);
}

/* Pages by the cursor: every record once, in order, and nothing after the
 * last page. */
static void test_cursor_pages(void **state)
{
	struct fx *f = *state;
	for (int i = 0; i < 25; i++) {
		struct store_egress e = rec("acme", "e1", i % 3 != 0, 1000 + i);
		assert_int_equal(store_egress_append(f->s, &e), 0);
	}
	assert_int_equal(store_egress_flush(f->s), 0);
	struct store_egress_filter q = {.tenant = "acme", .exec_id = "e1", .limit = 10};
	int64_t prev_end = 0, seen = 0;
	for (int page = 0; page < 3; page++) {
		struct got g = {.n = 0};
		int64_t last = 0;
		assert_int_equal(store_egress_query(f->s, &q, collect, &g, &last), 0);
		assert_int_equal(g.n, page < 2 ? 10 : 5);
		for (size_t i = 0; i < g.n; i++) {
			assert_true(g.e[i].ended_at > prev_end);
			prev_end = g.e[i].ended_at;
		}
		seen += (int64_t)g.n;
		q.after = last;
	}
	assert_int_equal(seen, 25);
	assert_int_equal(count(f->s, q), 0);
}

/* Retention takes egress rows by their end with the same cutoff as the
 * audit's, and their store-budget count goes with them. */
static void test_retention_prune(void **state)
{
	struct fx *f = *state;
	struct store_egress old = rec("acme", "e1", false, 1000), young = rec("acme", "e2", true, 9000);
	assert_int_equal(store_egress_append(f->s, &old), 0);
	assert_int_equal(store_egress_append(f->s, &young), 0);
	assert_int_equal(store_egress_flush(f->s), 0);
	int64_t rows = 0, bytes = 0;
	assert_int_equal(store_usage_get(f->s, "acme", 1, &rows, &bytes), 0);
	assert_int_equal(rows, 2);
	assert_true(bytes > 2 * 128);

	int64_t deleted = 0;
	assert_int_equal(store_prune(f->s, 5000, 0, 100, NULL, NULL, &deleted), 0);
	assert_int_equal(deleted, 1);
	assert_int_equal(count(f->s, (struct store_egress_filter){.tenant = "acme", .exec_id = "e1"}), 0);
	assert_int_equal(count(f->s, (struct store_egress_filter){.tenant = "acme", .exec_id = "e2"}), 1);
	assert_int_equal(store_usage_get(f->s, "acme", 1, &rows, &bytes), 0);
	assert_int_equal(rows, 1);
	/* max-rows keeps the newest only. */
	struct store_egress newer = rec("acme", "e3", true, 9500);
	assert_int_equal(store_egress_append(f->s, &newer), 0);
	assert_int_equal(store_egress_flush(f->s), 0);
	assert_int_equal(store_prune(f->s, 0, 1, 100, NULL, NULL, &deleted), 0);
	assert_int_equal(count(f->s, (struct store_egress_filter){.tenant = "acme"}), 1);
	assert_int_equal(count(f->s, (struct store_egress_filter){.tenant = "acme", .exec_id = "e3"}), 1);
}

static int tally(void *ctx, const struct store_egress *e)
{
	(void)e;
	(*(size_t *)ctx)++;
	return 0;
}

static size_t queued(struct store *s)
{
	pthread_mutex_lock(&s->alock);
	size_t n = s->wq[STORE_WK_EGRESS].n;
	pthread_mutex_unlock(&s->alock);
	return n;
}

/* A writer stuck on the disk (its write lock held here) never blocks an
 * appender: past the bound a record is refused at once and counted, and
 * the audit's own queue still takes records. Once the disk is back,
 * everything accepted is written. */
static void test_queue_bound(void **state)
{
	struct fx *f = *state;
	struct store_egress e = rec("acme", "e1", false, 1000);
	f->s->eq_max = 1000; /* EGRESS_QUEUE_MAX's records would take seconds to write */
	pthread_mutex_lock(&f->s->lock);
	assert_int_equal(store_egress_append(f->s, &e), 0);
	/* Wait (bounded) until the writer took it and is stuck on the lock. */
	time_t deadline = time(NULL) + 10;
	while (queued(f->s) != 0 && time(NULL) < deadline)
		sched_yield();
	assert_int_equal(queued(f->s), 0);
	size_t accepted = 1;
	int rc = 0;
	while ((rc = store_egress_append(f->s, &e)) == 0 && accepted < 200000)
		accepted++;
	assert_int_equal(rc, -SBX_E_STORE);
	assert_int_equal(accepted, 1000 + 1);
	assert_int_equal(store_egress_failures(f->s), 1);
	struct store_audit a = {.at = 1,
				.tenant = "acme",
				.request_id = "r",
				.method = "GET",
				.route = "/x",
				.status = 200,
				.outcome = "ok"};
	assert_int_equal(store_audit_append(f->s, &a), 0);
	pthread_mutex_unlock(&f->s->lock);

	assert_int_equal(store_egress_flush(f->s), 0);
	struct store_egress_filter q = {.tenant = "acme"};
	size_t total = 0;
	assert_int_equal(store_egress_query(f->s, &q, tally, &total, NULL), 0);
	assert_int_equal(total, accepted);
	assert_int_equal(store_egress_failures(f->s), 1);
}

/* Incarnation 0: the writer stamps the living tenant's life; a tenant
 * the store does not know gets 0. */
static void test_incarnation_at_write(void **state)
{
	struct fx *f = *state;
	struct store_tenant t = {.alg = "HS256", .key = (unsigned char *)"secret", .key_len = 6};
	snprintf(t.name, sizeof t.name, "acme");
	assert_int_equal(store_tenant_add(f->s, &t, -1), 0);
	assert_true(t.incarnation > 0);
	struct store_egress e = rec("acme", "e1", false, 1000), g = rec("ghost", "e1", false, 1000);
	e.incarnation = g.incarnation = 0;
	assert_int_equal(store_egress_append(f->s, &e), 0);
	assert_int_equal(store_egress_append(f->s, &g), 0);
	assert_int_equal(store_egress_flush(f->s), 0);
	struct got r = {.n = 0};
	struct store_egress_filter q = {.tenant = "acme", .incarnation = t.incarnation};
	assert_int_equal(store_egress_query(f->s, &q, collect, &r, NULL), 0);
	assert_int_equal(r.n, 1);
	int64_t rows = 0, bytes = 0;
	assert_int_equal(store_usage_get(f->s, "acme", t.incarnation, &rows, &bytes), 0);
	assert_int_equal(rows, 1);
	r.n = 0;
	q = (struct store_egress_filter){.tenant = "ghost"};
	assert_int_equal(store_egress_query(f->s, &q, collect, &r, NULL), 0);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.e[0].incarnation, 0);
}

static int audit_count(void *ctx, const struct store_audit *a)
{
	(void)a;
	(*(size_t *)ctx)++;
	return 0;
}

static size_t audits(struct store *s, const char *egress)
{
	size_t n = 0;
	struct store_audit_filter q = {.tenant = "acme", .egress = egress};
	assert_int_equal(store_audit_query(s, &q, audit_count, &n, NULL), 0);
	return n;
}

/* GET /audit?egress=: only the rows of requests whose exec made a refused
 * (or any) egress record, of the same tenant. */
static void test_audit_egress_filter(void **state)
{
	struct fx *f = *state;
	const char *execs[] = {"e-denied", "e-allowed", "e-quiet", NULL};
	for (size_t i = 0; i < 4; i++) {
		struct store_audit a = {.at = 100 + (int64_t)i,
					.tenant = "acme",
					.request_id = "r",
					.method = "POST",
					.route = "/exec",
					.status = 200,
					.outcome = "ok",
					.exec_id = execs[i]};
		assert_int_equal(store_audit_append(f->s, &a), 0);
	}
	struct store_egress v[] = {rec("acme", "e-denied", false, 200), rec("acme", "e-denied", true, 201),
				   rec("acme", "e-allowed", true, 202), rec("bob", "e-quiet", false, 203)};
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(store_egress_append(f->s, &v[i]), 0);
	assert_int_equal(store_egress_flush(f->s), 0);
	assert_int_equal(store_audit_flush(f->s), 0);
	assert_int_equal(audits(f->s, NULL), 4);
	assert_int_equal(audits(f->s, "denied"), 1);
	assert_int_equal(audits(f->s, "any"), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    UNIT_TEST_FX(test_append_roundtrip),    UNIT_TEST_FX(test_query_filters),
	    UNIT_TEST_FX(test_cursor_pages),	    UNIT_TEST_FX(test_retention_prune),
	    UNIT_TEST_FX(test_queue_bound),	    UNIT_TEST_FX(test_incarnation_at_write),
	    UNIT_TEST_FX(test_audit_egress_filter),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
