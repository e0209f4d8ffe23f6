/* sandbox/diskimg without a loop device: what it says of a directory that
 * is no image's mount, refusals that must come before anything is made,
 * and the loop-device count. (Attaching, filling, restarting and removing
 * images for real: tests/integration/test_disk_image.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/diskimg.h"
#include "unit.h"

static char dir[64];

static int setup(void **state)
{
	(void)state;
	return unit_tmpdir(dir, sizeof dir, "diskimg");
}

static int teardown(void **state)
{
	(void)state;
	return unit_rm_rf(dir);
}

/* A plain directory is no image's mount: no usage, nothing to detach. */
static void test_plain_directory_is_not_an_image(void **state)
{
	(void)state;
	char ws[128];
	snprintf(ws, sizeof ws, "%s/workspace", dir);
	assert_int_equal(mkdir(ws, 0755), 0);
	struct sbx_quota_usage u;
	assert_int_equal(sbx_diskimg_usage(dir, &u), -ENOENT);
	assert_int_equal(sbx_diskimg_detach(dir), 0);
	assert_int_equal(rmdir(ws), 0);
}

/* The probe always answers, with a line saying what was found; an image
 * without a size, or images where they are unusable, are refused before
 * anything is made. */
static void test_refusals_make_nothing(void **state)
{
	(void)state;
	struct sbx_diskimg *d = NULL;
	sbx_diskimg_probe(&d);
	assert_non_null(d);
	const char *detail = sbx_diskimg_detail(d);
	assert_true(strlen(detail) > 10);
	assert_true(sbx_diskimg_usable(d) == (strstr(detail, "unavailable") == NULL));
	char why[256] = "";
	const struct sbx_quota_limits none = {0, 0};
	int rc = sbx_diskimg_attach(d, dir, 1, 1, &none, why, sizeof why);
	assert_int_equal(rc, sbx_diskimg_usable(d) ? -EINVAL : -ENOTSUP);
	char img[128];
	snprintf(img, sizeof img, "%s/disk.img", dir);
	assert_int_not_equal(access(img, F_OK), 0);
	sbx_diskimg_free(&d);
	assert_null(d);
	assert_false(sbx_diskimg_usable(NULL));
}

/* Root without CAP_SYS_ADMIN (a systemd unit's bounding set, a
 * container) cannot attach loop devices: the probe says so, and auto
 * then does not choose images. */
static void test_probe_needs_sys_admin(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
		struct __user_cap_data_struct none[2];
		memset(none, 0, sizeof none);
		if (syscall(SYS_capset, &h, none) != 0)
			_exit(1);
		struct sbx_diskimg *d = NULL;
		sbx_diskimg_probe(&d);
		bool said = !sbx_diskimg_usable(d) && strstr(sbx_diskimg_detail(d), "CAP_SYS_ADMIN");
		sbx_diskimg_free(&d);
		_exit(said ? 0 : 2);
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* Loop devices: never more attached than exist. */
static void test_loop_count(void **state)
{
	(void)state;
	int attached = -1, total = -1, max = -1;
	sbx_diskimg_loops(&attached, &total, &max);
	assert_true(attached >= 0 && total >= attached && max >= 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_plain_directory_is_not_an_image),
	    cmocka_unit_test(test_refusals_make_nothing),
	    cmocka_unit_test(test_probe_needs_sys_admin),
	    cmocka_unit_test(test_loop_count),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
