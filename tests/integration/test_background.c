/* Background execs and their stdin (issue 17), through the real bwrap
 * backend: a process that outlives its request and answers on later ones,
 * stopped by cancel and by DELETE /session; a REPL driven line by line
 * through POST /exec/{id}/stdin with its answers read from the event
 * stream; stdin back-pressure (a command that does not read: writes are
 * refused with 429 once its bounded queue is full, memory stays flat,
 * and they are taken again once it reads); the tenant's exec limit; a
 * restart turning a running background exec into `lost`; the audit of
 * stdin writes (size, never content). */
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

#define STDIN_BUFFER 65536
#define PIPE_CAPACITY 65536 /* Linux's default pipe buffer */

static struct it_server srv;
static long uid_base;
static char *tok;
static const struct it_tok toks[] = {{&tok, "acme", NULL}};

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", it_uid_base_arg(&uid_base), "--set", "tenant-max-execs=3",
				     NULL};
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* POST /exec with background: 202 at once, the exec's view. */
static json_t *start_bg(const char *const *hdrs, json_t *req)
{
	json_object_set_new(req, "background", json_true());
	json_t *v = ag_expect(&srv, tok, hdrs, "/exec", req, 202);
	assert_string_equal(jstr(v, "state"), "running");
	assert_true(json_is_null(json_object_get(v, "result")));
	return v;
}

static long long read_counter(const char *const *hdrs)
{
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/fs/read?path=counter", tok, hdrs, NULL, 0, &r), 0);
	long long v = r.status == 200 && r.body ? strtoll(r.body, NULL, 10) : -1;
	it_resp_free(&r);
	return v;
}

/* Wait until the counter file holds more than after. */
static long long counter_above(const char *const *hdrs, long long after)
{
	long long v = -1;
	for (long until = it_now_ms() + 20000; it_now_ms() < until; usleep(30000))
		if ((v = read_counter(hdrs)) > after)
			return v;
	return v;
}

#define COUNTER_LOOP                                                                                         \
	"i=0; while :; do i=$((i+1)); echo $i > counter.tmp; mv counter.tmp counter; sleep 0.05; done # "

/* It keeps running across requests, shows its progress, and cancel stops it. */
static void test_outlives_request_until_cancel(void **state)
{
	(void)state;
	const char *const hdrs[] = {"X-Session-Key: bg-cancel", NULL};
	long t0 = it_now_ms();
	json_t *v =
	    start_bg(hdrs, json_pack("{s:s, s:s}", "command", COUNTER_LOOP "bg-cancel-nonce", "id", "bg-c"));
	assert_true(it_now_ms() - t0 < 10000); /* answered, not waited on */
	json_decref(v);
	long long a = counter_above(hdrs, 0);
	assert_true(a > 0);
	long long b = counter_above(hdrs, a);
	assert_true(b > a);
	/* the view while it runs: state running, progress so far */
	v = ex_wait_state(&srv, tok, "bg-c", "running", 5000);
	assert_non_null(v);
	json_t *p = json_object_get(v, "progress");
	assert_true(json_is_object(p));
	assert_true(jint(p, "elapsed_ms") > 0);
	assert_true(json_is_string(json_object_get(p, "tail")));
	json_decref(v);
	assert_int_equal(it_get_json(&srv, tok, "/execs?state=running", &v), 200);
	char *text = json_dumps(v, 0);
	json_decref(v);
	assert_non_null(strstr(text, "\"bg-c\""));
	free(text);
	/* the same id and request again: its view, not a second run */
	v = start_bg(hdrs, json_pack("{s:s, s:s}", "command", COUNTER_LOOP "bg-cancel-nonce", "id", "bg-c"));
	json_decref(v);
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", "/exec/bg-c/cancel", tok, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 202);
	it_resp_free(&r);
	v = ex_wait_state(&srv, tok, "bg-c", "cancelled", 20000);
	assert_non_null(v);
	assert_true(jtrue(json_object_get(v, "result"), "cancelled"));
	json_decref(v);
	assert_int_equal(host_procs_wait_gone((uid_t)uid_base, NULL, "bg-cancel-nonce", 10000), 0);
}

/* DELETE /session stops the session's background commands first. */
static void test_stopped_by_session_delete(void **state)
{
	(void)state;
	const char *const hdrs[] = {"X-Session-Key: bg-delete", NULL};
	json_t *v =
	    start_bg(hdrs, json_pack("{s:s, s:s}", "command", COUNTER_LOOP "bg-delete-nonce", "id", "bg-d"));
	json_decref(v);
	assert_true(counter_above(hdrs, 0) > 0);
	struct it_resp r;
	assert_int_equal(it_http(&srv, "DELETE", "/session", tok, hdrs, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
	/* stopped before the answer: recorded as cancelled already */
	assert_int_equal(it_get_json(&srv, tok, "/exec/bg-d", &v), 200);
	assert_string_equal(jstr(v, "state"), "cancelled");
	assert_int_equal(jint(json_object_get(v, "result"), "exit_code"), 137);
	json_decref(v);
	assert_int_equal(host_procs_wait_gone((uid_t)uid_base, NULL, "bg-delete-nonce", 10000), 0);
	/* and the directory is gone with nothing writing into it */
	assert_int_equal(read_counter(hdrs), -1);
}

/* A REPL driven line by line; its answers read from the event stream. */
static void test_repl_through_stdin(void **state)
{
	(void)state;
	json_t *v = start_bg(
	    NULL, json_pack("{s:s, s:s, s:b}", "command", "python3 -i -u", "id", "repl", "stdin_pipe", 1));
	json_decref(v);
	struct ag_follow f;
	ag_follow_open(&f, &srv, tok, "repl");
	static const struct {
		const char *line, *answer;
	} steps[] = {
	    {"x = 6 * 7\n", NULL},
	    {"print('answer', x)\n", "answer 42\n"},
	    {"print('answer', x + 1)\n", "answer 43\n"},
	    {"import sys; print('tty', sys.stdin.isatty())\n", "tty False\n"},
	};
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		size_t from = f.out.len;
		struct it_resp r;
		assert_int_equal(ag_stdin(&srv, tok, "repl", steps[i].line, false, &r), 200);
		json_t *a = it_json(&r);
		assert_int_equal(jint(a, "accepted"), (long long)strlen(steps[i].line));
		json_decref(a);
		it_resp_free(&r);
		if (steps[i].answer)
			assert_true(ag_follow_wait(&f, from, steps[i].answer, 20000));
	}
	/* eof ends the REPL: exit 0 */
	assert_int_equal(ag_stdin(&srv, tok, "repl", "", true, NULL), 200);
	assert_true(ag_follow_exit(&f, 20000));
	ag_follow_close(&f);
	v = ex_wait_state(&srv, tok, "repl", "exited", 20000);
	assert_non_null(v);
	assert_int_equal(jint(json_object_get(v, "result"), "exit_code"), 0);
	json_decref(v);
	/* stdin of a finished exec: 409; of an unknown one: 404 */
	struct it_resp r;
	assert_int_equal(ag_stdin(&srv, tok, "repl", "1\n", false, &r), 409);
	it_expect_error(&r, 409, "conflict");
	it_resp_free(&r);
	assert_int_equal(ag_stdin(&srv, tok, "no-such-exec", "1\n", false, &r), 404);
	it_resp_free(&r);
	/* the audit names the exec and the size, never the bytes */
	json_t *row = ag_audit_row(&srv, "/exec/{id}/stdin", "repl stdin 19 bytes");
	assert_non_null(row);
	char *text = json_dumps(row, 0);
	json_decref(row);
	assert_null(strstr(text, "answer"));
	free(text);
}

/* A command that does not read: the queue fills, writes are refused with
 * 429 and Retry-After (nothing taken), memory stays flat; once it reads,
 * writes are taken again. */
static void test_stdin_back_pressure(void **state)
{
	(void)state;
	const char *const hdrs[] = {"X-Session-Key: bg-press", NULL};
	json_t *v = start_bg(hdrs, json_pack("{s:s, s:s, s:b}", "command",
					     "while [ ! -e go ]; do sleep 0.05; done; exec wc -c", "id",
					     "press", "stdin_pipe", 1));
	json_decref(v);
	char *chunk = xmalloc(16385);
	memset(chunk, 'z', 16384);
	chunk[16384] = '\0';
	long long accepted = 0;
	long refused = 0; /* in a row: the runner moves the queue into the pipe as it can */
	long rss0 = it_rss_kib(&srv);
	for (long until = it_now_ms() + 30000; refused < 20 && it_now_ms() < until;) {
		struct it_resp r;
		long st = ag_stdin(&srv, tok, "press", chunk, false, &r);
		if (st == 200) {
			accepted += 16384;
			refused = 0;
		} else {
			it_expect_error(&r, 429, "too_many_requests");
			char *ra = it_header(&r, "Retry-After");
			assert_non_null(ra);
			assert_string_equal(ra, "1");
			free(ra);
			refused++;
		}
		it_resp_free(&r);
		assert_true(accepted <= STDIN_BUFFER + PIPE_CAPACITY);
	}
	assert_int_equal(refused, 20);
	assert_true(accepted >= STDIN_BUFFER);
	assert_true(accepted <= STDIN_BUFFER + PIPE_CAPACITY);
	assert_true(it_rss_kib(&srv) - rss0 < 16 * 1024);
	/* one write larger than the whole queue can never fit: 413 */
	char *big = xmalloc(STDIN_BUFFER + 2);
	memset(big, 'y', STDIN_BUFFER + 1);
	big[STDIN_BUFFER + 1] = '\0';
	struct it_resp r;
	assert_int_equal(ag_stdin(&srv, tok, "press", big, false, &r), 413);
	it_resp_free(&r);
	free(big);
	/* it reads now: the same write is taken again */
	assert_int_equal(it_http(&srv, "PUT", "/fs/write?path=go", tok, hdrs, "", 0, &r), 0);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
	long st = 0;
	for (long until = it_now_ms() + 20000; st != 200 && it_now_ms() < until; usleep(20000))
		st = ag_stdin(&srv, tok, "press", chunk, false, NULL);
	assert_int_equal(st, 200);
	accepted += 16384;
	assert_int_equal(ag_stdin(&srv, tok, "press", "", true, NULL), 200);
	v = ex_wait_state(&srv, tok, "press", "exited", 20000);
	assert_non_null(v);
	json_t *res = json_object_get(v, "result");
	assert_int_equal(jint(res, "exit_code"), 0);
	assert_int_equal(strtoll(jstr(res, "stdout"), NULL, 10), accepted); /* every byte taken, once */
	json_decref(v);
	free(chunk);
}

/* stdin needs stdin_pipe; background excludes stream. */
static void test_stdin_needs_a_pipe(void **state)
{
	(void)state;
	json_t *v =
	    start_bg(NULL, json_pack("{s:s, s:s}", "command", "sleep 600 # nopipe-nonce", "id", "nopipe"));
	json_decref(v);
	struct it_resp r;
	assert_int_equal(ag_stdin(&srv, tok, "nopipe", "x", false, &r), 409);
	it_expect_error(&r, 409, "conflict");
	it_resp_free(&r);
	assert_int_equal(it_http(&srv, "POST", "/exec/nopipe/cancel", tok, NULL, NULL, 0, &r), 0);
	it_resp_free(&r);
	json_decref(ex_wait_state(&srv, tok, "nopipe", "cancelled", 20000));
	assert_int_equal(
	    ag_post(&srv, tok, NULL, "/exec",
		    json_pack("{s:s, s:b, s:b}", "command", "true", "background", 1, "stream", 1), NULL, &r),
	    400);
	it_resp_free(&r);
}

/* Background execs count against the tenant's concurrent limit (3 here). */
static void test_counted_against_the_limit(void **state)
{
	(void)state;
	char id[16];
	for (int i = 0; i < 3; i++) {
		snprintf(id, sizeof id, "lim-%d", i);
		json_decref(
		    start_bg(NULL, json_pack("{s:s, s:s}", "command", "sleep 600 # lim-nonce", "id", id)));
	}
	struct it_resp r;
	assert_int_equal(ag_post(&srv, tok, NULL, "/exec",
				 json_pack("{s:s, s:b}", "command", "true", "background", 1), NULL, &r),
			 429);
	it_expect_error(&r, 429, "too_many_requests");
	it_resp_free(&r);
	for (int i = 0; i < 3; i++) {
		char path[64];
		snprintf(path, sizeof path, "/exec/lim-%d/cancel", i);
		assert_int_equal(it_http(&srv, "POST", path, tok, NULL, NULL, 0, &r), 0);
		assert_int_equal(r.status, 202);
		it_resp_free(&r);
		snprintf(id, sizeof id, "lim-%d", i);
		json_decref(ex_wait_state(&srv, tok, id, "cancelled", 20000));
	}
	/* a slot is free again */
	json_t *res = ag_expect(&srv, tok, NULL, "/exec", json_pack("{s:s}", "command", "true"), 200);
	json_decref(res);
}

/* A crash of the server turns a running background exec into `lost`. */
static void test_lost_across_a_crash(void **state)
{
	(void)state;
	json_decref(
	    start_bg(NULL, json_pack("{s:s, s:s}", "command", "sleep 600 # lost-nonce", "id", "bg-lost")));
	assert_int_equal(it_stop(&srv, SIGKILL), 128 + SIGKILL);
	char base[48];
	snprintf(base, sizeof base, "uid-base=%ld", uid_base);
	const char *const extra[] = {"--set", base, "--set", "tenant-max-execs=3", NULL};
	assert_int_equal(it_restart(&srv, extra), 0);
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/exec/bg-lost", &v), 200);
	assert_string_equal(jstr(v, "state"), "lost");
	json_decref(v);
	assert_int_equal(host_procs_wait_gone((uid_t)uid_base, NULL, "lost-nonce", 10000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_outlives_request_until_cancel),
	    cmocka_unit_test(test_stopped_by_session_delete),
	    cmocka_unit_test(test_repl_through_stdin),
	    cmocka_unit_test(test_stdin_back_pressure),
	    cmocka_unit_test(test_stdin_needs_a_pipe),
	    cmocka_unit_test(test_counted_against_the_limit),
	    cmocka_unit_test(test_lost_across_a_crash),
	};
	return cmocka_run_group_tests_name("background", tests, setup, teardown);
}
