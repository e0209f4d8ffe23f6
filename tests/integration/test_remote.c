/* Backend remote (issue 18): tenant acme of a front server has its files
 * and commands served by a back server through libsandboxd. Two real
 * servers on loopback: what the front answers equals what the back
 * answers for the same requests (files, errors, exec results, timeouts,
 * cancel, events), the front audits its own requests, and a back that is
 * killed mid-command or down gives 503 backend_unavailable with
 * Retry-After promptly; the back restarted, the next call works; a
 * back's egress_denied (from a stand-in back) reaches the front's client. */
#include <setjmp.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ftw.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

static struct it_server front, back;
static char *tok_f, *tok_b, *tok_admin, *tok_globex_f, *tok_audit, *token_path, *tok_globex_b;

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", "backends=bwrap,remote", NULL};
	if (it_start(&back, NULL) < 0 || it_start(&front, extra) < 0)
		return -1;
	back.keep_port = true; /* the front's policy names its address */
	tok_f = it_token(&front, "acme", NULL);
	tok_b = it_token(&back, "acme", NULL);
	tok_globex_f = it_token(&front, "globex", NULL);
	tok_globex_b = it_token(&back, "globex", NULL);
	tok_admin = it_token(&front, "ops", "admin");
	tok_audit = it_token(&front, "acme", "audit:read");
	if (!tok_audit || !tok_f || !tok_b || !tok_admin || !tok_globex_f || !tok_globex_b)
		return -1;
	/* The back's token for the front, in a file (the policy holds its path). */
	token_path = xasprintf("%s/back-token", front.dir);
	if (it_write_file(token_path, tok_b, strlen(tok_b)) < 0 || chmod(token_path, 0600) < 0)
		return -1;
	char *body = xasprintf("{\"backend\":\"remote\",\"remote_url\":\"%s\",\"remote_token_file\":\"%s\"}",
			       back.base, token_path);
	long st = pol_put(&front, tok_admin, "acme", body, NULL);
	free(body);
	return st == 200 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish(&front);
	if (it_finish(&back) < 0)
		rc = -1;
	free(tok_f);
	free(tok_b);
	free(tok_admin);
	free(tok_globex_f);
	free(tok_globex_b);
	free(tok_audit);
	free(token_path);
	return rc;
}

/* One request to a server as acme; the response (free it). */
static struct it_resp req(struct it_server *s, const char *method, const char *path, const char *body)
{
	struct it_resp r;
	const char *const hdrs[] = {"Content-Type: application/json", "X-Session-Key: remote-suite", NULL};
	const char *tok = s == &front ? tok_f : tok_b;
	assert_int_equal(it_http(s, method, path, tok, hdrs, body, body ? strlen(body) : 0, &r), 0);
	return r;
}

/* Whether a file called name lies anywhere below dir (the front's own
 * disk: a remote tenant's files must never land there). */
static const char *nftw_name;
static bool nftw_found;
static int nftw_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	if (strcmp(path + ftw->base, nftw_name) == 0)
		nftw_found = true;
	return 0;
}

static bool found_under(const char *dir, const char *name)
{
	nftw_name = name;
	nftw_found = false;
	nftw(dir, nftw_one, 16, FTW_PHYS);
	return nftw_found;
}

/* The same request to the front and to the back: same status, same body
 * (JSON compared as values), same Content-Range. */
static void same(const char *method, const char *path, const char *body, long status)
{
	struct it_resp f = req(&front, method, path, body);
	struct it_resp b = req(&back, method, path, body);
	if (f.status != status || b.status != status) {
		it_show(&f);
		it_show(&b);
	}
	assert_int_equal(f.status, status);
	assert_int_equal(b.status, status);
	json_t *jf = it_json(&f), *jb = it_json(&b);
	if (jf || jb) {
		assert_non_null(jf);
		assert_non_null(jb);
		if (!json_equal(jf, jb)) {
			it_show(&f);
			it_show(&b);
		}
		assert_true(json_equal(jf, jb));
	} else {
		assert_int_equal(f.len, b.len);
		assert_memory_equal(f.body, b.body, f.len);
	}
	char *cf = it_header(&f, "Content-Range"), *cb = it_header(&b, "Content-Range");
	assert_true((!cf && !cb) || (cf && cb && strcmp(cf, cb) == 0));
	free(cf);
	free(cb);
	json_decref(jf);
	json_decref(jb);
	it_resp_free(&f);
	it_resp_free(&b);
}

/* A request to the front only: its status, *out the JSON body. */
static long front_json(const char *method, const char *path, const char *body, json_t **out)
{
	struct it_resp r = req(&front, method, path, body);
	long st = r.status;
	if (out)
		*out = it_json(&r);
	it_resp_free(&r);
	return st;
}

static void test_files_equal(void **state)
{
	(void)state;
	/* Written through the front, on the back. */
	struct it_resp w = req(&front, "PUT", "/fs/write?path=docs/a.txt", "hello, back\n");
	it_expect_status(&w, 200);
	it_resp_free(&w);
	struct it_resp r = req(&back, "GET", "/fs/read?path=docs/a.txt", NULL);
	it_expect_status(&r, 200);
	assert_string_equal(r.body, "hello, back\n");
	it_resp_free(&r);

	same("GET", "/fs/read?path=docs/a.txt", NULL, 200);
	same("GET", "/fs/read_buffer?path=docs/a.txt", NULL, 200);
	same("GET", "/fs/stat?path=docs/a.txt", NULL, 200);
	same("GET", "/fs/stat?path=docs", NULL, 200);
	same("GET", "/fs/exists?path=docs/a.txt", NULL, 200);
	same("GET", "/fs/exists?path=docs/none", NULL, 200);
	same("POST", "/fs/mkdir", "{\"path\":\"docs/sub/deep\",\"recursive\":true}", 201);
	same("GET", "/fs/readdir?path=docs", NULL, 200);
	same("GET", "/fs/readdir?path=docs&detail=true", NULL, 200);
	same("GET", "/fs/readdir?path=docs&limit=1", NULL, 200);
	/* Errors: the back's code and message. */
	same("GET", "/fs/read?path=docs/none", NULL, 404);
	same("GET", "/fs/read?path=docs", NULL, 409);
	same("POST", "/fs/mkdir", "{\"path\":\"docs/x/y\"}", 404);
	same("GET", "/fs/read?path=../../etc/passwd", NULL, 404); /* clamped at the root, as locally */
	same("POST", "/fs/move", "{\"from\":\"docs/none\",\"to\":\"docs/b.txt\"}", 404);
	same("POST", "/fs/rm", "{\"path\":\"docs/sub\"}", 409);
	same("POST", "/fs/rm", "{\"path\":\"docs/none\",\"force\":true}", 200);
	/* Changes through the front, seen on the back. */
	assert_int_equal(
	    front_json("POST", "/fs/move", "{\"from\":\"docs/a.txt\",\"to\":\"docs/b.txt\"}", NULL), 200);
	same("GET", "/fs/exists?path=docs/a.txt", NULL, 200);
	same("GET", "/fs/read?path=docs/b.txt", NULL, 200);
	assert_int_equal(front_json("POST", "/fs/rm", "{\"path\":\"docs/sub\",\"recursive\":true}", NULL),
			 200);
	same("GET", "/fs/readdir?path=docs", NULL, 200);
}

static void test_ranges_equal(void **state)
{
	(void)state;
	struct it_resp w = req(&front, "PUT", "/fs/write?path=r.bin", "0123456789");
	it_expect_status(&w, 200);
	it_resp_free(&w);
	const char *ranges[] = {"Range: bytes=2-5", "Range: bytes=-3", "Range: bytes=7-"};
	for (size_t i = 0; i < 3; i++) {
		const char *const hdrs[] = {ranges[i], "X-Session-Key: remote-suite", NULL};
		struct it_resp f, b;
		assert_int_equal(
		    it_http(&front, "GET", "/fs/read_buffer?path=r.bin", tok_f, hdrs, NULL, 0, &f), 0);
		assert_int_equal(
		    it_http(&back, "GET", "/fs/read_buffer?path=r.bin", tok_b, hdrs, NULL, 0, &b), 0);
		it_expect_status(&f, 206);
		it_expect_status(&b, 206);
		assert_int_equal(f.len, b.len);
		assert_memory_equal(f.body, b.body, f.len);
		char *cf = it_header(&f, "Content-Range"), *cb = it_header(&b, "Content-Range");
		assert_non_null(cf);
		assert_string_equal(cf, cb);
		free(cf);
		free(cb);
		it_resp_free(&f);
		it_resp_free(&b);
	}
	const char *const bad[] = {"Range: bytes=20-", "X-Session-Key: remote-suite", NULL};
	struct it_resp f;
	assert_int_equal(it_http(&front, "GET", "/fs/read_buffer?path=r.bin", tok_f, bad, NULL, 0, &f), 0);
	it_expect_error(&f, 416, "range_not_satisfiable");
	it_resp_free(&f);
}

/* The front's ShellResult and the back's record of the same exec agree. */
static json_t *exec_front(const char *body, long status)
{
	json_t *res = NULL;
	long st = front_json("POST", "/exec", body, &res);
	if (st != status)
		fprintf(stderr, "POST /exec: %ld %s\n", st, res ? json_dumps(res, 0) : "");
	assert_int_equal(st, status);
	return res;
}

static void assert_back_agrees(json_t *res)
{
	char path[128];
	snprintf(path, sizeof path, "/exec/%s", jstr(res, "id"));
	json_t *v = NULL;
	struct it_resp r = req(&back, "GET", path, NULL);
	it_expect_status(&r, 200);
	v = it_json(&r);
	it_resp_free(&r);
	json_t *br = json_object_get(v, "result");
	const char *keys[] = {"exit_code", "stdout",	   "stderr",	   "timed_out",	   "cancelled",
			      "truncated", "stdout_bytes", "stderr_bytes", "started_at",   "finished_at",
			      "idle",	   "duration_ms",  "stdout_spill", "stderr_spill", "id"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		if (!json_equal(json_object_get(res, keys[i]), json_object_get(br, keys[i])))
			fprintf(stderr, "%s differs: front %s back %s\n", keys[i],
				json_dumps(res, JSON_ENCODE_ANY), json_dumps(br, JSON_ENCODE_ANY));
		assert_true(json_equal(json_object_get(res, keys[i]), json_object_get(br, keys[i])));
	}
	json_decref(v);
}

static void test_exec_equal(void **state)
{
	(void)state;
	json_t *res = exec_front("{\"command\":\"echo out; echo err >&2; cat; pwd; echo $GREETING; exit 3\","
				 "\"stdin\":\"in\\n\",\"env\":{\"GREETING\":\"hi\"},\"timeout_s\":30}",
				 200);
	assert_int_equal(jint(res, "exit_code"), 3);
	assert_string_equal(jstr(res, "stderr"), "err\n");
	assert_non_null(strstr(jstr(res, "stdout"), "out\nin\n"));
	assert_non_null(strstr(jstr(res, "stdout"), "\nhi\n"));
	assert_back_agrees(res);
	json_decref(res);

	res = exec_front("{\"command\":\"sleep 20\",\"timeout_s\":1}", 200);
	assert_true(jtrue(res, "timed_out"));
	assert_back_agrees(res);
	json_decref(res);

	res = exec_front("{\"command\":\"head -c 5000 /dev/zero | tr '\\\\0' x\",\"max_output_bytes\":256}",
			 200);
	assert_true(jtrue(res, "truncated"));
	assert_int_equal(jint(res, "stdout_bytes"), 5000);
	assert_back_agrees(res);
	json_decref(res);

	/* The back refuses a cwd that is not there: so does the front, in its
	 * words (the front sent the path resolved: absolute). */
	struct it_resp nf = req(&front, "POST", "/exec", "{\"command\":\"true\",\"cwd\":\"no/such/dir\"}");
	it_expect_error(&nf, 404, "not_found");
	assert_non_null(strstr(nf.body, "/no/such/dir is not a directory in the workspace"));
	it_resp_free(&nf);
	/* What needs this server's workspace is refused, not done wrongly. */
	res = exec_front("{\"command\":\"true\",\"track_changes\":true}", 403);
	json_decref(res);
	/* Every route flagged as needing the workspace here, refused in one
	 * place before its handler (and before any body is read), naming the
	 * route and where the tenant's files are. */
	static const char *const local_only[][3] = {
	    {"GET", "/sessions", NULL},
	    {"DELETE", "/session", NULL},
	    {"POST", "/code", "{\"language\":\"python\",\"code\":\"print(1)\"}"},
	    {"POST", "/fs/transfers", "{\"path\":\"a\",\"direction\":\"download\"}"},
	    {"GET", "/fs/read_stream?path=a", NULL},
	    {"PUT", "/fs/write_stream?path=a", "bytes"},
	};
	/* The same routes' code reached inside POST /mcp: its tool is refused
	 * alike (a tool error), and nothing is written here meanwhile. */
	struct it_resp m = req(&front, "POST", "/mcp",
			       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
			       "{\"name\":\"run_code\",\"arguments\":{\"language\":\"python\","
			       "\"code\":\"print(1)\",\"files\":[{\"path\":\"mcp-in.txt\","
			       "\"content\":\"x\"}]}}}");
	assert_int_equal(m.status, 200);
	assert_non_null(strstr(m.body, "\"isError\":true"));
	assert_non_null(strstr(m.body, "is not available for tenant"));
	it_resp_free(&m);
	char *tenants = xasprintf("%s/tenants", front.dir);
	assert_false(found_under(tenants, "mcp-in.txt"));
	free(tenants);
	for (size_t i = 0; i < sizeof local_only / sizeof local_only[0]; i++) {
		struct it_resp r = req(&front, local_only[i][0], local_only[i][1], local_only[i][2]);
		it_expect_error(&r, 403, "forbidden");
		assert_non_null(strstr(r.body, "backend remote"));
		assert_non_null(strstr(r.body, local_only[i][0]));
		it_resp_free(&r);
	}
	/* The front's exec record and its audit. */
	json_t *list = NULL;
	assert_int_equal(front_json("GET", "/execs?limit=5", NULL, &list), 200);
	assert_true(json_array_size(json_object_get(list, "execs")) >= 3);
	json_decref(list);
	struct it_resp a;
	assert_int_equal(it_http(&front, "GET", "/audit?route=/exec&limit=50", tok_audit, NULL, NULL, 0, &a),
			 0);
	it_expect_status(&a, 200);
	assert_non_null(strstr(a.body, "\"exit_code\":3"));
	it_resp_free(&a);
}

static void test_cancel_and_events(void **state)
{
	(void)state;
	json_t *v = exec_front("{\"command\":\"echo started; sleep 30\",\"background\":true}", 202);
	char id[80];
	snprintf(id, sizeof id, "%s", jstr(v, "id"));
	json_decref(v);
	/* Its output reaches the front (progress) and the back runs it. */
	char path[160];
	snprintf(path, sizeof path, "/exec/%s", id);
	long until = it_now_ms() + 15000;
	bool seen = false;
	while (!seen && it_now_ms() < until) {
		json_t *x = NULL;
		const char *tail = NULL;
		if (front_json("GET", path, NULL, &x) == 200)
			tail = jstr(json_object_get(x, "progress"), "tail");
		seen = tail && strstr(tail, "started");
		json_decref(x);
		if (!seen)
			usleep(20000);
	}
	assert_true(seen);
	snprintf(path, sizeof path, "/exec/%s/cancel", id);
	assert_int_equal(front_json("POST", path, NULL, NULL), 202);
	json_t *done = ex_wait_state(&front, tok_f, id, "cancelled", 15000);
	assert_non_null(done);
	assert_true(jtrue(json_object_get(done, "result"), "cancelled"));
	json_decref(done);
	done = ex_wait_state(&back, tok_b, id, "cancelled", 15000);
	assert_non_null(done);
	json_decref(done);
	/* Events, followed on the front: the exec's stream ends with exit. */
	snprintf(path, sizeof path, "/exec/%s/events", id);
	struct it_resp e = req(&front, "GET", path, NULL);
	it_expect_status(&e, 200);
	assert_non_null(strstr(e.body, "event: exit"));
	it_resp_free(&e);
	/* A streamed exec: start, output and exit as events. */
	struct it_resp s = req(&front, "POST", "/exec", "{\"command\":\"echo live\",\"stream\":true}");
	it_expect_status(&s, 200);
	assert_non_null(strstr(s.body, "event: start"));
	assert_non_null(strstr(s.body, "event: output"));
	assert_non_null(strstr(s.body, "live"));
	assert_non_null(strstr(s.body, "event: exit"));
	it_resp_free(&s);
}

/* The back's 429 and its Retry-After reach the front's client as they are. */
static void test_back_busy_passed_on(void **state)
{
	(void)state;
	char *admin_b = it_token(&back, "ops", "admin");
	assert_int_equal(pol_put(&back, admin_b, "acme", "{\"max_execs\":1,\"exec_queue\":0}", NULL), 200);
	struct it_resp b = req(&back, "POST", "/exec", "{\"command\":\"sleep 30\",\"background\":true}");
	it_expect_status(&b, 202);
	json_t *v = it_json(&b);
	char cancel[160];
	snprintf(cancel, sizeof cancel, "/exec/%s/cancel", jstr(v, "id"));
	json_decref(v);
	it_resp_free(&b);
	struct it_resp direct = req(&back, "POST", "/exec", "{\"command\":\"true\"}");
	struct it_resp f = req(&front, "POST", "/exec", "{\"command\":\"true\"}");
	it_expect_error(&direct, 429, "too_many_requests");
	it_expect_error(&f, 429, "too_many_requests");
	char *ra_b = it_header(&direct, "Retry-After"), *ra_f = it_header(&f, "Retry-After");
	assert_non_null(ra_b);
	assert_non_null(ra_f);
	assert_string_equal(ra_f, ra_b);
	json_t *eb = it_json(&direct), *ef = it_json(&f);
	assert_string_equal(jstr(json_object_get(ef, "error"), "message"),
			    jstr(json_object_get(eb, "error"), "message"));
	json_decref(eb);
	json_decref(ef);
	free(ra_b);
	free(ra_f);
	it_resp_free(&direct);
	it_resp_free(&f);
	struct it_resp c = req(&back, "POST", cancel, NULL);
	it_expect_status(&c, 202);
	it_resp_free(&c);
	assert_int_equal(pol_put(&back, admin_b, "acme", "{\"max_execs\":null,\"exec_queue\":null}", NULL),
			 200);
	free(admin_b);
}

static void *exec_long(void *arg)
{
	long *out = arg;
	json_t *res = NULL;
	long t0 = it_now_ms();
	out[0] = front_json("POST", "/exec", "{\"command\":\"sleep 60\",\"id\":\"killed-mid-way\"}", &res);
	out[1] = it_now_ms() - t0;
	const char *code = json_string_value(json_object_get(json_object_get(res, "error"), "code"));
	out[2] = code && strcmp(code, "backend_unavailable") == 0;
	json_decref(res);
	return NULL;
}

static void expect_unavailable(const char *method, const char *path, const char *body)
{
	long t0 = it_now_ms();
	struct it_resp r = req(&front, method, path, body);
	it_expect_error(&r, 503, "backend_unavailable");
	char *ra = it_header(&r, "Retry-After");
	assert_non_null(ra);
	assert_true(atol(ra) >= 1);
	free(ra);
	assert_true(it_now_ms() - t0 < 5000);
	it_resp_free(&r);
}

static void test_back_killed_and_restarted(void **state)
{
	(void)state;
	long out[3] = {0};
	pthread_t th;
	pthread_create(&th, NULL, exec_long, out);
	/* Running on the back... */
	json_t *v = ex_wait_state(&back, tok_b, "killed-mid-way", "running", 15000);
	assert_non_null(v);
	json_decref(v);
	long t_kill = it_now_ms();
	it_stop(&back, SIGKILL);
	pthread_join(th, NULL);
	/* ... then the back is gone: the waiting client learns it promptly. */
	assert_int_equal(out[0], 503);
	assert_true(out[2]);
	assert_true(it_now_ms() - t_kill < 10000);
	/* Down: every route says so at once, with a retry hint. */
	expect_unavailable("GET", "/fs/read?path=docs/b.txt", NULL);
	expect_unavailable("POST", "/fs/mkdir", "{\"path\":\"x\"}");
	expect_unavailable("POST", "/exec", "{\"command\":\"true\"}");
	json_t *ready = NULL;
	assert_int_equal(it_get_json(&front, NULL, "/readyz", &ready), 200);
	char *bt = json_dumps(json_object_get(ready, "backends"), 0);
	assert_non_null(strstr(bt, "unreachable at"));
	free(bt);
	json_decref(ready);
	/* Other tenants of the front are not affected. */
	json_t *g = ex_run(&front, tok_globex_f, "echo local");
	assert_string_equal(ex_stdout_ok(g), "local\n");
	json_decref(g);
	/* Back again (same address): the next call works. */
	assert_int_equal(it_restart(&back, NULL), 0);
	struct it_resp w = req(&front, "PUT", "/fs/write?path=again.txt", "again");
	it_expect_status(&w, 200);
	it_resp_free(&w);
	same("GET", "/fs/read?path=again.txt", NULL, 200);
	json_t *res = exec_front("{\"command\":\"echo back\"}", 200);
	assert_string_equal(jstr(res, "stdout"), "back\n");
	json_decref(res);
}

static void test_settings_refused(void **state)
{
	(void)state;
	json_t *out = NULL;
	assert_int_equal(pol_put(&front, tok_admin, "globex", "{\"remote_url\":\"ftp://x\"}", &out), 400);
	json_decref(out);
	assert_int_equal(pol_put(&front, tok_admin, "globex", "{\"remote_token_file\":\"relative\"}", &out),
			 400);
	json_decref(out);
	assert_int_equal(pol_put(&front, tok_admin, "globex", "{\"backend\":\"remote\"}", &out), 400);
	assert_non_null(strstr(jstr(json_object_get(out, "error"), "message"), "remote_url"));
	json_decref(out);
	/* The policy shows the token file's path, never the token. */
	struct it_resp r;
	assert_int_equal(it_http(&front, "GET", "/tenants/acme/policy", tok_admin, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	assert_non_null(strstr(r.body, "back-token"));
	assert_null(strstr(r.body, tok_b));
	it_resp_free(&r);
}

static long metric(const char *name)
{
	struct it_resp r;
	assert_int_equal(it_http(&front, "GET", "/metrics", tok_audit, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	char key[128];
	snprintf(key, sizeof key, "\n%s ", name);
	const char *p = strstr(r.body, key);
	long v = p ? strtol(p + strlen(key), NULL, 10) : -1;
	it_resp_free(&r);
	return v;
}

/* What a hostile operator or a policy change must not get: a remote read
 * never runs on an event thread (it waits on the network: the pool runs
 * it); a token file any user may read is not sent anywhere; a transfer
 * token minted while the tenant was local does not serve local disk once
 * it is remote. */
static void test_remote_hazards(void **state)
{
	(void)state;
	struct it_resp w = req(&front, "PUT", "/fs/write?path=hz.txt", "hazard");
	it_expect_status(&w, 200);
	it_resp_free(&w);
	long inline0 = metric("sandboxd_pool_inline_total");
	for (int i = 0; i < 2; i++) {
		struct it_resp r = req(&front, "GET", "/fs/read?path=hz.txt", NULL);
		it_expect_status(&r, 200);
		it_resp_free(&r);
	}
	assert_int_equal(metric("sandboxd_pool_inline_total"), inline0);

	/* globex, local for now, mints an upload... */
	struct it_resp t;
	const char *const hdrs[] = {"Content-Type: application/json", "X-Session-Key: hz", NULL};
	const char *mint = "{\"direction\":\"write\",\"path\":\"up.txt\"}";
	assert_int_equal(it_http(&front, "POST", "/fs/transfers", tok_globex_f, hdrs, mint, strlen(mint), &t),
			 0);
	it_expect_status(&t, 201);
	json_t *tj = it_json(&t);
	char *url = xasprintf("/fs/stream/%s", jstr(tj, "token"));
	json_decref(tj);
	it_resp_free(&t);
	/* ...then becomes remote, with a token file others may read. */
	char *open_path = xasprintf("%s/open-token", front.dir);
	assert_int_equal(it_write_file(open_path, tok_globex_b, strlen(tok_globex_b)), 0);
	assert_int_equal(chmod(open_path, 0644), 0);
	char *body = xasprintf("{\"backend\":\"remote\",\"remote_url\":\"%s\",\"remote_token_file\":\"%s\"}",
			       back.base, open_path);
	assert_int_equal(pol_put(&front, tok_admin, "globex", body, NULL), 200);
	free(body);
	assert_int_equal(it_http(&front, "PUT", url, NULL, NULL, "x", 1, &t), 0);
	it_expect_status(&t, 403);
	it_resp_free(&t);
	assert_int_equal(it_http(&front, "GET", "/fs/exists?path=x", tok_globex_f, hdrs, NULL, 0, &t), 0);
	it_expect_error(&t, 503, "backend_unavailable");
	assert_non_null(strstr(t.body, "readable by it alone"));
	assert_null(strstr(t.body, open_path)); /* the reason, not the server's path */
	it_resp_free(&t);
	free(url);
	free(open_path);
	assert_int_equal(pol_put(&front, tok_admin, "globex", "{\"backend\":null}", NULL), 200);
}

/* A front tenant's policy naming globex's back tenant, through a token
 * file of its own: refused. */
static long put_remote(const char *tenant, const char *url, const char *tok, const char *file, json_t **out)
{
	char *path = xasprintf("%s/%s", front.dir, file);
	assert_int_equal(it_write_file(path, tok, strlen(tok)), 0);
	assert_int_equal(chmod(path, 0600), 0);
	char *body = xasprintf("{\"backend\":\"remote\",\"remote_url\":\"%s\",\"remote_token_file\":\"%s\"}",
			       url, path);
	long st = pol_put(&front, tok_admin, tenant, body, out);
	free(body);
	free(path);
	return st;
}

/* A back whose command had network, on loopback: a real back never runs
 * one for the front (the front refuses network for a remote tenant), so
 * this stand-in answers POST /exec with the events of a command whose
 * ShellResult has egress_denied: one ordinary destination and one longer
 * than the front's summary holds, in two-byte characters. Anything else
 * is a 404. One connection at a time; the thread never asserts. */
struct fake_back {
	int fd;
	char base[64];
	pthread_t thread;
	atomic_bool stop;
	atomic_int execs;
	char long_dest[512];
};

static void fake_send(int fd, const char *s)
{
	for (size_t off = 0, n = strlen(s); off < n;) {
		ssize_t k = send(fd, s + off, n - off, MSG_NOSIGNAL);
		if (k <= 0)
			return;
		off += (size_t)k;
	}
}

static void fake_serve(struct fake_back *f, int c)
{
	struct timeval tv = {5, 0};
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	char buf[16384];
	size_t len = 0;
	char *end = NULL, *body = NULL;
	long want = -1;
	while (len < sizeof buf - 1) {
		ssize_t k = recv(c, buf + len, sizeof buf - 1 - len, 0);
		if (k <= 0)
			return;
		len += (size_t)k;
		buf[len] = '\0';
		if (!end && (end = strstr(buf, "\r\n\r\n"))) {
			body = end + 4;
			const char *cl = strcasestr(buf, "\r\ncontent-length:");
			want = cl && cl < end ? strtol(cl + 17, NULL, 10) : 0;
			if (strcasestr(buf, "\r\nexpect: 100-continue"))
				fake_send(c, "HTTP/1.1 100 Continue\r\n\r\n");
		}
		if (end && (long)(buf + len - body) >= want)
			break;
	}
	if (!end || strncmp(buf, "POST /exec ", 11) != 0) {
		fake_send(c,
			  "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nConnection: close\r\n"
			  "\r\n{\"error\":{\"code\":\"not_found\",\"message\":\"not here\"}}");
		return;
	}
	json_t *q = json_loadb(body, (size_t)want, 0, NULL);
	json_t *res =
	    json_pack("{s:s, s:i, s:s, s:s, s:b, s:b, s:b, s:b, s:i, s:i, s:n, s:n, s:s, s:s, s:i, s:[{s:s, "
		      "s:s}, {s:s, s:s}]}",
		      "id", jstr(q, "id") ? jstr(q, "id") : "", "exit_code", 7, "stdout", "", "stderr",
		      "curl: (35) refused\n", "timed_out", 0, "cancelled", 0, "truncated", 0, "idle", 0,
		      "stdout_bytes", 0, "stderr_bytes", 19, "stdout_spill", "stderr_spill", "started_at",
		      "2024-05-01T10:00:00.000Z", "finished_at", "2024-05-01T10:00:00.250Z", "duration_ms",
		      250, "egress_denied", "dest", "evil.test:443", "reason", "not in the allowlist", "dest",
		      f->long_dest, "reason", "not in the allowlist");
	char *data = json_dumps(res, JSON_COMPACT);
	char *answer =
	    xasprintf("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
		      "id: 1\nevent: start\ndata: {\"id\":\"%s\"}\n\nid: 2\nevent: exit\ndata: %s\n\n",
		      jstr(q, "id") ? jstr(q, "id") : "", data);
	fake_send(c, answer);
	f->execs++;
	free(answer);
	free(data);
	json_decref(res);
	json_decref(q);
}

static void *fake_main(void *arg)
{
	struct fake_back *f = arg;
	while (!f->stop) {
		struct pollfd p = {.fd = f->fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		int c = accept4(f->fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		fake_serve(f, c);
		close(c);
	}
	return NULL;
}

static void fake_start(struct fake_back *f)
{
	*f = (struct fake_back){0};
	size_t n = 0;
	for (int i = 0; i < 200; i++)
		n += (size_t)snprintf(f->long_dest + n, sizeof f->long_dest - n, "\xc3\xa9");
	snprintf(f->long_dest + n, sizeof f->long_dest - n, ".test:443");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	f->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f->fd >= 0);
	assert_int_equal(bind(f->fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(f->fd, 8), 0);
	assert_int_equal(getsockname(f->fd, (struct sockaddr *)&a, &al), 0);
	snprintf(f->base, sizeof f->base, "http://127.0.0.1:%d", ntohs(a.sin_port));
	assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake_back *f)
{
	f->stop = true;
	pthread_join(f->thread, NULL);
	close(f->fd);
}

/* The front's dest: the back's, cut to the summary's array at a
 * character's start (so still UTF-8, or the front could not say it). */
static void assert_denied_passed_on(json_t *res, const char *long_dest)
{
	json_t *d = json_object_get(res, "egress_denied");
	if (json_array_size(d) != 2) {
		char *txt = json_dumps(res, JSON_COMPACT);
		fail_msg("want the back's two egress_denied entries: %s", txt);
	}
	assert_string_equal(jstr(json_array_get(d, 0), "dest"), "evil.test:443");
	assert_string_equal(jstr(json_array_get(d, 0), "reason"), "not in the allowlist");
	const char *cut = jstr(json_array_get(d, 1), "dest");
	assert_non_null(cut);
	assert_true(strlen(cut) > 200 && strlen(cut) < strlen(long_dest));
	assert_int_equal(strlen(cut) % 2, 0); /* whole two-byte characters */
	assert_int_equal(strncmp(cut, long_dest, strlen(cut)), 0);
	assert_string_equal(jstr(json_array_get(d, 1), "reason"), "not in the allowlist");
}

/* What the back's egress gateway refused reaches the front's client: its
 * ShellResult, the exec's record and its exit event carry the back's
 * egress_denied. A real back cannot be asked: the front refuses network
 * for a remote tenant (403; the back's policy would govern it). */
static void test_back_egress_denied(void **state)
{
	(void)state;
	json_t *res = exec_front("{\"command\":\"true\",\"network\":true}", 403);
	assert_string_equal(jstr(json_object_get(res, "error"), "code"), "forbidden");
	json_decref(res);

	struct fake_back f;
	fake_start(&f);
	assert_int_equal(put_remote("globex", f.base, tok_globex_b, "globex-token", NULL), 200);
	const char *const hdrs[] = {"Content-Type: application/json", "X-Session-Key: remote-suite", NULL};
	const char *body = "{\"command\":\"curl https://evil.test/\"}";
	struct it_resp r;
	assert_int_equal(it_http(&front, "POST", "/exec", tok_globex_f, hdrs, body, strlen(body), &r), 0);
	it_expect_status(&r, 200);
	res = it_json(&r);
	it_resp_free(&r);
	assert_int_equal(jint(res, "exit_code"), 7);
	assert_denied_passed_on(res, f.long_dest);

	char path[160];
	snprintf(path, sizeof path, "/exec/%s", jstr(res, "id"));
	json_t *x = NULL;
	assert_int_equal(it_get_json(&front, tok_globex_f, path, &x), 200);
	assert_denied_passed_on(json_object_get(x, "result"), f.long_dest);
	json_decref(x);
	snprintf(path, sizeof path, "/exec/%s/events", jstr(res, "id"));
	assert_int_equal(it_http(&front, "GET", path, tok_globex_f, hdrs, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	const char *exit_ev = strstr(r.body, "event: exit\ndata: ");
	assert_non_null(exit_ev);
	exit_ev += strlen("event: exit\ndata: ");
	json_t *ev = json_loadb(exit_ev, strcspn(exit_ev, "\n"), 0, NULL);
	assert_non_null(ev);
	assert_denied_passed_on(ev, f.long_dest);
	json_decref(ev);
	it_resp_free(&r);
	json_decref(res);
	assert_int_equal(f.execs, 1);

	assert_int_equal(pol_put(&front, tok_admin, "globex", "{\"backend\":null}", NULL), 200);
	fake_stop(&f);
}

/* Issue 26 item 11: two front tenants naming one back tenant would share
 * its files. The second is refused when its policy is set, and at use
 * when the token file changed to name a taken back tenant. */
static void test_one_back_tenant_each(void **state)
{
	(void)state;
	json_t *out = NULL;
	/* acme's back tenant (acme), through another file and another spelling of the URL. */
	char *url = xasprintf("%s/", back.base);
	long st = put_remote("globex", url, tok_b, "globex-token", &out);
	if (st != 409)
		fprintf(stderr, "%s\n", json_dumps(out, 0));
	assert_int_equal(st, 409);
	assert_non_null(strstr(jstr(json_object_get(out, "error"), "message"), "acme"));
	json_decref(out);
	free(url);
	/* Its own back tenant: accepted and served. */
	assert_int_equal(put_remote("globex", back.base, tok_globex_b, "globex-token", NULL), 200);
	const char *const hdrs[] = {"X-Session-Key: remote-suite", NULL};
	struct it_resp r;
	assert_int_equal(it_http(&front, "GET", "/fs/exists?path=docs", tok_globex_f, hdrs, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	assert_null(strstr(r.body, "true"));
	it_resp_free(&r);
	/* The file now holds acme's back token: refused at use, and acme
	 * is still served. */
	char *path = xasprintf("%s/globex-token", front.dir);
	assert_int_equal(it_write_file(path, tok_b, strlen(tok_b)), 0);
	free(path);
	long until = it_now_ms() + 20000;
	for (;;) {
		assert_int_equal(
		    it_http(&front, "GET", "/fs/exists?path=docs", tok_globex_f, hdrs, NULL, 0, &r), 0);
		if (r.status != 200 || it_now_ms() > until)
			break;
		it_resp_free(&r);
		usleep(100000);
	}
	it_expect_error(&r, 503, "backend_unavailable");
	assert_null(strstr(r.body, "true"));
	it_resp_free(&r);
	struct it_resp a = req(&front, "GET", "/fs/exists?path=docs", NULL);
	it_expect_status(&a, 200);
	it_resp_free(&a);
	assert_int_equal(pol_put(&front, tok_admin, "globex", "{\"backend\":null}", NULL), 200);
}

/* What a tenant reads of its back's failures: no URL, no file path of
 * the server (the log has them). */
static void test_errors_hide_internals(void **state)
{
	(void)state;
	/* Nothing listens on loopback port 1. */
	assert_int_equal(put_remote("globex", "http://127.0.0.1:1", tok_globex_b, "globex-token", NULL), 200);
	const char *const hdrs[] = {"X-Session-Key: remote-suite", NULL};
	const char *const probes[][2] = {{"GET", "/fs/exists?path=x"}, {"POST", "/exec"}};
	for (size_t i = 0; i < 2; i++) {
		struct it_resp r;
		const char *body = i ? "{\"command\":\"true\"}" : NULL;
		assert_int_equal(it_http(&front, probes[i][0], probes[i][1], tok_globex_f, hdrs, body,
					 body ? strlen(body) : 0, &r),
				 0);
		it_expect_error(&r, 503, "backend_unavailable");
		assert_null(strstr(r.body, "127.0.0.1"));
		assert_null(strstr(r.body, "globex-token"));
		assert_null(strstr(r.body, front.dir));
		it_resp_free(&r);
	}
	/* A token file that is missing: the same. */
	char *body = xasprintf("{\"remote_url\":\"%s\",\"remote_token_file\":\"%s/no-such-token\"}",
			       back.base, front.dir);
	assert_int_equal(pol_put(&front, tok_admin, "globex", body, NULL), 200);
	free(body);
	struct it_resp r;
	long until = it_now_ms() + 20000;
	for (;;) {
		assert_int_equal(it_http(&front, "GET", "/fs/exists?path=x", tok_globex_f, hdrs, NULL, 0, &r),
				 0);
		if (strstr(r.body, "token") || it_now_ms() > until)
			break;
		it_resp_free(&r);
		usleep(100000);
	}
	it_expect_error(&r, 503, "backend_unavailable");
	assert_null(strstr(r.body, "no-such-token"));
	assert_null(strstr(r.body, front.dir));
	assert_null(strstr(r.body, back.base));
	it_resp_free(&r);
	assert_int_equal(pol_put(&front, tok_admin, "globex", "{\"backend\":null}", NULL), 200);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_files_equal),
	    cmocka_unit_test(test_ranges_equal),
	    cmocka_unit_test(test_exec_equal),
	    cmocka_unit_test(test_cancel_and_events),
	    cmocka_unit_test(test_settings_refused),
	    cmocka_unit_test(test_back_busy_passed_on),
	    cmocka_unit_test(test_back_killed_and_restarted),
	    cmocka_unit_test(test_remote_hazards),
	    cmocka_unit_test(test_one_back_tenant_each),
	    cmocka_unit_test(test_errors_hide_internals),
	    cmocka_unit_test(test_back_egress_denied),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
