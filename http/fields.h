#pragma once
/* Declarative reading of a JSON body: a table of {name, type, required,
 * where to store}. Unknown fields are refused (a typo such as "recursve"
 * must not silently mean false). Errors are rendered by req_fail. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct req;

enum field_type { F_STRING, F_BOOL, F_INT, F_OBJECT };

struct field {
	const char *name;
	enum field_type type;
	bool required;
	void *dest;       /* const char ** | bool * | int64_t * | json_t ** (borrowed from the body) */
	size_t *len;      /* F_STRING: its length (strings may hold NUL; paths refuse it later) */
	int64_t min, max; /* F_INT bounds */
	bool *present;    /* optional: set when the field was given */
};

/* 0 or -EINVAL (after req_fail naming the field). */
int fields_read(struct req *r, json_t *obj, const struct field *f, size_t n);
