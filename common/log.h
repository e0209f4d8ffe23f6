#pragma once
/* One JSON line per event on stderr: {"ts", "level", "msg"}.
 *
 * The server's lines (these and the request log, http/router.c) go
 * through one writer thread once log_writer_start has run: a caller
 * appends its line to a buffer under a mutex and goes on; the writer,
 * woken by a batch's first line, lets the batch gather for up to 20 ms
 * (at once when the buffer is half full, for an error line or at
 * log_flush) and writes it in one write(2), while the next one gathers;
 * lines keep their order (nginx's access_log buffer= flush=, with a far
 * shorter flush). A caller waits only when the buffer is full (stderr
 * slower than the lines: the same back-pressure a direct write gives).
 * Lines of a forked child, or before the start and after the stop, are
 * written directly. */
#include <stddef.h>

void log_msg(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* line: n bytes without the newline, which is added. */
void log_line_write(const char *line, size_t n);

/* Start the writer (once; the server's start). */
void log_writer_start(void);
/* Every line appended so far is written (before an _exit). */
void log_flush(void);
/* Flush, then stop the writer; later lines are written directly. */
void log_writer_stop(void);
