#include "common/utf8.h"

#include <stdint.h>
#include <string.h>

#include "common/xmalloc.h"

static bool is_cont(unsigned char b)
{
	return (b & 0xC0) == 0x80;
}

/* The sequence length a lead byte announces (1 for ASCII and for bytes
 * that can never start a sequence). */
static size_t seq_len(unsigned char b)
{
	if (b >= 0xC2 && b <= 0xDF)
		return 2;
	if (b >= 0xE0 && b <= 0xEF)
		return 3;
	if (b >= 0xF0 && b <= 0xF4)
		return 4;
	return 1;
}

/* Length of p[0..n) cut back so it does not end inside a character. */
size_t utf8_cut_end(const char *p, size_t n)
{
	size_t back;

	for (back = 1; back <= 3 && back <= n; back++) {
		unsigned char b = (unsigned char)p[n - back];

		if (!is_cont(b)) {
			if (seq_len(b) > back)
				return n - back;
			return n;
		}
	}
	return n;
}

/* Offset of the first character start in p[0..n) (skips at most 3
 * continuation bytes: more than that are invalid anyway). */
size_t utf8_cut_start(const char *p, size_t n)
{
	size_t i = 0;

	while (i < n && i < 3 && is_cont((unsigned char)p[i]))
		i++;
	return i;
}

/* Length of the valid sequence at p[0..n), or 0 when invalid; *sub gets
 * the length of the maximal invalid subpart to replace with one U+FFFD
 * (Unicode's "best practice": a truncated sequence is one replacement,
 * a byte that can never appear is one replacement each). */
static size_t decode_one(const unsigned char *p, size_t n, size_t *sub)
{
	unsigned char b = p[0], lo = 0x80, hi = 0xBF;
	size_t need, i;

	*sub = 1;
	if (b < 0x80)
		return 1;
	need = seq_len(b);
	if (need == 1)
		return 0;
	if (b == 0xE0)
		lo = 0xA0; /* overlong */
	else if (b == 0xED)
		hi = 0x9F; /* surrogates */
	else if (b == 0xF0)
		lo = 0x90; /* overlong */
	else if (b == 0xF4)
		hi = 0x8F; /* above U+10FFFF */
	for (i = 1; i < need; i++) {
		if (i >= n)
			return 0;
		if (p[i] < lo || p[i] > hi)
			return 0;
		lo = 0x80;
		hi = 0xBF;
		*sub = i + 1;
	}
	return need;
}

char *utf8_sanitize(const char *p, size_t n, size_t *out_len)
{
	const unsigned char *s = (const unsigned char *)p;
	char *out = xmalloc(n * 3 + 1);
	size_t i = 0, o = 0;

	while (i < n) {
		size_t k, sub;

		if (s[i] < 0x80) {
			size_t j = i;

			while (j < n && s[j] < 0x80)
				j++;
			memcpy(out + o, s + i, j - i);
			o += j - i;
			i = j;
			continue;
		}
		k = decode_one(s + i, n - i, &sub);
		if (k) {
			memcpy(out + o, s + i, k);
			o += k;
			i += k;
		} else {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i += sub;
		}
	}
	out[o] = '\0';
	if (out_len)
		*out_len = o;
	return out;
}

bool utf8_valid(const char *p, size_t n)
{
	const unsigned char *s = (const unsigned char *)p;
	size_t i = 0;

	while (i < n) {
		size_t k, sub;

		/* ASCII eight bytes at a time (most text is): a byte >= 0x80
		 * has its top bit set. */
		while (i + 8 <= n) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			if (w & 0x8080808080808080ULL)
				break;
			i += 8;
		}
		if (i >= n)
			break;
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		k = decode_one(s + i, n - i, &sub);
		if (!k)
			return false;
		i += k;
	}
	return true;
}
