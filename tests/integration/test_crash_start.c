/* A crash of the server while a command starts (issue 27): a background
 * exec is posted and the server is SIGKILLed as soon as the 202 arrives,
 * when the runner is spawning the command (its child between clone and
 * the exec of bwrap, joining its cgroups), then restarted at once on the
 * same data directory; twelve times. Each time the restart must succeed
 * (no child of the killed run holds its uid-base claim), nothing of the
 * tenants' uids the killed run started may be left (the child dies with
 * its parent, and the restart kills what an earlier run left before it
 * serves), and the exec's record says `lost`. The same once more with
 * the child held (ptrace, it_hold.h) at its cgroup join while the server
 * is killed and restarted: the case the twelve tries hit now and then. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_agent.h"
#include "it_hold.h"

#define ROUNDS 12
#define TENANT_UIDS 8 /* acme, globex, ops and room: slots 0.. of uid-base */

static struct it_server srv;
static long uid_base;
static char *tok;
static const struct it_tok toks[] = {{&tok, "acme", NULL}};
static const char *extra[7];

static int setup(void **state)
{
	(void)state;
	const char *const args[] = {"--set", it_uid_base_arg(&uid_base), "--set", "tenant-max-execs=4",
				    "--set", "runner-threads=1",	 NULL};
	memcpy(extra, args, sizeof args);
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* Processes whose real uid is a tenant's (uid-base .. + TENANT_UIDS),
 * each named on stderr when show. */
static int tenant_procs(bool show)
{
	int n = 0;
	for (long u = uid_base; u < uid_base + TENANT_UIDS; u++) {
		int k = host_procs_of_uid((uid_t)u, NULL, NULL);
		if (k > 0 && show)
			fprintf(stderr, "uid %ld: %d processes left\n", u, k);
		n += k > 0 ? k : 0;
	}
	return n;
}

static int tenant_procs_wait_gone(long timeout_ms)
{
	long until = it_now_ms() + timeout_ms;
	int n;
	while ((n = tenant_procs(false)) > 0 && it_now_ms() < until)
		usleep(50000);
	return tenant_procs(true);
}

static void show_log_tail(void)
{
	size_t len = 0;
	char *log = it_read_file(srv.log, &len);
	if (log)
		fprintf(stderr, "server log (tail):\n%s\n", len > 3000 ? log + len - 3000 : log);
	free(log);
}

static void test_kill_while_starting(void **state)
{
	(void)state;
	assert_int_equal(tenant_procs(true), 0);
	for (int round = 0; round < ROUNDS; round++) {
		char id[32];
		snprintf(id, sizeof id, "crash-%d", round);
		/* Long enough that a leftover outlives every deadline below. */
		json_t *req = json_pack("{s:s, s:b, s:s}", "command", "sleep 120 # crash-start", "background",
					1, "id", id);
		assert_int_equal(ag_post(&srv, tok, NULL, "/exec", req, NULL, NULL), 202);
		assert_int_equal(it_stop(&srv, SIGKILL), 128 + SIGKILL);
		int rc = it_restart(&srv, extra);
		if (rc != 0) {
			fprintf(stderr, "round %d: the restart failed\n", round);
			show_log_tail();
		}
		assert_int_equal(rc, 0);
		/* The restart serves: whatever the killed run started is gone by
		 * now or soon (a child that never got to exec dies with it). */
		int left = tenant_procs_wait_gone(10000);
		if (left)
			fprintf(stderr, "round %d: %d processes of the killed run left\n", round, left);
		assert_int_equal(left, 0);
		json_t *v = NULL;
		char path[64];
		snprintf(path, sizeof path, "/exec/%s", id);
		assert_int_equal(it_get_json(&srv, tok, path, &v), 200);
		assert_string_equal(jstr(v, "state"), "lost");
		json_decref(v);
	}
	assert_log_clean(&srv);
}

/* The child held at its first call that can block (the cgroup join where
 * cgroups are in force) while its server is killed and restarted. */
static void test_kill_while_child_held(void **state)
{
	(void)state;
	pid_t runner = -1;
	long nr = -1;
	assert_int_equal(it_hold_arm(&srv, &runner), 0);
	json_t *req = json_pack("{s:s, s:b, s:s}", "command", "sleep 120 # crash-held", "background", 1, "id",
				"crash-held");
	assert_int_equal(ag_post(&srv, tok, NULL, "/exec", req, NULL, NULL), 202);
	pid_t child = it_hold_child(runner, &nr, 20000);
	assert_true(child > 0);
	if (it_contained_here())
		assert_int_equal(nr, SYS_write); /* its cgroup join */
	assert_int_equal(it_stop(&srv, SIGKILL), 128 + SIGKILL);
	int rc = it_restart(&srv, extra);
	if (rc != 0)
		show_log_tail();
	it_hold_release(child);
	assert_int_equal(rc, 0);
	int left = tenant_procs_wait_gone(10000);
	assert_int_equal(left, 0);
	char path[64];
	snprintf(path, sizeof path, "/proc/%d", (int)child);
	for (long until = it_now_ms() + 10000; access(path, F_OK) == 0 && it_now_ms() < until;)
		usleep(20000);
	if (access(path, F_OK) == 0)
		fprintf(stderr, "the held child %d of the killed server is still there\n", (int)child);
	assert_int_not_equal(access(path, F_OK), 0);
	json_t *v = NULL;
	assert_int_equal(it_get_json(&srv, tok, "/exec/crash-held", &v), 200);
	assert_string_equal(jstr(v, "state"), "lost");
	json_decref(v);
}

/* Live (not zombie) processes of real uid uid: a killed orphan stays a
 * zombie until PID 1 reaps it. */
static int live_procs_of_uid(long uid)
{
	DIR *d = opendir("/proc");
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char path[300];
		snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
		char *st = it_read_file(path, NULL);
		const char *u = st ? strstr(st, "\nUid:") : NULL, *z = st ? strstr(st, "\nState:") : NULL;
		char state = '?';
		if (z)
			sscanf(z + 7, " %c", &state);
		if (u && strtol(u + 5, NULL, 10) == uid && state != 'Z')
			n++;
		free(st);
	}
	if (d)
		closedir(d);
	return n;
}

/* Leftovers no cgroup holds (an rlimit-only host; planted here as the
 * tenant's uid): the restart kills them before it serves, and leaves a
 * process of a uid outside the tenants' alone. */
static void test_restart_kills_leftovers_by_uid(void **state)
{
	(void)state;
	long outside = uid_base + 200;
	assert_int_equal(it_sh("setpriv --reuid %ld --regid %ld --clear-groups sleep 120 </dev/null "
			       ">/dev/null 2>&1 &",
			       uid_base, uid_base),
			 0);
	assert_int_equal(it_sh("setpriv --reuid %ld --regid %ld --clear-groups sleep 120 </dev/null "
			       ">/dev/null 2>&1 &",
			       outside, outside),
			 0);
	for (long until = it_now_ms() + 10000; (host_procs_of_uid((uid_t)uid_base, NULL, NULL) < 1 ||
						host_procs_of_uid((uid_t)outside, NULL, NULL) < 1) &&
					       it_now_ms() < until;)
		usleep(20000);
	assert_int_equal(host_procs_of_uid((uid_t)uid_base, NULL, NULL), 1);
	assert_int_equal(it_stop(&srv, SIGKILL), 128 + SIGKILL);
	const char *const nocg[] = {"--set", extra[1], "--set", "use-cgroups=false", NULL};
	assert_int_equal(it_restart(&srv, nocg), 0);
	int left = live_procs_of_uid(uid_base);
	int other = live_procs_of_uid(outside);
	it_sh_quiet("pkill -KILL -U %ld sleep", outside);
	char *log = it_read_file(srv.log, NULL);
	bool said = log && strstr(log, "killed 1 processes of tenant uids");
	free(log);
	assert_int_equal(left, 0); /* gone before the restart served */
	assert_int_equal(other, 1);
	assert_true(said);
	assert_int_equal(it_stop(&srv, SIGKILL), 128 + SIGKILL);
	assert_int_equal(it_restart(&srv, extra), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_kill_while_child_held),
	    cmocka_unit_test(test_kill_while_starting),
	    cmocka_unit_test(test_restart_kills_leftovers_by_uid),
	};
	return cmocka_run_group_tests_name("crash_start", tests, setup, teardown);
}
