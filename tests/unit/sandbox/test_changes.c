/* Unit tests of sandbox/changes.c: created, modified (content, metadata,
 * replacement by rename) and deleted files between two snapshots, no
 * symlink followed or listed, a rewrite within one clock tick, a FIFO never opened, and every bound
 * (files walked, entries listed, bytes hashed) reported as truncated. */
#include <errno.h>
#include <fcntl.h>
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

#include "sandbox/changes.h"
#include "host.h"

/* sha256("hello\n") */
#define SHA_HELLO "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"

static int setup(void **state)
{
	struct host_ws *h = calloc(1, sizeof *h);
	host_ws_open(h, "changes");
	host_mkdir(h->wsdir, "s");
	*state = h;
	return 0;
}

static int teardown(void **state)
{
	struct host_ws *h = *state;
	host_ws_close(h);
	free(h);
	return 0;
}

static const struct sbx_changes_limits wide = {
    .max_files = 1000, .max_reported = 1000, .max_hash_bytes = 1 << 20};

static void diff(struct host_ws *h, struct sbx_snapshot *before, const struct sbx_changes_limits *lim,
		 struct sbx_change **v, size_t *n, bool *truncated)
{
	assert_int_equal(sbx_changes_diff(h->ws, before, lim, v, n, truncated), 0);
}

static void test_kinds(void **state)
{
	struct host_ws *h = *state;
	struct sbx_snapshot *before = NULL;
	struct sbx_change *v = NULL;
	size_t n = 0;
	bool truncated = true;

	host_write(h->wsdir, "s/keep", "same");
	host_write(h->wsdir, "s/edit", "old");
	host_write(h->wsdir, "s/gone", "bye");
	host_write(h->wsdir, "s/swap", "hello\n");
	host_mkdir(h->wsdir, "s/d");
	assert_int_equal(sbx_snapshot_take(h->ws, "s", 1000, &before), 0);
	host_write(h->wsdir, "s/edit", "hello\n");
	char p[512], q[512];
	hpath(p, sizeof p, h->wsdir, "s/gone");
	assert_int_equal(unlink(p), 0);
	/* the same bytes under a new inode */
	host_write(h->wsdir, "s/swap.new", "hello\n");
	hpath(p, sizeof p, h->wsdir, "s/swap.new");
	hpath(q, sizeof q, h->wsdir, "s/swap");
	assert_int_equal(rename(p, q), 0);
	host_write(h->wsdir, "s/d/new", "hello\n");
	host_symlink(h->wsdir, "/etc", "s/link");
	host_symlink(h->wsdir, h->out, "s/d/outlink");
	diff(h, before, &wide, &v, &n, &truncated);
	assert_false(truncated);
	static const struct {
		const char *rel, *kind;
		uint64_t size;
		const char *sha;
	} want[] = {
	    {"s/d/new", "created", 6, SHA_HELLO},
	    {"s/edit", "modified", 6, SHA_HELLO},
	    {"s/gone", "deleted", 3, NULL},
	    {"s/swap", "modified", 6, SHA_HELLO},
	};
	assert_int_equal(n, 4);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(v[i].rel, want[i].rel);
		assert_string_equal(sbx_change_kind_name(v[i].kind), want[i].kind);
		assert_int_equal(v[i].size, want[i].size);
		if (want[i].sha)
			assert_string_equal(v[i].sha256, want[i].sha);
		assert_int_equal(v[i].hashed, v[i].kind != SBX_CHANGE_DELETED);
	}
	sbx_changes_free(v, n);
	sbx_snapshot_free(&before);
	assert_null(before);
}

/* The same size, inode and (coarse) times right after the first walk:
 * the content tells. */
static void test_same_tick_rewrite(void **state)
{
	struct host_ws *h = *state;
	struct sbx_snapshot *before = NULL;
	struct sbx_change *v = NULL;
	size_t n = 0;
	bool truncated = true;

	host_write(h->wsdir, "s/r", "aaaa");
	assert_int_equal(sbx_snapshot_take(h->ws, "s", 1000, &before), 0);
	host_write(h->wsdir, "s/r", "bbbb"); /* in place: same inode, same size */
	diff(h, before, &wide, &v, &n, &truncated);
	assert_int_equal(n, 1);
	assert_string_equal(v[0].rel, "s/r");
	assert_string_equal(sbx_change_kind_name(v[0].kind), "modified");
	sbx_changes_free(v, n);
	sbx_snapshot_free(&before);
}

/* A FIFO is neither listed nor opened (the walk would hang on it). */
static void test_fifo_ignored(void **state)
{
	struct host_ws *h = *state;
	struct sbx_snapshot *before = NULL;
	struct sbx_change *v = NULL;
	size_t n = 0;
	bool truncated = true;
	char p[512];

	assert_int_equal(sbx_snapshot_take(h->ws, "s", 1000, &before), 0);
	hpath(p, sizeof p, h->wsdir, "s/fifo");
	assert_int_equal(mkfifo(p, 0644), 0);
	diff(h, before, &wide, &v, &n, &truncated);
	assert_int_equal(n, 0);
	assert_false(truncated);
	sbx_changes_free(v, n);
	sbx_snapshot_free(&before);
}

/* A tree of links (no regular file at all) is not walked without bound:
 * every entry counts, and the walk says truncated. */
static void test_links_count(void **state)
{
	struct host_ws *h = *state;
	struct sbx_snapshot *before = NULL;
	struct sbx_change *v = NULL;
	size_t n = 0;
	bool truncated = false;
	char p[512];
	const struct sbx_changes_limits small = {
	    .max_files = 10, .max_reported = 10, .max_hash_bytes = 1 << 20};

	host_mkdir(h->wsdir, "s/links");
	for (int i = 0; i < 10 * SBX_CHANGES_ENTRIES_PER_FILE + 5; i++) {
		char name[64];
		snprintf(name, sizeof name, "s/links/l%d", i);
		hpath(p, sizeof p, h->wsdir, name);
		assert_int_equal(symlink("x", p), 0);
	}
	assert_int_equal(sbx_snapshot_take(h->ws, "s", 10, &before), 0);
	diff(h, before, &small, &v, &n, &truncated);
	assert_int_equal(n, 0);
	assert_true(truncated);
	sbx_changes_free(v, n);
	sbx_snapshot_free(&before);
}

static void test_bounds(void **state)
{
	struct host_ws *h = *state;
	struct sbx_snapshot *before = NULL;
	struct sbx_change *v = NULL;
	size_t n = 0;
	bool truncated = false;
	char rel[32];

	assert_int_equal(sbx_snapshot_take(h->ws, "s", 1000, &before), 0);
	for (int i = 0; i < 5; i++) {
		snprintf(rel, sizeof rel, "s/f%d", i);
		host_write(h->wsdir, rel, "hello\n");
	}
	/* listed */
	const struct sbx_changes_limits listed = {
	    .max_files = 1000, .max_reported = 3, .max_hash_bytes = 1 << 20};
	diff(h, before, &listed, &v, &n, &truncated);
	assert_int_equal(n, 3);
	assert_true(truncated);
	sbx_changes_free(v, n);
	/* hashed: 12 bytes are two files' worth */
	const struct sbx_changes_limits hashed = {
	    .max_files = 1000, .max_reported = 100, .max_hash_bytes = 12};
	diff(h, before, &hashed, &v, &n, &truncated);
	assert_int_equal(n, 5);
	assert_true(truncated);
	assert_true(v[0].hashed && v[1].hashed);
	assert_false(v[2].hashed || v[3].hashed || v[4].hashed);
	sbx_changes_free(v, n);
	/* walked */
	const struct sbx_changes_limits walked = {
	    .max_files = 2, .max_reported = 100, .max_hash_bytes = 1 << 20};
	diff(h, before, &walked, &v, &n, &truncated);
	assert_true(truncated);
	assert_true(n <= 2);
	sbx_changes_free(v, n);
	sbx_snapshot_free(&before);
}

/* A missing directory is an empty snapshot; one made later lists its files. */
static void test_missing_dir(void **state)
{
	struct host_ws *h = *state;
	struct sbx_snapshot *before = NULL;
	struct sbx_change *v = NULL;
	size_t n = 0;
	bool truncated = true;

	assert_int_equal(sbx_snapshot_take(h->ws, "later", 1000, &before), 0);
	host_mkdir(h->wsdir, "later");
	host_write(h->wsdir, "later/x", "hello\n");
	diff(h, before, &wide, &v, &n, &truncated);
	assert_int_equal(n, 1);
	assert_string_equal(v[0].rel, "later/x");
	sbx_changes_free(v, n);
	sbx_snapshot_free(&before);
	/* an escape is refused */
	host_symlink(h->wsdir, h->out, "esc");
	assert_int_equal(sbx_snapshot_take(h->ws, "esc", 1000, &before), -EXDEV);
	assert_null(before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    UNIT_TEST_FX(test_kinds),	     UNIT_TEST_FX(test_same_tick_rewrite),
	    UNIT_TEST_FX(test_fifo_ignored), UNIT_TEST_FX(test_links_count),
	    UNIT_TEST_FX(test_bounds),	     UNIT_TEST_FX(test_missing_dir),
	};
	return cmocka_run_group_tests_name("changes", tests, NULL, NULL);
}
