/* Unit tests of readdir pages (sbx_fs_readdir_page) on the filesystems a
 * data directory may be on: the one /tmp is on (ext4 here: a 20,000-entry
 * directory is an htree, whose cursors are 64-bit name hashes) and tmpfs
 * (stable per-directory offsets), mounted privately when the tests run as
 * root, else /dev/shm. Every page walk must yield every name exactly once;
 * changes during a walk must not skip or repeat the entries that stayed. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/fsops.h"
#include "sandbox/workspace.h"
#include "unit.h"

#define NFILES 20000
#define TMPFS_MAGIC_ 0x01021994

struct fx {
	char top[64];
	bool mounted;
	struct sbx_workspace *ws;
};

static void make_files(const char *dir, int from, int to)
{
	char p[256];
	for (int i = from; i < to; i++) {
		snprintf(p, sizeof p, "%s/d/f%06d", dir, i);
		int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
		assert_true(fd >= 0);
		close(fd);
	}
}

static int fx_open(struct fx *fx)
{
	char d[128];
	snprintf(d, sizeof d, "%s/d", fx->top);
	assert_int_equal(mkdir(d, 0755), 0);
	make_files(fx->top, 0, NFILES);
	struct sbx_owner owner = {.chown = false};
	return sbx_workspace_open(&fx->ws, fx->top, &owner);
}

static int setup_disk(void **state)
{
	struct fx *fx = calloc(1, sizeof *fx);
	*state = fx; /* teardown frees it, whatever happens next */
	if (unit_tmpdir(fx->top, sizeof fx->top, "dirpage") < 0)
		return -1;
	return fx_open(fx);
}

static int setup_tmpfs(void **state)
{
	struct fx *fx = calloc(1, sizeof *fx);
	*state = fx;
	if (unit_tmpdir(fx->top, sizeof fx->top, "dirpage-tmpfs") < 0)
		return -1;
	if (geteuid() == 0 && mount("tmpfs", fx->top, "tmpfs", 0, "size=256m,mode=0755") == 0) {
		fx->mounted = true;
	} else {
		struct statfs sf;
		rmdir(fx->top);
		if (statfs("/dev/shm", &sf) < 0 || sf.f_type != TMPFS_MAGIC_)
			return 0; /* no tmpfs to test on: the tests skip */
		snprintf(fx->top, sizeof fx->top, "/dev/shm/sbx-dirpage-XXXXXX");
		if (!mkdtemp(fx->top))
			return -1;
	}
	return fx_open(fx);
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	sbx_workspace_free(&fx->ws);
	if (fx->mounted)
		umount2(fx->top, MNT_DETACH);
	if (fx->top[0])
		unit_rm_rf(fx->top);
	free(fx);
	return 0;
}

static const char *fs_name(const struct fx *fx)
{
	struct statfs sf;
	if (statfs(fx->top, &sf) < 0)
		return "?";
	return sf.f_type == TMPFS_MAGIC_ ? "tmpfs" : sf.f_type == 0xEF53 ? "ext4" : "other";
}

static int index_of(const char *name)
{
	if (strncmp(name, "f", 1) != 0 || strlen(name) != 7)
		return -1;
	return atoi(name + 1); /* NOLINT: six digits checked by the length */
}

/* Walk every page with limit; count each name in seen[]. Between pages,
 * change(k) may alter the directory (k: pages so far). Returns pages. */
static size_t walk(struct fx *fx, size_t limit, unsigned char *seen, size_t nseen,
		   void (*change)(struct fx *, size_t))
{
	char after[SBX_CURSOR_MAX] = "";
	size_t pages = 0;
	for (;;) {
		struct sbx_dir_page p;
		assert_int_equal(sbx_fs_readdir_page(fx->ws, "d", pages ? after : NULL, limit, false, &p), 0);
		pages++;
		assert_true(p.n <= limit);
		for (size_t i = 0; i < p.n; i++) {
			if (i)
				assert_true(strcmp(p.ents[i - 1].name, p.ents[i].name) <
					    0); /* sorted within */
			int k = index_of(p.ents[i].name);
			assert_true(k >= 0 && (size_t)k < nseen);
			assert_true(seen[k] < 255);
			seen[k]++;
		}
		bool more = p.more;
		if (more) {
			assert_int_equal(strlen(p.next), 24);
			memcpy(after, p.next, sizeof after);
		} else {
			assert_string_equal(p.next, "");
		}
		sbx_dir_page_clear(&p);
		if (!more)
			return pages;
		if (change)
			change(fx, pages);
		assert_true(pages < 10 * NFILES);
	}
}

static void exactly_once(struct fx *fx, size_t limit)
{
	unsigned char *seen = calloc(NFILES, 1);
	size_t pages = walk(fx, limit, seen, NFILES, NULL);
	for (size_t i = 0; i < NFILES; i++)
		if (seen[i] != 1)
			fail_msg("%s, limit %zu: f%06zu seen %u times", fs_name(fx), limit, i, seen[i]);
	assert_true(pages >= NFILES / limit);
	assert_true(pages <= NFILES / limit + 2);
	free(seen);
}

static void test_walk(void **state)
{
	struct fx *fx = *state;
	if (!fx->ws)
		skip();
	print_message("readdir pages on %s\n", fs_name(fx));
	exactly_once(fx, 10000);
	exactly_once(fx, 997);
	exactly_once(fx, 61);
}

/* During the walk: remove entries (some already listed, some not) and add
 * new ones. Every entry there from start to end is listed exactly once. */
static void churn(struct fx *fx, size_t page)
{
	char p[256];
	if (page % 5 != 1)
		return;
	for (int i = (int)(page * 131) % NFILES; i < NFILES; i += 997) {
		snprintf(p, sizeof p, "%s/d/f%06d", fx->top, i);
		unlink(p);
	}
	int base = NFILES + (int)page * 10;
	for (int i = base; i < base + 10; i++) {
		snprintf(p, sizeof p, "%s/d/f%06d", fx->top, i);
		int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
		assert_true(fd >= 0);
		close(fd);
	}
}

static void test_walk_while_changing(void **state)
{
	struct fx *fx = *state;
	if (!fx->ws)
		skip();
	size_t nseen = 2 * NFILES;
	unsigned char *seen = calloc(nseen, 1);
	walk(fx, 2000, seen, nseen, churn);
	char p[256];
	for (size_t i = 0; i < NFILES; i++) {
		snprintf(p, sizeof p, "%s/d/f%06zu", fx->top, i);
		bool stayed = access(p, F_OK) == 0;
		if (stayed && seen[i] != 1)
			fail_msg("%s: f%06zu stayed but was seen %u times", fs_name(fx), i, seen[i]);
		assert_true(seen[i] <= 1); /* removed ones: at most once */
	}
	for (size_t i = NFILES; i < nseen; i++)
		assert_true(seen[i] <= 1); /* added ones: at most once */
	free(seen);
}

static void test_bad_cursors(void **state)
{
	struct fx *fx = *state;
	if (!fx->ws)
		skip();
	struct sbx_dir_page p;
	assert_int_equal(sbx_fs_readdir_page(fx->ws, "d", NULL, 100, true, &p), 0);
	assert_true(p.more);
	assert_int_equal(p.n, 100);
	assert_true(p.ents[0].type == SBX_FT_FILE);
	char good[SBX_CURSOR_MAX];
	memcpy(good, p.next, sizeof good);
	sbx_dir_page_clear(&p);

	static const char *const bad[] = {"", "0", "zzzzzzzzzzzzzzzzzzzzzzzz", "000000000000000000000000",
					  "ffffffffffffffffffffffff"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(sbx_fs_readdir_page(fx->ws, "d", bad[i], 10, false, &p), -EBADMSG);
	char tampered[SBX_CURSOR_MAX];
	memcpy(tampered, good, sizeof tampered);
	tampered[15] = tampered[15] == '0' ? '1' : '0';
	assert_int_equal(sbx_fs_readdir_page(fx->ws, "d", tampered, 10, false, &p), -EBADMSG);
	char upper[SBX_CURSOR_MAX];
	memcpy(upper, good, sizeof upper);
	for (char *c = upper; *c; c++)
		if (*c >= 'a' && *c <= 'f')
			*c = (char)(*c - 'a' + 'A');
	if (strcmp(upper, good) != 0)
		assert_int_equal(sbx_fs_readdir_page(fx->ws, "d", upper, 10, false, &p), -EBADMSG);
	/* Another directory's cursor. */
	char d2[128];
	snprintf(d2, sizeof d2, "%s/e", fx->top);
	assert_int_equal(mkdir(d2, 0755), 0);
	assert_int_equal(sbx_fs_readdir_page(fx->ws, "e", good, 10, false, &p), -EBADMSG);
	/* And the good one still works, twice the same. */
	struct sbx_dir_page a, b;
	assert_int_equal(sbx_fs_readdir_page(fx->ws, "d", good, 50, false, &a), 0);
	assert_int_equal(sbx_fs_readdir_page(fx->ws, "d", good, 50, false, &b), 0);
	assert_int_equal(a.n, 50);
	assert_int_equal(a.n, b.n);
	for (size_t i = 0; i < a.n; i++)
		assert_string_equal(a.ents[i].name, b.ents[i].name);
	assert_string_equal(a.next, b.next);
	sbx_dir_page_clear(&a);
	sbx_dir_page_clear(&b);
	/* An empty directory: one empty page, nothing more. */
	assert_int_equal(sbx_fs_readdir_page(fx->ws, "e", NULL, 10, false, &p), 0);
	assert_int_equal(p.n, 0);
	assert_false(p.more);
	sbx_dir_page_clear(&p);
	assert_int_equal(sbx_fs_readdir_page(fx->ws, "nope", NULL, 10, false, &p), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_walk, setup_disk, teardown),
	    cmocka_unit_test_setup_teardown(test_walk, setup_tmpfs, teardown),
	    cmocka_unit_test_setup_teardown(test_walk_while_changing, setup_disk, teardown),
	    cmocka_unit_test_setup_teardown(test_walk_while_changing, setup_tmpfs, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_cursors, setup_disk, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_cursors, setup_tmpfs, teardown),
	};
	return cmocka_run_group_tests_name("dirpage", tests, NULL, NULL);
}
