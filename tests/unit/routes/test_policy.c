/* Tenant policies (routes/policy.c): defaults from the configuration, the
 * values each key takes (the allowlist grammar of sandbox/backend.h's
 * net_allow among them), command-line KEY=VALUE typing, and approval
 * patterns. No store here: the stored side is the integration tests'. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "allowlist_cases.h"
#include "common/config.h"
#include "routes/policy.h"

static struct sbx_config cfg;

static int setup(void **state)
{
	(void)state;
	cfg_defaults(&cfg);
	cfg_finish(&cfg);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	cfg_free(&cfg);
	return 0;
}

/* The configuration with network set to spec: its policy's validity,
 * and the reason in err. */
static int network_err(const char *spec, char *err, size_t errsz)
{
	char key[] = "network";
	char errc[256];
	struct route_policy p;
	int rc;

	err[0] = '\0';
	if (cfg_set(&cfg, key, spec, errc, sizeof errc) < 0)
		return -1;
	rc = route_policy_defaults(&cfg, &p, err, errsz);
	if (rc == 0)
		route_policy_clear(&p);
	cfg_set(&cfg, key, "none", errc, sizeof errc);
	return rc;
}

static int network_ok(const char *spec)
{
	char err[256];

	return network_err(spec, err, sizeof err);
}

static void test_defaults_follow_the_configuration(void **state)
{
	(void)state;
	char err[256];
	struct route_policy p;
	assert_int_equal(route_policy_defaults(&cfg, &p, err, sizeof err), 0);
	assert_string_equal(p.backend, "bwrap");
	assert_int_equal(p.mem_limit_bytes, cfg.mem_limit_bytes);
	assert_int_equal(p.timeout_max_s, cfg.exec_timeout_max_s);
	assert_int_equal(p.max_execs, cfg.tenant_max_execs);
	assert_int_equal(p.exec_queue, cfg.tenant_exec_queue);
	assert_int_equal(p.tenant_cpu_budget_millicores, cfg.tenant_cpu_budget_millicores);
	assert_null(p.network);
	assert_int_equal(p.approval, ROUTE_APPROVAL_NEVER);
	json_t *j = route_policy_json(&p);
	assert_string_equal(json_string_value(json_object_get(j, "network")), "none");
	assert_string_equal(json_string_value(json_object_get(j, "approval")), "never");
	assert_string_equal(json_string_value(json_object_get(j, "image")), "none");
	assert_string_equal(json_string_value(json_object_get(j, "images")), "none");
	assert_int_equal(json_integer_value(json_object_get(j, "tenant_cpu_budget_millicores")),
			 cfg.tenant_cpu_budget_millicores);
	assert_int_equal(json_integer_value(json_object_get(j, "exec_queue")), cfg.tenant_exec_queue);
	assert_int_equal(json_integer_value(json_object_get(j, "store_max_bytes")),
			 cfg.tenant_store_max_bytes);
	assert_int_equal(json_integer_value(json_object_get(j, "store_max_rows")), cfg.tenant_store_max_rows);
	assert_int_equal(json_integer_value(json_object_get(j, "tenant_io_write_bps")),
			 cfg.tenant_io_write_bps);
	assert_int_equal(json_integer_value(json_object_get(j, "tenant_io_read_iops")),
			 cfg.tenant_io_read_iops);
	assert_int_equal(json_object_size(j), 22);
	json_decref(j);
	assert_null(route_policy_io_budget(&p)); /* the defaults: none */
	p.tenant_io_write_iops = 3;
	assert_string_equal(route_policy_io_budget(&p), "tenant_io_write_iops");
	p.tenant_io_read_bps = 1;
	assert_string_equal(route_policy_io_budget(&p), "tenant_io_read_bps");
	route_policy_clear(&p);
}

/* Which change sets an I/O budget: a positive integer only (0 and null
 * are none; a bad value is for the update to refuse). */
static void test_io_set(void **state)
{
	(void)state;
	json_t *c = json_pack("{s:i, s:n, s:i, s:s}", "tenant_io_read_bps", 0, "tenant_io_write_bps",
			      "tenant_io_read_iops", -1, "tenant_io_write_iops", "7");
	assert_null(route_policy_io_set(c));
	json_object_set_new(c, "tenant-io-write-iops", json_integer(7));
	assert_string_equal(route_policy_io_set(c), "tenant_io_write_iops");
	json_decref(c);
	c = json_pack("{s:i}", "max_execs", 4);
	assert_null(route_policy_io_set(c));
	json_decref(c);
}

static void test_allowlist_grammar(void **state)
{
	(void)state;
	static const char *const good[] = {
	    "example.com",     "example.com:443",     "pypi.org:443, files.pythonhosted.org:443",
	    "10.0.0.0/8",      "10.1.2.3:8000-8080",  "127.0.0.1:1",
	    "[::1]:53",	       "[fd12:3456::/32]:53", " a.b , c.d:1-2 ",
	    "localhost:65535", "x-y.example",	      "0.0.0.0/0",
	};
	static const char *const bad[] = {
	    "",
	    ",",
	    "a,,b",
	    "a,",
	    "bad host",
	    "a:0",
	    "a:65536",
	    "a:9-8",
	    "a:1-",
	    "a:x",
	    "-a.com",
	    "a-.com",
	    "a..b",
	    "10.0.0.0/33",
	    "10.0.0.300",
	    "::1",
	    "[::1",
	    "[::1]x",
	    "[fd00::/129]",
	    "[10.0.0.1]",
	    "[::1]",
	    "1.2.3.4/",
	    "[::1]:",
	    "a:1:2",
	    /* the egress rules': loopback only with a port, never metadata */
	    "127.0.0.2:80",
	    "169.254.169.254",
	    /* a range holding a metadata address (fd00:ec2::254), issue 26 */
	    "[fd00::/8]:53",
	};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		if (network_ok(good[i]) != 0)
			fail_msg("refused good allowlist \"%s\"", good[i]);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (network_ok(bad[i]) == 0)
			fail_msg("accepted bad allowlist \"%s\"", bad[i]);
	}
}

/* The policy takes exactly the egress rules (sandbox/egress/rules.h)
 * with their reasons, but not an allowlist of no rules: its "none" is no
 * network, and an empty value a mistake. */
static void test_allowlist_is_the_rules(void **state)
{
	char err[512];

	(void)state;
	for (size_t i = 0; i < sizeof(allowlist_good) / sizeof(allowlist_good[0]); i++) {
		if (network_err(allowlist_good[i], err, sizeof err) != 0)
			fail_msg("refused \"%s\": %s", allowlist_good[i], err);
	}
	for (size_t i = 0; i < sizeof(allowlist_bad) / sizeof(allowlist_bad[0]); i++) {
		const char *spec = allowlist_bad[i].spec;

		if (!spec)
			continue; /* a policy's value is a string */
		if (network_err(spec, err, sizeof err) != -EINVAL)
			fail_msg("accepted \"%s\"", spec);
		if (strncmp(err, "network: ", 9) != 0 || !strstr(err, allowlist_bad[i].want))
			fail_msg("\"%s\": reason '%s' does not say 'network: ...%s'", spec, err,
				 allowlist_bad[i].want);
	}
	/* what the rules grew: wildcards, any name, deny rules */
	assert_int_equal(
	    network_err("*.github.com:443, *, !*.internal, !169.254.0.0/16, ![::1], !127.0.0.0/8", err,
			sizeof err),
	    0);
	assert_int_equal(network_err("", err, sizeof err), -EINVAL);
	assert_string_equal(err, "network: the allowlist is empty (\"none\": no network)");
	assert_int_equal(network_err(" none ", err, sizeof err), -EINVAL);
	assert_string_equal(err, "network: the allowlist is empty (\"none\": no network)");
	assert_int_equal(network_err("none", err, sizeof err), 0);
	assert_int_equal(network_err("*, none", err, sizeof err), 0); /* a name there */
}

static void test_kv_typing(void **state)
{
	(void)state;
	char err[256];
	json_t *c = json_object();
	assert_int_equal(route_policy_kv("mem-limit-bytes=1048576", c, err, sizeof err), 0);
	assert_int_equal(json_integer_value(json_object_get(c, "mem_limit_bytes")), 1048576);
	assert_int_equal(route_policy_kv("tenant-cpu-budget-millicores=500", c, err, sizeof err), 0);
	assert_int_equal(json_integer_value(json_object_get(c, "tenant_cpu_budget_millicores")), 500);
	assert_int_equal(route_policy_kv("tenant_cpu_budget_millicores=0.5", c, err, sizeof err), -EINVAL);
	assert_int_equal(route_policy_kv("approval=[\"rm *\"]", c, err, sizeof err), 0);
	assert_true(json_is_array(json_object_get(c, "approval")));
	assert_int_equal(route_policy_kv("approval=always", c, err, sizeof err), 0);
	assert_string_equal(json_string_value(json_object_get(c, "approval")), "always");
	assert_int_equal(route_policy_kv("timeout_max_s=default", c, err, sizeof err), 0);
	assert_true(json_is_null(json_object_get(c, "timeout_max_s")));
	assert_int_equal(route_policy_kv("network=a.b:1, c.d", c, err, sizeof err), 0);
	assert_string_equal(json_string_value(json_object_get(c, "network")), "a.b:1, c.d");
	assert_int_equal(route_policy_kv("max_execs=lots", c, err, sizeof err), -EINVAL);
	assert_int_equal(route_policy_kv("nope=1", c, err, sizeof err), -EINVAL);
	assert_int_equal(route_policy_kv("max_execs", c, err, sizeof err), -EINVAL);
	assert_int_equal(route_policy_kv("approval=[broken", c, err, sizeof err), -EINVAL);
	json_decref(c);
}

static void test_approval_patterns(void **state)
{
	(void)state;
	char err[256], e2[256];
	cfg_set(&cfg, "approval", "[\"rm *\", \"*git push*\", \"curl ?ttp*\"]", e2, sizeof e2);
	struct route_policy p;
	assert_int_equal(route_policy_defaults(&cfg, &p, err, sizeof err), 0);
	assert_int_equal(p.approval, ROUTE_APPROVAL_PATTERNS);
	assert_true(route_policy_needs_approval(&p, "rm -rf /workspace/x"));
	assert_true(route_policy_needs_approval(&p, "cd a && git push origin main"));
	assert_true(route_policy_needs_approval(&p, "curl http://x/y"));
	assert_false(route_policy_needs_approval(&p, "echo rm -rf"));
	assert_false(route_policy_needs_approval(&p, "git pull"));
	route_policy_clear(&p);
	cfg_set(&cfg, "approval", "always", e2, sizeof e2);
	assert_int_equal(route_policy_defaults(&cfg, &p, err, sizeof err), 0);
	assert_true(route_policy_needs_approval(&p, "true"));
	route_policy_clear(&p);
	static const char *const bad[] = {"sometimes", "[]", "[\"\"]", "[1]", "[\"a\""};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cfg_set(&cfg, "approval", bad[i], e2, sizeof e2);
		if (route_policy_defaults(&cfg, &p, err, sizeof err) == 0)
			fail_msg("accepted approval %s", bad[i]);
	}
	cfg_set(&cfg, "approval", "never", e2, sizeof e2);
}

static void test_backends_offered(void **state)
{
	(void)state;
	char e[256];
	assert_true(route_policy_backend_offered(&cfg, "bwrap"));
	assert_false(route_policy_backend_offered(&cfg, "local"));
	cfg_set(&cfg, "backends", "bwrap, local", e, sizeof e);
	assert_true(route_policy_backend_offered(&cfg, "local"));
	assert_false(route_policy_backend_offered(&cfg, "loc"));
	cfg_set(&cfg, "backends", "bwrap", e, sizeof e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults_follow_the_configuration),
	    cmocka_unit_test(test_allowlist_grammar),
	    cmocka_unit_test(test_allowlist_is_the_rules),
	    cmocka_unit_test(test_kv_typing),
	    cmocka_unit_test(test_io_set),
	    cmocka_unit_test(test_approval_patterns),
	    cmocka_unit_test(test_backends_offered),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
