#pragma once
/* Files embedded at build time by cmake/embed.cmake. */
#include <stddef.h>

struct embedded_file {
	const char *name;
	const char *data; /* NUL-terminated, len bytes before the NUL */
	size_t len;
};

extern const struct embedded_file embedded_migrations[]; /* sorted by name */
extern const size_t embedded_migrations_count;
extern const struct embedded_file embedded_openapi;
extern const struct embedded_file embedded_dashboard;
