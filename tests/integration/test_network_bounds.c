/* Network on request under load (issue 26): a tenant whose allowlisted
 * name resolves slowly holds up neither the runner threads nor another
 * tenant's commands (setups run on their own threads, a few per tenant
 * at once), and a command's new connections are bounded (open at once,
 * and per second).
 *
 * The slow name: this test runs in a mount namespace of its own where
 * /etc/resolv.conf names 127.0.0.1, and answers the queries there itself
 * only when it chooses (the server, started from here, inherits both).
 * Every packet goes to 127.0.0.1 or stays inside a command's namespace. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

#define SLOW_NAME "slow.example"
#define A_COMMANDS 8 /* network-tenant-commands, the default */
#define SETUPS_PER_TENANT 2
#define CONN_MAX 3
#define CONN_PER_S 2

/* A DNS server on 127.0.0.1:53 that holds every query until released,
 * then answers each (held or new) with NXDOMAIN. */
struct dns {
	int fd;
	pthread_t thread;
	_Atomic bool release, stop;
	_Atomic int queries;
	pthread_mutex_t mu;
	uint16_t ports[64]; /* distinct source ports seen while held */
	int nports;
};

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
static struct dns dns;
static struct counter held;
static char *tok_a, *tok_b, *tok_ops;
static char resolv_path[64];

static void dns_answer(int fd, uint8_t *q, ssize_t n, const struct sockaddr_in *from)
{
	if (n < 12)
		return;
	q[2] |= 0x80;		     /* a response */
	q[3] = (q[3] & 0xf0) | 0x83; /* recursion available, NXDOMAIN */
	(void)!sendto(fd, q, (size_t)n, 0, (const struct sockaddr *)from, sizeof(*from));
}

struct held_q {
	uint8_t b[512];
	ssize_t n;
	struct sockaddr_in from;
};

static void *dns_main(void *arg)
{
	struct dns *d = arg;
	static struct held_q q[256];
	int nq = 0;

	while (!d->stop) {
		struct pollfd p = {.fd = d->fd, .events = POLLIN};
		socklen_t len = sizeof(q[0].from);

		if (d->release) {
			for (int i = 0; i < nq; i++)
				dns_answer(d->fd, q[i].b, q[i].n, &q[i].from);
			nq = 0;
		}
		if (poll(&p, 1, 50) <= 0)
			continue;
		struct held_q *h = &q[nq < 255 ? nq : 255];
		h->n = recvfrom(d->fd, h->b, sizeof(h->b), 0, (struct sockaddr *)&h->from, &len);
		if (h->n <= 0)
			continue;
		d->queries++;
		if (d->release) {
			dns_answer(d->fd, h->b, h->n, &h->from);
			continue;
		}
		pthread_mutex_lock(&d->mu);
		bool seen = false;
		for (int i = 0; i < d->nports; i++)
			seen = seen || d->ports[i] == h->from.sin_port;
		if (!seen && d->nports < 64)
			d->ports[d->nports++] = h->from.sin_port;
		pthread_mutex_unlock(&d->mu);
		if (nq < 255)
			nq++;
	}
	return NULL;
}

static int dns_start(struct dns *d)
{
	struct sockaddr_in in = {
	    .sin_family = AF_INET, .sin_port = htons(53), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	pthread_mutex_init(&d->mu, NULL);
	d->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (d->fd < 0 || bind(d->fd, (struct sockaddr *)&in, sizeof(in)) < 0) {
		fprintf(stderr, "cannot listen on 127.0.0.1:53: %s\n", strerror(errno));
		return -1;
	}
	return pthread_create(&d->thread, NULL, dns_main, d) == 0 ? 0 : -1;
}

static void dns_stop(struct dns *d)
{
	d->stop = true;
	pthread_join(d->thread, NULL);
	close(d->fd);
}

/* A private mount namespace whose /etc/resolv.conf sends the server's
 * lookups to dns (patient: one attempt, 30 s, so that a held query is a
 * setup in progress for that long). */
static int private_resolver(void)
{
	static const char conf[] = "nameserver 127.0.0.1\noptions timeout:30 attempts:1\n";
	int fd;

	snprintf(resolv_path, sizeof(resolv_path), "/tmp/it-resolv-XXXXXX");
	fd = mkstemp(resolv_path);
	if (fd < 0 || write(fd, conf, sizeof(conf) - 1) != (ssize_t)(sizeof(conf) - 1))
		return -1;
	close(fd);
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(resolv_path, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0) {
		fprintf(stderr, "private /etc/resolv.conf: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

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

/* The value of sandboxd_network_setups{state="<state>"} in /metrics. */
static long setups_gauge(const char *state)
{
	struct it_resp m;
	char *key = xasprintf("sandboxd_network_setups{state=\"%s\"} ", state);
	long v = -1;

	assert_int_equal(it_http(&srv, "GET", "/metrics", tok_ops, NULL, NULL, 0, &m), 0);
	const char *p = m.body ? strstr(m.body, key) : NULL;
	if (p)
		v = strtol(p + strlen(key), NULL, 10);
	it_resp_free(&m);
	free(key);
	return v;
}

static int setup(void **state)
{
	(void)state;
	static char setups[64], cmax[64], crate[64];
	snprintf(setups, sizeof(setups), "network-setups-per-tenant=%d", SETUPS_PER_TENANT);
	snprintf(cmax, sizeof(cmax), "network-conn-max=%d", CONN_MAX);
	snprintf(crate, sizeof(crate), "network-conn-per-s=%d", CONN_PER_S);
	/* two runner threads: before setups left them, A_COMMANDS slow
	 * setups held both */
	const char *const extra[] = {
	    "--set", "runner-threads=2",	 "--set", setups, "--set", cmax, "--set", crate,
	    "--set", "network-resolve-ms=60000", NULL};

	if (private_resolver() < 0 || dns_start(&dns) < 0 || counter_start(&held) < 0)
		return -1;
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	dns.release = true;
	int rc = it_finish_minted(&srv, toks, IT_NTOKS(toks));
	dns_stop(&dns);
	counter_stop(&held);
	unlink(resolv_path);
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

/* Tenant A starts A_COMMANDS network commands whose allowlisted name the
 * test's DNS server does not answer: their setups are pending as long as
 * it holds the queries (30 s and more). Meanwhile tenant B's echo, and
 * B's own network command (a literal address, nothing to resolve), end;
 * A never has more than SETUPS_PER_TENANT lookups in flight. Before the
 * fix each setup held a runner thread, and B's echo waited behind them. */
static void test_slow_names_hold_nobody(void **state)
{
	(void)state;
	char *ids[A_COMMANDS], *kv_b = xasprintf("network=127.0.0.1:%d", held.port);

	assert_int_equal(pol_cli(&srv, "acme", "network=" SLOW_NAME ":80"), 0);
	assert_int_equal(pol_cli(&srv, "globex", kv_b), 0);
	for (int i = 0; i < A_COMMANDS; i++)
		ids[i] = post_background(
		    tok_a, json_pack("{s:s, s:b, s:i}", "command", "true", "network", 1, "timeout_s", 120));
	long until = it_now_ms() + 20000;
	while (dns.queries == 0 && it_now_ms() < until)
		usleep(20000);
	assert_true(dns.queries > 0); /* A's setups are pending now */

	char *b_echo = post_background(tok_b, json_pack("{s:s}", "command", "echo b"));
	char *b_net = post_background(tok_b, json_pack("{s:s, s:b}", "command", "true", "network", 1));
	/* Within less than glibc's 30 s for a held query: done while every
	 * query of A is still unanswered. */
	json_t *v = ex_wait_state(&srv, tok_b, b_echo, "exited", 20000);
	if (!v)
		fail_msg("tenant B's echo did not end while tenant A's network setups were pending");
	assert_int_equal(jint(v, "exit_code"), 0);
	json_decref(v);
	/* and none of A's has run: their setups are still waiting on DNS */
	for (int i = 0; i < A_COMMANDS; i++) {
		char path[128];
		snprintf(path, sizeof(path), "/exec/%s", ids[i]);
		assert_int_equal(it_get_json(&srv, tok_a, path, &v), 200);
		if (strcmp(jstr(v, "state"), "running") != 0)
			fail_msg("A's command %d is %s before its name was answered", i, jstr(v, "state"));
		json_decref(v);
	}
	v = ex_wait_state(&srv, tok_b, b_net, "exited", 20000);
	if (!v)
		fail_msg("tenant B's network command did not end while tenant A's setups were pending");
	json_decref(v);
	assert_false(dns.release);
	pthread_mutex_lock(&dns.mu);
	int ports = dns.nports;
	pthread_mutex_unlock(&dns.mu);
	fprintf(stderr, "tenant A: %d queries, %d lookups in flight at once\n", dns.queries, ports);
	if (ports > SETUPS_PER_TENANT)
		fail_msg("%d of tenant A's lookups in flight at once, want at most %d", ports,
			 SETUPS_PER_TENANT);
	long running = setups_gauge("running"), waiting = setups_gauge("waiting");
	fprintf(stderr, "setups: %ld running, %ld waiting\n", running, waiting);
	if (running < 1 || running > SETUPS_PER_TENANT || running + waiting != A_COMMANDS)
		fail_msg("setups: %ld running, %ld waiting; want 1..%d running of A's %d", running, waiting,
			 SETUPS_PER_TENANT, A_COMMANDS);

	/* A's network commands are at network-tenant-commands (8 by
	 * default): one more is refused at once, and nothing else of A. */
	struct it_resp r;
	assert_int_equal(
	    ex_post(&srv, tok_a, NULL, json_pack("{s:s, s:b}", "command", "true", "network", 1), NULL, &r),
	    429);
	it_expect_error(&r, 429, "too_many_requests");
	it_resp_free(&r);
	v = ex_run(&srv, tok_a, "echo a");
	assert_string_equal(ex_stdout_ok(v), "a\n");
	json_decref(v);

	/* Release: every A command then runs (its name unresolved). */
	dns.release = true;
	for (int i = 0; i < A_COMMANDS; i++) {
		v = ex_wait_state(&srv, tok_a, ids[i], "exited", 60000);
		if (!v)
			fail_msg("A's command %d did not end once its name was answered", i);
		json_decref(v);
		free(ids[i]);
	}
	free(b_echo);
	free(b_net);
	free(kv_b);
	counter_reset(&held);
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
	    cmocka_unit_test(test_slow_names_hold_nobody),
	    cmocka_unit_test(test_connection_bounds),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
