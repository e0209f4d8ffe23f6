#pragma once
/* Clocks and RFC 3339. */
#include <stddef.h>
#include <stdint.h>

int64_t now_ms(void);  /* CLOCK_REALTIME, Unix epoch milliseconds */
int64_t mono_ns(void); /* CLOCK_MONOTONIC nanoseconds */
int64_t mono_ms(void); /* CLOCK_MONOTONIC milliseconds */
/* "2026-11-29T09:19:17.123Z" (milliseconds, UTC) into out (>= 32 bytes). */
void rfc3339_ms(int64_t ms, char *out, size_t outsz);
/* Parse RFC 3339 ("2026-11-29T09:19:17Z", fractional seconds and
 * +hh:mm offsets accepted) or an integer of epoch milliseconds.
 * 0 or -EINVAL. */
int rfc3339_parse(const char *s, int64_t *ms);
