#pragma once
/* The one allocation family. Out of memory aborts: callers never see NULL,
 * so no half-handled NULL branches (redis zmalloc, h2o_mem_alloc). jansson
 * is pointed at these in main() (json_set_alloc_funcs); libjwt 1.10 has no
 * allocator hook, so its own allocations are plain malloc. */
#include <stdarg.h>
#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* printf into a fresh allocation; the caller frees it. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
