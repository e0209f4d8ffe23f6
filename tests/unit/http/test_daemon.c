/* http/daemon.c marks its event threads (common/nowait.h), so the guard
 * of the network layers (sandbox/ssh.c refuse_here: no SSH I/O on an HTTP
 * event thread) holds for every request callback, also when the mark is
 * written only once per thread: a handler run on an event thread, for
 * every request of several connections and keep-alive, finds the network
 * refused; a thread that is not an event thread (the test's own, a fresh
 * one) does not, and the mark never leaks to it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/nowait.h"
#include "http/auditgate.h"
#include "http/daemon.h"
#include "http/metrics.h"
#include "http/route.h"

static int probe(struct http_req *r)
{
	bool refused = nowait_network_refused(); /* not in no-wait mode: the event mark alone */
	return http_reply_json(r, 200, json_pack("{s:b}", "refused", refused));
}

static const struct http_route routes[] = {
    {.method = "GET", .pattern = "/probe", .flags = RF_PUBLIC | RF_PROBE, .handler = probe},
};

static int64_t mono_ms_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int connect_to(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	return fd;
}

/* One GET /probe on fd (kept alive); its body, read until it is complete
 * or the deadline passes. */
static void get_probe(int fd, char *body, size_t bodysz)
{
	const char req[] = "GET /probe HTTP/1.1\r\nHost: t\r\n\r\n";
	assert_int_equal(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
	char resp[4096];
	size_t n = 0;
	int64_t until = mono_ms_now() + 10000;
	const char *end = NULL;
	while (!end || !strchr(end, '}')) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = (int)(until - mono_ms_now());
		assert_true(left > 0 && poll(&p, 1, left) == 1);
		ssize_t got = read(fd, resp + n, sizeof resp - 1 - n);
		assert_true(got > 0);
		n += (size_t)got;
		resp[n] = '\0';
		end = strstr(resp, "\r\n\r\n");
	}
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	snprintf(body, bodysz, "%s", end + 4);
}

static void *other_thread(void *arg)
{
	*(bool *)arg = nowait_network_refused();
	return NULL;
}

static void test_event_threads_refuse_the_network(void **state)
{
	(void)state;
	struct sbx_config cfg;
	cfg_defaults(&cfg);
	char err[256];
	assert_int_equal(cfg_set(&cfg, "listen", "127.0.0.1:0", err, sizeof err), 0);
	assert_int_equal(cfg_set(&cfg, "threads", "2", err, sizeof err), 0);
	assert_int_equal(cfg_set(&cfg, "log-requests", "false", err, sizeof err), 0);
	struct http_env env = {.cfg = &cfg, .routes = routes, .nroutes = 1};
	http_metrics_new(&env.metrics, routes, 1);
	http_audit_gate_new(&env.audit_gate, 1, 1);
	struct http_daemon *d = NULL;
	assert_int_equal(http_daemon_start(&d, &env, err, sizeof err), 0);

	/* Several connections (spread over both event threads), several
	 * requests each: every callback, not only a thread's first. */
	char body[256];
	for (int c = 0; c < 4; c++) {
		int fd = connect_to(http_daemon_port(d));
		for (int i = 0; i < 3; i++) {
			get_probe(fd, body, sizeof body);
			json_t *o = json_loads(body, 0, NULL);
			assert_non_null(o);
			assert_true(json_is_true(json_object_get(o, "refused")));
			json_decref(o);
		}
		close(fd);
	}
	assert_false(nowait_network_refused()); /* this thread was never an event thread */
	bool other = true;
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, other_thread, &other), 0);
	pthread_join(th, NULL);
	assert_false(other);

	http_daemon_stop(&d);
	http_audit_gate_free(&env.audit_gate);
	http_metrics_free(&env.metrics);
	cfg_free(&cfg);
}

/* The mark itself: once set it stays (marking again is harmless), it is
 * the calling thread's only, and in no-wait mode a refusal is noted. */
static void *marked_thread(void *arg)
{
	bool *out = arg;
	out[0] = nowait_network_refused();
	nowait_event_thread();
	nowait_event_thread();
	out[1] = nowait_network_refused();
	nowait_begin();
	out[2] = nowait_network_refused();
	out[3] = nowait_end(); /* the refusal was noted */
	out[4] = nowait_network_refused();
	return NULL;
}

static void test_mark_is_per_thread_and_sticky(void **state)
{
	(void)state;
	bool out[5] = {true, false, false, false, false};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, marked_thread, out), 0);
	pthread_join(th, NULL);
	assert_false(out[0]);
	assert_true(out[1]);
	assert_true(out[2]);
	assert_true(out[3]);
	assert_true(out[4]);
	assert_false(nowait_network_refused());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_event_threads_refuse_the_network),
	    cmocka_unit_test(test_mark_is_per_thread_and_sticky),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
