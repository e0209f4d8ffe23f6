#pragma once
/* Bytes travel with their length: struct buf owns a growable allocation
 * with a hard maximum (curl's dynbuf and its toobig). */
#include <stdbool.h>
#include <stddef.h>

struct buf {
	char *ptr; /* NUL-terminated whenever len > 0 or after buf_cstr */
	size_t len;
	size_t cap;
	size_t max; /* appends that would pass this fail with -E2BIG */
};

/* An empty buffer that may grow to max bytes. Nothing is allocated yet. */
void buf_init(struct buf *b, size_t max);
/* Append; 0 or -E2BIG (nothing appended) when max would be passed. */
int buf_append(struct buf *b, const void *p, size_t n);
int buf_appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Always NUL-terminated view (allocates one byte for an empty buffer). */
const char *buf_cstr(struct buf *b);
/* Hand the allocation to the caller (who frees it); the buffer is empty. */
char *buf_steal(struct buf *b, size_t *len);
void buf_reset(struct buf *b);
/* Append the whole file at path. 0, -errno (open/read), or -E2BIG when
 * it is larger than the buffer's maximum (nothing partial is kept). */
int buf_read_file(struct buf *b, const char *path);
void buf_free(struct buf *b);
