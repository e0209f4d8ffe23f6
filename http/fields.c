#include "http/fields.h"

#include <errno.h>
#include <string.h>

#include "http/req.h"

static const char *type_name(enum http_field_type t)
{
	switch (t) {
	case F_STRING:
		return "a string";
	case F_BOOL:
		return "a boolean";
	case F_INT:
		return "an integer";
	case F_OBJECT:
		return "an object";
	}
	return "?";
}

int http_fields_read(struct http_req *r, json_t *obj, const struct http_field *f, size_t n)
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v) {
		size_t i = 0;
		while (i < n && strcmp(f[i].name, key) != 0)
			i++;
		if (i == n)
			return http_fail(r, -EINVAL, "unknown field \"%s\"", key);
	}
	for (size_t i = 0; i < n; i++) {
		v = json_object_get(obj, f[i].name);
		if (!v || json_is_null(v)) {
			if (f[i].required)
				return http_fail(r, -EINVAL, "field \"%s\" is required", f[i].name);
			continue;
		}
		bool ok = false;
		switch (f[i].type) {
		case F_STRING:
			if ((ok = json_is_string(v))) {
				*(const char **)f[i].dest = json_string_value(v);
				if (f[i].len)
					*f[i].len = json_string_length(v);
			}
			break;
		case F_BOOL:
			if ((ok = json_is_boolean(v)))
				*(bool *)f[i].dest = json_is_true(v);
			break;
		case F_INT:
			if (json_is_integer(v)) {
				json_int_t x = json_integer_value(v);
				if (x < f[i].min || x > f[i].max)
					return http_fail(r, -EINVAL, "field \"%s\" must be in [%lld, %lld]",
							 f[i].name, (long long)f[i].min, (long long)f[i].max);
				*(int64_t *)f[i].dest = x;
				ok = true;
			}
			break;
		case F_OBJECT:
			if ((ok = json_is_object(v)))
				*(json_t **)f[i].dest = v;
			break;
		}
		if (!ok)
			return http_fail(r, -EINVAL, "field \"%s\" must be %s", f[i].name,
					 type_name(f[i].type));
		if (f[i].present)
			*f[i].present = true;
	}
	return 0;
}
