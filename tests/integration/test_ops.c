/* Operators: audit paging and formats, the CLI, metrics, retention. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"

static struct it_server srv;
static void acme_rows(void);

static int setup(void **state)
{
	(void)state;
	return it_start(&srv, NULL);
}

static int teardown(void **state)
{
	(void)state;
	it_cleanup(&srv);
	return 0;
}

static void get_ok(struct it_server *s, const char *path, const char *token, struct it_resp *r)
{
	assert_int_equal(it_http(s, "GET", path, token, NULL, NULL, 0, r), 0);
	if (r->status != 200)
		fprintf(stderr, "GET %s: %ld %.*s\n", path, r->status, (int)r->len, r->body);
	assert_int_equal(r->status, 200);
}

struct writer {
	struct it_server *s;
	volatile int stop;
	int n;
};

static void *keep_writing(void *arg)
{
	struct writer *w = arg;
	while (!w->stop) {
		struct it_resp r;
		if (it_http(w->s, "GET", "/healthz", NULL, NULL, NULL, 0, &r) == 0)
			w->n++;
		it_resp_free(&r);
	}
	return NULL;
}

/* Every record exactly once across pages, oldest first, while others write. */
static void test_audit_paging_under_writes(void **state)
{
	(void)state;
	char *admin = it_token(&srv, "ops", "admin audit:read");
	for (int i = 0; i < 120; i++) {
		struct it_resp r;
		char hdr[64];
		snprintf(hdr, sizeof hdr, "X-Request-Id: page-%03d", i);
		const char *h[] = { hdr, NULL };
		assert_int_equal(it_http(&srv, "GET", "/healthz", NULL, h, NULL, 0, &r), 0);
		it_resp_free(&r);
	}
	usleep(200000); /* the audit writer commits in groups */
	struct writer w = { .s = &srv };
	pthread_t th;
	pthread_create(&th, NULL, keep_writing, &w);
	int seen[120] = { 0 };
	long long last_id = 0;
	char *after = xstrdup("");
	for (int page = 0; page < 1000; page++) {
		char *path = xasprintf("/audit?limit=25&route=/healthz%s%s", *after ? "&after=" : "", after);
		struct it_resp r;
		get_ok(&srv, path, admin, &r);
		free(path);
		json_t *j = it_json(&r);
		size_t k;
		json_t *rec;
		json_array_foreach(json_object_get(j, "records"), k, rec)
		{
			long long id = json_integer_value(json_object_get(rec, "id"));
			assert_true(id > last_id); /* oldest first, never repeated */
			last_id = id;
			const char *rid = json_string_value(json_object_get(rec, "request_id"));
			int n = -1;
			if (rid && sscanf(rid, "page-%d", &n) == 1 && n >= 0 && n < 120)
				seen[n]++;
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
	w.stop = 1;
	pthread_join(th, NULL);
	for (int i = 0; i < 120; i++)
		assert_int_equal(seen[i], 1);
	assert_true(w.n > 0);
	free(after);
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

	const char *bad[] = { "/audit?since=yesterday", "/audit?limit=0", "/audit?outcome=maybe", "/audit?after=x",
			      "/audit?format=xml" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(it_http(&srv, "GET", bad[i], acme, NULL, NULL, 0, &r), 0);
		assert_int_equal(r.status, 400);
		assert_string_equal(it_error_code(&r), "bad_request");
		it_resp_free(&r);
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
	json_t *j = it_json(&r);
	size_t k;
	json_t *rec;
	assert_true(json_array_size(json_object_get(j, "records")) > 0);
	json_array_foreach(json_object_get(j, "records"), k, rec)
		assert_string_equal(json_string_value(json_object_get(rec, "tenant")), "globex");
	json_decref(j);
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

static void test_retention(void **state)
{
	(void)state;
	struct it_server s2;
	const char *extra[] = { "--set", "retention-max-age-s=2", "--set", "retention-interval-s=1", NULL };
	assert_int_equal(it_start(&s2, extra), 0);
	char *t = it_token(&s2, "acme", "exec fs:read audit:read");
	const char *body = "{\"command\": \"head -c 5000 /dev/zero | tr '\\\\0' x\", \"max_output_bytes\": 256, \"id\": \"old1\"}";
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_audit_paging_under_writes),
		cmocka_unit_test(test_audit_ndjson_and_filters),
		cmocka_unit_test(test_admin_tenant_filter),
		cmocka_unit_test(test_cli_formats),
		cmocka_unit_test(test_metrics_move),
		cmocka_unit_test(test_retention),
	};
	return cmocka_run_group_tests_name("operators", tests, setup, teardown);
}
