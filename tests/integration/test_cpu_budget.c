/* A CPU budget per tenant (issue 13): a tenant's commands together get at
 * most its budget of CPU time (cgroup v1 cpu.cfs_quota_us on its group
 * u<uid>), tenants equal cpu.shares; the usage (cpuacct) and the budget
 * are in /metrics. Real bwrap, real cgroups, the real binary: the budget
 * is read from the kernel's own files and measured with the kernel's own
 * counter. The cgroup v1 driver's (cpu, cpuacct hierarchies); the v2
 * driver's cpu.max, measured by cpu.stat, is test_cgroup2_limits.c's
 * test_cpu_budget, run in tests/vm's guest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

#define CPU_DIR "/sys/fs/cgroup/cpu"
#define N_LOOPS 3

static struct it_server srv;
static char *tok, *tok_globex, *tok_ops;
static long base;

static bool cpu_here(void)
{
	return geteuid() == 0 && access(CPU_DIR "/cgroup.procs", W_OK) == 0 &&
	       access(CPU_DIR "/cpu.cfs_quota_us", W_OK) == 0 &&
	       access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) == 0 &&
	       access("/sys/fs/cgroup/pids/cgroup.procs", W_OK) == 0;
}

static const struct it_tok toks[] = {
    {&tok, "acme", NULL},
    {&tok_globex, "globex", NULL},
    {&tok_ops, "ops", "admin"},
};

static int setup(void **state)
{
	(void)state;
	/* Half a core per tenant by default. */
	const char *const extra[] = {"--set", "tenant-cpu-budget-millicores=500", NULL};
	int rc = it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
	base = strtol(srv.uid_base + strlen("uid-base="), NULL, 10);
	return rc;
}

/* A server stopped cleanly leaves no group in cpu or cpuacct. */
static int teardown(void **state)
{
	(void)state;
	static const char *const hier[] = {"cpu", "cpuacct"};
	int rc = it_finish_minted(&srv, toks, IT_NTOKS(toks));
	if (rc == 0 && it_cgroups_left(base, hier, 2) != 0) {
		it_fail_at_exit();
		rc = -1;
	}
	return rc;
}

/* The host uid of tenant: the harness adds acme, globex and ops in that
 * order (slots 0, 1, 2). cpu_file fails when the group of that uid is
 * missing after the tenant ran a command, so a wrong guess cannot pass. */
static long uid_of(const char *tenant)
{
	long slot = strcmp(tenant, "acme") == 0 ? 0 : strcmp(tenant, "globex") == 0 ? 1 : 2;
	return base + slot;
}

/* A file of tenant's cpu group, as text without the newline (caller frees). */
static char *cpu_file(const char *tenant, const char *name)
{
	char *path = xasprintf(CPU_DIR "/sandboxd/%ld/u%ld/%s", base, uid_of(tenant), name);
	size_t len = 0;
	char *t = it_read_file(path, &len);
	if (!t)
		fprintf(stderr, "cannot read %s\n", path);
	free(path);
	assert_non_null(t);
	t[strcspn(t, "\n")] = '\0';
	return t;
}

static void expect_cpu_file(const char *tenant, const char *name, const char *want)
{
	char *t = cpu_file(tenant, name);
	if (strcmp(t, want) != 0)
		fprintf(stderr, "%s of %s: %s, expected %s\n", name, tenant, t, want);
	assert_string_equal(t, want);
	free(t);
}

static void run_ok(const char *token, const char *cmd, const char *want_stdout)
{
	json_t *r = ex_run(&srv, token, cmd);
	assert_string_equal(ex_stdout_ok(r), want_stdout);
	json_decref(r);
}

/* The /metrics text (caller frees). */
static char *metrics(void)
{
	struct it_resp m;
	assert_int_equal(it_http(&srv, "GET", "/metrics", tok_ops, NULL, NULL, 0, &m), 0);
	it_expect_status(&m, 200);
	char *body = xstrdup(m.body);
	it_resp_free(&m);
	return body;
}

/* The value of series name{tenant="tenant"} in text, or -1 when absent. */
static double series(const char *text, const char *name, const char *tenant)
{
	char *key = xasprintf("\n%s{tenant=\"%s\"} ", name, tenant);
	const char *hit = strstr(text, key);
	double v = hit ? strtod(hit + strlen(key), NULL) : -1;
	free(key);
	return v;
}

/* A tenant's cpuacct usage in seconds through /metrics, and the monotonic
 * times just before and just after the request (ms). */
static double usage_s(const char *tenant, long *before, long *after)
{
	*before = it_now_ms();
	char *m = metrics();
	*after = it_now_ms();
	double v = series(m, "sandboxd_tenant_cpu_seconds_total", tenant);
	free(m);
	return v;
}

/* /readyz says the budget is in force and the default; the tenant's group
 * holds the budget as the kernel's quota over a 100 ms period, and the
 * tenants' equal shares. */
static void test_kernel_files(void **state)
{
	(void)state;
	if (!cpu_here())
		skip();
	json_t *ready = NULL;
	assert_int_equal(it_get_json(&srv, NULL, "/readyz", &ready), 200);
	json_t *cpu = json_object_get(ready, "cpu");
	assert_string_equal(jstr(cpu, "status"), "enforced");
	assert_int_equal(jint(cpu, "default_budget_millicores"), 500);
	assert_non_null(strstr(jstr(cpu, "detail"), "cfs_quota_us"));
	assert_non_null(strstr(jstr(json_object_get(ready, "backend"), "detail"), "cpu v1"));
	json_decref(ready);

	run_ok(tok, "echo a", "a\n");
	expect_cpu_file("acme", "cpu.cfs_period_us", "100000");
	expect_cpu_file("acme", "cpu.cfs_quota_us", "50000");
	expect_cpu_file("acme", "cpu.shares", "1024");
	run_ok(tok_globex, "echo b", "b\n");
	expect_cpu_file("globex", "cpu.cfs_quota_us", "50000");
	expect_cpu_file("globex", "cpu.shares", "1024");

	char *m = metrics();
	assert_non_null(strstr(m, "\nsandboxd_tenant_cpu_budget_cores{tenant=\"acme\"} 0.500\n"));
	assert_non_null(strstr(m, "\nsandboxd_tenant_cpu_budget_cores{tenant=\"ops\"} 0.500\n"));
	assert_true(series(m, "sandboxd_tenant_cpu_seconds_total", "acme") > 0);
	assert_true(series(m, "sandboxd_tenant_cpu_throttled_seconds_total", "acme") >= 0);
	assert_non_null(strstr(m, "# TYPE sandboxd_tenant_cpu_seconds_total counter\n"));
	/* ops has run nothing: no group, no usage (its budget is shown). */
	assert_true(series(m, "sandboxd_tenant_cpu_seconds_total", "ops") < 0);
	free(m);
}

/* Tasks in the cpu groups of tenant's commands (j<seq> below u<uid>). */
static int tasks_in_jobs(const char *tenant)
{
	char *dir = xasprintf(CPU_DIR "/sandboxd/%ld/u%ld", base, uid_of(tenant));
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		/* j<n>: a command's group; n >= 2^48: a warm sandbox waiting
		 * for a command (sandbox/warm.c), not a command */
		if (e->d_name[0] != 'j' || strtoull(e->d_name + 1, NULL, 10) >= 1ULL << 48)
			continue;
		char *p = xasprintf("%s/%s/tasks", dir, e->d_name);
		size_t len = 0;
		char *t = it_read_file(p, &len);
		for (size_t i = 0; t && i < len; i++)
			n += t[i] == '\n';
		free(t);
		free(p);
	}
	if (d)
		closedir(d);
	free(dir);
	return n;
}

/* Three busy loops of acme, each a command of its own: over a window
 * measured by the kernel's own counter, acme's commands together used at
 * most half a core (the quota is an upper bound the kernel enforces,
 * whatever the machine's speed or load: 20 % tolerance for the edges of
 * the window). Meanwhile globex's commands complete. */
static void test_busy_loops_bounded(void **state)
{
	(void)state;
	if (!cpu_here())
		skip();
	char ids[N_LOOPS][16];
	for (int i = 0; i < N_LOOPS; i++) {
		snprintf(ids[i], sizeof ids[i], "spin-%d", i);
		json_t *v = NULL;
		long st = ex_post(&srv, tok, NULL,
				  json_pack("{s:s, s:s, s:b, s:i}", "command", "while :; do :; done", "id",
					    ids[i], "background", 1, "timeout_s", 300),
				  &v, NULL);
		assert_int_equal(st, 202);
		json_decref(v);
	}
	/* Every loop is in its own group below acme's. */
	long until = it_now_ms() + 60000;
	while (tasks_in_jobs("acme") < N_LOOPS && it_now_ms() < until)
		usleep(50000);
	assert_true(tasks_in_jobs("acme") >= N_LOOPS);

	long t0a, t0b, t1a, t1b;
	double u0 = usage_s("acme", &t0a, &t0b), u1 = u0;
	assert_true(u0 >= 0);
	/* The window ends when acme has used 1.5 s of CPU (at half a core:
	 * 3 s or more), or after 120 s on a machine too busy to give it that. */
	until = it_now_ms() + 120000;
	do {
		usleep(200000);
		u1 = usage_s("acme", &t1a, &t1b);
	} while (u1 - u0 < 1.5 && it_now_ms() < until);
	/* The usage was read between t0a..t0b and t1a..t1b: the window lasted
	 * at least t1a - t0b. */
	double wall_s = (double)(t1a - t0b) / 1000.0, used = u1 - u0;
	fprintf(stderr, "acme: %.3f s of CPU in at least %.3f s: %.3f cores (budget 0.5)\n", used, wall_s,
		used / wall_s);
	assert_true(wall_s > 0);
	assert_true(used / wall_s <= 0.5 * 1.2);

	/* globex meanwhile: its commands run and finish, work included. */
	run_ok(tok_globex, "seq 1 200000 | wc -l", "200000\n");
	run_ok(tok_globex, "echo still", "still\n");

	char *m = metrics();
	fprintf(stderr, "acme throttled %.3f s\n",
		series(m, "sandboxd_tenant_cpu_throttled_seconds_total", "acme"));
	free(m);
	for (int i = 0; i < N_LOOPS; i++) {
		char path[64];
		snprintf(path, sizeof path, "/exec/%s/cancel", ids[i]);
		struct it_resp r;
		assert_int_equal(it_http(&srv, "POST", path, tok, NULL, NULL, 0, &r), 0);
		it_resp_free(&r);
		json_t *end = ex_wait_state(&srv, tok, ids[i], "cancelled", 30000);
		assert_non_null(end);
		json_decref(end);
	}
	assert_int_equal(tasks_in_jobs("acme"), 0);
}

/* The policy changes the budget of the tenant's next command: through
 * the admin route, through the command line, to none (0), back to the
 * default; values the kernel cannot take are refused when set. */
static void test_policy_override(void **state)
{
	(void)state;
	if (!cpu_here())
		skip();
	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"tenant_cpu_budget_millicores\": 250}", NULL),
			 200);
	run_ok(tok, "echo 1", "1\n");
	expect_cpu_file("acme", "cpu.cfs_quota_us", "25000");
	char *m = metrics();
	assert_non_null(strstr(m, "\nsandboxd_tenant_cpu_budget_cores{tenant=\"acme\"} 0.250\n"));
	assert_non_null(strstr(m, "\nsandboxd_tenant_cpu_budget_cores{tenant=\"globex\"} 0.500\n"));
	free(m);
	/* The exec records the budget it ran under. */
	json_t *r = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "true", "id", "pol-cpu"));
	json_decref(r);
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/exec/pol-cpu", &v), 200);
	assert_int_equal(jint(json_object_get(v, "policy"), "tenant_cpu_budget_millicores"), 250);
	json_decref(v);

	/* 0: no budget at all, in the kernel too. */
	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"tenant_cpu_budget_millicores\": 0}", NULL), 200);
	run_ok(tok, "echo 2", "2\n");
	expect_cpu_file("acme", "cpu.cfs_quota_us", "-1");
	expect_cpu_file("acme", "cpu.shares", "1024");
	m = metrics();
	assert_non_null(strstr(m, "\nsandboxd_tenant_cpu_budget_cores{tenant=\"acme\"} 0.000\n"));
	free(m);

	/* The command line, against the same data directory. */
	assert_int_equal(pol_cli(&srv, "acme", "tenant-cpu-budget-millicores=1500"), 0);
	run_ok(tok, "echo 3", "3\n");
	expect_cpu_file("acme", "cpu.cfs_quota_us", "150000");

	/* Below the kernel's least quota, fractions, negatives: refused, the
	 * budget unchanged. */
	static const char *const bad[] = {
	    "{\"tenant_cpu_budget_millicores\": 5}", "{\"tenant_cpu_budget_millicores\": 0.5}",
	    "{\"tenant_cpu_budget_millicores\": -1}", "{\"tenant_cpu_budget_millicores\": \"1\"}"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		json_t *e = NULL;
		assert_int_equal(pol_put(&srv, tok_ops, "acme", bad[i], &e), 400);
		json_decref(e);
	}
	assert_int_not_equal(pol_cli(&srv, "acme", "tenant-cpu-budget-millicores=9"), 0);
	run_ok(tok, "echo 4", "4\n");
	expect_cpu_file("acme", "cpu.cfs_quota_us", "150000");

	/* Back to the configuration's default. */
	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"tenant_cpu_budget_millicores\": null}", NULL),
			 200);
	run_ok(tok, "echo 5", "5\n");
	expect_cpu_file("acme", "cpu.cfs_quota_us", "50000");
}

/* Rewrite acme's stored policy with the sqlite3 shell, as an older or
 * newer binary (or a hand edit) would leave it: sql is the new text. */
static void store_policy(const char *sql_text)
{
	char *file = xasprintf("%s/policy.sql", srv.dir);
	char *sql = xasprintf("update policies set policy = '%s' where tenant = 'acme' returning tenant;\n",
			      sql_text);
	assert_int_equal(it_write_file(file, sql, strlen(sql)), 0);
	char *cmd =
	    xasprintf("sqlite3 -cmd '.timeout 10000' '%s/sandboxd.db' < '%s' | grep -qx acme", srv.dir, file);
	assert_int_equal(system(cmd), 0);
	unlink(file);
	free(cmd);
	free(sql);
	free(file);
}

/* A pids file of tenant's group, as text without the newline. */
static void expect_pids_max(const char *tenant, const char *want)
{
	char *path = xasprintf("/sys/fs/cgroup/pids/sandboxd/%ld/u%ld/pids.max", base, uid_of(tenant));
	char *t = it_read_file(path, NULL);
	free(path);
	assert_non_null(t);
	t[strcspn(t, "\n")] = '\0';
	assert_string_equal(t, want);
	free(t);
}

/* Stored overrides never fall back to the defaults: a key this binary
 * does not know, stored before the others, is skipped and every other
 * key still applies; a known key whose stored value cannot be applied
 * refuses the tenant's commands (503) rather than lifting its limits. */
static void test_stored_policy_fails_closed(void **state)
{
	(void)state;
	if (!cpu_here())
		skip();
	assert_int_equal(pol_put(&srv, tok_ops, "acme",
				 "{\"tenant_nproc_budget\": 37, \"tenant_cpu_budget_millicores\": 200}",
				 NULL),
			 200);
	store_policy("{\"a_key_from_a_newer_binary\": 1, \"tenant_cpu_budget_millicores\": 200, "
		     "\"tenant_nproc_budget\": 37}");
	run_ok(tok, "echo skipped", "skipped\n");
	expect_cpu_file("acme", "cpu.cfs_quota_us", "20000");
	expect_pids_max("acme", "37");

	/* A known key with a value this binary cannot apply. */
	store_policy("{\"tenant_cpu_budget_millicores\": 200, \"tenant_nproc_budget\": \"seven\"}");
	const char *body = "{\"command\": \"echo no\"}";
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", "/exec", tok, NULL, body, strlen(body), &r), 0);
	it_expect_error(&r, 503, "backend_unavailable");
	assert_non_null(strstr(r.body, "stored policy cannot be applied"));
	it_resp_free(&r);
	run_ok(tok_globex, "echo other", "other\n"); /* other tenants unaffected */

	/* The operator resets the key; commands run again under the stored budget. */
	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"tenant_nproc_budget\": null}", NULL), 200);
	run_ok(tok, "echo back", "back\n");
	expect_cpu_file("acme", "cpu.cfs_quota_us", "20000");
	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"tenant_cpu_budget_millicores\": null}", NULL),
			 200);
	run_ok(tok, "echo default", "default\n");
	expect_cpu_file("acme", "cpu.cfs_quota_us", "50000");
}

/* A budget the kernel refuses (here: more than a quota the host put on
 * the server's own group, as a container's limit would) fails the command
 * closed, counted; once the kernel takes it, commands run again. */
static void test_refused_budget_fails_closed(void **state)
{
	(void)state;
	if (!cpu_here())
		skip();
	char *root_quota = xasprintf(CPU_DIR "/sandboxd/%ld/cpu.cfs_quota_us", base);
	/* Above every tenant's 0.5 core so far, below acme's next budget. */
	assert_int_equal(it_write_file(root_quota, "80000", 5), 0);
	char *m = metrics();
	double refused0 = -1;
	const char *hit = strstr(m, "\nsandboxd_exec_refused_limits_total ");
	assert_non_null(hit);
	refused0 = strtod(hit + strlen("\nsandboxd_exec_refused_limits_total "), NULL);
	free(m);

	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"tenant_cpu_budget_millicores\": 1000}", NULL),
			 200);
	struct it_resp raw;
	json_t *body = NULL;
	long st = ex_post(&srv, tok, NULL, json_pack("{s:s}", "command", "echo never"), &body, &raw);
	if (st != 503)
		it_show(&raw);
	it_expect_error(&raw, 503, "backend_unavailable");
	it_resp_free(&raw);
	json_decref(body);
	expect_cpu_file("acme", "cpu.cfs_quota_us", "50000"); /* the kernel kept the old one */
	m = metrics();
	hit = strstr(m, "\nsandboxd_exec_refused_limits_total ");
	assert_non_null(hit);
	assert_true(strtod(hit + strlen("\nsandboxd_exec_refused_limits_total "), NULL) >= refused0 + 1);
	free(m);
	/* Other tenants are unaffected. */
	run_ok(tok_globex, "echo fine", "fine\n");

	/* The host lifts its limit: the same budget now applies. */
	assert_int_equal(it_write_file(root_quota, "-1", 2), 0);
	run_ok(tok, "echo again", "again\n");
	expect_cpu_file("acme", "cpu.cfs_quota_us", "100000");
	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"tenant_cpu_budget_millicores\": null}", NULL),
			 200);
	free(root_quota);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_kernel_files),
	    cmocka_unit_test(test_busy_loops_bounded),
	    cmocka_unit_test(test_policy_override),
	    cmocka_unit_test(test_stored_policy_fails_closed),
	    cmocka_unit_test(test_refused_budget_fails_closed),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
