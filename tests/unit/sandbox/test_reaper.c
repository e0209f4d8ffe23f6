/* sandbox/reaper: what a program the server starts inherits of the
 * subreaper's blocked SIGCHLD. The subreaper itself (orphans reparented
 * and reaped, a command's own exit untouched) is tested over HTTP in
 * tests/integration/test_cgroup_reuse.c. */
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/reaper.h"
#include "unit.h"

/* The SigBlk mask a child reports, as a number; -1 when unreadable. */
static long long child_sigblk(pid_t pid, int rfd)
{
	char buf[8192];
	size_t n = 0;
	ssize_t got;
	while ((got = read(rfd, buf + n, sizeof buf - 1 - n)) > 0)
		n += (size_t)got;
	buf[n] = '\0';
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	const char *p = strstr(buf, "SigBlk:");
	return p ? strtoll(p + 7, NULL, 16) : -1;
}

static void block_chld(sigset_t *old)
{
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	assert_int_equal(sigprocmask(SIG_BLOCK, &chld, old), 0);
}

static void test_spawn_unblocks(void **state)
{
	(void)state;
	sigset_t old;
	block_chld(&old);
	char *argv[] = {"/bin/cat", "/proc/self/status", NULL};
	for (int with = 0; with < 2; with++) {
		int p[2];
		assert_int_equal(pipe(p), 0);
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_adddup2(&fa, p[1], 1);
		pid_t pid;
		if (with)
			assert_int_equal(sbx_reaper_spawn(&pid, argv[0], &fa, argv, NULL, false), 0);
		else
			assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, NULL), 0);
		posix_spawn_file_actions_destroy(&fa);
		close(p[1]);
		long long blk = child_sigblk(pid, p[0]);
		close(p[0]);
		/* Without it the child inherits SIGCHLD blocked (the check
		 * can fail); with it nothing is blocked. */
		if (with)
			assert_int_equal(blk, 0);
		else
			assert_int_equal(blk, 1LL << (SIGCHLD - 1));
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
}

static void test_child_unblock(void **state)
{
	(void)state;
	sigset_t old;
	block_chld(&old);
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sbx_reaper_child_unblock();
		dup2(p[1], 1);
		execl("/bin/cat", "cat", "/proc/self/status", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	assert_int_equal(child_sigblk(pid, p[0]), 0);
	close(p[0]);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_spawn_unblocks),
	    cmocka_unit_test(test_child_unblock),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
