/* The one errno -> wire error table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "common/errors.h"
#include "http/errors.h"

static void expect(int code, int status, const char *wire)
{
	struct http_wire_error w = http_wire_error(code);
	assert_int_equal(w.status, status);
	assert_string_equal(w.code, wire);
}

static void test_table(void **state)
{
	(void)state;
	expect(-EINVAL, 400, "bad_request");
	expect(-SBX_E_UNAUTHORIZED, 401, "unauthorized");
	expect(-SBX_E_SCOPE, 403, "insufficient_scope");
	expect(-EXDEV, 403, "outside_workspace");
	expect(-SBX_E_FORBIDDEN, 403, "forbidden");
	expect(-SBX_E_SPECIAL, 403, "forbidden");
	expect(-SBX_E_ROOT, 403, "forbidden");
	expect(-EACCES, 403, "forbidden");
	expect(-ENOENT, 404, "not_found");
	expect(-SBX_E_PARENT_MISSING, 404, "parent_missing");
	expect(-SBX_E_METHOD, 405, "method_not_allowed");
	expect(-EEXIST, 409, "exists");
	expect(-ENOTEMPTY, 409, "not_empty");
	expect(-ENOTDIR, 409, "not_a_directory");
	expect(-EISDIR, 409, "is_a_directory");
	expect(-SBX_E_CONFLICT, 409, "conflict");
	expect(-SBX_E_TOKEN_USED, 410, "token_used");
	expect(-SBX_E_TOKEN_EXPIRED, 410, "token_expired");
	expect(-EFBIG, 413, "too_large");
	expect(-E2BIG, 413, "too_large");
	expect(-SBX_E_NOT_TEXT, 422, "not_text");
	expect(-SBX_E_TOO_MANY, 429, "too_many_requests");
	expect(-SBX_E_BACKEND, 503, "backend_unavailable");
	expect(-SBX_E_STORE, 503, "store_unavailable");
	expect(-ENOSPC, 507, "insufficient_storage");
	expect(-EDQUOT, 507, "insufficient_storage");
	expect(-ENOSYS, 503, "backend_unavailable");
	expect(-EIO, 500, "internal");
	expect(-9999, 500, "internal");
}

static void test_hints(void **state)
{
	(void)state;
	/* 413 names the streaming routes, 422 names read_buffer, 503s say how to retry. */
	assert_non_null(strstr(http_wire_error(-EFBIG).retry_hint, "stream"));
	assert_non_null(strstr(http_wire_error(-SBX_E_NOT_TEXT).retry_hint, "/fs/read_buffer"));
	assert_non_null(http_wire_error(-SBX_E_BACKEND).retry_hint);
	assert_non_null(http_wire_error(-SBX_E_STORE).retry_hint);
	assert_null(http_wire_error(-ENOENT).retry_hint);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_table),
	    cmocka_unit_test(test_hints),
	};
	return cmocka_run_group_tests_name("errors", tests, NULL, NULL);
}
