/* common/keytab.h: find, find-or-add (one node per key, zeroed, keys cut
 * to KEYTAB_KEY - 1 bytes), remove, and a walk that meets every node once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/keytab.h"

struct rec {
	struct keytab_node node;
	int value;
};

static void test_find_or_add(void **state)
{
	(void)state;
	struct keytab t = {0};
	assert_null(keytab_find(&t, "a"));
	struct rec *a = (struct rec *)keytab_find_or_add(&t, "a", sizeof *a);
	assert_non_null(a);
	assert_string_equal(a->node.key, "a");
	assert_int_equal(a->value, 0);
	a->value = 7;
	assert_ptr_equal(keytab_find_or_add(&t, "a", sizeof *a), &a->node);
	assert_ptr_equal(keytab_find(&t, "a"), &a->node);
	assert_null(keytab_find(&t, "b"));
	keytab_remove(&t, &a->node);
	assert_null(keytab_find(&t, "a"));
	assert_null(keytab_first(&t));
	free(a);
}

static void test_long_keys_cut(void **state)
{
	(void)state;
	struct keytab t = {0};
	char k1[100], k2[100];
	memset(k1, 'x', sizeof k1 - 1);
	k1[sizeof k1 - 1] = '\0';
	memcpy(k2, k1, sizeof k2);
	k2[80] = 'y'; /* differs past the cut: the same key */
	struct keytab_node *n = keytab_find_or_add(&t, k1, sizeof(struct rec));
	assert_int_equal(strlen(n->key), KEYTAB_KEY - 1);
	assert_ptr_equal(keytab_find(&t, k1), n);
	assert_ptr_equal(keytab_find_or_add(&t, k2, sizeof(struct rec)), n);
	keytab_remove(&t, n);
	free(n);
}

static void test_walk_and_remove(void **state)
{
	(void)state;
	struct keytab t = {0};
	enum { N = 1000 };
	char key[16];
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof key, "tenant-%d", i);
		((struct rec *)keytab_find_or_add(&t, key, sizeof(struct rec)))->value = i;
	}
	static char seen[N];
	int n = 0;
	for (const struct keytab_node *p = keytab_first(&t); p; p = keytab_next(&t, p), n++) {
		const struct rec *r = (const struct rec *)p;
		assert_false(seen[r->value]);
		seen[r->value] = 1;
	}
	assert_int_equal(n, N);
	for (struct keytab_node *p; (p = keytab_first(&t)); n--) {
		keytab_remove(&t, p);
		free(p);
	}
	assert_int_equal(n, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_find_or_add),
	    cmocka_unit_test(test_long_keys_cut),
	    cmocka_unit_test(test_walk_and_remove),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
