/* The backend seam (routes/provider.h, providers.c): every backend a
 * policy names gives a provider (none is NULL), this server's own give the
 * local one, and a route that needs the workspace here is refused in one
 * place for a provider that lacks it, naming the route and where the
 * tenant's files are; a provider that cannot be reached still exists (its
 * ops fail as data, with words and a Retry-After, for the route to
 * answer 503). No network: a remote or ssh provider
 * this server does not offer is made and never dialled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "app_fake.h"
#include "common/config.h"
#include "common/errors.h"
#include "http/route.h"
#include "routes/app.h"
#include "routes/policy.h"
#include "routes/provider.h"
#include "sandbox/fsops.h"

static struct sbx_config cfg;
static struct app app;

static int setup(void **state)
{
	(void)state;
	app_fake_init(&app, &cfg);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	cfg_free(&cfg);
	return 0;
}

static struct route_provider *provider_for(const char *backend)
{
	struct route_policy p;
	char err[256];
	assert_int_equal(route_policy_defaults(&cfg, &p, err, sizeof err), 0);
	snprintf(p.backend, sizeof p.backend, "%s", backend);
	struct route_provider *pr = route_provider_new(&app, "acme", &p);
	route_policy_clear(&p);
	return pr;
}

static void test_every_backend_has_one(void **state)
{
	(void)state;
	static const char *const local[] = {"bwrap", "local"};
	for (size_t i = 0; i < 2; i++) {
		struct route_provider *p = provider_for(local[i]);
		assert_ptr_equal(p, &route_local_provider);
		assert_true(p->ops->caps & ROUTE_CAN_WORKSPACE);
		assert_true(p->ops->caps & ROUTE_CAN_RUN_HERE);
		assert_non_null(p->ops->open); /* answers with the file itself */
		route_provider_free(&p);       /* shared: never freed, but the handle is cleared */
		assert_null(p);
	}
	static const char *const elsewhere[] = {"remote", "ssh"};
	for (size_t i = 0; i < 2; i++) {
		struct route_provider *p = provider_for(elsewhere[i]);
		assert_non_null(p);
		assert_ptr_not_equal(p, &route_local_provider);
		assert_string_equal(p->ops->name, elsewhere[i]);
		assert_int_equal(p->ops->caps & (ROUTE_CAN_WORKSPACE | ROUTE_CAN_RUN_HERE), 0);
		/* every op a route calls is there: no route branches on a NULL */
		const struct route_provider_ops *o = p->ops;
		assert_true(o->read && o->write && o->stat && o->readdir && o->exists && o->mkdir && o->rm &&
			    o->move && o->submit && o->free && o->where && o->down);
		assert_null(o->open); /* the files are elsewhere: read copies them */
		route_provider_free(&p);
	}
}

static void test_workspace_routes_refused_once(void **state)
{
	(void)state;
	struct tenant t;
	memset(&t, 0, sizeof t);
	snprintf(t.name, sizeof t.name, "acme");
	const struct http_route code = {
	    .method = "POST", .pattern = "/code", .flags = RF_JSON | RF_WORKSPACE};
	const struct http_route stat = {.method = "GET", .pattern = "/fs/stat"};
	char why[384] = "";

	t.provider = &route_local_provider;
	assert_int_equal(route_provider_admit(&t, code.flags, "POST /code", why, sizeof why), 0);
	assert_int_equal(route_provider_admit(&t, stat.flags, "GET /fs/stat", why, sizeof why), 0);

	t.provider = provider_for("remote");
	assert_int_equal(route_provider_admit(&t, stat.flags, "GET /fs/stat", why, sizeof why), 0);
	assert_int_equal(route_provider_admit(&t, code.flags, "POST /code", why, sizeof why),
			 -SBX_E_FORBIDDEN);
	assert_non_null(strstr(why, "POST /code is not available for tenant acme"));
	assert_non_null(strstr(why, t.provider->ops->where));
	route_provider_free(&t.provider);
}

/* An op returns data, never an answer: a provider that cannot be reached
 * fails every op with -SBX_E_BACKEND, its words and a Retry-After in the
 * call, for the route to render (here: never dialled, not offered). */
static void test_ops_fail_as_data(void **state)
{
	(void)state;
	static const char *const elsewhere[] = {"remote", "ssh"};
	for (size_t i = 0; i < 2; i++) {
		struct tenant t;
		memset(&t, 0, sizeof t);
		snprintf(t.name, sizeof t.name, "acme");
		t.provider = provider_for(elsewhere[i]);
		struct route_call c = {.app = &app, .tenant = &t, .request_id = "req-1", .max_bytes = 1024};
		struct sbx_stat st;
		bool yes = true;
		assert_int_equal(t.provider->ops->stat(&c, "sessions/s/a", &st), -SBX_E_BACKEND);
		assert_non_null(strstr(c.why, "backend"));
		assert_non_null(strstr(c.why, elsewhere[i]));
		assert_true(c.retry_after_s > 0);
		c.why[0] = '\0';
		c.retry_after_s = 0;
		assert_int_equal(t.provider->ops->exists(&c, "sessions/s/a", &yes), -SBX_E_BACKEND);
		assert_true(c.why[0] != '\0' && c.retry_after_s > 0);
		assert_true(yes); /* untouched on failure */
		route_provider_free(&t.provider);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_every_backend_has_one, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_workspace_routes_refused_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ops_fail_as_data, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
