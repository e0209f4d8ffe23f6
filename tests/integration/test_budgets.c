/* Tenant budgets (issue 13, security.md item 9): the tenant, not the
 * command, is the unit of memory and processes. Each command alone stays
 * within its own limit; together they meet the tenant's budget, and only
 * that tenant's commands are stopped. Real bwrap, real cgroups.
 * The cgroup v1 driver's: it reads the v1 hierarchies' files. The v2
 * driver's budgets are test_cgroup2_limits.c's (the tenant budget over
 * three commands, pids.max), run in tests/vm's guest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#define N_HOGS 3

static struct it_server srv;
static char *tok, *tok_globex, *tok_ops;

static int setup(void **state)
{
	(void)state;
	/* A command may hold 256 MiB; acme's commands together 384 MiB and 64
	 * processes. /tmp (1 GiB, charged to the command's memory) is never
	 * what stops them. */
	const char *const extra[] = {
	    "--set", it_uid_base_arg(NULL),	  "--set", "mem-limit-bytes=268435456",
	    "--set", "tmp-size-bytes=1073741824", "--set", "tenant-mem-budget-bytes=402653184",
	    "--set", "tenant-nproc-budget=64",	  NULL};
	if (it_start(&srv, extra) < 0)
		return -1;
	tok = it_token(&srv, "acme", NULL);
	tok_globex = it_token(&srv, "globex", NULL);
	tok_ops = it_token(&srv, "ops", "admin");
	return tok && tok_globex && tok_ops ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish(&srv);
	/* A server stopped cleanly leaves no cgroup behind: its tenants'
	 * parent groups and its root are gone from both hierarchies. */
	long base = 0;
	it_uid_base_arg(&base);
	static const char *const hier[] = {"memory", "pids"};
	if (rc == 0 && it_cgroups_left(base, hier, 2) != 0) {
		it_fail_at_exit();
		rc = -1;
	}
	free(tok);
	free(tok_globex);
	free(tok_ops);
	return rc;
}

/* Wait (bounded) until command id has left its mark, or has ended. */
static void wait_marked_or_ended(const char *mark, const char *id)
{
	char path[64];
	snprintf(path, sizeof path, "/exec/%s", id);
	long until = it_now_ms() + 60000;
	while (!it_ws_exists(&srv, "acme", mark) && it_now_ms() < until) {
		json_t *v = NULL;
		long st = it_get_json(&srv, tok, path, &v);
		bool over = st == 200 && v && strcmp(jstr(v, "state"), "running") != 0;
		json_decref(v);
		if (over)
			return;
		usleep(50000);
	}
}

static void globex_served(void)
{
	json_t *r =
	    ex_ok(&srv, tok_globex, NULL, json_pack("{s:s, s:i}", "command", "echo ok", "timeout_s", 30));
	assert_string_equal(ex_stdout_ok(r), "ok\n");
	json_decref(r);
}

/* Three commands of 200 MiB each: one fits the 384 MiB budget, two do not.
 * Each marks that its fill is over (filled or stopped), then waits for the
 * gate, so at the gate every survivor still holds what it filled. */
static void test_memory_budget(void **state)
{
	(void)state;
	if (!it_cgroups_here())
		skip();
	struct bg_req b[N_HOGS];
	for (int i = 0; i < N_HOGS; i++) {
		char id[16];
		snprintf(id, sizeof id, "hog-%d", i);
		char *cmd = xasprintf(
		    "head -c 209715200 /dev/zero > /tmp/f && echo filled; touch /workspace/.done-%d; "
		    "while [ ! -e /workspace/.gate-mem ]; do sleep 0.05; done",
		    i);
		bg_exec(&b[i], &srv, tok,
			json_pack("{s:s, s:s, s:i}", "command", cmd, "id", id, "timeout_s", 120), NULL);
		free(cmd);
	}
	/* Every fill is over: marked, or its command already ended. */
	for (int i = 0; i < N_HOGS; i++) {
		char mark[32], id[16];
		snprintf(mark, sizeof mark, ".done-%d", i);
		snprintf(id, sizeof id, "hog-%d", i);
		wait_marked_or_ended(mark, id);
	}
	/* Meanwhile the other tenant is untouched. */
	globex_served();
	struct it_resp m;
	assert_int_equal(it_http(&srv, "GET", "/metrics", tok_ops, NULL, NULL, 0, &m), 0);
	assert_non_null(strstr(m.body, "sandboxd_tenant_memory_bytes{tenant=\"acme\"}"));
	assert_non_null(strstr(m.body, "\nsandboxd_tenant_memory_budget_bytes{tenant=\"acme\"} 402653184\n"));
	it_resp_free(&m);

	char *gate = xasprintf("%s/tenants/acme/workspace/.gate-mem", srv.dir);
	assert_int_equal(it_write_file(gate, "", 0), 0);
	free(gate);
	int survived_filled = 0, stopped = 0;
	for (int i = 0; i < N_HOGS; i++) {
		json_t *r = bg_join(&b[i]);
		assert_non_null(r);
		bool filled = strstr(jstr(r, "stdout"), "filled") != NULL;
		if (filled && jint(r, "exit_code") == 0)
			survived_filled++;
		if (!filled || jint(r, "exit_code") != 0)
			stopped++;
		json_decref(r);
		it_resp_free(&b[i].resp);
	}
	if (survived_filled > 1)
		fprintf(stderr, "%d commands of acme held 200 MiB each at once: no budget\n",
			survived_filled);
	assert_true(survived_filled <= 1); /* two would be 400 MiB > 384 MiB */
	assert_true(stopped >= N_HOGS - 1);
	globex_served();
}

/* Processes: each command may have 256, the tenant 64 together. Two
 * commands of 40 sleepers each cannot both have them; counted on the host
 * while both hold what they got. */
static void test_pids_budget(void **state)
{
	(void)state;
	if (!it_cgroups_here())
		skip();
	char nonce[32];
	snprintf(nonce, sizeof nonce, "6%d", (int)getpid() % 100000);
	struct bg_req b[2];
	for (int i = 0; i < 2; i++) {
		char id[16];
		snprintf(id, sizeof id, "procs-%d", i);
		char *cmd =
		    xasprintf("for k in $(seq 1 40); do sleep %s & done; touch /workspace/.pdone-%d; "
			      "while [ ! -e /workspace/.gate-pids ]; do sleep 0.05; done; kill $(jobs -p)",
			      nonce, i);
		bg_exec(&b[i], &srv, tok,
			json_pack("{s:s, s:s, s:i}", "command", cmd, "id", id, "timeout_s", 120), NULL);
		free(cmd);
	}
	for (int i = 0; i < 2; i++) {
		char mark[32], id[16];
		snprintf(mark, sizeof mark, ".pdone-%d", i);
		snprintf(id, sizeof id, "procs-%d", i);
		wait_marked_or_ended(mark, id);
	}
	long uid = 0;
	it_uid_base_arg(&uid); /* acme is the first tenant: base + 0 */
	int sleepers = host_procs_of_uid((uid_t)uid, "sleep", nonce);
	globex_served();
	char *gate = xasprintf("%s/tenants/acme/workspace/.gate-pids", srv.dir);
	assert_int_equal(it_write_file(gate, "", 0), 0);
	free(gate);
	int stopped = 0;
	for (int i = 0; i < 2; i++) {
		json_t *r = bg_join(&b[i]);
		assert_non_null(r);
		stopped += jint(r, "exit_code") != 0;
		json_decref(r);
		it_resp_free(&b[i].resp);
	}
	if (sleepers > 64)
		fprintf(stderr, "acme had %d sleepers at once: no process budget\n", sleepers);
	assert_true(sleepers <= 64);
	assert_true(stopped >= 1); /* 80 sleepers cannot all have started */
	assert_int_equal(host_procs_wait_gone((uid_t)uid, "sleep", nonce, 10000), 0);
	globex_served();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_memory_budget),
	    cmocka_unit_test(test_pids_budget),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
