/* Fail closed (issue 27, security.md item 10): a server that cannot
 * enforce its configured limits and budgets with cgroups does not start,
 * and says what is missing and the fix; --allow-uncontained (or the
 * operator's use-cgroups=false) starts it degraded, and /readyz and
 * /metrics say so. On this (v1, hybrid) host: the real binary, as root,
 * in a private mount namespace whose /sys/fs/cgroup (or only its cpu
 * hierarchy) is covered by an empty read-only tmpfs, started through a
 * wrapper in SANDBOXD_BIN. The cgroup2 side is test_cgroup2_metrics.
 * Skipped (77) without root or without the v1 memory and pids
 * hierarchies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

static char real_bin[4096];

/* SANDBOXD_BIN becomes a wrapper that runs the real binary in a mount
 * namespace of its own with `hide` covered (NULL: the real binary). */
static void hide_cgroups(const char *hide)
{
	if (!hide) {
		setenv("SANDBOXD_BIN", real_bin, 1);
		return;
	}
	char path[64];
	snprintf(path, sizeof path, "/tmp/sandboxd-nocg-%d.sh", (int)getpid());
	char *text = xasprintf("#!/bin/sh\nexec unshare -m --propagation private sh -c "
			       "'mount -t tmpfs -o ro,mode=755 sbx-nocg %s && exec \"$0\" \"$@\"' '%s' "
			       "\"$@\"\n",
			       hide, real_bin);
	assert_int_equal(it_write_file(path, text, strlen(text)), 0);
	free(text);
	assert_int_equal(chmod(path, 0755), 0);
	setenv("SANDBOXD_BIN", path, 1);
}

static int setup(void **state)
{
	(void)state;
	if (!it_cgroups_here()) {
		fprintf(stderr, "skipped: needs root and the cgroup v1 memory and pids hierarchies\n");
		exit(77);
	}
	const char *b = it_bin();
	if (!realpath(b, real_bin))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char path[64];
	snprintf(path, sizeof path, "/tmp/sandboxd-nocg-%d.sh", (int)getpid());
	unlink(path);
	return 0;
}

static json_t *readyz(struct it_server *s, long *status)
{
	struct it_resp r;
	assert_int_equal(it_http(s, "GET", "/readyz", NULL, NULL, NULL, 0, &r), 0);
	*status = r.status;
	json_t *j = it_json(&r);
	it_resp_free(&r);
	assert_non_null(j);
	return j;
}

static char *metrics(struct it_server *s)
{
	char *tok = it_token(s, "ops", "admin audit:read");
	assert_non_null(tok);
	struct it_resp r;
	assert_int_equal(it_http(s, "GET", "/metrics", tok, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	char *text = xstrdup(r.body);
	it_resp_free(&r);
	free(tok);
	return text;
}

/* The server must not start; its log must hold every one of want. */
static void refused(const char *hide, const char *const *extra, const char *const *want)
{
	struct it_server s;
	hide_cgroups(hide);
	assert_int_equal(it_start(&s, extra), -1);
	hide_cgroups(NULL);
	char *log = it_read_file(s.log, NULL);
	assert_non_null(log);
	for (size_t i = 0; want[i]; i++) {
		if (!strstr(log, want[i]))
			fprintf(stderr, "log lacks \"%s\":\n%s\n", want[i], log);
		assert_non_null(strstr(log, want[i]));
	}
	free(log);
	it_cleanup(&s);
}

/* The server starts; /readyz answers 200 degraded naming reason. runs:
 * a command runs (within its rlimits), else it is refused (503): a
 * budget the driver cannot apply still refuses the command. */
static void degraded(const char *hide, const char *const *extra, const char *reason, bool runs)
{
	struct it_server s;
	hide_cgroups(hide);
	int rc = it_start(&s, extra);
	hide_cgroups(NULL);
	assert_int_equal(rc, 0);
	long st = 0;
	json_t *j = readyz(&s, &st);
	char *dump = json_dumps(j, 0);
	if (st != 200 || strcmp(jstr(j, "status"), "degraded") != 0)
		fprintf(stderr, "readyz: %ld %s\n", st, dump);
	assert_int_equal(st, 200);
	assert_string_equal(jstr(j, "status"), "degraded");
	json_t *c = json_object_get(j, "containment");
	assert_string_equal(jstr(c, "status"), "degraded");
	if (!strstr(jstr(c, "detail"), reason))
		fprintf(stderr, "containment detail lacks \"%s\": %s\n", reason, dump);
	assert_non_null(strstr(jstr(c, "detail"), reason));
	free(dump);
	json_decref(j);
	char *m = metrics(&s);
	assert_non_null(strstr(m, "\nsandboxd_uncontained 1\n"));
	free(m);
	char *tok = it_token(&s, "acme", NULL);
	if (runs) {
		json_t *res = ex_run(&s, tok, "echo degraded-but-serving");
		assert_string_equal(ex_stdout_ok(res), "degraded-but-serving\n");
		json_decref(res);
	} else {
		json_t *res = NULL;
		long st2 = ex_post(&s, tok, NULL, json_pack("{s:s}", "command", "echo no"), &res, NULL);
		assert_int_equal(st2, 503);
		json_decref(res);
	}
	free(tok);
	assert_int_equal(it_stop(&s, SIGTERM), 0);
	it_cleanup(&s);
}

/* The host as it is: cgroups v1 in force, ready, the gauges say so, and
 * no pressure series (v1 has none) once a tenant's command ran. */
static void test_contained_ready(void **state)
{
	(void)state;
	struct it_server s;
	assert_int_equal(it_start(&s, NULL), 0);
	char *tok = it_token(&s, "acme", NULL);
	json_t *res = ex_run(&s, tok, "echo hi");
	assert_string_equal(ex_stdout_ok(res), "hi\n");
	json_decref(res);
	free(tok);
	long st = 0;
	json_t *j = readyz(&s, &st);
	assert_int_equal(st, 200);
	assert_string_equal(jstr(j, "status"), "ready");
	json_t *c = json_object_get(j, "containment");
	assert_string_equal(jstr(c, "status"), "enforced");
	assert_int_equal(jint(c, "cgroup_version"), 1);
	const char *cpu = jstr(json_object_get(j, "cpu"), "detail");
	assert_non_null(strstr(cpu, "cgroup v1 cpu"));
	assert_non_null(strstr(cpu, "cpu.cfs_quota_us"));
	json_decref(j);
	char *m = metrics(&s);
	assert_non_null(strstr(m, "\nsandboxd_uncontained 0\n"));
	assert_non_null(strstr(m, "\nsandboxd_cgroup_version 1\n"));
	/* the tenant's usage is there, its pressure is not (v1) */
	assert_non_null(strstr(m, "\nsandboxd_tenant_processes{tenant=\"acme\"} "));
	assert_null(strstr(m, "sandboxd_tenant_pressure"));
	free(m);
	assert_int_equal(it_stop(&s, SIGTERM), 0);
	it_cleanup(&s);
}

/* No cgroup hierarchy writable: refused, with the reason and the fix. */
static void test_no_cgroups_refused(void **state)
{
	(void)state;
	static const char *const want[] = {"refusing to start",
					   "backend bwrap runs commands without cgroups",
					   "/sys/fs/cgroup/memory and /sys/fs/cgroup/pids",
					   "Delegate=yes",
					   "--allow-uncontained",
					   NULL};
	refused("/sys/fs/cgroup", NULL, want);
}

/* The same host with --allow-uncontained (or the key): degraded. */
static void test_no_cgroups_allowed_degraded(void **state)
{
	(void)state;
	static const char *const flag[] = {"--allow-uncontained", NULL};
	degraded("/sys/fs/cgroup", flag, "without cgroups", true);
	static const char *const key[] = {"--set", "allow-uncontained=true", NULL};
	degraded("/sys/fs/cgroup", key, "allow-uncontained=true", true);
}

/* The operator's own opt-out: starts, but degraded, never ready. */
static void test_use_cgroups_false_degraded(void **state)
{
	(void)state;
	static const char *const off[] = {"--set", "use-cgroups=false", NULL};
	degraded(NULL, off, "use-cgroups=false", true);
}

/* cgroups in force but the cpu controller missing while the default CPU
 * budget is set: refused naming the controller and the key; with the
 * budget 0 it starts ready. */
static void test_cpu_controller_missing(void **state)
{
	(void)state;
	static const char *const budget[] = {"--set", "tenant-cpu-budget-millicores=500", NULL};
	static const char *const want[] = {"refusing to start", "no cgroup cpu controller (v1)",
					   "tenant-cpu-budget-millicores=500 not enforced", NULL};
	refused("/sys/fs/cgroup/cpu", budget, want);
	static const char *const allow[] = {"--set", "tenant-cpu-budget-millicores=500",
					    "--allow-uncontained", NULL};
	degraded("/sys/fs/cgroup/cpu", allow, "a command whose limits or budget need it does not run", false);

	static const char *const none[] = {"--set", "tenant-cpu-budget-millicores=0", NULL};
	struct it_server s;
	hide_cgroups("/sys/fs/cgroup/cpu");
	int rc = it_start(&s, none);
	hide_cgroups(NULL);
	assert_int_equal(rc, 0);
	long st = 0;
	json_t *j = readyz(&s, &st);
	assert_int_equal(st, 200);
	assert_string_equal(jstr(j, "status"), "ready");
	assert_string_equal(jstr(json_object_get(j, "cpu"), "status"), "unavailable");
	json_decref(j);
	assert_int_equal(it_stop(&s, SIGTERM), 0);
	it_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_contained_ready),
	    cmocka_unit_test(test_no_cgroups_refused),
	    cmocka_unit_test(test_no_cgroups_allowed_degraded),
	    cmocka_unit_test(test_use_cgroups_false_degraded),
	    cmocka_unit_test(test_cpu_controller_missing),
	};
	return cmocka_run_group_tests_name("fail_closed", tests, setup, teardown);
}
