/* libFuzzer: JSON request bodies through the declarative field reader of
 * every JSON route's shape, the Range parser, and RFC 3339 parsing. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/timeutil.h"
#include "http/fields.h"
#include "routes/fs.h"
#include "http/req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_req r;
	memset(&r, 0, sizeof r);
	json_t *j = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	if (j && json_is_object(j)) {
		const char *cmd = NULL, *path = NULL, *id = NULL;
		size_t cl = 0, pl = 0, il = 0;
		bool b1 = false, b2 = false;
		int64_t t = 0;
		json_t *env = NULL;
		const struct http_field f[] = {
		    {"command", F_STRING, true, &cmd, &cl, 0, 0, NULL},
		    {"path", F_STRING, false, &path, &pl, 0, 0, NULL},
		    {"id", F_STRING, false, &id, &il, 0, 0, NULL},
		    {"recursive", F_BOOL, false, &b1, NULL, 0, 0, NULL},
		    {"force", F_BOOL, false, &b2, NULL, 0, 0, NULL},
		    {"timeout_s", F_INT, false, &t, NULL, 1, 604800, NULL},
		    {"env", F_OBJECT, false, &env, NULL, 0, 0, NULL},
		};
		if (http_fields_read(&r, j, f, sizeof f / sizeof f[0]) == 0) {
			if (!cmd || (t && (t < 1 || t > 604800)))
				abort();
		}
		free(r.error_msg);
	}
	json_decref(j);

	char *s = strndup((const char *)data, size);
	uint64_t a = 0, b = 0;
	uint64_t fsize = size * 1000u;
	if (route_fs_parse_range(s, fsize, &a, &b) == 0 && (a > b || b >= fsize))
		abort();
	int64_t ms;
	rfc3339_parse(s, &ms);
	free(s);
	return 0;
}
