/* Network on request under load (issues 26, 29): a tenant has at most
 * network-tenant-commands networked commands at once (429 beyond, and
 * nothing else of it refused), and a command's new connections are
 * bounded (open at once, and per second). Every packet goes to
 * 127.0.0.1 or stays inside a command's namespace. What a hostile
 * tenant's connections and DNS do to the others' commands is
 * test_egress_hostile.c's; by-name decisions are test_egress.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

#define A_COMMANDS 8 /* network-tenant-commands, the default */
#define CONN_MAX 3
#define CONN_PER_S 2

/* A loopback listener counting the connections it accepts; with hold
 * each is kept open until counter_reset, else closed at once. */
struct counter {
	int fd, port;
	_Atomic bool hold;
	_Atomic int accepted;
	int conns[256];
	_Atomic int nheld;
	pthread_t thread;
};

static struct it_server srv;
static struct counter held;
static char *tok_a, *tok_b, *tok_ops;

static void *counter_main(void *arg)
{
	struct counter *c = arg;

	for (;;) {
		int fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (fd < 0)
			break;
		c->accepted++;
		if (c->hold && c->nheld < 256)
			c->conns[c->nheld++] = fd;
		else
			close(fd);
	}
	return NULL;
}

static int counter_start(struct counter *c)
{
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(in);

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0 || bind(c->fd, (struct sockaddr *)&in, len) < 0 || listen(c->fd, 256) < 0 ||
	    getsockname(c->fd, (struct sockaddr *)&in, &len) < 0)
		return -1;
	c->port = ntohs(in.sin_port);
	return pthread_create(&c->thread, NULL, counter_main, c) == 0 ? 0 : -1;
}

/* Close what was accepted so far; the count starts again at 0. */
static void counter_reset(struct counter *c)
{
	for (int i = 0; i < c->nheld; i++)
		close(c->conns[i]);
	c->nheld = 0;
	c->accepted = 0;
}

static void counter_stop(struct counter *c)
{
	shutdown(c->fd, SHUT_RDWR);
	pthread_join(c->thread, NULL);
	close(c->fd);
	counter_reset(c);
}

static const struct it_tok toks[] = {
    {&tok_a, "acme", NULL}, {&tok_b, "globex", NULL}, {&tok_ops, "ops", "admin"}};

static int setup(void **state)
{
	(void)state;
	static char cmax[64], crate[64];
	snprintf(cmax, sizeof(cmax), "network-conn-max=%d", CONN_MAX);
	snprintf(crate, sizeof(crate), "network-conn-per-s=%d", CONN_PER_S);
	const char *const extra[] = {"--set", cmax, "--set", crate, NULL};

	if (counter_start(&held) < 0)
		return -1;
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish_minted(&srv, toks, IT_NTOKS(toks));
	counter_stop(&held);
	return rc;
}

static char *post_background(const char *tok, json_t *req)
{
	json_t *res = NULL;
	json_object_set_new(req, "background", json_true());
	long st = ex_post(&srv, tok, NULL, req, &res, NULL);
	if (st != 202 && st != 200)
		fail_msg("background exec: %ld", st);
	char *id = xstrdup(jstr(res, "id"));
	json_decref(res);
	return id;
}

/* Tenant A runs A_COMMANDS network commands (each until the test's
 * mark): one more is refused at once (429), and nothing else of A; B's
 * network command is not A's bound. */
static void test_tenant_commands_bound(void **state)
{
	(void)state;
	char *ids[A_COMMANDS], *kv = xasprintf("network=127.0.0.1:%d", held.port);
	char *ws = xasprintf("%s/tenants/acme/workspace", srv.dir);

	assert_int_equal(pol_cli(&srv, "acme", kv), 0);
	assert_int_equal(pol_cli(&srv, "globex", kv), 0);
	it_sh_quiet("rm -f %s/release", ws);
	for (int i = 0; i < A_COMMANDS; i++)
		ids[i] = post_background(
		    tok_a,
		    json_pack("{s:s, s:b, s:i}", "command",
			      "i=0; while [ ! -e /workspace/release ] && [ $i -lt 1200 ]; do sleep 0.05; "
			      "i=$((i+1)); done",
			      "network", 1, "timeout_s", 120));
	for (int i = 0; i < A_COMMANDS; i++) {
		json_t *v = ex_wait_state(&srv, tok_a, ids[i], "running", 20000);
		assert_non_null(v);
		json_decref(v);
	}
	struct it_resp r;
	assert_int_equal(
	    ex_post(&srv, tok_a, NULL, json_pack("{s:s, s:b}", "command", "true", "network", 1), NULL, &r),
	    429);
	it_expect_error(&r, 429, "too_many_requests");
	it_resp_free(&r);
	json_t *v = ex_run(&srv, tok_a, "echo a");
	assert_string_equal(ex_stdout_ok(v), "a\n");
	json_decref(v);
	v = ex_ok(&srv, tok_b, NULL, json_pack("{s:s, s:b}", "command", "echo b", "network", 1));
	assert_string_equal(ex_stdout_ok(v), "b\n");
	json_decref(v);

	assert_int_equal(it_sh("touch %s/release", ws), 0);
	for (int i = 0; i < A_COMMANDS; i++) {
		v = ex_wait_state(&srv, tok_a, ids[i], "exited", 60000);
		if (!v)
			fail_msg("A's command %d did not end once released", i);
		json_decref(v);
		free(ids[i]);
	}
	free(ws);
	free(kv);
}

/* Connections from one command: at most CONN_MAX open at once, and new
 * ones at CONN_PER_S per second (burst twice that); the listener counts
 * what it accepted. Before the fix every attempt got through. */
static void test_connection_bounds(void **state)
{
	(void)state;
	char *kv = xasprintf("network=127.0.0.1:%d", held.port);
	assert_int_equal(pol_cli(&srv, "acme", kv), 0);
	counter_reset(&held);
	held.hold = true;

	/* 12 at once, each held open by the listener until curl gives up */
	char *cmd = xasprintf("for i in 1 2 3 4 5 6 7 8 9 10 11 12; do curl -s --max-time 3 "
			      "http://127.0.0.1:%d/ >/dev/null & done; wait; echo done",
			      held.port);
	json_t *res = ex_ok(&srv, tok_a, NULL,
			    json_pack("{s:s, s:b, s:i}", "command", cmd, "network", 1, "timeout_s", 60));
	ex_stdout_ok(res);
	json_decref(res);
	int open_at_once = held.accepted;
	fprintf(stderr, "12 connections at once: %d accepted\n", open_at_once);
	if (open_at_once > CONN_MAX || open_at_once < 1)
		fail_msg("%d connections open at once, want 1..%d", open_at_once, CONN_MAX);
	held.hold = false;
	counter_reset(&held);
	free(cmd);

	/* one after another, each closed at once: the rate binds */
	cmd = xasprintf("s=$(date +%%s%%N); i=0; while [ $i -lt 60 ]; do curl -s --max-time 1 "
			"http://127.0.0.1:%d/ >/dev/null; i=$((i+1)); done; e=$(date +%%s%%N); "
			"echo $(( (e - s) / 1000000 ))",
			held.port);
	res = ex_ok(&srv, tok_a, NULL,
		    json_pack("{s:s, s:b, s:i}", "command", cmd, "network", 1, "timeout_s", 120));
	long ms = atol(ex_stdout_ok(res));
	json_decref(res);
	fprintf(stderr, "60 connections in %ld ms: %d accepted\n", ms, held.accepted);
	int got = held.accepted, bound = 2 * CONN_PER_S + CONN_PER_S * (int)(ms / 1000 + 1);
	if (got > bound || got < 1)
		fail_msg("%d of 60 connections in %ld ms accepted, want 1..%d (%d per second, burst %d)", got,
			 ms, bound, CONN_PER_S, 2 * CONN_PER_S);
	counter_reset(&held);
	free(cmd);
	free(kv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tenant_commands_bound),
	    cmocka_unit_test(test_connection_bounds),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
