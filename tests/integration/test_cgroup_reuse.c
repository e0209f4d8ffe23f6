/* A command's emptied cgroups serve its tenant's next command (issue 15,
 * P1; sandbox/cgroup.c): the next command's limits apply, and nothing of
 * a predecessor's accounting reaches it, an OOM-killed one's included.
 * Seen from the host, in the groups the server names. Real bwrap, real
 * cgroups; a clean stop leaves no group behind. v1 only: the v2 driver
 * keeps no groups (it makes and removes one per command, sandbox/cgroup_v2.c);
 * what a predecessor's accounting could leak there is nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

static struct it_server srv;
static char *tok, *tok_ops, *tok_local;
static long uid_base;

static int setup(void **state)
{
	(void)state;
	/* 256 MiB a command; /tmp (1 GiB, charged to the command's memory
	 * group) is not what stops a fill. */
	const char *const extra[] = {"--set", it_uid_base_arg(&uid_base), "--set",
				     "mem-limit-bytes=268435456", "--set", "tmp-size-bytes=1073741824",
				     "--set", "backends=bwrap,local",
				     /* the groups of commands made when asked: a warm
				      * sandbox (test_warm.c) holds a kept group of its own
				      * while it waits, which this suite would count */
				     "--set", "warm-pool=0", "--allow-unsafe-local", NULL};
	if (it_start(&srv, extra) < 0)
		return -1;
	tok = it_token(&srv, "acme", NULL);
	tok_ops = it_token(&srv, "ops", "admin");
	tok_local = it_token(&srv, "globex", NULL);
	if (!tok || !tok_ops || !tok_local)
		return -1;
	return pol_put(&srv, tok_ops, "globex", "{\"backend\": \"local\"}", NULL) == 200 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish(&srv);
	/* A clean stop leaves no group behind, the kept ones included. */
	static const char *const hier[] = {"memory", "pids", "cpu", "cpuacct"};
	if (rc == 0 && it_cgroups_here() && it_cgroups_left(uid_base, hier, 4) != 0) {
		it_fail_at_exit();
		rc = -1;
	}
	free(tok);
	free(tok_ops);
	free(tok_local);
	return rc;
}

/* /sys/fs/cgroup/<hier>/sandboxd/<base>/u<acme's uid>/<group>/<file> */
static char *cg_path(const char *hier, const char *group, const char *file)
{
	return xasprintf("/sys/fs/cgroup/%s/sandboxd/%ld/u%ld%s%s%s%s", hier, uid_base, uid_base,
			 group ? "/" : "", group ? group : "", file ? "/" : "", file ? file : "");
}

static long long cg_num(const char *hier, const char *group, const char *file)
{
	char *p = cg_path(hier, group, file);
	char *text = it_read_file(p, NULL);
	free(p);
	long long v = text ? strtoll(text, NULL, 10) : -1;
	free(text);
	return v;
}

/* The one group of acme with a process in it (a new string), waiting up
 * to 20 s for it; NULL when none. */
static char *busy_group(void)
{
	char *base = cg_path("memory", NULL, NULL);
	char *found = NULL;
	for (long until = it_now_ms() + 20000; !found && it_now_ms() < until; usleep(20000)) {
		DIR *d = opendir(base);
		struct dirent *de;
		while (d && !found && (de = readdir(d))) {
			if (de->d_name[0] != 'j')
				continue;
			char *p = cg_path("memory", de->d_name, "cgroup.procs");
			char *procs = it_read_file(p, NULL);
			if (procs && procs[0])
				found = xstrdup(de->d_name);
			free(procs);
			free(p);
		}
		if (d)
			closedir(d);
	}
	free(base);
	return found;
}

/* acme's groups, "j1 j5 ..." (a new string), each once PID 1 has reaped
 * what its sandbox orphaned there (pids.current 0: only then is a kept
 * group handed out), waiting up to 30 s for that. */
static char *kept_groups(void)
{
	char *base = cg_path("pids", NULL, NULL);
	char *list = xstrdup(" ");
	DIR *d = opendir(base);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] != 'j')
			continue;
		for (long until = it_now_ms() + 30000;
		     cg_num("pids", de->d_name, "pids.current") > 0 && it_now_ms() < until;)
			usleep(20000);
		assert_int_equal(cg_num("pids", de->d_name, "pids.current"), 0);
		char *next = xasprintf("%s%s ", list, de->d_name);
		free(list);
		list = next;
	}
	if (d)
		closedir(d);
	free(base);
	return list;
}

/* Whether group is one of list (kept_groups). */
static bool among(const char *list, const char *group)
{
	char *word = xasprintf(" %s ", group);
	bool in = strstr(list, word) != NULL;
	free(word);
	return in;
}

/* Start cmd in the background as exec id; its group once it runs. */
static char *start_bg(struct bg_req *b, const char *id, const char *cmd)
{
	bg_exec(b, &srv, tok, json_pack("{s:s, s:s, s:i}", "command", cmd, "id", id, "timeout_s", 120), NULL);
	json_t *v = ex_wait_state(&srv, tok, id, "running", 20000);
	assert_non_null(v);
	json_decref(v);
	return busy_group();
}

/* The server hands a command's group back to the tenant's kept ones just
 * after the command's result is answered (off the exec's critical path),
 * so a client can be faster than that: wait (up to 30 s) until /metrics
 * shows no kept group holding a command. */
static void wait_released(void)
{
	for (long until = it_now_ms() + 30000;; usleep(20000)) {
		struct it_resp r;
		assert_int_equal(it_http(&srv, "GET", "/metrics", tok_ops, NULL, NULL, 0, &r), 0);
		bool none_busy = r.body && strstr(r.body, "sandboxd_cgroups_kept{state=\"busy\"} 0\n");
		it_resp_free(&r);
		if (none_busy)
			return;
		assert_true(it_now_ms() < until);
	}
}

/* Cancel exec id and join its request; the result (new reference), once
 * the server has released the command's group. */
static json_t *cancel_bg(struct bg_req *b, const char *id)
{
	char path[64];
	snprintf(path, sizeof path, "/exec/%s/cancel", id);
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", path, tok, NULL, NULL, 0, &r), 0);
	it_resp_free(&r);
	json_t *res = bg_join(b);
	it_resp_free(&b->resp);
	assert_non_null(res);
	wait_released();
	return res;
}

/* An OOM-killed command, then a normal one, in the tenant's kept groups:
 * each reports its own outcome, and the OOM-killed one's limit hits and
 * peak are gone from its group before any other command gets it. */
static void test_oom_then_normal(void **state)
{
	(void)state;
	if (!it_cgroups_here())
		skip();
	struct bg_req b;
	char *g = start_bg(&b, "reuse-a", "sleep 60");
	assert_non_null(g);
	json_decref(cancel_bg(&b, "reuse-a"));
	free(g);
	char *kept = kept_groups();

	/* 400 MB into /tmp, charged to the 256 MiB group: the OOM killer
	 * stops head (it volunteers); the shell reports, empties /tmp/fill
	 * without a fork (which would need memory) and stays. */
	g = start_bg(&b, "reuse-oom",
		     "(echo 1000 > /proc/self/oom_score_adj; exec head -c 419430400 /dev/zero > "
		     "/tmp/fill); echo rc=$?; : > /tmp/fill; touch /workspace/.oomed; sleep 60");
	assert_non_null(g);
	assert_true(among(kept, g)); /* a kept group serves the next command */
	for (long until = it_now_ms() + 30000; !it_ws_exists(&srv, "acme", ".oomed") && it_now_ms() < until;)
		usleep(20000);
	assert_true(it_ws_exists(&srv, "acme", ".oomed"));
	assert_true(cg_num("memory", g, "memory.failcnt") > 0);
	assert_true(cg_num("memory", g, "memory.max_usage_in_bytes") > (200LL << 20));
	/* Its CPU time (where the host has cpuacct apart from cpu). */
	long long cpu_ns = cg_num("cpuacct", g, "cpuacct.usage");
	assert_true(cpu_ns == -1 || cpu_ns > 0);
	json_t *res = cancel_bg(&b, "reuse-oom");
	assert_non_null(strstr(jstr(res, "stdout"), "rc=137\n"));
	assert_true(jtrue(res, "cancelled"));
	json_decref(res);
	/* Kept and clean before anyone gets it, or removed: a group that
	 * still has more than 4 MiB charged (kernel objects of the OOM) or
	 * tasks after the reap's back-off is not kept (cgroup.c). */
	free(kept);
	kept = kept_groups();
	if (among(kept, g)) {
		assert_int_equal(cg_num("memory", g, "memory.failcnt"), 0);
		assert_true(cg_num("memory", g, "memory.max_usage_in_bytes") < (64LL << 20));
		if (cpu_ns > 0)
			assert_true(cg_num("cpuacct", g, "cpuacct.usage") < 5000000); /* < 5 ms: reset */
	} else {
		assert_int_equal(cg_num("memory", g, "memory.failcnt"), -1); /* gone */
	}

	/* The next commands: a plain result, and clean counters. */
	res = ex_run(&srv, tok, "echo ok");
	assert_string_equal(ex_stdout_ok(res), "ok\n");
	assert_int_equal(jint(res, "exit_code"), 0);
	json_decref(res);
	wait_released();
	free(kept);
	kept = kept_groups();
	char *g2 = start_bg(&b, "reuse-after", "sleep 60");
	assert_non_null(g2);
	assert_true(among(kept, g2));
	assert_int_equal(cg_num("memory", g2, "memory.failcnt"), 0);
	assert_true(cg_num("memory", g2, "memory.max_usage_in_bytes") < (64LL << 20));
	json_decref(cancel_bg(&b, "reuse-after"));
	char *p = xasprintf("%s/tenants/acme/workspace/.oomed", srv.dir);
	unlink(p);
	free(p);
	free(kept);
	free(g);
	free(g2);
}

/* One command of acme in a kept group (a new string: its name), with the
 * limits of the policy now in force. */
static char *run_in_kept(struct bg_req *b, const char *id, long long mem, long long nproc)
{
	char *kept = kept_groups();
	char *g = start_bg(b, id, "sleep 60");
	assert_non_null(g);
	assert_true(among(kept, g));
	assert_int_equal(cg_num("memory", g, "memory.limit_in_bytes"), mem);
	assert_int_equal(cg_num("pids", g, "pids.max"), nproc);
	free(kept);
	return g;
}

/* A policy change between two commands: the kept group gets the next
 * command's limits, and the defaults back after a reset. */
static void test_limit_change_applies(void **state)
{
	(void)state;
	if (!it_cgroups_here())
		skip();
	struct bg_req b;
	char *g = start_bg(&b, "lim-a", "sleep 60");
	assert_non_null(g);
	json_decref(cancel_bg(&b, "lim-a"));
	free(g);

	assert_int_equal(
	    pol_put(&srv, tok_ops, "acme", "{\"mem_limit_bytes\": 134217728, \"nproc_limit\": 33}", NULL),
	    200);
	g = run_in_kept(&b, "lim-b", 134217728, 33);
	json_decref(cancel_bg(&b, "lim-b"));
	free(g);
	assert_int_equal(
	    pol_put(&srv, tok_ops, "acme", "{\"mem_limit_bytes\": null, \"nproc_limit\": null}", NULL), 200);
	g = run_in_kept(&b, "lim-c", 268435456, 256);
	json_decref(cancel_bg(&b, "lim-c"));
	free(g);
}

/* /proc/<pid>/stat's state and parent; 0 when there is no such process. */
static char proc_state(long pid, long *ppid)
{
	char *p = xasprintf("/proc/%ld/stat", pid);
	char *t = it_read_file(p, NULL);
	free(p);
	const char *e = t ? strrchr(t, ')') : NULL; /* the name may hold anything */
	char st = 0;
	if (!e || sscanf(e + 1, " %c %ld", &st, ppid) != 2)
		st = 0;
	free(t);
	return st;
}

/* Zombies whose parent is the server, once none is left or after 10 s. */
static int server_zombies(void)
{
	int n = 0;
	for (long until = it_now_ms() + 10000;; usleep(20000)) {
		DIR *d = opendir("/proc");
		struct dirent *de;
		n = 0;
		while (d && (de = readdir(d))) {
			long ppid = 0;
			if (de->d_name[0] >= '1' && de->d_name[0] <= '9' &&
			    proc_state(atol(de->d_name), &ppid) == 'Z' && ppid == (long)srv.pid)
				n++;
		}
		if (d)
			closedir(d);
		if (n == 0 || it_now_ms() > until)
			return n;
	}
}

/* The process running exactly `sleep arg`, waiting up to 20 s; 0: none. */
static long find_sleep(const char *arg)
{
	char want[64];
	int wn = snprintf(want, sizeof want, "sleep%c%s", '\0', arg) + 1;
	for (long until = it_now_ms() + 20000; it_now_ms() < until; usleep(20000)) {
		DIR *d = opendir("/proc");
		struct dirent *de;
		long found = 0;
		while (d && !found && (de = readdir(d))) {
			if (de->d_name[0] < '1' || de->d_name[0] > '9')
				continue;
			char *p = xasprintf("/proc/%s/cmdline", de->d_name);
			size_t len = 0;
			char *t = it_read_file(p, &len);
			if (t && len == (size_t)wn && memcmp(t, want, len) == 0)
				found = atol(de->d_name);
			free(t);
			free(p);
		}
		if (d)
			closedir(d);
		if (found)
			return found;
	}
	return 0;
}

/* bwrap's outer process exits before the sandbox's init is reaped: the
 * server, a subreaper, reaps that orphan itself (no zombie left under
 * it), so the group is ready for the tenant's next command at once,
 * where PID 1 (seconds late on some hosts) would leave it busy. First in
 * this file: the group is then acme's only kept one. */
static void test_bwrap_orphans_reaped_group_reused(void **state)
{
	(void)state;
	if (!it_cgroups_here())
		skip();
	struct bg_req b;
	char *g = start_bg(&b, "orphan-a", "sleep 1");
	assert_non_null(g);
	json_t *res = bg_join(&b);
	it_resp_free(&b.resp);
	assert_non_null(res);
	assert_int_equal(jint(res, "exit_code"), 0);
	json_decref(res);
	wait_released();
	assert_int_equal(server_zombies(), 0);
	assert_int_equal(cg_num("pids", g, "pids.current"), 0);
	char *g2 = start_bg(&b, "orphan-b", "sleep 60");
	assert_non_null(g2);
	assert_string_equal(g2, g);
	json_decref(cancel_bg(&b, "orphan-b"));
	free(g);
	free(g2);
}

/* A process whose parent exits while the command runs becomes the
 * server's child, not PID 1's; the command's cancel still reaches it (its
 * process group and cgroup), and the server reaps it. Local backend: the
 * orphan is seen from the host as it is. */
static void test_local_orphan_is_servers_and_cancelled(void **state)
{
	(void)state;
	struct bg_req b;
	bg_exec(&b, &srv, tok_local,
		json_pack("{s:s, s:s, s:i}", "command", "(sleep 4517 &); exec sleep 4518", "id",
			  "orphan-local", "timeout_s", 120),
		NULL);
	long pid = find_sleep("4517"), ppid = 0;
	assert_true(pid > 0);
	for (long until = it_now_ms() + 10000;
	     proc_state(pid, &ppid) && ppid != (long)srv.pid && it_now_ms() < until;)
		usleep(20000);
	assert_int_equal(ppid, (long)srv.pid);
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", "/exec/orphan-local/cancel", tok_local, NULL, NULL, 0, &r), 0);
	it_resp_free(&r);
	json_t *res = bg_join(&b);
	it_resp_free(&b.resp);
	assert_non_null(res);
	assert_true(jtrue(res, "cancelled"));
	json_decref(res);
	/* Killed with the command and reaped by the server: gone. */
	for (long until = it_now_ms() + 10000; proc_state(pid, &ppid) && it_now_ms() < until;)
		usleep(20000);
	assert_int_equal(proc_state(pid, &ppid), 0);
	assert_int_equal(server_zombies(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_local_orphan_is_servers_and_cancelled),
	    cmocka_unit_test(test_bwrap_orphans_reaped_group_reused),
	    cmocka_unit_test(test_oom_then_normal),
	    cmocka_unit_test(test_limit_change_applies),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
