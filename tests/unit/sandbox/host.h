#pragma once
/* The workspace fixture of the sandbox tests that attack it (fsops,
 * workspace), and the host-side helpers that plant and check files behind
 * its back. Include after <cmocka.h>. */
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/workspace.h"
#include "unit.h"

#define TEST_UID 4242
#define TEST_GID 4343
#define SECRET "TOP SECRET\n" /* top/out/secret */

/* top/ is a fresh temp dir; top/ws the workspace, opened; top/out a host
 * directory the workspace must never reach, holding "secret" and sub/. */
struct host_ws {
	char top[64];
	char wsdir[96];
	char out[96];
	struct sbx_workspace *ws;
};

static inline bool am_root(void)
{
	return geteuid() == 0;
}

static inline void hpath(char *dst, size_t n, const char *base, const char *rel)
{
	snprintf(dst, n, "%s/%s", base, rel);
}

static inline bool host_exists(const char *base, const char *rel)
{
	char p[512];
	struct stat st;

	hpath(p, sizeof p, base, rel);
	return lstat(p, &st) == 0;
}

static inline void host_write(const char *base, const char *rel, const char *s)
{
	char p[512];
	FILE *f;

	hpath(p, sizeof p, base, rel);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(s, f);
	assert_int_equal(fclose(f), 0);
}

static inline void host_mkdir(const char *base, const char *rel)
{
	char p[512];

	hpath(p, sizeof p, base, rel);
	assert_int_equal(mkdir(p, 0755), 0);
}

static inline void host_symlink(const char *base, const char *target, const char *rel)
{
	char p[512];

	hpath(p, sizeof p, base, rel);
	assert_int_equal(symlink(target, p), 0);
}

/* st is a 0755 directory, owned by TEST_UID:TEST_GID when the tests run
 * as root (only then can the workspace give it away). */
static inline void expect_ws_dir(const struct stat *st)
{
	assert_true(S_ISDIR(st->st_mode));
	assert_int_equal(st->st_mode & 07777, 0755);
	if (am_root()) {
		assert_int_equal(st->st_uid, TEST_UID);
		assert_int_equal(st->st_gid, TEST_GID);
	}
}

/* base/rel on the host is such a directory. */
static inline void host_expect_dir(const char *base, const char *rel)
{
	char p[512];
	struct stat st;

	hpath(p, sizeof p, base, rel);
	assert_int_equal(stat(p, &st), 0);
	expect_ws_dir(&st);
}

/* The number a shell command prints (find ... | wc -l), or -1. */
static inline int host_count(const char *cmd)
{
	FILE *p = popen(cmd, "r");
	int n = -1;

	if (p) {
		if (fscanf(p, "%d", &n) != 1)
			n = -1;
		pclose(p);
	}
	return n;
}

/* Lay out h under /tmp/sbx-<tag>-XXXXXX and open its workspace. */
static inline void host_ws_open(struct host_ws *h, const char *tag)
{
	struct sbx_owner own = {TEST_UID, TEST_GID, am_root()};

	assert_int_equal(unit_tmpdir(h->top, sizeof h->top, tag), 0);
	snprintf(h->wsdir, sizeof h->wsdir, "%s/ws", h->top);
	snprintf(h->out, sizeof h->out, "%s/out", h->top);
	assert_int_equal(mkdir(h->out, 0755), 0);
	host_write(h->out, "secret", SECRET);
	host_mkdir(h->out, "sub");
	assert_int_equal(sbx_workspace_open(&h->ws, h->wsdir, &own), 0);
}

static inline void host_ws_close(struct host_ws *h)
{
	sbx_workspace_free(&h->ws);
	assert_null(h->ws);
	unit_rm_rf(h->top);
}
