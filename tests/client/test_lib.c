/* libsandboxd against the real server: every method, the wire errors it
 * reports, exec in both forms with cancellation three ways, the event
 * feed across cut connections, audit paging, retries on real 429s and
 * 503s, TLS verification, sharing one handle between threads. (The 1 GiB
 * streams are in test_lib_stream.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_test.h"
#include "common/xmalloc.h"
#include "relay.h"

static struct it_server srv;
static struct it_server s2; /* a server with other settings; cleaned up by teardown if a test fails */
static char *tok, *audit_tok;
static const struct it_tok toks[] = {{&tok, "acme", NULL}, {&audit_tok, "acme", "audit:read"}};

static int setup(void **state)
{
	(void)state;
	curl_global_init(CURL_GLOBAL_ALL);
	return it_start_minted(&srv, NULL, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	it_free_all(toks, IT_NTOKS(toks));
	it_cleanup(&srv);
	it_cleanup(&s2);
	curl_global_cleanup();
	return 0;
}

static struct sbxc *acme(void)
{
	struct sbxc *h = ct_client(srv.base, tok, &(struct sbxc_opts){.tenant = "acme"});
	assert_non_null(h);
	return h;
}

/* ---- files ---- */

static void test_files_roundtrip(void **state)
{
	(void)state;
	struct sbxc *h = acme();
	struct sbxc_call c = {.session = "files"};
	struct sbxc_err e;
	uint64_t size = 0;
	assert_int_equal(sbxc_write_file(h, &c, "d/hello.txt", "hello, world\n", 13, &size, &e), 0);
	assert_int_equal(size, 13);
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(sbxc_read_file(h, &c, "d/hello.txt", &data, &len, &e), 0);
	assert_int_equal(len, 13);
	assert_string_equal(data, "hello, world\n");
	free(data);
	assert_int_equal(sbxc_read_file_buffer(h, &c, "d/hello.txt", 7, 5, &data, &len, &e), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(data, "world", 5);
	free(data);
	assert_int_equal(sbxc_read_file_buffer(h, &c, "d/hello.txt", 7, 0, &data, &len, &e), 0);
	assert_string_equal(data, "world\n");
	free(data);
	struct sbxc_stat st;
	assert_int_equal(sbxc_stat(h, &c, "d/hello.txt", &st, &e), 0);
	assert_int_equal(st.type, SBXC_FILE);
	assert_true(st.has_size && st.size == 13 && st.has_mode && st.mode == 0644 && st.has_mtime);
	assert_true(st.mtime > 1700000000);
	assert_non_null(strstr(st.path, "/workspace/sessions/files-"));
	sbxc_stat_clear(&st);
	bool yes = true;
	assert_int_equal(sbxc_exists(h, &c, "d/nope", &yes, &e), 0);
	assert_false(yes);
	assert_int_equal(sbxc_exists(h, &c, "d", &yes, &e), 0);
	assert_true(yes);
	/* sessions are separate directories */
	struct sbxc_call other = {.session = "other"};
	assert_int_equal(sbxc_exists(h, &other, "d/hello.txt", &yes, &e), 0);
	assert_false(yes);
	sbxc_free(&h);
}

static void test_files_dirs_and_moves(void **state)
{
	(void)state;
	struct sbxc *h = acme();
	struct sbxc_call c = {.session = "dirs"};
	struct sbxc_err e;
	assert_int_equal(sbxc_mkdir(h, &c, "a/b/c", true, &e), 0);
	assert_int_equal(sbxc_mkdir(h, &c, "a/b", false, &e), -EEXIST);
	assert_string_equal(e.code, "exists");
	assert_int_equal(e.status, 409);
	assert_int_equal(sbxc_mkdir(h, &c, "x/y", false, &e), -ENOENT);
	assert_string_equal(e.code, "parent_missing");
	assert_int_equal(sbxc_write_file(h, &c, "a/two", "2", 1, NULL, &e), 0);
	assert_int_equal(sbxc_write_file(h, &c, "a/one", "1", 1, NULL, &e), 0);
	struct sbxc_dirent *v = NULL;
	size_t n = 0;
	assert_int_equal(sbxc_readdir(h, &c, "a", false, &v, &n, &e), 0);
	assert_int_equal(n, 3);
	assert_string_equal(v[0].name, "b");
	assert_string_equal(v[1].name, "one");
	assert_string_equal(v[2].name, "two");
	assert_int_equal(v[0].type, SBXC_UNKNOWN);
	sbxc_dirents_free(v, n);
	assert_int_equal(sbxc_readdir(h, &c, "a", true, &v, &n, &e), 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[0].type, SBXC_DIR);
	assert_int_equal(v[1].type, SBXC_FILE);
	assert_true(v[1].has_size && v[1].size == 1 && v[1].has_mtime);
	sbxc_dirents_free(v, n);
	assert_int_equal(sbxc_move(h, &c, "a/one", "a/two", false, &e), -EEXIST);
	assert_int_equal(sbxc_move(h, &c, "a/one", "a/two", true, &e), 0);
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(sbxc_read_file(h, &c, "a/two", &data, &len, &e), 0);
	assert_string_equal(data, "1");
	free(data);
	bool removed = true;
	assert_int_equal(sbxc_rm(h, &c, "a/none", false, true, &removed, &e), 0);
	assert_false(removed);
	assert_int_equal(sbxc_rm(h, &c, "a", false, false, &removed, &e), -ENOTEMPTY);
	assert_string_equal(e.code, "not_empty");
	assert_int_equal(sbxc_rm(h, &c, "a", true, false, &removed, &e), 0);
	assert_true(removed);
	sbxc_free(&h);
}

/* A directory larger than a page (a paging server's default is 1000):
 * sbxc_readdir has it all; sbxc_readdir_page walks it with cursors. */
static void test_readdir_pages(void **state)
{
	(void)state;
	struct sbxc *h = acme();
	struct sbxc_call c = {.session = "pages"};
	struct sbxc_err e;
	struct sbxc_result r;
	struct sbxc_exec_req q = {.command = "mkdir big && cd big && seq -w 1 2500 | xargs touch"};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), 0);
	assert_int_equal(r.exit_code, 0);
	sbxc_result_clear(&r);
	struct sbxc_dirent *v = NULL;
	size_t n = 0;
	assert_int_equal(sbxc_readdir(h, &c, "big", false, &v, &n, &e), 0);
	assert_int_equal(n, 2500);
	for (size_t i = 1; i < n; i++)
		assert_true(strcmp(v[i - 1].name, v[i].name) < 0);
	assert_string_equal(v[2499].name, "2500");
	sbxc_dirents_free(v, n);
	/* page by page: every name once (the order across pages is the
	 * server's) */
	char *cursor = NULL;
	static bool seen[2501];
	size_t total = 0;
	int pages = 0;
	do {
		char *next = NULL;
		assert_int_equal(sbxc_readdir_page(h, &c, "big", true, cursor, 700, &v, &n, &next, &e), 0);
		for (size_t i = 0; i < n; i++) {
			long k = strtol(v[i].name, NULL, 10);
			assert_true(k >= 1 && k <= 2500 && !seen[k]);
			seen[k] = true;
			assert_int_equal(v[i].type, SBXC_FILE);
		}
		total += n;
		sbxc_dirents_free(v, n);
		free(cursor);
		cursor = next;
	} while (cursor && ++pages < 100);
	assert_int_equal(total, 2500);
	sbxc_free(&h);
}

static void test_sessions_and_ready(void **state)
{
	(void)state;
	struct sbxc *h = acme();
	struct sbxc_call c = {.session = "short-lived"};
	struct sbxc_err e;
	assert_int_equal(sbxc_write_file(h, &c, "x", "1", 1, NULL, &e), 0);
	struct sbxc_session *v = NULL;
	size_t n = 0;
	bool found = false;
	assert_int_equal(sbxc_sessions(h, NULL, &v, &n, &e), 0);
	for (size_t i = 0; i < n; i++)
		found |= strcmp(v[i].key, "short-lived") == 0 && strstr(v[i].dir, "short-lived-") &&
			 v[i].created_at[0];
	sbxc_sessions_free(v, n);
	assert_true(found);
	assert_int_equal(sbxc_session_delete(h, &c, &e), 0);
	assert_int_equal(sbxc_sessions(h, NULL, &v, &n, &e), 0);
	for (size_t i = 0; i < n; i++)
		assert_string_not_equal(v[i].key, "short-lived");
	sbxc_sessions_free(v, n);
	bool yes = true;
	assert_int_equal(sbxc_exists(h, &c, "x", &yes, &e), 0);
	assert_false(yes);
	char *detail = NULL;
	assert_int_equal(sbxc_ready(h, NULL, &detail, &e), 0);
	assert_non_null(strstr(detail, "\"ready\""));
	free(detail);
	sbxc_free(&h);
}

static void test_wire_errors(void **state)
{
	(void)state;
	struct sbxc *h = acme();
	struct sbxc_call c = {.session = "errors", .request_id = "req-errors-1"};
	struct sbxc_err e;
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(sbxc_read_file(h, &c, "missing.txt", &data, &len, &e), -ENOENT);
	assert_int_equal(e.status, 404);
	assert_string_equal(e.code, "not_found");
	assert_non_null(strstr(e.message, "missing.txt"));
	assert_string_equal(e.request_id, "req-errors-1");
	assert_int_equal(e.attempts, 1); /* a 404 is not retried */
	assert_int_equal(sbxc_read_file(h, &c, "../../../etc/passwd", &data, &len, &e), -EXDEV);
	assert_string_equal(e.code, "outside_workspace");
	assert_int_equal(sbxc_write_file(h, &c, "bin", "\xff\xfe", 2, NULL, &e), 0);
	assert_int_equal(sbxc_read_file(h, &c, "bin", &data, &len, &e), -EILSEQ);
	assert_string_equal(e.code, "not_text");
	assert_true(e.retry_hint[0] != '\0'); /* names /fs/read_buffer */
	char text[1024];
	assert_non_null(strstr(sbxc_err_text(&e, -EILSEQ, text, sizeof text), "not_text"));
	/* the 507s a tenant can cause itself keep their meaning (issue 26) */
	assert_int_equal(sbxc_errno_of_code("quota_exceeded"), -EDQUOT);
	assert_int_equal(sbxc_errno_of_code("store_budget_exceeded"), -EDQUOT);
	assert_int_equal(sbxc_errno_of_code("insufficient_storage"), -ENOSPC);
	/* a token for another tenant's name: 403 before anything runs */
	struct sbxc *wrong = ct_client(srv.base, tok, &(struct sbxc_opts){.tenant = "globex"});
	bool yes;
	assert_int_equal(sbxc_exists(wrong, &c, "x", &yes, &e), -EPERM);
	assert_int_equal(e.status, 403);
	assert_string_equal(e.code, "forbidden");
	sbxc_free(&wrong);
	struct sbxc *bad = ct_client(srv.base, "not-a-jwt", NULL);
	assert_int_equal(sbxc_exists(bad, &c, "x", &yes, &e), -EACCES);
	assert_string_equal(e.code, "unauthorized");
	sbxc_free(&bad);
	/* bad handles are refused up front */
	struct sbxc *none = NULL;
	assert_int_equal(sbxc_new(&none, &(struct sbxc_opts){.base_url = "ftp://x", .token = "t"}), -EINVAL);
	assert_null(none);
	assert_int_equal(sbxc_exists(h, &(struct sbxc_call){.session = "a\r\nX: y"}, "x", &yes, &e), -EINVAL);
	sbxc_free(&h);
}

static void test_connection_refused(void **state)
{
	(void)state;
	/* a port nobody listens on */
	char base[64];
	snprintf(base, sizeof base, "http://127.0.0.1:%d", it_free_port());
	struct sbxc *h = ct_client(base, tok, &(struct sbxc_opts){.max_retries = 2, .max_backoff_ms = 100});
	struct sbxc_err e;
	bool yes;
	int64_t t0 = ct_now_ms();
	assert_int_equal(sbxc_exists(h, NULL, "x", &yes, &e), -ECONNREFUSED);
	assert_int_equal(e.attempts, 3); /* nothing was sent: retried */
	assert_int_equal(e.status, 0);
	assert_true(ct_now_ms() - t0 < 5000);
	sbxc_free(&h);
}

/* ---- exec ---- */

static void test_exec_fields(void **state)
{
	(void)state;
	struct sbxc *h = acme();
	struct sbxc_call c = {.session = "exec"};
	struct sbxc_err e;
	struct sbxc_result r;
	assert_int_equal(sbxc_mkdir(h, &c, "sub", true, &e), 0);
	const struct sbxc_env env[] = {{"GREETING", "hi"}, {"WHO", "there"}};
	struct sbxc_exec_req q = {.command = "echo \"$GREETING $WHO\"; pwd; cat; echo oops >&2; exit 3",
				  .cwd = "sub",
				  .env = env,
				  .nenv = 2,
				  .stdin_data = "from stdin\n",
				  .stdin_len = 11,
				  .timeout_s = 30};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), 0);
	assert_int_equal(r.exit_code, 3);
	assert_non_null(strstr(r.stdout_text, "hi there\n"));
	assert_non_null(strstr(r.stdout_text, "/sub\nfrom stdin\n"));
	assert_string_equal(r.stderr_text, "oops\n");
	assert_false(r.timed_out || r.cancelled || r.truncated);
	assert_int_equal(r.id[0], 'c'); /* the library's id */
	assert_true(r.started_at[0] && r.finished_at[0]);
	sbxc_result_clear(&r);
	/* timeouts are results; so is an idle timeout */
	q = (struct sbxc_exec_req){.command = "echo before; sleep 30", .timeout_s = 1};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), 0);
	assert_true(r.timed_out);
	assert_int_equal(r.exit_code, 124);
	assert_string_equal(r.stdout_text, "before\n");
	sbxc_result_clear(&r);
	q = (struct sbxc_exec_req){.command = "sleep 30", .timeout_s = 20, .idle_timeout_s = 1};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), 0);
	assert_true(r.timed_out && r.idle);
	sbxc_result_clear(&r);
	/* bounded output */
	q = (struct sbxc_exec_req){.command = "head -c 100000 /dev/zero | tr '\\0' a",
				   .max_output_bytes = 1000};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), 0);
	assert_true(r.truncated);
	assert_int_equal(r.stdout_bytes, 100000);
	assert_non_null(r.stdout_spill);
	assert_true(strlen(r.stdout_text) < 2000);
	sbxc_result_clear(&r);
	/* a bad cwd is the request's fault */
	q = (struct sbxc_exec_req){.command = "true", .cwd = "no/such/dir"};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), -ENOENT);
	assert_int_equal(e.status, 404);
	sbxc_free(&h);
}

static void test_exec_idempotent_id(void **state)
{
	(void)state;
	struct sbxc *h = acme();
	struct sbxc_call c = {.session = "idem"};
	struct sbxc_err e;
	struct sbxc_result r1, r2;
	struct sbxc_exec_req q = {.command = "echo ran >> runs.txt; cat runs.txt | wc -l", .id = "idem-1"};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r1, &e), 0);
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r2, &e), 0);
	assert_string_equal(r1.id, "idem-1");
	assert_string_equal(r1.stdout_text, r2.stdout_text); /* the same exec, not a second run */
	assert_string_equal(r1.started_at, r2.started_at);
	sbxc_result_clear(&r1);
	sbxc_result_clear(&r2);
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(sbxc_read_file(h, &c, "runs.txt", &data, &len, &e), 0);
	assert_string_equal(data, "ran\n");
	free(data);
	q.command = "echo something else";
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r1, &e), -EBUSY);
	assert_string_equal(e.code, "conflict");
	q.id = "bad id!";
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r1, &e), -EINVAL);
	sbxc_free(&h);
}

static void test_exec_streamed(void **state)
{
	(void)state;
	struct sbxc *h = acme();
	struct sbxc_call c = {.session = "stream"};
	struct sbxc_err e;
	struct sbxc_result r;
	struct ct_collected k = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct sbxc_exec_req q = {
	    .command = "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.2; done; exit 5",
	    .id = "streamed-1"};
	assert_int_equal(sbxc_exec(h, &c, &q, ct_collect, ct_started, &k, &r, &e), 0);
	assert_int_equal(r.exit_code, 5);
	assert_string_equal(k.id, "streamed-1");
	assert_string_equal(k.out, "out1\nout2\nout3\n");
	assert_string_equal(k.err, "err1\nerr2\nerr3\n");
	assert_string_equal(r.stdout_text, k.out);
	sbxc_result_clear(&r);
	/* the record and the list */
	struct sbxc_exec_info x;
	assert_int_equal(sbxc_exec_get(h, &c, "streamed-1", &x, &e), 0);
	assert_string_equal(x.state, "exited");
	assert_true(x.has_result && x.result.exit_code == 5);
	assert_string_equal(x.session, "stream");
	sbxc_exec_info_clear(&x);
	struct sbxc_exec_info *v = NULL;
	size_t n = 0;
	assert_int_equal(sbxc_exec_list(h, &c, "exited", "stream", 10, &v, &n, &e), 0);
	assert_true(n >= 1);
	assert_string_equal(v[0].id, "streamed-1");
	sbxc_exec_infos_free(v, n);
	assert_int_equal(sbxc_exec_get(h, &c, "no-such-exec", &x, &e), -ENOENT);
	/* an exec's events after it ended: start, then exit, then the end */
	sbxc_free(&h);
}

static void test_exec_cancel_route(void **state)
{
	(void)state;
	struct ct_exec_thread t = {.h = acme(),
				   .req = {.command = "echo started; sleep 60", .id = "cancel-route-1"},
				   .k = {.lock = PTHREAD_MUTEX_INITIALIZER},
				   .streamed = true};
	pthread_t th;
	pthread_create(&th, NULL, ct_exec_main, &t);
	/* running, and past its echo */
	for (int64_t end = ct_now_ms() + 20000;; usleep(10000)) {
		pthread_mutex_lock(&t.k.lock);
		bool out = t.k.nout > 0;
		pthread_mutex_unlock(&t.k.lock);
		if (out)
			break;
		assert_true(ct_now_ms() < end);
	}
	struct sbxc_err e;
	assert_int_equal(sbxc_exec_cancel(t.h, NULL, "cancel-route-1", &e), 0);
	pthread_join(th, NULL);
	assert_int_equal(t.rc, 0);
	assert_true(t.res.cancelled);
	assert_int_equal(t.res.exit_code, 128 + 15);
	assert_string_equal(t.k.out, "started\n");
	sbxc_result_clear(&t.res);
	ct_wait_state(t.h, "cancel-route-1", "cancelled");
	assert_int_equal(sbxc_exec_cancel(t.h, NULL, "cancel-route-1", &e), -EBUSY);
	assert_int_equal(sbxc_exec_cancel(t.h, NULL, "never-was", &e), -ENOENT);
	sbxc_free(&t.h);
}

/* A cancel object fired from another thread ends the call at once, and
 * the closed connection cancels the command on the server. */
static void test_cancel_object(void **state)
{
	(void)state;
	struct ct_exec_thread t = {.h = acme(), .req = {.command = "sleep 60", .id = "cancel-obj-1"}};
	sbxc_cancel_new(&t.call.cancel);
	pthread_t th;
	pthread_create(&th, NULL, ct_exec_main, &t);
	ct_wait_running(t.h, "cancel-obj-1");
	int64_t t0 = ct_now_ms();
	sbxc_cancel_fire(t.call.cancel);
	pthread_join(th, NULL);
	assert_int_equal(t.rc, -ECANCELED);
	assert_true(ct_now_ms() - t0 < 2000);
	ct_wait_state(t.h, "cancel-obj-1", "cancelled");
	/* a fired object stays fired: the next call returns at once */
	bool yes;
	struct sbxc_err e;
	assert_int_equal(sbxc_exists(t.h, &t.call, "x", &yes, &e), -ECANCELED);
	sbxc_cancel_free(&t.call.cancel);
	/* a deadline is the same: the call ends, the command is cancelled */
	t.call = (struct sbxc_call){.timeout_ms = 1500};
	t.req.id = "deadline-1";
	t0 = ct_now_ms();
	ct_exec_main(&t);
	assert_int_equal(t.rc, -ETIMEDOUT);
	assert_true(ct_now_ms() - t0 < 5000);
	ct_wait_state(t.h, "deadline-1", "cancelled");
	sbxc_free(&t.h);
}

/* ---- events ---- */

struct seen {
	pthread_mutex_t lock;
	char names[64][16];
	long long ids[4096];
	char exits[64][72], starts[64][72];
	size_t n, nexit, nstart, nnames;
	bool backwards, duplicate;
};

static int on_event(void *arg, const struct sbxc_event *ev)
{
	struct seen *s = arg;
	pthread_mutex_lock(&s->lock);
	if (s->nnames < 64)
		snprintf(s->names[s->nnames++], 16, "%s", ev->name);
	if (ev->id && s->n < 4096) {
		long long id = strtoll(ev->id, NULL, 10);
		if (s->n > 0 && id <= s->ids[s->n - 1])
			s->backwards = true;
		s->ids[s->n++] = id;
	}
	json_t *d = json_loadb(ev->data, ev->data_len, 0, NULL);
	const char *exec = json_string_value(json_object_get(d, "id"));
	if (exec && strncmp(exec, "feed-", 5) == 0) {
		bool is_exit = strcmp(ev->name, "exit") == 0, is_start = strcmp(ev->name, "start") == 0;
		char(*list)[72] = is_exit ? s->exits : s->starts;
		size_t *n = is_exit ? &s->nexit : &s->nstart;
		for (size_t i = 0; (is_exit || is_start) && i < *n; i++)
			if (strcmp(list[i], exec) == 0)
				s->duplicate = true;
		if ((is_exit || is_start) && *n < 64)
			snprintf(list[(*n)++], 72, "%s", exec);
	}
	json_decref(d);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static void test_follow_exec_events(void **state)
{
	(void)state;
	struct sbxc *h = acme();
	struct sbxc_err e;
	struct sbxc_result r;
	struct sbxc_exec_req q = {.command = "echo one; echo two", .id = "feed-done-1"};
	assert_int_equal(sbxc_exec(h, NULL, &q, NULL, NULL, NULL, &r, &e), 0);
	sbxc_result_clear(&r);
	struct seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct sbxc_follow f = {.exec_id = "feed-done-1"};
	assert_int_equal(sbxc_follow(h, &(struct sbxc_call){.timeout_ms = 10000}, &f, on_event, &s, &e), 0);
	assert_true(s.nnames >= 2);
	assert_string_equal(s.names[0], "start");
	assert_string_equal(s.names[s.nnames - 1], "exit");
	f.exec_id = "no-such-exec";
	assert_int_equal(sbxc_follow(h, NULL, &f, on_event, &s, &e), -ENOENT);
	sbxc_free(&h);
}

struct follower {
	struct sbxc *h;
	struct sbxc_call call;
	struct seen *s;
	struct sbxc_err err;
	int rc;
};

static void *follow_main(void *arg)
{
	struct follower *w = arg;
	struct sbxc_follow f = {.max_backoff_ms = 200};
	w->rc = sbxc_follow(w->h, &w->call, &f, on_event, w->s, &w->err);
	return NULL;
}

static size_t count_exits(struct seen *s)
{
	pthread_mutex_lock(&s->lock);
	size_t n = s->nexit;
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* The tenant feed through a relay that cuts every connection after
 * 1500 bytes: the follower reconnects with Last-Event-ID each time, and
 * sees every start and exit of 12 execs exactly once, in order. Stopped
 * from another thread with its cancel object. */
static void test_follow_reconnects(void **state)
{
	(void)state;
	struct relay rl = {.cut_after = 1500};
	assert_int_equal(relay_start(&rl, srv.port), 0);
	struct seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct follower w = {.h = ct_client(rl.base, tok, NULL), .s = &s};
	sbxc_cancel_new(&w.call.cancel);
	pthread_t th;
	pthread_create(&th, NULL, follow_main, &w);
	struct sbxc *h = acme();
	struct sbxc_err e;
	struct sbxc_result r;
	/* Until the follower is known to be subscribed, warm-up execs. */
	int64_t end = ct_now_ms() + 20000;
	for (int i = 0; count_exits(&s) == 0; i++) {
		char id[32];
		snprintf(id, sizeof id, "feed-warm-%d", i);
		struct sbxc_exec_req q = {.command = "true", .id = id};
		assert_int_equal(sbxc_exec(h, NULL, &q, NULL, NULL, NULL, &r, &e), 0);
		sbxc_result_clear(&r);
		for (int64_t t = ct_now_ms() + 500; count_exits(&s) == 0 && ct_now_ms() < t;)
			usleep(10000);
		assert_true(ct_now_ms() < end);
	}
	size_t base = count_exits(&s);
	for (int i = 0; i < 12; i++) {
		char id[32];
		snprintf(id, sizeof id, "feed-run-%d", i);
		struct sbxc_exec_req q = {.command = "echo hello", .id = id};
		assert_int_equal(sbxc_exec(h, NULL, &q, NULL, NULL, NULL, &r, &e), 0);
		sbxc_result_clear(&r);
	}
	while (count_exits(&s) < base + 12) {
		assert_true(ct_now_ms() < end + 20000);
		usleep(10000);
	}
	sbxc_cancel_fire(w.call.cancel);
	pthread_join(th, NULL);
	assert_int_equal(w.rc, -ECANCELED);
	assert_true(atomic_load(&rl.cuts) >= 2); /* it did reconnect, more than once */
	assert_false(s.backwards);
	assert_false(s.duplicate);
	assert_int_equal(s.nexit, base + 12);
	for (int i = 0; i < 12; i++) {
		char id[32];
		snprintf(id, sizeof id, "feed-run-%d", i);
		bool started = false, exited = false;
		for (size_t k = 0; k < s.nstart; k++)
			started |= strcmp(s.starts[k], id) == 0;
		for (size_t k = 0; k < s.nexit; k++)
			exited |= strcmp(s.exits[k], id) == 0;
		assert_true(started && exited);
	}
	relay_stop(&rl);
	sbxc_cancel_free(&w.call.cancel);
	sbxc_free(&w.h);
	sbxc_free(&h);
}

/* ---- audit ---- */

static void test_audit_paging(void **state)
{
	(void)state;
	struct sbxc *h = ct_client(srv.base, audit_tok, NULL);
	struct sbxc_err e;
	struct sbxc_audit_query q = {.limit = 3};
	char *cursor = NULL;
	long long last = 0;
	size_t total = 0;
	int pages = 0;
	do {
		struct sbxc_audit_record *v = NULL;
		size_t n = 0;
		char *next = NULL;
		q.after = cursor;
		assert_int_equal(sbxc_audit_page(h, NULL, &q, &v, &n, &next, &e), 0);
		assert_true(n <= 3);
		for (size_t i = 0; i < n; i++) {
			assert_true(v[i].id > last); /* oldest first, no repeats across pages */
			last = v[i].id;
			assert_string_equal(v[i].tenant, "acme");
			assert_non_null(v[i].route);
			assert_true(v[i].status >= 200);
		}
		total += n;
		sbxc_audit_free(v, n);
		free(cursor);
		cursor = next;
		pages++;
	} while (cursor && pages < 1000);
	assert_true(total >= 10 && pages >= 4);
	/* filters reach the server */
	struct sbxc_audit_record *v = NULL;
	size_t n = 0;
	char *next = NULL;
	q = (struct sbxc_audit_query){.route = "/exec", .outcome = "ok", .limit = 1000};
	assert_int_equal(sbxc_audit_page(h, NULL, &q, &v, &n, &next, &e), 0);
	assert_true(n >= 1);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(v[i].route, "/exec");
		assert_string_equal(v[i].outcome, "ok");
	}
	sbxc_audit_free(v, n);
	free(next);
	/* the exec token may not read the audit */
	struct sbxc *x = acme();
	assert_int_equal(sbxc_audit_page(x, NULL, NULL, &v, &n, &next, &e), -EACCES);
	assert_string_equal(e.code, "insufficient_scope");
	sbxc_free(&x);
	sbxc_free(&h);
}

/* ---- retries ---- */

/* A balancer in front answers 503 with Retry-After: 1 first; the library
 * waits and retries, and the exec runs once (its id is the idempotency
 * key). Without retries the caller sees the 503 with its hint. */
static void test_retry_503(void **state)
{
	(void)state;
	struct relay rl = {.answer_503 = 1};
	assert_int_equal(relay_start(&rl, srv.port), 0);
	struct sbxc *h = ct_client(rl.base, tok, NULL);
	struct sbxc_call c = {.session = "retry503"};
	struct sbxc_err e;
	struct sbxc_result r;
	int64_t t0 = ct_now_ms();
	struct sbxc_exec_req q = {.command = "echo x >> ran.txt"};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), 0);
	assert_int_equal(e.attempts, 2);
	assert_true(ct_now_ms() - t0 >= 900); /* Retry-After: 1 was honoured */
	sbxc_result_clear(&r);
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(sbxc_read_file(h, &c, "ran.txt", &data, &len, &e), 0);
	assert_string_equal(data, "x\n");
	free(data);
	relay_stop(&rl);
	sbxc_free(&h);
	/* the headers a balancer routes by: X-Tenant-Id from the token's
	 * claim (no tenant option given) and the session */
	assert_non_null(strstr(rl.upstream, "\r\nX-Tenant-Id: acme\r\n"));
	assert_non_null(strstr(rl.upstream, "\r\nX-Session-Key: retry503\r\n"));
	assert_true(e.node[0] != '\0'); /* Sandboxd-Node: who answered */

	struct relay r2 = {.answer_503 = 1};
	assert_int_equal(relay_start(&r2, srv.port), 0);
	h = ct_client(r2.base, tok, NULL);
	bool yes;
	c.max_retries = -1; /* this call only: a front server passing the 503 on */
	assert_int_equal(sbxc_exists(h, &c, "ran.txt", &yes, &e), -EHOSTDOWN);
	assert_int_equal(e.status, 503);
	assert_string_equal(e.code, "backend_unavailable");
	assert_int_equal(e.retry_after_s, 1);
	assert_true(e.retry_hint[0] != '\0');
	assert_int_equal(e.attempts, 1);
	relay_stop(&r2);
	sbxc_free(&h);
}

struct holder {
	struct sbxc *h;
	atomic_bool release;
	int rc;
};

/* Holds the download (and so the tenant's one transfer slot) open until
 * released. */
static int hold_sink(void *arg, const void *data, size_t len)
{
	(void)data;
	(void)len;
	struct holder *k = arg;
	for (int64_t end = ct_now_ms() + 30000; !atomic_load(&k->release) && ct_now_ms() < end;)
		usleep(5000);
	return 0;
}

static void *hold_main(void *arg)
{
	struct holder *k = arg;
	k->rc = sbxc_read_file_stream(k->h, NULL, "held.bin", 0, hold_sink, k, NULL, NULL);
	return NULL;
}

/* Whether the audit shows a refused (429) upload yet. */
static bool upload_refused(const char *audit)
{
	struct sbxc *a = ct_client(s2.base, audit, NULL);
	struct sbxc_audit_query q = {.route = "/fs/write_stream", .limit = 100};
	struct sbxc_audit_record *v = NULL;
	size_t n = 0;
	char *next = NULL;
	bool seen = false;
	if (sbxc_audit_page(a, NULL, &q, &v, &n, &next, NULL) == 0)
		for (size_t i = 0; i < n; i++)
			seen |= v[i].status == 429;
	sbxc_audit_free(v, n);
	free(next);
	sbxc_free(&a);
	return seen;
}

struct uploader {
	struct sbxc *h;
	const char *left;
	struct sbxc_upload res;
	struct sbxc_err err;
	int rc;
};

static void *upload_main(void *arg)
{
	struct uploader *u = arg;
	u->rc =
	    sbxc_write_file_stream(u->h, NULL, "after.txt", -1, ct_text_source, &u->left, &u->res, &u->err);
	return NULL;
}

/* The tenant's one transfer slot is held by a download: an upload is
 * refused with 429 before its body (Expect: 100-continue), waits, and is
 * retried whole once the slot is free (released when the audit shows the
 * refusal). */
static void upload_waits_for_a_transfer_slot(struct sbxc *h, const char *t2)
{
	char *audit = it_token(&s2, "acme", "audit:read");
	static char big[8 << 20];
	memset(big, 'z', sizeof big);
	assert_int_equal(sbxc_write_file(h, NULL, "held.bin", big, sizeof big, NULL, NULL), 0);
	struct holder k = {.h = ct_client(s2.base, t2, NULL)};
	atomic_init(&k.release, false);
	pthread_t hold, up;
	pthread_create(&hold, NULL, hold_main, &k);
	/* the download holds the slot once the server counts it */
	for (int64_t end = ct_now_ms() + 20000;;) {
		struct sbxc_transfer t;
		struct sbxc_err e;
		if (sbxc_transfer_mint(h, &(struct sbxc_call){.max_retries = -1}, "held.bin", false, 5, &t,
				       &e) == 0) {
			struct it_resp r;
			assert_int_equal(it_http(&s2, "GET", t.url, NULL, NULL, NULL, 0, &r), 0);
			bool busy = r.status == 429;
			it_resp_free(&r);
			if (busy)
				break;
		}
		assert_true(ct_now_ms() < end);
		usleep(20000);
	}
	const char *text = "uploaded after the wait\n";
	struct uploader u = {.h = h, .left = text};
	pthread_create(&up, NULL, upload_main, &u);
	for (int64_t end = ct_now_ms() + 20000; !upload_refused(audit); usleep(20000))
		assert_true(ct_now_ms() < end);
	atomic_store(&k.release, true);
	pthread_join(up, NULL);
	pthread_join(hold, NULL);
	assert_int_equal(k.rc, 0);
	assert_int_equal(u.rc, 0);
	assert_true(u.err.attempts >= 2);
	assert_int_equal(u.res.size, strlen(text));
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(sbxc_read_file(h, NULL, "after.txt", &data, &len, NULL), 0);
	assert_string_equal(data, text);
	free(data);
	sbxc_free(&k.h);
	free(audit);
}

/* A real 429: a tenant limited to one command at a time (and no server
 * admission queue). The second exec waits (Retry-After) until the first
 * is done; a deadline shorter than the wait gives the 429 back at once. */
static void test_retry_429(void **state)
{
	(void)state;
	const char *extra[] = {"--set", "tenant-max-execs=1",	  "--set", "tenant-exec-queue=0",
			       "--set", "tenant-max-transfers=1", NULL};
	assert_int_equal(it_start(&s2, extra), 0);
	char *t2 = it_token(&s2, "acme", NULL);
	struct ct_exec_thread t = {.h = ct_client(s2.base, t2, NULL),
				   .req = {.command = "sleep 2", .id = "busy-1"}};
	pthread_t th;
	pthread_create(&th, NULL, ct_exec_main, &t);
	ct_wait_running(t.h, "busy-1");
	struct sbxc *h = ct_client(s2.base, t2, NULL);
	struct sbxc_err e;
	struct sbxc_result r;
	struct sbxc_exec_req q = {.command = "echo second", .id = "second-1"};
	int rc = sbxc_exec(h, &(struct sbxc_call){.timeout_ms = 300}, &q, NULL, NULL, NULL, &r, &e);
	assert_int_equal(rc, -EAGAIN);
	assert_int_equal(e.status, 429);
	assert_string_equal(e.code, "too_many_requests");
	assert_true(e.retry_after_s >= 0);
	assert_int_equal(sbxc_exec(h, NULL, &q, NULL, NULL, NULL, &r, &e), 0);
	assert_true(e.attempts >= 2);
	assert_string_equal(r.stdout_text, "second\n");
	sbxc_result_clear(&r);
	pthread_join(th, NULL);
	assert_int_equal(t.rc, 0);
	sbxc_result_clear(&t.res);
	sbxc_free(&t.h);
	upload_waits_for_a_transfer_slot(h, t2);
	sbxc_free(&h);
	free(t2);
	it_stop(&s2, SIGTERM);
	it_cleanup(&s2);
}

/* ---- TLS ---- */

static void test_tls_verification(void **state)
{
	(void)state;
	char dir[] = "/tmp/sbxc-tls-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char *cmd =
	    xasprintf("openssl req -x509 -newkey rsa:2048 -nodes -keyout %s/key.pem -out %s/cert.pem "
		      "-days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
		      dir, dir);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	char *cert = xasprintf("%s/cert.pem", dir), *key = xasprintf("%s/key.pem", dir);
	const char *extra[] = {"--tls-cert", cert, "--tls-key", key, NULL};
	assert_int_equal(it_start(&s2, extra), 0);
	char *t2 = it_token(&s2, "acme", NULL);
	struct sbxc_err e;
	bool yes;
	/* verified by default: a self-signed server is refused */
	struct sbxc *h = ct_client(s2.base, t2, &(struct sbxc_opts){.max_retries = -1});
	assert_int_equal(sbxc_exists(h, NULL, "x", &yes, &e), -EPROTO);
	assert_int_equal(e.status, 0);
	sbxc_free(&h);
	h = ct_client(s2.base, t2, &(struct sbxc_opts){.ca_file = cert});
	assert_int_equal(sbxc_write_file(h, NULL, "tls.txt", "secure", 6, NULL, &e), 0);
	assert_int_equal(sbxc_exists(h, NULL, "tls.txt", &yes, &e), 0);
	assert_true(yes);
	sbxc_free(&h);
	h = ct_client(s2.base, t2, &(struct sbxc_opts){.insecure = true});
	assert_int_equal(sbxc_exists(h, NULL, "tls.txt", &yes, &e), 0);
	sbxc_free(&h);
	free(t2);
	it_stop(&s2, SIGTERM);
	it_cleanup(&s2);
	cmd = xasprintf("rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	free(cert);
	free(key);
}

/* ---- one handle, many threads ---- */

struct worker {
	struct sbxc *h;
	int n, failures;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char session[32], body[64];
	snprintf(session, sizeof session, "thread-%d", w->n);
	struct sbxc_call c = {.session = session};
	for (int i = 0; i < 20; i++) {
		int len = snprintf(body, sizeof body, "thread %d round %d", w->n, i);
		char *data = NULL;
		size_t got = 0;
		if (sbxc_write_file(w->h, &c, "t.txt", body, (size_t)len, NULL, NULL) != 0 ||
		    sbxc_read_file(w->h, &c, "t.txt", &data, &got, NULL) != 0 || got != (size_t)len ||
		    memcmp(data, body, got) != 0)
			w->failures++;
		free(data);
	}
	return NULL;
}

static void test_threads_share_a_handle(void **state)
{
	(void)state;
	struct sbxc *h = acme();
	struct worker w[6];
	pthread_t th[6];
	for (int i = 0; i < 6; i++) {
		w[i] = (struct worker){.h = h, .n = i};
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < 6; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].failures, 0);
	}
	sbxc_free(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_files_roundtrip),   cmocka_unit_test(test_files_dirs_and_moves),
	    cmocka_unit_test(test_readdir_pages),     cmocka_unit_test(test_sessions_and_ready),
	    cmocka_unit_test(test_wire_errors),	      cmocka_unit_test(test_connection_refused),
	    cmocka_unit_test(test_exec_fields),	      cmocka_unit_test(test_exec_idempotent_id),
	    cmocka_unit_test(test_exec_streamed),     cmocka_unit_test(test_exec_cancel_route),
	    cmocka_unit_test(test_cancel_object),     cmocka_unit_test(test_follow_exec_events),
	    cmocka_unit_test(test_follow_reconnects), cmocka_unit_test(test_audit_paging),
	    cmocka_unit_test(test_retry_503),	      cmocka_unit_test(test_retry_429),
	    cmocka_unit_test(test_tls_verification),  cmocka_unit_test(test_threads_share_a_handle),
	};
	return cmocka_run_group_tests_name("libsandboxd", tests, setup, teardown);
}
