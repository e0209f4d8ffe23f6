#include "common/log.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/timeutil.h"
#include "common/xmalloc.h"

void log_msg(const char *level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	char ts[40];
	rfc3339_ms(now_ms(), ts, sizeof ts);
	json_t *j = json_pack("{s:s, s:s, s:s}", "ts", ts, "level", level, "msg", msg);
	char *t = json_dumps(j, JSON_COMPACT);
	fprintf(stderr, "%s\n", t);
	free(t);
	json_decref(j);
	free(msg);
}
