/* Disk per tenant by a filesystem image per tenant (disk-quota=image,
 * issue 13): the mechanism that works on kernels without project quotas,
 * this machine's and CI's among them. Each tenant's workspace is the
 * mount of its own ext4 image; the test checks what a user depends on:
 * the tenant over quota gets ENOSPC and 507 quota_exceeded, the other
 * tenant goes on, deleting recovers, the sandbox sees the mount and
 * cannot undo it, restarts (graceful and kill -9) keep the files without
 * stacking mounts, tenant removal and shutdown release the loop devices,
 * a crash releases them too (the mounts live in the server's own mount
 * namespace: the host never sees them), and nothing is left mounted or
 * attached at the end. Needs root and loop
 * devices (77 without). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_disk.h"
#include "it_exec.h"

#define QUOTA_BYTES (24u << 20)
#define GROWN_BYTES (40u << 20)

static char quota_arg[64] = "tenant-disk-quota-bytes=25165824";
static const char *extra[] = {"--set", NULL,	  "--set", "disk-quota=image",
			      "--set", quota_arg, "--set", "tenant-disk-quota-inodes=2000",
			      NULL};

/* Lines of /proc/self/mountinfo (or `losetup -a`) naming what. */
static int count_lines(const char *text, const char *what)
{
	int n = 0;
	for (const char *p = text; p && (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

static int mounts_of(const char *what)
{
	char *mi = it_read_file("/proc/self/mountinfo", NULL);
	int n = count_lines(mi, what);
	free(mi);
	return n;
}

/* The same in the server's mount namespace, where the images are. */
static int srv_mounts_of(const char *what)
{
	char *path = xasprintf("/proc/%d/mountinfo", (int)srv.pid);
	char *mi = it_read_file(path, NULL);
	int n = count_lines(mi, what);
	free(mi);
	free(path);
	return n;
}

/* rel (under the data directory) as the server sees it. */
static char *srv_path(const char *rel)
{
	return xasprintf("/proc/%d/root%s/%s", (int)srv.pid, srv.dir, rel);
}

static int loops_of(const char *what)
{
	FILE *p = popen("losetup -a 2>/dev/null", "r");
	char line[1024];
	int n = 0;
	while (p && fgets(line, sizeof line, p))
		n += strstr(line, what) != NULL;
	if (p)
		pclose(p);
	return n;
}

static char *ws_of(const char *tenant)
{
	return xasprintf("%s/tenants/%s/workspace ", srv.dir, tenant);
}

/* Whatever happened, the server goes and the data with it; the harness
 * fails the suite if anything of it stays mounted or attached on the
 * host (and releases it). */
static char decoy[64]; /* test_start_sweeps_old_host_mounts's other data directory */

static void force_down(void)
{
	it_cleanup(&srv);
	if (decoy[0])
		it_sh_quiet("umount -l '%s/tenants/acme/workspace'; rm -rf '%s'", decoy, decoy);
}

static int setup(void **state)
{
	(void)state;
	extra[1] = it_uid_base_arg(NULL);
	atexit(force_down);
	if (it_start(&srv, extra) < 0)
		return -1;
	tok_a = it_token(&srv, "acme", NULL);
	tok_b = it_token(&srv, "globex", NULL);
	tok_ops = it_token(&srv, "ops", "admin audit:read");
	return tok_a && tok_b && tok_ops ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = srv.pid > 0 && it_stop(&srv, SIGTERM) != 0 ? -1 : 0;
	/* A graceful stop unmounts every image, and autoclear frees the loop
	 * devices: nothing of this server is left on the host. */
	if (mounts_of(srv.dir) != 0 || loops_of(srv.dir) != 0) {
		fprintf(stderr, "left behind: %d mounts, %d loop devices of %s\n", mounts_of(srv.dir),
			loops_of(srv.dir), srv.dir);
		rc = -1;
	}
	if (srv_log_unclean())
		rc = -1;
	force_down();
	free_tokens();
	return rc;
}

/* /readyz and the log say which mode is in force; each tenant's
 * workspace is one ext4 mount, nodev and nosuid. */
static void test_reports_image_mode(void **state)
{
	(void)state;
	long st = 0;
	json_t *j = readyz(&st);
	assert_int_equal(st, 200);
	assert_string_equal(sub(j, "disk_quota", "status"), "enforced");
	assert_string_equal(sub(j, "disk_quota", "mode"), "image");
	assert_non_null(strstr(sub(j, "disk_quota", "detail"), "an ext4 image per tenant"));
	json_t *loops = json_object_get(json_object_get(j, "disk_quota"), "loop_devices");
	assert_true(json_integer_value(json_object_get(loops, "attached")) >= 3);
	assert_true(json_integer_value(json_object_get(loops, "total")) >= 3);
	json_decref(j);
	char *log = it_read_file(srv.log, NULL);
	assert_non_null(strstr(log, "disk quotas: an ext4 image per tenant"));
	free(log);

	/* Mounted in the server's namespace only: the host sees none. */
	assert_int_equal(mounts_of(srv.dir), 0);
	char *mpath = xasprintf("/proc/%d/mountinfo", (int)srv.pid);
	char *ws = ws_of("acme"), *mi = it_read_file(mpath, NULL);
	free(mpath);
	assert_int_equal(count_lines(mi, ws), 1);
	const char *line = strstr(mi, ws);
	assert_non_null(strstr(line, "nosuid,nodev"));
	assert_non_null(strstr(line, " - ext4 /dev/loop"));
	free(mi);
	/* the image's root is the tenant's alone, as any workspace is */
	struct stat sb;
	free(ws);
	ws = xasprintf("%s/tenants/acme/workspace", srv.dir);
	assert_int_equal(stat(ws, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0700);
	free(ws);
	char *img = xasprintf("%s/tenants/acme/disk.img", srv.dir);
	assert_int_equal(stat(img, &sb), 0);
	assert_int_equal(sb.st_size, QUOTA_BYTES);
	assert_int_equal(sb.st_mode & 0777, 0600);
	assert_int_equal(loops_of(img), 1);
	free(img);
}

/* A command sees its workspace as the image's filesystem, sized by the
 * quota, and can neither unmount nor remount it. */
static void test_sandbox_sees_the_mount(void **state)
{
	(void)state;
	json_t *r =
	    ex_run(&srv, tok_a,
		   "awk '$5 == \"/workspace\" {for (i = 6; i < NF; i++) if ($i == \"-\") print $(i + 1)}' "
		   "/proc/self/mountinfo; "
		   "df -k /workspace | awk 'NR == 2 {print ($2 <= 24576 && $2 > 16384) ? \"sized\" : $2}'; "
		   "umount /workspace 2>/dev/null || echo umount refused; "
		   "umount -l /workspace 2>/dev/null || echo detach refused; "
		   "mount -o remount,rw,suid /workspace 2>/dev/null || echo remount refused; "
		   "echo hi > /workspace/mine.txt && echo wrote");
	assert_string_equal(ex_stdout_ok(r), "ext4\nsized\numount refused\ndetach refused\nremount "
					     "refused\nwrote\n");
	json_decref(r);
	/* Still mounted, once, and what the command wrote is in the image. */
	char *ws = ws_of("acme");
	assert_int_equal(srv_mounts_of(ws), 1);
	free(ws);
	char *f = srv_path("tenants/acme/workspace/mine.txt");
	char *text = it_read_file(f, NULL);
	assert_string_equal(text, "hi\n");
	free(text);
	free(f);
}

static void expect_quota_507(struct it_resp *w)
{
	it_expect_error(w, 507, "quota_exceeded");
	json_t *body = it_json(w);
	json_t *det = json_object_get(json_object_get(body, "error"), "details");
	json_int_t limit = json_integer_value(json_object_get(det, "limit_bytes")),
		   used = json_integer_value(json_object_get(det, "usage_bytes"));
	assert_true(limit <= QUOTA_BYTES && limit > QUOTA_BYTES * 3 / 4);
	assert_true(used > limit - (2 << 20) && used <= limit);
	/* ext4 rounds the inode count down to whole inode-table blocks per group */
	json_int_t inodes = json_integer_value(json_object_get(det, "limit_inodes"));
	assert_true(inodes > 1800 && inodes <= 2000);
	json_decref(body);
}

/* acme fills its image by a command, by PUT /fs/write and by an upload
 * (both written by the server, as root); globex goes on; acme deletes
 * and recovers; the audit has every row. */
static void test_image_stops_only_its_tenant(void **state)
{
	(void)state;
	json_t *r = ex_run(&srv, tok_a, "head -c 33554432 /dev/zero > /workspace/fill; echo rc=$?");
	assert_non_null(strstr(jstr(r, "stdout"), "rc=1"));
	assert_non_null(strstr(jstr(r, "stderr"), "No space left on device"));
	json_decref(r);
	globex_unaffected();

	struct it_resp w;
	assert_int_equal(put(tok_a, "over.bin", 2u << 20, &w), 507);
	expect_quota_507(&w);
	it_resp_free(&w);
	char *big = xmalloc(3u << 20);
	memset(big, 'u', 3u << 20);
	assert_int_equal(it_http(&srv, "PUT", "/fs/write_stream?path=up.bin", tok_a, NULL, big, 3u << 20, &w),
			 0);
	free(big);
	expect_quota_507(&w);
	it_resp_free(&w);
	globex_unaffected();

	/* The data directory's filesystem holds no more of acme than its image. */
	char *img = xasprintf("%s/tenants/acme/disk.img", srv.dir);
	struct stat sb;
	assert_int_equal(stat(img, &sb), 0);
	assert_true((unsigned long long)sb.st_blocks * 512 <= QUOTA_BYTES);
	free(img);
	assert_int_equal(it_http(&srv, "GET", "/metrics", tok_ops, NULL, NULL, 0, &w), 0);
	const char *m = strstr(w.body, "sandboxd_tenant_disk_bytes{tenant=\"acme\"} ");
	assert_non_null(m);
	assert_true(strtoull(m + strlen("sandboxd_tenant_disk_bytes{tenant=\"acme\"} "), NULL, 10) >
		    QUOTA_BYTES / 2);
	assert_non_null(strstr(w.body, "sandboxd_tenant_disk_bytes{tenant=\"globex\"} "));
	it_resp_free(&w);

	r = ex_run(&srv, tok_a, "rm -f /workspace/fill && echo gone");
	assert_string_equal(ex_stdout_ok(r), "gone\n");
	json_decref(r);
	put_ok(tok_a, "again.bin", 2u << 20);
	assert_true(audit_rows("/fs/write", 507, 1) >= 1);
	assert_true(audit_rows("/fs/write_stream", 507, 1) >= 1);
	assert_true(audit_rows("/exec", 200, 2) >= 2);
}

static void expect_file(const char *tenant, const char *rel, const char *want)
{
	char *in = xasprintf("tenants/%s/workspace/%s", tenant, rel), *f = srv_path(in);
	free(in);
	char *text = it_read_file(f, NULL);
	assert_non_null(text);
	assert_string_equal(text, want);
	free(text);
	free(f);
}

/* Graceful stop: unmounted, loop devices freed; restart: the files are
 * back. kill -9: the mount dies with the server's namespace (nothing on
 * the host); the next start mounts it again (one mount, one loop
 * device), and the files are there. */
static void test_restarts_keep_files_without_stacking(void **state)
{
	(void)state;
	char *ws = ws_of("acme"), *img = xasprintf("%s/tenants/acme/disk.img", srv.dir);
	assert_int_equal(it_stop(&srv, SIGTERM), 0);
	assert_int_equal(mounts_of(srv.dir), 0);
	assert_int_equal(loops_of(srv.dir), 0);
	assert_int_equal(it_restart(&srv, extra), 0);
	expect_file("acme", "mine.txt", "hi\n");
	assert_int_equal(srv_mounts_of(ws), 1);

	assert_int_equal(it_stop(&srv, SIGKILL), 128 + SIGKILL);
	assert_int_equal(mounts_of(ws), 0);
	assert_int_equal(it_restart(&srv, extra), 0);
	assert_int_equal(srv_mounts_of(ws), 1);
	assert_int_equal(loops_of(img), 1);
	json_t *r = ex_run(&srv, tok_a, "cat /workspace/mine.txt");
	assert_string_equal(ex_stdout_ok(r), "hi\n");
	json_decref(r);
	free(ws);
	free(img);
}

/* A larger quota grows the image at the next start (offline, after a
 * graceful stop), files kept; a smaller one the data does not fit is
 * refused with a clear message and the image keeps its size. */
static void test_quota_grows_and_refuses_shrink(void **state)
{
	(void)state;
	assert_int_equal(it_stop(&srv, SIGTERM), 0);
	snprintf(quota_arg, sizeof quota_arg, "tenant-disk-quota-bytes=%u", GROWN_BYTES);
	assert_int_equal(it_restart(&srv, extra), 0);
	json_t *r = ex_run(&srv, tok_a,
			   "df -k /workspace | awk 'NR == 2 {print ($2 > 32768) ? \"grown\" : $2}'; "
			   "cat /workspace/mine.txt");
	assert_string_equal(ex_stdout_ok(r), "grown\nhi\n");
	json_decref(r);
	r = ex_run(&srv, tok_a, "head -c 20971520 /dev/zero > /workspace/big && echo fits");
	assert_string_equal(ex_stdout_ok(r), "fits\n");
	json_decref(r);

	assert_int_equal(it_stop(&srv, SIGTERM), 0);
	snprintf(quota_arg, sizeof quota_arg, "tenant-disk-quota-bytes=%u", 8u << 20);
	assert_int_equal(it_restart(&srv, extra), 0);
	expect_file("acme", "mine.txt", "hi\n");
	char *img = xasprintf("%s/tenants/acme/disk.img", srv.dir);
	struct stat sb;
	assert_int_equal(stat(img, &sb), 0);
	assert_int_equal(sb.st_size, GROWN_BYTES);
	free(img);
	char *log = it_read_file(srv.log, NULL);
	assert_non_null(strstr(log, "tenant acme: "));
	assert_non_null(strstr(log, "disk.img keeps its size"));
	free(log);
	r = ex_run(&srv, tok_a, "rm /workspace/big && echo gone");
	assert_string_equal(ex_stdout_ok(r), "gone\n");
	json_decref(r);
}

/* `sandboxd tenant remove` unmounts the tenant's image and releases its
 * loop device while the server runs; the server then refuses its token. */
static void test_tenant_remove_releases_the_loop(void **state)
{
	(void)state;
	char *ws = ws_of("globex"), *img = xasprintf("%s/tenants/globex/disk.img", srv.dir);
	assert_int_equal(srv_mounts_of(ws), 1);
	int st = 0;
	char *out = it_cli(&srv, &st, "tenant remove globex");
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "is unmounted"));
	free(out);
	assert_int_equal(srv_mounts_of(ws), 0);
	/* The server drops the tenant when it reads it again (401 from then
	 * on) and with it its last open file on the image: the loop device
	 * goes. (A route that records no session: until then the cached
	 * tenant is served, and recording a session fails.) */
	struct it_resp w;
	long until = it_now_ms() + 15000;
	do {
		assert_int_equal(it_http(&srv, "GET", "/exec/none", tok_b, NULL, NULL, 0, &w), 0);
		st = (int)w.status;
		it_resp_free(&w);
	} while (st != 401 && it_now_ms() < until && usleep(100000) == 0);
	assert_int_equal(st, 401);
	until = it_now_ms() + 10000;
	while (loops_of(img) != 0 && it_now_ms() < until)
		usleep(50000);
	assert_int_equal(loops_of(img), 0);
	assert_int_equal(srv_mounts_of(ws), 0);
	free(ws);
	free(img);
}

/* A tenant removed and added again while the server still holds the
 * old life gets an image of its own, and keeps it mounted: the server's
 * noticing that the old life ended must not let go of the new life's
 * image (issue 26 review: it unmounted it right after mounting it). */
static void test_readded_keeps_its_image(void **state)
{
	(void)state;
	int st = 0;
	free(it_cli(&srv, &st, "tenant add kit"));
	assert_int_equal(st, 0);
	char *tok = it_token(&srv, "kit", "exec fs:read fs:write");
	json_t *r = ex_run(&srv, tok, "echo old > /workspace/f && echo ok");
	assert_string_equal(ex_stdout_ok(r), "ok\n");
	json_decref(r);
	free(tok);
	char *ws = ws_of("kit");
	assert_int_equal(srv_mounts_of(ws), 1);
	/* Both before the server hears of either. */
	free(it_cli(&srv, &st, "tenant remove kit"));
	assert_int_equal(st, 0);
	free(it_cli(&srv, &st, "tenant add kit"));
	assert_int_equal(st, 0);
	tok = it_token(&srv, "kit", "exec fs:read fs:write");
	r = ex_run(&srv, tok, "cat /workspace/f 2>/dev/null; echo new > /workspace/f && echo ok");
	assert_string_equal(ex_stdout_ok(r), "ok\n"); /* nothing of the old life */
	json_decref(r);
	assert_int_equal(srv_mounts_of(ws), 1);
	r = ex_run(&srv, tok, "cat /workspace/f");
	assert_string_equal(ex_stdout_ok(r), "new\n");
	json_decref(r);
	assert_int_equal(srv_mounts_of(ws), 1);
	free(tok);
	free(ws);
}

/* A workspace with files from before image mode is not hidden under an
 * empty image: the tenant is refused (503, saying why) and its files
 * stay as they were. */
static void test_existing_files_are_not_hidden(void **state)
{
	(void)state;
	int st = 0;
	free(it_cli(&srv, &st, "tenant add legacy"));
	assert_int_equal(st, 0);
	char *dir = xasprintf("%s/tenants/legacy/workspace", srv.dir);
	assert_int_equal(it_sh_quiet("mkdir -p '%s' && echo old > '%s/old.txt'", dir, dir), 0);
	char *tok = it_token(&srv, "legacy", NULL);
	struct it_resp w;
	assert_int_equal(it_http(&srv, "GET", "/fs/exists?path=old.txt", tok, NULL, NULL, 0, &w), 0);
	it_expect_error(&w, 503, "backend_unavailable");
	assert_non_null(strstr(w.body, "from before disk-quota=image"));
	it_resp_free(&w);
	expect_file("legacy", "old.txt", "old\n");
	char *ws = ws_of("legacy");
	assert_int_equal(srv_mounts_of(ws), 0);
	free(ws);
	free(dir);
	free(tok);
}

/* The loop device behind tenant's workspace in the server's mount
 * namespace ("loop3"), or "" (none). */
static void server_loop_of(const char *tenant, char *out, size_t outsz)
{
	char *mif = xasprintf("/proc/%d/mountinfo", (int)srv.pid), *ws = ws_of(tenant);
	char *mi = it_read_file(mif, NULL);
	const char *line = mi ? strstr(mi, ws) : NULL, *dev = line ? strstr(line, " - ext4 /dev/") : NULL;
	out[0] = '\0';
	if (dev)
		snprintf(out, outsz, "%.*s", (int)strcspn(dev + 13, " \n"), dev + 13);
	free(mi);
	free(ws);
	free(mif);
}

/* Whether /dev/<loop> is still attached to img (its sysfs backing file). */
static bool loop_backs(const char *loop, const char *img)
{
	char *path = xasprintf("/sys/block/%s/loop/backing_file", loop);
	char *back = it_read_file(path, NULL);
	bool busy = back && strncmp(back, img, strlen(img)) == 0;
	free(back);
	free(path);
	return busy;
}

/* What an earlier version left on the host (it mounted in the host's
 * namespace, and a crash kept the mount) is unmounted at the next start,
 * and the image mounted again in the server's own namespace, files kept;
 * another data directory's image mount, of the same shape, is not
 * touched. */
static void test_start_sweeps_old_host_mounts(void **state)
{
	(void)state;
	snprintf(decoy, sizeof decoy, "/tmp/sandboxd-decoy-XXXXXX");
	assert_non_null(mkdtemp(decoy));
	char *dimg = xasprintf("%s/tenants/acme/disk.img", decoy),
	     *dws = xasprintf("%s/tenants/acme/workspace", decoy);
	assert_int_equal(it_sh_quiet("mkdir -p '%s' && truncate -s 8M '%s' && mkfs.ext4 -q -F '%s' && "
				     "mount -o loop,nodev,nosuid '%s' '%s'",
				     dws, dimg, dimg, dimg, dws),
			 0);
	char *ws = ws_of("acme"), *img = xasprintf("%s/tenants/acme/disk.img", srv.dir);
	assert_true(srv.pid <= 0 || it_stop(&srv, SIGTERM) == 0);
	ws[strlen(ws) - 1] = '\0'; /* ws_of ends in a space, for mountinfo */
	assert_int_equal(it_sh("mount -o loop,nodev,nosuid '%s' '%s'", img, ws), 0);
	assert_int_equal(mounts_of(ws), 1);
	assert_int_equal(it_restart(&srv, extra), 0);
	assert_int_equal(mounts_of(srv.dir), 0);
	expect_file("acme", "mine.txt", "hi\n");
	char *log = it_read_file(srv.log, NULL);
	assert_non_null(strstr(log, "unmounted 1 disk images an earlier run of this data directory left"));
	free(log);
	assert_int_equal(mounts_of(dws), 1);
	assert_int_equal(it_sh("umount '%s' && rm -rf '%s'", dws, decoy), 0);
	decoy[0] = '\0';
	free(ws);
	free(img);
	free(dws);
	free(dimg);
}

/* A crash (SIGKILL) releases the images: the server's mounts live in a
 * mount namespace of its own, which the kernel tears down with its last
 * process, and the autoclear loop devices go with them. Nothing of the
 * data directory is left in the host's mount table. Then a restart
 * mounts the image again, files kept. */
static void test_crash_releases_mounts(void **state)
{
	(void)state;
	json_t *r = ex_run(&srv, tok_a, "echo kept > /workspace/crash.txt && echo wrote");
	assert_string_equal(ex_stdout_ok(r), "wrote\n");
	json_decref(r);
	char loop[32], img[300];
	snprintf(img, sizeof img, "%s/tenants/acme/disk.img", srv.dir);
	server_loop_of("acme", loop, sizeof loop);
	assert_true(loop[0] != '\0');
	assert_true(loop_backs(loop, img));
	assert_int_equal(it_stop(&srv, SIGKILL), 128 + SIGKILL);
	long until = it_now_ms() + 15000;
	while ((mounts_of(srv.dir) != 0 || loop_backs(loop, img) || loops_of(img) != 0) &&
	       it_now_ms() < until)
		usleep(50000);
	if (mounts_of(srv.dir) != 0)
		it_sh("grep -F '%s' /proc/self/mountinfo >&2", srv.dir);
	assert_int_equal(mounts_of(srv.dir), 0);
	assert_false(loop_backs(loop, img));
	assert_int_equal(loops_of(img), 0);
	assert_int_equal(it_restart(&srv, extra), 0);
	r = ex_run(&srv, tok_a, "cat /workspace/crash.txt");
	assert_string_equal(ex_stdout_ok(r), "kept\n");
	json_decref(r);
}

int main(void)
{
	if (geteuid() != 0 || access("/dev/loop-control", F_OK) != 0 ||
	    it_sh_quiet("command -v mkfs.ext4") != 0) {
		fprintf(stderr, "test_disk_image: needs root, loop devices and mkfs.ext4; skipped\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reports_image_mode),
	    cmocka_unit_test(test_sandbox_sees_the_mount),
	    cmocka_unit_test(test_image_stops_only_its_tenant),
	    cmocka_unit_test(test_restarts_keep_files_without_stacking),
	    cmocka_unit_test(test_quota_grows_and_refuses_shrink),
	    cmocka_unit_test(test_tenant_remove_releases_the_loop),
	    cmocka_unit_test(test_readded_keeps_its_image),
	    cmocka_unit_test(test_existing_files_are_not_hidden),
	    cmocka_unit_test(test_start_sweeps_old_host_mounts),
	    cmocka_unit_test(test_crash_releases_mounts),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
