/* POST /mcp (routes/mcp.c) over HTTP, as the spec describes it: one
 * request of each answer the operation has (200 JSON-RPC results and
 * errors, 202, 400, 401 naming the RFC 9728 metadata, 403, 405, 413) and
 * the metadata documents, so that contract_responses validates them
 * against openapi.yaml. The MCP scenario itself, through the official
 * SDK's client, is tests/mcp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "it_exec.h"

static struct it_server srv;
static char *tok;	/* acme, default scopes */
static char *tok_audit; /* acme audit:read: none of the tools' scopes */
static const struct it_tok toks[] = {
    {&tok, "acme", NULL},
    {&tok_audit, "acme", "audit:read"},
};

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), NULL};
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

static const char *const hdrs[] = {"Content-Type: application/json",
				   "Accept: application/json, text/event-stream", "X-Session-Key: it-mcp",
				   "Mcp-Session-Id: it-session", NULL};

/* POST /mcp with body; the response parsed (NULL for an empty body). */
static json_t *mcp(const char *token, const char *body, long status)
{
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", "/mcp", token, hdrs, body, strlen(body), &r), 0);
	if (r.status != status)
		it_show(&r);
	assert_int_equal(r.status, status);
	json_t *j = r.len ? it_json(&r) : NULL;
	it_resp_free(&r);
	return j;
}

/* tools/call of name with args (JSON text): its result. */
static json_t *call(const char *name, const char *args)
{
	char body[1024];
	snprintf(body, sizeof body,
		 "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
		 "\"arguments\":%s}}",
		 name, name, args);
	json_t *j = mcp(tok, body, 200);
	json_t *res = json_incref(json_object_get(j, "result"));
	assert_non_null(res);
	json_decref(j);
	return res;
}

static const char *text0(json_t *res)
{
	return json_string_value(json_object_get(json_array_get(json_object_get(res, "content"), 0), "text"));
}

static void test_lifecycle(void **state)
{
	(void)state;
	struct it_resp r;
	const char *init =
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
	    "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"it\",\"version\":\"1\"}}}";
	assert_int_equal(it_http(&srv, "POST", "/mcp", tok, hdrs, init, strlen(init), &r), 0);
	assert_int_equal(r.status, 200);
	char *sid = it_header(&r, "Mcp-Session-Id");
	assert_non_null(sid);
	assert_int_equal(strlen(sid), 32);
	free(sid);
	json_t *j = it_json(&r);
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(j, "result"), "protocolVersion")),
	    "2025-06-18");
	json_decref(j);
	it_resp_free(&r);
	assert_null(mcp(tok, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", 202));
	j = mcp(tok, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", 200);
	assert_int_equal(json_array_size(json_object_get(json_object_get(j, "result"), "tools")), 7);
	json_decref(j);
	json_decref(mcp(tok, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}", 200));
}

static void test_tools(void **state)
{
	(void)state;
	json_t *res = call("write_file", "{\"path\":\"n.txt\",\"content\":\"42\"}");
	assert_false(json_is_true(json_object_get(res, "isError")));
	json_decref(res);
	res = call("read_file", "{\"path\":\"n.txt\"}");
	assert_string_equal(text0(res), "42");
	json_decref(res);
	res = call("stat", "{\"path\":\"n.txt\"}");
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(res, "structuredContent"), "size")), 2);
	json_decref(res);
	res = call("list_dir", "{}");
	json_decref(res);
	res = call("exec", "{\"command\":\"cat n.txt\"}");
	assert_string_equal(text0(res), "{\"stdout\":\"42\",\"stderr\":\"\",\"exit_code\":0}");
	const char *id = json_string_value(json_object_get(json_object_get(res, "structuredContent"), "id"));
	char args[128];
	snprintf(args, sizeof args, "{\"id\":\"%s\"}", id);
	json_decref(res);
	res = call("cancel", args); /* finished: 409 conflict as a tool error */
	assert_true(json_is_true(json_object_get(res, "isError")));
	json_decref(res);
	res = call("read_file", "{\"path\":\"../../x\"}");
	assert_true(json_is_true(json_object_get(res, "isError")));
	json_decref(res);
}

static long rpc_code(json_t *j)
{
	long c = (long)json_integer_value(json_object_get(json_object_get(j, "error"), "code"));
	json_decref(j);
	return c;
}

static void test_errors(void **state)
{
	(void)state;
	assert_int_equal(rpc_code(mcp(tok, "[]", 400)), -32600);
	assert_int_equal(rpc_code(mcp(tok, "{", 400)), -32700);
	assert_int_equal(
	    rpc_code(mcp(tok, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"prompts/list\"}", 200)), -32601);
	assert_int_equal(
	    rpc_code(mcp(
		tok, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"x\"}}",
		200)),
	    -32602);
	json_decref(mcp(tok_audit, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", 403));

	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", "/mcp", NULL, hdrs, "{}", 2, &r), 0);
	it_expect_status(&r, 401);
	char *www = it_header(&r, "WWW-Authenticate");
	char want[160];
	snprintf(want, sizeof want,
		 "Bearer error=\"invalid_token\", "
		 "resource_metadata=\"%s/.well-known/oauth-protected-resource/mcp\"",
		 srv.base);
	assert_string_equal(www, want);
	free(www);
	it_resp_free(&r);

	assert_int_equal(it_http(&srv, "GET", "/mcp", tok, NULL, NULL, 0, &r), 0);
	it_expect_error(&r, 405, "method_not_allowed");
	it_resp_free(&r);

	size_t big = (16u << 20) + 16;
	char *body = xmalloc(big);
	memset(body, ' ', big);
	assert_int_equal(it_http(&srv, "POST", "/mcp", tok, hdrs, body, big, &r), 0);
	it_expect_error(&r, 413, "too_large");
	it_resp_free(&r);
	free(body);
}

static void test_metadata(void **state)
{
	(void)state;
	const char *paths[] = {"/.well-known/oauth-protected-resource",
			       "/.well-known/oauth-protected-resource/mcp"};
	for (size_t i = 0; i < 2; i++) {
		struct it_resp r;
		assert_int_equal(it_http(&srv, "GET", paths[i], NULL, NULL, NULL, 0, &r), 0);
		it_expect_status(&r, 200);
		json_t *j = it_json(&r);
		char want[96];
		snprintf(want, sizeof want, "%s%s", srv.base, i ? "/mcp" : "");
		assert_string_equal(json_string_value(json_object_get(j, "resource")), want);
		json_decref(j);
		it_resp_free(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lifecycle),
	    cmocka_unit_test(test_tools),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_metadata),
	};
	return cmocka_run_group_tests_name("mcp", tests, setup, teardown);
}
