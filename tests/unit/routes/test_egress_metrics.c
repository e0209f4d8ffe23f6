/* /metrics' egress series (routes/ops.c) from a stand-in gateway: the
 * real one is sandbox/egress/gateway.c's; this file's
 * sbx_egress_gateway_counts is the test's shim. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "routes/app.h"
#include "routes/routes.h"
#include "sandbox/egress/gateway.h"
#include "store/store.h"
#include "unit.h"

static int calls;

/* Two tenants, as a gateway that served both would say. */
void sbx_egress_gateway_counts(struct sbx_egress_gateway *g,
			       void (*cb)(void *ctx, const char *tenant, const struct sbx_egress_counts *c),
			       void *ctx)
{
	(void)g;
	calls++;
	const struct sbx_egress_counts acme = {.allowed = 5,
					       .denied = 2,
					       .dns_refused = 3,
					       .udp_dropped = 1,
					       .bytes_up = 100,
					       .bytes_down = 2000,
					       .open = 4,
					       .pending = 1};
	const struct sbx_egress_counts globex = {.allowed = 1};
	cb(ctx, "acme", &acme);
	cb(ctx, "globex", &globex);
}

static char *render(struct app *a)
{
	struct buf out;
	buf_init(&out, 1u << 20);
	route_egress_metrics(a, &out);
	return buf_steal(&out, NULL);
}

static void test_series(void **state)
{
	(void)state;
	char dir[64], path[96], err[256];
	assert_int_equal(unit_tmpdir(dir, sizeof dir, "egmetrics"), 0);
	snprintf(path, sizeof path, "%s/sandboxd.db", dir);
	struct app a;
	memset(&a, 0, sizeof a);
	assert_int_equal(store_open(&a.store, path, true, err, sizeof err), 0);

	char *none = render(&a); /* no gateway: nothing, not even HELP lines */
	assert_true(none == NULL || none[0] == '\0');
	free(none);
	assert_int_equal(calls, 0);

	a.egress = (struct sbx_egress_gateway *)&calls; /* never dereferenced: the shim ignores it */
	char *text = render(&a);
	assert_int_equal(calls, 1);
	static const char *const want[] = {
	    "# TYPE sandboxd_egress_connections_total counter\n"
	    "sandboxd_egress_connections_total{tenant=\"acme\",verdict=\"allowed\"} 5\n"
	    "sandboxd_egress_connections_total{tenant=\"globex\",verdict=\"allowed\"} 1\n"
	    "sandboxd_egress_connections_total{tenant=\"acme\",verdict=\"denied\"} 2\n"
	    "sandboxd_egress_connections_total{tenant=\"globex\",verdict=\"denied\"} 0\n",
	    "sandboxd_egress_bytes_total{tenant=\"acme\",direction=\"up\"} 100\n",
	    "sandboxd_egress_bytes_total{tenant=\"acme\",direction=\"down\"} 2000\n",
	    "# TYPE sandboxd_egress_dns_refused_total "
	    "counter\nsandboxd_egress_dns_refused_total{tenant=\"acme\"} 3\n",
	    "sandboxd_egress_udp_dropped_total{tenant=\"acme\"} 1\n",
	    "# TYPE sandboxd_egress_open gauge\nsandboxd_egress_open{tenant=\"acme\"} 4\n",
	    "sandboxd_egress_ledger_failures_total 0\n",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		if (!strstr(text, want[i]))
			fail_msg("missing:\n%s\nin:\n%s", want[i], text);
	/* Each family's HELP and TYPE once. */
	const char *p = strstr(text, "# TYPE sandboxd_egress_connections_total");
	assert_null(strstr(p + 1, "# TYPE sandboxd_egress_connections_total"));
	free(text);
	store_close(&a.store);
	unit_rm_rf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_series)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
