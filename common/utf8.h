#pragma once
/* UTF-8 for what reaches the wire: command output, paths, URLs. */
#include <stdbool.h>
#include <stddef.h>

/* Copy p[0..n) into out replacing invalid UTF-8 with U+FFFD. Caller frees. */
char *utf8_sanitize(const char *p, size_t n, size_t *out_len);
/* Whether p[0..n) is valid UTF-8. */
bool utf8_valid(const char *p, size_t n);
/* Length of p[0..n) cut back so it does not end inside a character. */
size_t utf8_cut_end(const char *p, size_t n);
/* Offset of the first character start in p[0..n) (skips at most 3
 * continuation bytes: more than that are invalid anyway). */
size_t utf8_cut_start(const char *p, size_t n);
