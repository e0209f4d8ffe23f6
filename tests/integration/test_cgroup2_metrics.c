/* cgroup v2 (issue 27): on a pure cgroup-v2 host (the guest of the v2
 * suite), /metrics has each tenant's pressure (PSI) beside its usage and
 * sandboxd_cgroup_version 2, and a read-only cgroup tree (bound read-only
 * over itself in a private mount namespace) makes `serve` refuse to
 * start naming what is missing and the fix, while --allow-uncontained
 * starts it degraded. Exit 77 unless /sys/fs/cgroup is cgroup2 (statfs
 * magic) and this is root: on the hybrid hosts test_fail_closed covers
 * the v1 side. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

static char real_bin[4096];

/* SANDBOXD_BIN becomes a wrapper that runs the real binary in a mount
 * namespace of its own where /sys/fs/cgroup is bound read-only over
 * itself (ro false: the real binary). */
static void read_only_cgroups(bool ro)
{
	if (!ro) {
		setenv("SANDBOXD_BIN", real_bin, 1);
		return;
	}
	char path[64];
	snprintf(path, sizeof path, "/tmp/sandboxd-rocg-%d.sh", (int)getpid());
	char *text = xasprintf("#!/bin/sh\nexec unshare -m --propagation private sh -c "
			       "'mount --bind /sys/fs/cgroup /sys/fs/cgroup && "
			       "mount -o remount,bind,ro /sys/fs/cgroup && exec \"$0\" \"$@\"' '%s' \"$@\"\n",
			       real_bin);
	assert_int_equal(it_write_file(path, text, strlen(text)), 0);
	free(text);
	assert_int_equal(chmod(path, 0755), 0);
	setenv("SANDBOXD_BIN", path, 1);
}

static int setup(void **state)
{
	(void)state;
	struct statfs sf;
	if (geteuid() != 0 || statfs("/sys/fs/cgroup", &sf) != 0 || sf.f_type != CGROUP2_SUPER_MAGIC) {
		fprintf(stderr, "skipped: needs root and /sys/fs/cgroup the cgroup2 hierarchy\n");
		exit(77);
	}
	return realpath(it_bin(), real_bin) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char path[64];
	snprintf(path, sizeof path, "/tmp/sandboxd-rocg-%d.sh", (int)getpid());
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

/* After a tenant's command: its pressure series, v2, contained. */
static void test_pressure_metrics(void **state)
{
	(void)state;
	struct it_server s;
	assert_int_equal(it_start(&s, NULL), 0);
	char *tok = it_token(&s, "acme", NULL);
	json_t *res = ex_run(&s, tok, "head -c 20000000 /dev/zero | md5sum >/dev/null; echo done");
	assert_string_equal(ex_stdout_ok(res), "done\n");
	json_decref(res);
	free(tok);
	long st = 0;
	json_t *j = readyz(&s, &st);
	assert_int_equal(st, 200);
	assert_string_equal(jstr(j, "status"), "ready");
	json_t *c = json_object_get(j, "containment");
	assert_int_equal(jint(c, "cgroup_version"), 2);
	json_t *cpu = json_object_get(j, "cpu");
	if (strcmp(jstr(cpu, "status"), "enforced") == 0)
		assert_non_null(strstr(jstr(cpu, "detail"), "cpu.max"));
	json_decref(j);
	char *m = metrics(&s);
	assert_non_null(strstr(m, "\nsandboxd_cgroup_version 2\n"));
	assert_non_null(strstr(m, "\nsandboxd_uncontained 0\n"));
	static const char *const want[] = {
	    "\nsandboxd_tenant_pressure_avg10{tenant=\"acme\",resource=\"memory\",kind=\"some\"} ",
	    "\nsandboxd_tenant_pressure_avg10{tenant=\"acme\",resource=\"cpu\",kind=\"some\"} ",
	    "\nsandboxd_tenant_pressure_avg10{tenant=\"acme\",resource=\"io\",kind=\"full\"} ",
	    "\nsandboxd_tenant_pressure_seconds_total{tenant=\"acme\",resource=\"cpu\",kind=\"some\"} ",
	    "\nsandboxd_tenant_pressure_seconds_total{tenant=\"acme\",resource=\"memory\",kind=\"full\"} ",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		if (!strstr(m, want[i]))
			fprintf(stderr, "metrics lack %s\n", want[i] + 1);
		assert_non_null(strstr(m, want[i]));
	}
	free(m);
	assert_int_equal(it_stop(&s, SIGTERM), 0);
	it_cleanup(&s);
}

/* A read-only cgroup tree: refused with the reason and the fix; with
 * --allow-uncontained it starts, degraded. */
static void test_read_only_tree(void **state)
{
	(void)state;
	struct it_server s;
	read_only_cgroups(true);
	int rc = it_start(&s, NULL);
	read_only_cgroups(false);
	assert_int_equal(rc, -1);
	char *log = it_read_file(s.log, NULL);
	assert_non_null(log);
	static const char *const want[] = {"refusing to start", "runs commands without cgroups", "cgroup2",
					   "Delegate=yes", "--allow-uncontained"};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		if (!strstr(log, want[i]))
			fprintf(stderr, "log lacks \"%s\":\n%s\n", want[i], log);
		assert_non_null(strstr(log, want[i]));
	}
	free(log);
	it_cleanup(&s);

	static const char *const allow[] = {"--allow-uncontained", NULL};
	read_only_cgroups(true);
	rc = it_start(&s, allow);
	read_only_cgroups(false);
	assert_int_equal(rc, 0);
	long st = 0;
	json_t *j = readyz(&s, &st);
	assert_int_equal(st, 200);
	assert_string_equal(jstr(j, "status"), "degraded");
	assert_string_equal(jstr(json_object_get(j, "containment"), "status"), "degraded");
	json_decref(j);
	char *m = metrics(&s);
	assert_non_null(strstr(m, "\nsandboxd_uncontained 1\n"));
	assert_non_null(strstr(m, "\nsandboxd_cgroup_version 0\n"));
	assert_null(strstr(m, "sandboxd_tenant_pressure"));
	free(m);
	assert_int_equal(it_stop(&s, SIGTERM), 0);
	it_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pressure_metrics),
	    cmocka_unit_test(test_read_only_tree),
	};
	return cmocka_run_group_tests_name("cgroup2_metrics", tests, setup, teardown);
}
