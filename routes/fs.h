#pragma once
/* Helpers of routes/fs.c that the streaming routes share. */
#include <stdint.h>

struct req;

/* Parse a single "bytes=a-b" / "bytes=a-" / "bytes=-n" range against size
 * into an inclusive [start, end]. -EINVAL malformed (ignored by callers,
 * as RFC 9110 allows), -ERANGE unsatisfiable (416). */
int route_fs_parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *end);
/* Answer 200/206 with the bytes of fd (whole, or the request's Range)
 * straight from the file; takes fd. limit: largest body allowed (0: none),
 * over it 413. */
int route_fs_reply_fd(struct req *r, int fd, uint64_t size, uint64_t limit);
