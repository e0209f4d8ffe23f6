/* Operators: audit paging and formats, the CLI, metrics, retention. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "harness.h"

static struct it_server srv;
static void acme_rows(void);

IT_DEFAULT_SERVER_FIXTURE(srv)

static void get_ok(struct it_server *s, const char *path, const char *token, struct it_resp *r)
{
	assert_int_equal(it_http(s, "GET", path, token, NULL, NULL, 0, r), 0);
	if (r->status != 200)
		fprintf(stderr, "GET %s: %ld %.*s\n", path, r->status, (int)r->len, r->body);
	assert_int_equal(r->status, 200);
}

struct writer {
	struct it_server *s;
	const char *token;
	volatile int stop;
	int n;
};

static void *keep_writing(void *arg)
{
	struct writer *w = arg;
	while (!w->stop) {
		struct it_resp r;
		if (it_http(w->s, "GET", "/sessions", w->token, NULL, NULL, 0, &r) == 0)
			w->n++;
		it_resp_free(&r);
	}
	return NULL;
}

/* Every record exactly once across pages, oldest first, while others write. */
/* GET path as token with "X-Request-Id: <prefix>-<i, 3 digits>"; returns
 * the status. */
static long get_with_id(const char *path, const char *token, const char *prefix, int i)
{
	char *hdr = xasprintf("X-Request-Id: %s-%03d", prefix, i);
	const char *h[] = {hdr, NULL};
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", path, token, h, NULL, 0, &r), 0);
	free(hdr);
	long st = r.status;
	it_resp_free(&r);
	return st;
}

/* GET /audit?<query> page after page (following "next"), at most
 * max_pages pages, calling each on every record in order. */
static void audit_walk(struct it_server *s, const char *admin, const char *query, int max_pages,
		       void (*each)(json_t *rec, void *ud), void *ud)
{
	char *after = xstrdup("");
	for (int page = 0; page < max_pages; page++) {
		char *path = xasprintf("/audit?%s%s%s", query, *after ? "&after=" : "", after);
		struct it_resp r;
		get_ok(s, path, admin, &r);
		free(path);
		json_t *j = it_json(&r);
		size_t k;
		json_t *rec;
		json_array_foreach(json_object_get(j, "records"), k, rec) {
			each(rec, ud);
		}
		json_t *next = json_object_get(j, "next");
		bool more = json_is_string(next);
		free(after);
		after = xstrdup(more ? json_string_value(next) : "");
		json_decref(j);
		it_resp_free(&r);
		if (!more)
			break;
	}
	free(after);
}

/* Records of the paging test: ids strictly rising (oldest first, never
 * repeated), and each "page-N" request id counted. */
struct paging {
	int *seen;
	long long last_id;
};

static void on_paged(json_t *rec, void *ud)
{
	struct paging *pg = ud;
	long long id = json_integer_value(json_object_get(rec, "id"));
	assert_true(id > pg->last_id); /* oldest first, never repeated */
	pg->last_id = id;
	const char *rid = json_string_value(json_object_get(rec, "request_id"));
	int n = -1;
	if (rid && sscanf(rid, "page-%d", &n) == 1 && n >= 0 && n < 120)
		pg->seen[n]++;
}

static void test_audit_paging_under_writes(void **state)
{
	(void)state;
	char *admin = it_token(&srv, "ops", "admin audit:read");
	char *acme = it_token(&srv, "acme", NULL);
	for (int i = 0; i < 120; i++) {
		get_with_id("/sessions", acme, "page", i);
	}
	usleep(200000); /* the audit writer commits in groups */
	struct writer w = {.s = &srv, .token = acme};
	pthread_t th;
	pthread_create(&th, NULL, keep_writing, &w);
	int seen[120] = {0};
	struct paging pg = {.seen = seen};
	audit_walk(&srv, admin, "limit=25&route=/sessions", 1000, on_paged, &pg);
	w.stop = 1;
	pthread_join(th, NULL);
	for (int i = 0; i < 120; i++)
		assert_int_equal(seen[i], 1);
	assert_true(w.n > 0);
	free(acme);
	free(admin);
}

static void test_audit_ndjson_and_filters(void **state)
{
	(void)state;
	acme_rows();
	char *acme = it_token(&srv, "acme", "audit:read");
	struct it_resp r;
	get_ok(&srv, "/audit?format=ndjson", acme, &r);
	char *ct = it_header(&r, "Content-Type");
	assert_string_equal(ct, "application/x-ndjson");
	free(ct);
	int lines = 0;
	for (char *p = r.body, *nl; p && *p; p = nl + 1) {
		nl = strchr(p, '\n');
		assert_non_null(nl);
		json_t *j = json_loadb(p, (size_t)(nl - p), 0, NULL);
		assert_non_null(j);
		assert_string_equal(json_string_value(json_object_get(j, "tenant")), "acme");
		json_decref(j);
		lines++;
	}
	assert_true(lines > 0);
	it_resp_free(&r);

	get_ok(&srv, "/audit?outcome=denied", acme, &r);
	json_t *j = it_json(&r);
	size_t k;
	json_t *rec;
	json_array_foreach(json_object_get(j, "records"), k, rec)
		assert_string_equal(json_string_value(json_object_get(rec, "outcome")), "denied");
	json_decref(j);
	it_resp_free(&r);

	const char *bad[] = {"/audit?since=yesterday", "/audit?limit=0", "/audit?outcome=maybe",
			     "/audit?after=x", "/audit?format=xml"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		it_expect_error_at(&srv, "GET", bad[i], acme, 400, "bad_request");
	}
	/* a future since gives nothing */
	get_ok(&srv, "/audit?since=2999-01-01T00:00:00Z", acme, &r);
	j = it_json(&r);
	assert_int_equal(json_array_size(json_object_get(j, "records")), 0);
	assert_true(json_is_null(json_object_get(j, "next")));
	json_decref(j);
	it_resp_free(&r);
	free(acme);
}

static void test_admin_tenant_filter(void **state)
{
	(void)state;
	char *admin = it_token(&srv, "ops", "admin audit:read");
	char *globex = it_token(&srv, "globex", "audit:read");
	struct it_resp r;
	get_ok(&srv, "/audit?limit=1", globex, &r); /* makes a globex row */
	it_resp_free(&r);
	usleep(200000);
	get_ok(&srv, "/audit?tenant=globex&limit=1000", admin, &r);
	it_expect_audit_tenant(&r, "globex");
	it_resp_free(&r);
	free(admin);
	free(globex);
}

static void test_cli_formats(void **state)
{
	(void)state;
	int st = 0;
	acme_rows();
	char *out = it_cli(&srv, &st, "audit --limit 5");
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "OUTCOME"));
	free(out);
	out = it_cli(&srv, &st, "audit --limit 5 --format json");
	assert_int_equal(st, 0);
	json_t *j = json_loads(out, 0, NULL);
	assert_true(json_is_array(j));
	assert_int_equal(json_array_size(j), 5);
	json_decref(j);
	free(out);
	out = it_cli(&srv, &st, "audit --tenant acme --limit 3 --format ndjson");
	assert_int_equal(st, 0);
	int lines = 0;
	for (char *p = out; *p; p++)
		lines += *p == '\n';
	assert_int_equal(lines, 3);
	assert_null(strstr(out, "\"tenant\":\"globex\""));
	free(out);
	free(it_cli(&srv, &st, "audit --format yaml"));
	assert_int_equal(st, 2);
}

/* The value of a sample line (not of its # HELP line). */
static long long metric(const char *body, const char *name)
{
	char *needle = xasprintf("\n%s", name);
	const char *p = strstr(body, needle);
	free(needle);
	if (!p)
		return -1;
	return strtoll(p + 1 + strlen(name), NULL, 10);
}

/* A few audited requests of acme's, committed. */
static void acme_rows(void)
{
	char *t = it_token(&srv, "acme", "audit:read");
	for (int i = 0; i < 4; i++) {
		struct it_resp r;
		assert_int_equal(it_http(&srv, "GET", "/audit?limit=1", t, NULL, NULL, 0, &r), 0);
		it_resp_free(&r);
	}
	free(t);
	usleep(200000);
}

static void test_metrics_move(void **state)
{
	(void)state;
	char *obs = it_token(&srv, "acme", "audit:read");
	char *run = it_token(&srv, "acme", "exec");
	struct it_resp r;
	get_ok(&srv, "/metrics", obs, &r);
	long long before = metric(r.body, "sandboxd_execs_started_total ");
	assert_true(before >= 0);
	it_resp_free(&r);
	const char *body = "{\"command\": \"true\"}";
	assert_int_equal(it_http(&srv, "POST", "/exec", run, NULL, body, strlen(body), &r), 0);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
	get_ok(&srv, "/metrics", obs, &r);
	assert_int_equal(metric(r.body, "sandboxd_execs_started_total "), before + 1);
	assert_true(metric(r.body, "sandboxd_execs_finished_total{outcome=\"exited\"} ") >= 1);
	assert_non_null(strstr(r.body, "# HELP sandboxd_sse_subscribers"));
	it_resp_free(&r);
	free(obs);
	free(run);
}

/* Every tenant= label of the /metrics text as token is tenant's (or, with
 * tenant NULL, the labels include each of want). */
static void metrics_tenants(const char *token, const char *tenant, const char *const *want)
{
	struct it_resp r;
	get_ok(&srv, "/metrics", token, &r);
	for (const char *p = r.body; (p = strstr(p, "tenant=\"")); p++) {
		p += strlen("tenant=\"");
		if (tenant && (strncmp(p, tenant, strlen(tenant)) != 0 || p[strlen(tenant)] != '"'))
			fail_msg("a series of another tenant shown to %s: %.40s", tenant, p);
	}
	for (size_t i = 0; want && want[i]; i++) {
		char *label = xasprintf("sandboxd_tenant_processes_budget{tenant=\"%s\"} ", want[i]);
		if (!strstr(r.body, label))
			fail_msg("%s missing", label);
		free(label);
	}
	it_resp_free(&r);
}

/* A tenant's own token with audit:read sees the global series and its own
 * tenant's, never another tenant's usage; an operator sees every tenant. */
static void test_metrics_own_tenant(void **state)
{
	(void)state;
	const char *body = "{\"command\": \"true\"}";
	const char *const tenants[] = {"acme", "globex", "ops", NULL};
	for (size_t i = 0; i < 3; i++) {
		char *run = it_token(&srv, tenants[i], "exec");
		struct it_resp r;
		assert_int_equal(it_http(&srv, "POST", "/exec", run, NULL, body, strlen(body), &r), 0);
		it_expect_status(&r, 200);
		it_resp_free(&r);
		free(run);
	}
	char *acme = it_token(&srv, "acme", "audit:read");
	char *globex = it_token(&srv, "globex", "audit:read exec");
	char *ops = it_token(&srv, "ops", "admin audit:read");
	const char *const only_acme[] = {"acme", NULL}, *const only_globex[] = {"globex", NULL};
	metrics_tenants(acme, "acme", only_acme);
	metrics_tenants(globex, "globex", only_globex);
	metrics_tenants(ops, NULL, tenants);
	struct it_resp r;
	get_ok(&srv, "/metrics", acme, &r);
	assert_true(metric(r.body, "sandboxd_execs_started_total ") >= 3); /* the global ones stay */
	it_resp_free(&r);
	free(acme);
	free(globex);
	free(ops);
}

static void test_retention(void **state)
{
	(void)state;
	struct it_server s2;
	const char *extra[] = {"--set", "retention-max-age-s=2", "--set", "retention-interval-s=1", NULL};
	assert_int_equal(it_start(&s2, extra), 0);
	char *t = it_token(&s2, "acme", "exec fs:read audit:read");
	const char *body = "{\"command\": \"head -c 5000 /dev/zero | tr '\\\\0' x\", \"max_output_bytes\": "
			   "256, \"id\": \"old1\"}";
	struct it_resp r;
	assert_int_equal(it_http(&s2, "POST", "/exec", t, NULL, body, strlen(body), &r), 0);
	assert_int_equal(r.status, 200);
	json_t *j = it_json(&r);
	const char *spill = json_string_value(json_object_get(j, "stdout_spill"));
	assert_non_null(spill);
	char *path = xasprintf("/fs/exists?path=%s", spill);
	json_decref(j);
	it_resp_free(&r);
	get_ok(&s2, path, t, &r);
	assert_non_null(strstr(r.body, "true"));
	it_resp_free(&r);

	bool gone = false;
	for (int i = 0; i < 100 && !gone; i++) {
		usleep(100000);
		assert_int_equal(it_http(&s2, "GET", "/exec/old1", t, NULL, NULL, 0, &r), 0);
		gone = r.status == 404;
		it_resp_free(&r);
	}
	assert_true(gone);
	get_ok(&s2, path, t, &r);
	assert_non_null(strstr(r.body, "false"));
	it_resp_free(&r);
	/* no audit record older than the retention (plus one interval) stays */
	get_ok(&s2, "/audit?limit=1000&until=2000-01-01T00:00:00Z", t, &r);
	j = it_json(&r);
	assert_int_equal(json_array_size(json_object_get(j, "records")), 0);
	json_decref(j);
	it_resp_free(&r);
	free(path);
	free(t);
	it_cleanup(&s2);
}

static long long metric_now(struct it_server *s, const char *token, const char *name)
{
	struct it_resp r;
	get_ok(s, "/metrics", token, &r);
	long long v = metric(r.body, name);
	it_resp_free(&r);
	return v;
}

/* Audit rows on route whose request id starts with prefix (every page). */
struct prefix_count {
	const char *prefix;
	int n;
};

static void on_counted(json_t *rec, void *ud)
{
	struct prefix_count *c = ud;
	const char *rid = json_string_value(json_object_get(rec, "request_id"));
	if (rid && strncmp(rid, c->prefix, strlen(c->prefix)) == 0)
		c->n++;
}

static int count_rows(struct it_server *s, const char *admin, const char *route, const char *prefix)
{
	struct prefix_count c = {.prefix = prefix};
	char *query = xasprintf("limit=1000&route=%s", route);
	audit_walk(s, admin, query, INT_MAX, on_counted, &c);
	free(query);
	return c.n;
}

/* Send an audited request of acme's with this id and wait (10 s at most)
 * until its row is committed: the audit writer keeps order, so every row
 * queued before it is committed too. */
static void audit_barrier(struct it_server *s, const char *admin, const char *rid)
{
	char *acme = it_token(s, "acme", NULL);
	char *hdr = xasprintf("X-Request-Id: %s", rid);
	const char *h[] = {hdr, NULL};
	struct it_resp r;
	assert_int_equal(it_http(s, "GET", "/sessions", acme, h, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
	int64_t deadline = mono_ms() + 10000;
	while (count_rows(s, admin, "/sessions", rid) == 0) {
		assert_true(mono_ms() < deadline);
		usleep(20000);
	}
	free(hdr);
	free(acme);
}

/* Health probes are counted, not audited (issue 11: 5,867 /healthz in
 * 10 s wrote 5,867 rows). */
static void test_probes_not_audited(void **state)
{
	(void)state;
	char *admin = it_token(&srv, "ops", "admin audit:read");
	const char *hz = "sandboxd_http_requests_total{route=\"GET /healthz\",status=\"200\"} ";
	const char *rz = "sandboxd_http_requests_total{route=\"GET /readyz\",status=\"200\"} ";
	/* -1: no such line yet (nothing counted) */
	long long hz0 = metric_now(&srv, admin, hz), rz0 = metric_now(&srv, admin, rz);
	hz0 = hz0 < 0 ? 0 : hz0;
	rz0 = rz0 < 0 ? 0 : rz0;
	for (int i = 0; i < 500; i++) {
		assert_int_equal(get_with_id(i % 10 ? "/healthz" : "/readyz", NULL, "probe", i), 200);
	}
	audit_barrier(&srv, admin, "barrier-probe");
	assert_int_equal(count_rows(&srv, admin, "/healthz", ""), 0);
	assert_int_equal(count_rows(&srv, admin, "/readyz", ""), 0);
	assert_int_equal(metric_now(&srv, admin, hz), hz0 + 450);
	assert_int_equal(metric_now(&srv, admin, rz), rz0 + 50);
	free(admin);
}

/* Requests naming no tenant are audited at most at the per-address rate
 * (default 10/s, burst 20), and all counted; a tenant's requests from the
 * same address are still audited, every one. */
static void test_unauthenticated_audit_rate_limited(void **state)
{
	(void)state;
	char *admin = it_token(&srv, "ops", "admin audit:read");
	const char *d401 = "sandboxd_http_requests_total{route=\"GET /sessions\",status=\"401\"} ";
	long long f0 = metric_now(&srv, admin, d401);
	long long s0 = metric_now(&srv, admin, "sandboxd_audit_suppressed_total ");
	assert_true(s0 >= 0);
	if (f0 < 0)
		f0 = 0;
	int64_t t0 = mono_ms();
	for (int i = 0; i < 500; i++) {
		assert_int_equal(get_with_id("/sessions", i % 2 ? "bogus" : NULL, "flood", i), 401);
	}
	int64_t elapsed = mono_ms() - t0;
	/* the bucket is empty now: a tenant's requests still get their rows */
	char *acme = it_token(&srv, "acme", NULL);
	for (int i = 0; i < 30; i++) {
		assert_int_equal(get_with_id("/sessions", acme, "tenant", i), 200);
	}
	audit_barrier(&srv, admin, "barrier-flood");
	int audited = count_rows(&srv, admin, "/sessions", "flood-");
	long long suppressed = metric_now(&srv, admin, "sandboxd_audit_suppressed_total ") - s0;
	/* the bound follows the time the flood took, so a slow machine only loosens it */
	long long bound = 20 + (10 * elapsed + 999) / 1000;
	fprintf(stderr, "flood: %d audited, %lld suppressed in %lld ms (bound %lld)\n", audited, suppressed,
		(long long)elapsed, bound);
	assert_true(audited >= 1);
	assert_true(audited <= bound);
	assert_int_equal(audited + suppressed, 500);
	assert_int_equal(metric_now(&srv, admin, d401), f0 + 500);
	assert_int_equal(count_rows(&srv, admin, "/sessions", "tenant-"), 30);
	free(acme);
	free(admin);
}

/* The default retention (30 days) is in force: an old row goes at the
 * next pass, a younger one stays. */
static void test_default_retention(void **state)
{
	(void)state;
	struct it_server s2;
	const char *extra[] = {"--set", "retention-interval-s=1", NULL};
	assert_int_equal(it_start(&s2, extra), 0);
	int64_t day = 86400000;
	char *cmd =
	    xasprintf("sqlite3 -cmd '.timeout 10000' '%s/sandboxd.db' \"insert into audit(at, request_id, "
		      "method, route, status, outcome) values (%lld, 'old-31d', 'GET', '/x', 200, 'ok'), "
		      "(%lld, 'young-29d', 'GET', '/x', 200, 'ok')\"",
		      s2.dir, (long long)(now_ms() - 31 * day), (long long)(now_ms() - 29 * day));
	assert_int_equal(system(cmd), 0);
	free(cmd);
	char *admin = it_token(&s2, "ops", "admin audit:read");
	assert_int_equal(count_rows(&s2, admin, "/x", "young-29d"), 1);
	int64_t deadline = mono_ms() + 30000;
	while (count_rows(&s2, admin, "/x", "old-31d") != 0) {
		assert_true(mono_ms() < deadline);
		usleep(50000);
	}
	assert_int_equal(count_rows(&s2, admin, "/x", "young-29d"), 1);
	free(admin);
	it_cleanup(&s2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_audit_paging_under_writes),
	    cmocka_unit_test(test_audit_ndjson_and_filters),
	    cmocka_unit_test(test_admin_tenant_filter),
	    cmocka_unit_test(test_cli_formats),
	    cmocka_unit_test(test_metrics_move),
	    cmocka_unit_test(test_metrics_own_tenant),
	    cmocka_unit_test(test_retention),
	    cmocka_unit_test(test_probes_not_audited),
	    cmocka_unit_test(test_unauthenticated_audit_rate_limited),
	    cmocka_unit_test(test_default_retention),
	};
	return cmocka_run_group_tests_name("operators", tests, setup, teardown);
}
