/* JSON-RPC 2.0 messages as POST /mcp classifies them (http/jsonrpc.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "http/jsonrpc.h"

static int parse(const char *text, struct http_jsonrpc_msg *m, const char **why)
{
	return http_jsonrpc_parse(text, strlen(text), m, why);
}

/* text is refused with code, and nothing is left to free. */
static void refused(const char *text, int code)
{
	struct http_jsonrpc_msg m;
	const char *why = NULL;
	int got = parse(text, &m, &why);
	if (got != code)
		fail_msg("%.80s: %d, not %d", text, got, code);
	assert_non_null(why);
	assert_null(m.root);
	assert_null(m.id);
	assert_null(m.method);
}

static void test_request(void **state)
{
	(void)state;
	struct http_jsonrpc_msg m;
	const char *why = NULL;
	assert_int_equal(
	    parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\"}}",
		  &m, &why),
	    0);
	assert_int_equal(m.kind, HTTP_JSONRPC_REQUEST);
	assert_string_equal(m.method, "tools/call");
	assert_int_equal(json_integer_value(m.id), 7);
	assert_string_equal(json_string_value(json_object_get(m.params, "name")), "exec");
	http_jsonrpc_clear(&m);
	assert_null(m.root);

	/* A string id; params may be absent. */
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"ping\"}", &m, &why), 0);
	assert_int_equal(m.kind, HTTP_JSONRPC_REQUEST);
	assert_string_equal(json_string_value(m.id), "a");
	assert_null(m.params);
	http_jsonrpc_clear(&m);
}

static void test_notification_and_response(void **state)
{
	(void)state;
	struct http_jsonrpc_msg m;
	const char *why = NULL;
	assert_int_equal(
	    parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":3}}",
		  &m, &why),
	    0);
	assert_int_equal(m.kind, HTTP_JSONRPC_NOTIFICATION);
	assert_null(m.id);
	http_jsonrpc_clear(&m);

	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", &m, &why), 0);
	assert_int_equal(m.kind, HTTP_JSONRPC_RESPONSE);
	assert_null(m.method);
	http_jsonrpc_clear(&m);
	assert_int_equal(
	    parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,\"message\":\"x\"}}", &m, &why), 0);
	assert_int_equal(m.kind, HTTP_JSONRPC_RESPONSE);
	http_jsonrpc_clear(&m);
}

static void test_parse_errors(void **state)
{
	(void)state;
	refused("", HTTP_JSONRPC_PARSE);
	refused("{", HTTP_JSONRPC_PARSE);
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}",
		HTTP_JSONRPC_PARSE); /* a repeated key */
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}", HTTP_JSONRPC_PARSE); /* not UTF-8 */
	/* Deeper than jansson's bound: refused, not a stack overflow. */
	size_t depth = 100000;
	char *deep = malloc(2 * depth + 1);
	memset(deep, '[', depth);
	memset(deep + depth, ']', depth);
	deep[2 * depth] = '\0';
	refused(deep, HTTP_JSONRPC_PARSE);
	free(deep);
}

static void test_invalid(void **state)
{
	(void)state;
	refused("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
		HTTP_JSONRPC_INVALID_REQUEST); /* a batch */
	refused("[]", HTTP_JSONRPC_INVALID_REQUEST);
	refused("\"ping\"", HTTP_JSONRPC_INVALID_REQUEST);
	refused("{\"id\":1,\"method\":\"ping\"}", HTTP_JSONRPC_INVALID_REQUEST); /* no jsonrpc */
	refused("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", HTTP_JSONRPC_INVALID_REQUEST);
	refused("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}",
		HTTP_JSONRPC_INVALID_REQUEST); /* MCP: no null */
	refused("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", HTTP_JSONRPC_INVALID_REQUEST);
	refused("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", HTTP_JSONRPC_INVALID_REQUEST);
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", HTTP_JSONRPC_INVALID_REQUEST);
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", HTTP_JSONRPC_INVALID_REQUEST);
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\\u0000b\"}",
		HTTP_JSONRPC_PARSE); /* jansson: no NUL */
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[1]}",
		HTTP_JSONRPC_INVALID_REQUEST);
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"result\":{}}",
		HTTP_JSONRPC_INVALID_REQUEST);
	refused("{\"jsonrpc\":\"2.0\",\"id\":1}", HTTP_JSONRPC_INVALID_REQUEST); /* neither */
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{}}", HTTP_JSONRPC_INVALID_REQUEST);
	refused("{\"jsonrpc\":\"2.0\",\"result\":1}",
		HTTP_JSONRPC_INVALID_REQUEST); /* a response without id */
	char longm[300];
	snprintf(longm, sizeof longm, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%0200d\"}", 0);
	refused(longm, HTTP_JSONRPC_INVALID_REQUEST);
}

static void test_answers(void **state)
{
	(void)state;
	json_t *id = json_integer(4);
	json_t *res = http_jsonrpc_result(id, json_pack("{s:i}", "x", 1));
	char *t = json_dumps(res, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(t, "{\"id\":4,\"jsonrpc\":\"2.0\",\"result\":{\"x\":1}}");
	free(t);
	json_decref(res);
	json_t *err = http_jsonrpc_error(NULL, HTTP_JSONRPC_PARSE, "bad", NULL);
	t = json_dumps(err, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(
	    t, "{\"error\":{\"code\":-32700,\"message\":\"bad\"},\"id\":null,\"jsonrpc\":\"2.0\"}");
	free(t);
	json_decref(err);
	err = http_jsonrpc_error(id, HTTP_JSONRPC_INVALID_PARAMS, "m", json_string("d"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(err, "error"), "data")), "d");
	json_decref(err);
	assert_int_equal(id->refcount, 1); /* copied, not taken */
	json_decref(id);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_request),	 cmocka_unit_test(test_notification_and_response),
	    cmocka_unit_test(test_parse_errors), cmocka_unit_test(test_invalid),
	    cmocka_unit_test(test_answers),
	};
	return cmocka_run_group_tests_name("jsonrpc", tests, NULL, NULL);
}
