/* The gateway scenario of issue 31 through libsandboxd, as
 * clients/typescript/test/gateway.test.mjs runs it through
 * @sandboxd/client: a real sandboxd on 127.0.0.1 (bwrap backend), driven
 * through the library's public API only, in the order a gateway author
 * meets it:
 *
 *   1. the eleven SandboxApi methods, every request carrying the token,
 *      the tenant and the session (seen on the wire through a relay);
 *   2. exec: a timeout is a result; a cancel object fired mid-flight ends
 *      the call and cancels the command on the server;
 *   3. a retry with the same exec id runs the command once (the first
 *      answer lost behind a 503), and the same id with another command is
 *      a conflict;
 *   4. infrastructure failures: a real 503 with its retry hint (a tenant
 *      whose remote backend is down) and no server at all;
 *   5. sessions isolated by directory.
 *
 * 1 GiB each way in constant memory is test_lib_stream.c's
 * test_gib_each_way_constant_memory; everything here has a deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "client_test.h"
#include "common/xmalloc.h"
#include "relay.h"

static struct it_server srv;
static char *tok, *ops_tok, *globex_tok;
static const struct it_tok toks[] = {
    {&tok, "acme", "fs:read fs:write exec"}, {&ops_tok, "ops", "admin"}, {&globex_tok, "globex", NULL}};

/* backends: the tenant globex is moved onto a remote backend below. */
static const char *const extra[] = {"--set", "heartbeat-ms=500", "--set", "backends=bwrap,remote", NULL};
CT_SERVER_FIXTURE(srv, extra, toks)

/* The gateway's handle on tenant acme at base (the server, or a relay in
 * front of it). */
static struct sbxc *gateway(const char *base)
{
	struct sbxc *h = ct_client(base, tok, &(struct sbxc_opts){.tenant = "acme"});
	assert_non_null(h);
	return h;
}

static void expect_text(struct sbxc *h, const struct sbxc_call *c, const char *path, const char *want)
{
	char *data = NULL;
	size_t len = 0;
	struct sbxc_err e;
	assert_int_equal(sbxc_read_file(h, c, path, &data, &len, &e), 0);
	assert_int_equal(len, strlen(want));
	assert_string_equal(data, want);
	free(data);
}

/* The buffered exec of q into *r; fails the test unless it ran. */
static void run(struct sbxc *h, const struct sbxc_call *c, const struct sbxc_exec_req *q,
		struct sbxc_result *r)
{
	struct sbxc_err e;
	assert_int_equal(sbxc_exec(h, c, q, NULL, NULL, NULL, r, &e), 0);
}

/* How often needle stands in the relay's record (bodies may hold NULs). */
static size_t count(const struct relay *rl, const char *needle)
{
	size_t n = 0, k = strlen(needle);
	for (const char *p = rl->upstream, *end = p + rl->nupstream;
	     (p = memmem(p, (size_t)(end - p), needle, k)); p += k)
		n++;
	return n;
}

/* ---- 1. the eleven methods ---- */

/* write_file (parents made), read_file, read_file_buffer (whole, and a
 * range), text that is not UTF-8, then stat. dir: the session's. */
static void files_and_stat(struct sbxc *h, const struct sbxc_call *c, const char *dir)
{
	struct sbxc_err e;
	uint64_t size = 0;
	assert_int_equal(sbxc_write_file(h, c, "notes/deep/a.txt", "hello", 5, &size, &e), 0);
	assert_int_equal(size, 5);
	expect_text(h, c, "notes/deep/a.txt", "hello");
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(sbxc_read_file_buffer(h, c, "notes/deep/a.txt", 1, 3, &data, &len, &e), 0);
	assert_int_equal(len, 3);
	assert_memory_equal(data, "ell", 3);
	free(data);
	static const char bin[] = {0, (char)255, 1, (char)254};
	assert_int_equal(sbxc_write_file(h, c, "bin.dat", bin, sizeof bin, NULL, &e), 0);
	assert_int_equal(sbxc_read_file_buffer(h, c, "bin.dat", 0, 0, &data, &len, &e), 0);
	assert_int_equal(len, sizeof bin);
	assert_memory_equal(data, bin, sizeof bin);
	free(data);
	assert_int_equal(sbxc_read_file(h, c, "bin.dat", &data, &len, &e), -EILSEQ);
	assert_string_equal(e.code, "not_text");
	assert_int_equal(e.status, 422);

	/* stat: a file has every field; a dangling symlink only what is known */
	struct sbxc_stat st;
	assert_int_equal(sbxc_stat(h, c, "notes/deep/a.txt", &st, &e), 0);
	char *want = xasprintf("%s/notes/deep/a.txt", dir);
	assert_string_equal(st.path, want);
	free(want);
	assert_int_equal(st.type, SBXC_FILE);
	assert_false(st.is_symlink);
	assert_true(st.has_size && st.size == 5);
	assert_true(st.has_mode && st.mode <= 0777);
	assert_true(st.has_mtime && st.mtime > 1700000000);
	sbxc_stat_clear(&st);
	struct sbxc_result r;
	run(h, c, &(struct sbxc_exec_req){.command = "ln -s /nowhere dangling"}, &r);
	assert_int_equal(r.exit_code, 0);
	sbxc_result_clear(&r);
	assert_int_equal(sbxc_stat(h, c, "dangling", &st, &e), 0);
	assert_int_equal(st.type, SBXC_SYMLINK);
	assert_true(st.is_symlink);
	assert_false(st.has_size || st.has_mtime || st.has_mode);
	sbxc_stat_clear(&st);
}

/* mkdir (recursive; 409 when it exists), readdir sorted bytewise,
 * exists, rm (recursive, force, and a missing path), a path outside. */
static void directories(struct sbxc *h, const struct sbxc_call *c)
{
	struct sbxc_err e;
	assert_int_equal(sbxc_mkdir(h, c, "d1/d2", true, &e), 0);
	assert_int_equal(sbxc_mkdir(h, c, "d1/d2", false, &e), -EEXIST);
	assert_string_equal(e.code, "exists");
	assert_int_equal(e.status, 409);
	assert_int_equal(sbxc_write_file(h, c, "d1/b", "", 0, NULL, &e), 0);
	assert_int_equal(sbxc_write_file(h, c, "d1/B", "", 0, NULL, &e), 0);
	struct sbxc_dirent *v = NULL;
	size_t n = 0;
	assert_int_equal(sbxc_readdir(h, c, "d1", false, &v, &n, &e), 0);
	assert_int_equal(n, 3);
	assert_string_equal(v[0].name, "B");
	assert_string_equal(v[1].name, "b");
	assert_string_equal(v[2].name, "d2");
	sbxc_dirents_free(v, n);
	bool yes = false;
	assert_int_equal(sbxc_exists(h, c, "d1/b", &yes, &e), 0);
	assert_true(yes);
	assert_int_equal(sbxc_exists(h, c, "nope", &yes, &e), 0);
	assert_false(yes);
	bool removed = false;
	assert_int_equal(sbxc_rm(h, c, "d1", true, false, &removed, &e), 0);
	assert_true(removed);
	assert_int_equal(sbxc_rm(h, c, "d1", false, true, &removed, &e), 0);
	assert_false(removed);
	assert_int_equal(sbxc_rm(h, c, "d1", false, false, &removed, &e), -ENOENT);
	assert_string_equal(e.code, "not_found");
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(sbxc_read_file(h, c, "/etc/passwd", &data, &len, &e), -EXDEV);
	assert_string_equal(e.code, "outside_workspace");
}

/* exec: output, env, cwd; a non-zero exit is a result. */
static void exec_result(struct sbxc *h, const struct sbxc_call *c, const char *dir)
{
	const struct sbxc_env env[] = {{"X", "x1"}};
	struct sbxc_exec_req q = {
	    .command = "echo \"$X\"; pwd; echo err >&2; exit 3", .env = env, .nenv = 1, .cwd = "notes"};
	struct sbxc_result r;
	run(h, c, &q, &r);
	assert_int_equal(r.exit_code, 3);
	char *want = xasprintf("x1\n%s/notes\n", dir);
	assert_string_equal(r.stdout_text, want);
	free(want);
	assert_string_equal(r.stderr_text, "err\n");
	assert_false(r.timed_out);
	assert_int_equal(strlen(r.id), 33); /* the library's id: "c" and 32 hex digits */
	assert_int_equal(r.id[0], 'c');
	assert_int_equal(strspn(r.id + 1, "0123456789abcdef"), 32);
	sbxc_result_clear(&r);
}

/* Streams, small: the parent must exist for write_file_stream; a read
 * from the start and from an offset. */
static void streams(struct sbxc *h, const struct sbxc_call *c)
{
	struct sbxc_err e;
	struct sbxc_upload up;
	const char *body = "abcd";
	assert_int_equal(sbxc_write_file_stream(h, c, "notes/s.txt", -1, ct_text_source, &body, &up, &e), 0);
	assert_int_equal(up.size, 4);
	assert_string_equal(up.sha256, "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589");
	body = "abcd";
	assert_int_equal(sbxc_write_file_stream(h, c, "nodir/s.txt", -1, ct_text_source, &body, &up, &e),
			 -ENOENT);
	assert_string_equal(e.code, "parent_missing");
	assert_int_equal(e.status, 404);
	ct_expect_stream(h, c, "notes/s.txt", 0, "abcd");
	ct_expect_stream(h, c, "notes/s.txt", 2, "cd");
}

static void test_eleven_methods(void **state)
{
	(void)state;
	/* Through a relay that records what goes upstream: the headers a
	 * balancer routes by. */
	struct relay rl = {0};
	assert_int_equal(relay_start(&rl, srv.port), 0);
	struct sbxc *h = gateway(rl.base);
	struct sbxc_call c = {.session = "gw:files"};
	char seg[48], dir[96];
	it_session_segment(c.session, seg, sizeof seg);
	snprintf(dir, sizeof dir, "/workspace/sessions/%s", seg);
	files_and_stat(h, &c, dir);
	directories(h, &c);
	exec_result(h, &c, dir);
	streams(h, &c);
	sbxc_free(&h);
	relay_stop(&rl);

	assert_true(rl.nupstream < sizeof rl.upstream - 1); /* all of it recorded */
	size_t requests = count(&rl, " HTTP/1.1\r\n");
	char *auth = xasprintf("\r\nAuthorization: Bearer %s\r\n", tok);
	size_t with_token = count(&rl, auth);
	free(auth);
	assert_true(requests > 20);
	assert_int_equal(with_token, requests);
	assert_int_equal(count(&rl, "\r\nX-Tenant-Id: acme\r\n"), requests);
	assert_int_equal(count(&rl, "\r\nX-Session-Key: gw:files\r\n"), requests);
}

/* ---- 2. timeout and cancel ---- */

static void test_exec_timeout_and_cancel(void **state)
{
	(void)state;
	struct sbxc *h = gateway(srv.base);
	struct sbxc_call c = {.session = "gw:exec"};
	struct sbxc_result r;
	run(h, &c, &(struct sbxc_exec_req){.command = "echo before; sleep 60", .timeout_s = 1}, &r);
	assert_true(r.timed_out);
	assert_int_equal(r.exit_code, 124);
	assert_string_equal(r.stdout_text, "before\n");
	sbxc_result_clear(&r);

	/* A cancel object fired from this thread while the exec waits on
	 * another: the call ends with -ECANCELED, its closed connection
	 * cancels the command, and the exec's record says so. */
	struct ct_exec_thread t = {
	    .h = h,
	    .call = c,
	    .req = {.command = "echo started; while [ ! -e /workspace/.never ]; do sleep 0.05; done",
		    .id = "gw-cancel-1"},
	    .k = {.lock = PTHREAD_MUTEX_INITIALIZER}};
	sbxc_cancel_new(&t.call.cancel);
	pthread_t th;
	pthread_create(&th, NULL, ct_exec_main, &t);
	ct_wait_running(h, "gw-cancel-1");
	sbxc_cancel_fire(t.call.cancel);
	pthread_join(th, NULL);
	assert_int_equal(t.rc, -ECANCELED);
	ct_wait_state(h, "gw-cancel-1", "cancelled");
	struct sbxc_exec_info x;
	struct sbxc_err e;
	assert_int_equal(sbxc_exec_get(h, &c, "gw-cancel-1", &x, &e), 0);
	assert_true(x.has_result && x.result.cancelled);
	sbxc_exec_info_clear(&x);
	/* Fired before it starts: nothing is sent. */
	assert_int_equal(
	    sbxc_exec(h, &t.call, &(struct sbxc_exec_req){.command = "true"}, NULL, NULL, NULL, &r, &e),
	    -ECANCELED);
	assert_int_equal(e.attempts, 0);
	sbxc_cancel_free(&t.call.cancel);
	sbxc_free(&h);
}

/* ---- 3. the same id runs once ---- */

static void test_retry_runs_once(void **state)
{
	(void)state;
	/* The first answer is lost behind a 503 (as from a balancer): the
	 * library retries with the same id and gets the first run's result. */
	struct relay rl = {.lose_answers = 1};
	assert_int_equal(relay_start(&rl, srv.port), 0);
	struct sbxc *h = gateway(rl.base);
	struct sbxc_call c = {.session = "gw:once"};
	struct sbxc_exec_req q = {.command = "echo run >> runs.log; cat /proc/sys/kernel/random/uuid"};
	struct sbxc_result r, again;
	struct sbxc_err e;
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), 0);
	assert_int_equal(e.attempts, 2);
	assert_int_equal(atomic_load(&rl.connections), 2);
	assert_int_equal(r.exit_code, 0);
	expect_text(h, &c, "runs.log", "run\n");
	/* The same id again, by the caller: the same result, still one run. */
	q.id = r.id;
	run(h, &c, &q, &again);
	assert_string_equal(again.stdout_text, r.stdout_text);
	sbxc_result_clear(&again);
	expect_text(h, &c, "runs.log", "run\n");
	q.command = "true";
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &again, &e), -EBUSY);
	assert_string_equal(e.code, "conflict");
	assert_int_equal(e.status, 409);
	sbxc_result_clear(&r);
	sbxc_free(&h);
	relay_stop(&rl);
	/* Every POST /exec reached the server: the call's two attempts (the
	 * first acted upon, its answer lost), the repeat and the conflict. So
	 * the id, not the relay, kept the command to one run. */
	assert_int_equal(count(&rl, "POST /exec HTTP/1.1\r\n"), 4);
}

/* ---- 4. infrastructure failures ---- */

/* Tenant globex served by a remote backend where nothing listens: its
 * policy set by the operator tenant's admin. */
static void globex_behind_a_dead_backend(void)
{
	char *tok_file = xasprintf("%s/globex-back-token", srv.dir);
	assert_int_equal(it_write_file(tok_file, globex_tok, strlen(globex_tok)), 0);
	assert_int_equal(chmod(tok_file, 0600), 0);
	char *body = xasprintf("{\"backend\":\"remote\",\"remote_url\":\"http://127.0.0.1:%d\","
			       "\"remote_token_file\":\"%s\"}",
			       it_free_port(), tok_file);
	const char *hdrs[] = {"Content-Type: application/json", NULL};
	struct it_resp pol;
	assert_int_equal(
	    it_http(&srv, "PUT", "/tenants/globex/policy", ops_tok, hdrs, body, strlen(body), &pol), 0);
	it_expect_status(&pol, 200);
	it_resp_free(&pol);
	free(body);
	free(tok_file);
}

static void test_unavailable(void **state)
{
	(void)state;
	globex_behind_a_dead_backend();
	/* max_backoff_ms bounds the wait that Retry-After asks for. */
	struct sbxc *g =
	    ct_client(srv.base, globex_tok, &(struct sbxc_opts){.max_retries = 1, .max_backoff_ms = 200});
	assert_non_null(g);
	struct sbxc_err e;
	bool yes;
	assert_int_equal(sbxc_exists(g, NULL, "x", &yes, &e), -EHOSTDOWN);
	assert_int_equal(e.status, 503);
	assert_string_equal(e.code, "backend_unavailable");
	assert_true(e.retry_hint[0] != '\0');
	assert_true(e.retry_after_s >= 1);
	assert_true(e.request_id[0] != '\0');
	assert_int_equal(e.attempts, 2);
	struct sbxc_result r;
	assert_int_equal(sbxc_exec(g, &(struct sbxc_call){.session = "other"},
				   &(struct sbxc_exec_req){.command = "true"}, NULL, NULL, NULL, &r, &e),
			 -EHOSTDOWN);
	assert_string_equal(e.code, "backend_unavailable");
	sbxc_free(&g);

	/* No server at all: refused connections, retried, then reported. */
	char base[64];
	snprintf(base, sizeof base, "http://127.0.0.1:%d", it_free_port());
	struct sbxc *down =
	    ct_client(base, tok, &(struct sbxc_opts){.max_retries = 2, .max_backoff_ms = 100});
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(sbxc_read_file(down, NULL, "x", &data, &len, &e), -ECONNREFUSED);
	assert_int_equal(e.status, 0);
	assert_int_equal(e.attempts, 3);
	sbxc_free(&down);
}

/* ---- 5. sessions ---- */

static void test_sessions_isolated(void **state)
{
	(void)state;
	struct sbxc *h = gateway(srv.base);
	struct sbxc_call a = {.session = "gw:a"}, b = {.session = "gw:b"};
	struct sbxc_err e;
	assert_int_equal(sbxc_write_file(h, &a, "same.txt", "A", 1, NULL, &e), 0);
	assert_int_equal(sbxc_write_file(h, &b, "same.txt", "B", 1, NULL, &e), 0);
	expect_text(h, &a, "same.txt", "A");
	expect_text(h, &b, "same.txt", "B");
	struct sbxc_stat sa, sb;
	assert_int_equal(sbxc_stat(h, &a, "same.txt", &sa, &e), 0);
	assert_int_equal(sbxc_stat(h, &b, "same.txt", &sb, &e), 0);
	assert_string_not_equal(sa.path, sb.path);
	sbxc_stat_clear(&sa);
	sbxc_stat_clear(&sb);
	struct sbxc_result r;
	run(h, &b, &(struct sbxc_exec_req){.command = "cat same.txt"}, &r);
	assert_string_equal(r.stdout_text, "B");
	sbxc_result_clear(&r);
	sbxc_free(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_eleven_methods),    cmocka_unit_test(test_exec_timeout_and_cancel),
	    cmocka_unit_test(test_retry_runs_once),   cmocka_unit_test(test_unavailable),
	    cmocka_unit_test(test_sessions_isolated),
	};
	return cmocka_run_group_tests_name("libsandboxd gateway", tests, setup, teardown);
}
