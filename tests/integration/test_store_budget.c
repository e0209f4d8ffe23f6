/* What the store holds for a tenant (issue 26, breach 2): one tenant must
 * not grow the shared sandboxd.db until the store's reserve refuses every
 * tenant. Refused commands leave no copy of themselves (the command is
 * capped before anything is stored, the audit target always), an exec row
 * keeps a small window of its output while GET /exec/{id} still answers
 * the whole window from the spill file, and a tenant over its store
 * budget gets its own 507 while the others keep working. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#define BIG_COMMAND (15u << 20)	    /* under max-buffered-bytes: the body is read */
#define REFUSED_BOUND (1ll << 20)   /* what ten refused commands may add to db + wal */
#define OUTPUT_BOUND (3ll << 20)    /* what seven results may add: a 64 KiB window per stream */
#define OUTPUT_WINDOW (8u << 20)    /* max-output-bytes-cap: the window a result may keep */
#define BUDGET_BYTES (2ll << 20)    /* the small store budget of the third server */
#define BUDGET_COMMAND (100u << 10) /* a command that can run (under MAX_ARG_STRLEN) */

static struct it_server srv;
static char *tok, *tok_globex, *tok_audit;

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), NULL};
	if (it_start(&srv, extra) < 0)
		return -1;
	tok = it_token(&srv, "acme", NULL);
	tok_globex = it_token(&srv, "globex", NULL);
	tok_audit = it_token(&srv, "acme", "audit:read");
	return tok && tok_globex && tok_audit ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish(&srv);
	free(tok);
	free(tok_globex);
	free(tok_audit);
	return rc;
}

static long long file_size(const char *dir, const char *name)
{
	char *p = xasprintf("%s/%s", dir, name);
	struct stat st;
	long long n = stat(p, &st) == 0 ? (long long)st.st_size : 0;
	free(p);
	return n;
}

/* What the store occupies on the disk: the database and its WAL, once
 * the WAL is checkpointed into the database (so its size is the data's,
 * not that of the pages the last transactions happened to rewrite). */
static long long store_bytes(struct it_server *s)
{
	it_sh_quiet("sqlite3 -cmd '.timeout 10000' '%s/sandboxd.db' 'PRAGMA wal_checkpoint(TRUNCATE)'",
		    s->dir);
	return file_size(s->dir, "sandboxd.db") + file_size(s->dir, "sandboxd.db-wal");
}

/* Everything queued for the audit is committed: a request made after the
 * others has its row (the writer commits in order). */
static void audit_settled(struct it_server *s, const char *t)
{
	json_t *r = ex_run(s, t, "true");
	json_decref(r);
	long until = it_now_ms() + 10000;
	for (;;) {
		json_t *v = NULL;
		long st = it_get_json(s, tok_audit, "/audit?route=/exec&limit=1000", &v);
		size_t n = st == 200 ? json_array_size(json_object_get(v, "records")) : 0;
		json_decref(v);
		if (n >= 11 || it_now_ms() > until)
			return;
		usleep(50000);
	}
}

/* Ten 15 MB commands: each is refused before it is stored, and the audit
 * keeps a bounded, visibly truncated target that says how long it was.
 * Before the fix the database grew by about 165 MB. */
static void test_refused_commands_stay_small(void **state)
{
	(void)state;
	char *cmd = xmalloc(BIG_COMMAND + 1);
	memset(cmd, 'x', BIG_COMMAND);
	memcpy(cmd, "echo ", 5);
	cmd[BIG_COMMAND] = '\0';
	long long before = store_bytes(&srv);
	for (int i = 0; i < 10; i++) {
		json_t *res = NULL;
		long st = ex_post(&srv, tok, NULL, json_pack("{s:s}", "command", cmd), &res, NULL);
		json_decref(res);
		assert_true(st == 400 || st == 413);
	}
	free(cmd);
	audit_settled(&srv, tok);
	long long growth = store_bytes(&srv) - before;
	fprintf(stderr, "store growth after ten refused commands: %lld bytes\n", growth);
	assert_true(growth < REFUSED_BOUND);

	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok_audit, "/audit?route=/exec&outcome=error&limit=100", &v), 200);
	json_t *recs = json_object_get(v, "records");
	assert_true(json_array_size(recs) >= 10);
	const char *target = jstr(json_array_get(recs, 0), "target");
	assert_non_null(target);
	assert_true(strlen(target) < 8192);
	char len[32];
	snprintf(len, sizeof len, "%u bytes", BIG_COMMAND);
	assert_non_null(strstr(target, len)); /* the full length is recorded */
	assert_non_null(strstr(target, "truncated"));
	json_decref(v);
}

/* A whole window of output, twice over: the row keeps a small window, the
 * spill file the rest, and GET /exec/{id} answers what POST /exec did.
 * Before the fix six such results grew the database by about 107 MB. */
static void test_large_outputs_leave_the_row(void **state)
{
	(void)state;
	long long before = store_bytes(&srv);
	for (int i = 0; i < 6; i++) {
		char id[32];
		snprintf(id, sizeof id, "big-%d", i);
		/* 16 MB of stdout and 16 MB of stderr, lines numbered so a
		 * window that came from the wrong place shows */
		json_t *res = ex_ok(&srv, tok, NULL,
				    json_pack("{s:s, s:s, s:i, s:i}", "id", id, "command",
					      "seq 1 2000000 | tee /dev/stderr", "max_output_bytes",
					      OUTPUT_WINDOW, "timeout_s", 120));
		assert_true(jtrue(res, "truncated"));
		assert_true(strlen(jstr(res, "stdout")) > OUTPUT_WINDOW - 1024);
		char path[48];
		snprintf(path, sizeof path, "/exec/%s", id);
		json_t *v = NULL;
		assert_int_equal(it_get_json(&srv, tok, path, &v), 200);
		json_t *got = json_object_get(v, "result");
		assert_string_equal(jstr(got, "stdout"), jstr(res, "stdout"));
		assert_string_equal(jstr(got, "stderr"), jstr(res, "stderr"));
		assert_int_equal(jint(got, "stdout_bytes"), jint(res, "stdout_bytes"));
		json_decref(v);
		json_decref(res);
	}
	/* Output under the window but over the row's: the same promise. */
	json_t *res = ex_ok(&srv, tok, NULL,
			    json_pack("{s:s, s:s, s:i}", "id", "mid", "command", "seq 1 300000",
				      "max_output_bytes", OUTPUT_WINDOW));
	assert_false(jtrue(res, "truncated"));
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/exec/mid", &v), 200);
	assert_string_equal(jstr(json_object_get(v, "result"), "stdout"), jstr(res, "stdout"));
	json_decref(v);
	json_decref(res);
	long long growth = store_bytes(&srv) - before;
	fprintf(stderr, "store growth after six large results: %lld bytes\n", growth);
	assert_true(growth < OUTPUT_BOUND);
}

/* A spill file the tenant replaced is not followed: a link to a host
 * file answers the row's window, never the host file. */
static void test_spill_link_not_followed(void **state)
{
	(void)state;
	json_t *res = ex_ok(&srv, tok, NULL,
			    json_pack("{s:s, s:s, s:i}", "id", "linked", "command", "seq 1 300000",
				      "max_output_bytes", OUTPUT_WINDOW));
	json_decref(res);
	json_decref(ex_run(&srv, tok,
			   "cd /workspace/.sandboxd/spill && rm -f linked.stdout && "
			   "ln -s /etc/passwd linked.stdout"));
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/exec/linked", &v), 200);
	const char *out = jstr(json_object_get(v, "result"), "stdout");
	assert_non_null(out);
	assert_null(strstr(out, "root:"));
	assert_true(strncmp(out, "1\n2\n3\n", 6) == 0);
	assert_non_null(strstr(out, "sandboxd"));
	json_decref(v);
}

/* Fill acme's store budget with commands that can run; then acme gets
 * 507 store_budget_exceeded and globex still runs `echo` and writes a
 * file. Before the fix there was no budget (the key was unknown). */
static void test_budget_is_per_tenant(void **state)
{
	(void)state;
	struct it_server b;
	char budget[64];
	snprintf(budget, sizeof budget, "tenant-store-max-bytes=%lld", BUDGET_BYTES);
	const char *const extra[] = {"--set", budget, NULL}; /* the harness gives it a uid base of its own */
	assert_int_equal(it_start(&b, extra), 0);
	char *ta = it_token(&b, "acme", NULL), *tg = it_token(&b, "globex", NULL);
	char *cmd = xmalloc(BUDGET_COMMAND + 1);
	memset(cmd, '#', BUDGET_COMMAND);
	memcpy(cmd, "true ", 5);
	cmd[BUDGET_COMMAND] = '\0';
	long st = 0;
	json_t *res = NULL;
	for (int i = 0; i < 64 && st != 507; i++) {
		json_decref(res);
		res = NULL;
		st = ex_post(&b, ta, NULL, json_pack("{s:s}", "command", cmd), &res, NULL);
		assert_true(st == 200 || st == 507);
	}
	assert_int_equal(st, 507);
	json_t *err = json_object_get(res, "error");
	assert_string_equal(jstr(err, "code"), "store_budget_exceeded");
	json_t *d = json_object_get(err, "details");
	assert_int_equal(jint(d, "limit_bytes"), BUDGET_BYTES);
	assert_true(jint(d, "usage_bytes") >= BUDGET_BYTES);
	json_decref(res);

	/* acme's writes are refused too, its reads are not */
	struct it_resp r;
	assert_int_equal(it_http(&b, "PUT", "/fs/write?path=a.txt", ta, NULL, "a", 1, &r), 0);
	it_expect_error(&r, 507, "store_budget_exceeded");
	it_resp_free(&r);
	assert_int_equal(it_http(&b, "GET", "/fs/exists?path=a.txt", ta, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	it_resp_free(&r);

	/* globex is not acme */
	json_t *e = ex_run(&b, tg, "echo hello");
	assert_string_equal(ex_stdout_ok(e), "hello\n");
	json_decref(e);
	assert_int_equal(it_http(&b, "PUT", "/fs/write?path=g.txt", tg, NULL, "g", 1, &r), 0);
	it_expect_status(&r, 200);
	it_resp_free(&r);

	free(cmd);
	free(ta);
	free(tg);
	assert_int_equal(it_finish(&b), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_refused_commands_stay_small),
	    cmocka_unit_test(test_large_outputs_leave_the_row),
	    cmocka_unit_test(test_spill_link_not_followed),
	    cmocka_unit_test(test_budget_is_per_tenant),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
