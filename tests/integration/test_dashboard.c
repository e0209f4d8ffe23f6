/* GET /dashboard's headers (issue 26, item 8): no other site may frame
 * the page (its approval buttons under a decoy, clickjacking), which a
 * <meta> policy cannot say: X-Frame-Options DENY and a
 * Content-Security-Policy header with frame-ancestors 'none' that also
 * keeps every directive of the page's own <meta> policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"
#include "harness.h"

static struct it_server srv;

IT_DEFAULT_SERVER_FIXTURE(srv)

/* The page's <meta> Content-Security-Policy (caller frees), or NULL. */
static char *meta_csp(const struct it_resp *r)
{
	static const char mark[] = "http-equiv=\"Content-Security-Policy\" content=\"";
	const char *p = strstr(r->body, mark);
	const char *end = p ? strchr(p + sizeof mark - 1, '"') : NULL;
	return end ? xstrndup(p + sizeof mark - 1, (size_t)(end - p - (sizeof mark - 1))) : NULL;
}

static void test_not_framed(void **state)
{
	(void)state;
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/dashboard", NULL, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	it_expect_header(&r, "X-Frame-Options", "DENY");
	char *csp = it_header(&r, "Content-Security-Policy");
	assert_non_null(csp);
	assert_non_null(strstr(csp, "frame-ancestors 'none'"));
	/* Merged: the page's own directives are all in the header too. */
	char *meta = meta_csp(&r);
	assert_non_null(meta);
	for (char *d = meta, *next; d; d = next) {
		next = strchr(d, ';');
		if (next)
			*next++ = '\0';
		while (*d == ' ')
			d++;
		if (!strstr(csp, d))
			fprintf(stderr, "directive %s of the page is not in the header: %s\n", d, csp);
		assert_non_null(strstr(csp, d));
	}
	free(meta);
	free(csp);
	it_resp_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_not_framed),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
