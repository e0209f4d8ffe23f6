/* The cgroup v2 driver after a crash (issue 27): a server killed with
 * SIGKILL while a command runs leaves its groups behind; the next start
 * of the same server (same uid-base) kills what is in them and removes
 * them, and comes back in its own leaf without nesting. Pure cgroup-v2
 * hosts only (tests/vm/run); 77 elsewhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#define CGROUP2_MAGIC 0x63677270

static struct it_server srv;
static long ubase;
static char cg_base[512];

static bool exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static void test_kill9_swept(void **state)
{
	(void)state;
	struct statfs sf;
	if (geteuid() != 0 || statfs("/sys/fs/cgroup", &sf) < 0 || sf.f_type != CGROUP2_MAGIC) {
		fprintf(stderr, "not a cgroup2 host as root: run in tests/vm/run\n");
		exit(77);
	}
	it_uid_base_arg(&ubase);
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), "--set",
				     "tenant-mem-budget-bytes=268435456", NULL};
	assert_int_equal(it_start(&srv, extra), 0);
	it_cgroup2_base(&srv, cg_base, sizeof cg_base);
	char *tok = it_token(&srv, "acme", NULL);
	assert_non_null(tok);
	char nonce[32];
	snprintf(nonce, sizeof nonce, "9%d", (int)getpid() % 100000);
	char *cmd = xasprintf("sleep %s", nonce);
	json_t *v = NULL;
	long st = ex_post(&srv, tok, NULL,
			  json_pack("{s:s, s:s, s:b, s:i}", "command", cmd, "id", "left", "background", 1,
				    "timeout_s", 600),
			  &v, NULL);
	free(cmd);
	assert_int_equal(st, 202);
	json_decref(v);
	long until = it_now_ms() + 30000;
	while (host_procs_of_uid((uid_t)ubase, "sleep", nonce) < 1 && it_now_ms() < until)
		usleep(50000);
	assert_int_equal(host_procs_of_uid((uid_t)ubase, "sleep", nonce), 1);

	char *u = xasprintf("%s/sandboxd/%ld/u%ld", cg_base, ubase, ubase);
	char *leaf = xasprintf("%s/sandboxd/%ld/server", cg_base, ubase);
	assert_true(exists(u));
	it_stop(&srv, SIGKILL);
	/* The groups stay behind the crash. */
	assert_true(exists(u));
	assert_true(exists(leaf));

	/* The next start sweeps them: nothing of acme runs, no group of it is
	 * left, and the server is in the same leaf (not nested below it). */
	assert_int_equal(it_restart(&srv, extra), 0);
	assert_int_equal(host_procs_wait_gone((uid_t)ubase, "sleep", nonce, 10000), 0);
	until = it_now_ms() + 10000;
	while (exists(u) && it_now_ms() < until)
		usleep(50000);
	assert_false(exists(u));
	char *p = xasprintf("/proc/%d/cgroup", (int)srv.pid);
	char *cg = it_read_file(p, &(size_t){0});
	char *want = xasprintf("0::%s/sandboxd/%ld/server\n", cg_base + strlen("/sys/fs/cgroup"), ubase);
	assert_non_null(cg);
	assert_string_equal(cg, want);
	free(want);
	free(cg);
	free(p);

	/* And it serves, in a new group of acme. */
	json_t *r = ex_run(&srv, tok, "echo back");
	assert_string_equal(ex_stdout_ok(r), "back\n");
	json_decref(r);
	assert_true(exists(u));
	free(u);
	free(leaf);
	free(tok);
	assert_int_equal(it_finish(&srv), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_kill9_swept),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
