#include "common/log.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "common/xmalloc.h"

/* Each of the two buffers (one filling, one being written). A request
 * line is a few hundred bytes: a full buffer is a thousand of them. */
#define LOG_BUF (256 * 1024)
/* How long a batch gathers once its first line is in: one wake of the
 * writer per batch, not per line (a wake per line costs more than the
 * write it saves). A line waits at most this long to reach stderr; a
 * half-full buffer, an error line or log_flush does not wait. */
#define LOG_GATHER_MS 20

static struct {
	pthread_mutex_t mu;
	pthread_cond_t more, room;
	char *fill, *spare;  /* LOG_BUF each while running */
	size_t len;	     /* of fill */
	atomic_bool running; /* read without the lock by log_line_write */
	bool stop, urgent, writing;
	pid_t pid; /* the writer's process: a forked child writes directly */
	pthread_t thread;
} w = {.mu = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER, .room = PTHREAD_COND_INITIALIZER};

/* All of it, or as much as stderr takes before an error (a closed or
 * full pipe with no reader: the lines are lost, the server goes on). */
static void write_fd2(const char *p, size_t n)
{
	while (n) {
		ssize_t k = write(STDERR_FILENO, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return;
		p += k;
		n -= (size_t)k;
	}
}

static void *writer(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&w.mu);
	for (;;) {
		while (!w.len && !w.stop)
			pthread_cond_wait(&w.more, &w.mu);
		if (!w.len)
			break; /* stopping, and everything is written */
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += LOG_GATHER_MS * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (!w.urgent && !w.stop && pthread_cond_timedwait(&w.more, &w.mu, &until) == 0)
			;
		w.urgent = false;
		char *out = w.fill;
		size_t n = w.len;
		w.fill = w.spare;
		w.spare = out;
		w.len = 0;
		w.writing = true;
		pthread_cond_broadcast(&w.room);
		pthread_mutex_unlock(&w.mu);
		write_fd2(out, n);
		pthread_mutex_lock(&w.mu);
		w.writing = false;
		pthread_cond_broadcast(&w.room);
	}
	pthread_mutex_unlock(&w.mu);
	return NULL;
}

void log_writer_start(void)
{
	pthread_mutex_lock(&w.mu);
	if (!w.running) {
		w.fill = xmalloc(LOG_BUF);
		w.spare = xmalloc(LOG_BUF);
		w.len = 0;
		w.stop = false;
		w.pid = getpid();
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_destroy(&w.more);
		pthread_cond_init(&w.more, &ca);
		pthread_condattr_destroy(&ca);
		static bool registered;
		if (!registered)
			atexit(log_flush); /* an exit() elsewhere still writes what came before */
		registered = true;
		if (pthread_create(&w.thread, NULL, writer, NULL) == 0)
			w.running = true;
		else {
			free(w.fill);
			free(w.spare);
			w.fill = w.spare = NULL;
		}
	}
	pthread_mutex_unlock(&w.mu);
}

void log_flush(void)
{
	/* A forked child (its exit() runs this, atexit) must not take the
	 * mutex, which another thread may have held at the fork. */
	if (!w.running || w.pid != getpid())
		return;
	pthread_mutex_lock(&w.mu);
	if (w.running && w.len) {
		w.urgent = true;
		pthread_cond_signal(&w.more);
	}
	while (w.running && (w.len || w.writing))
		pthread_cond_wait(&w.room, &w.mu);
	pthread_mutex_unlock(&w.mu);
}

void log_writer_stop(void)
{
	if (!w.running || w.pid != getpid())
		return; /* not started, or a forked child (as in log_flush) */
	pthread_mutex_lock(&w.mu);
	w.stop = true;
	pthread_cond_signal(&w.more);
	pthread_mutex_unlock(&w.mu);
	pthread_join(w.thread, NULL);
	pthread_mutex_lock(&w.mu);
	w.running = false;
	write_fd2(w.fill, w.len); /* appended while it ended */
	w.len = 0;
	pthread_cond_broadcast(&w.room);
	free(w.fill);
	free(w.spare);
	w.fill = w.spare = NULL;
	pthread_mutex_unlock(&w.mu);
}

void log_line_write(const char *line, size_t n)
{
	/* A forked child must not take the mutex (another thread may have
	 * held it at the fork): w.pid is only read, and set before any child
	 * could exist. */
	bool direct = !w.running || w.pid != getpid() || n + 1 > LOG_BUF;
	if (!direct) {
		pthread_mutex_lock(&w.mu);
		while (w.running && w.len + n + 1 > LOG_BUF)
			pthread_cond_wait(&w.room, &w.mu);
		if (w.running) {
			bool first = !w.len;
			memcpy(w.fill + w.len, line, n);
			w.fill[w.len + n] = '\n';
			w.len += n + 1;
			if (w.len > LOG_BUF / 2 && !w.urgent) {
				w.urgent = true;
				pthread_cond_signal(&w.more);
			} else if (first) {
				pthread_cond_signal(&w.more); /* a batch begins */
			}
			pthread_mutex_unlock(&w.mu);
			return;
		}
		pthread_mutex_unlock(&w.mu);
	}
	/* Directly, in one write when it fits a line's usual size. */
	char small[4096];
	if (n + 1 <= sizeof small) {
		memcpy(small, line, n);
		small[n] = '\n';
		write_fd2(small, n + 1);
	} else {
		if (w.running && w.pid == getpid())
			log_flush(); /* an over-long line after those before it */
		write_fd2(line, n);
		write_fd2("\n", 1);
	}
}

void log_msg(const char *level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	char ts[40];
	rfc3339_ms(now_ms(), ts, sizeof ts);
	json_t *j = json_pack("{s:s, s:s, s:s}", "ts", ts, "level", level, "msg", msg);
	char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
	if (t)
		log_line_write(t, strlen(t));
	if (strcmp(level, "error") == 0)
		log_flush(); /* an error line is not left waiting */
	free(t);
	json_decref(j);
	free(msg);
}
