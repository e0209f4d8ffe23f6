/* The exec admission queue and the tenants' slots (routes/admit.c) on
 * fake requests (tests/unit/http_fake.h): no socket, no store, no
 * runner. A request that finds its tenant at max_execs waits, suspended;
 * a freed slot goes to the oldest waiting request, which runs its handler
 * again and takes the slot over; a full queue, a cancel, a wait that ran
 * out and the stdin bounds answer as the README says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "common/config.h"
#include "common/errors.h"
#include "common/timeutil.h"
#include "app_fake.h"
#include "http/metrics.h"
#include "http_fake.h"
#include "routes/admit.h"
#include "routes/app.h"
#include "routes/routes.h"

static struct sbx_config cfg;
static struct app app;
static struct tenant tenant;
static struct tenant_load load;
static struct tenant_load *loads[1] = {&load};

/* What the rerun handler saw: route_admit_take's answer, per request. */
static int taken[8];
static struct http_req *reqs[8];
static int nreqs;

static int setup(void **state)
{
	(void)state;
	app_fake_init(&app, &cfg);
	cfg.exec_queue_wait_ms = 60000;
	pthread_mutex_init(&app.tenants_lock, NULL);
	http_metrics_new(&app.metrics, route_table, route_count);
	memset(&tenant, 0, sizeof tenant);
	memset(&load, 0, sizeof load);
	snprintf(tenant.name, sizeof tenant.name, "acme");
	snprintf(load.name, sizeof load.name, "acme");
	tenant.load = &load;
	app.loads = loads; /* as the tenant cache lists every tenant's */
	app.nloads = 1;
	memset(taken, 0, sizeof taken);
	nreqs = 0;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < nreqs; i++)
		http_req_fake_free(reqs[i]);
	http_metrics_free(&app.metrics);
	pthread_mutex_destroy(&app.tenants_lock);
	cfg_free(&cfg);
	return 0;
}

/* A POST /exec of the tenant with body json (NULL: {}). */
static struct http_req *request(const char *json)
{
	struct http_req *r = http_req_fake_new(&app, "POST", "/exec");
	r->tenant = &tenant;
	r->json = json_loads(json ? json : "{}", 0, NULL);
	assert_non_null(r->json);
	reqs[nreqs++] = r;
	return r;
}

static int index_of(struct http_req *r)
{
	for (int i = 0; i < nreqs; i++)
		if (reqs[i] == r)
			return i;
	fail();
	return -1;
}

/* The exec handler run again once admitted: take the slot, answer 200
 * (a held slot is the caller's: released at once, as an exit would). */
static int rerun(struct http_req *r)
{
	int got = route_admit_take(r, 1);
	taken[index_of(r)] = got;
	if (got == 1)
		route_tenant_release_exec(&app, r->tenant);
	return http_reply_json(r, 200, json_pack("{s:i}", "took", got));
}

static void test_slots_bounded(void **state)
{
	(void)state;
	assert_int_equal(route_tenant_acquire_exec(&app, &tenant, 2), 0);
	assert_int_equal(route_tenant_acquire_exec(&app, &tenant, 2), 0);
	assert_int_equal(route_tenant_acquire_exec(&app, &tenant, 2), -SBX_E_TOO_MANY);
	route_tenant_release_exec(&app, &tenant);
	assert_int_equal(route_tenant_acquire_exec(&app, &tenant, 2), 0);
	assert_int_equal(load.execs, 2);
	/* approvals: their own slots, bounded by the same limit */
	assert_int_equal(route_tenant_acquire_pending(&app, &tenant, 1, 0), 0);
	assert_int_equal(route_tenant_acquire_pending(&app, &tenant, 1, 0), -SBX_E_TOO_MANY);
	route_tenant_release_pending(&app, &tenant, 0);
	assert_int_equal(load.pending, 0);
}

static void test_waits_then_runs(void **state)
{
	(void)state;
	struct http_req *first = request(NULL), *second = request(NULL);
	assert_int_equal(route_admit_exec(first, 1, 4, rerun), 0);
	assert_int_equal(route_admit_exec(second, 1, 4, rerun), 1);
	assert_int_equal(http_req_fake_suspends(second), 1);
	assert_int_equal(http_req_fake_resumes(second), 0);
	assert_int_equal(app.admit.queued, 1);
	/* first's command ends: its slot passes to second, not to the pool */
	route_tenant_release_exec(&app, &tenant);
	assert_int_equal(http_req_fake_resumes(second), 1);
	assert_int_equal(load.execs, 1);
	assert_int_equal(app.admit.queued, 0);
	assert_int_equal(http_req_fake_resume(second), 0);
	assert_int_equal(taken[1], 1);
	assert_int_equal(second->status, 200);
	assert_int_equal(load.execs, 0);
}

static void test_oldest_first_and_full(void **state)
{
	(void)state;
	struct http_req *run = request(NULL), *a = request(NULL), *b = request(NULL), *c = request(NULL);
	assert_int_equal(route_admit_exec(run, 1, 2, rerun), 0);
	assert_int_equal(route_admit_exec(a, 1, 2, rerun), 1);
	assert_int_equal(route_admit_exec(b, 1, 2, rerun), 1);
	/* the queue holds exec_queue requests; the next is refused at once */
	assert_int_equal(route_admit_exec(c, 1, 2, rerun), -SBX_E_TOO_MANY);
	assert_int_equal(http_req_fake_suspends(c), 0);
	route_tenant_release_exec(&app, &tenant);
	assert_int_equal(http_req_fake_resumes(a), 1);
	assert_int_equal(http_req_fake_resumes(b), 0);
	assert_int_equal(http_req_fake_resume(a), 0); /* takes and gives back the slot: b's now */
	assert_int_equal(http_req_fake_resumes(b), 1);
	assert_int_equal(http_req_fake_resume(b), 0);
	assert_int_equal(taken[1], 1);
	assert_int_equal(taken[2], 1);
	assert_int_equal(load.execs, 0);
}

static void test_cancel_while_waiting(void **state)
{
	(void)state;
	struct http_req *run = request(NULL), *w = request("{\"id\":\"job-7\"}");
	assert_int_equal(route_admit_exec(run, 1, 4, rerun), 0);
	assert_int_equal(route_admit_exec(w, 1, 4, rerun), 1);
	assert_int_equal(route_admit_cancel(&app, &load, "job-8"), 0);
	assert_int_equal(route_admit_cancel(&app, &load, "job-7"), 1);
	assert_int_equal(http_req_fake_resumes(w), 1);
	assert_int_equal(http_req_fake_resume(w), 0);
	assert_int_equal(taken[1], 2); /* cancelled: no slot, recorded without running */
	assert_int_equal(load.execs, 1);
	route_tenant_release_exec(&app, &tenant);
	assert_int_equal(load.execs, 0);
}

static void test_wait_runs_out(void **state)
{
	(void)state;
	cfg.exec_queue_wait_ms = 0;
	struct http_req *run = request(NULL), *w = request(NULL);
	assert_int_equal(route_admit_exec(run, 1, 4, rerun), 0);
	assert_int_equal(route_admit_exec(w, 1, 4, rerun), 1);
	/* Its deadline is its start (0 ms): past once the clock moves on. */
	int64_t until = mono_ms() + 10000;
	while (http_req_fake_resumes(w) == 0 && mono_ms() < until) {
		route_admit_expire(&app);
		if (http_req_fake_resumes(w) == 0)
			nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	}
	assert_int_equal(http_req_fake_resumes(w), 1);
	http_req_fake_resume(w);
	assert_int_equal(w->status, 429);
	assert_non_null(strstr(w->error_msg, "waited for a slot"));
	assert_int_equal(taken[1], 0); /* never ran */
	/* the slot it never got stays the running command's */
	assert_int_equal(load.execs, 1);
	route_tenant_release_exec(&app, &tenant);
}

static void test_stdin_held_bounded(void **state)
{
	(void)state;
	cfg.wait_stdin_bytes_per_tenant = 8;
	cfg.wait_stdin_bytes = 12;
	struct http_req *run = request(NULL), *big = request("{\"stdin\":\"0123456789\"}"),
			*ok = request("{\"stdin\":\"0123456\"}");
	assert_int_equal(route_admit_exec(run, 1, 4, rerun), 0);
	/* more than a tenant's waiting requests may keep, alone */
	assert_int_equal(route_admit_exec(big, 1, 4, rerun), -E2BIG);
	assert_int_equal(route_admit_exec(ok, 1, 4, rerun), 1);
	assert_int_equal(load.held_stdin, 7);
	pthread_mutex_lock(&app.tenants_lock);
	assert_int_equal(route_tenant_hold_locked(&app, &load, 2), -ENOBUFS); /* 7 + 2 > 8 */
	pthread_mutex_unlock(&app.tenants_lock);
	route_tenant_release_exec(&app, &tenant);
	http_req_fake_resume(ok);
	assert_int_equal(load.held_stdin, 0);
	assert_int_equal(app.held_stdin, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_slots_bounded, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_waits_then_runs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_oldest_first_and_full, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel_while_waiting, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wait_runs_out, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stdin_held_bounded, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
