/* Warm sandboxes (issue 30; sandbox/warm.h), against the real binary,
 * real bwrap and real cgroups: a command that starts in a warm sandbox
 * sees nothing of the commands before it in the same pool (files in /tmp
 * and /dev/shm, processes, environment, open fds); a policy change
 * reaches the very next command (no stale sandbox); waiting sandboxes
 * count against the tenant's process budget and end when idle; a killed
 * server leaves none behind; with warm-pool=0 nothing is made ahead.
 * Every check that a command ran warm reads the server's own counter, so
 * that a pool that silently served nothing fails here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

#define WAIT_MS 60000 /* a sandbox is made in ~10 ms here; a TCG guest or a loaded CI machine is slower */

static struct it_server srv;
static long uid_base;
static char *tok, *tok_ops;
static const struct it_tok toks[] = {{&tok, "acme", NULL}, {&tok_ops, "ops", "admin"}};

static int start_with(const char *pool, const char *idle)
{
	char *p = xasprintf("warm-pool=%s", pool), *i = xasprintf("warm-idle-s=%s", idle);
	const char *const extra[] = {"--set", it_uid_base_arg(&uid_base), "--set", p, "--set", i, NULL};
	int rc = it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
	free(p);
	free(i);
	return rc;
}

static int setup(void **state)
{
	(void)state;
	return start_with("2", "600");
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

static long warm_metric(const char *series)
{
	return it_metric(&srv, tok_ops, series);
}

static long started_warm(void)
{
	return warm_metric("sandboxd_warm_commands_total{start=\"warm\"}");
}

/* Wait until n sandboxes wait (bounded). */
static void wait_waiting(long n)
{
	long until = it_now_ms() + WAIT_MS, got;
	while ((got = warm_metric("sandboxd_warm_sandboxes")) < n && it_now_ms() < until)
		usleep(20000);
	if (got < n)
		fprintf(stderr, "warm sandboxes: %ld waiting, wanted %ld (log %s)\n", got, n, srv.log);
	assert_true(got >= n);
}

/* Run cmd, asserting it started warm: returns its stdout (owned). */
static char *run_warm(const char *cmd, json_t *env)
{
	long before = started_warm();
	json_t *req = json_pack("{s:s, s:i}", "command", cmd, "timeout_s", 30);
	if (env)
		json_object_set_new(req, "env", env);
	json_t *res = ex_ok(&srv, tok, NULL, req);
	char *out = xstrdup(ex_stdout_ok(res));
	json_decref(res);
	assert_int_equal(started_warm(), before + 1);
	return out;
}

static uid_t tenant_uid(void)
{
	json_t *res = ex_run(&srv, tok, "id -u");
	uid_t uid = (uid_t)strtoul(ex_stdout_ok(res), NULL, 10);
	json_decref(res);
	assert_true(uid > 0);
	return uid;
}

/* What one command leaves behind, the next of the same pool does not see. */
static void test_nothing_passes_between_commands(void **state)
{
	(void)state;
	json_decref(ex_run(&srv, tok, "true")); /* the pool learns the tenant's shape */
	wait_waiting(2);
	free(run_warm("echo left > /tmp/mark; echo left > /dev/shm/mark; "
		      "setsid sleep 300 </dev/null >/dev/null 2>&1 & "
		      "exec 7>/tmp/held; test \"$WARM_SECRET\" = s3cret",
		      json_pack("{s:s}", "WARM_SECRET", "s3cret")));
	/* One made before that command ran, then one made after it. */
	for (int round = 0; round < 2; round++) {
		if (round == 1)
			wait_waiting(2);
		char *out = run_warm("test ! -e /tmp/mark && test ! -e /dev/shm/mark && echo files-clean; "
				     "ps -e -o comm= | grep -qx sleep || echo procs-clean; "
				     "test -z \"$WARM_SECRET\" && echo env-clean; "
				     "ls /proc/self/fd | tr '\\n' ' '; echo; "
				     "ls -l /proc/1/fd | grep -c -e socket: -e memfd:; pwd; "
				     "echo \"$HOME $USER $PATH\"",
				     NULL);
		assert_non_null(strstr(out, "files-clean\n"));
		assert_non_null(strstr(out, "procs-clean\n"));
		assert_non_null(strstr(out, "env-clean\n"));
		/* ls's own directory fd is 3: nothing of the pool's socket
		 * or launcher reaches the command, nor its pid 1 (bwrap's). */
		assert_non_null(strstr(out, "\n0 1 2 3 \n0\n"));
		assert_non_null(strstr(out, "/workspace/sessions/"));
		assert_non_null(strstr(out, "/workspace sandbox /usr/local/bin:/usr/bin:/bin\n"));
		free(out);
	}
}

/* The request's cwd, environment (a name given twice: the last wins, a
 * base name replaced) and stdin reach a warm command as a cold one's. */
static void test_request_reaches_warm_command(void **state)
{
	(void)state;
	json_decref(ex_run(&srv, tok, "mkdir -p sub/dir"));
	wait_waiting(2);
	long before = started_warm();
	json_t *req = json_pack("{s:s, s:s, s:s, s:{s:s, s:s}, s:i}", "command",
				"pwd; echo \"$HOME $GREETING\"; cat", "cwd", "sub/dir", "stdin", "from stdin",
				"env", "HOME", "/workspace/sub", "GREETING", "hello", "timeout_s", 30);
	json_t *res = ex_ok(&srv, tok, NULL, req);
	const char *out = ex_stdout_ok(res);
	assert_non_null(strstr(out, "/sub/dir\n/workspace/sub hello\nfrom stdin"));
	json_decref(res);
	assert_int_equal(started_warm(), before + 1);
	/* A cwd that is no directory is refused as before, and takes none. */
	wait_waiting(2);
	before = started_warm();
	json_t *bad = NULL;
	long st =
	    ex_post(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "true", "cwd", "nope"), &bad, NULL);
	assert_int_not_equal(st, 200);
	json_decref(bad);
	assert_int_equal(started_warm(), before);
	assert_int_equal(warm_metric("sandboxd_warm_sandboxes"), 2);
}

/* A policy change (here the command's memory limit, RLIMIT_AS) is in
 * force for the next command although sandboxes of the old policy wait:
 * they are ended, the command starts cold with the new limit, and the
 * pool refills with the new one. */
static void test_policy_change_reaches_next_command(void **state)
{
	(void)state;
	json_decref(ex_run(&srv, tok, "true"));
	wait_waiting(2);
	long ended = warm_metric("sandboxd_warm_made_total{outcome=\"ended\"}");
	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"mem_limit_bytes\": 402653184}", NULL), 200);
	json_t *res = ex_run(&srv, tok, "ulimit -v");
	assert_string_equal(ex_stdout_ok(res), "393216\n"); /* KiB */
	json_decref(res);
	assert_true(warm_metric("sandboxd_warm_made_total{outcome=\"ended\"}") >= ended + 2);
	wait_waiting(2);
	char *out = run_warm("ulimit -v", NULL);
	assert_string_equal(out, "393216\n");
	free(out);
}

/* Waiting sandboxes are the tenant's processes: counted in its cgroup
 * (its process budget), run as its uid; they end when idle, and none
 * survives a server killed with SIGKILL. */
static void test_budget_idle_and_kill(void **state)
{
	(void)state;
	uid_t uid = tenant_uid();
	wait_waiting(2);
	/* bwrap's outer process, its pid 1 and the launcher, for each */
	assert_true(host_procs_of_uid(uid, NULL, NULL) >= 6);
	if (it_cgroups_here()) {
		char series[96];
		snprintf(series, sizeof series, "sandboxd_tenant_processes{tenant=\"acme\"}");
		assert_true(it_metric(&srv, tok_ops, series) >= 6);
	}

	/* Idle: a server whose sandboxes end after a second. */
	assert_int_equal(it_finish_minted(&srv, toks, IT_NTOKS(toks)), 0);
	assert_int_equal(host_procs_wait_gone(uid, NULL, NULL, WAIT_MS), 0); /* a clean stop ends them */
	assert_int_equal(start_with("2", "1"), 0);
	uid = tenant_uid();
	long until = it_now_ms() + WAIT_MS;
	while (warm_metric("sandboxd_warm_made_total{outcome=\"ready\"}") < 1 && it_now_ms() < until)
		usleep(20000);
	assert_true(warm_metric("sandboxd_warm_made_total{outcome=\"ready\"}") >= 1);
	until = it_now_ms() + WAIT_MS;
	while (warm_metric("sandboxd_warm_sandboxes") > 0 && it_now_ms() < until)
		usleep(50000);
	assert_int_equal(warm_metric("sandboxd_warm_sandboxes"), 0);
	assert_int_equal(host_procs_wait_gone(uid, NULL, NULL, WAIT_MS), 0);

	/* Killed: the sandboxes die with it. */
	assert_int_equal(it_finish_minted(&srv, toks, IT_NTOKS(toks)), 0);
	assert_int_equal(start_with("2", "600"), 0);
	uid = tenant_uid();
	wait_waiting(2);
	assert_true(host_procs_of_uid(uid, NULL, NULL) >= 6);
	it_stop(&srv, SIGKILL);
	assert_int_equal(host_procs_wait_gone(uid, NULL, NULL, WAIT_MS), 0);
	assert_int_equal(it_finish_minted(&srv, toks, IT_NTOKS(toks)), 0);
	assert_int_equal(start_with("2", "600"), 0);
}

/* warm-pool=0: every command starts cold, nothing waits. */
static void test_pool_off(void **state)
{
	(void)state;
	assert_int_equal(it_finish_minted(&srv, toks, IT_NTOKS(toks)), 0);
	assert_int_equal(start_with("0", "600"), 0);
	for (int i = 0; i < 3; i++)
		json_decref(ex_run(&srv, tok, "true"));
	assert_int_equal(warm_metric("sandboxd_warm_sandboxes"), 0);
	assert_int_equal(started_warm(), 0);
	assert_int_equal(warm_metric("sandboxd_warm_made_total{outcome=\"ready\"}"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_nothing_passes_between_commands),
	    cmocka_unit_test(test_request_reaches_warm_command),
	    cmocka_unit_test(test_policy_change_reaches_next_command),
	    cmocka_unit_test(test_budget_idle_and_kill),
	    cmocka_unit_test(test_pool_off),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
