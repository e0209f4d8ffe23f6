/* GET /exec/{id}/egress and GET /audit?egress= against the real server:
 * who may read an exec's ledger (its tenant's exec and audit:read tokens;
 * another tenant's token, an operator's included, gets the 404 GET
 * /exec/{id} gives, so nothing tells it the exec exists), the answer's
 * shape for an exec without records, the parameters refused, the audit
 * row joined to its exec, and no egress series in /metrics without a
 * gateway. Records themselves come from the gateway, which this server
 * has not: their content, paging and filters are the store's unit tests
 * (tests/unit/store/test_egress.c) and the end-to-end test's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static struct it_server srv;
static char *tok_exec, *tok_audit, *tok_fs, *tok_globex, *tok_ops_audit, *tok_ops_admin;

static const struct it_tok toks[] = {
    {&tok_exec, "acme", "exec"},	   {&tok_audit, "acme", "audit:read"},
    {&tok_fs, "acme", "fs:read"},	   {&tok_globex, "globex", "exec audit:read"},
    {&tok_ops_audit, "ops", "audit:read"}, {&tok_ops_admin, "ops", "audit:read admin"},
};

static int setup(void **state)
{
	(void)state;
	if (it_start_minted(&srv, NULL, toks, IT_NTOKS(toks)) != 0)
		return -1;
	static const char body[] = "{\"command\": \"true\", \"id\": \"eg1\"}";
	struct it_resp r;
	if (it_http(&srv, "POST", "/exec", tok_exec, NULL, body, strlen(body), &r) != 0)
		return -1;
	int ok = r.status == 200;
	if (!ok)
		it_show(&r);
	it_resp_free(&r);
	return ok ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	it_free_all(toks, IT_NTOKS(toks));
	it_cleanup(&srv);
	return 0;
}

static json_t *get_json(const char *path, const char *token, long status)
{
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", path, token, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, status);
	json_t *j = it_json(&r);
	it_resp_free(&r);
	assert_non_null(j);
	return j;
}

/* The exec's tenant reads an empty ledger, with exec and with audit:read. */
static void test_own_exec_empty(void **state)
{
	(void)state;
	const char *tokens[] = {tok_exec, tok_audit};
	for (size_t i = 0; i < 2; i++) {
		json_t *j = get_json("/exec/eg1/egress", tokens[i], 200);
		assert_string_equal(json_string_value(json_object_get(j, "exec_id")), "eg1");
		assert_true(json_is_array(json_object_get(j, "connections")));
		assert_int_equal(json_array_size(json_object_get(j, "connections")), 0);
		assert_true(json_is_null(json_object_get(j, "next")));
		json_decref(j);
	}
	json_t *j = get_json("/exec/eg1/egress?verdict=denied&limit=1000&after=7", tok_audit, 200);
	assert_int_equal(json_array_size(json_object_get(j, "connections")), 0);
	json_decref(j);
}

/* Another tenant's exec, operators' too, answers exactly as GET /exec/{id}
 * does for it: the same 404 as an id that never was. */
static void test_other_tenant_404(void **state)
{
	(void)state;
	const char *tokens[] = {tok_globex, tok_ops_audit, tok_ops_admin};
	for (size_t i = 0; i < 3; i++) {
		json_t *a = get_json("/exec/eg1/egress", tokens[i], 404);
		json_t *b = get_json("/exec/eg1", tokens[i], 404);
		json_t *c = get_json("/exec/never-was/egress", tokens[i], 404);
		assert_true(json_equal(json_object_get(a, "error"), json_object_get(b, "error")));
		assert_string_equal(json_string_value(json_object_get(json_object_get(a, "error"), "code")),
				    "not_found");
		const char *ma = json_string_value(json_object_get(json_object_get(a, "error"), "message"));
		const char *mc = json_string_value(json_object_get(json_object_get(c, "error"), "message"));
		assert_non_null(strstr(ma, "eg1"));
		assert_non_null(strstr(mc, "never-was"));
		json_decref(a);
		json_decref(b);
		json_decref(c);
	}
}

static void test_scope_and_auth(void **state)
{
	(void)state;
	it_expect_error_at(&srv, "GET", "/exec/eg1/egress", tok_fs, 403, "insufficient_scope");
	it_expect_error_at(&srv, "GET", "/exec/eg1/egress", NULL, 401, "unauthorized");
}

static void test_bad_parameters(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "/exec/eg1/egress?verdict=maybe",
	    "/exec/eg1/egress?limit=0",
	    "/exec/eg1/egress?limit=1001",
	    "/exec/eg1/egress?limit=x",
	    "/exec/eg1/egress?after=-1",
	    "/exec/eg1/egress?after=abc",
	    "/audit?egress=some",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		it_expect_error_at(&srv, "GET", bad[i], tok_audit, 400, "bad_request");
}

/* The audit row of POST /exec names its exec (polled: the audit is
 * written in batches); with no egress record the egress filters keep
 * none of the tenant's rows. */
static void test_audit_join(void **state)
{
	(void)state;
	json_t *rec = NULL;
	for (time_t deadline = time(NULL) + 10; !rec && time(NULL) < deadline;) {
		json_t *j = get_json("/audit?route=/exec&limit=1000", tok_audit, 200);
		json_t *v;
		size_t i;
		json_array_foreach(json_object_get(j, "records"), i, v) {
			if (!rec && json_is_string(json_object_get(v, "exec_id")))
				rec = json_incref(v);
		}
		json_decref(j);
		if (!rec)
			usleep(20 * 1000);
	}
	assert_non_null(rec);
	assert_string_equal(json_string_value(json_object_get(rec, "exec_id")), "eg1");
	assert_string_equal(json_string_value(json_object_get(rec, "method")), "POST");
	json_decref(rec);
	const char *filters[] = {"/audit?egress=denied", "/audit?egress=any",
				 "/audit?egress=any&route=/exec"};
	for (size_t i = 0; i < 3; i++) {
		json_t *j = get_json(filters[i], tok_audit, 200);
		assert_int_equal(json_array_size(json_object_get(j, "records")), 0);
		assert_true(json_is_null(json_object_get(j, "next")));
		json_decref(j);
	}
}

/* The gateway's series are there before any command had network: the
 * ledger's failures (none), no tenant yet. */
static void test_metrics_idle(void **state)
{
	(void)state;
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/metrics", tok_ops_admin, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	assert_non_null(strstr(r.body, "sandboxd_node_info"));
	assert_non_null(strstr(r.body, "\nsandboxd_egress_ledger_failures_total 0\n"));
	assert_null(strstr(r.body, "sandboxd_egress_connections_total{"));
	it_resp_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_own_exec_empty), cmocka_unit_test(test_other_tenant_404),
	    cmocka_unit_test(test_scope_and_auth), cmocka_unit_test(test_bad_parameters),
	    cmocka_unit_test(test_audit_join),	   cmocka_unit_test(test_metrics_idle),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
