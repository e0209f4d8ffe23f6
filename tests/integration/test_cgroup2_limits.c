/* The cgroup v2 driver (issue 27) on a pure cgroup-v2 host (the guest of
 * tests/vm/run; 77 elsewhere): per-command limits bind a command's whole
 * tree, the tenant's budgets bind its commands together, pids.max holds a
 * fork bomb, the CPU budget holds by the kernel's own counter, and a
 * cancelled command leaves nothing. Real bwrap, the real binary. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <glob.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#define CGROUP2_MAGIC 0x63677270
#define MiB 1048576L

static struct it_server srv;
static char *tok, *tok_globex, *tok_ops;
static long ubase;
static char cg_base[512]; /* the server's base group: this process's before the server moved it */

static const struct it_tok toks[] = {
    {&tok, "acme", NULL},
    {&tok_globex, "globex", NULL},
    {&tok_ops, "ops", "admin"},
};

/* Where the tenant's group is (acme: slot 0, globex: slot 1). */
static char *tenant_dir(int slot)
{
	return xasprintf("%s/sandboxd/%ld/u%ld", cg_base, ubase, ubase + slot);
}

static int setup(void **state)
{
	(void)state;
	struct statfs sf;
	if (geteuid() != 0 || statfs("/sys/fs/cgroup", &sf) < 0 || sf.f_type != CGROUP2_MAGIC) {
		fprintf(stderr, "not a cgroup2 host as root: run in tests/vm/run\n");
		exit(77);
	}
	it_uid_base_arg(&ubase);
	/* A command: 200 MiB, 256 processes; acme together: 256 MiB, 24
	 * processes, a fifth of a core. /tmp (charged to the command's
	 * memory) is never what stops them. */
	const char *const extra[] = {"--set", it_uid_base_arg(NULL),
				     "--set", "mem-limit-bytes=209715200",
				     "--set", "nproc-limit=256",
				     "--set", "tmp-size-bytes=1073741824",
				     "--set", "tenant-mem-budget-bytes=268435456",
				     "--set", "tenant-nproc-budget=24",
				     "--set", "tenant-cpu-budget-millicores=200",
				     NULL};
	int rc = it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
	it_cgroup2_base(&srv, cg_base, sizeof cg_base);
	return rc;
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

static char *read_trim(const char *path)
{
	size_t len = 0;
	char *t = it_read_file(path, &len);
	if (t)
		t[strcspn(t, "\n")] = '\0';
	return t;
}

static void expect_file(const char *dir, const char *name, const char *want)
{
	char *p = xasprintf("%s/%s", dir, name);
	char *t = read_trim(p);
	if (!t || strcmp(t, want) != 0)
		fprintf(stderr, "%s: %s, expected %s\n", p, t ? t : "(unreadable)", want);
	assert_non_null(t);
	assert_string_equal(t, want);
	free(t);
	free(p);
}

/* /readyz names the v2 driver; the tenant's group holds its budgets as
 * the kernel's files; the server sits in its own leaf. */
static void test_v2_in_force(void **state)
{
	(void)state;
	json_t *ready = NULL;
	assert_int_equal(it_get_json(&srv, NULL, "/readyz", &ready), 200);
	const char *detail = jstr(json_object_get(ready, "backend"), "detail");
	fprintf(stderr, "backend: %s\n", detail);
	assert_non_null(strstr(detail, "cgroup memory+pids v2"));
	assert_non_null(strstr(detail, "cpu v2"));
	json_decref(ready);

	json_t *r = ex_run(&srv, tok, "echo a");
	assert_string_equal(ex_stdout_ok(r), "a\n");
	json_decref(r);
	char *u = tenant_dir(0);
	expect_file(u, "memory.max", "268435456");
	expect_file(u, "memory.swap.max", "0");
	expect_file(u, "pids.max", "24");
	expect_file(u, "cpu.max", "20000 100000");
	expect_file(u, "cpu.weight", "100");
	free(u);
	char *p = xasprintf("/proc/%d/cgroup", (int)srv.pid);
	char *cg = read_trim(p);
	char *want = xasprintf("0::%s/sandboxd/%ld/server", cg_base + strlen("/sys/fs/cgroup"), ubase);
	assert_non_null(cg);
	assert_string_equal(cg, want);
	free(want);
	free(cg);
	free(p);
}

/* Two children of one command hold 120 MiB each (tmpfs pages, which
 * RLIMIT_AS does not see) under a 200 MiB limit: the command is killed,
 * whole. */
static void test_command_tree_limit(void **state)
{
	(void)state;
	json_t *r =
	    ex_ok(&srv, tok, NULL,
		  json_pack("{s:s, s:i}", "command",
			    "head -c 125829120 /dev/zero > /tmp/a & head -c 125829120 /dev/zero > /tmp/b & "
			    "wait; echo both",
			    "timeout_s", 60));
	fprintf(stderr, "tree: exit %lld stdout %s\n", jint(r, "exit_code"), jstr(r, "stdout"));
	assert_int_not_equal(jint(r, "exit_code"), 0);
	assert_null(strstr(jstr(r, "stdout"), "both"));
	/* memory.events said so: the model is told, not left to guess from 137. */
	assert_true(json_is_true(json_object_get(r, "oom_killed")));
	assert_false(json_is_true(json_object_get(r, "pids_limited")));
	json_decref(r);
	/* One child of 120 MiB fits. */
	r = ex_ok(&srv, tok, NULL,
		  json_pack("{s:s, s:i}", "command", "head -c 125829120 /dev/zero > /tmp/a && echo one",
			    "timeout_s", 60));
	assert_string_equal(ex_stdout_ok(r), "one\n");
	json_decref(r);
}

static void wait_marked_or_ended(const char *mark, const char *id)
{
	char path[64];
	snprintf(path, sizeof path, "/exec/%s", id);
	long until = it_now_ms() + 90000;
	while (!it_ws_exists(&srv, "acme", mark) && it_now_ms() < until) {
		json_t *v = NULL;
		long st = it_get_json(&srv, tok, path, &v);
		bool over = st == 200 && v && strcmp(jstr(v, "state"), "running") != 0;
		json_decref(v);
		if (over)
			return;
		usleep(50000);
	}
}

/* Three commands of 150 MiB each under acme's 256 MiB: they do not all
 * live with what they filled; globex is untouched. */
static void test_tenant_budget(void **state)
{
	(void)state;
	struct bg_req b[3];
	for (int i = 0; i < 3; i++) {
		char id[16];
		snprintf(id, sizeof id, "hog-%d", i);
		char *cmd = xasprintf(
		    "head -c 157286400 /dev/zero > /tmp/f && echo filled; touch /workspace/.done-%d; "
		    "while [ ! -e /workspace/.gate-mem ]; do sleep 0.05; done",
		    i);
		bg_exec(&b[i], &srv, tok,
			json_pack("{s:s, s:s, s:i}", "command", cmd, "id", id, "timeout_s", 120), NULL);
		free(cmd);
	}
	for (int i = 0; i < 3; i++) {
		char mark[32], id[16];
		snprintf(mark, sizeof mark, ".done-%d", i);
		snprintf(id, sizeof id, "hog-%d", i);
		wait_marked_or_ended(mark, id);
	}
	json_t *g = ex_run(&srv, tok_globex, "echo ok");
	assert_string_equal(ex_stdout_ok(g), "ok\n");
	json_decref(g);
	char *gate = xasprintf("%s/tenants/acme/workspace/.gate-mem", srv.dir);
	assert_int_equal(it_write_file(gate, "", 0), 0);
	free(gate);
	int survived = 0;
	for (int i = 0; i < 3; i++) {
		json_t *r = bg_join(&b[i]);
		if (!r)
			fprintf(stderr, "hog-%d: request rc %d after %ld ms (log %s)\n", i, b[i].rc, b[i].ms,
				srv.log);
		if (!r) {
			char *u = tenant_dir(0);
			it_sh("tail -n 30 %s >&2; cat %s/memory.events %s/memory.current >&2", srv.log, u, u);
			free(u);
		}
		assert_non_null(r);
		fprintf(stderr, "hog-%d: exit %lld stdout %s\n", i, jint(r, "exit_code"), jstr(r, "stdout"));
		survived += strstr(jstr(r, "stdout"), "filled") != NULL && jint(r, "exit_code") == 0;
		json_decref(r);
		it_resp_free(&b[i].resp);
	}
	assert_true(survived <= 1); /* two would be 300 MiB > 256 MiB */
}

/* The forks refused in the tenant's group dir or any group below it
 * (the kernel counts a refusal in the group of the task that forked, or
 * in the one whose limit was hit, by version). */
static long forks_refused(const char *dir)
{
	char *own = xasprintf("%s/pids.events", dir), *below = xasprintf("%s/*/pids.events", dir);
	long n = 0;
	glob_t g = {0};
	int rc = glob(own, GLOB_NOSORT, NULL, &g);
	rc = glob(below, GLOB_NOSORT | (rc == 0 ? GLOB_APPEND : 0), NULL, &g);
	(void)rc; /* no match: counted as none */
	for (size_t i = 0; i < g.gl_pathc; i++) {
		char *ev = read_trim(g.gl_pathv[i]), *m = ev ? strstr(ev, "max ") : NULL;
		n += m ? atol(m + 4) : 0;
		free(ev);
	}
	globfree(&g);
	free(own);
	free(below);
	return n;
}

/* 40 sleepers in one command (its own limit 256) against acme's 24: the
 * kernel's pids.max on the tenant's group holds them (RLIMIT_NPROC, 256,
 * would not); then a fork bomb ends at its timeout, never above the
 * budget, and leaves nothing. */
static void test_pids(void **state)
{
	(void)state;
	char nonce[32];
	snprintf(nonce, sizeof nonce, "7%d", (int)getpid() % 100000);
	char *cmd = xasprintf("for k in $(seq 1 40); do sleep %s & done; touch /workspace/.pdone; "
			      "while [ ! -e /workspace/.gate-pids ]; do sleep 0.05; done; kill $(jobs -p)",
			      nonce);
	struct bg_req b;
	bg_exec(&b, &srv, tok, json_pack("{s:s, s:s, s:i}", "command", cmd, "id", "procs", "timeout_s", 120),
		NULL);
	free(cmd);
	wait_marked_or_ended(".pdone", "procs");
	int sleepers = host_procs_of_uid((uid_t)ubase, "sleep", nonce);
	char *gate = xasprintf("%s/tenants/acme/workspace/.gate-pids", srv.dir);
	assert_int_equal(it_write_file(gate, "", 0), 0);
	free(gate);
	json_t *r = bg_join(&b);
	json_decref(r);
	it_resp_free(&b.resp);
	fprintf(stderr, "sleepers at once: %d (budget 24)\n", sleepers);
	assert_true(sleepers <= 24);
	assert_int_equal(host_procs_wait_gone((uid_t)ubase, "sleep", nonce, 10000), 0);

	snprintf(nonce, sizeof nonce, "bomb%d", (int)getpid());
	cmd = xasprintf("rm -f .bomb-fifo; mkfifo .bomb-fifo; bomb() { bomb | bomb & }; bomb; "
			"read x < .bomb-fifo # %s",
			nonce);
	bg_exec(&b, &srv, tok, json_pack("{s:s, s:s, s:i}", "command", cmd, "id", "bomb", "timeout_s", 300),
		NULL);
	free(cmd);
	/* The bomb runs until the tenant's group refused a fork (its
	 * pids.events max), however slow the machine; then it is cancelled. */
	int peak = 0;
	char *u = tenant_dir(0);
	char *cur = xasprintf("%s/pids.current", u);
	long refused = 0;
	for (long until = it_now_ms() + 120000; refused == 0 && it_now_ms() < until; usleep(20000)) {
		char *t = read_trim(cur);
		int n = t ? atoi(t) : 0;
		peak = n > peak ? n : peak;
		free(t);
		refused = forks_refused(u);
	}
	assert_true(refused > 0);
	struct it_resp cr = {0};
	assert_int_equal(it_http(&srv, "POST", "/exec/bomb/cancel", tok, NULL, NULL, 0, &cr), 0);
	it_resp_free(&cr);
	r = bg_join(&b);
	assert_non_null(r);
	fprintf(stderr, "bomb: exit %lld, pids.current peak %d\n", jint(r, "exit_code"), peak);
	/* pids.events said a fork was refused (the tenant's 24 here). */
	assert_true(json_is_true(json_object_get(r, "pids_limited")));
	json_decref(r);
	it_resp_free(&b.resp);
	assert_true(peak <= 24);
	assert_true(peak > 0); /* the sampling saw the bomb */
	assert_int_equal(host_procs_wait_gone((uid_t)ubase, NULL, nonce, 10000), 0);
	free(cur);
	free(u);
	json_t *g = ex_run(&srv, tok_globex, "echo ok");
	assert_string_equal(ex_stdout_ok(g), "ok\n");
	json_decref(g);
}

static double usage_s(const char *stat)
{
	char *t = it_read_file(stat, &(size_t){0});
	const char *p = t ? strstr(t, "usage_usec ") : NULL;
	double v = p ? strtod(p + strlen("usage_usec "), NULL) / 1e6 : -1;
	free(t);
	return v;
}

/* Two busy loops of acme: over a window measured with the kernel's own
 * counter (cpu.stat of its group), they used at most its fifth of a core
 * (20 % tolerance for the window's edges). */
static void test_cpu_budget(void **state)
{
	(void)state;
	for (int i = 0; i < 2; i++) {
		char id[16];
		snprintf(id, sizeof id, "spin-%d", i);
		json_t *v = NULL;
		long st = ex_post(&srv, tok, NULL,
				  json_pack("{s:s, s:s, s:b, s:i}", "command", "while :; do :; done", "id",
					    id, "background", 1, "timeout_s", 300),
				  &v, NULL);
		assert_int_equal(st, 202);
		json_decref(v);
	}
	for (int i = 0; i < 2; i++) {
		char id[16];
		snprintf(id, sizeof id, "spin-%d", i);
		json_t *v = ex_wait_state(&srv, tok, id, "running", 30000);
		assert_non_null(v);
		json_decref(v);
	}
	char *u = tenant_dir(0);
	char *stat = xasprintf("%s/cpu.stat", u);
	long t0 = it_now_ms();
	double u0 = usage_s(stat), u1 = u0;
	assert_true(u0 >= 0);
	long until = it_now_ms() + 60000;
	do {
		usleep(200000);
		u1 = usage_s(stat);
	} while (u1 - u0 < 1.0 && it_now_ms() < until);
	double wall = (double)(it_now_ms() - t0) / 1000.0;
	fprintf(stderr, "acme: %.3f s of CPU in %.3f s: %.3f cores (budget 0.2)\n", u1 - u0, wall,
		(u1 - u0) / wall);
	assert_true(u1 - u0 > 0);
	assert_true((u1 - u0) / wall <= 0.2 * 1.2);
	for (int i = 0; i < 2; i++) {
		char path[64];
		snprintf(path, sizeof path, "/exec/spin-%d/cancel", i);
		struct it_resp c;
		assert_int_equal(it_http(&srv, "POST", path, tok, NULL, NULL, 0, &c), 0);
		it_resp_free(&c);
	}
	free(stat);
	free(u);
}

/* A background command with children in a session of their own,
 * cancelled: no process of the tenant's uid is left, and its group is
 * gone. */
static void test_cancel_leaves_nothing(void **state)
{
	(void)state;
	char nonce[32];
	snprintf(nonce, sizeof nonce, "8%d", (int)getpid() % 100000);
	char *cmd =
	    xasprintf("sleep %s & setsid sleep %s & (trap '' TERM; sleep %s) & touch /workspace/.cdone; wait",
		      nonce, nonce, nonce);
	json_t *v = NULL;
	long st = ex_post(
	    &srv, tok_globex, NULL,
	    json_pack("{s:s, s:s, s:b, s:i}", "command", cmd, "id", "bgk", "background", 1, "timeout_s", 300),
	    &v, NULL);
	free(cmd);
	assert_int_equal(st, 202);
	json_decref(v);
	long until = it_now_ms() + 30000;
	while (host_procs_of_uid((uid_t)ubase + 1, "sleep", nonce) < 3 && it_now_ms() < until)
		usleep(50000);
	assert_int_equal(host_procs_of_uid((uid_t)ubase + 1, "sleep", nonce), 3);
	struct it_resp c;
	assert_int_equal(it_http(&srv, "POST", "/exec/bgk/cancel", tok_globex, NULL, NULL, 0, &c), 0);
	it_resp_free(&c);
	v = ex_wait_state(&srv, tok_globex, "bgk", "cancelled|exited|killed|timed_out", 30000);
	assert_non_null(v);
	json_decref(v);
	/* None but those of warm sandboxes waiting for globex's next
	 * command (test_warm.c), which hold none of this one's. */
	until = it_now_ms() + 10000;
	while (host_procs_of_uid_unwarm((uid_t)ubase + 1) > 0 && it_now_ms() < until)
		usleep(50000);
	assert_int_equal(host_procs_of_uid_unwarm((uid_t)ubase + 1), 0);
	/* No command group of globex remains, but those of waiting sandboxes. */
	char *u = tenant_dir(1);
	until = it_now_ms() + 5000;
	int left;
	do {
		left = 0;
		DIR *d = opendir(u);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			if (e->d_name[0] != 'j')
				continue;
			char *g = xasprintf("%s/%s", u, e->d_name);
			if (!it_cgroup_is_warm(g)) {
				fprintf(stderr, "group left: %s\n", g);
				left++;
			}
			free(g);
		}
		if (d)
			closedir(d);
		if (left)
			usleep(50000);
	} while (left && it_now_ms() < until);
	assert_int_equal(left, 0);
	free(u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_v2_in_force),	  cmocka_unit_test(test_command_tree_limit),
	    cmocka_unit_test(test_tenant_budget), cmocka_unit_test(test_pids),
	    cmocka_unit_test(test_cpu_budget),	  cmocka_unit_test(test_cancel_leaves_nothing),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
