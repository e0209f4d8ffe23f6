/* libsandboxd's reading of a ShellResult (client/json.c), without a
 * server: egress_denied, which only a command with network carries, and
 * what a server that breaks the contract may send instead. The parse is
 * the one every exec path goes through (the buffered answer, the exit
 * event, GET /exec/{id} and /execs); leaks are ASan's to find. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "client/internal.h"

static void parse(const char *text, struct sbxc_result *r)
{
	json_error_t e;
	json_t *o = json_loads(text, 0, &e);
	if (!o)
		fail_msg("bad test JSON: %s", e.text);
	sbxc__result_from(o, r);
	json_decref(o);
}

/* A command without network: no egress_denied at all, nothing to free. */
static void test_without_network(void **state)
{
	(void)state;
	struct sbxc_result r;
	parse("{\"id\":\"x\",\"exit_code\":0,\"stdout\":\"hi\\n\",\"stderr\":\"\"}", &r);
	assert_false(r.networked);
	assert_null(r.egress_denied);
	assert_int_equal(r.n_egress_denied, 0);
	sbxc_result_clear(&r);
	/* null is not an array: the server never sends it, nor says networked */
	parse("{\"exit_code\":0,\"egress_denied\":null}", &r);
	assert_false(r.networked);
	sbxc_result_clear(&r);
}

/* With network and nothing refused: networked, an empty list. */
static void test_nothing_refused(void **state)
{
	(void)state;
	struct sbxc_result r;
	parse("{\"exit_code\":0,\"egress_denied\":[]}", &r);
	assert_true(r.networked);
	assert_null(r.egress_denied);
	assert_int_equal(r.n_egress_denied, 0);
	sbxc_result_clear(&r);
	assert_false(r.networked); /* cleared means zeroed */
}

static void test_refused(void **state)
{
	(void)state;
	struct sbxc_result r;
	parse("{\"exit_code\":7,\"egress_denied\":["
	      "{\"dest\":\"evil.example:443\",\"reason\":\"not in the allowlist\"},"
	      "{\"dest\":\"udp 203.0.113.5:443\",\"reason\":\"UDP is not relayed\"},"
	      "{\"dest\":\"b\\u00fccher.test:80\",\"reason\":\"r\\u00e9sum\\u00e9\"}]}",
	      &r);
	assert_true(r.networked);
	assert_int_equal(r.exit_code, 7);
	assert_int_equal(r.n_egress_denied, 3);
	assert_string_equal(r.egress_denied[0].dest, "evil.example:443");
	assert_string_equal(r.egress_denied[0].reason, "not in the allowlist");
	assert_string_equal(r.egress_denied[1].dest, "udp 203.0.113.5:443");
	assert_string_equal(r.egress_denied[1].reason, "UDP is not relayed");
	assert_string_equal(r.egress_denied[2].dest, "b\xc3\xbc"
						     "cher.test:80");
	assert_string_equal(r.egress_denied[2].reason, "r\xc3\xa9sum\xc3\xa9");
	sbxc_result_clear(&r);
	assert_null(r.egress_denied);
	assert_int_equal(r.n_egress_denied, 0);
}

/* More than the server's 8 are cut at 8; entries without a dest string
 * are dropped, a missing reason is "" (the header promises non-NULL). */
static void test_bounded_and_tolerant(void **state)
{
	(void)state;
	char text[2048] = "{\"exit_code\":1,\"egress_denied\":[";
	for (int i = 0; i < 12; i++)
		snprintf(text + strlen(text), sizeof text - strlen(text),
			 "%s{\"dest\":\"h%d.test:443\",\"reason\":\"no\"}", i ? "," : "", i);
	snprintf(text + strlen(text), sizeof text - strlen(text), "]}");
	struct sbxc_result r;
	parse(text, &r);
	assert_true(r.networked);
	assert_int_equal(r.n_egress_denied, SBXC_EGRESS_DENIED_MAX);
	assert_string_equal(r.egress_denied[0].dest, "h0.test:443");
	assert_string_equal(r.egress_denied[7].dest, "h7.test:443");
	sbxc_result_clear(&r);

	parse("{\"exit_code\":1,\"egress_denied\":[1, \"x\", {\"reason\":\"no dest\"}, {\"dest\":5},"
	      "{\"dest\":\"a.test:443\"}, {\"dest\":\"b.test:22\",\"reason\":7}]}",
	      &r);
	assert_true(r.networked);
	assert_int_equal(r.n_egress_denied, 2);
	assert_string_equal(r.egress_denied[0].dest, "a.test:443");
	assert_string_equal(r.egress_denied[0].reason, "");
	assert_string_equal(r.egress_denied[1].dest, "b.test:22");
	assert_string_equal(r.egress_denied[1].reason, "");
	sbxc_result_clear(&r);

	/* nothing usable: networked, no array to free */
	parse("{\"exit_code\":1,\"egress_denied\":[{}, null]}", &r);
	assert_true(r.networked);
	assert_null(r.egress_denied);
	assert_int_equal(r.n_egress_denied, 0);
	sbxc_result_clear(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_without_network),
	    cmocka_unit_test(test_nothing_refused),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_bounded_and_tolerant),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
