#pragma once
/* One JSON line per event on stderr: {"ts", "level", "msg"}. */
void log_msg(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
