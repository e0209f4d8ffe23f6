/* Disk per tenant and a store that never starves (issue 13, security.md
 * items 4 and 9), on a filesystem of the test's own: an ext4 image made
 * with project quotas, loop-mounted with `prjquota`, the server's data
 * directory on it. The image, the mount and the loop device are removed
 * at the end whatever happened (teardown, and atexit for a failed setup).
 *
 * A kernel that cannot mount ext4's quota feature (built without
 * CONFIG_QFMT_V2, as some VM kernels are) gets the same image without it:
 * then the quota cases are skipped (saying so), and everything else (the
 * server's reporting of "unavailable", its dropped CAP_SYS_RESOURCE, the
 * store's reserve, /readyz on a store that cannot write) still runs on
 * the loop-mounted filesystem. Needs root and loop devices (77 without). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_disk.h"
#include "it_exec.h"

#define FS_BYTES (128u << 20)
#define QUOTA_BYTES (8u << 20)
#define RESERVE_BYTES (16u << 20)
#define CAP_SYS_RESOURCE_BIT 24

static char mnt[96], img[128], loopdev[64];
static bool mounted, have_quota;

static void fs_down(void)
{
	if (mounted) {
		for (int i = 0; i < 50 && it_sh_quiet("umount '%s'", mnt) != 0; i++)
			usleep(100000); /* a server process just exiting may still hold it */
		if (it_sh_quiet("mountpoint -q '%s'", mnt) == 0)
			it_sh_quiet("umount -l '%s'", mnt);
		mounted = false;
	}
	if (loopdev[0]) {
		it_sh_quiet("losetup -d '%s'", loopdev);
		loopdev[0] = '\0';
	}
	if (img[0])
		unlink(img);
	if (mnt[0])
		rmdir(mnt);
}

/* At exit whatever happened (a setup that failed half-way gets no
 * teardown): the server, its data, the mount, the loop device. */
static void all_down(void)
{
	if (srv.pid > 0)
		it_cleanup(&srv);
	fs_down();
}

/* Make the image (with project quotas or without), attach, mount. */
static bool fs_up(bool quota)
{
	if (it_sh_quiet("truncate -s %u '%s'", FS_BYTES, img) != 0 ||
	    it_sh_quiet("mkfs.ext4 -q -F %s '%s'", quota ? "-O quota,project -E quotatype=prjquota" : "",
			img) != 0)
		return false;
	char *cmd = xasprintf("losetup -f --show '%s'", img);
	FILE *p = popen(cmd, "r");
	free(cmd);
	if (!p)
		return false;
	if (!fgets(loopdev, sizeof loopdev, p))
		loopdev[0] = '\0';
	pclose(p);
	loopdev[strcspn(loopdev, "\n")] = '\0';
	if (!loopdev[0])
		return false;
	if (it_sh_quiet("mount %s '%s' '%s'", quota ? "-o prjquota" : "", loopdev, mnt) != 0)
		return false;
	mounted = true;
	chmod(mnt, 0755);
	return true;
}

static int setup(void **state)
{
	(void)state;
	snprintf(mnt, sizeof mnt, "/tmp/sandboxd-quota-%d", (int)getpid());
	snprintf(img, sizeof img, "%s.img", mnt);
	atexit(all_down);
	if (mkdir(mnt, 0755) < 0)
		return -1;
	have_quota = fs_up(true);
	if (!have_quota) {
		fprintf(stderr,
			"test_quota: this kernel cannot mount ext4 with project quotas (built without "
			"CONFIG_QFMT_V2?): the quota cases are skipped, the rest runs on plain ext4\n");
		fs_down();
		mkdir(mnt, 0755);
		if (!fs_up(false))
			return -1;
	}
	char quota[64], inodes[64], reserve[64];
	snprintf(quota, sizeof quota, "tenant-disk-quota-bytes=%u", QUOTA_BYTES);
	snprintf(inodes, sizeof inodes, "tenant-disk-quota-inodes=%d", 2000);
	snprintf(reserve, sizeof reserve, "store-reserve-bytes=%u", RESERVE_BYTES);
	/* Without project quotas, auto would take disk images (test_disk_image.c
	 * tests those): this test is about the project-quota path. */
	const char *const extra[] = {"--set", it_uid_base_arg(NULL),
				     "--set", quota,
				     "--set", inodes,
				     "--set", reserve,
				     "--set", have_quota ? "disk-quota=project" : "disk-quota=none",
				     NULL};
	if (it_start_under(&srv, mnt, extra) < 0)
		return -1;
	tok_a = it_token(&srv, "acme", NULL);
	tok_b = it_token(&srv, "globex", NULL);
	tok_ops = it_token(&srv, "ops", "admin audit:read");
	return tok_a && tok_b && tok_ops ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = 0;
	if (srv.pid > 0 && it_stop(&srv, SIGTERM) != 0)
		rc = -1;
	if (srv_log_unclean())
		rc = -1;
	it_cleanup(&srv);
	fs_down();
	free_tokens();
	return rc;
}

/* The server says what it found, in /readyz and in its log. */
static void test_reports_disk_quota(void **state)
{
	(void)state;
	long st = 0;
	json_t *j = readyz(&st);
	assert_int_equal(st, 200);
	const char *status = sub(j, "disk_quota", "status"), *detail = sub(j, "disk_quota", "detail");
	fprintf(stderr, "disk_quota: %s: %s\n", status, detail);
	assert_string_equal(status, have_quota ? "enforced" : "unavailable");
	assert_non_null(strstr(detail, loopdev));
	assert_non_null(strstr(detail, mnt));
	if (have_quota)
		assert_non_null(strstr(detail, "project quotas on ext4"));
	else
		assert_non_null(strstr(detail, "enforced instead"));
	assert_string_equal(sub(j, "storage", "status"), "ok");
	json_decref(j);
	char *log = it_read_file(srv.log, NULL);
	assert_non_null(log);
	assert_non_null(
	    strstr(log, have_quota ? "disk quotas: project quotas on ext4" : "disk quotas: unavailable"));
	free(log);
}

static bool cap_bit(const char *status, const char *field)
{
	const char *p = strstr(status, field);
	assert_non_null(p);
	unsigned long long v = strtoull(p + strlen(field), NULL, 16);
	return (v >> CAP_SYS_RESOURCE_BIT) & 1;
}

/* No thread of the server holds CAP_SYS_RESOURCE (which would let its
 * writes pass every quota), nor can a child get it back. */
static void test_server_drops_quota_override(void **state)
{
	(void)state;
	char *dir = xasprintf("/proc/%d/task", (int)srv.pid);
	DIR *d = opendir(dir);
	assert_non_null(d);
	int threads = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char *p = xasprintf("%s/%s/status", dir, e->d_name);
		char *status = it_read_file(p, NULL);
		free(p);
		if (!status)
			continue; /* the thread ended */
		assert_false(cap_bit(status, "CapEff:\t"));
		assert_false(cap_bit(status, "CapPrm:\t"));
		assert_false(cap_bit(status, "CapBnd:\t"));
		free(status);
		threads++;
	}
	closedir(d);
	free(dir);
	assert_true(threads > 1);
	char *self = it_read_file("/proc/self/status", NULL);
	if (self && !cap_bit(self, "CapBnd:\t"))
		fprintf(stderr, "test_quota: this test itself runs without CAP_SYS_RESOURCE, so the server "
				"never had it: the unit test sandbox/test_quota checks the drop\n");
	free(self);
}

/* acme fills its quota by a command, by PUT /fs/write and by an upload;
 * globex goes on; acme deletes and recovers; the audit has it all. */
static void test_quota_stops_only_its_tenant(void **state)
{
	(void)state;
	if (!have_quota)
		skip();
	json_t *r = ex_run(&srv, tok_a, "head -c 12582912 /dev/zero > fill; echo rc=$?");
	assert_non_null(strstr(jstr(r, "stdout"), "rc=1"));
	assert_non_null(strstr(jstr(r, "stderr"), "Disk quota exceeded"));
	json_decref(r);
	globex_unaffected();

	/* The server's own writes, as root, are held to the quota too. */
	struct it_resp w;
	assert_int_equal(put(tok_a, "over.bin", 2u << 20, &w), 507);
	it_expect_error(&w, 507, "quota_exceeded");
	json_t *body = it_json(&w);
	json_t *det = json_object_get(json_object_get(body, "error"), "details");
	assert_true(json_integer_value(json_object_get(det, "limit_bytes")) == QUOTA_BYTES);
	assert_true(json_integer_value(json_object_get(det, "usage_bytes")) > QUOTA_BYTES / 2);
	assert_true(json_integer_value(json_object_get(det, "limit_inodes")) == 2000);
	json_decref(body);
	it_resp_free(&w);
	char *big = xmalloc(3u << 20);
	memset(big, 'u', 3u << 20);
	assert_int_equal(it_http(&srv, "PUT", "/fs/write_stream?path=up.bin", tok_a, NULL, big, 3u << 20, &w),
			 0);
	free(big);
	it_expect_error(&w, 507, "quota_exceeded");
	it_resp_free(&w);
	globex_unaffected();
	assert_int_equal(it_http(&srv, "GET", "/metrics", tok_ops, NULL, NULL, 0, &w), 0);
	assert_non_null(strstr(w.body, "sandboxd_tenant_disk_bytes{tenant=\"acme\"} "));
	assert_non_null(strstr(w.body, "\nsandboxd_tenant_disk_quota_bytes 8388608\n"));
	it_resp_free(&w);

	/* Deleting is always possible, and then writing works again. */
	r = ex_run(&srv, tok_a, "rm -f fill && echo gone");
	assert_string_equal(ex_stdout_ok(r), "gone\n");
	json_decref(r);
	put_ok(tok_a, "again.bin", 2u << 20);
	assert_true(audit_rows("/fs/write", 507, 1) >= 1);
	assert_true(audit_rows("/fs/write_stream", 507, 1) >= 1);
	assert_true(audit_rows("/exec", 200, 2) >= 2);
}

/* The disk fills up (a file written on the mount as root, in no
 * tenant's project): new tenant work is refused with 507, /readyz says
 * so, and the store still writes every audit row; room again, work
 * again. */
static void test_full_disk_keeps_the_store(void **state)
{
	(void)state;
	/* A command already running when the disk fills. */
	struct bg_req cmd;
	bg_exec(&cmd, &srv, tok_a,
		json_pack("{s:s, s:i}", "command",
			  "touch /workspace/.started; while [ ! -e /workspace/.gate ]; do sleep 0.05; done; "
			  "head -c 4194304 /dev/zero > /workspace/late-cmd; echo rc=$?",
			  "timeout_s", 60),
		NULL);
	char *started = xasprintf("%s/tenants/acme/workspace/.started", srv.dir);
	for (long until = it_now_ms() + 30000; access(started, F_OK) != 0 && it_now_ms() < until;)
		usleep(20000);
	assert_int_equal(access(started, F_OK), 0);
	free(started);

	struct statvfs v;
	assert_int_equal(statvfs(mnt, &v), 0);
	unsigned long long avail = (unsigned long long)v.f_bavail * v.f_frsize;
	char *ballast = xasprintf("%s/ballast", mnt);
	assert_int_equal(it_sh_quiet("fallocate -l %llu '%s'", avail - (1u << 20), ballast), 0);

	/* It gets ENOSPC (it does not run as root: no reserved blocks), and
	 * its result is recorded all the same. */
	char *gate = xasprintf("%s/tenants/acme/workspace/.gate", srv.dir);
	assert_int_equal(it_write_file(gate, "", 0), 0);
	free(gate);
	json_t *res = bg_join(&cmd);
	it_resp_free(&cmd.resp);
	assert_non_null(res);
	assert_non_null(strstr(jstr(res, "stdout"), "rc=1"));
	assert_non_null(strstr(jstr(res, "stderr"), "No space left on device"));
	char *exec_url = xasprintf("/exec/%s", jstr(res, "id"));
	json_decref(res);
	json_t *row = NULL;
	assert_int_equal(it_get_json(&srv, tok_a, exec_url, &row), 200);
	assert_string_equal(jstr(row, "state"), "exited");
	json_decref(row);
	free(exec_url);

	struct it_resp w;
	assert_int_equal(put(tok_a, "late.bin", 4096, &w), 507);
	it_expect_error(&w, 507, "insufficient_storage");
	json_t *body = it_json(&w);
	json_t *det = json_object_get(json_object_get(body, "error"), "details");
	assert_true(json_integer_value(json_object_get(det, "available_bytes")) < RESERVE_BYTES);
	assert_int_equal(json_integer_value(json_object_get(det, "reserve_bytes")), RESERVE_BYTES);
	json_decref(body);
	it_resp_free(&w);
	assert_int_equal(ex_post(&srv, tok_b, NULL, json_pack("{s:s}", "command", "echo no"), NULL, &w), 507);
	it_expect_error(&w, 507, "insufficient_storage");
	it_resp_free(&w);
	/* Reads go on. */
	struct it_resp rd;
	assert_int_equal(it_http(&srv, "GET", "/fs/exists?path=b.bin", tok_b, NULL, NULL, 0, &rd), 0);
	it_expect_status(&rd, 200);
	it_resp_free(&rd);
	json_t *j = readyz_until(503);
	assert_string_equal(sub(j, "storage", "status"), "low");
	assert_string_equal(sub(j, "store", "status"), "ok");
	json_decref(j);
	/* Every refusal is on record: the store kept its room. */
	for (int i = 0; i < 20; i++) {
		assert_int_equal(put(tok_a, "late.bin", 4096, &w), 507);
		it_resp_free(&w);
	}
	assert_true(audit_rows("/fs/write", 507, 21) >= 21);

	assert_int_equal(unlink(ballast), 0);
	free(ballast);
	json_decref(readyz_until(200));
	put_ok(tok_a, "late.bin", 4096);
	globex_unaffected();
}

/* A store that cannot write (its WAL made immutable: every write fails
 * with EPERM) turns /readyz 503, and back once it can. */
static void test_unwritable_store_is_unready(void **state)
{
	(void)state;
	char *wal = xasprintf("%s/sandboxd.db-wal", srv.dir);
	assert_int_equal(access(wal, F_OK), 0);
	assert_int_equal(it_sh_quiet("chattr +i '%s'", wal), 0);
	struct it_resp w;
	long st = ex_post(&srv, tok_b, NULL, json_pack("{s:s}", "command", "echo no"), NULL, &w);
	it_resp_free(&w);
	json_t *j = readyz_until(503);
	it_sh_quiet("chattr -i '%s'", wal);
	assert_int_equal(st, 503); /* fail closed: no exec row, no command */
	assert_string_equal(sub(j, "store", "status"), "unavailable");
	fprintf(stderr, "store: %s\n", sub(j, "store", "detail"));
	json_decref(j);
	json_decref(readyz_until(200));
	json_t *r = ex_run(&srv, tok_b, "echo back");
	assert_string_equal(ex_stdout_ok(r), "back\n");
	json_decref(r);
	free(wal);
}

/* The harness's usual data directory (/tmp, no project quotas): the
 * server says plainly that quotas are unavailable and what stands in. */
static void test_unavailable_said_plainly(void **state)
{
	(void)state;
	struct it_server plain;
	assert_int_equal(it_start(&plain, NULL), 0);
	struct it_resp r;
	assert_int_equal(it_http(&plain, "GET", "/readyz", NULL, NULL, NULL, 0, &r), 0);
	json_t *j = it_json(&r);
	it_resp_free(&r);
	assert_string_equal(sub(j, "disk_quota", "status"), "unavailable");
	assert_non_null(strstr(sub(j, "disk_quota", "detail"), "enforced instead"));
	json_decref(j);
	char *log = it_read_file(plain.log, NULL);
	assert_non_null(strstr(log, "disk quotas: unavailable"));
	free(log);
	assert_int_equal(it_finish(&plain), 0);
}

int main(void)
{
	if (geteuid() != 0 || access("/dev/loop-control", F_OK) != 0 ||
	    it_sh_quiet("command -v mkfs.ext4") != 0) {
		fprintf(stderr, "test_quota: needs root, loop devices and mkfs.ext4; skipped\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reports_disk_quota),
	    cmocka_unit_test(test_server_drops_quota_override),
	    cmocka_unit_test(test_quota_stops_only_its_tenant),
	    cmocka_unit_test(test_full_disk_keeps_the_store),
	    cmocka_unit_test(test_unwritable_store_is_unready),
	    cmocka_unit_test(test_unavailable_said_plainly),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
