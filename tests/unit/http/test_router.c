/* The dispatcher without a socket: route matching (http_route_match) of
 * a method and path against a table ({x} captures, RF_TAIL, 404, 405 and
 * its Allow list, trailing slashes, paths as given), http_begin and
 * http_run on fake requests (tests/unit/http_fake.h), and the fake itself:
 * what a reply, an error and a suspension record. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/errors.h"
#include "http/route.h"
#include "http_fake.h"

static int h_ok(struct http_req *r)
{
	return http_reply_json(r, 200, json_pack("{s:s}", "id", r->params[0] ? r->params[0] : ""));
}

static int h_json(struct http_req *r)
{
	json_t *v = json_object_get(r->json, "n");
	return http_reply_json(r, 201, json_pack("{s:I}", "n", json_integer_value(v) + 1));
}

static const struct http_route table[] = {
    {.method = "GET", .pattern = "/healthz", .flags = RF_PUBLIC, .handler = h_ok},
    {.method = "GET", .pattern = "/exec/{id}", .handler = h_ok},
    {.method = "DELETE", .pattern = "/exec/{id}", .handler = h_ok},
    {.method = "POST", .pattern = "/exec/{id}/cancel", .handler = h_ok},
    {.method = "GET", .pattern = "/exec/list", .handler = h_ok}, /* after {id}: never reached by GET */
    {.method = "POST", .pattern = "/exec/list", .handler = h_ok},
    {.method = "GET", .pattern = "/a/{x}/b/{y}", .flags = RF_PUBLIC, .handler = h_ok},
    {.method = "GET", .pattern = "/a/{x}/b/{y}/c/{z}", .flags = RF_PUBLIC, .handler = h_ok},
    {.method = "GET", .pattern = "/docs/{path}", .flags = RF_PUBLIC | RF_TAIL, .handler = h_ok},
    {.method = "POST", .pattern = "/json", .flags = RF_PUBLIC | RF_JSON, .handler = h_json},
};
#define NT (sizeof table / sizeof table[0])

struct m {
	int rc;
	const struct http_route *rt;
	const char *params[REQ_MAX_PARAMS];
	char allow[128];
};

static struct m run_match(const char *method, const char *path)
{
	struct m m = {0};
	m.rc = http_route_match(table, NT, method, path, &m.rt, m.params, m.allow, sizeof m.allow);
	return m;
}

static void m_free(struct m *m)
{
	for (size_t i = 0; i < REQ_MAX_PARAMS; i++)
		free((char *)m->params[i]);
}

static void test_static_and_params(void **state)
{
	(void)state;
	struct m m = run_match("GET", "/healthz");
	assert_int_equal(m.rc, 0);
	assert_ptr_equal(m.rt, &table[0]);
	assert_null(m.params[0]);
	m = run_match("GET", "/exec/e-1");
	assert_int_equal(m.rc, 0);
	assert_ptr_equal(m.rt, &table[1]);
	assert_string_equal(m.params[0], "e-1");
	m_free(&m);
	m = run_match("POST", "/exec/e-2/cancel");
	assert_ptr_equal(m.rt, &table[3]);
	assert_string_equal(m.params[0], "e-2");
	m_free(&m);
	m = run_match("GET", "/a/1/b/2");
	assert_ptr_equal(m.rt, &table[6]);
	assert_string_equal(m.params[0], "1");
	assert_string_equal(m.params[1], "2");
	m_free(&m);
}

static void test_first_route_wins(void **state)
{
	(void)state;
	/* GET /exec/list is GET /exec/{id} with id "list": the table's order decides. */
	struct m m = run_match("GET", "/exec/list");
	assert_ptr_equal(m.rt, &table[1]);
	assert_string_equal(m.params[0], "list");
	m_free(&m);
	m = run_match("POST", "/exec/list");
	assert_ptr_equal(m.rt, &table[5]);
	assert_null(m.params[0]);
}

static void test_not_found(void **state)
{
	(void)state;
	assert_int_equal(run_match("GET", "/nope").rc, -ENOENT);
	assert_int_equal(run_match("GET", "/").rc, -ENOENT);
	assert_int_equal(run_match("GET", "").rc, -ENOENT);
	/* A trailing slash only where the pattern has one. */
	assert_int_equal(run_match("GET", "/healthz/").rc, -ENOENT);
	assert_int_equal(run_match("GET", "/exec/e-1/").rc, -ENOENT);
	/* A {x} is never empty. */
	assert_int_equal(run_match("GET", "/exec/").rc, -ENOENT);
	assert_int_equal(run_match("POST", "/exec//cancel").rc, -ENOENT);
	/* More segments than the pattern has, and a prefix only. */
	assert_int_equal(run_match("GET", "/exec/e-1/x/y").rc, -ENOENT);
	assert_int_equal(run_match("GET", "/health").rc, -ENOENT);
	assert_int_equal(run_match("GET", "/healthzz").rc, -ENOENT);
	/* Bytewise: no case folding. */
	assert_int_equal(run_match("GET", "/HEALTHZ").rc, -ENOENT);
}

static void test_too_many_params(void **state)
{
	(void)state;
	/* Three {x} where a request keeps REQ_MAX_PARAMS (2): never matched. */
	assert_int_equal(REQ_MAX_PARAMS, 2);
	assert_int_equal(run_match("GET", "/a/1/b/2/c/3").rc, -ENOENT);
}

static void test_path_as_given(void **state)
{
	(void)state;
	/* libmicrohttpd percent-decodes before: the matcher takes bytes as
	 * they are, an escape is no separator, and a decoded '/' is one. */
	struct m m = run_match("GET", "/exec/a%2Fb");
	assert_int_equal(m.rc, 0);
	assert_string_equal(m.params[0], "a%2Fb");
	m_free(&m);
	assert_int_equal(run_match("GET", "/exec/a/b").rc, -ENOENT);
	m = run_match("GET", "/exec/\xc3\xa9\x01");
	assert_string_equal(m.params[0], "\xc3\xa9\x01");
	m_free(&m);
}

static void test_tail(void **state)
{
	(void)state;
	struct m m = run_match("GET", "/docs/a/b/c.html");
	assert_ptr_equal(m.rt, &table[8]);
	assert_string_equal(m.params[0], "a/b/c.html");
	m_free(&m);
	m = run_match("GET", "/docs/");
	assert_int_equal(m.rc, 0);
	assert_string_equal(m.params[0], "");
	m_free(&m);
	assert_int_equal(run_match("GET", "/docs").rc, -ENOENT);
}

static void test_method_not_allowed(void **state)
{
	(void)state;
	struct m m = run_match("PUT", "/exec/e-1");
	assert_int_equal(m.rc, -SBX_E_METHOD);
	assert_string_equal(m.allow, "GET, DELETE");
	assert_null(m.params[0]);
	m = run_match("DELETE", "/healthz");
	assert_int_equal(m.rc, -SBX_E_METHOD);
	assert_string_equal(m.allow, "GET");
	/* /exec/list: GET (as /exec/{id}, then its own row, listed once), DELETE, POST. */
	m = run_match("PATCH", "/exec/list");
	assert_string_equal(m.allow, "GET, DELETE, POST");
	/* An Allow list that does not fit leaves a method out whole (DELETE),
	 * and a shorter one after it still goes in. */
	const struct http_route *rt = NULL;
	const char *params[REQ_MAX_PARAMS] = {0};
	char small[10];
	assert_int_equal(http_route_match(table, NT, "PUT", "/exec/list", &rt, params, small, sizeof small),
			 -SBX_E_METHOD);
	assert_string_equal(small, "GET, POST");
}

static void test_head_is_get(void **state)
{
	(void)state;
	struct m m = run_match("HEAD", "/exec/e-1");
	assert_int_equal(m.rc, 0);
	assert_ptr_equal(m.rt, &table[1]);
	m_free(&m);
	assert_int_equal(run_match("HEAD", "/json").rc, -SBX_E_METHOD);
}

/* ---- the dispatcher on fake requests ---- */

static struct sbx_config cfg; /* no node id, no TLS, metrics not public */
static struct http_env env = {.cfg = &cfg, .routes = table, .nroutes = NT};

static struct http_req *fake(const char *method, const char *url)
{
	struct http_req *r = http_req_fake_new(NULL, method, url);
	r->env = &env;
	return r;
}

static void test_begin_routes(void **state)
{
	(void)state;
	struct http_req *r = fake("GET", "/a/x1/b/y1?k=v");
	assert_int_equal(http_begin(r), 0);
	assert_ptr_equal(r->route, &table[6]);
	assert_string_equal(r->params[0], "x1");
	assert_string_equal(r->params[1], "y1");
	assert_string_equal(r->session_key, "default");
	assert_int_equal(http_run(r), 0);
	assert_int_equal(r->status, 200);
	assert_string_equal(http_req_fake_body(r), "{\"id\":\"x1\"}");
	http_req_fake_free(r);
}

static void test_begin_404_405(void **state)
{
	(void)state;
	struct http_req *r = fake("GET", "/nope");
	assert_int_equal(http_req_fake_answer(r, http_begin(r)), -ENOENT);
	assert_null(r->route);
	assert_int_equal(r->status, 404);
	assert_string_equal(r->error_msg, "no such route: GET /nope");
	assert_non_null(strstr(http_req_fake_body(r), "\"code\":\"not_found\""));
	http_req_fake_free(r);

	r = fake("PUT", "/exec/e-1");
	assert_int_equal(http_req_fake_answer(r, http_begin(r)), -SBX_E_METHOD);
	assert_int_equal(r->status, 405);
	assert_string_equal(http_req_core_of(r)->allow, "GET, DELETE");
	assert_string_equal(r->error_msg, "method PUT not allowed here; allowed: GET, DELETE");
	http_req_fake_free(r);
}

static void test_begin_refusals(void **state)
{
	(void)state;
	/* Not public, no token: 401 before anything else is looked at. */
	struct http_req *r = fake("GET", "/exec/e-1");
	assert_int_equal(http_req_fake_answer(r, http_begin(r)), -SBX_E_UNAUTHORIZED);
	assert_int_equal(r->status, 401);
	assert_false(r->authed);
	http_req_fake_free(r);

	r = fake("GET", "/healthz");
	http_req_fake_header(r, "X-Session-Key", "");
	assert_int_equal(http_begin(r), -EINVAL);
	assert_string_equal(r->error_msg, "X-Session-Key must be 1 to 512 printable bytes");
	http_req_fake_free(r);

	r = fake("GET", "/healthz");
	http_req_fake_header(r, "x-session-key", "s-1"); /* header names: any case */
	assert_int_equal(http_begin(r), 0);
	assert_string_equal(r->session_key, "s-1");
	assert_int_equal(r->session_key_len, 3);
	http_req_fake_free(r);

	r = fake("POST", "/json");
	http_req_fake_header(r, "Transfer-Encoding", "gzip");
	assert_int_equal(http_begin(r), -EINVAL);
	assert_true(http_req_core_of(r)->refuse_now);
	http_req_fake_free(r);
}

static void test_run_json(void **state)
{
	(void)state;
	struct http_req *r = fake("POST", "/json");
	assert_int_equal(http_begin(r), 0);
	assert_int_equal(http_body(r, "{\"n\":", 5), 0);
	assert_int_equal(http_body(r, " 41}", 4), 0);
	assert_int_equal(r->bytes_in, 9);
	assert_int_equal(http_run(r), 0);
	assert_true(r->ran);
	assert_int_equal(r->status, 201);
	assert_string_equal(http_req_fake_body(r), "{\"n\":42}");
	assert_int_equal(r->bytes_out, 8);
	http_req_fake_free(r);

	r = fake("POST", "/json");
	assert_int_equal(http_begin(r), 0);
	assert_int_equal(http_body(r, "[1]", 3), 0);
	assert_int_equal(http_req_fake_answer(r, http_run(r)), -EINVAL);
	assert_false(r->ran);
	assert_int_equal(r->status, 400);
	assert_string_equal(r->error_msg, "the body must be a JSON object");
	http_req_fake_free(r);
}

/* ---- the fake itself ---- */

static int suspender(struct http_req *r);

static int resumed(struct http_req *r)
{
	r->on_resume = NULL;
	return http_fail(r, -SBX_E_TOO_MANY, "waited too long");
}

static int suspender(struct http_req *r)
{
	r->on_resume = resumed;
	http_suspend(r);
	return 0;
}

static int freed;

static void on_free(struct http_req *r)
{
	freed += r->completed_ok ? 10 : 1;
	free(r->hstate);
}

static void test_fake_reply_and_fail(void **state)
{
	(void)state;
	struct http_req *r = http_req_fake_new(NULL, "GET", "/x?wait=1&path=a/b&flag&n=70000");
	assert_string_equal(r->url, "/x");
	assert_string_equal(http_query(r, "wait"), "1");
	size_t n = 0;
	assert_string_equal(http_query_n(r, "path", &n), "a/b");
	assert_int_equal(n, 3);
	assert_string_equal(http_query(r, "flag"), "");
	assert_null(http_query(r, "none"));
	assert_true(http_query_bool(r, "wait"));
	int64_t v = 0;
	assert_int_equal(http_query_int(r, "n", 5, 0, 65535, &v), -EINVAL);
	assert_string_equal(r->error_msg, "query parameter n must be an integer in [0, 65535]");
	assert_int_equal(http_query_int(r, "absent", 5, 0, 10, &v), 0);
	assert_int_equal(v, 5);
	assert_int_equal(http_client_fd(r), -1);
	assert_null(http_header(r, "Host"));

	assert_int_equal(http_reply_json(r, 202, json_pack("{s:b}", "queued", 1)), 0);
	assert_int_equal(r->status, 202);
	assert_string_equal(http_req_fake_body(r), "{\"queued\":true}");
	assert_int_equal(r->bytes_out, 15);
	r->hstate = malloc(8);
	r->on_free = on_free;
	freed = 0;
	http_req_fake_free(r);
	assert_int_equal(freed, 10);

	r = http_req_fake_new(NULL, "GET", "/x");
	r->retry_after_s = 3;
	assert_int_equal(http_req_fake_answer(r, http_fail(r, -SBX_E_TOO_MANY, "tenant %s is busy", "t1")),
			 -SBX_E_TOO_MANY);
	assert_string_equal(r->error_msg, "tenant t1 is busy");
	assert_int_equal(r->status, 429);
	json_t *j = json_loads(http_req_fake_body(r), 0, NULL);
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
			    "too_many_requests");
	json_decref(j);
	http_req_fake_free(r);
}

static void test_fake_suspend_resume(void **state)
{
	(void)state;
	struct http_req *r = http_req_fake_new(NULL, "POST", "/exec");
	assert_int_equal(suspender(r), 0);
	assert_int_equal(http_req_fake_suspends(r), 1);
	assert_int_equal(r->status, 0);
	http_resume(r);
	assert_int_equal(http_req_fake_resumes(r), 1);
	assert_int_equal(http_req_fake_resume(r), -SBX_E_TOO_MANY);
	assert_int_equal(r->status, 429);
	assert_string_equal(r->error_msg, "waited too long");
	freed = 0;
	r->on_free = on_free;
	http_req_fake_free(r);
	assert_int_equal(freed, 10);

	r = http_req_fake_new(NULL, "GET", "/x");
	r->on_free = on_free;
	freed = 0;
	http_req_fake_free(r); /* never answered: not completed_ok */
	assert_int_equal(freed, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_static_and_params),	cmocka_unit_test(test_first_route_wins),
	    cmocka_unit_test(test_not_found),		cmocka_unit_test(test_too_many_params),
	    cmocka_unit_test(test_path_as_given),	cmocka_unit_test(test_tail),
	    cmocka_unit_test(test_method_not_allowed),	cmocka_unit_test(test_head_is_get),
	    cmocka_unit_test(test_begin_routes),	cmocka_unit_test(test_begin_404_405),
	    cmocka_unit_test(test_begin_refusals),	cmocka_unit_test(test_run_json),
	    cmocka_unit_test(test_fake_reply_and_fail), cmocka_unit_test(test_fake_suspend_resume),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
