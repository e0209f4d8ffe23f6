/* Why a command died (issue 27, "Say why a command died"): a command the
 * OOM killer ended under its memory limit says oom_killed, one whose
 * forks its pids limit refused says pids_limited, and one that ran
 * without cgroups says uncontained, in the answer of POST /exec, in GET
 * /exec/{id}, in its `exit` event and in its audit record; a normal
 * command says none of them (each always present, false). Real bwrap,
 * real cgroups (v1 on the hosts this runs on), over HTTP. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

static struct it_server srv;
static char *tok, *tok_audit, *tok_glx, *tok_glx_audit, *tok_ops;

/* Two children of 120 MiB each: the tree does not fit acme's 200 MiB. */
#define HOG "python3 -c 'import time; b = b\"x\" * (120 << 20); time.sleep(4)'"
#define OOM_CMD HOG " & " HOG " & wait; echo waited"
/* A fork storm: 100 sleepers under globex's 40 processes. */
#define FORK_CMD "i=0; while [ $i -lt 100 ]; do sleep 3 & i=$((i+1)); done; wait"

static int setup(void **state)
{
	(void)state;
	/* /tmp (charged to the command's memory group) is never what fills it. */
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), "--set", "tmp-size-bytes=1073741824",
				     NULL};
	if (it_start(&srv, extra) < 0)
		return -1;
	tok = it_token(&srv, "acme", NULL);
	tok_audit = it_token(&srv, "acme", "audit:read");
	tok_glx = it_token(&srv, "globex", NULL);
	tok_glx_audit = it_token(&srv, "globex", "audit:read");
	tok_ops = it_token(&srv, "ops", "admin");
	if (!tok || !tok_audit || !tok_glx || !tok_glx_audit || !tok_ops)
		return -1;
	if (pol_put(&srv, tok_ops, "acme", "{\"mem_limit_bytes\": 209715200}", NULL) != 200)
		return -1;
	return pol_put(&srv, tok_ops, "globex", "{\"nproc_limit\": 40}", NULL) == 200 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish(&srv);
	free(tok);
	free(tok_audit);
	free(tok_glx);
	free(tok_glx_audit);
	free(tok_ops);
	return rc;
}

/* The three fields of a ShellResult (or an audit record): each present
 * as a boolean, with the values wanted. */
static void expect_why(json_t *o, bool oom, bool pids, bool uncontained)
{
	static const char *const names[3] = {"oom_killed", "pids_limited", "uncontained"};
	const bool want[3] = {oom, pids, uncontained};
	for (int i = 0; i < 3; i++) {
		json_t *v = json_object_get(o, names[i]);
		if (!json_is_boolean(v) || json_is_true(v) != want[i]) {
			char *text = json_dumps(o, JSON_COMPACT);
			print_error("%s: want %s in %s\n", names[i], want[i] ? "true" : "false", text);
			free(text);
			fail();
		}
	}
}

/* POST /exec of cmd by t with id; the ShellResult (new reference). */
static json_t *run_id(struct it_server *s, const char *t, const char *id, const char *cmd)
{
	return ex_ok(s, t, NULL, json_pack("{s:s, s:s, s:i}", "command", cmd, "id", id, "timeout_s", 60));
}

/* GET /exec/{id}'s result (new reference), once it has one. */
static json_t *stored_result(struct it_server *s, const char *t, const char *id)
{
	json_t *v = ex_wait_state(s, t, id, "exited|timed_out|cancelled", 60000);
	assert_non_null(v);
	json_t *res = json_incref(json_object_get(v, "result"));
	json_decref(v);
	assert_true(json_is_object(res));
	return res;
}

/* The data of exec id's `exit` event, replayed from the store (new
 * reference). */
static json_t *exit_event(struct it_server *s, const char *t, const char *id)
{
	char *path = xasprintf("/exec/%s/events", id);
	struct it_resp r;
	assert_int_equal(it_http(s, "GET", path, t, NULL, NULL, 0, &r), 0);
	free(path);
	assert_int_equal(r.status, 200);
	const char *ev = r.body ? strstr(r.body, "event: exit\n") : NULL;
	const char *data = ev ? strstr(ev, "data: ") : NULL;
	assert_non_null(data);
	data += strlen("data: ");
	json_t *j = json_loadb(data, strcspn(data, "\n"), 0, NULL);
	it_resp_free(&r);
	assert_non_null(j);
	return j;
}

/* The audit record of the POST /exec that ran cmd (new reference), once
 * written (records are written in batches after the answer). */
static json_t *exec_audit(struct it_server *s, const char *t, const char *cmd)
{
	for (long until = it_now_ms() + 20000;; usleep(50000)) {
		json_t *v = NULL;
		json_t *found = NULL;
		if (it_get_json(s, t, "/audit?route=/exec&limit=1000", &v) == 200) {
			size_t i;
			json_t *rec;
			json_array_foreach(json_object_get(v, "records"), i, rec) {
				const char *target = jstr(rec, "target");
				if (target && strcmp(target, cmd) == 0 &&
				    strcmp(jstr(rec, "method"), "POST") == 0)
					found = json_incref(rec);
			}
		}
		json_decref(v);
		if (found)
			return found;
		assert_true(it_now_ms() < until);
	}
}

/* Every record of exec id: the answer (given), GET /exec/{id}, the exit
 * event and (with audit_tok) the audit record of its POST /exec. */
static void expect_everywhere(struct it_server *s, const char *t, const char *audit_tok, const char *id,
			      const char *cmd, json_t *answer, bool oom, bool pids, bool uncontained)
{
	if (answer)
		expect_why(answer, oom, pids, uncontained);
	json_t *res = stored_result(s, t, id);
	expect_why(res, oom, pids, uncontained);
	json_decref(res);
	res = exit_event(s, t, id);
	expect_why(res, oom, pids, uncontained);
	json_decref(res);
	if (audit_tok) {
		res = exec_audit(s, audit_tok, cmd);
		expect_why(res, oom, pids, uncontained);
		json_decref(res);
	}
}

/* Two children of 120 MiB each under a 200 MiB limit: the kernel's OOM
 * killer ends one, and the command says so (its exit status is the
 * shell's, 0: only the field tells). */
static void test_oom_killed(void **state)
{
	(void)state;
	if (!it_contained_here())
		skip();
	json_t *res = run_id(&srv, tok, "oom-1", OOM_CMD);
	/* v1 kills one hog and the shell goes on; v2 (memory.oom.group 1)
	 * ends the whole command: SIGKILL. */
	if (it_cgroups_here())
		assert_non_null(strstr(jstr(res, "stdout"), "waited"));
	else
		assert_int_equal(jint(res, "exit_code"), 128 + 9);
	expect_everywhere(&srv, tok, tok_audit, "oom-1", OOM_CMD, res, true, false, false);
	json_decref(res);
	/* The next command in the tenant's (kept) group: its own outcome,
	 * not its predecessor's (the kernel's counters are cumulative). */
	res = run_id(&srv, tok, "oom-next", "echo fine");
	assert_string_equal(ex_stdout_ok(res), "fine\n");
	expect_everywhere(&srv, tok, tok_audit, "oom-next", "echo fine", res, false, false, false);
	json_decref(res);
}

/* 100 forks under a pids limit of 40: the limit refuses some, and the
 * command says pids_limited (RLIMIT_NPROC must not refuse them first,
 * where the kernel's pids counter would never see them). */
static void test_pids_limited(void **state)
{
	(void)state;
	if (!it_contained_here())
		skip();
	json_t *res = run_id(&srv, tok_glx, "fork-1", FORK_CMD);
	expect_everywhere(&srv, tok_glx, tok_glx_audit, "fork-1", FORK_CMD, res, false, true, false);
	json_decref(res);
	res = run_id(&srv, tok_glx, "fork-next", "echo calm");
	assert_string_equal(ex_stdout_ok(res), "calm\n");
	expect_everywhere(&srv, tok_glx, tok_glx_audit, "fork-next", "echo calm", res, false, false, false);
	json_decref(res);
}

/* A plain command: none of the three, each present and false. */
static void test_normal(void **state)
{
	(void)state;
	json_t *res = run_id(&srv, tok, "plain-1", "echo plain");
	assert_string_equal(ex_stdout_ok(res), "plain\n");
	bool cg = it_contained_here();
	expect_everywhere(&srv, tok, tok_audit, "plain-1", "echo plain", res, false, false, !cg);
	json_decref(res);
}

/* A background command the OOM killer ends: its row says so (GET
 * /exec/{id} and the exit event read it). */
static void test_background_oom(void **state)
{
	(void)state;
	if (!it_contained_here())
		skip();
	json_t *req = json_pack("{s:s, s:s, s:b, s:i}", "command", OOM_CMD, "id", "oom-bg", "background", 1,
				"timeout_s", 60);
	assert_int_equal(ex_post(&srv, tok, NULL, req, NULL, NULL), 202);
	expect_everywhere(&srv, tok, NULL, "oom-bg", OOM_CMD, NULL, true, false, false);
}

/* A server without cgroups (use-cgroups=false: rlimits only): every
 * command's record says uncontained. */
static void test_uncontained(void **state)
{
	(void)state;
	struct it_server s2;
	long base = 0;
	it_uid_base_arg(&base);
	char arg[40];
	snprintf(arg, sizeof arg, "uid-base=%ld", base + 8); /* not srv's uids */
	const char *const extra[] = {"--set", arg, "--set", "use-cgroups=false", NULL};
	assert_int_equal(it_start(&s2, extra), 0);
	char *t = it_token(&s2, "acme", NULL);
	char *ta = it_token(&s2, "acme", "audit:read");
	json_t *res = run_id(&s2, t, "rl-1", "echo loose");
	assert_string_equal(ex_stdout_ok(res), "loose\n");
	expect_everywhere(&s2, t, ta, "rl-1", "echo loose", res, false, false, true);
	json_decref(res);
	free(t);
	free(ta);
	assert_int_equal(it_finish(&s2), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_normal),	 cmocka_unit_test(test_oom_killed),
	    cmocka_unit_test(test_pids_limited), cmocka_unit_test(test_background_oom),
	    cmocka_unit_test(test_uncontained),
	};
	return cmocka_run_group_tests_name("outcome", tests, setup, teardown);
}
