/* What a remote command prints, made harmless for the user's terminal
 * (see cli.h): the command is the tenant's, the terminal is the user's,
 * and an escape sequence in the output would retitle the window, clear
 * the screen, rewrite what was shown, or (OSC 52, some terminals) set the
 * clipboard. Bytes are walked as UTF-8; state carried between chunks is
 * at most an incomplete character and a CR waiting for its LF. */
#include <stdio.h>
#include <string.h>

#include "client/cli/cli.h"
#include "common/buf.h"

/* Bytes of the UTF-8 character that starts with b (0: not a lead byte). */
static size_t lead_len(unsigned char b)
{
	return b < 0x80			? 1
	       : b >= 0xc2 && b <= 0xdf ? 2
	       : b >= 0xe0 && b <= 0xef ? 3
	       : b >= 0xf0 && b <= 0xf4 ? 4
					: 0;
}

/* A well-formed character of n bytes at p (no overlong form, no surrogate,
 * nothing past U+10FFFF): its code point, or -1. */
static long decode(const unsigned char *p, size_t n)
{
	if (n == 1)
		return p[0];
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return -1;
	if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
	    (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
		return -1;
	long cp = p[0] & (n == 2 ? 0x1f : n == 3 ? 0x0f : 0x07);
	for (size_t i = 1; i < n; i++)
		cp = cp << 6 | (p[i] & 0x3f);
	return cp;
}

/* C1 controls and the bidi controls (a terminal that reorders text would
 * let them reorder what the user reads). */
static bool marked(long cp)
{
	return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
	       (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* A CR stays only before an LF (CR LF line ends); a lone one, which
 * would let the next text overwrite the line, shows as ^M. */
static void pending_cr(struct cli_term *t, struct buf *out, bool lf_next)
{
	if (t->cr)
		buf_append(out, lf_next ? "\r" : "^M", lf_next ? 1 : 2);
	t->cr = false;
}

/* One ASCII byte: as it is, or in caret notation (ESC is ^[, DEL ^?). */
static void ascii(struct cli_term *t, struct buf *out, unsigned char b)
{
	pending_cr(t, out, b == '\n');
	if (b == '\r') {
		t->cr = true;
	} else if (b == '\n' || b == '\t' || (b >= 0x20 && b < 0x7f)) {
		buf_append(out, (const char *)&b, 1);
	} else {
		char caret[2] = {'^', b == 0x7f ? '?' : (char)(b + 0x40)};
		buf_append(out, caret, 2);
	}
}

/* Neutralise data (after what the last chunk left) into out. */
static void neutralise(struct cli_term *t, const unsigned char *p, size_t n, struct buf *out)
{
	size_t i = 0;
	while (i < n) {
		size_t len = lead_len(p[i]);
		if (len > 1 && i + len > n) { /* cut between chunks: wait for the rest */
			bool plausible = true;
			for (size_t k = i + 1; k < n; k++)
				plausible = plausible && (p[k] & 0xc0) == 0x80;
			if (plausible) {
				memcpy(t->carry, p + i, n - i);
				t->ncarry = n - i;
				return;
			}
		}
		long cp = len && i + len <= n ? decode(p + i, len) : -1;
		if (cp < 0) { /* not UTF-8: the byte in hex (a lone 0x9B is CSI to some terminals) */
			pending_cr(t, out, false);
			buf_appendf(out, "\\x%02X", p[i]);
			i++;
		} else if (len == 1) {
			ascii(t, out, p[i++]);
		} else {
			pending_cr(t, out, false);
			if (marked(cp))
				buf_appendf(out, "<U+%04lX>", cp);
			else
				buf_append(out, (const char *)p + i, len);
			i += len;
		}
	}
}

/* Out at once (a command's output is followed as it comes); a closed
 * pipe is ignored: the output has nowhere to go. */
static void put(FILE *f, const char *p, size_t n)
{
	if (n)
		fwrite(p, 1, n, f);
	fflush(f);
}

void cli_term_write(struct cli_term *t, FILE *f, const char *data, size_t len)
{
	if (t->raw) {
		put(f, data, len);
		return;
	}
	struct buf in, out;
	buf_init(&in, len + sizeof t->carry);
	buf_init(&out, 4 * (len + sizeof t->carry) + 16); /* at most 4 bytes shown per byte */
	buf_append(&in, (const char *)t->carry, t->ncarry);
	buf_append(&in, data, len);
	t->ncarry = 0;
	neutralise(t, (const unsigned char *)in.ptr, in.len, &out);
	put(f, out.ptr, out.len);
	buf_free(&in);
	buf_free(&out);
}

void cli_term_flush(struct cli_term *t, FILE *f)
{
	struct buf out;
	buf_init(&out, 64);
	pending_cr(t, &out, false); /* it came before the carry */
	for (size_t i = 0; i < t->ncarry; i++)
		buf_appendf(&out, "\\x%02X", t->carry[i]);
	t->ncarry = 0;
	put(f, out.ptr, out.len);
	buf_free(&out);
}

void cli_term_puts(FILE *f, const char *s, size_t len)
{
	struct cli_term t = {0};
	cli_term_write(&t, f, s, len);
	cli_term_flush(&t, f);
}

void cli_term_line(FILE *f, const char *s)
{
	cli_term_puts(f, s ? s : "", s ? strlen(s) : 0);
	fputc('\n', f);
}
