/* Approval (issue 16): a tenant whose policy asks for it has its commands
 * wait, in state pending_approval, until a person with the approve scope
 * approves or rejects them, the approval timeout rejects them, or they are
 * cancelled. The requester waits, or (wait: false) follows the feed. A
 * token never approves its own request. Decisions are in the exec row and
 * the audit; a crash leaves waiting commands lost. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

#define APPROVAL_TIMEOUT_S 4

static struct it_server srv;
static char *tok_req, *tok_alice, *tok_self, *tok_nosub, *tok_exec_only, *tok_admin, *tok_globex,
    *tok_globex_bob;

static int mint(void)
{
	tok_req = it_token_sub(&srv, "acme", "exec fs:read", "agent-1");
	tok_alice = it_token_sub(&srv, "acme", "approve audit:read", "alice");
	/* An approver token with the requester's sub (approver keys never
	 * carry exec: the requester asks with its own token). */
	tok_self = it_token_sub(&srv, "acme", "approve", "agent-1");
	tok_nosub = it_token(&srv, "acme", "approve");
	tok_exec_only = it_token_sub(&srv, "acme", "exec", "carol");
	tok_admin = it_token_sub(&srv, "ops", "admin audit:read", "olga");
	tok_globex = it_token_sub(&srv, "globex", NULL, "agent-g");
	tok_globex_bob = it_token_sub(&srv, "globex", "approve", "bob");
	return tok_req && tok_alice && tok_self && tok_nosub && tok_exec_only && tok_admin && tok_globex &&
		       tok_globex_bob
		   ? 0
		   : -1;
}

static int setup(void **state)
{
	(void)state;
	static char timeout[48];
	snprintf(timeout, sizeof timeout, "approval-timeout-s=%d", APPROVAL_TIMEOUT_S);
	const char *const extra[] = {"--set", timeout, NULL};
	if (it_start(&srv, extra) < 0 || mint() < 0)
		return -1;
	if (pol_put(&srv, tok_admin, "acme", "{\"approval\": \"always\"}", NULL) != 200)
		return -1;
	return pol_put(&srv, tok_admin, "globex", "{\"approval\": [\"rm *\", \"*git push*\"]}", NULL) == 200
		   ? 0
		   : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish(&srv);
	char **all[] = {&tok_req,	&tok_alice, &tok_self,	 &tok_nosub,
			&tok_exec_only, &tok_admin, &tok_globex, &tok_globex_bob};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		free(*all[i]);
	return rc;
}

/* POST path with body (may be NULL); the status, *out the body. */
static long post(const char *tok, const char *path, const char *body, json_t **out)
{
	struct it_resp r;
	if (it_http(&srv, "POST", path, tok, NULL, body, body ? strlen(body) : 0, &r) != 0)
		return -1;
	if (out)
		*out = it_json(&r);
	long st = r.status;
	it_resp_free(&r);
	return st;
}

static long decide(const char *tok, const char *id, const char *verb, const char *body, json_t **out)
{
	char path[128];
	snprintf(path, sizeof path, "/exec/%s/%s", id, verb);
	return post(tok, path, body, out);
}

/* Whether name exists in tenant's default session directory. */
static bool session_file(const char *tenant, const char *name)
{
	char seg[64];
	it_session_segment("default", seg, sizeof seg);
	char *p = xasprintf("%s/tenants/%s/workspace/sessions/%s/%s", srv.dir, tenant, seg, name);
	bool there = access(p, F_OK) == 0;
	free(p);
	return there;
}

/* Start POST /exec of cmd with id in the background and wait until it is
 * pending approval. */
static void bg_pending(struct bg_req *b, const char *tok, const char *cmd, const char *id)
{
	bg_exec(b, &srv, tok, json_pack("{s:s, s:s}", "command", cmd, "id", id), NULL);
	json_t *v = ex_wait_state(&srv, tok_alice, id, "pending_approval", 20000);
	assert_non_null(v);
	assert_true(json_is_null(json_object_get(v, "result")));
	assert_string_equal(jstr(v, "requested_by"), "agent-1");
	assert_true(json_is_null(json_object_get(v, "approval")));
	assert_non_null(jstr(v, "expires_at"));
	json_decref(v);
}

/* The audit record of route for target, once it is committed. */
static json_t *audit_of(const char *route, const char *target)
{
	long until = it_now_ms() + 10000;
	char *path = xasprintf("/audit?tenant=acme&limit=1000&route=%s", route);
	json_t *found = NULL;
	while (!found && it_now_ms() < until) {
		json_t *page = NULL;
		assert_int_equal(it_get_json(&srv, tok_admin, path, &page), 200);
		json_t *rec;
		size_t i;
		json_array_foreach(json_object_get(page, "records"), i, rec) {
			if (!found && jstr(rec, "target") && strcmp(jstr(rec, "target"), target) == 0)
				found = json_incref(rec); /* the first: a later request may match too */
		}
		json_decref(page);
		if (!found)
			usleep(50000);
	}
	free(path);
	return found;
}

static void test_approve(void **state)
{
	(void)state;
	struct bg_req b;
	bg_pending(&b, tok_req, "echo approved > ap1.txt; echo hi", "ap-1");
	assert_false(session_file("acme", "ap1.txt"));
	json_t *d = NULL;
	assert_int_equal(decide(tok_alice, "ap-1", "approve", NULL, &d), 200);
	assert_string_equal(jstr(d, "decision"), "approved");
	assert_string_equal(jstr(d, "decided_by"), "alice");
	json_decref(d);
	json_t *res = bg_join(&b);
	assert_int_equal(b.resp.status, 200);
	assert_string_equal(ex_stdout_ok(res), "hi\n");
	it_resp_free(&b.resp);
	json_decref(res);
	json_t *v = ex_wait_state(&srv, tok_alice, "ap-1", "exited", 10000);
	assert_non_null(v);
	json_t *ap = json_object_get(v, "approval");
	assert_string_equal(jstr(ap, "decision"), "approved");
	assert_string_equal(jstr(ap, "decided_by"), "alice");
	assert_non_null(jstr(ap, "decided_at"));
	assert_string_equal(jstr(json_object_get(v, "policy"), "approval"), "always");
	json_decref(v);
	/* Approved once: deciding again is a conflict. */
	assert_int_equal(decide(tok_alice, "ap-1", "approve", NULL, NULL), 409);
	assert_true(session_file("acme", "ap1.txt"));
	json_t *rec = audit_of("/exec/%7Bid%7D/approve", "ap-1");
	assert_non_null(rec);
	assert_string_equal(jstr(rec, "sub"), "alice");
	assert_int_equal(jint(rec, "status"), 200);
	json_decref(rec);
}

static void test_reject(void **state)
{
	(void)state;
	struct bg_req b;
	bg_pending(&b, tok_req, "touch rejected.txt", "ap-2");
	json_t *d = NULL;
	assert_int_equal(decide(tok_alice, "ap-2", "reject", "{\"reason\": \"not on a Friday\"}", &d), 200);
	assert_string_equal(jstr(d, "decision"), "rejected");
	json_decref(d);
	json_decref(bg_join(&b));
	it_expect_error(&b.resp, 403, "rejected");
	assert_non_null(strstr(b.resp.body, "not on a Friday"));
	assert_non_null(strstr(b.resp.body, "alice"));
	it_resp_free(&b.resp);
	json_t *v = ex_wait_state(&srv, tok_alice, "ap-2", "rejected", 5000);
	assert_non_null(v);
	json_t *ap = json_object_get(v, "approval");
	assert_string_equal(jstr(ap, "decision"), "rejected");
	assert_string_equal(jstr(ap, "decided_by"), "alice");
	assert_string_equal(jstr(ap, "reason"), "not on a Friday");
	assert_true(json_is_null(json_object_get(v, "result")));
	json_decref(v);
	assert_false(session_file("acme", "rejected.txt"));
	/* The same id again answers the rejection, and runs nothing. */
	struct it_resp r;
	assert_int_equal(ex_post(&srv, tok_req, NULL,
				 json_pack("{s:s, s:s}", "command", "touch rejected.txt", "id", "ap-2"), NULL,
				 &r),
			 403);
	it_expect_error(&r, 403, "rejected");
	it_resp_free(&r);
	/* A reject without a body has no reason. */
	bg_pending(&b, tok_req, "true", "ap-2b");
	assert_int_equal(decide(tok_alice, "ap-2b", "reject", NULL, NULL), 200);
	json_decref(bg_join(&b));
	it_expect_error(&b.resp, 403, "rejected");
	it_resp_free(&b.resp);
}

static void test_timeout(void **state)
{
	(void)state;
	struct bg_req b;
	long t0 = it_now_ms();
	bg_pending(&b, tok_req, "touch late.txt", "ap-3");
	json_decref(bg_join(&b));
	long took = it_now_ms() - t0;
	it_expect_error(&b.resp, 403, "rejected");
	assert_non_null(strstr(b.resp.body, "approval timed out"));
	it_resp_free(&b.resp);
	assert_true(took >= (APPROVAL_TIMEOUT_S - 1) * 1000);
	assert_true(took < (APPROVAL_TIMEOUT_S + 10) * 1000);
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok_alice, "/exec/ap-3", &v), 200);
	assert_string_equal(jstr(v, "state"), "rejected");
	json_t *ap = json_object_get(v, "approval");
	assert_true(json_is_null(json_object_get(ap, "decided_by")));
	assert_non_null(strstr(jstr(ap, "reason"), "timed out"));
	json_decref(v);
	assert_int_equal(decide(tok_alice, "ap-3", "approve", NULL, NULL), 409);
	/* Counted: ap-2, ap-2b and ap-3 by now. */
	struct it_resp m;
	assert_int_equal(it_http(&srv, "GET", "/metrics", tok_admin, NULL, NULL, 0, &m), 0);
	const char *line = strstr(m.body, "sandboxd_execs_finished_total{outcome=\"rejected\"} ");
	assert_non_null(line);
	assert_true(strtol(strchr(line, ' ') + 1, NULL, 10) >= 3);
	it_resp_free(&m);
}

/* A raw GET /events; the connected fd. */
static int feed_open(const char *tok)
{
	int fd = it_connect(&srv);
	assert_true(fd >= 0);
	char *req = xasprintf("GET /events?access_token=%s HTTP/1.1\r\nHost: x\r\n\r\n", tok);
	assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	free(req);
	return fd;
}

/* Read the feed into *acc (a string) until it holds needle (true) or timeout. */
static bool feed_until(int fd, char **acc, size_t *len, const char *needle, long timeout_ms)
{
	long until = it_now_ms() + timeout_ms;
	while (!strstr(*acc, needle)) {
		long left = until - it_now_ms();
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		char chunk[4096];
		ssize_t n = recv(fd, chunk, sizeof chunk, 0);
		if (n <= 0)
			return false;
		*acc = xrealloc(*acc, *len + (size_t)n + 1);
		memcpy(*acc + *len, chunk, (size_t)n);
		*len += (size_t)n;
		(*acc)[*len] = '\0';
	}
	return true;
}

/* The data of the first `event` in the feed text (a new reference). */
static json_t *event_data(const char *acc, const char *event)
{
	char *head = xasprintf("event: %s\n", event);
	const char *e = strstr(acc, head);
	free(head);
	const char *d = e ? strstr(e, "data: ") : NULL;
	assert_non_null(d);
	d += 6;
	json_t *j = json_loadb(d, strcspn(d, "\n"), 0, NULL);
	assert_non_null(j);
	return j;
}

/* wait: false answers 202; the feed shows the wait, the decision and the run. */
static void test_wait_false_on_the_feed(void **state)
{
	(void)state;
	int fd = feed_open(tok_alice);
	char *acc = xstrdup("");
	size_t len = 0;
	assert_true(feed_until(fd, &acc, &len, "text/event-stream", 10000));
	json_t *body = NULL;
	long st = ex_post(&srv, tok_req, NULL,
			  json_pack("{s:s, s:s, s:b}", "command", "echo later", "id", "ap-4", "wait", 0),
			  &body, NULL);
	assert_int_equal(st, 202);
	assert_string_equal(jstr(body, "id"), "ap-4");
	assert_string_equal(jstr(body, "state"), "pending_approval");
	json_decref(body);
	assert_true(feed_until(fd, &acc, &len, "event: pending_approval", 10000));
	assert_non_null(strstr(acc, "\"id\":\"ap-4\""));
	assert_non_null(strstr(acc, "\"requested_by\":\"agent-1\""));
	/* A retry with the same id and wait: false is 202 again. */
	assert_int_equal(
	    ex_post(&srv, tok_req, NULL,
		    json_pack("{s:s, s:s, s:b}", "command", "echo later", "id", "ap-4", "wait", 0), NULL,
		    NULL),
	    202);
	usleep(300000); /* so that asking and starting are distinct times */
	assert_int_equal(decide(tok_alice, "ap-4", "approve", NULL, NULL), 200);
	assert_true(feed_until(fd, &acc, &len, "\"decision\":\"approved\"", 10000));
	assert_true(feed_until(fd, &acc, &len, "event: exit", 20000));
	char *dec = strstr(acc, "event: decision"), *start = strstr(acc, "event: start");
	assert_non_null(dec);
	assert_non_null(start);
	assert_true(dec < start);
	json_t *pend = event_data(acc, "pending_approval"), *sev = event_data(acc, "start");
	close(fd);
	free(acc);
	json_t *v = ex_wait_state(&srv, tok_alice, "ap-4", "exited", 10000);
	assert_non_null(v);
	assert_string_equal(jstr(json_object_get(v, "result"), "stdout"), "later\n");
	/* It started when approved (the row and the start event agree), not
	 * when it was asked for. */
	assert_string_equal(jstr(sev, "started_at"), jstr(v, "started_at"));
	assert_string_not_equal(jstr(pend, "started_at"), jstr(v, "started_at"));
	json_decref(pend);
	json_decref(sev);
	json_decref(v);
}

/* A token never approves its own request; approving needs a sub and the scope. */
static void test_self_approval_refused(void **state)
{
	(void)state;
	struct bg_req b;
	bg_exec(&b, &srv, tok_req, json_pack("{s:s, s:s}", "command", "echo mine", "id", "ap-5"), NULL);
	json_t *v = ex_wait_state(&srv, tok_alice, "ap-5", "pending_approval", 20000);
	assert_non_null(v);
	json_decref(v);
	json_t *e = NULL;
	assert_int_equal(decide(tok_self, "ap-5", "approve", NULL, &e), 403);
	assert_string_equal(jstr(json_object_get(e, "error"), "code"), "forbidden");
	json_decref(e);
	/* The requester's other token with the same sub is refused too. */
	assert_int_equal(decide(tok_req, "ap-5", "approve", NULL, &e), 403);
	assert_string_equal(jstr(json_object_get(e, "error"), "code"), "insufficient_scope");
	json_decref(e);
	assert_int_equal(decide(tok_nosub, "ap-5", "approve", NULL, &e), 403);
	assert_string_equal(jstr(json_object_get(e, "error"), "code"), "forbidden");
	json_decref(e);
	assert_int_equal(decide(tok_exec_only, "ap-5", "approve", NULL, &e), 403);
	assert_string_equal(jstr(json_object_get(e, "error"), "code"), "insufficient_scope");
	json_decref(e);
	/* Another tenant's approver does not see it. */
	assert_int_equal(decide(tok_globex_bob, "ap-5", "approve", NULL, NULL), 404);
	v = NULL;
	assert_int_equal(it_get_json(&srv, tok_alice, "/exec/ap-5", &v), 200);
	assert_string_equal(jstr(v, "state"), "pending_approval");
	json_decref(v);
	assert_int_equal(decide(tok_alice, "ap-5", "approve", NULL, NULL), 200);
	json_t *res = bg_join(&b);
	assert_string_equal(ex_stdout_ok(res), "mine\n");
	json_decref(res);
	it_resp_free(&b.resp);
}

/* Cancel of a waiting command: it ends cancelled, having run nothing. */
static void test_cancel_pending(void **state)
{
	(void)state;
	assert_int_equal(
	    ex_post(&srv, tok_req, NULL,
		    json_pack("{s:s, s:s, s:b}", "command", "touch cancelled.txt", "id", "ap-6", "wait", 0),
		    NULL, NULL),
	    202);
	json_t *c = NULL;
	assert_int_equal(post(tok_req, "/exec/ap-6/cancel", NULL, &c), 202);
	json_decref(c);
	json_t *v = ex_wait_state(&srv, tok_alice, "ap-6", "cancelled", 10000);
	assert_non_null(v);
	assert_true(jtrue(json_object_get(v, "result"), "cancelled"));
	json_decref(v);
	assert_false(session_file("acme", "cancelled.txt"));
	assert_int_equal(decide(tok_alice, "ap-6", "approve", NULL, NULL), 409);
	assert_int_equal(decide(tok_alice, "nope", "approve", NULL, NULL), 404);
	/* A waiting request whose client goes away cancels its command too. */
	const char *raw = "POST /exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
	char *req = xasprintf("%sAuthorization: Bearer %s\r\nContent-Length: %zu\r\n\r\n%s", raw, tok_req,
			      strlen("{\"command\":\"true\",\"id\":\"ap-7\"}"),
			      "{\"command\":\"true\",\"id\":\"ap-7\"}");
	int fd = it_connect(&srv);
	assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	free(req);
	v = ex_wait_state(&srv, tok_alice, "ap-7", "pending_approval", 10000);
	assert_non_null(v);
	json_decref(v);
	close(fd);
	v = ex_wait_state(&srv, tok_alice, "ap-7", "cancelled", 10000);
	assert_non_null(v);
	json_decref(v);
}

/* A background request is not kept waiting for a decision either: 202
 * with the exec, waiting; approved, it runs on its own. */
static void test_background_waits_too(void **state)
{
	(void)state;
	json_t *body = NULL;
	assert_int_equal(
	    ex_post(&srv, tok_req, NULL,
		    json_pack("{s:s, s:s, s:b}", "command", "echo bg", "id", "ap-bg", "background", 1), &body,
		    NULL),
	    202);
	assert_string_equal(jstr(body, "state"), "pending_approval");
	assert_true(json_is_null(json_object_get(body, "result")));
	json_decref(body);
	assert_int_equal(decide(tok_alice, "ap-bg", "approve", NULL, NULL), 200);
	json_t *v = ex_wait_state(&srv, tok_alice, "ap-bg", "exited", 20000);
	assert_non_null(v);
	assert_string_equal(jstr(json_object_get(v, "result"), "stdout"), "bg\n");
	json_decref(v);
}

/* Patterns: only matching commands wait. */
static void test_patterns(void **state)
{
	(void)state;
	json_t *res = ex_run(&srv, tok_globex, "echo free");
	assert_string_equal(ex_stdout_ok(res), "free\n");
	json_decref(res);
	json_t *body = NULL;
	assert_int_equal(
	    ex_post(&srv, tok_globex, NULL,
		    json_pack("{s:s, s:s, s:b}", "command", "rm -rf data", "id", "pat-1", "wait", 0), &body,
		    NULL),
	    202);
	json_decref(body);
	assert_int_equal(ex_post(&srv, tok_globex, NULL,
				 json_pack("{s:s, s:s, s:b}", "command", "cd src && git push origin", "id",
					   "pat-2", "wait", 0),
				 &body, NULL),
			 202);
	json_decref(body);
	assert_int_equal(decide(tok_globex_bob, "pat-1", "reject", "{\"reason\": \"no\"}", NULL), 200);
	assert_int_equal(decide(tok_globex_bob, "pat-2", "reject", NULL, NULL), 200);
	json_t *v = ex_wait_state(&srv, tok_globex, "pat-1", "rejected", 5000);
	assert_non_null(v);
	json_decref(v);
}

/* A crash leaves a waiting command lost (like a running one), and a clean
 * shutdown cancels it. */
static void test_restart(void **state)
{
	(void)state;
	assert_int_equal(ex_post(&srv, tok_req, NULL,
				 json_pack("{s:s, s:s, s:b}", "command", "true", "id", "ap-8", "wait", 0),
				 NULL, NULL),
			 202);
	assert_int_equal(it_stop(&srv, SIGKILL), 128 + SIGKILL);
	assert_int_equal(it_restart(&srv, NULL), 0);
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok_alice, "/exec/ap-8", &v), 200);
	assert_string_equal(jstr(v, "state"), "lost");
	json_decref(v);
	assert_int_equal(decide(tok_alice, "ap-8", "approve", NULL, NULL), 409);
	assert_int_equal(ex_post(&srv, tok_req, NULL,
				 json_pack("{s:s, s:s, s:b}", "command", "true", "id", "ap-9", "wait", 0),
				 NULL, NULL),
			 202);
	assert_int_equal(it_stop(&srv, SIGTERM), 0);
	assert_int_equal(it_restart(&srv, NULL), 0);
	assert_int_equal(it_get_json(&srv, tok_alice, "/exec/ap-9", &v), 200);
	assert_string_equal(jstr(v, "state"), "cancelled");
	json_decref(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_approve),
	    cmocka_unit_test(test_reject),
	    cmocka_unit_test(test_timeout),
	    cmocka_unit_test(test_wait_false_on_the_feed),
	    cmocka_unit_test(test_self_approval_refused),
	    cmocka_unit_test(test_cancel_pending),
	    cmocka_unit_test(test_background_waits_too),
	    cmocka_unit_test(test_patterns),
	    cmocka_unit_test(test_restart),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
