/* sandbox/quota: what the probe says of a filesystem without project
 * quotas, free space, and the server giving up CAP_SYS_RESOURCE. (The
 * quotas themselves need a filesystem of their own:
 * tests/integration/test_quota.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/quota.h"
#include "unit.h"

static char dir[64];

static int setup(void **state)
{
	(void)state;
	return unit_tmpdir(dir, sizeof dir, "quota");
}

static int teardown(void **state)
{
	(void)state;
	return unit_rm_rf(dir);
}

/* The harness's /tmp has no project quotas on test machines: unavailable,
 * with a reason, and nothing can be applied. */
static void test_probe_without_quotas(void **state)
{
	(void)state;
	struct sbx_quota *q = NULL;
	assert_int_equal(sbx_quota_probe(&q, dir), 0);
	assert_non_null(q);
	if (sbx_quota_enforced(q)) {
		sbx_quota_free(&q);
		skip(); /* a host whose /tmp has them */
	}
	assert_non_null(strstr(sbx_quota_detail(q), "unavailable on "));
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	struct sbx_quota_limits lim = {1u << 20, 100};
	assert_int_equal(sbx_quota_apply(q, fd, 4242, &lim), -ENOTSUP);
	struct sbx_quota_usage u;
	assert_int_equal(sbx_quota_usage(q, 4242, &u), -ENOTSUP);
	close(fd);
	sbx_quota_free(&q);
	assert_null(q);
	sbx_quota_free(&q); /* NULL is fine */
	assert_false(sbx_quota_enforced(NULL));
}

static void test_probe_missing_dir(void **state)
{
	(void)state;
	struct sbx_quota *q = NULL;
	char *missing = NULL;
	assert_true(asprintf(&missing, "%s/nope", dir) > 0);
	assert_int_equal(sbx_quota_probe(&q, missing), -ENOENT);
	assert_null(q);
	free(missing);
}

static void test_disk_space(void **state)
{
	(void)state;
	struct sbx_disk_space ds = {0, 0};
	assert_int_equal(sbx_disk_space(dir, &ds), 0);
	assert_true(ds.total_bytes > 0);
	assert_true(ds.avail_bytes <= ds.total_bytes);
	assert_int_equal(sbx_disk_space("/nonexistent-sandboxd", &ds), -ENOENT);
}

/* Bit 24 (CAP_SYS_RESOURCE) of a /proc/self/status capability line. */
static int cap_sys_resource(const char *field)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	int bit = -1;
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, field, strlen(field)) == 0)
			bit = (int)((strtoull(line + strlen(field), NULL, 16) >> 24) & 1);
	if (f)
		fclose(f);
	return bit;
}

/* A child with CAP_SYS_RESOURCE in its bounding set, whatever this
 * process has (a test run from a shell that dropped it would prove
 * nothing): when it lacks it, a new user namespace, where a process
 * starts with every capability, bounding set included. false when
 * neither is possible. */
static bool child_with_capability(void)
{
	if (prctl(PR_CAPBSET_READ, CAP_SYS_RESOURCE, 0, 0, 0) == 1)
		return true;
	return unshare(CLONE_NEWUSER) == 0 && prctl(PR_CAPBSET_READ, CAP_SYS_RESOURCE, 0, 0, 0) == 1;
}

static int wait_child(pid_t pid)
{
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* In a child (it changes the process for good): afterwards the
 * capability is in no set, and hard limits were raised so that commands
 * can still be given any limit. */
static void test_drop_override(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		bool root = geteuid() == 0;
		if (!child_with_capability())
			_exit(77);
		if (cap_sys_resource("CapEff:") != 1)
			_exit(1);
		if (sbx_quota_drop_override() != 0)
			_exit(2);
		if (cap_sys_resource("CapEff:") != 0 || cap_sys_resource("CapPrm:") != 0 ||
		    cap_sys_resource("CapBnd:") != 0)
			_exit(3);
		struct rlimit rl;
		/* Raised before the drop (only the host's root can). */
		if (root && getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY)
			_exit(4);
		/* Lowering still works; raising past the hard limit does not. */
		rl.rlim_cur = rl.rlim_max = 1u << 30;
		if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
			_exit(5);
		rl.rlim_max = RLIM_INFINITY;
		if (setrlimit(RLIMIT_FSIZE, &rl) == 0)
			_exit(6);
		if (sbx_quota_drop_override() != 0) /* twice is fine */
			_exit(7);
		_exit(0);
	}
	int rc = wait_child(pid);
	if (rc == 77)
		skip();
	assert_int_equal(rc, 0);
}

/* A server without CAP_SETPCAP (not root) still starts: it cannot touch
 * its bounding set, and drops what it holds. */
static void test_drop_override_unprivileged(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
		struct __user_cap_data_struct none[2];
		memset(none, 0, sizeof none);
		if (!child_with_capability())
			_exit(77);
		if (syscall(SYS_capset, &h, none) != 0)
			_exit(1);
		_exit(sbx_quota_drop_override() == 0 && cap_sys_resource("CapEff:") == 0 ? 0 : 2);
	}
	int rc = wait_child(pid);
	if (rc == 77)
		skip();
	assert_int_equal(rc, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    UNIT_TEST_FX(test_probe_without_quotas),
	    UNIT_TEST_FX(test_probe_missing_dir),
	    UNIT_TEST_FX(test_disk_space),
	    UNIT_TEST_FX(test_drop_override),
	    UNIT_TEST_FX(test_drop_override_unprivileged),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
