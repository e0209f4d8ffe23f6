/* POST /code's file work stays off the HTTP threads (issue 26, item 5).
 *
 * On a server with one HTTP event thread, acme posts /code requests with
 * 1,000 input files each (written and fsync'ed one by one) while globex
 * asks GET /fs/stat. The condition, independent of the machine's speed:
 * one of globex's stats is answered while one of acme's /code requests is
 * provably inside its file phase: that request's session directory held
 * some but not all of its input files before the stat was sent and still
 * not all of them once it was answered. Were the inputs written on the
 * event thread, that thread could not have answered the stat in between.
 * The same for POST /exec with track_changes: its first snapshot of a
 * session directory of 200,000 files is not taken on the event thread
 * either: the stat is answered while the pool's metrics say acme's one
 * request is running on a worker, before and after it (the same job:
 * acme's finished count did not move). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#define NFILES 1000
#define NPOSTS 4 /* /code requests acme makes at most, 2 at a time */

static struct it_server srv;
static char *tok_a, *tok_b, *tok_ops;
static const struct it_tok toks[] = {
    {&tok_a, "acme", NULL}, {&tok_b, "globex", NULL}, {&tok_ops, "ops", "admin audit:read"}};

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", it_uid_base_arg(NULL),	   "--set", "threads=1",
				     "--set", "changes-max-files=1000000", NULL};
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* One request in session key, answered with status. */
static void req_ok(const char *method, const char *url, const char *tok, const char *key, const char *body,
		   long status)
{
	char h[200];
	snprintf(h, sizeof h, "X-Session-Key: %s", key);
	const char *hs[] = {h, "Content-Type: application/json", NULL};
	struct it_resp r;
	assert_int_equal(it_http(&srv, method, url, tok, hs, body, body ? strlen(body) : 0, &r), 0);
	it_expect_status(&r, status);
	it_resp_free(&r);
}

/* A /code body with NFILES small input files f0000 ... */
static char *code_body(void)
{
	json_t *files = json_array();
	for (int i = 0; i < NFILES; i++) {
		char p[16];
		snprintf(p, sizeof p, "f%04d", i);
		json_array_append_new(files, json_pack("{s:s, s:s}", "path", p, "content", "x"));
	}
	json_t *b = json_pack("{s:s, s:s, s:o}", "language", "sh", "code", "true", "files", files);
	char *t = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	return t;
}

/* How many of the input files f0000... acme's session key holds on the host. */
static int inputs_in(const char *key)
{
	char seg[80];
	it_session_segment(key, seg, sizeof seg);
	char *p = xasprintf("%s/tenants/acme/workspace/sessions/%s", srv.dir, seg);
	DIR *d = opendir(p);
	free(p);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] == 'f' && strlen(e->d_name) == 5)
			n++;
	closedir(d);
	return n;
}

struct load {
	const char *body;
	atomic_int next;   /* the next request's number */
	atomic_int done;   /* requests answered */
	atomic_bool stop;  /* the condition was seen: no more requests */
	atomic_int failed; /* answers other than 200 */
};

static void *load_main(void *arg)
{
	struct load *l = arg;
	int i;
	while (!atomic_load(&l->stop) && (i = atomic_fetch_add(&l->next, 1)) < NPOSTS) {
		char key[32];
		snprintf(key, sizeof key, "load%d", i);
		struct it_resp r;
		char h[64];
		snprintf(h, sizeof h, "X-Session-Key: %s", key);
		const char *hs[] = {h, "Content-Type: application/json", NULL};
		if (it_http(&srv, "POST", "/code", tok_a, hs, l->body, strlen(l->body), &r) < 0 ||
		    r.status != 200) {
			fprintf(stderr, "/code %s: %ld %s\n", key, r.status, r.body ? r.body : "");
			atomic_fetch_add(&l->failed, 1);
		}
		it_resp_free(&r);
		atomic_fetch_add(&l->done, 1);
	}
	return NULL;
}

/* One of acme's sessions now in its file phase (some inputs, not all), or -1. */
static int in_file_phase(struct load *l, int *count)
{
	int upto = atomic_load(&l->next);
	for (int i = 0; i < upto && i < NPOSTS; i++) {
		char key[32];
		snprintf(key, sizeof key, "load%d", i);
		int n = inputs_in(key);
		if (n > 0 && n < NFILES) {
			*count = n;
			return i;
		}
	}
	return -1;
}

/* globex's stat, answered 200 */
static void stat_b(void)
{
	req_ok("GET", "/fs/stat?path=x.txt", tok_b, "b", NULL, 200);
}

static void test_stat_answered_during_code_inputs(void **state)
{
	(void)state;
	req_ok("PUT", "/fs/write?path=x.txt", tok_b, "b", "hello", 200);
	char *body = code_body();
	struct load l = {.body = body};
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, load_main, &l), 0);
	bool seen = false;
	long deadline = it_now_ms() + 120000;
	while (!seen && atomic_load(&l.done) < NPOSTS && it_now_ms() < deadline) {
		int before = 0, i = in_file_phase(&l, &before);
		if (i < 0)
			continue;
		stat_b();
		char key[32];
		snprintf(key, sizeof key, "load%d", i);
		int after = inputs_in(key);
		seen = after < NFILES;
		if (seen)
			fprintf(stderr, "stat answered while load%d held %d, then %d of %d inputs\n", i,
				before, after, NFILES);
	}
	atomic_store(&l.stop, true);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	free(body);
	assert_int_equal(atomic_load(&l.failed), 0);
	assert_true(seen);
}

static long acme_metric(const char *name)
{
	char *series = xasprintf("%s{tenant=\"acme\"}", name);
	long v = it_metric(&srv, tok_ops, series);
	free(series);
	return v;
}

struct exec_load {
	atomic_bool done;
	long status;
};

static void *exec_main(void *arg)
{
	struct exec_load *l = arg;
	const char *body = "{\"command\": \"true\", \"track_changes\": true}";
	const char *hs[] = {"X-Session-Key: walk", "Content-Type: application/json", NULL};
	struct it_resp r;
	if (it_http(&srv, "POST", "/exec", tok_a, hs, body, strlen(body), &r) == 0)
		l->status = r.status;
	it_resp_free(&r);
	atomic_store(&l->done, true);
	return NULL;
}

#define NWALK 200000

static void test_stat_answered_during_exec_snapshot(void **state)
{
	(void)state;
	req_ok("POST", "/fs/mkdir", tok_a, "walk", "{\"path\": \"big\"}", 201);
	char seg[80];
	it_session_segment("walk", seg, sizeof seg);
	for (int i = 0; i < NWALK; i++) {
		char *p = xasprintf("%s/tenants/acme/workspace/sessions/%s/big/f%06d", srv.dir, seg, i);
		int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
		free(p);
		assert_true(fd >= 0);
		close(fd);
	}
	bool seen = false;
	for (int round = 0; round < 5 && !seen; round++) {
		struct exec_load l = {.status = 0};
		pthread_t th;
		assert_int_equal(pthread_create(&th, NULL, exec_main, &l), 0);
		while (!seen && !atomic_load(&l.done)) {
			long jobs = acme_metric("sandboxd_pool_jobs_total");
			if (acme_metric("sandboxd_pool_running") != 1)
				continue;
			stat_b();
			seen = acme_metric("sandboxd_pool_running") == 1 &&
			       acme_metric("sandboxd_pool_jobs_total") == jobs && !atomic_load(&l.done);
		}
		pthread_join(th, NULL);
		assert_int_equal(l.status, 200);
	}
	assert_true(seen);
}

/* A POST /exec with track_changes that POST /exec refuses (a bad field,
 * a policy's no) is refused before its file work: it neither walks nor
 * creates its session, as the same request without track_changes does
 * not (the snapshot's pool trip once came before the request was read). */
static void test_refused_exec_makes_no_session(void **state)
{
	(void)state;
	req_ok("POST", "/exec", tok_a, "ghost-field", "{\"command\": 7, \"track_changes\": true}", 400);
	req_ok("POST", "/exec", tok_a, "ghost-policy",
	       "{\"command\": \"true\", \"network\": true, \"track_changes\": true}", 403);
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/sessions", tok_a, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	assert_null(strstr(r.body, "ghost"));
	it_resp_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_stat_answered_during_code_inputs),
	    cmocka_unit_test(test_stat_answered_during_exec_snapshot),
	    cmocka_unit_test(test_refused_exec_makes_no_session),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
