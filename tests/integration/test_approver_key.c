/* Approval holds against whoever holds the tenant's key (issue 26, breach
 * 3). With HS256 the gateway holds its tenant's key, and so could mint a
 * token with scope approve and any sub it likes: it approved its own
 * requests. Decisions now come only from the tenant's approver key
 * (`sandboxd tenant set-approver`), a key the gateway does not hold; a
 * token of the main key never approves, and an approver-key token only
 * decides and reads (approve, audit:read), never runs or touches files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

/* The keys as the operator registered them: the gateway holds MAIN. */
#define MAIN_SECRET "gateway-main-secret-0123456789abcdef-0123456789"
#define APPROVER_SECRET "approver-secret-held-by-people-0123456789abcdef"

static struct it_server srv;
static char *tok_gw;

static int write_secret(const char *name, const char *secret)
{
	char *p = xasprintf("%s/%s", srv.dir, name);
	int rc = it_write_file(p, secret, strlen(secret));
	free(p);
	return rc;
}

/* `sandboxd ARGS`: its exit status. */
static int cli(const char *args)
{
	int st = -1;
	free(it_cli(&srv, &st, args));
	return st;
}

static int setup(void **state)
{
	(void)state;
	if (it_start(&srv, NULL) < 0 || write_secret("main.secret", MAIN_SECRET) < 0 ||
	    write_secret("approver.secret", APPROVER_SECRET) < 0)
		return -1;
	char *args = xasprintf("tenant add gw --secret-file '%s/main.secret'", srv.dir);
	int st = -1;
	free(it_cli(&srv, &st, args));
	free(args);
	if (st != 0 || pol_cli(&srv, "gw", "approval=always") != 0)
		return -1;
	/* The gateway's ordinary token, with the sub the gateway used. */
	tok_gw = it_token_hs256(MAIN_SECRET, NULL, "gw", "exec fs:read fs:write", "gateway");
	return tok_gw ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	free(tok_gw);
	return it_finish(&srv);
}

static long post(const char *tok, const char *path, const char *body)
{
	struct it_resp r;
	if (it_http(&srv, "POST", path, tok, NULL, body, body ? strlen(body) : 0, &r) != 0)
		return -1;
	long st = r.status;
	it_resp_free(&r);
	return st;
}

static long decide(const char *tok, const char *id, const char *verb)
{
	char path[128];
	snprintf(path, sizeof path, "/exec/%s/%s", id, verb);
	return post(tok, path, NULL);
}

static void expect_state(const char *id, const char *state)
{
	char path[128];
	snprintf(path, sizeof path, "/exec/%s", id);
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok_gw, path, &v), 200);
	assert_string_equal(jstr(v, "state"), state);
	json_decref(v);
}

/* The gateway asks (wait: false) and tries every token its key can make. */
static void test_main_key_never_approves(void **state)
{
	(void)state;
	json_t *body = NULL;
	assert_int_equal(
	    ex_post(&srv, tok_gw, NULL,
		    json_pack("{s:s, s:s, s:b}", "command", "echo by-the-gateway", "id", "gw-1", "wait", 0),
		    &body, NULL),
	    202);
	json_decref(body);
	const char *const subs[] = {"not-the-gateway", "alice"};
	const char *const scopes[] = {"approve", "approve audit:read", "approve exec"};
	for (size_t i = 0; i < 2; i++) {
		for (size_t k = 0; k < 3; k++) {
			char *t = it_token_hs256(MAIN_SECRET, NULL, "gw", scopes[k], subs[i]);
			assert_non_null(t);
			assert_int_equal(decide(t, "gw-1", "approve"), 403);
			assert_int_equal(decide(t, "gw-1", "reject"), 403);
			free(t);
		}
	}
	expect_state("gw-1", "pending_approval");
}

/* The main key signs a token that claims to be the approver's. */
static void test_main_key_as_approver_kid(void **state)
{
	(void)state;
	char *t = it_token_hs256(MAIN_SECRET, "approver", "gw", "approve", "mallory");
	assert_non_null(t);
	/* The tenant has no approver key yet, and then one that is not MAIN. */
	assert_int_equal(decide(t, "gw-1", "approve"), 401);
	expect_state("gw-1", "pending_approval");
	free(t);
}

/* The CLI mints approve tokens only with the approver key. */
static void test_cli_refuses_without_approver_key(void **state)
{
	(void)state;
	assert_int_not_equal(cli("token --tenant gw --scope approve --sub alice"), 0);
	/* Nor is the main key taken as the approver key. */
	char *args = xasprintf("tenant set-approver gw --secret-file '%s/main.secret'", srv.dir);
	int st = -1;
	free(it_cli(&srv, &st, args));
	free(args);
	assert_int_not_equal(st, 0);
}

static void test_approver_key_approves(void **state)
{
	(void)state;
	char *args = xasprintf("tenant set-approver gw --secret-file '%s/approver.secret'", srv.dir);
	int st = -1;
	free(it_cli(&srv, &st, args));
	free(args);
	assert_int_equal(st, 0);
	char *forged = it_token_hs256(MAIN_SECRET, "approver", "gw", "approve", "mallory");
	assert_int_equal(decide(forged, "gw-1", "approve"), 401);
	free(forged);
	expect_state("gw-1", "pending_approval");
	char *alice = it_token_sub(&srv, "gw", "approve audit:read", "alice");
	assert_non_null(alice);
	/* The server reads the new key within seconds (its tenant cache);
	 * the approver then sees what it decides on: the exec and its list. */
	json_t *v = NULL;
	long until = it_now_ms() + 15000;
	while (it_get_json(&srv, alice, "/exec/gw-1", &v) != 200 && it_now_ms() < until) {
		json_decref(v);
		v = NULL;
		usleep(100000);
	}
	assert_non_null(v);
	assert_string_equal(jstr(v, "command"), "echo by-the-gateway");
	json_decref(v);
	assert_int_equal(it_get_json(&srv, alice, "/execs?state=pending_approval", &v), 200);
	assert_int_equal(json_array_size(json_object_get(v, "execs")), 1);
	json_decref(v);
	assert_int_equal(decide(alice, "gw-1", "approve"), 200);
	v = ex_wait_state(&srv, tok_gw, "gw-1", "exited", 20000);
	assert_non_null(v);
	assert_string_equal(jstr(json_object_get(v, "approval"), "decided_by"), "alice");
	assert_string_equal(jstr(json_object_get(v, "result"), "stdout"), "by-the-gateway\n");
	json_decref(v);
	free(alice);
}

/* An approver-key token decides and reads; it never runs commands or
 * touches files, whatever scopes it claims. */
static void test_approver_key_cannot_run(void **state)
{
	(void)state;
	char *cli_tok = it_token_sub(&srv, "gw", "approve audit:read", "alice");
	char *greedy = it_token_hs256(APPROVER_SECRET, "approver", "gw",
				      "approve audit:read exec fs:read fs:write admin", "alice");
	char *bare = it_token_hs256(APPROVER_SECRET, "approver", "gw", NULL, "alice");
	assert_non_null(cli_tok);
	assert_non_null(greedy);
	assert_non_null(bare);
	const char *const toks[] = {cli_tok, greedy, bare};
	for (size_t i = 0; i < 3; i++) {
		struct it_resp r;
		assert_int_equal(post(toks[i], "/exec", "{\"command\": \"touch approver-was-here\"}"), 403);
		assert_int_equal(post(toks[i], "/code", "{\"language\": \"python\", \"code\": \"print(1)\"}"),
				 403);
		assert_int_equal(
		    it_http(&srv, "PUT", "/fs/write?path=approver.txt", toks[i], NULL, "x", 1, &r), 0);
		it_expect_status(&r, 403);
		it_resp_free(&r);
		assert_int_equal(it_http(&srv, "GET", "/fs/read?path=.", toks[i], NULL, NULL, 0, &r), 0);
		it_expect_status(&r, 403);
		it_resp_free(&r);
		assert_int_equal(post(toks[i], "/fs/mkdir", "{\"path\": \"approver-dir\"}"), 403);
	}
	assert_false(it_ws_exists(&srv, "gw", "approver.txt"));
	/* The CLI refuses to mint an approver token with other scopes. */
	assert_int_not_equal(cli("token --tenant gw --scope 'approve exec' --sub alice"), 0);
	free(cli_tok);
	free(greedy);
	free(bare);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_main_key_never_approves),
	    cmocka_unit_test(test_main_key_as_approver_kid),
	    cmocka_unit_test(test_cli_refuses_without_approver_key),
	    cmocka_unit_test(test_approver_key_approves),
	    cmocka_unit_test(test_approver_key_cannot_run),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
