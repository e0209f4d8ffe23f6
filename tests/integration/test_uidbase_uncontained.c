/* Review of issue 27 (failing): two servers with one uid-base without
 * cgroups (use-cgroups=false, or --allow-uncontained on a host without a
 * usable hierarchy). There is no claim then (it is a lock on a cgroup
 * directory), and since 9ba2d4f every start SIGKILLs every process of the
 * tenants' uids on the host: the second server kills the first one's
 * running command, and both run their tenants as the same uids. Root. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

static struct it_server a, b;

static void test_same_uid_base_refused(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		fprintf(stderr, "needs root (one uid per tenant)\n");
		exit(77);
	}
	long ubase;
	it_uid_base_arg(&ubase);
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), "--set", "use-cgroups=false", NULL};
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
	/* ... and it must have refused to start, as a server with cgroups does. */
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
