/* Unit tests of sandbox/workspace.c: session segments, lexical path
 * normalisation, confined opens, parent resolution, mkdir and the session
 * directory memo. Hostile symlinks are planted in a temp workspace and
 * checked from the host side. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/errors.h"
#include "sandbox/workspace.h"
#include "host.h"

static int count_entries(const char *dir)
{
	char cmd[600];

	snprintf(cmd, sizeof cmd, "find '%s' | wc -l", dir);
	return host_count(cmd);
}

static int setup(void **state)
{
	struct host_ws *fx = calloc(1, sizeof *fx);

	host_ws_open(fx, "ws");
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct host_ws *fx = *state;

	host_ws_close(fx);
	free(fx);
	return 0;
}

static void t_djb2(void **state)
{
	(void)state;
	assert_true(sbx_djb2_64("", 0) == 5381);
	assert_true(sbx_djb2_64("a", 1) == 5381ULL * 33 + 'a');
	/* Wraps modulo 2^64 rather than overflowing into UB. */
	char big[4096];
	memset(big, 0xff, sizeof big);
	(void)sbx_djb2_64(big, sizeof big);
}

/* The segment of key (len bytes) with salt is want. */
static void expect_segment(const char *key, size_t len, unsigned salt, const char *want)
{
	char seg[SBX_SEGMENT_MAX];

	sbx_session_segment(key, len, salt, seg);
	assert_string_equal(seg, want);
}

static void t_segment_vector(void **state)
{
	char seg[SBX_SEGMENT_MAX];

	(void)state;
	expect_segment("chat:42", 7, 0, "chat_42-29c5c2leqt");
	sbx_session_segment("default", 7, 0, seg);
	assert_true(strncmp(seg, "default-", 8) == 0);
}

static void t_segment_nonascii(void **state)
{
	static const char key[] = "\xc3\xa9t\xc3\xa9 x/y";

	(void)state;
	expect_segment(key, sizeof key - 1, 0, "__t___x_y-1wdtc0omsbip");
}

static void t_segment_long(void **state)
{
	char key[512], seg[SBX_SEGMENT_MAX], want[SBX_SEGMENT_MAX];

	(void)state;
	memset(key, 'a', sizeof key);
	sbx_session_segment(key, sizeof key, 0, seg);
	memset(want, 'a', 32);
	snprintf(want + 32, sizeof want - 32, "-vspnrmocmcxx");
	assert_string_equal(seg, want);

	/* Every byte value twice, NUL included: the prefix is the first 32
	 * bytes, all replaced; the hash covers all 512 bytes. */
	for (size_t i = 0; i < sizeof key; i++)
		key[i] = (char)(i & 0xff);
	sbx_session_segment(key, sizeof key, 0, seg);
	memset(want, '_', 32);
	snprintf(want + 32, sizeof want - 32, "-2phrp4lldmo05");
	assert_string_equal(seg, want);

	/* Longest possible: 32 + '-' + 13 digits + "-4294967295". */
	memset(key, 'z', sizeof key);
	sbx_session_segment(key, sizeof key, UINT_MAX, seg);
	assert_true(strlen(seg) < SBX_SEGMENT_MAX);
	assert_non_null(strstr(seg, "-4294967295"));
}

static void t_segment_salt(void **state)
{
	char seg2[SBX_SEGMENT_MAX];

	(void)state;
	expect_segment("chat:42", 7, 3, "chat_42-29c5c2leqt-3");
	expect_segment("chat:42", 7, 0, "chat_42-29c5c2leqt");
	/* Distinct keys with the same readable prefix get distinct segments. */
	sbx_session_segment("chat/42", 7, 0, seg2);
	assert_string_not_equal("chat_42-29c5c2leqt", seg2);
	assert_true(strncmp(seg2, "chat_42-", 8) == 0);
}

/* ---- normalisation ---- */

struct norm_case {
	const char *wire;
	const char *session;
	int rc;
	const char *want;
};

static void t_normalize(void **state)
{
	static const struct norm_case cases[] = {
	    {"notes.txt", "sessions/s1", 0, "sessions/s1/notes.txt"},
	    {"a/b", "sessions/s1", 0, "sessions/s1/a/b"},
	    {".", "sessions/s1", 0, "sessions/s1"},
	    {"./a/./b/", "sessions/s1", 0, "sessions/s1/a/b"},
	    {"a//b", "sessions/s1", 0, "sessions/s1/a/b"},
	    {"../x", "sessions/s1", 0, "sessions/x"},
	    {"../../x", "sessions/s1", 0, "x"},
	    {"a/../..", "sessions/s1", 0, "sessions"},
	    {"../..", "sessions/s1", 0, ""},
	    {"../../../x", "sessions/s1", -EXDEV, NULL},
	    {"..", "", -EXDEV, NULL},
	    {"x", "", 0, "x"},
	    {"/workspace", "sessions/s1", 0, ""},
	    {"/workspace/", "sessions/s1", 0, ""},
	    {"/workspace/a//b/./c/", "sessions/s1", 0, "a/b/c"},
	    {"//workspace//a", "sessions/s1", 0, "a"},
	    {"/workspace/a/../b", "sessions/s1", 0, "b"},
	    {"/workspace/..", "sessions/s1", -EXDEV, NULL},
	    {"/workspace/a/../../b", "sessions/s1", -EXDEV, NULL},
	    {"/workspace/../workspace/a", "sessions/s1", -EXDEV, NULL},
	    {"/workspacex", "sessions/s1", -EXDEV, NULL},
	    {"/workspacex/a", "sessions/s1", -EXDEV, NULL},
	    {"/workspac", "sessions/s1", -EXDEV, NULL},
	    {"/etc/passwd", "sessions/s1", -EXDEV, NULL},
	    {"/", "sessions/s1", -EXDEV, NULL},
	    {"/./workspace", "sessions/s1", -EXDEV, NULL},
	    {"\xc3\xa9\\x y", "sessions/s1", 0, "sessions/s1/\xc3\xa9\\x y"},
	};
	char out[SBX_PATH_MAX + 1];

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct norm_case *c = &cases[i];
		int r = sbx_path_normalize(c->wire, strlen(c->wire), c->session, out, sizeof out);
		if (r != c->rc)
			fail_msg("case %zu \"%s\": rc %d, want %d", i, c->wire, r, c->rc);
		if (c->want)
			assert_string_equal(out, c->want);
	}
}

static void t_normalize_invalid(void **state)
{
	char out[SBX_PATH_MAX + 1], wire[SBX_PATH_MAX + 64];

	(void)state;
	assert_int_equal(sbx_path_normalize("", 0, "sessions/s", out, sizeof out), -EINVAL);
	assert_int_equal(sbx_path_normalize("a\0b", 3, "sessions/s", out, sizeof out), -EINVAL);
	assert_int_equal(sbx_path_normalize("/workspace/a\0", 13, "", out, sizeof out), -EINVAL);
	/* NUL first, then an escape: still refused as a bad string. */
	assert_int_equal(sbx_path_normalize("\0/../..", 7, "", out, sizeof out), -EINVAL);

	/* Component of 255 bytes passes, 256 does not. */
	memset(wire, 'n', 255);
	assert_int_equal(sbx_path_normalize(wire, 255, "", out, sizeof out), 0);
	assert_int_equal(strlen(out), 255);
	memset(wire, 'n', 256);
	assert_int_equal(sbx_path_normalize(wire, 256, "", out, sizeof out), -EINVAL);
	/* ... even when ".." would remove it again. */
	memcpy(wire + 256, "/..", 3);
	assert_int_equal(sbx_path_normalize(wire, 259, "", out, sizeof out), -EINVAL);

	/* Total length: 4096 bytes of wire are accepted, 4097 are not. */
	for (size_t i = 0; i < SBX_PATH_MAX + 1; i++)
		wire[i] = (i % 100 == 99) ? '/' : 'p';
	assert_int_equal(sbx_path_normalize(wire, SBX_PATH_MAX, "", out, sizeof out), 0);
	assert_int_equal(sbx_path_normalize(wire, SBX_PATH_MAX + 1, "", out, sizeof out), -EINVAL);
	/* Joined with the session it becomes too long. */
	assert_int_equal(sbx_path_normalize(wire, SBX_PATH_MAX - 2, "sessions/s1", out, sizeof out), -EINVAL);

	/* Output buffer too small. */
	char small[4];
	assert_int_equal(sbx_path_normalize("abcd", 4, "", small, sizeof small), -EINVAL);
	assert_int_equal(sbx_path_normalize("abc", 3, "", small, sizeof small), 0);
	assert_string_equal(small, "abc");
}

static void t_path_wire(void **state)
{
	char out[64];

	(void)state;
	sbx_path_wire("", out, sizeof out);
	assert_string_equal(out, "/workspace");
	sbx_path_wire("sessions/x/a.txt", out, sizeof out);
	assert_string_equal(out, "/workspace/sessions/x/a.txt");
	sbx_path_wire("abcdefghijklmnopqrstuvwxyz", out, 12);
	assert_string_equal(out, "/workspace/");
}

/* ---- workspace ---- */

static void t_workspace_open(void **state)
{
	struct host_ws *fx = *state;
	struct sbx_workspace *ws = NULL, *keep = (struct sbx_workspace *)0x1;
	struct sbx_owner own = {TEST_UID, TEST_GID, am_root()};
	char deep[256], file[256];
	struct stat st;

	snprintf(deep, sizeof deep, "%s/a/b/c/ws", fx->top);
	assert_int_equal(sbx_workspace_open(&ws, deep, &own), 0);
	assert_string_equal(sbx_workspace_host_dir(ws), deep);
	/* the root is the owner's alone (directories below it are 0755) */
	assert_int_equal(fstat(sbx_workspace_dirfd(ws), &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);
	if (am_root())
		assert_int_equal(st.st_uid, TEST_UID);
	/* O_PATH: not readable through this fd. */
	char c;
	assert_true(read(sbx_workspace_dirfd(ws), &c, 1) < 0);
	assert_int_equal(sbx_workspace_owner(ws)->uid, TEST_UID);
	sbx_workspace_free(&ws);
	assert_null(ws);
	sbx_workspace_free(&ws);
	sbx_workspace_free(NULL);
	/* one an older server left 0755 is tightened when opened */
	assert_int_equal(chmod(deep, 0755), 0);
	assert_int_equal(sbx_workspace_open(&ws, deep, &own), 0);
	assert_int_equal(stat(deep, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	sbx_workspace_free(&ws);

	/* A file where the directory should be: error, *out untouched. */
	host_write(fx->top, "afile", "x");
	snprintf(file, sizeof file, "%s/afile", fx->top);
	assert_true(sbx_workspace_open(&keep, file, &own) < 0);
	assert_ptr_equal(keep, (struct sbx_workspace *)0x1);
}

static void t_openat_escapes(void **state)
{
	struct host_ws *fx = *state;
	int fd;

	host_mkdir(fx->wsdir, "d");
	host_write(fx->wsdir, "d/f.txt", "inside");
	host_symlink(fx->wsdir, fx->out, "abs");
	host_symlink(fx->wsdir, "../out", "rel");
	host_symlink(fx->wsdir, "../../out", "d/rel2");
	host_symlink(fx->wsdir, "../out/secret", "rel_secret");
	host_symlink(fx->wsdir, "/proc/self/root", "magic");
	host_symlink(fx->wsdir, "d", "in");
	host_symlink(fx->wsdir, "../d/f.txt", "in_file"); /* from ws/: leaves it */
	host_symlink(fx->wsdir, "d/../d/f.txt", "in_file2");

	assert_int_equal(sbx_ws_openat(fx->ws, "abs/secret", O_RDONLY, 0), -EXDEV);
	assert_int_equal(sbx_ws_openat(fx->ws, "abs", O_PATH, 0), -EXDEV);
	assert_int_equal(sbx_ws_openat(fx->ws, "rel/secret", O_RDONLY, 0), -EXDEV);
	assert_int_equal(sbx_ws_openat(fx->ws, "d/rel2/secret", O_RDONLY, 0), -EXDEV);
	assert_int_equal(sbx_ws_openat(fx->ws, "rel_secret", O_RDONLY, 0), -EXDEV);
	assert_int_equal(sbx_ws_openat(fx->ws, "magic/etc", O_PATH, 0), -EXDEV);
	assert_int_equal(sbx_ws_openat(fx->ws, "in_file", O_RDONLY, 0), -EXDEV);
	assert_int_equal(sbx_ws_openat(fx->ws, "../out/secret", O_RDONLY, 0), -EXDEV);
	assert_int_equal(sbx_ws_openat(fx->ws, "/etc/passwd", O_RDONLY, 0), -EXDEV);
	/* Creating through an escaping link creates nothing outside. */
	assert_int_equal(sbx_ws_openat(fx->ws, "abs/planted", O_CREAT | O_WRONLY, 0644), -EXDEV);
	assert_int_equal(sbx_ws_openat(fx->ws, "rel/planted", O_CREAT | O_WRONLY, 0644), -EXDEV);
	assert_false(host_exists(fx->out, "planted"));

	/* Links that stay inside are followed. */
	fd = sbx_ws_openat(fx->ws, "in/f.txt", O_RDONLY, 0);
	assert_true(fd >= 0);
	close(fd);
	fd = sbx_ws_openat(fx->ws, "in_file2", O_RDONLY, 0);
	assert_true(fd >= 0);
	close(fd);
	fd = sbx_ws_openat(fx->ws, "", O_RDONLY | O_DIRECTORY, 0);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(sbx_ws_openat(fx->ws, "nothere", O_RDONLY, 0), -ENOENT);

	/* Child opens never follow, even inside. */
	int dfd = sbx_ws_openat(fx->ws, "", O_RDONLY | O_DIRECTORY, 0);
	assert_true(dfd >= 0);
	/* O_NOFOLLOW|O_DIRECTORY on a link: the kernel says ENOTDIR. */
	assert_int_equal(sbx_ws_open_child(dfd, "in", O_RDONLY | O_DIRECTORY, 0), -ENOTDIR);
	assert_int_equal(sbx_ws_open_child(dfd, "abs", O_RDONLY | O_DIRECTORY, 0), -ENOTDIR);
	assert_int_equal(sbx_ws_open_child(dfd, "rel_secret", O_RDONLY, 0), -ELOOP);
	fd = sbx_ws_open_child(dfd, "d", O_RDONLY | O_DIRECTORY, 0);
	assert_true(fd >= 0);
	close(fd);
	close(dfd);
}

static void t_open_parent(void **state)
{
	struct host_ws *fx = *state;
	const char *leaf = NULL;
	int dfd = -1;
	struct stat st;

	assert_int_equal(sbx_ws_open_parent(fx->ws, "", false, &dfd, &leaf), -EINVAL);
	assert_int_equal(sbx_ws_open_parent(fx->ws, "a/..", false, &dfd, &leaf), -EINVAL);

	assert_int_equal(sbx_ws_open_parent(fx->ws, "top.txt", false, &dfd, &leaf), 0);
	assert_string_equal(leaf, "top.txt");
	assert_int_equal(fstat(dfd, &st), 0);
	close(dfd);

	assert_int_equal(sbx_ws_open_parent(fx->ws, "x/y/z.txt", false, &dfd, &leaf), -SBX_E_PARENT_MISSING);
	assert_false(host_exists(fx->wsdir, "x"));
	assert_int_equal(sbx_ws_open_parent(fx->ws, "x/y/z.txt", true, &dfd, &leaf), 0);
	assert_string_equal(leaf, "z.txt");
	close(dfd);
	host_expect_dir(fx->wsdir, "x/y");
	assert_false(host_exists(fx->wsdir, "x/y/z.txt"));

	host_write(fx->wsdir, "file", "x");
	assert_int_equal(sbx_ws_open_parent(fx->ws, "file/a", false, &dfd, &leaf), -ENOTDIR);
	assert_int_equal(sbx_ws_open_parent(fx->ws, "file/a/b", true, &dfd, &leaf), -ENOTDIR);

	/* Through escaping links: refused, nothing made outside. */
	host_symlink(fx->wsdir, fx->out, "abs");
	host_symlink(fx->wsdir, "../out", "rel");
	host_symlink(fx->wsdir, "/nonexistent-sbx-dir", "absdangle");
	assert_int_equal(sbx_ws_open_parent(fx->ws, "abs/f", false, &dfd, &leaf), -EXDEV);
	assert_int_equal(sbx_ws_open_parent(fx->ws, "abs/new/f", true, &dfd, &leaf), -EXDEV);
	assert_int_equal(sbx_ws_open_parent(fx->ws, "rel/new/deeper/f", true, &dfd, &leaf), -EXDEV);
	assert_int_equal(sbx_ws_open_parent(fx->ws, "absdangle/new/f", true, &dfd, &leaf), -EXDEV);
	assert_false(host_exists(fx->out, "new"));
	assert_false(host_exists("/", "nonexistent-sbx-dir"));
	assert_int_equal(count_entries(fx->out), 3);
}

static void t_ws_mkdir(void **state)
{
	struct host_ws *fx = *state;

	assert_int_equal(sbx_ws_mkdir(fx->ws, "", true), 0);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "", false), -EEXIST);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "a", false), 0);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "a", false), -EEXIST);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "a", true), 0);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "b/c", false), -SBX_E_PARENT_MISSING);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "b/c/d", true), 0);
	assert_true(host_exists(fx->wsdir, "b/c/d"));
	host_write(fx->wsdir, "f", "x");
	assert_int_equal(sbx_ws_mkdir(fx->ws, "f", true), -EEXIST);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "f/g", true), -ENOTDIR);
	/* A dangling link in the way is not followed to create its target. */
	host_symlink(fx->wsdir, "target-not-there", "dangle");
	assert_int_equal(sbx_ws_mkdir(fx->ws, "dangle", true), -EEXIST);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "dangle/x", true), -EEXIST);
	assert_false(host_exists(fx->wsdir, "target-not-there"));
	/* An in-workspace link to a directory counts as the directory. */
	host_symlink(fx->wsdir, "b/c", "inlink");
	assert_int_equal(sbx_ws_mkdir(fx->ws, "inlink", true), 0);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "inlink/e/f", true), 0);
	assert_true(host_exists(fx->wsdir, "b/c/e/f"));
	/* Escaping links. */
	host_symlink(fx->wsdir, fx->out, "abs");
	assert_int_equal(sbx_ws_mkdir(fx->ws, "abs", true), -EXDEV);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "abs", false), -EEXIST);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "abs/sub", true), -EXDEV);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "abs/new", false), -EXDEV);
	assert_int_equal(sbx_ws_mkdir(fx->ws, "abs/new/x", true), -EXDEV);
	assert_false(host_exists(fx->out, "new"));
	assert_int_equal(count_entries(fx->out), 3);
}

/* ---- session directories ---- */

static void t_session_dir(void **state)
{
	struct host_ws *fx = *state;
	char seg[SBX_SEGMENT_MAX], rel[128];
	struct stat st;
	char p[512];

	sbx_session_segment("chat:42", 7, 0, seg);
	assert_int_equal(sbx_session_dir_ensure(fx->ws, seg), 0);
	snprintf(rel, sizeof rel, "sessions/%s", seg);
	hpath(p, sizeof p, fx->wsdir, rel);
	assert_int_equal(stat(p, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	if (am_root())
		assert_int_equal(st.st_uid, TEST_UID);

	/* Memoised: removed behind its back, a second ensure does not look. */
	assert_int_equal(rmdir(p), 0);
	assert_int_equal(sbx_session_dir_ensure(fx->ws, seg), 0);
	assert_false(host_exists(fx->wsdir, rel));
	/* Forgotten: the next ensure creates it again. */
	sbx_session_dir_forget(fx->ws, seg);
	sbx_session_dir_forget(fx->ws, "never-known");
	assert_int_equal(sbx_session_dir_ensure(fx->ws, seg), 0);
	assert_true(host_exists(fx->wsdir, rel));

	/* Bad segments. */
	assert_int_equal(sbx_session_dir_ensure(fx->ws, ""), -EINVAL);
	assert_int_equal(sbx_session_dir_ensure(fx->ws, ".."), -EINVAL);
	assert_int_equal(sbx_session_dir_ensure(fx->ws, "a/b"), -EINVAL);
}

static void t_session_dir_failure_not_memoised(void **state)
{
	struct host_ws *fx = *state;
	char p[512];

	/* "sessions" is a file: ensure fails, and is not remembered. */
	host_write(fx->wsdir, "sessions", "x");
	assert_int_equal(sbx_session_dir_ensure(fx->ws, "s-1"), -ENOTDIR);
	hpath(p, sizeof p, fx->wsdir, "sessions");
	assert_int_equal(unlink(p), 0);
	assert_int_equal(sbx_session_dir_ensure(fx->ws, "s-1"), 0);
	assert_true(host_exists(fx->wsdir, "sessions/s-1"));

	/* "sessions" a link out of the workspace: -EXDEV, nothing outside. */
	hpath(p, sizeof p, fx->wsdir, "sessions/s-1");
	assert_int_equal(rmdir(p), 0);
	hpath(p, sizeof p, fx->wsdir, "sessions");
	assert_int_equal(rmdir(p), 0);
	host_symlink(fx->wsdir, fx->out, "sessions");
	assert_int_equal(sbx_session_dir_ensure(fx->ws, "s-2"), -EXDEV);
	assert_false(host_exists(fx->out, "s-2"));
	assert_int_equal(count_entries(fx->out), 3);
}

struct ensure_arg {
	struct sbx_workspace *ws;
	int base;
	int failures;
};

static void *ensure_thread(void *p)
{
	struct ensure_arg *a = p;
	char seg[SBX_SEGMENT_MAX], key[32];

	for (int i = 0; i < 1500; i++) {
		int n = snprintf(key, sizeof key, "key:%d", (i * 7 + a->base) % 1500);
		sbx_session_segment(key, (size_t)n, 0, seg);
		if (sbx_session_dir_ensure(a->ws, seg) != 0)
			a->failures++;
	}
	return NULL;
}

static void t_session_dir_many_threads(void **state)
{
	struct host_ws *fx = *state;
	struct ensure_arg args[4];
	pthread_t th[4];
	char seg[SBX_SEGMENT_MAX], key[32], rel[128];

	for (int i = 0; i < 4; i++) {
		args[i] = (struct ensure_arg){fx->ws, i * 101, 0};
		assert_int_equal(pthread_create(&th[i], NULL, ensure_thread, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(args[i].failures, 0);
	}
	for (int i = 0; i < 1500; i++) {
		int n = snprintf(key, sizeof key, "key:%d", i);
		sbx_session_segment(key, (size_t)n, 0, seg);
		snprintf(rel, sizeof rel, "sessions/%s", seg);
		assert_true(host_exists(fx->wsdir, rel));
	}
	/* All memoised: with the directories gone, ensure still says 0 ... */
	char p[512];
	hpath(p, sizeof p, fx->wsdir, "sessions");
	unit_rm_rf(p);
	sbx_session_segment("key:77", 6, 0, seg);
	assert_int_equal(sbx_session_dir_ensure(fx->ws, seg), 0);
	assert_false(host_exists(fx->wsdir, "sessions"));
	/* ... until forgotten; the others stay memoised. */
	sbx_session_dir_forget(fx->ws, seg);
	assert_int_equal(sbx_session_dir_ensure(fx->ws, seg), 0);
	snprintf(rel, sizeof rel, "sessions/%s", seg);
	assert_true(host_exists(fx->wsdir, rel));
	sbx_session_segment("key:78", 6, 0, seg);
	assert_int_equal(sbx_session_dir_ensure(fx->ws, seg), 0);
	snprintf(rel, sizeof rel, "sessions/%s", seg);
	assert_false(host_exists(fx->wsdir, rel));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(t_djb2),
	    cmocka_unit_test(t_segment_vector),
	    cmocka_unit_test(t_segment_nonascii),
	    cmocka_unit_test(t_segment_long),
	    cmocka_unit_test(t_segment_salt),
	    cmocka_unit_test(t_normalize),
	    cmocka_unit_test(t_normalize_invalid),
	    cmocka_unit_test(t_path_wire),
	    UNIT_TEST_FX(t_workspace_open),
	    UNIT_TEST_FX(t_openat_escapes),
	    UNIT_TEST_FX(t_open_parent),
	    UNIT_TEST_FX(t_ws_mkdir),
	    UNIT_TEST_FX(t_session_dir),
	    UNIT_TEST_FX(t_session_dir_failure_not_memoised),
	    UNIT_TEST_FX(t_session_dir_many_threads),
	};

	umask(022);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
