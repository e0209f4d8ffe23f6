/* Who may reach what through the file and session routes, against the real
 * binary: sessions and tenants kept apart, scopes, the audit records'
 * targets, and the session routes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "it_fs.h"

static void test_session_isolation(void **state)
{
	(void)state;
	struct it_resp r;
	/* wire.md's example, to keep it_session_segment honest. */
	char seg[80];
	it_session_segment("chat:42", seg, sizeof seg);
	assert_string_equal(seg, "chat_42-29c5c2leqt");
	fs_put("same.txt", "chat:42", "alpha", 5, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	assert_string_equal(jstr(j, "path"), "/workspace/sessions/chat_42-29c5c2leqt/same.txt");
	json_decref(j);
	it_resp_free(&r);
	put_ok("same.txt", "chat:43", "beta", 4);
	fs_get("read", "same.txt", "chat:42", NULL, &r);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, 5);
	assert_memory_equal(r.body, "alpha", 5);
	it_resp_free(&r);
	fs_get("read", "same.txt", "chat:43", NULL, &r);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, 4);
	assert_memory_equal(r.body, "beta", 4);
	it_resp_free(&r);
	char *h1 = host_in("chat:42", "same.txt"), *h2 = host_in("chat:43", "same.txt");
	assert_host_content(h1, "alpha", 5);
	assert_host_content(h2, "beta", 4);
	free(h1);
	free(h2);
	/* Keys longer than the readable prefix, equal in it, stay apart. */
	char ka[80], kb[80];
	memset(ka, 'k', 40);
	memcpy(kb, ka, 40);
	ka[40] = 'A';
	kb[40] = 'B';
	ka[41] = kb[41] = '\0';
	put_ok("who", ka, "A", 1);
	put_ok("who", kb, "B", 1);
	fs_get("read", "who", ka, NULL, &r);
	it_expect_status(&r, 200);
	assert_memory_equal(r.body, "A", 1);
	it_resp_free(&r);
	/* No header: the session "default". */
	fs_put("d.txt", NULL, "d", 1, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	char *want = wire_in("default", "d.txt");
	assert_string_equal(jstr(j, "path"), want);
	free(want);
	json_decref(j);
	it_resp_free(&r);
}

static void test_tenant_isolation(void **state)
{
	(void)state;
	const char *k = "t-tenant";
	struct it_resp r;
	put_ok("secret.txt", k, "acme only", 9);
	char *abs = wire_in(k, "secret.txt");
	char *missing = wire_in(k, "never-was.txt");
	char *e = enc(abs, strlen(abs)), *em = enc(missing, strlen(missing));

	/* globex asks for acme's absolute path: its own workspace, not found. */
	char *u1 = xasprintf("/fs/read?path=%s", e), *u2 = xasprintf("/fs/read?path=%s", em);
	struct it_resp r2;
	call("GET", u1, tok_globex, "t-globex-own", NULL, NULL, NULL, 0, &r);
	call("GET", u2, tok_globex, "t-globex-own", NULL, NULL, NULL, 0, &r2);
	it_expect_error(&r, 404, "not_found");
	it_expect_error(&r2, 404, "not_found");
	/* The same answer as a missing file, but for the path it names. */
	json_t *j1 = body_json(&r), *j2 = body_json(&r2);
	const char *m1 = json_string_value(json_object_get(json_object_get(j1, "error"), "message"));
	const char *m2 = json_string_value(json_object_get(json_object_get(j2, "error"), "message"));
	char *m1x = xstrndup(m1, (size_t)(strstr(m1, abs) - m1)),
	     *m2x = xstrndup(m2, (size_t)(strstr(m2, missing) - m2));
	assert_string_equal(m1x, m2x);
	free(m1x);
	free(m2x);
	json_decref(j1);
	json_decref(j2);
	it_resp_free(&r);
	it_resp_free(&r2);
	free(u1);
	free(u2);
	static const char *routes[] = {"read_buffer", "stat", "readdir"};
	for (size_t i = 0; i < 3; i++) {
		char *u = xasprintf("/fs/%s?path=%s", routes[i], e);
		call_err("GET", u, tok_globex, "t-globex-own", 404, "not_found");
		free(u);
	}
	u1 = xasprintf("/fs/exists?path=%s", e);
	call("GET", u1, tok_globex, "t-globex-own", NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	assert_non_null(strstr(r.body, "false"));
	it_resp_free(&r);
	free(u1);

	/* globex's listing of /workspace/sessions never shows acme's. */
	call("GET", "/fs/readdir?path=/workspace/sessions", tok_globex, "t-globex-own", NULL, NULL, NULL, 0,
	     &r);
	it_expect_status(&r, 200);
	assert_non_null(strstr(r.body, "t-globex-own-"));
	assert_null(strstr(r.body, "t-tenant-"));
	it_resp_free(&r);

	/* globex's write and rm of the same path touch only globex's workspace. */
	u1 = xasprintf("/fs/write?path=%s", e);
	call("PUT", u1, tok_globex, "t-globex-own", NULL, NULL, "globex", 6, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	free(u1);
	char *mine = host_in(k, "secret.txt");
	assert_host_content(mine, "acme only", 9);
	char seg[80];
	it_session_segment(k, seg, sizeof seg);
	char *theirs = xasprintf("%s/tenants/globex/workspace/sessions/%s/secret.txt", srv.dir, seg);
	assert_host_content(theirs, "globex", 6);
	char *body = xasprintf("{\"path\": \"%s\"}", abs);
	call("POST", "/fs/rm", tok_globex, "t-globex-own", NULL, NULL, body, strlen(body), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	free(body);
	assert_false(host_exists(theirs));
	assert_host_content(mine, "acme only", 9);
	free(theirs);
	free(mine);
	free(abs);
	free(missing);
	free(e);
	free(em);
}

static void test_scopes(void **state)
{
	(void)state;
	const char *k = "t-scopes";
	struct it_resp r;
	put_ok("r.txt", k, "readable", 8);
	/* fs:read reads and cannot change anything. */
	call("GET", "/fs/read?path=r.txt", tok_ro, k, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	call("PUT", "/fs/write?path=ro.txt", tok_ro, k, NULL, NULL, "x", 1, &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	call("PUT", "/fs/write?path=r.txt", tok_ro, k, NULL, NULL, "x", 1, &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	const char *mk = "{\"path\": \"ro-dir\"}", *rm = "{\"path\": \"r.txt\"}",
		   *mv = "{\"from\": \"r.txt\", \"to\": \"moved.txt\"}";
	call("POST", "/fs/mkdir", tok_ro, k, NULL, NULL, mk, strlen(mk), &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	call("POST", "/fs/rm", tok_ro, k, NULL, NULL, rm, strlen(rm), &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	call("POST", "/fs/move", tok_ro, k, NULL, NULL, mv, strlen(mv), &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	char *p = host_in(k, "ro.txt");
	assert_false(host_exists(p));
	free(p);
	p = host_in(k, "ro-dir");
	assert_false(host_exists(p));
	free(p);
	p = host_in(k, "r.txt");
	assert_host_content(p, "readable", 8);
	free(p);
	/* fs:write alone, and audit:read, cannot read. */
	static const char *reads[] = {"read", "read_buffer", "stat", "readdir", "exists"};
	for (size_t i = 0; i < 5; i++) {
		char *u = xasprintf("/fs/%s?path=r.txt", reads[i]);
		call_err("GET", u, tok_wo, k, 403, "insufficient_scope");
		call_err("GET", u, tok_audit, k, 403, "insufficient_scope");
		call_err("GET", u, NULL, k, 401, "unauthorized");
		free(u);
	}
	call("PUT", "/fs/write?path=wo.txt", tok_audit, k, NULL, NULL, "x", 1, &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	call("PUT", "/fs/write?path=wo.txt", tok_wo, k, NULL, NULL, "x", 1, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
}

/* The audit record with this request id, polled for up to 2 s. */
static json_t *find_audit(const char *request_id)
{
	for (int i = 0; i < 40; i++) {
		struct it_resp r;
		char *u = NULL;
		call("GET", "/audit?limit=1000", tok_audit, NULL, NULL, NULL, NULL, 0, &r);
		json_t *j = r.status == 200 ? it_json(&r) : NULL;
		it_resp_free(&r);
		json_t *found = NULL;
		for (;;) {
			size_t k;
			json_t *rec;
			json_array_foreach(json_object_get(j, "records"), k, rec) {
				const char *rid = json_string_value(json_object_get(rec, "request_id"));
				if (rid && strcmp(rid, request_id) == 0) {
					found = json_incref(rec);
					break;
				}
			}
			json_t *next = json_object_get(j, "next");
			if (found || !json_is_string(next))
				break;
			u = xasprintf("/audit?limit=1000&after=%s", json_string_value(next));
			call("GET", u, tok_audit, NULL, NULL, NULL, NULL, 0, &r);
			free(u);
			json_decref(j);
			j = r.status == 200 ? it_json(&r) : NULL;
			it_resp_free(&r);
			if (!j)
				break;
		}
		json_decref(j);
		if (found)
			return found;
		usleep(50000);
	}
	return NULL;
}

static void test_audit_target(void **state)
{
	(void)state;
	const char *k = "t-audit";
	struct it_resp r;
	call("PUT", "/fs/write?path=x/../aud.txt", tok_rw, k, "fs-audit-write", NULL, "audited", 7, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	call("GET", "/fs/read?path=./sub/../aud.txt", tok_rw, k, "fs-audit-read", NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	const char *mv = "{\"from\": \"aud.txt\", \"to\": \"/workspace/sessions/../aud2.txt\"}";
	call("POST", "/fs/move", tok_rw, k, "fs-audit-move", NULL, mv, strlen(mv), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	call("GET", "/fs/read?path=/workspace/../etc/passwd", tok_rw, k, "fs-audit-escape", NULL, NULL, 0,
	     &r);
	it_expect_error(&r, 403, "outside_workspace");
	it_resp_free(&r);
	call("PUT", "/fs/write?path=nope.txt", tok_ro, k, "fs-audit-scope", NULL, "x", 1, &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);

	json_t *a = find_audit("fs-audit-write");
	assert_non_null(a);
	char *want = wire_in(k, "aud.txt");
	assert_string_equal(jstr(a, "target"), want);
	assert_string_equal(jstr(a, "route"), "/fs/write");
	assert_string_equal(jstr(a, "method"), "PUT");
	assert_string_equal(jstr(a, "session"), k);
	assert_string_equal(jstr(a, "outcome"), "ok");
	assert_int_equal(json_integer_value(json_object_get(a, "status")), 200);
	assert_int_equal(json_integer_value(json_object_get(a, "bytes_in")), 7);
	json_decref(a);

	a = find_audit("fs-audit-read");
	assert_non_null(a);
	assert_string_equal(jstr(a, "target"), want);
	assert_int_equal(json_integer_value(json_object_get(a, "bytes_out")), 7);
	json_decref(a);
	free(want);

	a = find_audit("fs-audit-move");
	assert_non_null(a);
	char *from = wire_in(k, "aud.txt");
	char *t = xasprintf("%s -> /workspace/aud2.txt", from);
	assert_string_equal(jstr(a, "target"), t);
	free(t);
	free(from);
	json_decref(a);

	/* A refused escape is recorded with the path that was asked for. */
	a = find_audit("fs-audit-escape");
	assert_non_null(a);
	assert_string_equal(jstr(a, "outcome"), "denied");
	assert_int_equal(json_integer_value(json_object_get(a, "status")), 403);
	assert_string_equal(jstr(a, "target"), "/workspace/../etc/passwd");
	json_decref(a);
	a = find_audit("fs-audit-scope");
	assert_non_null(a);
	assert_string_equal(jstr(a, "outcome"), "denied");
	json_decref(a);
}

static void test_sessions_routes(void **state)
{
	(void)state;
	struct it_resp r;
	const char *k = "gw:del \"me\" \\ {}";
	put_ok("a/b/c.txt", k, "bye", 3);
	/* Links that leave, inside the session, are removed as links. */
	session_symlink(k, outside, "a/esc");
	char *hp = host_in(k, "escf");
	char *secret = xasprintf("%s/secret", outside);
	assert_int_equal(symlink(secret, hp), 0);
	free(secret);
	free(hp);
	drain_events();

	/* Listed with any of audit:read, fs:read, exec. */
	const char *listers[] = {tok_audit, tok_ro, tok_rw};
	for (size_t i = 0; i < 3; i++) {
		call("GET", "/sessions", listers[i], NULL, NULL, NULL, NULL, 0, &r);
		it_expect_status(&r, 200);
		it_expect_header(&r, "Content-Type", "application/json");
		json_t *j = body_json(&r);
		assert_int_equal(json_object_size(j), 1);
		json_t *v = json_object_get(j, "sessions");
		assert_true(json_is_array(v));
		json_t *mine = NULL, *s;
		size_t x;
		json_array_foreach(v, x, s) {
			assert_int_equal(json_object_size(s), 4);
			assert_true(is_rfc3339(jstr(s, "created_at")));
			assert_true(is_rfc3339(jstr(s, "last_used_at")));
			assert_true(strcmp(jstr(s, "created_at"), jstr(s, "last_used_at")) <= 0);
			assert_true(strncmp(jstr(s, "dir"), "/workspace/sessions/", 20) == 0);
			if (strcmp(jstr(s, "key"), k) == 0)
				mine = s;
		}
		assert_non_null(mine);
		char *dir = wire_in(k, "");
		assert_string_equal(jstr(mine, "dir"), dir);
		free(dir);
		json_decref(j);
		it_resp_free(&r);
	}
	call_err("GET", "/sessions", tok_wo, NULL, 403, "insufficient_scope");
	call_err("GET", "/sessions?limit=0", tok_audit, NULL, 400, "bad_request");
	call("GET", "/sessions?limit=1", tok_audit, NULL, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	assert_int_equal(json_array_size(json_object_get(j, "sessions")), 1);
	json_decref(j);
	it_resp_free(&r);
	/* Listing is not using: it creates no session (ops has none). */
	for (int i = 0; i < 2; i++) {
		call("GET", "/sessions", tok_ops, NULL, NULL, NULL, NULL, 0, &r);
		it_expect_status(&r, 200);
		j = body_json(&r);
		assert_int_equal(json_array_size(json_object_get(j, "sessions")), 0);
		json_decref(j);
		it_resp_free(&r);
	}
	/* Another tenant's list never shows acme's. */
	call("GET", "/sessions", tok_globex, NULL, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	assert_null(strstr(r.body, "gw:del"));
	it_resp_free(&r);

	/* Deleting needs fs:write; globex cannot delete acme's. */
	call_err("DELETE", "/session", tok_ro, k, 403, "insufficient_scope");
	call_err("DELETE", "/session", tok_globex, k, 404, "not_found");
	char *dirp = host_in(k, "");
	assert_true(host_exists(dirp));

	call("DELETE", "/session", tok_rw, k, "fs-session-delete", NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_string_equal(jstr(j, "key"), k);
	assert_true(json_is_true(json_object_get(j, "removed")));
	assert_int_equal(json_object_size(j), 2);
	json_decref(j);
	it_resp_free(&r);
	assert_false(host_exists(dirp));
	assert_outside_untouched();
	call("GET", "/sessions", tok_audit, NULL, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	assert_null(strstr(r.body, "gw:del"));
	it_resp_free(&r);
	call_err("DELETE", "/session", tok_rw, k, 404, "not_found");
	call_err("DELETE", "/session", tok_rw, "never-used", 404, "not_found");
	json_t *a = find_audit("fs-session-delete");
	assert_non_null(a);
	char *dw = wire_in(k, "");
	assert_string_equal(jstr(a, "target"), dw);
	free(dw);
	json_decref(a);

	/* Used again, the session comes back with a fresh directory. */
	fs_post("mkdir", k, json_pack("{s:s}", "path", "again"), &r);
	it_expect_status(&r, 201);
	it_resp_free(&r);
	assert_true(host_exists(dirp));
	fs_get("readdir", ".", k, NULL, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_int_equal(json_array_size(json_object_get(j, "entries")), 1);
	json_decref(j);
	it_resp_free(&r);

	/* A session directory that a command replaced by a link to the
	 * outside: the link goes, the outside stays. */
	rm_rf(dirp);
	assert_int_equal(symlink(outside, dirp), 0);
	drain_events();
	call("DELETE", "/session", tok_rw, k, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	assert_false(host_exists(dirp));
	assert_outside_untouched();
	free(dirp);

	/* The default session, by no header. */
	touch_session(NULL);
	hp = host_in("default", "");
	assert_true(host_exists(hp));
	call("DELETE", "/session", tok_rw, NULL, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_string_equal(jstr(j, "key"), "default");
	json_decref(j);
	it_resp_free(&r);
	assert_false(host_exists(hp));
	free(hp);
	/* The workspace and other sessions are left alone. */
	assert_session_content("chat:42", "same.txt", "alpha", 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_session_isolation),
	    cmocka_unit_test(test_tenant_isolation),
	    cmocka_unit_test(test_scopes),
	    cmocka_unit_test(test_audit_target),
	    cmocka_unit_test(test_sessions_routes),
	};
	return cmocka_run_group_tests_name("fs_access", tests, fs_setup, fs_teardown);
}
