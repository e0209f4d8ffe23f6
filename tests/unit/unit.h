#pragma once
/* What several unit-test folders share: a temp directory made and removed,
 * and the cmocka entry of a test that runs between the file's own setup
 * and teardown. Include after <cmocka.h>. Header-only (static inline) so
 * that each test executable stays one .c file. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* A test that runs with the file's setup() and teardown(). */
#define UNIT_TEST_FX(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

/* Make a fresh directory /tmp/sbx-<tag>-XXXXXX into dir. 0, or -1. */
static inline int unit_tmpdir(char *dir, size_t n, const char *tag)
{
	snprintf(dir, n, "/tmp/sbx-%s-XXXXXX", tag);
	return mkdtemp(dir) ? 0 : -1;
}

static inline int unit_rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

/* rm -rf p, without following symlinks. 0, or -1 when something stayed. */
static inline int unit_rm_rf(const char *p)
{
	return nftw(p, unit_rm_cb, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}
