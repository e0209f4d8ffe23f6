/* Several runner threads (issue 15, P3: `runner-threads`), through the
 * real bwrap backend: two commands running at once are owned by different
 * threads (/readyz lists each thread's commands; /metrics counts each
 * thread's starts); each gets its stdin and is cancelled by its id; each
 * times out (and idles out) on its own thread; and a server killed with
 * SIGKILL takes the commands of every thread with it (bwrap's
 * --die-with-parent follows the thread that spawned). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_agent.h"

static struct it_server srv;
static long uid_base;
static char *tok;
static const struct it_tok toks[] = {{&tok, "acme", "exec fs:read fs:write audit:read"}};
static const char *extra[8];

static int setup(void **state)
{
	(void)state;
	const char *const args[] = {"--set", it_uid_base_arg(&uid_base), "--set", "runner-threads=2", NULL};
	memcpy(extra, args, sizeof args);
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* GET /readyz's runner object (new reference). */
static json_t *readyz_runner(long *status)
{
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/readyz", NULL, NULL, NULL, 0, &r), 0);
	*status = r.status;
	json_t *body = it_json(&r);
	it_resp_free(&r);
	json_t *runner = json_incref(json_object_get(body, "runner"));
	json_decref(body);
	assert_non_null(runner);
	return runner;
}

/* Wait (bounded) until runner thread i owns want[i] commands, each i. */
static bool threads_own(const long want[2], long timeout_ms)
{
	long until = it_now_ms() + timeout_ms;
	bool ok = false;
	do {
		long status = 0;
		json_t *run = readyz_runner(&status);
		json_t *th = json_object_get(run, "threads");
		ok = json_array_size(th) == 2;
		for (size_t i = 0; ok && i < 2; i++)
			ok = jint(json_array_get(th, i), "commands") == want[i];
		json_decref(run);
		if (!ok)
			usleep(30000);
	} while (!ok && it_now_ms() < until);
	return ok;
}

/* sandboxd_runner_spawns_total of thread i, from /metrics. */
static long long spawns_of(int i)
{
	struct it_resp m;
	assert_int_equal(it_http(&srv, "GET", "/metrics", tok, NULL, NULL, 0, &m), 0);
	assert_int_equal(m.status, 200);
	char key[64];
	snprintf(key, sizeof key, "sandboxd_runner_spawns_total{thread=\"%d\"} ", i);
	const char *hit = strstr(m.body, key);
	assert_non_null(hit);
	long long n = strtoll(hit + strlen(key), NULL, 10);
	it_resp_free(&m);
	return n;
}

static void start_bg(json_t *req)
{
	json_object_set_new(req, "background", json_true());
	json_t *v = ag_expect(&srv, tok, NULL, "/exec", req, 202);
	assert_string_equal(jstr(v, "state"), "running");
	json_decref(v);
}

/* The content of a session file once it has some (bounded wait); owned. */
static char *file_when_written(const char *path, long timeout_ms)
{
	char url[128];
	snprintf(url, sizeof url, "/fs/read?path=%s", path);
	long until = it_now_ms() + timeout_ms;
	char *text = NULL;
	do {
		struct it_resp r;
		assert_int_equal(it_http(&srv, "GET", url, tok, NULL, NULL, 0, &r), 0);
		if (r.status == 200 && r.len > 0)
			text = xstrndup(r.body, r.len);
		it_resp_free(&r);
		if (!text)
			usleep(30000);
	} while (!text && it_now_ms() < until);
	return text;
}

static void cancel_by_id(const char *id)
{
	char path[64];
	struct it_resp r;
	snprintf(path, sizeof path, "/exec/%s/cancel", id);
	assert_int_equal(it_http(&srv, "POST", path, tok, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 202);
	it_resp_free(&r);
}

/* Idle: every thread listed, turning, owning nothing; /metrics has them. */
static void test_every_thread_listed(void **state)
{
	(void)state;
	long status = 0;
	json_t *run = readyz_runner(&status);
	assert_int_equal(status, 200);
	assert_string_equal(jstr(run, "status"), "ok");
	assert_string_equal(jstr(run, "detail"), "turning (2 threads)");
	json_t *th = json_object_get(run, "threads");
	assert_int_equal(json_array_size(th), 2);
	for (size_t i = 0; i < 2; i++) {
		assert_string_equal(jstr(json_array_get(th, i), "status"), "ok");
		assert_int_equal(jint(json_array_get(th, i), "queued"), 0);
	}
	json_decref(run);
	struct it_resp m;
	assert_int_equal(it_http(&srv, "GET", "/metrics", tok, NULL, NULL, 0, &m), 0);
	assert_non_null(strstr(m.body, "\nsandboxd_runner_threads 2\n"));
	assert_non_null(strstr(m.body, "\nsandboxd_runner_queued{thread=\"1\"} 0\n"));
	assert_non_null(strstr(m.body, "\nsandboxd_runner_spawn_overlap_total{others=\"1\"} "));
	it_resp_free(&m);
}

/* Two long commands at once: one per thread; stdin reaches each, whichever
 * thread owns it; each is cancelled by its id, and is gone from the host. */
static void test_stdin_and_cancel_on_both_threads(void **state)
{
	(void)state;
	char nonce[2][32], cmd[2][160], id[2][16], file[2][16];
	for (int i = 0; i < 2; i++) {
		snprintf(nonce[i], sizeof nonce[i], "600%d.%d", i + 1, (int)getpid());
		snprintf(file[i], sizeof file[i], "rt-%d.txt", i);
		snprintf(cmd[i], sizeof cmd[i], "read l; echo \"got $l\" > %s; exec sleep %s", file[i],
			 nonce[i]);
		snprintf(id[i], sizeof id[i], "rt-%d", i);
		start_bg(json_pack("{s:s, s:s, s:b}", "command", cmd[i], "id", id[i], "stdin_pipe", 1));
	}
	const long one_each[2] = {1, 1}, none[2] = {0, 0};
	assert_true(threads_own(one_each, 10000));
	/* the later one first: each answers only its own line */
	assert_int_equal(ag_stdin(&srv, tok, id[1], "bee\n", false, NULL), 200);
	assert_int_equal(ag_stdin(&srv, tok, id[0], "ay\n", false, NULL), 200);
	char *got = file_when_written(file[1], 20000);
	assert_non_null(got);
	assert_string_equal(got, "got bee\n");
	free(got);
	got = file_when_written(file[0], 20000);
	assert_non_null(got);
	assert_string_equal(got, "got ay\n");
	free(got);
	for (int i = 0; i < 2; i++)
		assert_true(host_procs_wait_gone((uid_t)uid_base, NULL, nonce[i], 0) > 0);
	cancel_by_id(id[1]);
	cancel_by_id(id[0]);
	for (int i = 0; i < 2; i++) {
		json_t *v = ex_wait_state(&srv, tok, id[i], "cancelled", 20000);
		assert_non_null(v);
		assert_true(jtrue(json_object_get(v, "result"), "cancelled"));
		json_decref(v);
		assert_int_equal(host_procs_wait_gone((uid_t)uid_base, NULL, nonce[i], 10000), 0);
	}
	assert_true(threads_own(none, 10000));
}

/* A timeout and an idle timeout, each on its own thread (each thread's
 * start count grows by one). */
static void test_timeouts_on_both_threads(void **state)
{
	(void)state;
	long long before[2] = {spawns_of(0), spawns_of(1)};
	start_bg(
	    json_pack("{s:s, s:s, s:i}", "command", "exec sleep 600", "id", "rt-timeout", "timeout_s", 1));
	start_bg(
	    json_pack("{s:s, s:s, s:i}", "command", "exec sleep 600", "id", "rt-idle", "idle_timeout_s", 1));
	json_t *v = ex_wait_state(&srv, tok, "rt-timeout", "timed_out", 20000);
	assert_non_null(v);
	assert_int_equal(jint(json_object_get(v, "result"), "exit_code"), 124);
	assert_false(jtrue(json_object_get(v, "result"), "idle"));
	json_decref(v);
	v = ex_wait_state(&srv, tok, "rt-idle", "timed_out", 20000);
	assert_non_null(v);
	assert_int_equal(jint(json_object_get(v, "result"), "exit_code"), 124);
	assert_true(jtrue(json_object_get(v, "result"), "idle"));
	json_decref(v);
	assert_int_equal(spawns_of(0), before[0] + 1);
	assert_int_equal(spawns_of(1), before[1] + 1);
}

/* SIGKILL to the server: the commands of both threads die with it; after
 * a restart both execs are `lost`. */
static void test_kill9_kills_every_threads_commands(void **state)
{
	(void)state;
	char nonce[2][32], cmd[2][64], id[2][16];
	for (int i = 0; i < 2; i++) {
		snprintf(nonce[i], sizeof nonce[i], "610%d.%d", i + 1, (int)getpid());
		int n = snprintf(cmd[i], sizeof cmd[i], "exec sleep %s", nonce[i]);
		assert_true(n > 0 && (size_t)n < sizeof cmd[i]);
		snprintf(id[i], sizeof id[i], "rt-kill-%d", i);
		start_bg(json_pack("{s:s, s:s}", "command", cmd[i], "id", id[i]));
	}
	const long one_each[2] = {1, 1};
	assert_true(threads_own(one_each, 10000));
	for (int i = 0; i < 2; i++) {
		long until = it_now_ms() + 10000;
		while (host_procs_of_uid((uid_t)uid_base, "sleep", nonce[i]) == 0 && it_now_ms() < until)
			usleep(20000);
		assert_int_equal(host_procs_of_uid((uid_t)uid_base, "sleep", nonce[i]), 1);
	}
	assert_int_equal(it_stop(&srv, SIGKILL), 128 + SIGKILL);
	for (int i = 0; i < 2; i++)
		assert_int_equal(host_procs_wait_gone((uid_t)uid_base, NULL, nonce[i], 10000), 0);
	/* restarted (which also sweeps the killed server's cgroups) */
	assert_int_equal(it_restart(&srv, extra), 0);
	for (int i = 0; i < 2; i++) {
		json_t *v = NULL;
		char path[64];
		snprintf(path, sizeof path, "/exec/%s", id[i]);
		assert_int_equal(it_get_json(&srv, tok, path, &v), 200);
		assert_string_equal(jstr(v, "state"), "lost");
		json_decref(v);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_thread_listed),
	    cmocka_unit_test(test_stdin_and_cancel_on_both_threads),
	    cmocka_unit_test(test_timeouts_on_both_threads),
	    cmocka_unit_test(test_kill9_kills_every_threads_commands),
	};
	return cmocka_run_group_tests_name("runners", tests, setup, teardown);
}
