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

#include "common/utf8.h"
#include "common/xmalloc.h"
#include "sandbox/collector.h"
#include "sandbox/workspace.h"
#include "unit.h"

#define FFFD "\xEF\xBF\xBD"

struct fixture {
	char dir[64];
	struct sbx_workspace *ws;
};

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	struct sbx_owner owner = {.uid = getuid(), .gid = getgid(), .chown = false};

	if (unit_tmpdir(f->dir, sizeof(f->dir), "coll"))
		return -1;
	if (sbx_workspace_open(&f->ws, f->dir, &owner))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sbx_workspace_free(&f->ws);
	if (unit_rm_rf(f->dir) != 0)
		return -1;
	free(f);
	return 0;
}

/* Feed in odd-sized chunks so the ring wraps at awkward places. */
static void feed_chunks(struct sbx_collector *c, const char *p, size_t n, size_t chunk)
{
	while (n > 0) {
		size_t k = n < chunk ? n : chunk;

		assert_int_equal(sbx_collector_feed(c, p, k), 0);
		p += k;
		n -= k;
	}
}

static char *digits(size_t n)
{
	char *p = xmalloc(n);

	for (size_t i = 0; i < n; i++)
		p[i] = (char)('0' + i % 10);
	return p;
}

static char *read_file(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	char *p;
	long sz;

	if (!fp)
		return NULL;
	fseek(fp, 0, SEEK_END);
	sz = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	p = xmalloc((size_t)sz + 1);
	*len = fread(p, 1, (size_t)sz, fp);
	fclose(fp);
	return p;
}

static void test_short_exact(void **state)
{
	struct sbx_collector *c = NULL;
	const char in[] = "hello\nworld\n\tok";
	char *text = NULL;
	size_t len = 0;

	(void)state;
	assert_int_equal(sbx_collector_new(&c, 100, NULL, NULL, 0), 0);
	feed_chunks(c, in, sizeof(in) - 1, 3);
	assert_false(sbx_collector_truncated(c));
	assert_int_equal(sbx_collector_total(c), sizeof(in) - 1);
	sbx_collector_finish(c, &text, &len);
	assert_int_equal(len, sizeof(in) - 1);
	assert_memory_equal(text, in, len);
	assert_int_equal(text[len], '\0');
	assert_null(sbx_collector_spill_path(c));
	free(text);
	sbx_collector_free(&c);
	assert_null(c);
}

static void test_exactly_max_not_truncated(void **state)
{
	struct sbx_collector *c = NULL;
	char *in = digits(100), *text = NULL;
	size_t len = 0;

	(void)state;
	assert_int_equal(sbx_collector_new(&c, 100, NULL, NULL, 0), 0);
	feed_chunks(c, in, 100, 33);
	assert_false(sbx_collector_truncated(c));
	sbx_collector_finish(c, &text, &len);
	assert_int_equal(len, 100);
	assert_memory_equal(text, in, 100);
	free(text);
	free(in);
	sbx_collector_free(&c);
}

static void test_empty(void **state)
{
	struct sbx_collector *c = NULL;
	char *text = NULL;
	size_t len = 99;

	(void)state;
	assert_int_equal(sbx_collector_new(&c, 100, NULL, NULL, 0), 0);
	sbx_collector_finish(c, &text, &len);
	assert_int_equal(len, 0);
	assert_string_equal(text, "");
	free(text);
	sbx_collector_free(&c);
}

static void check_split(size_t chunk)
{
	struct sbx_collector *c = NULL;
	char *in = digits(1000), *text = NULL, *want;
	const char marker[] = "\n[... sandboxd: 900 bytes omitted; full output not kept ...]\n";
	size_t len = 0, ml = sizeof(marker) - 1;

	assert_int_equal(sbx_collector_new(&c, 100, NULL, NULL, 0), 0);
	feed_chunks(c, in, 1000, chunk);
	assert_true(sbx_collector_truncated(c));
	assert_int_equal(sbx_collector_total(c), 1000);
	sbx_collector_finish(c, &text, &len);
	want = xmalloc(40 + ml + 60);
	memcpy(want, in, 40);
	memcpy(want + 40, marker, ml);
	memcpy(want + 40 + ml, in + 940, 60);
	assert_int_equal(len, 40 + ml + 60);
	assert_memory_equal(text, want, len);
	free(want);
	free(text);
	free(in);
	sbx_collector_free(&c);
}

static void test_head_tail_split(void **state)
{
	(void)state;
	check_split(1000);
	check_split(1);
	check_split(7);
	check_split(59);
	check_split(61);
	check_split(100);
}

static void test_floor_of_40_percent(void **state)
{
	struct sbx_collector *c = NULL;
	char *in = digits(50), *text = NULL;
	size_t len = 0;

	(void)state;
	/* max 7: head floor(2.8) = 2, tail 5 */
	assert_int_equal(sbx_collector_new(&c, 7, NULL, NULL, 0), 0);
	feed_chunks(c, in, 50, 4);
	sbx_collector_finish(c, &text, &len);
	assert_string_equal(text, "01\n[... sandboxd: 43 bytes omitted; full output not kept ...]\n56789");
	free(text);
	free(in);
	sbx_collector_free(&c);
}

static void test_utf8_boundaries(void **state)
{
	struct sbx_collector *c = NULL;
	char in[200], *text = NULL, want[256];
	size_t len = 0;
	int wl;

	(void)state;
	memset(in, 'a', 39);
	memcpy(in + 39, "\xC3\xA9", 2); /* straddles the head cut at 40 */
	memset(in + 41, 'b', 98);
	memcpy(in + 139, "\xE2\x82\xAC", 3); /* the tail (last 60) starts at 140, inside */
	memset(in + 142, 'c', 58);
	assert_int_equal(sbx_collector_new(&c, 100, NULL, NULL, 0), 0);
	feed_chunks(c, in, sizeof(in), 13);
	sbx_collector_finish(c, &text, &len);
	/* 39 + 58 bytes kept: 103 omitted */
	wl = snprintf(want, sizeof(want),
		      "%.39s\n[... sandboxd: 103 bytes omitted; full output not kept ...]\n%.58s", in,
		      in + 142);
	assert_int_equal(len, (size_t)wl);
	assert_memory_equal(text, want, len);
	assert_true(utf8_valid(text, len));
	free(text);
	sbx_collector_free(&c);
}

static void test_utf8_boundary_whole_char_kept(void **state)
{
	struct sbx_collector *c = NULL;
	char in[200], *text = NULL;
	size_t len = 0;

	(void)state;
	/* a 2-byte char ending exactly at the head cut stays whole */
	memset(in, 'a', 38);
	memcpy(in + 38, "\xC3\xA9", 2);
	memset(in + 40, 'b', 160);
	assert_int_equal(sbx_collector_new(&c, 100, NULL, NULL, 0), 0);
	feed_chunks(c, in, sizeof(in), 200);
	sbx_collector_finish(c, &text, &len);
	assert_memory_equal(text, in, 40);
	assert_non_null(strstr(text, " 100 bytes omitted"));
	free(text);
	sbx_collector_free(&c);
}

static void check_sanitize_n(const char *in, size_t n, const char *want, size_t wl)
{
	size_t len = 0;
	char *out = utf8_sanitize(in, n, &len);

	assert_int_equal(len, wl);
	assert_memory_equal(out, want, len);
	assert_true(utf8_valid(out, len));
	free(out);
}

static void check_sanitize(const char *in, size_t n, const char *want)
{
	check_sanitize_n(in, n, want, strlen(want));
}

static void test_sanitize(void **state)
{
	(void)state;
	check_sanitize("plain ascii", 11, "plain ascii");
	check_sanitize("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 9, "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
	/* overlongs */
	check_sanitize("a\xC0\xAF"
		       "b",
		       4, "a" FFFD FFFD "b");
	check_sanitize("\xE0\x80\xAF", 3, FFFD FFFD FFFD);
	check_sanitize("\xF0\x8F\xBF\xBF", 4, FFFD FFFD FFFD FFFD);
	/* surrogate */
	check_sanitize("\xED\xA0\x80", 3, FFFD FFFD FFFD);
	/* above U+10FFFF */
	check_sanitize("\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD);
	check_sanitize("\xF5\x80", 2, FFFD FFFD);
	/* truncated sequences: one replacement each */
	check_sanitize("x\xE2\x82", 3, "x" FFFD);
	check_sanitize("\xE2\x82y", 3, FFFD "y");
	check_sanitize("\xF0\x9F\x98", 3, FFFD);
	/* stray continuation, invalid bytes */
	check_sanitize("\x80\xFF\xFE", 3, FFFD FFFD FFFD);
	/* NUL passes through */
	check_sanitize_n("a\0b", 3, "a\0b", 3);
	assert_false(utf8_valid("\xC3", 1));
	assert_false(utf8_valid("\xED\xBF\xBF", 3));
	assert_true(utf8_valid("\xED\x9F\xBF", 3));
	assert_true(utf8_valid("\xF4\x8F\xBF\xBF", 4));
}

static void test_invalid_in_output(void **state)
{
	struct sbx_collector *c = NULL;
	char *text = NULL;
	size_t len = 0;

	(void)state;
	assert_int_equal(sbx_collector_new(&c, 100, NULL, NULL, 0), 0);
	feed_chunks(c, "ok\xFF\xC3(", 6, 1);
	sbx_collector_finish(c, &text, &len);
	assert_string_equal(text, "ok" FFFD FFFD "(");
	free(text);
	sbx_collector_free(&c);
}

static bool exists(struct fixture *f, const char *rel)
{
	char path[256];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", f->dir, rel);
	return lstat(path, &st) == 0;
}

/* The file at path holds exactly the first n bytes of want. */
static void expect_file(const char *path, const char *want, size_t n)
{
	size_t len = 0;
	char *got = read_file(path, &len);

	assert_non_null(got);
	assert_int_equal(len, n);
	assert_memory_equal(got, want, n);
	free(got);
}

static void test_no_spill_when_short(void **state)
{
	struct fixture *f = *state;
	struct sbx_collector *c = NULL;
	char *in = digits(100), *text = NULL;
	size_t len = 0;

	assert_int_equal(sbx_collector_new(&c, 100, f->ws, ".sandboxd/spill/short.stdout", 1 << 20), 0);
	feed_chunks(c, in, 100, 10);
	sbx_collector_finish(c, &text, &len);
	assert_int_equal(len, 100);
	assert_null(sbx_collector_spill_path(c));
	assert_false(exists(f, ".sandboxd/spill/short.stdout"));
	assert_false(exists(f, ".sandboxd"));
	free(text);
	free(in);
	sbx_collector_free(&c);
}

static void test_spill_full_stream(void **state)
{
	struct fixture *f = *state;
	struct sbx_collector *c = NULL;
	char *in = xmalloc(100000), *text = NULL, path[256];
	size_t len = 0;

	for (size_t i = 0; i < 100000; i++)
		in[i] = (char)(i * 7 + i / 251); /* raw, invalid UTF-8 too */
	assert_int_equal(sbx_collector_new(&c, 100, f->ws, ".sandboxd/spill/long.stdout", 1 << 20), 0);
	feed_chunks(c, in, 60, 60);
	assert_false(exists(f, ".sandboxd/spill/long.stdout"));
	feed_chunks(c, in + 60, 100000 - 60, 4093);
	assert_true(exists(f, ".sandboxd/spill/long.stdout"));
	assert_string_equal(sbx_collector_spill_path(c), "/workspace/.sandboxd/spill/long.stdout");
	sbx_collector_finish(c, &text, &len);
	assert_true(utf8_valid(text, len));
	assert_non_null(
	    memmem(text, len, "omitted; full output in /workspace/.sandboxd/spill/long.stdout ...]\n", 68));
	snprintf(path, sizeof(path), "%s/.sandboxd/spill/long.stdout", f->dir);
	expect_file(path, in, 100000);
	free(text);
	free(in);
	sbx_collector_free(&c);
}

/* The window an exec row leaves out is rebuilt from the spill file as
 * finish gave it: for a stream that fitted the window (but passed the
 * row's) and one that did not, raw bytes and broken UTF-8 included. */
static void replay_case(struct fixture *f, size_t max, size_t n)
{
	struct sbx_collector *c = NULL;
	char *in = xmalloc(n), *text = NULL, *again = NULL, path[256];
	size_t len = 0, alen = 0;

	for (size_t i = 0; i < n; i++)
		in[i] = (char)(i * 7 + i / 251);
	assert_int_equal(sbx_collector_new(&c, max, f->ws, ".sandboxd/spill/re.stdout", 1ull << 30), 0);
	feed_chunks(c, in, SBX_COLLECTOR_ROW_WINDOW, 4093);
	assert_null(sbx_collector_spill_path(c)); /* not past the row window yet */
	feed_chunks(c, in + SBX_COLLECTOR_ROW_WINDOW, n - SBX_COLLECTOR_ROW_WINDOW, 4093);
	assert_non_null(sbx_collector_spill_path(c));
	assert_true(sbx_collector_spill_whole(c));
	sbx_collector_finish(c, &text, &len);
	snprintf(path, sizeof(path), "%s/.sandboxd/spill/re.stdout", f->dir);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(sbx_collector_replay(fd, max, n, sbx_collector_spill_path(c), &again, &alen), 0);
	assert_int_equal(alen, len);
	assert_memory_equal(again, text, len);
	/* a file of another size (a command cut it) is not replayed */
	assert_int_equal(sbx_collector_replay(fd, max, n + 1, "x", &again, &alen), -EBADF);
	close(fd);
	free(again);
	free(text);
	free(in);
	sbx_collector_free(&c);
}

static void test_replay_matches_finish(void **state)
{
	replay_case(*state, 1u << 20, 300000);	       /* fits the window */
	replay_case(*state, 200001, 1000003);	       /* truncated, odd sizes */
	replay_case(*state, 8u << 20, (8u << 20) + 1); /* one byte over */
}

/* A row's cut of a window text: bounded, valid UTF-8 at both cuts. */
static void test_window_cut(void **state)
{
	(void)state;
	size_t n = 3 * SBX_COLLECTOR_ROW_WINDOW, len = 0;
	char *in = xmalloc(n), *out = NULL;
	for (size_t i = 0; i + 3 <= n; i += 3)
		memcpy(in + i, "\xE2\x82\xAC", 3); /* U+20AC: any cut could split it */
	sbx_window_cut(in, n, SBX_COLLECTOR_ROW_WINDOW, "/workspace/.sandboxd/spill/x.stdout", &out, &len);
	assert_true(len < SBX_COLLECTOR_ROW_WINDOW + 200);
	assert_true(utf8_valid(out, len));
	assert_non_null(memmem(out, len, "/workspace/.sandboxd/spill/x.stdout", 35));
	free(out);
	sbx_window_cut(in, 30, SBX_COLLECTOR_ROW_WINDOW, "x", &out, &len);
	assert_int_equal(len, 30);
	assert_memory_equal(out, in, 30);
	free(out);
	free(in);
}

static void test_spill_cap_and_retrunc(void **state)
{
	struct fixture *f = *state;
	struct sbx_collector *c = NULL;
	char *in = digits(1000), *text = NULL, path[256];
	size_t len = 0;
	int fd;

	/* an old spill of the same id is replaced */
	snprintf(path, sizeof(path), "%s/.sandboxd", f->dir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/.sandboxd/spill", f->dir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/.sandboxd/spill/cap.stderr", f->dir);
	fd = open(path, O_CREAT | O_WRONLY, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "OLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLD", 45), 45);
	close(fd);

	assert_int_equal(sbx_collector_new(&c, 100, f->ws, ".sandboxd/spill/cap.stderr", 500), 0);
	feed_chunks(c, in, 1000, 64);
	sbx_collector_finish(c, &text, &len);
	expect_file(path, in, 500);
	assert_non_null(strstr(text, "900 bytes omitted; first 500 bytes of output in "
				     "/workspace/.sandboxd/spill/cap.stderr ...]\n"));
	free(text);
	free(in);
	sbx_collector_free(&c);
}

/* The tail line of c, read into a buffer of size bytes, is want. */
static void expect_tail(struct sbx_collector *c, size_t size, const char *want)
{
	char out[128];

	assert_true(size <= sizeof out);
	sbx_collector_tail(c, out, size);
	assert_string_equal(out, want);
}

static void test_tail_line(void **state)
{
	struct sbx_collector *c = NULL;

	(void)state;
	assert_int_equal(sbx_collector_new(&c, 100, NULL, NULL, 0), 0);
	expect_tail(c, 64, "");
	feed_chunks(c, "abc\nde", 6, 2);
	expect_tail(c, 64, "de");
	feed_chunks(c, "f\n", 2, 2);
	expect_tail(c, 64, "def");
	feed_chunks(c, "one line\n\n", 10, 10);
	expect_tail(c, 64, "");
	feed_chunks(c, "0123456789", 10, 10);
	/* bounded: the last max-1 bytes of the line */
	expect_tail(c, 5, "6789");
	/* never splits a character, and is sanitised */
	feed_chunks(c, "\xE2\x82\xAC\xFF", 4, 4);
	expect_tail(c, 5, FFFD);
	expect_tail(c, 7, "\xE2\x82\xAC" FFFD);
	sbx_collector_free(&c);
}

static void test_tail_line_after_truncation(void **state)
{
	struct sbx_collector *c = NULL;
	char *in = digits(1000);

	(void)state;
	assert_int_equal(sbx_collector_new(&c, 100, NULL, NULL, 0), 0);
	feed_chunks(c, in, 1000, 77);
	feed_chunks(c, "\nlast line\n", 11, 3);
	expect_tail(c, 128, "last line");
	/* a line longer than the ring: its last bytes */
	feed_chunks(c, in, 1000, 77);
	expect_tail(c, 11, "0123456789");
	free(in);
	sbx_collector_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_short_exact),
	    cmocka_unit_test(test_exactly_max_not_truncated),
	    cmocka_unit_test(test_empty),
	    cmocka_unit_test(test_head_tail_split),
	    cmocka_unit_test(test_floor_of_40_percent),
	    cmocka_unit_test(test_utf8_boundaries),
	    cmocka_unit_test(test_utf8_boundary_whole_char_kept),
	    cmocka_unit_test(test_sanitize),
	    cmocka_unit_test(test_invalid_in_output),
	    UNIT_TEST_FX(test_no_spill_when_short),
	    UNIT_TEST_FX(test_spill_full_stream),
	    UNIT_TEST_FX(test_spill_cap_and_retrunc),
	    cmocka_unit_test(test_tail_line),
	    UNIT_TEST_FX(test_replay_matches_finish),
	    cmocka_unit_test(test_window_cut),
	    cmocka_unit_test(test_tail_line_after_truncation),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
