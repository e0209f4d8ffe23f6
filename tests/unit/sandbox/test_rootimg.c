/* sandbox/rootimg: names, and what makes an image usable or not, on a
 * hand-made image directory (building and importing for real, and running
 * commands on an image: tests/integration/test_images.c). Ownership is
 * checked only as root. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/rootimg.h"
#include "unit.h"

static char dir[64];
static char path[256];

static const char *at(const char *rel)
{
	snprintf(path, sizeof path, "%s/img/%s", dir, rel);
	return path;
}

static int setup(void **state)
{
	(void)state;
	if (unit_tmpdir(dir, sizeof dir, "rootimg") < 0)
		return -1;
	chmod(dir, 0755);
	/* a merged-/usr image whose /bin/sh is an absolute link, as Debian's */
	const char *dirs[] = {"", "rootfs", "rootfs/usr", "rootfs/usr/bin"};
	for (size_t i = 0; i < 4; i++)
		if (mkdir(at(dirs[i]), 0755) < 0 && errno != EEXIST)
			return -1;
	FILE *f = fopen(at("rootfs/usr/bin/dash"), "w");
	if (!f)
		return -1;
	fclose(f);
	if (symlink("usr/bin", at("rootfs/bin")) < 0 || symlink("/bin/dash", at("rootfs/usr/bin/sh")) < 0)
		return -1;
	f = fopen(at("manifest.json"), "w");
	if (!f)
		return -1;
	fputs("{\"name\": \"img\", \"packages\": []}\n", f);
	fclose(f);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return unit_rm_rf(dir);
}

static void test_names(void **state)
{
	(void)state;
	assert_true(sbx_rootimg_name_ok("py3.11-numpy_1"));
	assert_false(sbx_rootimg_name_ok(""));
	assert_false(sbx_rootimg_name_ok("none")); /* the host's /usr */
	assert_false(sbx_rootimg_name_ok(".tmp-x"));
	assert_false(sbx_rootimg_name_ok("../etc"));
	assert_false(sbx_rootimg_name_ok("Py"));
	assert_false(sbx_rootimg_name_ok("a/b"));
	char long_name[80];
	memset(long_name, 'a', sizeof long_name - 1);
	long_name[sizeof long_name - 1] = '\0';
	assert_false(sbx_rootimg_name_ok(long_name));
	assert_true(sbx_rootimg_list_has("a,bb,c", "bb"));
	assert_false(sbx_rootimg_list_has("a,bb,c", "b"));
	assert_false(sbx_rootimg_list_has(NULL, "a"));
}

static void test_usable_and_held(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip(); /* an image must be root's: as anyone else nothing is usable */
	struct sbx_rootimg_ref *ref = NULL;
	char err[200];
	assert_int_equal(sbx_rootimg_open(dir, "img", &ref, err, sizeof err), 0);
	assert_string_equal(sbx_rootimg_rootfs(ref), at("rootfs"));
	/* listed, busy while held, and not removable */
	struct sbx_rootimg_info *v = NULL;
	size_t n = 0;
	assert_int_equal(sbx_rootimg_list(dir, &v, &n), 0);
	assert_int_equal(n, 1);
	assert_true(v[0].usable);
	assert_true(v[0].busy);
	assert_non_null(v[0].manifest);
	sbx_rootimg_infos_free(v, n);
	assert_int_equal(sbx_rootimg_remove(dir, "img", err, sizeof err), -EBUSY);
	sbx_rootimg_close(&ref);
	assert_null(ref);
	assert_int_equal(sbx_rootimg_open(dir, "ghost", &ref, err, sizeof err), -ENOENT);
	assert_int_equal(sbx_rootimg_open(dir, "../x", &ref, err, sizeof err), -EINVAL);
}

/* rel made a symlink to target: open refuses it, naming rel (want_err),
 * or accepts it (want_err 0); then rel is removed again. */
static void link_case(const char *rel, const char *target, int want_err)
{
	struct sbx_rootimg_ref *ref = NULL;
	char err[200] = "";
	assert_int_equal(symlink(target, at(rel)), 0);
	int rc = sbx_rootimg_open(dir, "img", &ref, err, sizeof err);
	if (rc != want_err)
		fprintf(stderr, "%s -> %s: %d %s\n", rel, target, rc, err);
	assert_int_equal(rc, want_err);
	if (want_err)
		assert_non_null(strstr(err, rel + strlen("rootfs/")));
	sbx_rootimg_close(&ref);
	assert_int_equal(unlink(at(rel)), 0);
}

/* What the server binds is never a symlink, which bwrap would follow on
 * the host: etc and its bound entries, and bin, sbin, lib* other than
 * links into /usr (made again inside the sandbox). */
static void test_links_refused(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	link_case("rootfs/etc", "/etc", -ENOEXEC);
	link_case("rootfs/lib32", "/usr/lib", 0);
	link_case("rootfs/lib32", "usr/../../lib", -ENOEXEC);
	link_case("rootfs/sbin", "/sbin", -ENOEXEC);
	assert_int_equal(mkdir(at("rootfs/etc"), 0755), 0);
	link_case("rootfs/etc/alternatives", "/etc/alternatives", -ENOEXEC);
	link_case("rootfs/etc/ld.so.cache", "/etc/ld.so.cache", -ENOEXEC);
	/* and the system it opens is the image's own, by fd */
	int root = open(at("rootfs"), O_PATH | O_DIRECTORY);
	assert_true(root >= 0);
	struct sbx_rootimg_sys sys;
	char err[200];
	assert_int_equal(sbx_rootimg_sys_open(root, &sys, err, sizeof err), 0);
	assert_true(sys.fd[0] >= 0); /* usr */
	assert_string_equal(sys.link[1], "usr/bin");
	assert_int_equal(sys.fd[1], -1);
	assert_int_equal(sys.fd[SBX_ROOTIMG_SYS_N - 1], -1); /* no alternatives */
	sbx_rootimg_sys_close(&sys);
	close(root);
	assert_int_equal(rmdir(at("rootfs/etc")), 0);
}

static void test_unusable(void **state)
{
	(void)state;
	struct sbx_rootimg_ref *ref = NULL;
	char err[200];
	if (geteuid() != 0)
		skip();
	/* writable by others: anyone could change what commands run */
	chmod(at("rootfs/usr"), 0775);
	assert_int_equal(sbx_rootimg_open(dir, "img", &ref, err, sizeof err), -EPERM);
	assert_non_null(strstr(err, "rootfs/usr"));
	chmod(at("rootfs/usr"), 0755);
	/* no shell inside: the absolute link resolves in the image, not on the host */
	unlink(at("rootfs/usr/bin/dash"));
	assert_int_equal(sbx_rootimg_open(dir, "img", &ref, err, sizeof err), -ENOEXEC);
	assert_non_null(strstr(err, "/bin/sh"));
	/* a /usr that is a link (to the host's) is not a directory of the image */
	char from[256];
	snprintf(from, sizeof from, "%s", at("rootfs/usr"));
	assert_int_equal(rename(from, at("rootfs/usr.real")), 0);
	assert_int_equal(symlink("/usr", at("rootfs/usr")), 0);
	assert_int_equal(sbx_rootimg_open(dir, "img", &ref, err, sizeof err), -ENOEXEC);
	struct sbx_rootimg_info *v = NULL;
	size_t n = 0;
	assert_int_equal(sbx_rootimg_list(dir, &v, &n), 0);
	assert_false(v[0].usable);
	assert_false(v[0].busy);
	sbx_rootimg_infos_free(v, n);
	/* removal takes it away whole, links not followed */
	assert_int_equal(sbx_rootimg_remove(dir, "img", err, sizeof err), 0);
	struct stat st;
	assert_int_not_equal(lstat(at(""), &st), 0);
	assert_int_equal(stat("/usr/bin", &st), 0);
}

/* A host whose VERSION_CODENAME does not fit the suite's buffer: the
 * build refuses it first (before the bad image name it is given, so that
 * a cut name would fail fast on that name, never run mmdebstrap).
 * /etc/os-release is replaced in a mount namespace of a child's own. */
static void test_codename_too_long_is_refused(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	char fake[256];
	snprintf(fake, sizeof fake, "%s/os-release", dir);
	FILE *f = fopen(fake, "w");
	assert_non_null(f);
	fprintf(f, "ID=debian\nVERSION_CODENAME=%070d\n", 0);
	fclose(f);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount(fake, "/etc/os-release", NULL, MS_BIND, NULL) < 0)
			_exit(77);
		char err[200] = "";
		int rc = sbx_rootimg_build(dir, "Bad/Name", NULL, NULL, err, sizeof err);
		fprintf(stderr, "build: %d %s\n", rc, err);
		_exit(rc == -EINVAL && strstr(err, "VERSION_CODENAME") ? 0 : 1);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		skip();
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_usable_and_held),
	    cmocka_unit_test(test_links_refused),
	    cmocka_unit_test(test_unusable),
	    cmocka_unit_test(test_codename_too_long_is_refused),
	};
	return cmocka_run_group_tests_name("rootimg", tests, setup, teardown);
}
