/* A job's streams: reading its stdout and stderr into the collectors
 * (and output events), and its stdin: the queue HTTP threads append to
 * (sbx_runner_stdin), written to the pipe or terminal without blocking,
 * and its close. Calls only runner_job.c. */
#include "sandbox/runner_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "sandbox/cgroup.h"
#include "sandbox/collector.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/netpool.h"
#include "sandbox/rootimg.h"
#include "sandbox/workspace.h"

#define STDIN_BUFFER_DEFAULT (64 * 1024)
#define TTY_EOF '\x04' /* VEOF of a fresh terminal: ^D */

/* Watch stdin for room only while something waits to be written (a
 * level-triggered EPOLLOUT on an idle pipe would spin); with no events
 * epoll still reports EPOLLERR, the command closing its end. */
static void arm_stdin(struct lane *r, struct job *j, bool want)
{
	struct epoll_event ev = {.events = want ? EPOLLOUT : 0, .data.ptr = &j->w[W_STDIN]};

	if (j->fd[W_STDIN] < 0 || j->in_armed == want)
		return;
	if (epoll_ctl(r->epfd, EPOLL_CTL_MOD, j->fd[W_STDIN], &ev) == 0)
		j->in_armed = want;
}

/* Close stdin for good (under r->mu): what waits is dropped. */
void rn_close_stdin_locked(struct lane *r, struct job *j)
{
	rn_unwatch(r, j, W_STDIN);
	j->in_closed = true;
	j->in_len = 0;
}

/* Write what the pipe takes without blocking (under r->mu: the queue is
 * shared with sbx_runner_stdin; a non-blocking write never waits on the
 * command). SIGPIPE is blocked around the write (and a pending one
 * consumed) so a child that closed its stdin gives EPIPE instead of
 * killing the server. */
void rn_feed_stdin_locked(struct lane *r, struct job *j)
{
	sigset_t pipe_set, old, pending;
	bool was_pending, failed = false;
	size_t off = 0;

	j->in_dirty = false;
	if (j->fd[W_STDIN] < 0)
		return;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	sigpending(&pending);
	was_pending = sigismember(&pending, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	while (off < j->in_len) {
		ssize_t w = write(j->fd[W_STDIN], j->in_buf + off, j->in_len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;
		if (w < 0) {
			if (errno == EPIPE && !was_pending) {
				struct timespec zero = {0, 0};

				sigtimedwait(&pipe_set, NULL, &zero);
			}
			failed = true;
			break;
		}
		off += (size_t)w;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (off) {
		memmove(j->in_buf, j->in_buf + off, j->in_len - off);
		j->in_len -= off;
	}
	if (failed || (j->in_len == 0 && j->in_eof))
		rn_close_stdin_locked(r, j);
	else
		arm_stdin(r, j, j->in_len > 0);
}

void rn_feed_stdin(struct lane *r, struct job *j)
{
	pthread_mutex_lock(&r->mu);
	rn_feed_stdin_locked(r, j);
	pthread_mutex_unlock(&r->mu);
}

void rn_read_stream(struct lane *r, struct job *j, int k)
{
	struct sbx_collector *c = k == W_STDOUT ? j->out : j->err;

	for (int i = 0; i < READS_PER_WAKE && j->fd[k] >= 0; i++) {
		ssize_t n = read(j->fd[k], r->buf, READ_BUF);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			rn_unwatch(r, j, k);
			return;
		}
		if (!j->pipe_grown[k] && (size_t)n >= DEFAULT_PIPE) {
			j->pipe_grown[k] = true;
			(void)fcntl(j->fd[k], F_SETPIPE_SZ, BIG_PIPE);
		}
		sbx_collector_feed(c, r->buf, (size_t)n);
		j->last_out_mono = mono_ms();
		j->last_output_at = now_ms();
		j->last_stream = k;
		if (j->req.want_output_events) {
			for (size_t off = 0; off < (size_t)n; off += OUTPUT_EVENT_MAX) {
				size_t len = (size_t)n - off;
				struct sbx_event ev = {
				    .kind = SBX_EV_OUTPUT,
				    .stream = k == W_STDOUT ? 1 : 2,
				    .data = r->buf + off,
				    .len = len < OUTPUT_EVENT_MAX ? len : OUTPUT_EVENT_MAX,
				};

				rn_emit(j, &ev, 0);
			}
		}
		if ((size_t)n < READ_BUF)
			return;
	}
}

int rn_queue_stdin_locked(struct job *j, const void *p, size_t n, bool eof)
{
	size_t max = j->req.stdin_buffer_max ? j->req.stdin_buffer_max : STDIN_BUFFER_DEFAULT;
	size_t add = n + (eof && j->req.tty ? 1 : 0);

	if (!j->req.stdin_pipe)
		return -ENOTCONN;
	if (j->in_closed || j->in_eof)
		return -EPIPE;
	if (add > max)
		return -EFBIG;
	if (j->in_len + add > max)
		return -EAGAIN;
	if (j->in_len + add > j->in_cap) {
		j->in_cap = j->in_len + add;
		j->in_buf = xrealloc(j->in_buf, j->in_cap);
	}
	if (n)
		memcpy(j->in_buf + j->in_len, p, n);
	j->in_len += n;
	if (eof && j->req.tty)
		j->in_buf[j->in_len++] = TTY_EOF;
	else if (eof)
		j->in_eof = true;
	j->in_dirty = true;
	return 0;
}
