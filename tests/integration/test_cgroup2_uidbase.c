/* Review of issue 27 (failing): two servers with one uid-base on a pure
 * cgroup-v2 host, each in a group of its own (two systemd units, a unit
 * and a login session, a host server and a container's). On v1 the second
 * refuses to start (its claim is a lock on the host-wide
 * /sys/fs/cgroup/memory/sandboxd/<uid-base>); on v2 the claim is a lock on
 * <own group>/sandboxd/<uid-base>, a different directory per server, so
 * the second starts, its start-up uid sweep SIGKILLs the first server's
 * running command, and both then run their tenants as the same host
 * uids. Pure cgroup-v2 hosts only (tests/vm/run); 77 elsewhere. */
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

static struct it_server a, b;

static void test_same_uid_base_refused(void **state)
{
	(void)state;
	struct statfs sf;
	if (geteuid() != 0 || statfs("/sys/fs/cgroup", &sf) < 0 || sf.f_type != CGROUP2_MAGIC) {
		fprintf(stderr, "not a cgroup2 host as root: run in tests/vm/run\n");
		exit(77);
	}
	long ubase;
	it_uid_base_arg(&ubase);
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), NULL};
	assert_int_equal(it_start(&a, extra), 0);
	char *tok = it_token(&a, "acme", NULL);
	assert_non_null(tok);
	char nonce[32];
	snprintf(nonce, sizeof nonce, "8%d", (int)getpid() % 100000);
	char *cmd = xasprintf("sleep %s", nonce);
	json_t *v = NULL;
	long st = ex_post(&a, tok, NULL,
			  json_pack("{s:s, s:s, s:b, s:i}", "command", cmd, "id", "first", "background", 1,
				    "timeout_s", 600),
			  &v, NULL);
	free(cmd);
	free(tok);
	json_decref(v);
	assert_int_equal(st, 202);
	long until = it_now_ms() + 30000;
	while (host_procs_of_uid((uid_t)ubase, "sleep", nonce) < 1 && it_now_ms() < until)
		usleep(50000);
	assert_int_equal(host_procs_of_uid((uid_t)ubase, "sleep", nonce), 1);

	/* A second server with the same uid-base, in a group of its own. */
	int started = it_start(&b, extra);
	/* Whatever it did, the first server's command must still run... */
	usleep(500000);
	int alive = host_procs_of_uid((uid_t)ubase, "sleep", nonce);
	if (started == 0)
		fprintf(stderr, "second server with uid-base %ld started (log %s); first's command %s\n",
			ubase, b.log, alive ? "alive" : "KILLED");
	if (started == 0)
		it_finish(&b);
	assert_int_equal(alive, 1);
	/* ... and it must have refused to start, as on v1. */
	assert_int_not_equal(started, 0);
	assert_int_equal(it_finish(&a), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_same_uid_base_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
