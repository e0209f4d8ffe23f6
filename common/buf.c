#include "common/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"

void buf_init(struct buf *b, size_t max)
{
	b->ptr = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

static int reserve(struct buf *b, size_t extra)
{
	if (extra > b->max || b->len > b->max - extra)
		return -E2BIG;
	size_t need = b->len + extra + 1;
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	if (b->max < SIZE_MAX && cap > b->max + 1) /* max + 1 would wrap */
		cap = b->max + 1;
	b->ptr = xrealloc(b->ptr, cap);
	b->cap = cap;
	return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
	int rc = reserve(b, n);
	if (rc < 0)
		return rc;
	if (n)
		memcpy(b->ptr + b->len, p, n);
	b->len += n;
	b->ptr[b->len] = '\0';
	return 0;
}

int buf_appendf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	int rc = reserve(b, (size_t)n);
	if (rc < 0)
		return rc;
	va_start(ap, fmt);
	vsnprintf(b->ptr + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

const char *buf_cstr(struct buf *b)
{
	if (!b->ptr) {
		b->ptr = xmalloc(1);
		b->cap = 1;
		b->ptr[0] = '\0';
	}
	return b->ptr;
}

char *buf_steal(struct buf *b, size_t *len)
{
	buf_cstr(b);
	char *p = b->ptr;
	if (len)
		*len = b->len;
	b->ptr = NULL;
	b->len = b->cap = 0;
	return p;
}

int buf_read_file(struct buf *b, const char *path)
{
	FILE *f = fopen(path, "rbe");
	if (!f)
		return -errno;
	size_t start = b->len;
	char tmp[4096];
	size_t n;
	int rc = 0;
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
		if ((rc = buf_append(b, tmp, n)) < 0)
			break;
	if (rc == 0 && ferror(f))
		rc = -EIO;
	fclose(f);
	if (rc < 0) {
		b->len = start;
		if (b->ptr)
			b->ptr[start] = '\0';
	}
	return rc;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->ptr)
		b->ptr[0] = '\0';
}

void buf_free(struct buf *b)
{
	free(b->ptr);
	b->ptr = NULL;
	b->len = b->cap = 0;
}
