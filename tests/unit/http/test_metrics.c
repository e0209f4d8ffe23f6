/* http_metrics_label_all: a node's label on every series of /metrics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include "common/buf.h"
#include "http/metrics.h"

static void test_label_every_sample(void **state)
{
	(void)state;
	const char *in = "# HELP a_total A.\n"
			 "# TYPE a_total counter\n"
			 "a_total 3\n"
			 "b_total{route=\"GET /x\",status=\"200\"} 1\n"
			 "h_sum{} 0.5\n"
			 "sandboxd_node_info{node=\"n1\",version=\"1\"} 1\n"
			 "last_one 7";
	const char *want = "# HELP a_total A.\n"
			   "# TYPE a_total counter\n"
			   "a_total{node=\"n1\"} 3\n"
			   "b_total{node=\"n1\",route=\"GET /x\",status=\"200\"} 1\n"
			   "h_sum{node=\"n1\"} 0.5\n"
			   "sandboxd_node_info{node=\"n1\",version=\"1\"} 1\n"
			   "last_one{node=\"n1\"} 7";
	struct buf out;
	buf_init(&out, 1u << 20);
	http_metrics_label_all(in, strlen(in), "node", "n1", &out);
	assert_string_equal(buf_cstr(&out), want);
	buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_label_every_sample)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
