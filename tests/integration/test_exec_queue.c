/* The exec admission queue (routes/admit.h), end to end: a POST /exec of
 * a tenant at max_execs waits for a slot, oldest first, within
 * tenant-exec-queue places and exec-queue-wait-ms; beyond either, 429
 * with Retry-After. A waiting request has no exec row; its client leaving
 * frees its place, and so does a cancel by its id (it ends cancelled
 * without running); shutdown answers it. Commands wait on gate files the
 * test creates, so nothing depends on timing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

static struct it_server srv;		  /* max_execs 2, 2 places, a long wait bound */
static struct it_server s2;		  /* max_execs 1, a short wait bound */
static char *tok, *tok_audit, *tok_write; /* acme: default scopes; audit:read (/metrics); exec fs:write */
static const struct it_tok toks[] = {
    {&tok, "acme", NULL}, {&tok_audit, "acme", "audit:read"}, {&tok_write, "acme", "exec fs:write"}};

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", "tenant-max-execs=2",	   "--set", "tenant-exec-queue=2",
				     "--set", "exec-queue-wait-ms=120000", NULL};
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	it_cleanup(&s2);
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* A command that waits for the gate file `name` in the workspace, then
 * prints out. */
static json_t *gated(const char *id, const char *gate, const char *out)
{
	char *cmd = xasprintf("while [ ! -e /workspace/%s ]; do sleep 0.02; done; echo %s", gate, out);
	json_t *req = json_pack("{s:s, s:s}", "command", cmd, "id", id);
	free(cmd);
	return req;
}

static void open_gate(struct it_server *s, const char *gate)
{
	char *p = xasprintf("%s/tenants/acme/workspace/%s", s->dir, gate);
	assert_int_equal(it_write_file(p, "", 0), 0);
	free(p);
}

/* A series of /metrics (acme's token sees acme's), or -1 when absent. */
static long metric(struct it_server *s, const char *series)
{
	struct it_resp m;
	if (it_http(s, "GET", "/metrics", tok_audit, NULL, NULL, 0, &m) != 0)
		return -2;
	char *want = xasprintf("\n%s ", series);
	const char *at = m.body ? strstr(m.body, want) : NULL;
	long v = at ? strtol(at + strlen(want), NULL, 10) : -1;
	free(want);
	it_resp_free(&m);
	return v;
}

#define QUEUED "sandboxd_exec_queued{tenant=\"acme\"}"

/* Wait (bounded) until acme has n requests waiting. */
static void wait_queued(struct it_server *s, long n)
{
	long until = it_now_ms() + 20000, v = -1;
	while ((v = metric(s, QUEUED)) != n && !(n == 0 && v == -1) && it_now_ms() < until)
		usleep(20000);
	assert_true(v == n || (n == 0 && v == -1));
}

static void wait_running(struct it_server *s, const char *id)
{
	json_t *v = ex_wait_state(s, tok, id, "running", 20000);
	assert_non_null(v);
	json_decref(v);
}

/* Take both of acme's slots on srv: commands "<p>-a" and "<p>-b", held
 * until gates "gate-<p>a" and "gate-<p>b" open. */
static void fill(struct bg_req *a, struct bg_req *b, const char *p)
{
	char id[2][16], gate[2][16];
	for (int i = 0; i < 2; i++) {
		snprintf(id[i], sizeof id[i], "%s-%c", p, 'a' + i);
		snprintf(gate[i], sizeof gate[i], "gate-%s%c", p, 'a' + i);
	}
	bg_exec(a, &srv, tok, gated(id[0], gate[0], "a"), NULL);
	bg_exec(b, &srv, tok, gated(id[1], gate[1], "b"), NULL);
	wait_running(&srv, id[0]);
	wait_running(&srv, id[1]);
}

static void expect_429(struct it_resp *r)
{
	it_expect_error(r, 429, "too_many_requests");
	char *ra = it_header(r, "Retry-After");
	assert_non_null(ra);
	assert_true(strtol(ra, NULL, 10) >= 1);
	free(ra);
}

static json_t *join_ok(struct bg_req *b)
{
	json_t *res = bg_join(b);
	if (b->resp.status != 200)
		it_show(&b->resp);
	assert_int_equal(b->resp.status, 200);
	it_resp_free(&b->resp);
	return res;
}

/* Two run, the third and fourth wait and start in order as slots free,
 * the fifth finds the queue full; a background request never waits. */
static void test_fifo(void **state)
{
	(void)state;
	struct bg_req a, b, c, d;
	fill(&a, &b, "f");
	bg_exec(&c, &srv, tok, gated("f-c", "gate-fc", "c"), NULL);
	wait_queued(&srv, 1);
	bg_exec(&d, &srv, tok, json_pack("{s:s, s:s}", "command", "echo d", "id", "f-d"), NULL);
	wait_queued(&srv, 2);
	/* waiting is not running: no row, no id yet */
	assert_int_equal(it_get_json(&srv, tok, "/exec/f-c", NULL), 404);
	assert_int_equal(it_get_json(&srv, tok, "/exec/f-d", NULL), 404);

	struct it_resp r;
	assert_int_equal(
	    ex_post(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "true", "id", "f-e"), NULL, &r), 429);
	expect_429(&r);
	it_resp_free(&r);
	assert_int_equal(it_get_json(&srv, tok, "/exec/f-e", NULL), 404);
	assert_int_equal(
	    ex_post(&srv, tok, NULL, json_pack("{s:s, s:b}", "command", "true", "background", 1), NULL, &r),
	    429);
	expect_429(&r);
	it_resp_free(&r);
	/* the background request had no queue to be refused from: only f-e counts */
	assert_true(metric(&srv, "sandboxd_exec_queue_refused_total{reason=\"full\"}") >= 1);

	/* a ends: its slot goes to c, the oldest, not to d */
	open_gate(&srv, "gate-fa");
	json_t *ra = join_ok(&a);
	wait_running(&srv, "f-c");
	wait_queued(&srv, 1);
	assert_int_equal(it_get_json(&srv, tok, "/exec/f-d", NULL), 404);
	/* b ends: d runs */
	open_gate(&srv, "gate-fb");
	json_t *rb = join_ok(&b), *rd = join_ok(&d);
	assert_string_equal(ex_stdout_ok(rd), "d\n");
	open_gate(&srv, "gate-fc");
	json_t *rc = join_ok(&c);
	assert_string_equal(ex_stdout_ok(ra), "a\n");
	assert_string_equal(ex_stdout_ok(rb), "b\n");
	assert_string_equal(ex_stdout_ok(rc), "c\n");
	/* each started when admitted (its row, its timeout): after the exit
	 * that freed its slot */
	assert_true(strcmp(jstr(rc, "started_at"), jstr(ra, "finished_at")) >= 0);
	assert_true(strcmp(jstr(rd, "started_at"), jstr(rb, "finished_at")) >= 0);
	json_decref(ra);
	json_decref(rb);
	json_decref(rc);
	json_decref(rd);
	wait_queued(&srv, 0);
	assert_true(metric(&srv, "sandboxd_exec_queue_wait_seconds_count{}") >= 2);
}

/* Whether the audit has the 499 of a POST /exec whose client left. */
static bool audited_left(void)
{
	json_t *v = NULL, *rec;
	size_t i;
	bool found = false;
	if (it_get_json(&srv, tok_audit, "/audit?route=/exec&limit=1000", &v) != 200)
		return false;
	json_array_foreach(json_object_get(v, "records"), i, rec)
		found |= json_integer_value(json_object_get(rec, "status")) == 499;
	json_decref(v);
	return found;
}

/* A waiting request whose client hangs up leaves at once: the next one
 * gets the slot, and the one that left never runs. */
static void test_client_leaves(void **state)
{
	(void)state;
	struct bg_req a, b, n;
	fill(&a, &b, "l");
	long left = metric(&srv, "sandboxd_exec_queue_refused_total{reason=\"left\"}");
	const char *body = "{\"command\":\"touch /workspace/gone-ran\",\"id\":\"l-gone\"}";
	char *req = xasprintf("POST /exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
			      "Authorization: Bearer %s\r\nContent-Length: %zu\r\n\r\n%s",
			      tok, strlen(body), body);
	int fd = it_connect(&srv);
	assert_true(fd >= 0);
	assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	free(req);
	wait_queued(&srv, 1);
	bg_exec(&n, &srv, tok, json_pack("{s:s, s:s}", "command", "echo next", "id", "l-next"), NULL);
	wait_queued(&srv, 2);
	close(fd);
	wait_queued(&srv, 1);
	assert_int_equal(metric(&srv, "sandboxd_exec_queue_refused_total{reason=\"left\"}"), left + 1);
	/* The server closes its side at once (the request ends, audited
	 * 499), not at the connection's idle timeout (60 s here). */
	long until = it_now_ms() + 20000;
	while (!audited_left() && it_now_ms() < until)
		usleep(20000);
	assert_true(audited_left());
	open_gate(&srv, "gate-la");
	json_t *rn = join_ok(&n);
	assert_string_equal(ex_stdout_ok(rn), "next\n");
	json_decref(rn);
	open_gate(&srv, "gate-lb");
	json_decref(join_ok(&a));
	json_decref(join_ok(&b));
	assert_int_equal(it_get_json(&srv, tok, "/exec/l-gone", NULL), 404);
	assert_false(it_ws_exists(&srv, "acme", "gone-ran"));
}

/* Two waiting requests with one id: one command runs, both get its
 * result (as two concurrent requests with one id always did). */
static void test_same_id_waiting(void **state)
{
	(void)state;
	struct bg_req a, b, x, y;
	fill(&a, &b, "i");
	const char *cmd = "echo x >> /workspace/dup-count; echo dup";
	bg_exec(&x, &srv, tok, json_pack("{s:s, s:s}", "command", cmd, "id", "i-dup"), NULL);
	wait_queued(&srv, 1);
	bg_exec(&y, &srv, tok, json_pack("{s:s, s:s}", "command", cmd, "id", "i-dup"), NULL);
	wait_queued(&srv, 2);
	open_gate(&srv, "gate-ia");
	open_gate(&srv, "gate-ib");
	json_t *rx = join_ok(&x), *ry = join_ok(&y);
	assert_string_equal(ex_stdout_ok(rx), "dup\n");
	assert_string_equal(ex_stdout_ok(ry), "dup\n");
	assert_string_equal(jstr(rx, "started_at"), jstr(ry, "started_at"));
	json_decref(rx);
	json_decref(ry);
	json_decref(join_ok(&a));
	json_decref(join_ok(&b));
	char *p = xasprintf("%s/tenants/acme/workspace/dup-count", srv.dir);
	size_t len = 0;
	char *text = it_read_file(p, &len);
	free(p);
	assert_non_null(text);
	assert_string_equal(text, "x\n");
	free(text);
}

/* Join the stream request b, which must have answered 200: its body (a
 * new string). */
static char *stream_body(struct bg_req *b)
{
	json_decref(bg_join(b));
	assert_int_equal(b->rc, 0);
	it_expect_status(&b->resp, 200);
	char *body = xasprintf("%.*s", (int)b->resp.len, b->resp.body);
	it_resp_free(&b->resp);
	return body;
}

/* A stream request waits too; its stream starts with the command. */
static void test_stream_waits(void **state)
{
	(void)state;
	struct bg_req a, b, c;
	fill(&a, &b, "t");
	bg_exec(&c, &srv, tok,
		json_pack("{s:s, s:s, s:b}", "command", "echo streamed", "id", "t-s", "stream", 1), NULL);
	wait_queued(&srv, 1);
	assert_int_equal(it_get_json(&srv, tok, "/exec/t-s", NULL), 404);
	open_gate(&srv, "gate-ta");
	char *body = stream_body(&c);
	assert_non_null(strstr(body, "event: start"));
	assert_non_null(strstr(body, "event: exit"));
	assert_non_null(strstr(body, "streamed"));
	free(body);
	open_gate(&srv, "gate-tb");
	json_decref(join_ok(&a));
	json_decref(join_ok(&b));
}

/* POST /exec/{id}/cancel as acme: the status; *out (optional) the body. */
static long cancel(const char *id, json_t **out)
{
	char *path = xasprintf("/exec/%s/cancel", id);
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", path, tok, NULL, NULL, 0, &r), 0);
	free(path);
	if (out)
		*out = it_json(&r);
	long st = r.status;
	it_resp_free(&r);
	return st;
}

/* POST /exec/{id}/cancel of a request waiting for a slot: 202, and the
 * request (plain or streamed) ends cancelled without running, as a
 * command cancelled while it waits for approval does (exit_code 143, a
 * row in state cancelled, the same result to a retry of its id); its
 * place passes to the next request. */
static void test_cancel_waiting(void **state)
{
	(void)state;
	struct bg_req a, b, x, y, n;
	fill(&a, &b, "k");
	long cancelled = metric(&srv, "sandboxd_exec_queue_refused_total{reason=\"cancelled\"}");
	bg_exec(&x, &srv, tok, json_pack("{s:s, s:s}", "command", "touch /workspace/k-x-ran", "id", "k-x"),
		NULL);
	wait_queued(&srv, 1);
	bg_exec(&y, &srv, tok,
		json_pack("{s:s, s:s, s:b}", "command", "touch /workspace/k-y-ran", "id", "k-y", "stream", 1),
		NULL);
	wait_queued(&srv, 2);

	json_t *v = NULL;
	assert_int_equal(cancel("k-x", &v), 202);
	assert_string_equal(jstr(v, "state"), "cancelling");
	json_decref(v);
	json_t *rx = join_ok(&x);
	assert_true(jtrue(rx, "cancelled"));
	assert_int_equal(jint(rx, "exit_code"), 143);
	assert_string_equal(jstr(rx, "stdout"), "");
	assert_string_equal(jstr(rx, "id"), "k-x");
	assert_int_equal(it_get_json(&srv, tok, "/exec/k-x", &v), 200);
	assert_string_equal(jstr(v, "state"), "cancelled");
	json_decref(v);

	assert_int_equal(cancel("k-y", &v), 202);
	json_decref(v);
	char *body = stream_body(&y);
	/* It never started: no `start`, only its `exit`. */
	assert_null(strstr(body, "event: start"));
	assert_non_null(strstr(body, "event: exit"));
	assert_non_null(strstr(body, "\"cancelled\":true"));
	free(body);
	wait_queued(&srv, 0);
	assert_int_equal(metric(&srv, "sandboxd_exec_queue_refused_total{reason=\"cancelled\"}"),
			 cancelled + 2);

	/* Their places are gone: the next request waits alone, and runs in
	 * the first slot that frees (before b's gate opens). */
	bg_exec(&n, &srv, tok, json_pack("{s:s, s:s}", "command", "echo next", "id", "k-next"), NULL);
	wait_queued(&srv, 1);
	open_gate(&srv, "gate-ka");
	json_t *rn = join_ok(&n);
	assert_string_equal(ex_stdout_ok(rn), "next\n");
	json_decref(rn);
	/* A retry of the cancelled id answers its result; nothing runs. */
	struct it_resp r;
	assert_int_equal(ex_post(&srv, tok, NULL,
				 json_pack("{s:s, s:s}", "command", "touch /workspace/k-x-ran", "id", "k-x"),
				 &v, &r),
			 200);
	assert_true(jtrue(v, "cancelled"));
	json_decref(v);
	it_resp_free(&r);
	/* Cancelling it again: it has finished. */
	assert_int_equal(cancel("k-x", NULL), 409);
	open_gate(&srv, "gate-kb");
	json_decref(join_ok(&a));
	json_decref(join_ok(&b));
	json_decref(rx);
	assert_false(it_ws_exists(&srv, "acme", "k-x-ran"));
	assert_false(it_ws_exists(&srv, "acme", "k-y-ran"));
}

/* POST /code waits the same way, and runs as asked once admitted (its
 * input file written, files_changed from the admission on). */
static void test_code_waits(void **state)
{
	(void)state;
	struct bg_req a, b, c;
	fill(&a, &b, "c");
	json_t *req =
	    json_pack("{s:s, s:s, s:s, s:[{s:s, s:s}]}", "language", "sh", "id", "c-code", "code",
		      "cat in.txt; echo made > out.txt", "files", "path", "in.txt", "content", "hi\n");
	memset(&c, 0, sizeof c);
	c.s = &srv;
	c.tok = tok_write;
	c.method = "POST";
	c.path = "/code";
	c.body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	c.rc = -1;
	pthread_create(&c.th, NULL, bg_main, &c);
	wait_queued(&srv, 1);
	open_gate(&srv, "gate-ca");
	json_t *rc = join_ok(&c);
	assert_string_equal(ex_stdout_ok(rc), "hi\n");
	json_t *fc = json_object_get(rc, "files_changed");
	assert_int_equal(json_array_size(fc), 1);
	assert_non_null(strstr(jstr(json_array_get(fc, 0), "path"), "out.txt"));
	json_decref(rc);
	open_gate(&srv, "gate-cb");
	json_decref(join_ok(&a));
	json_decref(join_ok(&b));
}

/* A limit lowered while requests wait applies to them: with max_execs
 * cut from 2 to 1, the two waiting commands run one at a time after the
 * running ones, never beside them. Each command counts the commands
 * running with it (marker files) and waits for its gate. */
static json_t *counted(const char *id, const char *gate)
{
	char *cmd = xasprintf("touch /workspace/run-%s; ls /workspace | grep -c '^run-' > /workspace/n-%s; "
			      "while [ ! -e /workspace/%s ]; do sleep 0.02; done; rm /workspace/run-%s",
			      id, id, gate, id);
	json_t *req = json_pack("{s:s, s:s}", "command", cmd, "id", id);
	free(cmd);
	return req;
}

static void test_lowered_limit(void **state)
{
	(void)state;
	char *admin = it_token(&srv, "ops", "admin");
	struct bg_req a, b, c, d;
	bg_exec(&a, &srv, tok, counted("w-a", "gate-w"), NULL);
	wait_running(&srv, "w-a");
	bg_exec(&b, &srv, tok, counted("w-b", "gate-wb"), NULL);
	wait_running(&srv, "w-b");
	bg_exec(&c, &srv, tok, counted("w-c", "gate-w"), NULL);
	wait_queued(&srv, 1);
	bg_exec(&d, &srv, tok, counted("w-d", "gate-w"), NULL);
	wait_queued(&srv, 2);
	assert_int_equal(pol_put(&srv, admin, "acme", "{\"max_execs\": 1}", NULL), 200);
	open_gate(&srv, "gate-w"); /* a ends; c, d would end as soon as they run */
	json_decref(join_ok(&a));
	open_gate(&srv, "gate-wb");
	json_decref(join_ok(&b));
	json_decref(join_ok(&c));
	json_decref(join_ok(&d));
	const char *ids[] = {"w-c", "w-d"};
	for (size_t i = 0; i < 2; i++) {
		char *p = xasprintf("%s/tenants/acme/workspace/n-%s", srv.dir, ids[i]);
		char *n = it_read_file(p, NULL);
		assert_non_null(n);
		assert_string_equal(n, "1\n"); /* it ran alone */
		free(n);
		free(p);
	}
	assert_int_equal(pol_cli(&srv, "acme", "max_execs=default"), 0);
	free(admin);
}

/* Policy exec_queue 0: the old behaviour, 429 at once. */
static void test_queue_off_by_policy(void **state)
{
	(void)state;
	char *admin = it_token(&srv, "ops", "admin");
	assert_int_equal(pol_put(&srv, admin, "acme", "{\"exec_queue\": 0}", NULL), 200);
	struct it_resp r;
	struct bg_req a, b;
	fill(&a, &b, "o");
	assert_int_equal(
	    ex_post(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "true", "id", "o-c"), NULL, &r), 429);
	expect_429(&r);
	it_resp_free(&r);
	open_gate(&srv, "gate-oa");
	open_gate(&srv, "gate-ob");
	json_decref(join_ok(&a));
	json_decref(join_ok(&b));
	assert_int_equal(pol_cli(&srv, "acme", "exec_queue=default"), 0);
	free(admin);
}

/* Shutdown answers a waiting request (503) and does not hang. */
static void test_shutdown_answers_waiting(void **state)
{
	(void)state;
	struct bg_req a, b, c;
	fill(&a, &b, "s"); /* never opened */
	bg_exec(&c, &srv, tok, json_pack("{s:s, s:s}", "command", "touch /workspace/s-ran", "id", "s-c"),
		NULL);
	wait_queued(&srv, 1);
	assert_int_equal(it_stop(&srv, SIGTERM), 0);
	json_decref(bg_join(&c));
	it_expect_error(&c.resp, 503, "backend_unavailable");
	it_resp_free(&c.resp);
	json_decref(bg_join(&a));
	json_decref(bg_join(&b));
	it_resp_free(&a.resp);
	it_resp_free(&b.resp);
	assert_false(it_ws_exists(&srv, "acme", "s-ran"));
	/* back up for the group teardown */
	assert_int_equal(it_restart(&srv, NULL), 0);
}

/* A request that waits longer than exec-queue-wait-ms: 429, never run. */
static void test_wait_bound(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", "tenant-max-execs=1", "--set", "exec-queue-wait-ms=300", NULL};
	assert_int_equal(it_start(&s2, extra), 0);
	char *t = it_token(&s2, "acme", NULL);
	struct bg_req a;
	bg_exec(&a, &s2, t, gated("w-a", "gate-wa", "a"), NULL);
	json_t *v = ex_wait_state(&s2, t, "w-a", "running", 20000);
	assert_non_null(v);
	json_decref(v);
	struct it_resp r;
	long t0 = it_now_ms();
	assert_int_equal(ex_post(&s2, t, NULL,
				 json_pack("{s:s, s:s}", "command", "touch /workspace/w-ran", "id", "w-b"),
				 NULL, &r),
			 429);
	assert_true(it_now_ms() - t0 >= 300); /* it waited its bound first */
	expect_429(&r);
	it_resp_free(&r);
	assert_int_equal(it_get_json(&s2, t, "/exec/w-b", NULL), 404);
	open_gate(&s2, "gate-wa");
	json_decref(join_ok(&a));
	assert_false(it_ws_exists(&s2, "acme", "w-ran"));
	free(t);
	assert_int_equal(it_finish(&s2), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fifo),
	    cmocka_unit_test(test_client_leaves),
	    cmocka_unit_test(test_same_id_waiting),
	    cmocka_unit_test(test_stream_waits),
	    cmocka_unit_test(test_cancel_waiting),
	    cmocka_unit_test(test_code_waits),
	    cmocka_unit_test(test_lowered_limit),
	    cmocka_unit_test(test_queue_off_by_policy),
	    cmocka_unit_test(test_wait_bound),
	    cmocka_unit_test(test_shutdown_answers_waiting),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
