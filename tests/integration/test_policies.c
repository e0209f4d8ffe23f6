/* Tenant policies (issue 16): set by the command line and by the admin
 * route, they apply to the tenant's next command (limits, caps,
 * concurrency, backend) and are recorded in its exec row; only operators
 * change them, and every change is audited with who, old and new. One
 * server offers bwrap and local: two tenants run on different backends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

static struct it_server srv;
static char *tok, *tok_globex, *tok_admin, *tok_ops_read, *tok_acme_admin;

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", "backends=bwrap,local", "--allow-unsafe-local", NULL};
	if (it_start(&srv, extra) < 0)
		return -1;
	tok = it_token(&srv, "acme", NULL);
	tok_globex = it_token(&srv, "globex", NULL);
	tok_admin = it_token_sub(&srv, "ops", "admin audit:read", "olga");
	tok_ops_read = it_token(&srv, "ops", "audit:read");
	tok_acme_admin = it_token(&srv, "acme", "admin exec");
	return tok && tok_globex && tok_admin && tok_ops_read && tok_acme_admin ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish(&srv);
	free(tok);
	free(tok_globex);
	free(tok_admin);
	free(tok_ops_read);
	free(tok_acme_admin);
	return rc;
}

/* GET /exec/{id} of a result; the view (new reference). */
static json_t *view_of(const char *t, json_t *res)
{
	char path[128];
	snprintf(path, sizeof path, "/exec/%s", jstr(res, "id"));
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, t, path, &v), 200);
	assert_non_null(v);
	return v;
}

/* The CLI sets a timeout cap; the running server's next command has it. */
static void test_cli_timeout_cap_next_command(void **state)
{
	(void)state;
	assert_int_equal(pol_cli(&srv, "acme", "timeout_max_s=1"), 0);
	long t0 = it_now_ms();
	json_t *res = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:i}", "command", "sleep 20", "timeout_s", 30));
	assert_true(jtrue(res, "timed_out"));
	assert_true(it_now_ms() - t0 < 15000);
	json_t *v = view_of(tok, res);
	assert_int_equal(jint(json_object_get(v, "policy"), "timeout_max_s"), 1);
	assert_string_equal(jstr(json_object_get(v, "policy"), "backend"), "bwrap");
	json_decref(v);
	json_decref(res);
	/* Back to the configuration's default: the next command runs its time. */
	assert_int_equal(pol_cli(&srv, "acme", "timeout-max-s=default"), 0);
	res = ex_run(&srv, tok, "sleep 1.5; echo done");
	assert_string_equal(ex_stdout_ok(res), "done\n");
	json_decref(res);
}

/* Memory and processes of a command follow the policy (its rlimits). */
static void test_cli_memory_limit(void **state)
{
	(void)state;
	assert_int_equal(pol_cli(&srv, "acme", "mem_limit_bytes=67108864 nproc_limit=77"), 0);
	json_t *res = ex_run(&srv, tok, "ulimit -v");
	assert_string_equal(ex_stdout_ok(res), "65536\n");
	json_decref(res);
	/* 100 processes do not fit under 77: with cgroups pids.max refuses
	 * the fork (pids_limited), without them RLIMIT_NPROC does. */
	res = ex_run(&srv, tok, "i=0; while [ $i -lt 100 ]; do sleep 5 & i=$((i+1)); done; echo all");
	assert_int_not_equal(jint(res, "exit_code"), 0);
	assert_null(strstr(jstr(res, "stdout"), "all"));
	json_decref(res);
	/* A command needing more memory than that fails. */
	res = ex_run(&srv, tok, "python3 -c 'b = bytearray(256 * 1024 * 1024)' && echo fits");
	assert_int_not_equal(jint(res, "exit_code"), 0);
	assert_null(strstr(jstr(res, "stdout"), "fits"));
	json_decref(res);
	/* globex is untouched by acme's policy. */
	res = ex_run(&srv, tok_globex, "ulimit -v");
	assert_string_equal(ex_stdout_ok(res), "2097152\n");
	json_decref(res);
	assert_int_equal(pol_cli(&srv, "acme", "mem_limit_bytes=default nproc_limit=default"), 0);
}

/* The admin route sets an output cap: the next command is cut to it. */
static void test_admin_route_output_cap(void **state)
{
	(void)state;
	json_t *body = NULL;
	assert_int_equal(pol_put(&srv, tok_admin, "acme", "{\"max_output_bytes_cap\": 1000}", &body), 200);
	assert_int_equal(jint(json_object_get(body, "policy"), "max_output_bytes_cap"), 1000);
	assert_int_equal(jint(json_object_get(body, "overrides"), "max_output_bytes_cap"), 1000);
	json_decref(body);
	json_t *res = ex_ok(&srv, tok, NULL,
			    json_pack("{s:s, s:i}", "command", "head -c 50000 /dev/zero | tr '\\0' a",
				      "max_output_bytes", 64000));
	assert_true(jtrue(res, "truncated"));
	assert_int_equal(jint(res, "stdout_bytes"), 50000);
	assert_true(strlen(jstr(res, "stdout")) < 1200);
	json_decref(res);
	/* GET shows it; null resets it. */
	assert_int_equal(it_get_json(&srv, tok_admin, "/tenants/acme/policy", &body), 200);
	assert_int_equal(jint(json_object_get(body, "overrides"), "max_output_bytes_cap"), 1000);
	json_decref(body);
	assert_int_equal(pol_put(&srv, tok_admin, "acme", "{\"max_output_bytes_cap\": null}", &body), 200);
	assert_int_equal(json_object_size(json_object_get(body, "overrides")), 0);
	assert_int_equal(jint(json_object_get(body, "policy"), "max_output_bytes_cap"), 8388608);
	json_decref(body);
}

/* The tenant budgets of a policy are what /metrics shows for the tenant. */
static void test_admin_route_budget_in_metrics(void **state)
{
	(void)state;
	assert_int_equal(pol_put(&srv, tok_admin, "globex", "{\"tenant_mem_budget_bytes\": 123456789}", NULL),
			 200);
	struct it_resp m;
	assert_int_equal(it_http(&srv, "GET", "/metrics", tok_admin, NULL, NULL, 0, &m), 0);
	assert_int_equal(m.status, 200);
	assert_non_null(
	    strstr(m.body, "\nsandboxd_tenant_memory_budget_bytes{tenant=\"globex\"} 123456789\n"));
	assert_non_null(
	    strstr(m.body, "\nsandboxd_tenant_memory_budget_bytes{tenant=\"acme\"} 4294967296\n"));
	it_resp_free(&m);
	assert_int_equal(pol_put(&srv, tok_admin, "globex", "{\"tenant_mem_budget_bytes\": null}", NULL),
			 200);
}

/* Concurrency: max_execs 1 (and no admission queue) refuses a second
 * command while one runs. */
static void test_admin_route_concurrency(void **state)
{
	(void)state;
	assert_int_equal(pol_put(&srv, tok_admin, "acme", "{\"max_execs\": 1, \"exec_queue\": 0}", NULL),
			 200);
	struct bg_req b;
	bg_exec(&b, &srv, tok, json_pack("{s:s, s:s}", "command", "sleep 30", "id", "pol-conc-1"), NULL);
	json_t *v = ex_wait_state(&srv, tok, "pol-conc-1", "running", 20000);
	assert_non_null(v);
	json_decref(v);
	struct it_resp r;
	json_t *req = json_pack("{s:s}", "command", "true");
	assert_int_equal(ex_post(&srv, tok, NULL, req, NULL, &r), 429);
	it_expect_error(&r, 429, "too_many_requests");
	it_resp_free(&r);
	assert_int_equal(it_http(&srv, "POST", "/exec/pol-conc-1/cancel", tok, NULL, NULL, 0, &r), 0);
	it_resp_free(&r);
	json_decref(bg_join(&b));
	it_resp_free(&b.resp);
	assert_int_equal(
	    pol_put(&srv, tok_admin, "acme", "{\"max_execs\": null, \"exec_queue\": null}", NULL), 200);
}

/* Only an operator's admin token reads or changes a policy. */
static void test_policy_refused_to_others(void **state)
{
	(void)state;
	it_expect_error_at(&srv, "GET", "/tenants/acme/policy", tok, 403, "insufficient_scope");
	it_expect_error_at(&srv, "GET", "/tenants/acme/policy", tok_acme_admin, 403, "insufficient_scope");
	it_expect_error_at(&srv, "GET", "/tenants/acme/policy", tok_ops_read, 403, "insufficient_scope");
	struct it_resp r;
	const char *body = "{\"max_execs\": 1000}";
	assert_int_equal(
	    it_http(&srv, "PUT", "/tenants/acme/policy", tok_acme_admin, NULL, body, strlen(body), &r), 0);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok_admin, "/tenants/acme/policy", &v), 200);
	assert_null(json_object_get(json_object_get(v, "overrides"), "max_execs"));
	json_decref(v);
	it_expect_error_at(&srv, "GET", "/tenants/nobody/policy", tok_admin, 404, "not_found");
}

/* Bad keys and values are refused and change nothing. */
static void test_policy_bad_values(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "{\"nope\": 1}",
	    "{\"max_execs\": 0}",
	    "{\"backend\": \"docker\"}",
	    "{\"network\": \"a b\"}",
	    "{\"network\": 5}",
	    "{\"approval\": []}",
	    "{\"approval\": \"maybe\"}",
	    "{\"network\": \"h:0\"}",
	    "{}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		json_t *b = NULL;
		long st = pol_put(&srv, tok_admin, "acme", bad[i], &b);
		if (st != 400)
			fprintf(stderr, "%s -> %ld\n", bad[i], st);
		assert_int_equal(st, 400);
		json_decref(b);
	}
	assert_int_not_equal(pol_cli(&srv, "acme", "max_execs=lots"), 0);
	assert_int_not_equal(pol_cli(&srv, "acme", "network=[::1"), 0);
	/* The CLI refuses a backend its configuration does not offer. */
	char *out = it_cli(&srv, NULL, "tenant set acme backend=local");
	free(out);
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok_admin, "/tenants/acme/policy", &v), 200);
	assert_int_equal(json_object_size(json_object_get(v, "overrides")), 0);
	json_decref(v);
}

/* Every change is audited: who (tenant and sub), and old and new values. */
static void test_policy_change_audited(void **state)
{
	(void)state;
	assert_int_equal(pol_put(&srv, tok_admin, "globex", "{\"nproc_limit\": 99}", NULL), 200);
	assert_int_equal(pol_cli(&srv, "globex", "nproc_limit=98"), 0);
	json_t *page = NULL;
	long until = it_now_ms() + 10000;
	json_t *http_rec = NULL;
	while (!http_rec && it_now_ms() < until) {
		json_decref(page);
		page = NULL;
		assert_int_equal(it_get_json(&srv, tok_admin, "/audit?tenant=ops&limit=1000", &page), 200);
		json_t *rec;
		size_t i;
		json_array_foreach(json_object_get(page, "records"), i, rec) {
			const char *target = jstr(rec, "target");
			if (strcmp(jstr(rec, "route"), "/tenants/{name}/policy") == 0 &&
			    strcmp(jstr(rec, "method"), "PUT") == 0 && target &&
			    strstr(target, "\"nproc_limit\":99"))
				http_rec = rec;
		}
		if (!http_rec)
			usleep(50000);
	}
	assert_non_null(http_rec);
	assert_string_equal(jstr(http_rec, "sub"), "olga");
	json_t *change = json_loads(jstr(http_rec, "target"), 0, NULL);
	assert_non_null(change);
	assert_int_equal(jint(json_object_get(change, "old"), "nproc_limit"), 256);
	assert_int_equal(jint(json_object_get(change, "new"), "nproc_limit"), 99);
	assert_string_equal(jstr(change, "tenant"), "globex");
	json_decref(change);
	json_decref(page);
	/* The command line's change: the tenant's row, the Unix user. */
	assert_int_equal(it_get_json(&srv, tok_admin, "/audit?tenant=globex&route=tenant%20set", &page), 200);
	json_t *recs = json_object_get(page, "records");
	assert_true(json_array_size(recs) >= 1);
	json_t *last = json_array_get(recs, json_array_size(recs) - 1);
	assert_non_null(strstr(jstr(last, "sub"), "cli:uid"));
	assert_non_null(strstr(jstr(last, "target"), "\"old\":{\"nproc_limit\":99}"));
	assert_non_null(strstr(jstr(last, "target"), "\"new\":{\"nproc_limit\":98}"));
	json_decref(page);
	assert_int_equal(pol_cli(&srv, "globex", "nproc_limit=default"), 0);
}

/* network: true needs an allowlist in the policy. */
static void test_network_needs_allowlist(void **state)
{
	(void)state;
	struct it_resp r;
	json_t *req = json_pack("{s:s, s:b}", "command", "true", "network", 1);
	assert_int_equal(ex_post(&srv, tok, NULL, req, NULL, &r), 403);
	it_expect_error(&r, 403, "forbidden");
	it_resp_free(&r);
	/* Nothing was recorded for it. */
	json_t *list = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/execs?limit=1", &list), 200);
	json_t *first = json_array_get(json_object_get(list, "execs"), 0);
	assert_true(!first || strcmp(jstr(first, "command"), "true") != 0);
	json_decref(list);
	/* With an allowlist, it is not refused for want of one. */
	assert_int_equal(
	    pol_put(&srv, tok_admin, "acme", "{\"network\": \"127.0.0.1:9, example.com\"}", NULL), 200);
	req = json_pack("{s:s, s:b}", "command", "true", "network", 1);
	long st = ex_post(&srv, tok, NULL, req, NULL, &r);
	if (st == 403)
		it_show(&r);
	assert_int_not_equal(st, 403);
	it_resp_free(&r);
	/* And without network: true, nothing changes: no network at all. */
	json_t *res = ex_run(&srv, tok, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '");
	assert_string_equal(ex_stdout_ok(res), "lo\n");
	json_decref(res);
	assert_int_equal(pol_put(&srv, tok_admin, "acme", "{\"network\": \"none\"}", NULL), 200);
}

/* One server, two backends: acme on bwrap, globex (by its policy) on local. */
static void test_per_tenant_backend(void **state)
{
	(void)state;
	assert_int_equal(pol_cli(&srv, "globex", "backend=local"), 0);
	char host_ns[64] = "";
	ssize_t n = readlink("/proc/self/ns/pid", host_ns, sizeof host_ns - 1);
	assert_true(n > 0);
	host_ns[n] = '\0';
	json_t *a = ex_run(&srv, tok, "pwd; readlink /proc/self/ns/pid");
	json_t *g = ex_run(&srv, tok_globex, "pwd; readlink /proc/self/ns/pid");
	const char *as = ex_stdout_ok(a), *gs = ex_stdout_ok(g);
	/* bwrap: the workspace at /workspace, a pid namespace of its own. */
	assert_true(strncmp(as, "/workspace/sessions/", 20) == 0);
	assert_null(strstr(as, host_ns));
	/* local: the host's path of globex's workspace, the host's namespace. */
	char *want = xasprintf("%s/tenants/globex/workspace/sessions/", srv.dir);
	char real[PATH_MAX];
	if (realpath(srv.dir, real)) {
		free(want);
		want = xasprintf("%s/tenants/globex/workspace/sessions/", real);
	}
	assert_true(strncmp(gs, want, strlen(want)) == 0);
	assert_non_null(strstr(gs, host_ns));
	free(want);
	json_t *v = view_of(tok_globex, g);
	assert_string_equal(jstr(json_object_get(v, "policy"), "backend"), "local");
	json_decref(v);
	json_decref(a);
	json_decref(g);
	assert_int_equal(pol_cli(&srv, "globex", "backend=default"), 0);
	g = ex_run(&srv, tok_globex, "pwd");
	assert_true(strncmp(ex_stdout_ok(g), "/workspace/", 11) == 0);
	json_decref(g);
}

/* /readyz lists every backend offered and what it isolates. */
static void test_readyz_lists_backends(void **state)
{
	(void)state;
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, NULL, "/readyz", &v), 200);
	json_t *list = json_object_get(v, "backends");
	assert_int_equal(json_array_size(list), 2);
	json_t *bw = json_array_get(list, 0), *lo = json_array_get(list, 1);
	assert_string_equal(jstr(bw, "name"), "bwrap");
	assert_string_equal(jstr(bw, "status"), "ok");
	assert_true(jtrue(bw, "default"));
	assert_non_null(strstr(jstr(bw, "isolation"), "namespaces"));
	assert_string_equal(jstr(lo, "name"), "local");
	assert_false(jtrue(lo, "default"));
	assert_true(strncmp(jstr(lo, "isolation"), "none", 4) == 0);
	json_decref(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cli_timeout_cap_next_command),
	    cmocka_unit_test(test_cli_memory_limit),
	    cmocka_unit_test(test_admin_route_output_cap),
	    cmocka_unit_test(test_admin_route_budget_in_metrics),
	    cmocka_unit_test(test_admin_route_concurrency),
	    cmocka_unit_test(test_policy_refused_to_others),
	    cmocka_unit_test(test_policy_bad_values),
	    cmocka_unit_test(test_policy_change_audited),
	    cmocka_unit_test(test_network_needs_allowlist),
	    cmocka_unit_test(test_per_tenant_backend),
	    cmocka_unit_test(test_readyz_lists_backends),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
