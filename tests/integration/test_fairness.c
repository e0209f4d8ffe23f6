/* Fair server time (issue 13): file work runs on a worker pool shared
 * fairly between tenants, and readdir pages.
 *
 * - readdir of a 300,000-entry directory walked page by page over HTTP:
 *   every name exactly once; old clients get the first page and `more`;
 *   bad limits and cursors answer 400.
 * - The noisy neighbour: acme queues a batch of full 10,000-entry detail
 *   pages of that directory (more than its cap of workers); globex's
 *   /fs/exists and 4 KiB /fs/read are answered while acme's requests
 *   queued before them still wait (the pool's metrics say so after the
 *   answer: in FIFO order they could only run after all of those). No
 *   assertion on elapsed time.
 * - Fair by CPU time: on one worker, acme's backlog of 10,000-entry
 *   pages and globex's burst of small readdirs: globex's whole burst is
 *   served while at most the acme page running when it came (and one
 *   more) finish, where turns by request would have run one acme page
 *   between each two of globex's. Counted by completions, not time.
 * - A tenant over its queue bound is answered 429 with Retry-After; a
 *   request whose client leaves while queued is dropped, never run; a
 *   SIGTERM with work queued ends the server cleanly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"

#define NBIG 300000
#define CAP 2	 /* fs-threads-per-tenant */
#define BATCH 12 /* acme's concurrent pages: CAP run, the rest wait */

static struct it_server srv;
static char *tok_a, *tok_b, *tok_a_audit;
static const struct it_tok toks[] = {
    {&tok_a, "acme", NULL}, {&tok_b, "globex", NULL}, {&tok_a_audit, "ops", "admin audit:read"}};
static const char *const extra[] = {"--set", "fs-threads=3", "--set", "fs-threads-per-tenant=2", NULL};
/* The small server: one worker, one job per tenant, four waiting. */
static struct it_server s2;
static char *tok2_a, *tok2_b, *tok2_audit;
static const struct it_tok toks2[] = {
    {&tok2_a, "acme", NULL}, {&tok2_b, "globex", NULL}, {&tok2_audit, "ops", "admin audit:read"}};
static const char *const extra2[] = {"--set", "fs-threads=1",	       "--set", "fs-threads-per-tenant=1",
				     "--set", "fs-queue-per-tenant=4", NULL};
static const char *big_url = "/fs/readdir?path=big&limit=10000&detail=true";
/* Fair by CPU time: one worker that one tenant may fill, long queues. */
static struct it_server s3;
static char *tok3_a, *tok3_b, *tok3_audit;
static const struct it_tok toks3[] = {
    {&tok3_a, "acme", NULL}, {&tok3_b, "globex", NULL}, {&tok3_audit, "ops", "admin audit:read"}};
static const char *const extra3[] = {"--set", "fs-threads=1",		"--set", "fs-threads-per-tenant=1",
				     "--set", "fs-queue-per-tenant=64", NULL};

static int64_t now_ms_(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void req(struct it_server *s, const char *method, const char *url, const char *tok, const char *key,
		const char *body, struct it_resp *r)
{
	char h[600];
	snprintf(h, sizeof h, "X-Session-Key: %s", key);
	const char *hs[] = {h, body ? "Content-Type: application/json" : NULL, NULL};
	assert_int_equal(it_http(s, method, url, tok, hs, body, body ? strlen(body) : 0, r), 0);
}

/* acme's session "fair" holds big/ with f000000 .. f299999, made on the host. */
static int make_big(struct it_server *s, const char *tok, int n)
{
	struct it_resp r;
	req(s, "POST", "/fs/mkdir", tok, "fair", "{\"path\": \"big\"}", &r);
	int ok = r.status == 201;
	it_resp_free(&r);
	if (!ok)
		return -1;
	char seg[80], p[900];
	it_session_segment("fair", seg, sizeof seg);
	for (int i = 0; i < n; i++) {
		snprintf(p, sizeof p, "%s/tenants/acme/workspace/sessions/%s/big/f%06d", s->dir, seg, i);
		int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
		if (fd < 0)
			return -1;
		close(fd);
	}
	return 0;
}

static int setup(void **state)
{
	(void)state;
	if (it_start_minted(&srv, extra, toks, IT_NTOKS(toks)) < 0)
		return -1;
	return make_big(&srv, tok_a, NBIG);
}

static int teardown(void **state)
{
	(void)state;
	it_cleanup(&srv);
	it_cleanup(&s2);
	it_cleanup(&s3);
	it_free_all(toks, IT_NTOKS(toks));
	it_free_all(toks2, IT_NTOKS(toks2));
	it_free_all(toks3, IT_NTOKS(toks3));
	return 0;
}

/* ---- metrics ---- */

/* The value of a metric line "name{tenant="t"} v" (or "name v" when
 * tenant is NULL); -1 when absent. */
static long metric(struct it_server *s, const char *name, const char *tenant)
{
	struct it_resp r;
	const char *audit = s == &s2 ? tok2_audit : s == &s3 ? tok3_audit : tok_a_audit;
	assert_int_equal(it_http(s, "GET", "/metrics", audit, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	char key[160];
	if (tenant)
		snprintf(key, sizeof key, "\n%s{tenant=\"%s\"} ", name, tenant);
	else
		snprintf(key, sizeof key, "\n%s ", name);
	const char *p = strstr(r.body, key);
	long v = p ? strtol(p + strlen(key), NULL, 10) : -1;
	it_resp_free(&r);
	return v;
}

/* Wait (deadline 60 s) until name{tenant} >= want; its value. */
static long wait_metric_ge(struct it_server *s, const char *name, const char *tenant, long want)
{
	int64_t deadline = now_ms_() + 60000;
	long v;
	while ((v = metric(s, name, tenant)) < want && now_ms_() < deadline)
		usleep(2000);
	return v;
}

/* ---- a batch of concurrent requests of one tenant, on a thread ---- */

struct batch {
	struct it_server *s;
	const char *url, *tok, *key;
	int n;
	atomic_int done, ok, refused, other;
	pthread_t thread;
};

static size_t sink(char *p, size_t sz, size_t n, void *ctx)
{
	(void)p;
	(void)ctx;
	return sz * n;
}

static void *batch_main(void *arg)
{
	struct batch *b = arg;
	CURLM *m = curl_multi_init();
	CURL *e[64];
	char url[600], auth[2048], key[600];
	snprintf(url, sizeof url, "%s%s", b->s->base, b->url);
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", b->tok);
	snprintf(key, sizeof key, "X-Session-Key: %s", b->key);
	struct curl_slist *h = curl_slist_append(curl_slist_append(NULL, auth), key);
	for (int i = 0; i < b->n; i++) {
		e[i] = curl_easy_init();
		curl_easy_setopt(e[i], CURLOPT_URL, url);
		curl_easy_setopt(e[i], CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(e[i], CURLOPT_WRITEFUNCTION, sink);
		curl_easy_setopt(e[i], CURLOPT_TIMEOUT, 300L);
		curl_multi_add_handle(m, e[i]);
	}
	int running = 1;
	while (running) {
		curl_multi_perform(m, &running);
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(m, &left)))
			if (msg->msg == CURLMSG_DONE) {
				long st = 0;
				curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &st);
				atomic_fetch_add(st == 200 ? &b->ok : st == 429 ? &b->refused : &b->other, 1);
				atomic_fetch_add(&b->done, 1);
			}
		if (running)
			curl_multi_poll(m, NULL, 0, 100, NULL);
	}
	for (int i = 0; i < b->n; i++) {
		curl_multi_remove_handle(m, e[i]);
		curl_easy_cleanup(e[i]);
	}
	curl_slist_free_all(h);
	curl_multi_cleanup(m);
	return NULL;
}

static void batch_start(struct batch *b)
{
	assert_int_equal(pthread_create(&b->thread, NULL, batch_main, b), 0);
}

static void batch_join(struct batch *b)
{
	pthread_join(b->thread, NULL);
}

/* ---- readdir pages ---- */

static json_t *page(const char *url, long status)
{
	struct it_resp r;
	req(&srv, "GET", url, tok_a, "fair", NULL, &r);
	it_expect_status(&r, status);
	json_t *j = it_json(&r);
	it_resp_free(&r);
	assert_non_null(j);
	return j;
}

/* Every page of 10,000: each of the 300,000 names exactly once, each
 * page sorted, the last one saying nothing more follows. */
static void test_pages_300k(void **state)
{
	(void)state;
	unsigned char *seen = xcalloc(NBIG, 1);
	char *after = NULL;
	size_t pages = 0, total = 0;
	for (;;) {
		char *url = after ? xasprintf("/fs/readdir?path=big&limit=10000&after=%s", after)
				  : xstrdup("/fs/readdir?path=big&limit=10000");
		json_t *j = page(url, 200);
		free(url);
		json_t *e = json_object_get(j, "entries");
		assert_true(json_array_size(e) <= 10000);
		for (size_t i = 0; i < json_array_size(e); i++) {
			const char *n = json_string_value(json_array_get(e, i));
			assert_int_equal(strlen(n), 7);
			long k = strtol(n + 1, NULL, 10);
			assert_true(k >= 0 && k < NBIG);
			assert_int_equal(seen[k], 0);
			seen[k] = 1;
			if (i)
				assert_true(strcmp(json_string_value(json_array_get(e, i - 1)), n) < 0);
		}
		total += json_array_size(e);
		pages++;
		bool more = json_is_true(json_object_get(j, "more"));
		free(after);
		after = more ? xstrdup(json_string_value(json_object_get(j, "next"))) : NULL;
		if (!more)
			assert_true(json_is_null(json_object_get(j, "next")));
		json_decref(j);
		if (!more)
			break;
		assert_non_null(after);
		assert_true(pages <= NBIG / 10000 + 2);
	}
	assert_int_equal(total, NBIG);
	free(seen);
}

/* A client of the old contract (no limit) gets the first 1,000 and is
 * told more follows; the cursor continues where that page ended. */
static void test_old_clients_get_first_page(void **state)
{
	(void)state;
	json_t *j = page("/fs/readdir?path=big", 200);
	json_t *e = json_object_get(j, "entries");
	assert_int_equal(json_array_size(e), 1000);
	assert_true(json_is_true(json_object_get(j, "more")));
	const char *next = json_string_value(json_object_get(j, "next"));
	assert_non_null(next);
	char *url = xasprintf("/fs/readdir?path=big&limit=1000&after=%s&detail=true", next);
	json_t *j2 = page(url, 200);
	free(url);
	json_t *e2 = json_object_get(j2, "entries");
	assert_int_equal(json_array_size(e2), 1000);
	for (size_t i = 0; i < 1000; i++) {
		const char *n = json_string_value(json_object_get(json_array_get(e2, i), "name"));
		assert_string_equal(json_string_value(json_object_get(json_array_get(e2, i), "type")),
				    "file");
		for (size_t k = 0; k < 1000; k++)
			assert_string_not_equal(n, json_string_value(json_array_get(e, k)));
	}
	json_decref(j2);
	json_decref(j);
}

/* A read-only request whose path and bytes are in memory is answered on
 * the event thread (no-wait mode, counted in sandboxd_pool_inline_total)
 * without a worker's hand-off; one that would wait for the disk goes to
 * the pool. Either way the answer is the file's. */
static void read_hot(const char *what, const char *url, const char *want)
{
	struct it_resp r;
	req(&srv, "GET", url, tok_a, "hot", NULL, &r);
	if (r.status != 200)
		fprintf(stderr, "%s: %ld %s\n", what, r.status, r.body);
	it_expect_status(&r, 200);
	assert_non_null(strstr(r.body, want));
	it_resp_free(&r);
}

static void test_hot_reads_skip_the_pool(void **state)
{
	(void)state;
	struct it_resp r;
	req(&srv, "PUT", "/fs/write?path=hot.txt", tok_a, "hot", "hot bytes", &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	read_hot("warm-up", "/fs/read?path=hot.txt", "hot bytes");
	read_hot("warm-up, absent", "/fs/exists?path=cold/none.txt", "false"); /* a negative dentry */
	long in0 = metric(&srv, "sandboxd_pool_inline_total", NULL);
	long q0 = metric(&srv, "sandboxd_pool_wait_seconds_count", NULL);
	read_hot("read", "/fs/read?path=hot.txt", "hot bytes");
	read_hot("stat", "/fs/stat?path=hot.txt", "\"size\":9");
	read_hot("exists", "/fs/exists?path=hot.txt", "true");
	read_hot("exists, absent", "/fs/exists?path=cold/none.txt", "false");
	assert_int_equal(metric(&srv, "sandboxd_pool_inline_total", NULL) - in0, 4);
	assert_int_equal(metric(&srv, "sandboxd_pool_wait_seconds_count", NULL) - q0, 0);
	/* Caches dropped: the read may have to wait, and then takes the pool;
	 * it is answered exactly once, by one path or the other. */
	if (it_write_file("/proc/sys/vm/drop_caches", "3\n", 2) == 0) {
		long in1 = metric(&srv, "sandboxd_pool_inline_total", NULL);
		long q1 = metric(&srv, "sandboxd_pool_wait_seconds_count", NULL);
		read_hot("read, cold", "/fs/read?path=hot.txt", "hot bytes");
		long in2 = metric(&srv, "sandboxd_pool_inline_total", NULL);
		long q2 = metric(&srv, "sandboxd_pool_wait_seconds_count", NULL);
		assert_int_equal((in2 - in1) + (q2 - q1), 1);
	}
}

static void bad_request(const char *url)
{
	struct it_resp r;
	req(&srv, "GET", url, tok_a, "fair", NULL, &r);
	it_expect_error(&r, 400, "bad_request");
	it_resp_free(&r);
}

static void test_bad_limits_and_cursors(void **state)
{
	(void)state;
	bad_request("/fs/readdir?path=big&limit=0");
	bad_request("/fs/readdir?path=big&limit=10001");
	bad_request("/fs/readdir?path=big&limit=ten");
	bad_request("/fs/readdir?path=big&limit=-1");
	bad_request("/fs/readdir?path=big&after=nonsense");
	bad_request("/fs/readdir?path=big&after=");
	bad_request("/fs/readdir?path=big&after=ffffffffffffffffffffffff");
	/* A real cursor, of another directory. */
	json_t *j = page("/fs/readdir?path=big&limit=5", 200);
	char *url = xasprintf("/fs/readdir?path=.&after=%s", json_string_value(json_object_get(j, "next")));
	bad_request(url);
	free(url);
	json_decref(j);
}

/* ---- the noisy neighbour ---- */

static void b_answers_while_a_waits(const char *what, const char *url, size_t want_len)
{
	struct it_resp r;
	req(&srv, "GET", url, tok_b, "b", NULL, &r);
	it_expect_status(&r, 200);
	if (want_len)
		assert_int_equal(r.len, want_len);
	else
		assert_non_null(strstr(r.body, "\"exists\":true"));
	it_resp_free(&r);
	/* acme's requests queued before globex's still wait: globex was not
	 * served after them, as one FIFO would have done. */
	long waiting = metric(&srv, "sandboxd_pool_waiting", "acme");
	if (waiting < 1)
		fail_msg("globex's %s was answered only once acme's queue had drained", what);
}

static void test_noisy_neighbour(void **state)
{
	(void)state;
	struct it_resp r;
	char f4k[4096];
	memset(f4k, 'b', sizeof f4k);
	char h[] = "X-Session-Key: b";
	const char *hs[] = {h, NULL};
	assert_int_equal(it_http(&srv, "PUT", "/fs/write?path=f4k.txt", tok_b, hs, f4k, sizeof f4k, &r), 0);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	for (int round = 0; round < 2; round++) {
		struct batch a = {.s = &srv, .url = big_url, .tok = tok_a, .key = "fair", .n = 2 * BATCH};
		batch_start(&a);
		long w = wait_metric_ge(&srv, "sandboxd_pool_waiting", "acme", 2 * BATCH - CAP - 4);
		assert_true(w >= 2 * BATCH - CAP - 4);
		assert_true(metric(&srv, "sandboxd_pool_running", "acme") <= CAP); /* its cap */
		b_answers_while_a_waits("exists", "/fs/exists?path=f4k.txt", 0);
		b_answers_while_a_waits("4 KiB read", "/fs/read?path=f4k.txt", 4096);
		batch_join(&a);
		assert_int_equal(atomic_load(&a.ok), 2 * BATCH); /* acme is slowed, not refused */
	}
	assert_true(metric(&srv, "sandboxd_pool_wait_seconds_count", NULL) > 0);
	assert_int_equal(metric(&srv, "sandboxd_pool_waiting", "acme"), 0);
}

/* ---- fair by CPU time ---- */

#define A_BACKLOG 16 /* acme's concurrent 10,000-entry pages */
#define B_BURST 12   /* globex's concurrent small readdirs */

static void test_cpu_fair(void **state)
{
	(void)state;
	assert_int_equal(it_start_minted(&s3, extra3, toks3, IT_NTOKS(toks3)), 0);
	assert_int_equal(make_big(&s3, tok3_a, 20000), 0);
	struct it_resp r;
	req(&s3, "POST", "/fs/mkdir", tok3_b, "b", "{\"path\": \"small\"}", &r);
	it_expect_status(&r, 201);
	it_resp_free(&r);
	struct batch a = {.s = &s3, .url = big_url, .tok = tok3_a, .key = "fair", .n = A_BACKLOG};
	batch_start(&a);
	/* acme's pages have run (the pool knows what they cost) and a
	 * backlog waits. */
	assert_true(wait_metric_ge(&s3, "sandboxd_pool_jobs_total", "acme", 2) >= 2);
	assert_true(wait_metric_ge(&s3, "sandboxd_pool_waiting", "acme", A_BACKLOG / 2) >= A_BACKLOG / 2);
	int a_before = atomic_load(&a.done);
	struct batch b = {.s = &s3, .url = "/fs/readdir?path=small", .tok = tok3_b, .key = "b", .n = B_BURST};
	batch_start(&b);
	batch_join(&b);
	int a_during = atomic_load(&a.done) - a_before;
	assert_int_equal(atomic_load(&b.ok), B_BURST);
	/* acme still had pages waiting, and while globex's burst ran at
	 * most the page running when it came and one more ended (by turns:
	 * one of acme's between each two of globex's). */
	assert_true(metric(&s3, "sandboxd_pool_waiting", "acme") > 0);
	if (a_during > 3)
		fail_msg("%d of acme's pages finished while globex's %d small readdirs ran", a_during,
			 B_BURST);
	assert_int_equal(metric(&s3, "sandboxd_pool_jobs_total", "globex"), B_BURST + 1); /* + mkdir */
	batch_join(&a);
	assert_int_equal(atomic_load(&a.ok), A_BACKLOG);
	it_cleanup(&s3);
}

/* ---- bounds, hang-ups, shutdown (one worker) ---- */

static void start_s2(void)
{
	assert_int_equal(it_start_minted(&s2, extra2, toks2, IT_NTOKS(toks2)), 0);
	assert_int_equal(make_big(&s2, tok2_a, 20000), 0);
}

/* acme with four requests waiting is refused the fifth (429, Retry-After,
 * a retry hint); globex, whose queue is its own, is not. */
static void test_queue_bound(void **state)
{
	(void)state;
	start_s2();
	bool refused = false;
	for (int attempt = 0; attempt < 5 && !refused; attempt++) {
		struct batch a = {.s = &s2, .url = big_url, .tok = tok2_a, .key = "fair", .n = BATCH};
		batch_start(&a);
		while (!refused && atomic_load(&a.done) < a.n) {
			if (metric(&s2, "sandboxd_pool_waiting", "acme") < 4) {
				usleep(1000);
				continue;
			}
			struct it_resp r;
			/* readdir always takes the pool (an exists of a cached path
			 * is answered on the event thread: no queue to be refused by). */
			req(&s2, "GET", "/fs/readdir?path=big&limit=1", tok2_a, "fair", NULL, &r);
			if (r.status == 429) {
				it_expect_error(&r, 429, "too_many_requests");
				it_expect_header(&r, "Retry-After", "1");
				json_t *j = it_json(&r);
				assert_true(json_is_string(
				    json_object_get(json_object_get(j, "error"), "retry_hint")));
				json_decref(j);
				refused = true;
				it_resp_free(&r);
				req(&s2, "GET", "/fs/exists?path=x", tok2_b, "b", NULL, &r);
				it_expect_status(&r, 200);
			}
			it_resp_free(&r);
		}
		batch_join(&a);
	}
	assert_true(refused);
	assert_true(metric(&s2, "sandboxd_pool_refused_total", NULL) >= 1);
}

/* A request whose client hangs up while it waits is never run. */
static void test_hangup_drops(void **state)
{
	(void)state;
	struct batch a = {.s = &s2, .url = big_url, .tok = tok2_a, .key = "fair", .n = 4};
	batch_start(&a);
	assert_true(wait_metric_ge(&s2, "sandboxd_pool_waiting", "acme", 2) >= 2);
	long dropped0 = metric(&s2, "sandboxd_pool_dropped_total", NULL);
	int fd = it_connect(&s2);
	assert_true(fd >= 0);
	const char *body = "{\"path\": \"dropped\"}";
	char *msg =
	    xasprintf("POST /fs/mkdir HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
		      "X-Session-Key: b\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
		      tok2_b, strlen(body), body);
	assert_int_equal(write(fd, msg, strlen(msg)), (ssize_t)strlen(msg));
	free(msg);
	/* The one worker is acme's: globex's mkdir waits. */
	assert_int_equal(wait_metric_ge(&s2, "sandboxd_pool_waiting", "globex", 1), 1);
	close(fd);
	assert_int_equal(wait_metric_ge(&s2, "sandboxd_pool_dropped_total", NULL, dropped0 + 1),
			 dropped0 + 1);
	assert_int_equal(metric(&s2, "sandboxd_pool_waiting", "globex"), 0);
	batch_join(&a);
	struct it_resp r;
	req(&s2, "GET", "/fs/exists?path=dropped", tok2_b, "b", NULL, &r);
	it_expect_status(&r, 200);
	assert_non_null(strstr(r.body, "\"exists\":false"));
	it_resp_free(&r);
}

/* SIGTERM with file work running and waiting: every request is answered
 * (200, or 503 for what waited) or closed, and the server exits 0 (with
 * ASan: nothing leaked). */
static void test_shutdown(void **state)
{
	(void)state;
	/* Four: one runs, three wait; never over the bound of four waiting. */
	struct batch a = {.s = &s2, .url = big_url, .tok = tok2_a, .key = "fair", .n = 4};
	batch_start(&a);
	assert_true(wait_metric_ge(&s2, "sandboxd_pool_waiting", "acme", 2) >= 2);
	assert_int_equal(it_stop(&s2, SIGTERM), 0);
	batch_join(&a);
	assert_int_equal(atomic_load(&a.done), 4);
	assert_int_equal(atomic_load(&a.refused), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pages_300k),
	    cmocka_unit_test(test_old_clients_get_first_page),
	    cmocka_unit_test(test_bad_limits_and_cursors),
	    cmocka_unit_test(test_hot_reads_skip_the_pool),
	    cmocka_unit_test(test_noisy_neighbour),
	    cmocka_unit_test(test_cpu_fair),
	    cmocka_unit_test(test_queue_bound),
	    cmocka_unit_test(test_hangup_drops),
	    cmocka_unit_test(test_shutdown),
	};
	return cmocka_run_group_tests_name("fairness", tests, setup, teardown);
}
