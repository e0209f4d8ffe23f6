/* POST /mcp's tool table (routes/mcp_tools.c): every input schema is
 * JSON Schema of an object whose required arguments it describes, every
 * tool needs a scope, and names are unique. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include "auth/auth.h"
#include "routes/mcp.h"

static void test_schemas(void **state)
{
	(void)state;
	assert_int_equal(route_mcp_ntools, 7);
	for (size_t i = 0; i < route_mcp_ntools; i++) {
		const struct route_mcp_tool *t = &route_mcp_tools[i];
		json_error_t e;
		json_t *s = json_loads(t->input_schema, JSON_REJECT_DUPLICATES, &e);
		if (!s)
			fail_msg("%s: %s at %d:%d", t->name, e.text, e.line, e.column);
		assert_string_equal(json_string_value(json_object_get(s, "type")), "object");
		json_t *props = json_object_get(s, "properties");
		assert_true(json_is_object(props));
		assert_true(json_is_false(json_object_get(s, "additionalProperties")));
		size_t k;
		json_t *req;
		json_array_foreach(json_object_get(s, "required"), k, req)
			assert_non_null(json_object_get(props, json_string_value(req)));
		json_decref(s);
		assert_true(t->scope == AUTH_SCOPE_EXEC || t->scope == AUTH_SCOPE_FS_READ ||
			    t->scope == AUTH_SCOPE_FS_WRITE);
		assert_false(t->read_only && t->destructive);
		assert_non_null(t->run);
		assert_ptr_equal(route_mcp_tool_find(t->name), t);
	}
	assert_null(route_mcp_tool_find("nope"));
	assert_null(route_mcp_tool_find(NULL));
	assert_int_equal(route_mcp_tool_find("read_file")->scope, AUTH_SCOPE_FS_READ);
	assert_int_equal(route_mcp_tool_find("write_file")->scope, AUTH_SCOPE_FS_WRITE);
	assert_int_equal(route_mcp_tool_find("cancel")->scope, AUTH_SCOPE_EXEC);
}

static void test_result(void **state)
{
	(void)state;
	json_t *res = route_mcp_result(json_pack("{s:s}", "path", "/workspace/a"), true);
	assert_true(json_is_true(json_object_get(res, "isError")));
	json_t *c = json_array_get(json_object_get(res, "content"), 0);
	assert_string_equal(json_string_value(json_object_get(c, "type")), "text");
	assert_string_equal(json_string_value(json_object_get(c, "text")), "{\"path\":\"/workspace/a\"}");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(res, "structuredContent"), "path")),
	    "/workspace/a");
	json_decref(res);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_schemas),
	    cmocka_unit_test(test_result),
	};
	return cmocka_run_group_tests_name("mcp_tools", tests, NULL, NULL);
}
