/* The registry of backends (sandbox/registry.h): every name found, with
 * what it is; a prefix, a longer name, another case or NULL is not a
 * backend; the lists for messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include "sandbox/registry.h"

static void test_every_name_and_what_it_is(void **state)
{
	(void)state;
	const struct sbx_backend_kind *b = sbx_backend_kind_named("bwrap"),
				      *l = sbx_backend_kind_named("local"),
				      *r = sbx_backend_kind_named("remote"),
				      *s = sbx_backend_kind_named("ssh");
	assert_non_null(b);
	assert_non_null(l);
	assert_non_null(r);
	assert_non_null(s);
	assert_int_equal(b->id, SBX_BK_BWRAP);
	assert_true(b->on_host && b->isolated && b->images);
	assert_int_equal(l->id, SBX_BK_LOCAL);
	assert_true(l->on_host && !l->isolated && !l->images);
	assert_int_equal(r->id, SBX_BK_REMOTE);
	assert_true(!r->on_host && r->isolated);
	assert_int_equal(s->id, SBX_BK_SSH);
	assert_true(!s->on_host && s->isolated);
	assert_ptr_equal(sbx_backend_kind_find("ssh,bwrap", 3), s); /* one item of a list */
}

static void test_what_is_not_a_backend(void **state)
{
	(void)state;
	assert_null(sbx_backend_kind_named(NULL));
	assert_null(sbx_backend_kind_named(""));
	assert_null(sbx_backend_kind_named("bwra"));
	assert_null(sbx_backend_kind_named("bwrapx"));
	assert_null(sbx_backend_kind_named("BWRAP"));
	assert_null(sbx_backend_kind_find("bwrap", 4));
	assert_null(sbx_backend_kind_find(NULL, 0));
}

static void test_lists(void **state)
{
	(void)state;
	char buf[96];
	sbx_backend_kind_list(buf, sizeof buf, true, false);
	assert_string_equal(buf, "\"bwrap\", \"local\", \"remote\" or \"ssh\"");
	sbx_backend_kind_list(buf, sizeof buf, false, true);
	assert_string_equal(buf, "bwrap or local");
	sbx_backend_kind_list(buf, 8, false, false); /* cut, never past the buffer */
	assert_int_equal(strlen(buf), 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_name_and_what_it_is),
	    cmocka_unit_test(test_what_is_not_a_backend),
	    cmocka_unit_test(test_lists),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
