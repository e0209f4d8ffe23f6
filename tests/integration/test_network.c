/* Network on request over HTTP (issues 16, 29): with `network: true` a
 * command reaches the host loopback port its tenant's allowlist names
 * (an HTTP server of this test) and nothing else: not a second one, not
 * the host's other loopback ports, not sandboxd itself; a name resolving
 * to loopback only with a literal rule for the address; without an
 * allowlist `network: true` is refused, and without `network: true`
 * there is no network at all; allowlists naming metadata addresses in
 * other forms are refused when set. Decisions by name on every
 * connection, the ledger, DNS and a hostile tenant: test_egress*.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

/* A loopback HTTP server of this test: every connection gets body. */
struct web {
	int fd, port;
	const char *body;
	pthread_t thread;
};

static struct it_server srv;
static struct web allowed, other, silent;
static char *tok, *tok_globex, *tok_ops;

static void *web_main(void *arg)
{
	struct web *w = arg;
	char req[1024],
	    *resp = xasprintf("HTTP/1.0 200 OK\r\nContent-Length: %zu\r\n\r\n%s", strlen(w->body), w->body);

	for (;;) {
		int c = accept4(w->fd, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (c < 0)
			break; /* shut down */
		(void)!read(c, req, sizeof(req));
		(void)!write(c, resp, strlen(resp));
		close(c);
	}
	free(resp);
	return NULL;
}

static int web_start(struct web *w, const char *body)
{
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(in);

	w->body = body;
	w->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (w->fd < 0 || bind(w->fd, (struct sockaddr *)&in, len) < 0 || listen(w->fd, 16) < 0 ||
	    getsockname(w->fd, (struct sockaddr *)&in, &len) < 0)
		return -1;
	w->port = ntohs(in.sin_port);
	return pthread_create(&w->thread, NULL, web_main, w) == 0 ? 0 : -1;
}

static void web_stop(struct web *w)
{
	if (w->fd < 0)
		return;
	shutdown(w->fd, SHUT_RDWR);
	pthread_join(w->thread, NULL);
	close(w->fd);
}

static const struct it_tok toks[] = {
    {&tok, "acme", NULL}, {&tok_globex, "globex", NULL}, {&tok_ops, "ops", "admin"}};

static int setup(void **state)
{
	(void)state;
	if (web_start(&allowed, "hello-allowed") < 0 || web_start(&other, "hello-other") < 0 ||
	    web_start(&silent, "hello-silent") < 0)
		return -1;
	return it_start_minted(&srv, NULL, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	web_stop(&allowed);
	web_stop(&other);
	web_stop(&silent);
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* curl url from a command with network: true; its stdout ("...rc=N"). */
static char *curl_in_sandbox(const char *t, const char *url)
{
	char *cmd = xasprintf("curl -s -S --max-time 5 %s 2>&1; echo rc=$?", url);
	json_t *res =
	    ex_ok(&srv, t, NULL, json_pack("{s:s, s:b, s:i}", "command", cmd, "network", 1, "timeout_s", 30));
	char *out = xstrdup(ex_stdout_ok(res));

	json_decref(res);
	free(cmd);
	return out;
}

/* Refused: no answer, curl failed (a reset, or the gateway's close). */
static void expect_refused(const char *url)
{
	char *out = curl_in_sandbox(tok, url);

	if (strstr(out, "hello-") || strstr(out, "rc=0"))
		fail_msg("%s: want refused, got '%s'", url, out);
	free(out);
}

static void test_allowlisted_only(void **state)
{
	(void)state;
	char *kv = xasprintf("network=127.0.0.1:%d", allowed.port), *url, *out;

	assert_int_equal(pol_cli(&srv, "acme", kv), 0);
	url = xasprintf("http://127.0.0.1:%d/", allowed.port);
	out = curl_in_sandbox(tok, url);
	if (!strstr(out, "hello-allowed") || !strstr(out, "rc=0"))
		fail_msg("the allowlisted server: got '%s'", out);
	free(out);
	free(url);
	/* The second server, another loopback port, sandboxd itself. */
	const int ports[] = {other.port, silent.port, srv.port};
	for (size_t i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
		url = xasprintf("http://127.0.0.1:%d/", ports[i]);
		expect_refused(url);
		free(url);
	}
	url = xasprintf("%s/healthz", srv.base);
	expect_refused(url);
	free(url);
	/* No address outside the machine is dialled, not even to see it
	 * refused: the metadata ranges' rules are checked in
	 * tests/unit/egress/test_rules.c. */
	free(kv);
}

/* A name in the allowlist: reachable at its allowlisted port only. A
 * name resolving to the host's loopback (or any private, link-local or
 * metadata address) reaches it only when a literal entry names that
 * address too (issue 26: the name's owner chooses its addresses). */
static void test_name(void **state)
{
	(void)state;
	char *kv = xasprintf("network=localhost:%d", allowed.port), *url, *out;

	assert_int_equal(pol_cli(&srv, "acme", kv), 0);
	url = xasprintf("http://localhost:%d/", allowed.port);
	expect_refused(url);
	free(kv);
	kv = xasprintf("network=localhost:%d,127.0.0.1:%d", allowed.port, allowed.port);
	assert_int_equal(pol_cli(&srv, "acme", kv), 0);
	out = curl_in_sandbox(tok, url);
	if (!strstr(out, "hello-allowed"))
		fail_msg("by name: got '%s'", out);
	free(out);
	free(url);
	url = xasprintf("http://localhost:%d/", other.port);
	expect_refused(url);
	free(url);
	free(kv);
}

/* Without an allowlist: 403; without network: true: no network. */
static void test_without(void **state)
{
	(void)state;
	struct it_resp r;
	char *kv = xasprintf("network=127.0.0.1:%d", allowed.port);
	char *cmd = xasprintf("curl -s -S --max-time 5 http://127.0.0.1:%d/ 2>&1; echo rc=$?", allowed.port);

	assert_int_equal(pol_cli(&srv, "acme", kv), 0);
	assert_int_equal(pol_cli(&srv, "globex", "network=none"), 0);
	json_t *req = json_pack("{s:s, s:b}", "command", "true", "network", 1);
	assert_int_equal(ex_post(&srv, tok_globex, NULL, req, NULL, &r), 403);
	it_expect_error(&r, 403, "forbidden");
	it_resp_free(&r);
	json_t *res = ex_run(&srv, tok, cmd);
	const char *out = ex_stdout_ok(res);
	if (strstr(out, "hello-") || strstr(out, "rc=0"))
		fail_msg("without network: true: got '%s'", out);
	json_decref(res);
	free(cmd);
	free(kv);
}

/* Allowlists naming metadata or link-local addresses in another form
 * (IPv4-mapped, NAT64) or a CIDR around them: 400, the policy unchanged
 * (issue 26: an IPv6 socket's form of an IPv4 address reaches it). */
static void test_policy_refuses_hidden_metadata(void **state)
{
	(void)state;
	static const char *const specs[] = {"[::ffff:169.254.169.254]", "169.254.0.0/15", "[64:ff9b::/96]",
					    "[::ffff:169.254.169.254]:80", "[64:ff9b::a9fe:a9fe]"};

	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		char *body = xasprintf("{\"network\": \"%s\"}", specs[i]);
		json_t *res = NULL;
		long st = pol_put(&srv, tok_ops, "acme", body, &res);
		if (st != 400)
			fail_msg("PUT policy network=%s: %ld, want 400", specs[i], st);
		json_decref(res);
		free(body);
	}
}

/* /readyz says, per backend, whether network on request runs here. */
static void test_readyz(void **state)
{
	(void)state;
	json_t *j = NULL;
	assert_int_equal(it_get_json(&srv, NULL, "/readyz", &j), 200);
	json_t *b = json_array_get(json_object_get(j, "backends"), 0);
	assert_string_equal(jstr(b, "name"), "bwrap");
	json_t *net = json_object_get(b, "network");
	assert_true(jtrue(net, "available"));
	assert_true(jstr(net, "detail") && *jstr(net, "detail"));
	json_decref(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_allowlisted_only),
	    cmocka_unit_test(test_name),
	    cmocka_unit_test(test_without),
	    cmocka_unit_test(test_readyz),
	    cmocka_unit_test(test_policy_refuses_hidden_metadata),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
