/* utf8_valid (common/utf8.h) against a plain byte-by-byte reference of
 * RFC 3629 (no overlongs, no surrogates, nothing above U+10FFFF), on
 * buffers where the ASCII fast path (eight bytes at a time) meets a bad
 * or a multi-byte sequence at every offset and alignment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

/* The reference: Table 3-7 of the Unicode standard, one byte at a time. */
static bool ref_valid(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned char b = s[i];
		size_t k;
		unsigned char lo = 0x80, hi = 0xBF;
		if (b < 0x80) {
			i++;
			continue;
		}
		if (b >= 0xC2 && b <= 0xDF)
			k = 2;
		else if (b >= 0xE0 && b <= 0xEF)
			k = 3;
		else if (b >= 0xF0 && b <= 0xF4)
			k = 4;
		else
			return false;
		if (b == 0xE0)
			lo = 0xA0;
		else if (b == 0xED)
			hi = 0x9F;
		else if (b == 0xF0)
			lo = 0x90;
		else if (b == 0xF4)
			hi = 0x8F;
		if (i + k > n || s[i + 1] < lo || s[i + 1] > hi)
			return false;
		for (size_t j = 2; j < k; j++)
			if (s[i + j] < 0x80 || s[i + j] > 0xBF)
				return false;
		i += k;
	}
	return true;
}

static void check(const unsigned char *s, size_t n)
{
	bool want = ref_valid(s, n);
	if (utf8_valid((const char *)s, n) != want)
		fail_msg("utf8_valid disagrees with the reference (%d) on %zu bytes", want, n);
}

static const char *const pieces[] = {
    "\xC3\xA9",
    "\xE2\x82\xAC",
    "\xF0\x9F\x98\x80",
    "\xF4\x8F\xBF\xBF", /* valid */
    "\x80",
    "\xC3",
    "\xC0\xAF",
    "\xE0\x80\xAF", /* stray, cut, overlong */
    "\xED\xA0\x80",
    "\xF4\x90\x80\x80",
    "\xFF",
    "\xE2\x82", /* surrogate, > U+10FFFF */
};

/* Each piece at every offset 0..40 of a 48-byte ASCII run, from every
 * start alignment of the buffer. */
static void test_pieces_at_every_offset(void **state)
{
	(void)state;
	unsigned char buf[64 + 8];
	for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
		size_t pl = strlen(pieces[p]);
		for (size_t align = 0; align < 8; align++)
			for (size_t off = 0; off <= 40; off++) {
				unsigned char *b = buf + align;
				memset(b, 'a', 48);
				memcpy(b + off, pieces[p], pl);
				for (size_t n = off; n <= 48; n += 3)
					check(b, n);
			}
	}
	assert_true(utf8_valid("", 0));
	assert_true(utf8_valid("plain ascii text, longer than eight", 35));
	assert_false(utf8_valid("plain ascii text\x80 longer than eight", 35));
}

/* Random bytes, mostly ASCII with some of everything, in many lengths. */
static void test_random_buffers(void **state)
{
	(void)state;
	unsigned char buf[300];
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	for (int round = 0; round < 20000; round++) {
		size_t n = (size_t)(round % 300);
		for (size_t i = 0; i < n; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			unsigned r = (unsigned)(x & 0xff);
			if (r < 200) {
				buf[i] = (unsigned char)('a' + r % 26);
			} else {
				const char *pc = pieces[r % (sizeof pieces / sizeof pieces[0])];
				size_t pl = strlen(pc);
				if (i + pl > n)
					pl = n - i;
				memcpy(buf + i, pc, pl);
				i += pl - 1;
			}
		}
		check(buf, n);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pieces_at_every_offset),
	    cmocka_unit_test(test_random_buffers),
	};
	return cmocka_run_group_tests_name("utf8", tests, NULL, NULL);
}
