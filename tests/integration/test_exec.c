/* Exec (wire.md "Exec"), end to end through the real bwrap backend:
 * the ShellResult, exit codes, timeouts, cancellation, idempotency,
 * bounded output, limits, validation, scopes, listing, and shutdown. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#define CANARY_NAME "SANDBOXD_IT_CANARY_SECRET"

static struct it_server srv;
/* Servers of single tests (limits, shutdown); killed in the group
 * teardown if a failed test left one running. */
static struct it_server s2, s3, s4;
static char canary[64];
static char *tok;	 /* acme, default scopes */
static char *tok_globex; /* globex, default scopes */
static char *tok_read;	 /* acme fs:read */
static char *tok_audit;	 /* acme audit:read */
static char *tok_write;	 /* acme fs:write */
static char *tok_exec;	 /* acme exec only */
static const struct it_tok toks[] = {
    {&tok, "acme", NULL},
    {&tok_globex, "globex", NULL},
    {&tok_read, "acme", "fs:read"},
    {&tok_audit, "acme", "audit:read"},
    {&tok_write, "acme", "fs:write"},
    {&tok_exec, "acme", "exec"},
};

static int setup(void **state)
{
	(void)state;
	/* The server inherits the test's environment: a secret the commands
	 * must never see. */
	snprintf(canary, sizeof canary, "canary-%ld-%d", (long)time(NULL), (int)getpid());
	setenv(CANARY_NAME, canary, 1);
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), NULL};
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish(&srv);
	struct it_server *spare[] = {&s2, &s3, &s4};
	for (size_t i = 0; i < 3; i++)
		if (spare[i]->pid > 0)
			it_cleanup(spare[i]);
	it_free_all(toks, IT_NTOKS(toks));
	return rc;
}

/* POST /exec expecting an error. */
static void exec_expect_error(struct it_server *s, const char *t, const char *const *hdrs, json_t *req,
			      long status, const char *code)
{
	struct it_resp r;
	long st = ex_post(s, t, hdrs, req, NULL, &r);
	assert_int_not_equal(st, -1);
	it_expect_error(&r, status, code);
	it_resp_free(&r);
}

static void raw_exec_expect_400(const char *body)
{
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", "/exec", tok, NULL, body, strlen(body), &r), 0);
	if (r.status != 400)
		fprintf(stderr, "body %s: expected 400, got %ld %.*s\n", body, r.status, (int)r.len, r.body);
	it_expect_error(&r, 400, "bad_request");
	it_resp_free(&r);
}

/* "2026-11-29T09:43:06.746Z" -> ms since the epoch, or -1. */
static long long rfc3339_ms(const char *s)
{
	if (!s)
		return -1;
	struct tm tm = {0};
	int ms = 0, n = 0;
	if (sscanf(s, "%d-%d-%dT%d:%d:%d.%3dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
		   &tm.tm_min, &tm.tm_sec, &ms, &n) != 7 ||
	    n != (int)strlen(s))
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (long long)timegm(&tm) * 1000 + ms;
}

/* Poll GET /fs/exists until the session file appears (a command's sign
 * that it got that far). */
static bool ws_file_appears(struct it_server *s, const char *t, const char *path, long timeout_ms)
{
	char *url = xasprintf("/fs/exists?path=%s", path);
	long until = it_now_ms() + timeout_ms;
	bool found = false;
	do {
		json_t *j = NULL;
		if (it_get_json(s, t, url, &j) == 200 && json_is_true(json_object_get(j, "exists")))
			found = true;
		json_decref(j);
		if (!found)
			usleep(30000);
	} while (!found && it_now_ms() < until);
	free(url);
	return found;
}

static bool is_exit_of_stop_signal(long long code)
{
	return code == 143 || code == 137;
}

/* ---- the result ---- */

static void test_result_shape(void **state)
{
	(void)state;
	json_t *res =
	    ex_ok(&srv, tok, NULL,
		  json_pack("{s:s, s:s}", "command", "printf out; printf err >&2; exit 3", "id", "shape-1"));
	static const char *const fields[] = {"id",	     "exit_code",    "stdout",	     "stderr",
					     "timed_out",    "cancelled",    "truncated",    "stdout_bytes",
					     "stderr_bytes", "stdout_spill", "stderr_spill", "started_at",
					     "finished_at",  "duration_ms"};
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		if (!json_object_get(res, fields[i]))
			fprintf(stderr, "ShellResult lacks %s\n", fields[i]);
		assert_non_null(json_object_get(res, fields[i]));
	}
	assert_string_equal(jstr(res, "id"), "shape-1");
	assert_true(json_is_integer(json_object_get(res, "exit_code")));
	assert_int_equal(jint(res, "exit_code"), 3);
	assert_string_equal(jstr(res, "stdout"), "out");
	assert_string_equal(jstr(res, "stderr"), "err");
	assert_true(json_is_false(json_object_get(res, "timed_out")));
	assert_true(json_is_false(json_object_get(res, "cancelled")));
	assert_true(json_is_false(json_object_get(res, "truncated")));
	assert_true(json_is_integer(json_object_get(res, "stdout_bytes")));
	assert_true(json_is_integer(json_object_get(res, "stderr_bytes")));
	assert_int_equal(jint(res, "stdout_bytes"), 3);
	assert_int_equal(jint(res, "stderr_bytes"), 3);
	assert_true(json_is_null(json_object_get(res, "stdout_spill")));
	assert_true(json_is_null(json_object_get(res, "stderr_spill")));
	long long t0 = rfc3339_ms(jstr(res, "started_at")), t1 = rfc3339_ms(jstr(res, "finished_at"));
	assert_true(t0 > 0);
	assert_true(t1 >= t0);
	assert_true(llabs(t0 - (long long)time(NULL) * 1000) < 60000);
	assert_true(json_is_integer(json_object_get(res, "duration_ms")));
	assert_true(jint(res, "duration_ms") >= 0);
	assert_true(llabs(jint(res, "duration_ms") - (t1 - t0)) <= 1);

	/* GET /exec/{id}: the record, with the same result */
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/exec/shape-1", &v), 200);
	assert_string_equal(jstr(v, "id"), "shape-1");
	assert_string_equal(jstr(v, "state"), "exited");
	assert_string_equal(jstr(v, "command"), "printf out; printf err >&2; exit 3");
	assert_string_equal(jstr(v, "session"), "default");
	char seg[64], cwd[128];
	it_session_segment("default", seg, sizeof seg);
	snprintf(cwd, sizeof cwd, "/workspace/sessions/%s", seg);
	assert_string_equal(jstr(v, "cwd"), cwd);
	assert_true(rfc3339_ms(jstr(v, "started_at")) > 0);
	assert_true(json_equal(json_object_get(v, "result"), res));
	json_decref(v);
	json_decref(res);

	/* without an id the server assigns a fresh one */
	json_t *a = ex_run(&srv, tok, "true"), *b = ex_run(&srv, tok, "true");
	assert_true(jstr(a, "id") && *jstr(a, "id"));
	assert_string_not_equal(jstr(a, "id"), jstr(b, "id"));
	json_decref(a);
	json_decref(b);
}

static void test_exit_codes(void **state)
{
	(void)state;
	json_t *r = ex_run(&srv, tok, "exit 0");
	assert_int_equal(jint(r, "exit_code"), 0);
	json_decref(r);
	r = ex_run(&srv, tok, "exit 255");
	assert_int_equal(jint(r, "exit_code"), 255);
	json_decref(r);
	/* a signal N is 128 + N, not a timeout, not a cancel */
	r = ex_run(&srv, tok, "echo before; kill -9 $$; echo after");
	assert_int_equal(jint(r, "exit_code"), 137);
	assert_string_equal(jstr(r, "stdout"), "before\n");
	assert_false(jtrue(r, "timed_out"));
	assert_false(jtrue(r, "cancelled"));
	json_decref(r);
	r = ex_run(&srv, tok, "kill -TERM $$");
	assert_int_equal(jint(r, "exit_code"), 143);
	json_decref(r);
	/* POSIX sh, not bash */
	r = ex_run(&srv, tok, "readlink -f /proc/$$/exe; echo ${BASH_VERSION:-none}");
	assert_non_null(strstr(ex_stdout_ok(r), "none"));
	json_decref(r);
	/* a missing program is the shell's 127, not a server error */
	r = ex_run(&srv, tok, "no-such-program-xyz");
	assert_int_equal(jint(r, "exit_code"), 127);
	assert_non_null(strstr(jstr(r, "stderr"), "not found"));
	json_decref(r);
}

static void test_stdin_env_clean(void **state)
{
	(void)state;
	json_t *r =
	    ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "cat", "stdin", "hello\nworld\n"));
	assert_string_equal(ex_stdout_ok(r), "hello\nworld\n");
	json_decref(r);
	/* a large stdin is fed without deadlock while the output is read */
	size_t big = 300000;
	char *in = xmalloc(big + 1);
	for (size_t i = 0; i < big; i++)
		in[i] = (char)('a' + i % 26);
	in[big] = '\0';
	r = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "cat; echo", "stdin", in));
	assert_int_equal(jint(r, "stdout_bytes"), big + 1);
	json_decref(r);
	r = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "wc -c", "stdin", in));
	assert_int_equal(strtol(ex_stdout_ok(r), NULL, 10), (long)big);
	json_decref(r);
	free(in);
	/* no stdin: reading it ends at once */
	r = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:i}", "command", "cat; echo done", "timeout_s", 10));
	assert_string_equal(ex_stdout_ok(r), "done\n");
	assert_false(jtrue(r, "timed_out"));
	json_decref(r);

	/* env is passed */
	r = ex_ok(&srv, tok, NULL,
		  json_pack("{s:s, s:{s:s, s:s, s:s}}", "command",
			    "printf '%s|%s|%s|%s' \"$FOO\" \"${EMPTY-unset}\" \"$HOME\" \"$Q\"", "env", "FOO",
			    "bar baz", "EMPTY", "", "Q", "it's \"quoted\" $HOME `x`"));
	assert_string_equal(ex_stdout_ok(r), "bar baz||/workspace|it's \"quoted\" $HOME `x`");
	json_decref(r);

	/* ... and the server's environment is not: the canary really is in
	 * the server's environment, and not in the command's. */
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/environ", (int)srv.pid);
	size_t len = 0;
	char *senv = it_read_file(path, &len);
	assert_non_null(senv);
	bool found = false;
	for (size_t i = 0; i < len; i += strlen(senv + i) + 1)
		found |= strstr(senv + i, canary) != NULL;
	assert_true(found);
	free(senv);
	r = ex_run(&srv, tok, "env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'");
	const char *out = ex_stdout_ok(r);
	assert_null(strstr(out, canary));
	assert_null(strstr(out, CANARY_NAME));
	assert_null(strstr(out, "SANDBOXD_BIN"));
	assert_null(strstr(out, "ASAN_OPTIONS"));
	assert_non_null(strstr(out, "PATH="));
	json_decref(r);
	/* the canary is nowhere the command can read either */
	r = ex_run(&srv, tok,
		   "grep -rs -l \"$(printf '%s' '" CANARY_NAME
		   "')\" /proc/[0-9]*/environ /etc /tmp /workspace; true");
	assert_string_equal(ex_stdout_ok(r), "");
	json_decref(r);
}

static void test_cwd(void **state)
{
	(void)state;
	char seg[64], want[256];
	it_session_segment("default", seg, sizeof seg);

	/* default: the session directory */
	json_t *r = ex_run(&srv, tok, "pwd");
	snprintf(want, sizeof want, "/workspace/sessions/%s\n", seg);
	assert_string_equal(ex_stdout_ok(r), want);
	json_decref(r);
	/* another session key, the example of wire.md */
	const char *h42[] = {"X-Session-Key: chat:42", NULL};
	r = ex_ok(&srv, tok, h42, json_pack("{s:s}", "command", "pwd"));
	assert_string_equal(ex_stdout_ok(r), "/workspace/sessions/chat_42-29c5c2leqt\n");
	json_decref(r);

	/* relative to the session directory */
	struct it_resp hr;
	const char *mk = "{\"path\": \"sub/deeper\", \"recursive\": true}";
	assert_int_equal(it_http(&srv, "POST", "/fs/mkdir", tok, NULL, mk, strlen(mk), &hr), 0);
	assert_int_equal(hr.status, 201);
	it_resp_free(&hr);
	r = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "pwd", "cwd", "sub/deeper"));
	snprintf(want, sizeof want, "/workspace/sessions/%s/sub/deeper\n", seg);
	assert_string_equal(ex_stdout_ok(r), want);
	json_decref(r);
	r = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "pwd", "cwd", "sub/deeper/.."));
	snprintf(want, sizeof want, "/workspace/sessions/%s/sub\n", seg);
	assert_string_equal(ex_stdout_ok(r), want);
	json_decref(r);
	/* absolute, inside /workspace */
	mk = "{\"path\": \"/workspace/abs-dir\"}";
	assert_int_equal(it_http(&srv, "POST", "/fs/mkdir", tok, NULL, mk, strlen(mk), &hr), 0);
	assert_int_equal(hr.status, 201);
	it_resp_free(&hr);
	r = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "pwd", "cwd", "/workspace/abs-dir"));
	assert_string_equal(ex_stdout_ok(r), "/workspace/abs-dir\n");
	json_decref(r);
	r = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "pwd", "cwd", "/workspace"));
	assert_string_equal(ex_stdout_ok(r), "/workspace\n");
	json_decref(r);

	/* missing: 404, and nothing ran */
	exec_expect_error(&srv, tok, NULL,
			  json_pack("{s:s, s:s}", "command", "touch /workspace/ran-1", "cwd", "nope/x"), 404,
			  "not_found");
	/* escaping: 403 outside_workspace */
	static const char *const escapes[] = {"../../..", "/etc", "/workspace/../etc",
					      "/",	  "/tmp", "../../../../../../../../etc"};
	for (size_t i = 0; i < sizeof escapes / sizeof escapes[0]; i++)
		exec_expect_error(
		    &srv, tok, NULL,
		    json_pack("{s:s, s:s}", "command", "touch /workspace/ran-1", "cwd", escapes[i]), 403,
		    "outside_workspace");
	/* through a symlink the command made: out of the workspace is refused
	 * the same way; a link that stays inside is followed */
	r = ex_run(&srv, tok,
		   "ln -s /etc esc-abs && ln -s ../../.. esc-rel && ln -s sub in-link && "
		   "ln -s nowhere dangling && echo f > a-file");
	ex_stdout_ok(r);
	json_decref(r);
	exec_expect_error(&srv, tok, NULL,
			  json_pack("{s:s, s:s}", "command", "touch /workspace/ran-1", "cwd", "esc-abs"), 403,
			  "outside_workspace");
	exec_expect_error(&srv, tok, NULL,
			  json_pack("{s:s, s:s}", "command", "touch /workspace/ran-1", "cwd", "esc-rel"), 403,
			  "outside_workspace");
	exec_expect_error(&srv, tok, NULL,
			  json_pack("{s:s, s:s}", "command", "touch /workspace/ran-1", "cwd", "esc-rel/etc"),
			  403, "outside_workspace");
	exec_expect_error(&srv, tok, NULL,
			  json_pack("{s:s, s:s}", "command", "touch /workspace/ran-1", "cwd", "dangling"),
			  404, "not_found");
	exec_expect_error(&srv, tok, NULL,
			  json_pack("{s:s, s:s}", "command", "touch /workspace/ran-1", "cwd", "a-file"), 409,
			  "not_a_directory");
	r = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "ls", "cwd", "in-link"));
	assert_string_equal(ex_stdout_ok(r), "deeper\n");
	json_decref(r);
	/* none of the refused commands ran */
	assert_int_equal(it_http(&srv, "GET", "/fs/exists?path=/workspace/ran-1", tok, NULL, NULL, 0, &hr),
			 0);
	assert_int_equal(hr.status, 200);
	json_t *j = it_json(&hr);
	assert_true(json_is_false(json_object_get(j, "exists")));
	json_decref(j);
	it_resp_free(&hr);
}

/* ---- time limits and cancellation ---- */

static void test_timeouts(void **state)
{
	(void)state;
	/* timeout: 124, timed_out, and the output so far is kept */
	long t0 = it_now_ms();
	json_t *r = ex_ok(
	    &srv, tok, NULL,
	    json_pack("{s:s, s:i}", "command", "echo partial; echo err-part >&2; sleep 30", "timeout_s", 2));
	long took = it_now_ms() - t0;
	assert_int_equal(jint(r, "exit_code"), 124);
	assert_true(jtrue(r, "timed_out"));
	assert_false(jtrue(r, "cancelled"));
	assert_false(jtrue(r, "idle"));
	assert_string_equal(jstr(r, "stdout"), "partial\n");
	assert_string_equal(jstr(r, "stderr"), "err-part\n");
	assert_true(jint(r, "duration_ms") >= 1900);
	assert_true(took < 8000);
	const char *id = jstr(r, "id");
	char path[128];
	snprintf(path, sizeof path, "/exec/%s", id);
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok, path, &v), 200);
	assert_string_equal(jstr(v, "state"), "timed_out");
	json_decref(v);
	json_decref(r);

	/* a command that ignores SIGTERM is killed after the grace */
	t0 = it_now_ms();
	r = ex_ok(&srv, tok, NULL,
		  json_pack("{s:s, s:i}", "command", "trap '' TERM; echo x; while :; do sleep 1; done",
			    "timeout_s", 2));
	assert_int_equal(jint(r, "exit_code"), 124);
	assert_true(jtrue(r, "timed_out"));
	assert_string_equal(jstr(r, "stdout"), "x\n");
	assert_true(it_now_ms() - t0 < 10000);
	json_decref(r);

	/* idle timeout: nothing printed for 1 s */
	t0 = it_now_ms();
	r = ex_ok(&srv, tok, NULL,
		  json_pack("{s:s, s:i, s:i}", "command", "echo tick; sleep 30", "timeout_s", 20,
			    "idle_timeout_s", 1));
	assert_int_equal(jint(r, "exit_code"), 124);
	assert_true(jtrue(r, "timed_out"));
	assert_true(jtrue(r, "idle"));
	assert_string_equal(jstr(r, "stdout"), "tick\n");
	assert_true(it_now_ms() - t0 < 8000);
	json_decref(r);
	/* output keeps an idle timeout from firing */
	r = ex_ok(&srv, tok, NULL,
		  json_pack("{s:s, s:i, s:i}", "command", "for i in 1 2 3 4; do echo $i; sleep 0.4; done",
			    "timeout_s", 20, "idle_timeout_s", 1));
	assert_int_equal(jint(r, "exit_code"), 0);
	assert_false(jtrue(r, "timed_out"));
	assert_string_equal(jstr(r, "stdout"), "1\n2\n3\n4\n");
	json_decref(r);
	/* a large timeout is clamped by the server, not refused */
	r = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:i}", "command", "echo ok", "timeout_s", 604800));
	assert_string_equal(ex_stdout_ok(r), "ok\n");
	json_decref(r);
}

static void test_cancel_route(void **state)
{
	(void)state;
	struct bg_req b;
	bg_exec(&b, &srv, tok,
		json_pack("{s:s, s:s, s:i}", "command", "echo started; touch cancel-me.flag; sleep 30", "id",
			  "cancel-me", "timeout_s", 60),
		NULL);
	json_t *v = ex_wait_state(&srv, tok, "cancel-me", "running", 10000);
	assert_non_null(v);
	assert_true(json_is_null(json_object_get(v, "result")));
	json_decref(v);
	assert_true(ws_file_appears(&srv, tok, "cancel-me.flag", 10000)); /* it has printed */
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", "/exec/cancel-me/cancel", tok, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 202);
	it_resp_free(&r);
	json_t *res = bg_join(&b);
	assert_int_equal(b.rc, 0);
	assert_int_equal(b.resp.status, 200);
	assert_non_null(res);
	assert_true(jtrue(res, "cancelled"));
	assert_false(jtrue(res, "timed_out"));
	assert_true(is_exit_of_stop_signal(jint(res, "exit_code")));
	assert_string_equal(jstr(res, "stdout"), "started\n");
	assert_true(b.ms < 10000);
	it_resp_free(&b.resp);
	v = ex_wait_state(&srv, tok, "cancel-me", "cancelled", 2000);
	assert_non_null(v);
	assert_true(json_equal(json_object_get(v, "result"), res));
	json_decref(v);
	json_decref(res);

	/* cancelling it again: it has finished */
	it_expect_error_at(&srv, "POST", "/exec/cancel-me/cancel", tok, 409, "conflict");
	/* so has a command that simply exited */
	json_t *done = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "true", "id", "done-1"));
	json_decref(done);
	it_expect_error_at(&srv, "POST", "/exec/done-1/cancel", tok, 409, "conflict");
	v = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/exec/done-1", &v), 200);
	assert_string_equal(jstr(v, "state"), "exited");
	json_decref(v);
}

static size_t discard(char *p, size_t sz, size_t n, void *ud)
{
	(void)p;
	(void)ud;
	return sz * n;
}

static void test_cancel_by_disconnect(void **state)
{
	(void)state;
	CURL *c = curl_easy_init();
	char *url = xasprintf("%s/exec", srv.base);
	char *auth = xasprintf("Authorization: Bearer %s", tok);
	struct curl_slist *hl = curl_slist_append(NULL, auth);
	hl = curl_slist_append(hl, "Expect:");
	const char *body = "{\"command\": \"echo begun; sleep 30\", \"id\": \"disc-1\", \"timeout_s\": 60}";
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 1000L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	long t0 = it_now_ms();
	CURLcode rc = curl_easy_perform(c);
	assert_int_equal(rc, CURLE_OPERATION_TIMEDOUT);
	curl_easy_cleanup(c);
	curl_slist_free_all(hl);
	free(url);
	free(auth);
	json_t *v = ex_wait_state(&srv, tok, "disc-1", "cancelled", 8000);
	if (!v) {
		json_t *now = NULL;
		it_get_json(&srv, tok, "/exec/disc-1", &now);
		char *t = json_dumps(now, 0);
		fprintf(stderr, "after the disconnect: %s\n", t);
		free(t);
		json_decref(now);
	}
	assert_non_null(v);
	assert_true(it_now_ms() - t0 < 10000);
	json_t *res = json_object_get(v, "result");
	assert_true(jtrue(res, "cancelled"));
	assert_true(is_exit_of_stop_signal(jint(res, "exit_code")));
	/* what it printed before the hang-up is kept (under load the sandbox
	 * may not have started within the client's second) */
	assert_true(strcmp(jstr(res, "stdout"), "begun\n") == 0 || strcmp(jstr(res, "stdout"), "") == 0);
	assert_true(jint(res, "duration_ms") < 6000);
	json_decref(v);
	/* the server goes on */
	json_t *r = ex_run(&srv, tok, "echo fine");
	assert_string_equal(ex_stdout_ok(r), "fine\n");
	json_decref(r);
}

static void test_unknown_and_foreign_ids(void **state)
{
	(void)state;
	struct it_resp r, r2;
	it_expect_error_at(&srv, "GET", "/exec/no-such-exec-1", tok, 404, "not_found");
	it_expect_error_at(&srv, "POST", "/exec/no-such-exec-1/cancel", tok, 404, "not_found");
	it_expect_error_at(&srv, "GET", "/exec/bad%21id", tok, 404, "not_found");

	/* globex's running exec is invisible to acme: the same 404 as a
	 * missing one, and acme cannot cancel it */
	struct bg_req b;
	bg_exec(&b, &srv, tok_globex,
		json_pack("{s:s, s:s}", "command", "sleep 1.5; echo globex-done", "id", "gx-own-1"), NULL);
	json_t *v = ex_wait_state(&srv, tok_globex, "gx-own-1", "running", 10000);
	assert_non_null(v);
	json_decref(v);
	assert_int_equal(it_http(&srv, "GET", "/exec/gx-own-1", tok, NULL, NULL, 0, &r), 0);
	it_expect_error(&r, 404, "not_found");
	assert_int_equal(it_http(&srv, "GET", "/exec/gx-own-2", tok, NULL, NULL, 0, &r2), 0);
	it_expect_error(&r2, 404, "not_found");
	it_resp_free(&r);
	it_resp_free(&r2);
	it_expect_error_at(&srv, "POST", "/exec/gx-own-1/cancel", tok, 404, "not_found");
	/* nor list it */
	json_t *l = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/execs?state=running", &l), 200);
	json_t *e;
	size_t i;
	json_array_foreach(json_object_get(l, "execs"), i, e)
		assert_string_not_equal(jstr(e, "id"), "gx-own-1");
	json_decref(l);
	/* a state that is none is refused, naming every one there is */
	assert_int_equal(it_http(&srv, "GET", "/execs?state=sleeping", tok, NULL, NULL, 0, &r), 0);
	it_expect_error(&r, 400, "bad_request");
	static const char *const states[] = {"running",	  "pending_approval", "exited",
					     "timed_out", "cancelled",	      "rejected or lost"};
	for (size_t k = 0; k < sizeof states / sizeof *states; k++)
		assert_non_null(strstr(r.body, states[k]));
	it_resp_free(&r);
	json_t *res = bg_join(&b);
	assert_int_equal(b.resp.status, 200);
	assert_false(jtrue(res, "cancelled"));
	assert_string_equal(ex_stdout_ok(res), "globex-done\n");
	it_resp_free(&b.resp);
	json_decref(res);
	/* after it finished, still not acme's */
	it_expect_error_at(&srv, "GET", "/exec/gx-own-1", tok, 404, "not_found");
	it_expect_error_at(&srv, "POST", "/exec/gx-own-1/cancel", tok, 404, "not_found");

	/* ids are per tenant: the same id in two tenants are two execs */
	json_t *a = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "echo A", "id", "same-id-1"));
	json_t *g =
	    ex_ok(&srv, tok_globex, NULL, json_pack("{s:s, s:s}", "command", "echo G", "id", "same-id-1"));
	assert_string_equal(ex_stdout_ok(a), "A\n");
	assert_string_equal(ex_stdout_ok(g), "G\n");
	json_decref(a);
	json_decref(g);
}

/* ---- idempotency ---- */

static char *read_ws_file(const char *t, const char *path, long *status)
{
	char *url = xasprintf("/fs/read_buffer?path=%s", path);
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", url, t, NULL, NULL, 0, &r), 0);
	free(url);
	*status = r.status;
	char *body = r.body;
	r.body = NULL;
	it_resp_free(&r);
	return body;
}

static void test_idempotent_retry(void **state)
{
	(void)state;
	json_t *req =
	    json_pack("{s:s, s:s, s:{s:s}}", "command", "echo line >> idem-1.txt; wc -l < idem-1.txt", "id",
		      "idem-1", "env", "K", "v");
	json_t *a = ex_ok(&srv, tok, NULL, json_incref(req));
	json_t *b = ex_ok(&srv, tok, NULL, json_incref(req));
	assert_string_equal(ex_stdout_ok(a), "1\n");
	assert_true(json_equal(a, b));
	long st;
	char *f = read_ws_file(tok, "idem-1.txt", &st);
	assert_int_equal(st, 200);
	assert_string_equal(f, "line\n");
	free(f);
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/exec/idem-1", &v), 200);
	assert_true(json_equal(json_object_get(v, "result"), a));
	json_decref(v);
	json_decref(a);
	json_decref(b);

	/* the same id with a different request: 409, and nothing runs */
	exec_expect_error(&srv, tok, NULL,
			  json_pack("{s:s, s:s}", "command", "echo other >> idem-1.txt", "id", "idem-1"), 409,
			  "conflict");
	exec_expect_error(&srv, tok, NULL,
			  json_pack("{s:s, s:s, s:{s:s}}", "command",
				    "echo line >> idem-1.txt; wc -l < idem-1.txt", "id", "idem-1", "env", "K",
				    "w"),
			  409, "conflict");
	exec_expect_error(&srv, tok, NULL,
			  json_pack("{s:s, s:s, s:{s:s}, s:i}", "command",
				    "echo line >> idem-1.txt; wc -l < idem-1.txt", "id", "idem-1", "env", "K",
				    "v", "timeout_s", 7),
			  409, "conflict");
	const char *other_session[] = {"X-Session-Key: elsewhere", NULL};
	exec_expect_error(&srv, tok, other_session, json_incref(req), 409, "conflict");
	f = read_ws_file(tok, "idem-1.txt", &st);
	assert_string_equal(f, "line\n");
	free(f);

	/* a retry while the first still runs waits for it, and gets the same answer */
	json_t *slow = json_pack("{s:s, s:s}", "command", "echo once >> idem-2.txt; sleep 1; echo slow-done",
				 "id", "idem-2");
	struct bg_req first;
	bg_exec(&first, &srv, tok, json_incref(slow), NULL);
	v = ex_wait_state(&srv, tok, "idem-2", "running", 10000);
	assert_non_null(v);
	json_decref(v);
	json_t *second = ex_ok(&srv, tok, NULL, json_incref(slow));
	json_t *one = bg_join(&first);
	assert_int_equal(first.resp.status, 200);
	it_resp_free(&first.resp);
	assert_string_equal(ex_stdout_ok(second), "slow-done\n");
	assert_true(json_equal(one, second));
	f = read_ws_file(tok, "idem-2.txt", &st);
	assert_string_equal(f, "once\n");
	free(f);
	json_decref(one);
	json_decref(second);
	json_decref(slow);
	json_decref(req);
}

static void test_idempotent_concurrent(void **state)
{
	(void)state;
	enum { ROUNDS = 6, N = 3 };
	for (int round = 0; round < ROUNDS; round++) {
		char id[32], cmd[128], file[64];
		snprintf(id, sizeof id, "conc-%d", round);
		snprintf(file, sizeof file, "conc-%d.txt", round);
		snprintf(cmd, sizeof cmd, "echo ran >> %s; sleep 0.2; echo finished", file);
		pthread_barrier_t bar;
		pthread_barrier_init(&bar, NULL, N);
		struct bg_req b[N];
		for (int i = 0; i < N; i++)
			bg_exec(&b[i], &srv, tok, json_pack("{s:s, s:s}", "command", cmd, "id", id), &bar);
		json_t *res[N];
		for (int i = 0; i < N; i++) {
			res[i] = bg_join(&b[i]);
			if (b[i].rc != 0 || b[i].resp.status != 200)
				fprintf(stderr, "round %d request %d: rc %d status %ld %.*s\n", round, i,
					b[i].rc, b[i].resp.status, (int)b[i].resp.len,
					b[i].resp.body ? b[i].resp.body : "");
		}
		for (int i = 0; i < N; i++) {
			assert_int_equal(b[i].rc, 0);
			assert_int_equal(b[i].resp.status, 200);
			assert_string_equal(ex_stdout_ok(res[i]), "finished\n");
			assert_true(json_equal(res[0], res[i]));
		}
		for (int i = 0; i < N; i++) {
			it_resp_free(&b[i].resp);
			json_decref(res[i]);
		}
		pthread_barrier_destroy(&bar);
		long st;
		char *f = read_ws_file(tok, file, &st);
		assert_int_equal(st, 200);
		assert_string_equal(f, "ran\n");
		free(f);
	}
}

/* ---- bounded output ---- */

static void test_bounded_output(void **state)
{
	(void)state;
	json_t *r = ex_ok(&srv, tok, NULL,
			  json_pack("{s:s, s:i, s:s}", "command", "yes | head -c 1000000", "max_output_bytes",
				    1000, "id", "big-1"));
	assert_int_equal(jint(r, "exit_code"), 0);
	assert_true(jtrue(r, "truncated"));
	assert_int_equal(jint(r, "stdout_bytes"), 1000000);
	const char *out = jstr(r, "stdout");
	const char *marker = strstr(out, "\n[... sandboxd: ");
	assert_non_null(marker);
	assert_non_null(strstr(marker, "bytes omitted"));
	assert_non_null(strstr(marker, "/workspace/.sandboxd/spill/big-1.stdout"));
	assert_true(strncmp(out, "y\ny\ny\n", 6) == 0);		   /* the head */
	assert_true(strcmp(out + strlen(out) - 4, "y\ny\n") == 0); /* the tail */
	const char *eol = strstr(marker + 1, "\n");
	assert_non_null(eol);
	size_t kept = strlen(out) - (size_t)(eol + 1 - marker);
	assert_true(kept <= 1000 && kept >= 900);
	assert_string_equal(jstr(r, "stdout_spill"), "/workspace/.sandboxd/spill/big-1.stdout");
	assert_true(json_is_null(json_object_get(r, "stderr_spill")));
	long st;
	char *spill = read_ws_file(tok, "/workspace/.sandboxd/spill/big-1.stdout", &st);
	assert_int_equal(st, 200);
	assert_non_null(spill);
	struct it_resp hr;
	assert_int_equal(it_http(&srv, "GET", "/fs/read_buffer?path=/workspace/.sandboxd/spill/big-1.stdout",
				 tok, NULL, NULL, 0, &hr),
			 0);
	assert_int_equal(hr.len, 1000000);
	for (size_t i = 0; i < hr.len; i++)
		if (hr.body[i] != (i % 2 ? '\n' : 'y'))
			fail_msg("spill byte %zu is %d", i, hr.body[i]);
	it_resp_free(&hr);
	free(spill);
	json_decref(r);

	/* stderr has its own window and spill */
	r = ex_ok(&srv, tok, NULL,
		  json_pack("{s:s, s:i, s:s}", "command", "echo small; yes err | head -c 5000 >&2",
			    "max_output_bytes", 256, "id", "big-2"));
	assert_true(jtrue(r, "truncated"));
	assert_string_equal(jstr(r, "stdout"), "small\n");
	assert_int_equal(jint(r, "stderr_bytes"), 5000);
	assert_true(json_is_null(json_object_get(r, "stdout_spill")));
	assert_string_equal(jstr(r, "stderr_spill"), "/workspace/.sandboxd/spill/big-2.stderr");
	char *sp = read_ws_file(tok, "/workspace/.sandboxd/spill/big-2.stderr", &st);
	assert_int_equal(st, 200);
	assert_int_equal(strlen(sp), 5000);
	free(sp);
	json_decref(r);

	/* output exactly at the limit is not truncated */
	r = ex_ok(&srv, tok, NULL,
		  json_pack("{s:s, s:i}", "command", "yes | head -c 256", "max_output_bytes", 256));
	assert_false(jtrue(r, "truncated"));
	assert_int_equal(strlen(jstr(r, "stdout")), 256);
	assert_true(json_is_null(json_object_get(r, "stdout_spill")));
	json_decref(r);

	/* a huge max_output_bytes is capped, not refused */
	r = ex_ok(&srv, tok, NULL,
		  json_pack("{s:s, s:I}", "command", "echo ok", "max_output_bytes", (json_int_t)1 << 40));
	assert_string_equal(ex_stdout_ok(r), "ok\n");
	json_decref(r);

	/* undecodable bytes are replaced in the JSON */
	r = ex_run(&srv, tok, "printf '\\377\\376ok\\n'");
	assert_string_equal(ex_stdout_ok(r), "\xEF\xBF\xBD\xEF\xBF\xBDok\n");
	assert_int_equal(jint(r, "stdout_bytes"), 5);
	json_decref(r);

	/* short output costs no file: globex never overflowed, has no .sandboxd */
	r = ex_ok(&srv, tok_globex, NULL,
		  json_pack("{s:s, s:s}", "command", "echo short; echo e >&2", "id", "short-1"));
	assert_string_equal(ex_stdout_ok(r), "short\n");
	assert_false(jtrue(r, "truncated"));
	assert_true(json_is_null(json_object_get(r, "stdout_spill")));
	assert_true(json_is_null(json_object_get(r, "stderr_spill")));
	json_decref(r);
	assert_int_equal(
	    it_http(&srv, "GET", "/fs/exists?path=/workspace/.sandboxd", tok_globex, NULL, NULL, 0, &hr), 0);
	assert_int_equal(hr.status, 200);
	json_t *j = it_json(&hr);
	assert_true(json_is_false(json_object_get(j, "exists")));
	json_decref(j);
	it_resp_free(&hr);
}

/* ---- the per-tenant limit ---- */

static int running_count(struct it_server *s, const char *t)
{
	json_t *l = NULL;
	if (it_get_json(s, t, "/execs?state=running", &l) != 200)
		return -1;
	int n = (int)json_array_size(json_object_get(l, "execs"));
	json_decref(l);
	return n;
}

static void test_429(void **state)
{
	(void)state;
	/* (a uid range of its own from the harness: srv holds this suite's) */
	/* tenant-exec-queue=0: 429 at once, no waiting (test_exec_queue.c
	 * covers the queue) */
	const char *const extra[] = {"--set", "tenant-max-execs=2", "--set", "tenant-exec-queue=0", NULL};
	assert_int_equal(it_start(&s2, extra), 0);
	char *t = it_token(&s2, "acme", NULL), *tg = it_token(&s2, "globex", NULL);
	assert_non_null(t);
	assert_non_null(tg);
	struct bg_req b[3];
	bg_exec(&b[0], &s2, t, json_pack("{s:s, s:s}", "command", "sleep 2; echo one", "id", "lim-1"), NULL);
	bg_exec(&b[1], &s2, t, json_pack("{s:s, s:s}", "command", "sleep 2; echo two", "id", "lim-2"), NULL);
	long until = it_now_ms() + 10000;
	while (running_count(&s2, t) < 2 && it_now_ms() < until)
		usleep(20000);
	assert_int_equal(running_count(&s2, t), 2);

	/* the third: 429 with Retry-After, and it does not run */
	struct it_resp r;
	long st = ex_post(&s2, t, NULL,
			  json_pack("{s:s, s:s}", "command", "touch /workspace/third-ran", "id", "lim-3"),
			  NULL, &r);
	assert_int_equal(st, 429);
	it_expect_error(&r, 429, "too_many_requests");
	char *ra = it_header(&r, "Retry-After");
	assert_non_null(ra);
	assert_true(strtol(ra, NULL, 10) >= 1);
	free(ra);
	it_resp_free(&r);
	assert_int_equal(it_get_json(&s2, t, "/exec/lim-3", NULL), 404);
	/* an idempotent retry of a running one is not a new exec: it waits */
	bg_exec(&b[2], &s2, t, json_pack("{s:s, s:s}", "command", "sleep 2; echo one", "id", "lim-1"), NULL);
	/* another tenant is not limited by acme's count */
	json_t *g = ex_run(&s2, tg, "echo ok");
	assert_string_equal(ex_stdout_ok(g), "ok\n");
	json_decref(g);

	json_t *res[3];
	for (int i = 0; i < 3; i++) {
		res[i] = bg_join(&b[i]);
		assert_int_equal(b[i].resp.status, 200);
		it_resp_free(&b[i].resp);
	}
	assert_string_equal(ex_stdout_ok(res[0]), "one\n");
	assert_string_equal(ex_stdout_ok(res[1]), "two\n");
	assert_true(json_equal(res[0], res[2]));
	for (int i = 0; i < 3; i++)
		json_decref(res[i]);
	/* the slots are given back */
	json_t *a = ex_run(&s2, t, "echo again");
	assert_string_equal(ex_stdout_ok(a), "again\n");
	json_decref(a);
	a = ex_ok(&s2, t, NULL,
		  json_pack("{s:s, s:s}", "command", "test -e /workspace/third-ran && echo ran || echo no",
			    "id", "lim-3"));
	assert_string_equal(ex_stdout_ok(a), "no\n");
	json_decref(a);
	free(t);
	free(tg);
	assert_int_equal(it_finish(&s2), 0);
}

/* ---- validation and scopes ---- */

static void test_bad_bodies(void **state)
{
	(void)state;
	static const char *const bodies[] = {
	    "not json",
	    "{\"command\": \"touch /workspace/bad-ran\"",
	    "[\"touch /workspace/bad-ran\"]",
	    "\"touch /workspace/bad-ran\"",
	    "{}",
	    "{\"cwd\": \"x\"}",
	    "{\"command\": 5}",
	    "{\"command\": null}",
	    "{\"command\": [\"touch\", \"/workspace/bad-ran\"]}",
	    "{\"command\": \"\"}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"bogus\": 1}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"Command\": \"x\"}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"command\": \"touch /workspace/bad-ran\"}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"id\": \"a/b\"}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"id\": \"has space\"}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"id\": \"dot.ted\"}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"id\": \"\"}",
	    ("{\"command\": \"touch /workspace/bad-ran\", \"id\": "
	     "\"x1234567890123456789012345678901234567890123456789012345678901234\"}"),
	    "{\"command\": \"touch /workspace/bad-ran\", \"id\": 7}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"env\": {\"A\": 1}}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"env\": {\"A\": null}}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"env\": {\"A\": [\"x\"]}}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"env\": {\"1A\": \"x\"}}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"env\": {\"A-B\": \"x\"}}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"env\": {\"A=B\": \"x\"}}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"env\": {\"\": \"x\"}}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"env\": [\"A=B\"]}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"env\": \"A=B\"}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"timeout_s\": 0}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"timeout_s\": -1}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"timeout_s\": \"5\"}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"timeout_s\": 1.5}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"timeout_s\": true}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"timeout_s\": 99999999999999999999}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"idle_timeout_s\": 0}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"max_output_bytes\": \"big\"}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"max_output_bytes\": 0}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"stdin\": 5}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"cwd\": 5}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"cwd\": \"\"}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"stream\": \"yes\"}",
	    "{\"command\": \"touch /workspace/bad-ran\\u0000\"}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"env\": {\"A\\u0000B\": \"x\"}}",
	    "{\"command\": \"touch /workspace/bad-ran\", \"stdin\": \"a\\u0000b\"}",
	};
	for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
		raw_exec_expect_400(bodies[i]);
	/* an empty body */
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", "/exec", tok, NULL, "", 0, &r), 0);
	it_expect_error(&r, 400, "bad_request");
	it_resp_free(&r);
	/* nothing ran, and the server goes on */
	assert_int_equal(it_http(&srv, "GET", "/fs/exists?path=/workspace/bad-ran", tok, NULL, NULL, 0, &r),
			 0);
	json_t *j = it_json(&r);
	assert_true(json_is_false(json_object_get(j, "exists")));
	json_decref(j);
	it_resp_free(&r);
	assert_true(it_alive(&srv));
	json_t *ok = ex_run(&srv, tok, "echo alive");
	assert_string_equal(ex_stdout_ok(ok), "alive\n");
	json_decref(ok);
}

static void test_scopes(void **state)
{
	(void)state;
	json_t *done =
	    ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "echo scoped", "id", "scope-1"));
	json_decref(done);
	const char *no_exec[] = {tok_read, tok_write};
	for (size_t i = 0; i < 2; i++) {
		exec_expect_error(&srv, no_exec[i], NULL,
				  json_pack("{s:s}", "command", "touch /workspace/scope-ran"), 403,
				  "insufficient_scope");
		it_expect_error_at(&srv, "GET", "/exec/scope-1", no_exec[i], 403, "insufficient_scope");
		it_expect_error_at(&srv, "GET", "/execs", no_exec[i], 403, "insufficient_scope");
	}
	/* audit:read observes but runs and cancels nothing */
	exec_expect_error(&srv, tok_audit, NULL, json_pack("{s:s}", "command", "touch /workspace/scope-ran"),
			  403, "insufficient_scope");
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok_audit, "/exec/scope-1", &v), 200);
	assert_string_equal(jstr(v, "state"), "exited");
	assert_string_equal(jstr(json_object_get(v, "result"), "stdout"), "scoped\n");
	json_decref(v);
	assert_int_equal(it_get_json(&srv, tok_audit, "/execs", &v), 200);
	assert_true(json_array_size(json_object_get(v, "execs")) > 0);
	json_decref(v);
	struct bg_req b;
	bg_exec(&b, &srv, tok, json_pack("{s:s, s:s}", "command", "sleep 1; echo survived", "id", "scope-2"),
		NULL);
	v = ex_wait_state(&srv, tok_audit, "scope-2", "running", 10000);
	assert_non_null(v);
	json_decref(v);
	struct it_resp r;
	it_expect_error_at(&srv, "POST", "/exec/scope-2/cancel", tok_audit, 403, "insufficient_scope");
	json_t *res = bg_join(&b);
	assert_int_equal(b.resp.status, 200);
	assert_false(jtrue(res, "cancelled"));
	assert_string_equal(ex_stdout_ok(res), "survived\n");
	json_decref(res);
	it_resp_free(&b.resp);
	/* exec alone is enough to run */
	json_t *e = ex_run(&srv, tok_exec, "echo exec-only");
	assert_string_equal(ex_stdout_ok(e), "exec-only\n");
	json_decref(e);
	assert_int_equal(it_http(&srv, "GET", "/fs/exists?path=/workspace/scope-ran", tok, NULL, NULL, 0, &r),
			 0);
	json_t *j = it_json(&r);
	assert_true(json_is_false(json_object_get(j, "exists")));
	json_decref(j);
	it_resp_free(&r);
}

/* ---- listing ---- */

static json_t *list(const char *t, const char *query)
{
	char *path = xasprintf("/execs%s", query);
	json_t *l = NULL;
	long st = it_get_json(&srv, t, path, &l);
	if (st != 200)
		fprintf(stderr, "GET %s: %ld\n", path, st);
	assert_int_equal(st, 200);
	free(path);
	json_t *arr = json_incref(json_object_get(l, "execs"));
	json_decref(l);
	assert_true(json_is_array(arr));
	/* newest first, in the listed shape without result */
	json_t *e;
	size_t i;
	long long prev = -1;
	json_array_foreach(arr, i, e) {
		assert_null(json_object_get(e, "result"));
		assert_non_null(jstr(e, "id"));
		assert_non_null(jstr(e, "state"));
		assert_non_null(jstr(e, "command"));
		assert_non_null(jstr(e, "session"));
		assert_non_null(jstr(e, "cwd"));
		long long at = rfc3339_ms(jstr(e, "started_at"));
		assert_true(at > 0);
		if (prev >= 0)
			assert_true(at <= prev);
		prev = at;
	}
	return arr;
}

static bool listed(json_t *arr, const char *id)
{
	json_t *e;
	size_t i;
	json_array_foreach(arr, i, e)
		if (strcmp(jstr(e, "id"), id) == 0)
			return true;
	return false;
}

static void test_list(void **state)
{
	(void)state;
	const char *ha[] = {"X-Session-Key: list-a", NULL};
	const char *hb[] = {"X-Session-Key: list-b", NULL};
	const char *hr[] = {"X-Session-Key: list-run", NULL};
	json_decref(ex_ok(&srv, tok, ha, json_pack("{s:s, s:s}", "command", "true", "id", "la-1")));
	json_decref(ex_ok(&srv, tok, hb, json_pack("{s:s, s:s}", "command", "exit 1", "id", "lb-1")));
	json_decref(ex_ok(&srv, tok, ha,
			  json_pack("{s:s, s:s, s:i}", "command", "sleep 5", "id", "la-2", "timeout_s", 1)));
	json_decref(ex_ok(&srv, tok, ha, json_pack("{s:s, s:s}", "command", "echo third", "id", "la-3")));
	json_decref(ex_ok(&srv, tok_globex, ha, json_pack("{s:s, s:s}", "command", "true", "id", "lg-1")));

	json_t *a = list(tok, "?session=list-a");
	assert_int_equal(json_array_size(a), 3);
	assert_string_equal(jstr(json_array_get(a, 0), "id"), "la-3");
	assert_string_equal(jstr(json_array_get(a, 1), "id"), "la-2");
	assert_string_equal(jstr(json_array_get(a, 2), "id"), "la-1");
	assert_string_equal(jstr(json_array_get(a, 0), "session"), "list-a");
	assert_string_equal(jstr(json_array_get(a, 0), "command"), "echo third");
	assert_string_equal(jstr(json_array_get(a, 0), "state"), "exited");
	assert_string_equal(jstr(json_array_get(a, 1), "state"), "timed_out");
	json_decref(a);

	json_t *to = list(tok, "?state=timed_out");
	assert_true(listed(to, "la-2"));
	json_t *e;
	size_t i;
	json_array_foreach(to, i, e)
		assert_string_equal(jstr(e, "state"), "timed_out");
	json_decref(to);

	json_t *b = list(tok, "?state=exited&session=list-b");
	assert_int_equal(json_array_size(b), 1);
	assert_string_equal(jstr(json_array_get(b, 0), "id"), "lb-1");
	json_decref(b);
	b = list(tok, "?state=timed_out&session=list-b");
	assert_int_equal(json_array_size(b), 0);
	json_decref(b);

	/* everything of acme, newest first, nothing of globex */
	json_t *all = list(tok, "");
	assert_true(listed(all, "la-1") && listed(all, "lb-1") && listed(all, "la-3"));
	assert_false(listed(all, "lg-1"));
	json_decref(all);
	json_t *one = list(tok, "?limit=1");
	assert_int_equal(json_array_size(one), 1);
	assert_string_equal(jstr(json_array_get(one, 0), "id"), "la-3");
	json_decref(one);
	/* globex sees its own only */
	json_t *g = list(tok_globex, "?session=list-a");
	assert_int_equal(json_array_size(g), 1);
	assert_string_equal(jstr(json_array_get(g, 0), "id"), "lg-1");
	json_decref(g);
	/* the observer role lists the same */
	json_t *au = list(tok_audit, "?session=list-a");
	assert_int_equal(json_array_size(au), 3);
	json_decref(au);

	/* running */
	struct bg_req bg;
	bg_exec(&bg, &srv, tok, json_pack("{s:s, s:s}", "command", "sleep 1", "id", "lr-1"), NULL);
	(void)hr;
	json_t *v = ex_wait_state(&srv, tok, "lr-1", "running", 10000);
	assert_non_null(v);
	json_decref(v);
	json_t *run = list(tok, "?state=running");
	assert_true(listed(run, "lr-1"));
	json_array_foreach(run, i, e)
		assert_string_equal(jstr(e, "state"), "running");
	json_decref(run);
	json_decref(bg_join(&bg));
	it_resp_free(&bg.resp);
	run = list(tok, "?state=running");
	assert_false(listed(run, "lr-1"));
	json_decref(run);

	/* bad filters */
	it_expect_error_at(&srv, "GET", "/execs?state=bogus", tok, 400, "bad_request");
	it_expect_error_at(&srv, "GET", "/execs?limit=0", tok, 400, "bad_request");
	it_expect_error_at(&srv, "GET", "/execs?limit=abc", tok, 400, "bad_request");
}

/* ---- the server stopping ---- */

static uid_t tenant_uid(struct it_server *s, const char *t)
{
	json_t *r = ex_run(s, t, "id -u");
	uid_t uid = (uid_t)strtol(ex_stdout_ok(r), NULL, 10);
	json_decref(r);
	return uid;
}

static void test_sigterm_while_running(void **state)
{
	(void)state;
	assert_int_equal(it_start(&s3, NULL), 0);
	long base = strtol(s3.uid_base + strlen("uid-base="), NULL, 10);
	char *t = it_token(&s3, "acme", NULL);
	uid_t uid = tenant_uid(&s3, t);
	assert_int_equal(uid, base); /* acme is the first tenant: slot 0 */
	struct bg_req b;
	/* the sleep's argument is unique to this run: other servers on this
	 * host may run commands as the same uid */
	char nonce[32], *cmd;
	snprintf(nonce, sizeof nonce, "37.%d", (int)getpid());
	cmd = xasprintf("echo before; touch term.flag; sleep %s", nonce);
	bg_exec(&b, &s3, t, json_pack("{s:s, s:s}", "command", cmd, "id", "term-1"), NULL);
	free(cmd);
	json_t *v = ex_wait_state(&s3, t, "term-1", "running", 10000);
	assert_non_null(v);
	json_decref(v);
	assert_true(ws_file_appears(&s3, t, "term.flag", 10000));
	long t0 = it_now_ms();
	assert_int_equal(it_stop(&s3, SIGTERM), 0);
	assert_true(it_now_ms() - t0 < 8000);
	json_t *res = bg_join(&b);
	if (b.rc == 0) {
		/* answered: as a cancel */
		if (b.resp.status != 200)
			fprintf(stderr, "POST during SIGTERM: %ld %.*s\n", b.resp.status, (int)b.resp.len,
				b.resp.body);
		assert_int_equal(b.resp.status, 200);
		assert_true(jtrue(res, "cancelled"));
		assert_true(is_exit_of_stop_signal(jint(res, "exit_code")));
		assert_string_equal(jstr(res, "stdout"), "before\n");
	}
	it_resp_free(&b.resp);
	json_decref(res);
	assert_int_equal(host_procs_wait_gone(uid, NULL, nonce, 3000), 0);
	assert_log_clean(&s3);

	/* after a restart the exec is finished, never stuck at running */
	assert_int_equal(it_restart(&s3, NULL), 0);
	v = NULL;
	assert_int_equal(it_get_json(&s3, t, "/exec/term-1", &v), 200);
	assert_string_equal(jstr(v, "state"), "cancelled");
	assert_true(jtrue(json_object_get(v, "result"), "cancelled"));
	json_decref(v);
	json_t *l = NULL;
	assert_int_equal(it_get_json(&s3, t, "/execs?state=running", &l), 200);
	assert_int_equal(json_array_size(json_object_get(l, "execs")), 0);
	json_decref(l);
	free(t);
	assert_int_equal(it_finish(&s3), 0);
}

static void test_kill9_then_lost(void **state)
{
	(void)state;
	assert_int_equal(it_start(&s4, NULL), 0);
	char *t = it_token(&s4, "acme", NULL);
	uid_t uid = tenant_uid(&s4, t);
	struct bg_req b;
	char nonce[32];
	snprintf(nonce, sizeof nonce, "41.%d", (int)getpid());
	char *cmd = xasprintf("echo x >> lost.txt; sleep %s", nonce);
	json_t *req = json_pack("{s:s, s:s}", "command", cmd, "id", "lost-1");
	free(cmd);
	bg_exec(&b, &s4, t, json_incref(req), NULL);
	json_t *v = ex_wait_state(&s4, t, "lost-1", "running", 10000);
	assert_non_null(v);
	json_decref(v);
	assert_true(ws_file_appears(&s4, t, "lost.txt", 10000));
	/* the sandbox is up: the sleep (or the shell about to run it) is there */
	long until = it_now_ms() + 5000;
	while (host_procs_of_uid(uid, NULL, nonce) == 0 && it_now_ms() < until)
		usleep(20000);
	assert_true(host_procs_of_uid(uid, NULL, nonce) > 0);
	assert_int_equal(it_stop(&s4, SIGKILL), 128 + SIGKILL);
	json_decref(bg_join(&b));
	assert_int_not_equal(b.rc, 0);
	it_resp_free(&b.resp);
	/* the sandbox dies with the server */
	assert_int_equal(host_procs_wait_gone(uid, NULL, nonce, 3000), 0);

	assert_int_equal(it_restart(&s4, NULL), 0);
	v = NULL;
	assert_int_equal(it_get_json(&s4, t, "/exec/lost-1", &v), 200);
	assert_string_equal(jstr(v, "state"), "lost");
	assert_true(json_is_null(json_object_get(v, "result")));
	json_decref(v);
	/* a retry of a lost id does not run it again */
	exec_expect_error(&s4, t, NULL, json_incref(req), 409, "conflict");
	json_t *r = ex_run(&s4, t, "cat lost.txt");
	assert_string_equal(ex_stdout_ok(r), "x\n");
	json_decref(r);
	json_decref(req);
	free(t);
	assert_int_equal(it_finish(&s4), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_result_shape),
	    cmocka_unit_test(test_exit_codes),
	    cmocka_unit_test(test_stdin_env_clean),
	    cmocka_unit_test(test_cwd),
	    cmocka_unit_test(test_timeouts),
	    cmocka_unit_test(test_cancel_route),
	    cmocka_unit_test(test_cancel_by_disconnect),
	    cmocka_unit_test(test_unknown_and_foreign_ids),
	    cmocka_unit_test(test_idempotent_retry),
	    cmocka_unit_test(test_idempotent_concurrent),
	    cmocka_unit_test(test_bounded_output),
	    cmocka_unit_test(test_429),
	    cmocka_unit_test(test_bad_bodies),
	    cmocka_unit_test(test_scopes),
	    cmocka_unit_test(test_list),
	    cmocka_unit_test(test_sigterm_while_running),
	    cmocka_unit_test(test_kill9_then_lost),
	};
	curl_global_init(CURL_GLOBAL_ALL);
	int rc = cmocka_run_group_tests_name("exec", tests, setup, teardown);
	curl_global_cleanup();
	return rc;
}
