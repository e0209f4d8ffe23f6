/* libsandboxd and sbx with network on request, against the real server in
 * the egress suites' world (tests/integration/it_egress.h: namespaces this
 * test makes, nothing leaves the machine): "network": true is sent, and
 * what the egress gateway refused comes back in struct sbxc_result by
 * every path (the buffered answer, the exit event, GET /exec/{id}) and on
 * sbx's stderr and --json. Skips (77) where the egress world cannot be
 * made (not root, no ip, ...). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_test.h"
#include "common/xmalloc.h"
#include "it_egress.h"

static struct it_server srv;
static struct it_egress world;
static char *tok, *tok_ops;
static const struct it_tok toks[] = {{&tok, "acme", NULL}, {&tok_ops, "ops", "admin"}};

/* other.test is on the upstream, but not in acme's allowlist. */
#define REFUSED_CMD "curl -sS --max-time 5 --resolve other.test:443:" EG_OTHER " https://other.test/"

static int setup(void **state)
{
	(void)state;
	curl_global_init(CURL_GLOBAL_ALL);
	if (it_start_minted(&srv, NULL, toks, IT_NTOKS(toks)) != 0)
		return -1;
	it_egress_policy(&srv, tok_ops, "acme", "allowed.test");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish_minted(&srv, toks, IT_NTOKS(toks));
	curl_global_cleanup();
	return rc;
}

static int ignore_output(void *arg, int stream, const char *data, size_t len)
{
	(void)arg;
	(void)stream;
	(void)data;
	(void)len;
	return 0;
}

/* r says other.test:443 was refused, as not in the allowlist. */
static void assert_other_refused(const struct sbxc_result *r)
{
	assert_true(r->networked);
	for (size_t i = 0; i < r->n_egress_denied; i++)
		if (strcmp(r->egress_denied[i].dest, "other.test:443") == 0) {
			assert_non_null(strstr(r->egress_denied[i].reason, "not in"));
			return;
		}
	fail_msg("egress_denied (%zu entries) has no other.test:443", r->n_egress_denied);
}

static void test_library(void **state)
{
	(void)state;
	struct sbxc *h = ct_client(srv.base, tok, NULL);
	assert_non_null(h);
	struct sbxc_call c = {.session = "egress"};
	struct sbxc_err e;
	struct sbxc_result r;

	/* without network: the server says nothing, and curl resolves nothing */
	struct sbxc_exec_req q = {.command = REFUSED_CMD, .timeout_s = 30};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), 0);
	assert_int_not_equal(r.exit_code, 0);
	assert_false(r.networked);
	assert_int_equal(r.n_egress_denied, 0);
	sbxc_result_clear(&r);

	/* with network, nothing refused: networked, an empty list */
	q = (struct sbxc_exec_req){.command = "true", .timeout_s = 30, .network = true};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), 0);
	assert_int_equal(r.exit_code, 0);
	assert_true(r.networked);
	assert_int_equal(r.n_egress_denied, 0);
	assert_null(r.egress_denied);
	sbxc_result_clear(&r);

	/* refused: in the buffered answer, the exit event and the exec's record */
	q = (struct sbxc_exec_req){.command = REFUSED_CMD, .timeout_s = 30, .network = true};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), 0);
	assert_int_not_equal(r.exit_code, 0);
	assert_other_refused(&r);
	sbxc_result_clear(&r);
	assert_int_equal(sbxc_exec(h, &c, &q, ignore_output, NULL, NULL, &r, &e), 0);
	assert_other_refused(&r);
	struct sbxc_exec_info x;
	assert_int_equal(sbxc_exec_get(h, &c, r.id, &x, &e), 0);
	assert_true(x.has_result);
	assert_other_refused(&x.result);
	sbxc_exec_info_clear(&x);
	sbxc_result_clear(&r);

	/* a policy without network: network is refused, -EPERM (403) */
	it_egress_policy(&srv, tok_ops, "acme", "none");
	q = (struct sbxc_exec_req){.command = "true", .network = true};
	assert_int_equal(sbxc_exec(h, &c, &q, NULL, NULL, NULL, &r, &e), -EPERM);
	assert_int_equal(e.status, 403);
	it_egress_policy(&srv, tok_ops, "acme", "allowed.test");
	sbxc_free(&h);
}

/* sbx exec --network: a line per refused destination on stderr; --json's
 * result has egress_denied. */
static void test_cli(void **state)
{
	(void)state;
	const char *bin = getenv("SBX_BIN") ? getenv("SBX_BIN") : "sbx";
	char *err = xasprintf("%s/sbx.err", world.dir), *out = xasprintf("%s/sbx.out", world.dir);
	int rc = it_sh("SANDBOXD_URL=%s SANDBOXD_TOKEN=%s %s exec --network -- '%s' >%s 2>%s", srv.base, tok,
		       bin, REFUSED_CMD, out, err);
	char *text = it_read_file(err, NULL);
	assert_non_null(text);
	if (rc == 0 || !strstr(text, "sbx: egress refused: other.test:443: not in"))
		fail_msg("sbx exec --network: status %d, stderr:\n%s", rc, text);
	free(text);

	rc = it_sh("SANDBOXD_URL=%s SANDBOXD_TOKEN=%s %s --json exec --network -- '%s' >%s 2>%s", srv.base,
		   tok, bin, REFUSED_CMD, out, err);
	text = it_read_file(out, NULL);
	json_t *o = text ? json_loads(text, 0, NULL) : NULL;
	json_t *d = json_array_get(json_object_get(o, "egress_denied"), 0);
	if (rc == 0 || !d || strcmp(jstr(d, "dest"), "other.test:443") != 0 ||
	    !strstr(jstr(d, "reason"), "not in"))
		fail_msg("sbx --json exec --network: status %d, stdout:\n%s", rc, text ? text : "");
	json_decref(o);
	free(text);

	/* without --network no egress_denied at all */
	rc = it_sh("SANDBOXD_URL=%s SANDBOXD_TOKEN=%s %s --json exec -- true >%s 2>%s", srv.base, tok, bin,
		   out, err);
	assert_int_equal(rc, 0);
	text = it_read_file(out, NULL);
	o = text ? json_loads(text, 0, NULL) : NULL;
	assert_non_null(o);
	assert_null(json_object_get(o, "egress_denied"));
	json_decref(o);
	free(text);
	free(err);
	free(out);
}

int main(void)
{
	it_egress_enter(&world);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_library),
	    cmocka_unit_test(test_cli),
	};
	int rc = cmocka_run_group_tests(tests, setup, teardown);
	it_egress_leave(&world);
	return rc;
}
