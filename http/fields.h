#pragma once
/* Declarative reading of a JSON body: a table of {name, type, required,
 * where to store}. Unknown fields are refused (a typo such as "recursve"
 * must not silently mean false). Errors are rendered by http_fail. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_req;

enum http_field_type { F_STRING, F_BOOL, F_INT, F_OBJECT };

struct http_field {
	const char *name;
	enum http_field_type type;
	bool required;
	void *dest;	  /* const char ** | bool * | int64_t * | json_t ** (borrowed from the body) */
	size_t *len;	  /* F_STRING: its length (strings may hold NUL; paths refuse it later) */
	int64_t min, max; /* F_INT bounds */
	bool *present;	  /* optional: set when the field was given */
};

/* 0 or -EINVAL (after http_fail naming the field). */
int http_fields_read(struct http_req *r, json_t *obj, const struct http_field *f, size_t n);
