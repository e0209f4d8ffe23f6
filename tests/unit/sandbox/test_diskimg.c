/* sandbox/diskimg without a loop device: what it says of a directory that
 * is no image's mount, refusals that must come before anything is made,
 * the loop-device count, and the refusals of the images' own mount
 * namespace (a thread made before it, a data directory another server
 * holds). (Attaching, filling, restarting and removing
 * images for real: tests/integration/test_disk_image.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xmalloc.h"
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

/* A thread made before the mount namespace would stay in the host's, and
 * its mounts with it: refused, nothing taken. */
static void *idle(void *arg)
{
	pthread_barrier_wait(arg);
	pthread_barrier_wait(arg);
	return NULL;
}

static void test_own_ns_refused_with_a_thread(void **state)
{
	(void)state;
	pthread_barrier_t b;
	pthread_t t;
	pthread_barrier_init(&b, NULL, 2);
	assert_int_equal(pthread_create(&t, NULL, idle, &b), 0);
	pthread_barrier_wait(&b);
	char why[512] = "";
	int lock = 7, swept = 7;
	assert_int_equal(sbx_diskimg_own_ns(dir, &lock, &swept, why, sizeof why), -EBUSY);
	assert_non_null(strstr(why, "before any thread"));
	assert_int_equal(lock, -1);
	pthread_barrier_wait(&b);
	pthread_join(t, NULL);
	pthread_barrier_destroy(&b);
	char *path = xasprintf("%s/images.lock", dir);
	assert_int_equal(access(path, F_OK), -1);
	free(path);
}

/* A second server on the same data directory would mount the same images
 * through other loop devices: refused, naming the holder; the CLI finds
 * the holder (and, in a child, refuses a pid that is not a server's). */
static void test_own_ns_refused_while_held(void **state)
{
	(void)state;
	char *path = xasprintf("%s/images.lock", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
	assert_int_equal(pwrite(fd, "4242\n", 5, 0), 5);
	char why[512] = "";
	int lock = 7, swept = 7;
	assert_int_equal(sbx_diskimg_own_ns(dir, &lock, &swept, why, sizeof why), -EBUSY);
	assert_non_null(strstr(why, "another sandboxd (pid 4242)"));
	assert_int_equal(lock, -1);
	close(fd);
	pid_t pid = 0;
	assert_int_equal(sbx_diskimg_detach_in_server(dir, dir, &pid), -ESRCH);
	free(path);
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
	    cmocka_unit_test(test_own_ns_refused_with_a_thread),
	    cmocka_unit_test(test_own_ns_refused_while_held),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
