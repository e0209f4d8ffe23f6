/* Issue 26 item 10: a tenant removed and added again under the same name
 * is a new tenant. Against a running server (the CLI's remove and add are
 * another process): the new acme finds an empty workspace, its old exec
 * ids answer 404, its audit holds none of the old rows, it runs under a
 * uid the old one never had and no process of the old one survives; the
 * old leftovers are moved where no tenant reaches them. `tenant add`
 * refuses a name with leftovers unless told what to do with them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#define DEADLINE_MS 20000

static struct it_server srv;

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), NULL};
	return it_start(&srv, extra);
}

static int teardown(void **state)
{
	(void)state;
	return it_finish(&srv);
}

static long uid_of(const char *tok)
{
	json_t *r = ex_run(&srv, tok, "id -u");
	long u = strtol(ex_stdout_ok(r), NULL, 10);
	json_decref(r);
	return u;
}

/* The highest audit id tok can see (0: none). */
static long long audit_max(const char *tok, long long *min)
{
	json_t *j = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/audit?limit=1000", &j), 200);
	long long hi = 0, lo = 0;
	size_t k;
	json_t *rec;
	json_array_foreach(json_object_get(j, "records"), k, rec) {
		long long id = json_integer_value(json_object_get(rec, "id"));
		hi = id > hi ? id : hi;
		lo = lo == 0 || id < lo ? id : lo;
	}
	json_decref(j);
	if (min)
		*min = lo;
	return hi;
}

/* A token of the re-added tenant works once the server has seen the
 * change (its cache holds a tenant for a few seconds). */
static char *wait_new_token(const char *tenant)
{
	char *tok = it_token(&srv, tenant, "exec fs:read fs:write audit:read");
	assert_non_null(tok);
	long until = it_now_ms() + DEADLINE_MS;
	for (;;) {
		struct it_resp r;
		assert_int_equal(it_http(&srv, "GET", "/fs/exists?path=.", tok, NULL, NULL, 0, &r), 0);
		long st = r.status;
		it_resp_free(&r);
		if (st == 200)
			return tok;
		assert_true(it_now_ms() < until);
		usleep(100000);
	}
}

/* The tenant feed (GET /events) from its first kept event, read until an
 * event of exec `until` arrives (or the deadline): the replay, in order. */
struct grab {
	char *buf;
	size_t len;
	const char *until;
};

static size_t grab_write(char *p, size_t sz, size_t nm, void *ud)
{
	struct grab *g = ud;
	size_t n = sz * nm;
	g->buf = xrealloc(g->buf, g->len + n + 1);
	memcpy(g->buf + g->len, p, n);
	g->len += n;
	g->buf[g->len] = '\0';
	return strstr(g->buf, g->until) ? 0 : n; /* 0 ends the transfer */
}

static char *feed_until(const char *tok, const char *until)
{
	struct grab g = {.buf = xstrdup(""), .until = until};
	char *url = xasprintf("%s/events", srv.base);
	char *auth = xasprintf("Authorization: Bearer %s", tok);
	struct curl_slist *h = curl_slist_append(NULL, auth);
	h = curl_slist_append(h, "Last-Event-ID: 1");
	CURL *c = curl_easy_init();
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, grab_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &g);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)DEADLINE_MS);
	curl_easy_perform(c);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	free(auth);
	free(url);
	return g.buf;
}

static int entries(const char *dir) /* -1: no such directory */
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return n;
}

static void test_readded_is_new(void **state)
{
	(void)state;
	char *old = it_token(&srv, "acme", "exec fs:read fs:write audit:read");
	struct it_resp r;
	assert_int_equal(it_http(&srv, "PUT", "/fs/write?path=secret.txt", old, NULL, "old acme", 8, &r), 0);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	json_t *x = ex_ok(&srv, old, NULL, json_pack("{s:s, s:s}", "command", "echo old", "id", "old-exec"));
	json_decref(x);
	long old_uid = uid_of(old);
	/* A background command of the old tenant, running when it goes. */
	assert_int_equal(
	    ex_post(&srv, old, NULL,
		    json_pack("{s:s, s:s, s:b}", "command", "sleep 6061", "id", "old-bg", "background", 1),
		    NULL, NULL),
	    202);
	long until = it_now_ms() + DEADLINE_MS;
	while (host_procs_of_uid((uid_t)old_uid, "sleep", "6061") < 1 && it_now_ms() < until)
		usleep(50000);
	assert_true(host_procs_of_uid((uid_t)old_uid, "sleep", "6061") >= 1);
	long long old_max = audit_max(old, NULL);
	assert_true(old_max > 0);

	int st = -1;
	char *out = it_cli(&srv, &st, "tenant remove acme");
	assert_int_equal(st, 0);
	free(out);
	out = it_cli(&srv, &st, "tenant add acme");
	assert_int_equal(st, 0);
	free(out);
	char *tok = wait_new_token("acme");

	/* Its workspace is empty, and the old file is nowhere it can read. */
	assert_int_equal(it_http(&srv, "GET", "/fs/read?path=secret.txt", tok, NULL, NULL, 0, &r), 0);
	it_expect_error(&r, 404, "not_found");
	it_resp_free(&r);
	char *ws = xasprintf("%s/tenants/acme/workspace", srv.dir);
	assert_int_equal(it_sh("test -z \"$(find %s -type f)\"", ws), 0);
	free(ws);
	/* The old exec is not its exec. */
	it_expect_error_at(&srv, "GET", "/exec/old-exec", tok, 404, "not_found");
	it_expect_error_at(&srv, "GET", "/exec/old-bg", tok, 404, "not_found"); /* was running */
	json_t *list = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/execs", &list), 200);
	char *lt = json_dumps(list, 0);
	assert_null(strstr(lt, "old-"));
	free(lt);
	json_decref(list);
	/* None of the old audit rows: every one it sees is newer. */
	long long lo = 0;
	audit_max(tok, &lo);
	assert_true(lo == 0 || lo > old_max);
	/* The feed's replay holds the new life's events, none of the old's. */
	x = ex_ok(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", "echo new", "id", "new-exec"));
	json_decref(x);
	char *feed = feed_until(tok, "new-exec");
	assert_non_null(strstr(feed, "new-exec"));
	assert_null(strstr(feed, "old-exec"));
	free(feed);
	/* Another uid, and nothing of the old one still runs. */
	long new_uid = uid_of(tok);
	assert_true(new_uid != old_uid);
	assert_int_equal(host_procs_wait_gone((uid_t)old_uid, "sleep", "6061", DEADLINE_MS), 0);
	/* The old token is refused (another key). */
	it_expect_error_at(&srv, "GET", "/fs/exists?path=.", old, 401, "unauthorized");
	free(old);
	free(tok);
}

/* A name whose directory is still there (say, removed before this
 * release, or by hand) is refused until the operator says what to do. */
static void test_add_refuses_leftovers(void **state)
{
	(void)state;
	char *dir = xasprintf("%s/tenants/zed/workspace", srv.dir);
	assert_int_equal(it_sh("mkdir -p %s && echo left > %s/left.txt", dir, dir), 0);
	int st = -1;
	char *out = it_cli(&srv, &st, "tenant add zed");
	assert_int_not_equal(st, 0);
	free(out);
	assert_int_equal(access(dir, F_OK), 0); /* untouched */

	out = it_cli(&srv, &st, "tenant add zed --reuse-leftovers");
	assert_int_equal(st, 0);
	free(out);
	char *tok = wait_new_token("zed");
	json_t *x = ex_run(&srv, tok, "cat /workspace/left.txt");
	assert_string_equal(ex_stdout_ok(x), "left\n");
	json_decref(x);
	free(tok);

	/* Removed (moved aside), the name is free again; with --fresh a
	 * directory put back is moved aside too. */
	free(it_cli(&srv, &st, "tenant remove zed"));
	assert_int_equal(st, 0);
	assert_int_not_equal(access(dir, F_OK), 0);
	assert_int_equal(it_sh("mkdir -p %s && echo again > %s/again.txt", dir, dir), 0);
	out = it_cli(&srv, &st, "tenant add zed --fresh");
	assert_int_equal(st, 0);
	free(out);
	tok = wait_new_token("zed");
	x = ex_run(&srv, tok, "test -e /workspace/again.txt || echo gone");
	assert_string_equal(ex_stdout_ok(x), "gone\n");
	json_decref(x);
	free(tok);
	free(dir);
}

/* What remove moved aside is under the data directory, out of every
 * tenant's reach (0700, the server's), and --purge deletes instead. */
static void test_remove_moves_aside_or_purges(void **state)
{
	(void)state;
	int st = -1;
	free(it_cli(&srv, &st, "tenant add kit"));
	assert_int_equal(st, 0);
	char *tok = wait_new_token("kit");
	struct it_resp r;
	assert_int_equal(it_http(&srv, "PUT", "/fs/write?path=k.txt", tok, NULL, "k", 1, &r), 0);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	free(tok);
	char *removed = xasprintf("%s/removed", srv.dir);
	int before = entries(removed);
	free(it_cli(&srv, &st, "tenant remove kit --purge"));
	assert_int_equal(st, 0);
	assert_int_equal(entries(removed), before < 0 ? 0 : before);
	char *tdir = xasprintf("%s/tenants/kit", srv.dir);
	assert_int_not_equal(access(tdir, F_OK), 0);
	struct stat sb;
	assert_int_equal(stat(removed, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0700);
	free(tdir);
	free(removed);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_readded_is_new),
	    cmocka_unit_test(test_add_refuses_leftovers),
	    cmocka_unit_test(test_remove_moves_aside_or_purges),
	};
	return cmocka_run_group_tests_name("tenantlife", tests, setup, teardown);
}
