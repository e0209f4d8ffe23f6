#include "sandbox/runner.h"

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

/* One read takes up to a quarter of an enlarged pipe (performance.md P8:
 * fewer, larger reads and spill writes per byte). */
#define READ_BUF (256 * 1024)
#define READS_PER_WAKE 4 /* fairness between busy jobs: 1 MiB per wake, as before */
/* Output events keep their former bound: at most 64 KiB of data each. */
#define OUTPUT_EVENT_MAX (64 * 1024)
/* A stream that fills the default pipe (64 KiB) is a busy one: its pipe
 * grows to this once, so the child blocks less often and the runner
 * wakes less often. Best effort: past pipe-max-size or the user's pipe
 * pages it stays as it is. Quiet streams keep the default size, so the
 * user's pipe-user-pages budget is spent only on busy ones. */
#define BIG_PIPE (1024 * 1024)
#define DEFAULT_PIPE (64 * 1024)
#define DRAIN_MS 150 /* pipes held open by a detached grandchild */
#define TAIL_MAX 256
#define NO_DEADLINE INT64_MAX

enum watch_kind { W_STDIN, W_STDOUT, W_STDERR, W_PIDFD, W_COUNT };

struct job;

struct watch {
	struct job *job;
	enum watch_kind kind;
};

struct job {
	uint64_t id;
	struct job *next_all; /* r->all, under r->mu */
	struct job *next_q;   /* r->pending, under r->mu */
	struct job *next_run; /* runner thread only */
	bool cancel_req;      /* under r->mu */
	bool kill_req;	      /* under r->mu: cancel without grace */
	/* stdin waiting to be written, under r->mu (HTTP threads append) */
	char *in_buf;
	size_t in_len, in_cap;
	bool in_eof;	/* close stdin once in_buf is written */
	bool in_closed; /* closed, or refused by the command */
	bool in_dirty;	/* appended since the runner last looked */
	bool resize_req;
	unsigned short cols, rows;

	/* the deep copy of the request */
	struct sbx_exec_req req;
	char *command, *cwd_rel, *host_dir, *exec_id, *net_allow, *net_tenant, *net_sub, *rootfs;
	char **env;
	sbx_event_cb cb;
	void *ctx;
	struct lane *lane;

	/* Network setup (sandbox/netpool.h): sent to the setup threads once;
	 * net and net_rc are written by the setup thread before it queues
	 * the job back (under r->mu), read by the runner after. held: the
	 * pool counts this job against its tenant until it is freed. */
	bool net_sent, net_held;
	struct sbx_egress_session *net;
	int net_rc;

	/* runner thread only from here */
	struct watch w[W_COUNT];
	int fd[W_COUNT];
	bool in_armed; /* W_STDIN watched for EPOLLOUT */
	pid_t pid;
	struct sbx_collector *out, *err;
	int last_stream;
	int64_t start_mono, started_at;
	int64_t last_out_mono, last_output_at;
	int64_t timeout_at, kill_at, next_hb, drain_until;
	int status;
	bool reaped, timed_out, idle, cancelled, term_sent, kill_sent;
	bool pipe_grown[W_COUNT];
};

/* One runner thread and the jobs it owns. */
struct lane {
	struct sbx_runner *owner;
	size_t idx;
	struct sbx_spawner *spawner; /* this thread's fd slots and child stack */
	pthread_mutex_t mu;
	struct job *all;
	struct job *pending, *pending_tail;
	bool cancel_dirty;
	bool stop;
	size_t at_pool; /* jobs whose network setup is on the pool (under mu) */
	/* atomic: read without mu by the dispatcher and the figures */
	_Atomic size_t active; /* owned: queued or running */
	_Atomic size_t queued; /* not started yet */
	_Atomic uint64_t spawns, spawn_ns;

	/* the watchdog's view, written by the runner thread */
	_Atomic int64_t busy_since; /* mono ms the turn began, 0 when waiting */
	_Atomic(const char *) step;
	pthread_mutex_t done_mu;
	pthread_cond_t done_cv;
	bool done; /* under done_mu: the thread has left its loop */
	bool joined;
	bool started; /* the thread was created */

	/* runner thread only */
	pthread_t thread;
	int epfd, efd, tfd;
	int64_t armed;
	struct job *running;
	char *buf;
	char efd_tag, tfd_tag;
};

struct sbx_runner {
	size_t n;
	struct lane *lanes;
	_Atomic uint64_t next_seq; /* job handle = seq * n + lane */
	_Atomic size_t rr;	   /* where the dispatcher's scan starts */
	_Atomic unsigned spawning; /* threads inside sbx_backend_spawn now */
	struct sbx_netpool *net;   /* network setups, off the runner threads */
	_Atomic uint64_t overlap[SBX_RUNNER_MAX_THREADS];
};

static int64_t add_ms(int64_t t, uint64_t ms)
{
	if (ms >= (uint64_t)(NO_DEADLINE - t))
		return NO_DEADLINE;
	return t + (int64_t)ms;
}

void sbx_exec_result_clear(struct sbx_exec_result *res)
{
	if (!res)
		return;
	free(res->stdout_text);
	free(res->stderr_text);
	free(res->stdout_spill);
	free(res->stderr_spill);
	res->stdout_text = res->stderr_text = NULL;
	res->stdout_spill = res->stderr_spill = NULL;
	res->stdout_len = res->stderr_len = 0;
}

static void job_free(struct job *j)
{
	if (!j)
		return;
	for (int k = 0; k < W_COUNT; k++)
		if (j->fd[k] >= 0)
			close(j->fd[k]);
	sbx_collector_free(&j->out);
	sbx_collector_free(&j->err);
	free(j->command);
	free(j->cwd_rel);
	free(j->host_dir);
	free(j->rootfs);
	sbx_rootimg_close(&j->req.rootimg);
	free(j->exec_id);
	free(j->net_allow);
	free(j->net_tenant);
	free(j->net_sub);
	if (j->env) {
		for (char **e = j->env; *e; e++)
			free(*e);
		free(j->env);
	}
	free(j->in_buf);
	sbx_egress_session_close(&j->net, NULL);
	sbx_backend_warm_unclaim(j->req.backend, &j->req.spawn.warm_box);
	if (j->net_held)
		sbx_netpool_release(j->lane->owner->net, j->req.spawn.uid);
	free(j);
}

static struct job *job_copy(const struct sbx_exec_req *req)
{
	struct job *j = xcalloc(1, sizeof(*j));
	const char *host = req->spawn.workspace_host_dir;
	size_t n = 0;

	j->req = *req;
	j->command = xstrdup(req->spawn.command);
	j->cwd_rel = xstrdup(req->spawn.cwd_rel ? req->spawn.cwd_rel : "");
	if (!host && req->ws)
		host = sbx_workspace_host_dir(req->ws);
	j->host_dir = host ? xstrdup(host) : NULL;
	j->exec_id = req->id ? xstrdup(req->id) : NULL;
	j->net_allow = req->spawn.net_allow ? xstrdup(req->spawn.net_allow) : NULL;
	j->net_tenant = req->spawn.net_tenant ? xstrdup(req->spawn.net_tenant) : NULL;
	j->net_sub = req->spawn.net_sub ? xstrdup(req->spawn.net_sub) : NULL;
	j->rootfs = req->spawn.rootfs ? xstrdup(req->spawn.rootfs) : NULL;
	if (req->spawn.env) {
		while (req->spawn.env[n])
			n++;
		j->env = xcalloc(n + 1, sizeof(*j->env));
		for (size_t i = 0; i < n; i++)
			j->env[i] = xstrdup(req->spawn.env[i]);
	}
	if (req->stdin_len > 0) {
		j->in_buf = xmalloc(req->stdin_len);
		memcpy(j->in_buf, req->stdin_data, req->stdin_len);
		j->in_len = j->in_cap = req->stdin_len;
	}
	j->req.stdin_pipe = req->stdin_pipe || req->tty;
	j->in_eof = !j->req.stdin_pipe;
	j->cols = req->cols;
	j->rows = req->rows;
	/* the copy's pointers now point at the job's own strings */
	j->req.spawn.command = j->command;
	j->req.spawn.cwd_rel = j->cwd_rel;
	j->req.spawn.workspace_host_dir = j->host_dir;
	j->req.spawn.rootfs = j->rootfs;
	j->req.spawn.env = (const char *const *)j->env;
	j->req.id = j->exec_id;
	j->req.spawn.net_allow = j->net_allow;
	j->req.spawn.net_tenant = j->net_tenant;
	j->req.spawn.net_sub = j->net_sub;
	j->req.spawn.net_exec_id = j->exec_id;
	j->req.stdin_data = NULL;
	j->req.stdin_len = 0;
	for (int k = 0; k < W_COUNT; k++) {
		j->fd[k] = -1;
		j->w[k].job = j;
		j->w[k].kind = (enum watch_kind)k;
	}
	j->pid = -1;
	j->timeout_at = j->kill_at = j->next_hb = j->drain_until = NO_DEADLINE;
	return j;
}

static void emit(struct job *j, struct sbx_event *ev, int spawn_error)
{
	ev->job = j->id;
	ev->at_ms = now_ms();
	j->cb(j->ctx, ev, spawn_error);
}

/* EPOLL_CTL_DEL before the close, never the close alone: a registration
 * lives as long as the open file, and a command another runner thread is
 * spawning holds copies of every fd of the process until its close_range
 * (clone without CLONE_FILES), so a closed fd could still report events
 * for a freed job. */
static void unwatch(struct lane *r, struct job *j, int k)
{
	if (j->fd[k] < 0)
		return;
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, j->fd[k], NULL);
	close(j->fd[k]);
	j->fd[k] = -1;
}

static int watch(struct lane *r, struct job *j, int k, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = &j->w[k]};

	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, j->fd[k], &ev) < 0)
		return -errno;
	return 0;
}

static void signal_group(struct job *j, int sig)
{
	if (j->reaped || j->pid <= 0)
		return;
	/* The leader is not reaped yet, so its pid (and group id) cannot
	 * have been reused. */
	if (kill(-j->pid, sig) < 0 && j->fd[W_PIDFD] >= 0)
		pidfd_send_signal(j->fd[W_PIDFD], sig, NULL, 0);
}

/* Start stopping: SIGTERM now, SIGKILL after the grace. */
static void stop_job(struct job *j, int64_t now)
{
	if (j->term_sent || j->reaped)
		return;
	signal_group(j, SIGTERM);
	j->term_sent = true;
	j->kill_at = add_ms(now, j->req.kill_grace_ms);
	j->timeout_at = NO_DEADLINE;
	/* heartbeats go on through the grace: it still runs */
}

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
static void close_stdin_locked(struct lane *r, struct job *j)
{
	unwatch(r, j, W_STDIN);
	j->in_closed = true;
	j->in_len = 0;
}

/* Write what the pipe takes without blocking (under r->mu: the queue is
 * shared with sbx_runner_stdin; a non-blocking write never waits on the
 * command). SIGPIPE is blocked around the write (and a pending one
 * consumed) so a child that closed its stdin gives EPIPE instead of
 * killing the server. */
static void feed_stdin_locked(struct lane *r, struct job *j)
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
		close_stdin_locked(r, j);
	else
		arm_stdin(r, j, j->in_len > 0);
}

static void feed_stdin(struct lane *r, struct job *j)
{
	pthread_mutex_lock(&r->mu);
	feed_stdin_locked(r, j);
	pthread_mutex_unlock(&r->mu);
}

/* Our ends of the pipes and the terminal's master carry no status flag
 * F_SETFL would keep (O_APPEND, O_ASYNC, O_DIRECT, O_NOATIME), so one
 * call sets O_NONBLOCK without reading the flags first. */
static int set_nonblock(int fd)
{
	return fcntl(fd, F_SETFL, O_NONBLOCK) < 0 ? -errno : 0;
}

static void new_collector(struct job *j, struct sbx_collector **c, const char *suffix)
{
	char rel[160];
	const char *spill = NULL;

	if (j->req.ws && j->exec_id) {
		snprintf(rel, sizeof(rel), ".sandboxd/spill/%s.%s", j->exec_id, suffix);
		spill = rel;
	}
	sbx_collector_new(c, j->req.max_output_bytes, j->req.ws, spill, j->req.spill_cap);
}

/* A pseudo-terminal: *master for the runner, *slave for the command. */
static int open_pty(const struct job *j, int *master, int *slave)
{
	struct winsize ws = {.ws_row = j->rows ? j->rows : 24, .ws_col = j->cols ? j->cols : 80};
	char name[64];
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), rc;

	if (m < 0)
		return -errno;
	if (grantpt(m) < 0 || unlockpt(m) < 0 || ioctl(m, TIOCSWINSZ, &ws) < 0) {
		rc = -errno;
		close(m);
		return rc;
	}
	rc = ptsname_r(m, name, sizeof(name));
	if (rc) {
		close(m);
		return -rc;
	}
	*slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (*slave < 0) {
		rc = -errno;
		close(m);
		return rc;
	}
	*master = m;
	return 0;
}

/* The child's std fds: three pipes, or one terminal (in[1] then writes
 * to a second fd of the master, out[0] reads the master, no stderr). */
static int make_std_fds(struct job *j, int in[2], int out[2], int err[2])
{
	if (!j->req.tty) {
		if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
			return -errno;
		j->req.spawn.stdin_fd = in[0];
		j->req.spawn.stdout_fd = out[1];
		j->req.spawn.stderr_fd = err[1];
		return 0;
	}
	int rc = open_pty(j, &out[0], &in[0]);
	if (rc < 0)
		return rc;
	in[1] = fcntl(out[0], F_DUPFD_CLOEXEC, 3);
	if (in[1] < 0)
		return -errno;
	j->req.spawn.stdin_fd = j->req.spawn.stdout_fd = j->req.spawn.stderr_fd = in[0];
	j->req.spawn.tty = true;
	return 0;
}

/* sbx_backend_spawn, counted: how long it held this thread, and how many
 * other threads were inside one when it began (sbx_runner_spawn_overlap). */
static int spawn_counted(struct lane *r, struct job *j, pid_t *pid, int *pidfd)
{
	struct sbx_runner *rn = r->owner;
	unsigned others = atomic_fetch_add(&rn->spawning, 1);
	int64_t t0 = mono_ns();
	int rc = sbx_backend_spawn(j->req.backend, &j->req.spawn, pid, pidfd);

	atomic_fetch_sub(&rn->spawning, 1);
	r->spawn_ns += (uint64_t)(mono_ns() - t0);
	r->spawns++;
	rn->overlap[others < SBX_RUNNER_MAX_THREADS ? others : SBX_RUNNER_MAX_THREADS - 1]++;
	return rc;
}

/* Pipes, spawn on this (the long-lived) thread, which owns the command
 * from now on (its PR_SET_PDEATHSIG follows this thread), epoll
 * registration. */
static int job_start(struct lane *r, struct job *j)
{
	int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
	int pidfd = -1, rc;
	pid_t pid = -1;

	if (!j->req.backend || !j->command) {
		rc = -EINVAL;
		goto out;
	}
	rc = make_std_fds(j, in, out, err);
	if (rc < 0)
		goto out;
	j->start_mono = mono_ms();
	j->started_at = now_ms();
	j->req.spawn.net_ready = j->net; /* the spawn's now */
	j->net = NULL;
	rc = spawn_counted(r, j, &pid, &pidfd);
	j->req.spawn.net_ready = NULL;
	j->req.spawn.warm_box = NULL; /* the spawn's too */
	j->req.spawn.stdin_fd = j->req.spawn.stdout_fd = j->req.spawn.stderr_fd = -1;
	if (rc)
		goto out;
	j->pid = pid;
	j->fd[W_PIDFD] = pidfd;
	j->fd[W_STDIN] = in[1];
	j->fd[W_STDOUT] = out[0];
	j->fd[W_STDERR] = err[0];
	in[1] = out[0] = err[0] = -1;
	new_collector(j, &j->out, "stdout");
	new_collector(j, &j->err, "stderr");
	rc = watch(r, j, W_PIDFD, EPOLLIN);
	if (!rc)
		rc = set_nonblock(j->fd[W_STDOUT]);
	if (!rc && j->fd[W_STDERR] >= 0)
		rc = set_nonblock(j->fd[W_STDERR]);
	if (!rc)
		rc = watch(r, j, W_STDOUT, EPOLLIN);
	if (!rc && j->fd[W_STDERR] >= 0)
		rc = watch(r, j, W_STDERR, EPOLLIN);
	if (rc) {
		/* It would run unobserved: kill it, reap it, report a failure. */
		kill(-pid, SIGKILL);
		while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
			;
		sbx_backend_reap(j->req.backend, &j->req.spawn, NULL, NULL);
		for (int k = 0; k < W_COUNT; k++)
			unwatch(r, j, k);
		j->pid = -1;
		goto out;
	}
	pthread_mutex_lock(&r->mu);
	if ((!j->req.stdin_pipe && j->in_len == 0) || set_nonblock(j->fd[W_STDIN]) || watch(r, j, W_STDIN, 0))
		close_stdin_locked(r, j);
	else
		feed_stdin_locked(r, j);
	pthread_mutex_unlock(&r->mu);
	j->last_out_mono = j->start_mono;
	if (j->req.timeout_ms)
		j->timeout_at = add_ms(j->start_mono, j->req.timeout_ms);
	if (j->req.heartbeat_ms)
		j->next_hb = add_ms(j->start_mono, j->req.heartbeat_ms);
out:
	for (int k = 0; k < 2; k++) {
		if (in[k] >= 0)
			close(in[k]);
		if (out[k] >= 0)
			close(out[k]);
		if (err[k] >= 0)
			close(err[k]);
	}
	return rc;
}

static void read_stream(struct lane *r, struct job *j, int k)
{
	struct sbx_collector *c = k == W_STDOUT ? j->out : j->err;

	for (int i = 0; i < READS_PER_WAKE && j->fd[k] >= 0; i++) {
		ssize_t n = read(j->fd[k], r->buf, READ_BUF);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			unwatch(r, j, k);
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

				emit(j, &ev, 0);
			}
		}
		if ((size_t)n < READ_BUF)
			return;
	}
}

static void reap(struct lane *r, struct job *j)
{
	int st = 0;
	pid_t w;

	do {
		w = waitpid(j->pid, &st, WNOHANG | __WALL); /* no exit signal: reaper.h */
	} while (w < 0 && errno == EINTR);
	if (w == 0)
		return; /* not yet: the pidfd stays watched */
	/* Whatever the leader left behind in its group goes with it, before
	 * the reap frees the pid (and with it the group id) for reuse. */
	if (w > 0)
		kill(-j->pid, SIGKILL);
	if (w < 0)
		j->status = -1; /* someone else reaped it (SIGCHLD ignored?) */
	else if (WIFEXITED(st))
		j->status = WEXITSTATUS(st);
	else if (WIFSIGNALED(st))
		j->status = 128 + WTERMSIG(st);
	else
		j->status = -1;
	j->reaped = true;
	unwatch(r, j, W_PIDFD);
	pthread_mutex_lock(&r->mu);
	close_stdin_locked(r, j);
	pthread_mutex_unlock(&r->mu);
	j->timeout_at = j->kill_at = j->next_hb = NO_DEADLINE;
	j->drain_until = add_ms(mono_ms(), DRAIN_MS);
}

static void handle_event(struct lane *r, struct watch *w, uint32_t events)
{
	struct job *j = w->job;

	switch (w->kind) {
	case W_STDIN:
		if (j->fd[W_STDIN] < 0)
			break;
		if (events & (EPOLLERR | EPOLLHUP)) {
			pthread_mutex_lock(&r->mu);
			close_stdin_locked(r, j);
			pthread_mutex_unlock(&r->mu);
		} else {
			feed_stdin(r, j);
		}
		break;
	case W_STDOUT:
	case W_STDERR:
		read_stream(r, j, w->kind);
		break;
	case W_PIDFD:
		if (j->fd[W_PIDFD] >= 0)
			reap(r, j);
		break;
	default:
		break;
	}
}

static void report_exit(struct lane *r, struct job *j)
{
	struct sbx_exec_result res = {0};
	struct sbx_event ev = {.kind = SBX_EV_EXIT, .result = &res};
	const char *sp;

	for (int k = 0; k < W_COUNT; k++)
		unwatch(r, j, k);
	res.exit_code = j->timed_out ? 124 : j->status;
	res.timed_out = j->timed_out;
	res.idle = j->idle;
	res.cancelled = j->cancelled;
	res.truncated = sbx_collector_truncated(j->out) || sbx_collector_truncated(j->err);
	sbx_collector_finish(j->out, &res.stdout_text, &res.stdout_len);
	sbx_collector_finish(j->err, &res.stderr_text, &res.stderr_len);
	res.stdout_bytes = sbx_collector_total(j->out);
	res.stderr_bytes = sbx_collector_total(j->err);
	sp = sbx_collector_spill_path(j->out);
	res.stdout_spill = sp ? xstrdup(sp) : NULL;
	sp = sbx_collector_spill_path(j->err);
	res.stderr_spill = sp ? xstrdup(sp) : NULL;
	res.stdout_spill_whole = sbx_collector_spill_whole(j->out);
	res.stderr_spill_whole = sbx_collector_spill_whole(j->err);
	res.window = j->req.max_output_bytes;
	res.started_at_ms = j->started_at;
	res.finished_at_ms = now_ms();
	/* The command's groups (and whatever a detached process left in
	 * them) go before its result, which says why it ended as they saw
	 * it (the OOM killer, a pids limit): read at their removal. On v1
	 * that is the kept group's check and reset (a few writes), an rmdir
	 * only when it cannot be kept (issue 15, P1). Nothing it left
	 * survives this call. */
	struct sbx_cgroup_outcome why;
	sbx_backend_reap(j->req.backend, &j->req.spawn, &why, &res.egress);
	res.networked = j->net_allow != NULL;
	res.oom_killed = why.oom_killed;
	res.pids_limited = why.pids_limited;
	res.uncontained = !sbx_backend_contained(j->req.backend);
	emit(j, &ev, 0);
	sbx_exec_result_clear(&res);
}

/* Forget the job: out of r->all (cancel now answers -ESRCH), one less active. */
static void unregister(struct lane *r, struct job *j)
{
	pthread_mutex_lock(&r->mu);
	for (struct job **p = &r->all; *p; p = &(*p)->next_all) {
		if (*p == j) {
			*p = j->next_all;
			break;
		}
	}
	r->active--;
	pthread_mutex_unlock(&r->mu);
}

static void heartbeat(struct job *j, int64_t now)
{
	char tail[TAIL_MAX];
	struct sbx_event ev = {.kind = SBX_EV_HEARTBEAT, .tail = tail};

	tail[0] = '\0';
	if (j->last_stream)
		sbx_collector_tail(j->last_stream == W_STDOUT ? j->out : j->err, tail, sizeof(tail));
	ev.pid = j->pid;
	ev.elapsed_ms = now - j->start_mono;
	ev.stdout_bytes = sbx_collector_total(j->out);
	ev.stderr_bytes = sbx_collector_total(j->err);
	ev.last_output_at_ms = j->last_output_at;
	emit(j, &ev, 0);
}

static int64_t idle_at(const struct job *j)
{
	if (!j->req.idle_timeout_ms || j->reaped || j->term_sent)
		return NO_DEADLINE;
	return add_ms(j->last_out_mono, j->req.idle_timeout_ms);
}

/* Fire what is due; returns the job's next deadline. */
static int64_t job_due(struct lane *r, struct job *j, int64_t now)
{
	int64_t next = NO_DEADLINE, t;

	if (!j->reaped) {
		if (j->timeout_at <= now && !j->term_sent) {
			j->timed_out = true;
			stop_job(j, now);
		}
		if (idle_at(j) <= now) {
			j->timed_out = true;
			j->idle = true;
			stop_job(j, now);
		}
		if (j->kill_at <= now) {
			if (!j->kill_sent)
				signal_group(j, SIGKILL);
			j->kill_sent = true;
			j->kill_at = NO_DEADLINE;
		}
		if (j->next_hb <= now) {
			heartbeat(j, now);
			j->next_hb = add_ms(now, j->req.heartbeat_ms);
		}
	} else if (j->drain_until <= now) {
		/* a detached grandchild holds the pipes: stop waiting */
		unwatch(r, j, W_STDOUT);
		unwatch(r, j, W_STDERR);
		return NO_DEADLINE;
	}
	t = idle_at(j);
	next = j->timeout_at < next ? j->timeout_at : next;
	next = t < next ? t : next;
	next = j->kill_at < next ? j->kill_at : next;
	next = j->next_hb < next ? j->next_hb : next;
	if (j->reaped)
		next = j->drain_until < next ? j->drain_until : next;
	return next;
}

static void apply_cancel(struct job *j, int64_t now)
{
	/* the first of timeout and cancel wins; an exited job is done */
	if (j->reaped || j->term_sent)
		return;
	j->cancelled = true;
	stop_job(j, now);
}

static void apply_kill(struct job *j)
{
	if (j->reaped || j->kill_sent)
		return;
	if (!j->term_sent)
		j->cancelled = true;
	signal_group(j, SIGKILL);
	j->term_sent = j->kill_sent = true;
	j->kill_at = j->timeout_at = NO_DEADLINE;
}

/* What HTTP threads asked of a started job (under r->mu). */
static void apply_control_locked(struct lane *r, struct job *j, int64_t now)
{
	if (j->kill_req) {
		j->kill_req = j->cancel_req = false;
		apply_kill(j);
	}
	if (j->cancel_req) {
		j->cancel_req = false;
		apply_cancel(j, now);
	}
	if (j->in_dirty)
		feed_stdin_locked(r, j);
	if (j->resize_req && !j->reaped && j->req.tty && j->fd[W_STDOUT] >= 0) {
		struct winsize ws = {.ws_row = j->rows, .ws_col = j->cols};

		(void)ioctl(j->fd[W_STDOUT], TIOCSWINSZ, &ws);
	}
	j->resize_req = false;
}

static void wake(struct lane *r);

/* The setup thread is done with q: queue it back to its lane. */
static void net_done(void *ctx, struct sbx_egress_session *ns, int rc)
{
	struct job *q = ctx;
	struct lane *r = q->lane;

	pthread_mutex_lock(&r->mu);
	q->net = ns;
	q->net_rc = rc;
	q->next_q = NULL;
	if (r->pending_tail)
		r->pending_tail->next_q = q;
	else
		r->pending = q;
	r->pending_tail = q;
	r->at_pool--;
	pthread_mutex_unlock(&r->mu);
	wake(r);
}

static bool net_skip(void *ctx)
{
	struct job *q = ctx;
	bool skip;

	pthread_mutex_lock(&q->lane->mu);
	skip = q->cancel_req;
	pthread_mutex_unlock(&q->lane->mu);
	return skip;
}

/* Resolution and namespace off this thread (sandbox/netpool.h): 0 when
 * the setup is queued, 1 when none is needed (a warm sandbox waits in a
 * namespace of its own: q->req.spawn.warm_box), else why the job cannot
 * start. */
static int net_send(struct lane *r, struct job *q)
{
	int rc;

	q->lane = r;
	q->req.spawn.warm_box = sbx_backend_warm_claim(q->req.backend, &q->req.spawn);
	if (q->req.spawn.warm_box) {
		rc = sbx_netpool_hold(r->owner->net, q->req.spawn.uid);
		if (rc < 0) {
			sbx_backend_warm_unclaim(q->req.backend, &q->req.spawn.warm_box);
			return rc;
		}
		q->net_held = true;
		return 1;
	}
	pthread_mutex_lock(&r->mu);
	rc = sbx_netpool_submit(r->owner->net, q->req.backend, &q->req.spawn, net_done, net_skip, q);
	if (rc == 0) {
		q->net_sent = q->net_held = true;
		r->at_pool++;
	}
	pthread_mutex_unlock(&r->mu);
	return rc;
}

/* New jobs and cancel requests from other threads. */
static void take_control(struct lane *r)
{
	struct job *q, *next;
	uint64_t v;
	int64_t now;

	while (read(r->efd, &v, sizeof(v)) < 0 && errno == EINTR)
		;
	pthread_mutex_lock(&r->mu);
	q = r->pending;
	r->pending = r->pending_tail = NULL;
	pthread_mutex_unlock(&r->mu);
	for (; q; q = next) {
		int rc;

		next = q->next_q;
		q->next_q = NULL;
		pthread_mutex_lock(&r->mu);
		rc = q->cancel_req ? -ECANCELED : 0;
		q->cancel_req = false;
		pthread_mutex_unlock(&r->mu);
		if (!rc && q->net_allow && !q->net_sent) {
			rc = net_send(r, q);
			if (!rc)
				continue; /* back in pending once its namespace is made */
			rc = rc > 0 ? 0 : rc;
		}
		if (!rc && q->net_sent)
			rc = q->net_rc;
		if (!rc)
			rc = job_start(r, q);
		r->queued--;
		if (rc) {
			struct sbx_event ev = {.kind = SBX_EV_EXIT};

			if (rc == -SBX_E_TOO_MANY && q->net_allow && !q->net_sent) {
				ev.message = "the tenant runs its limit of commands with network at once "
					     "(network-tenant-commands)";
				ev.retry_after_s = 1;
			}
			unregister(r, q);
			emit(q, &ev, rc);
			job_free(q);
			continue;
		}
		q->next_run = r->running;
		r->running = q;
		{
			struct sbx_event ev = {.kind = SBX_EV_START, .pid = q->pid};

			emit(q, &ev, 0);
		}
	}
	now = mono_ms();
	pthread_mutex_lock(&r->mu);
	if (r->cancel_dirty) {
		r->cancel_dirty = false;
		for (struct job *j = r->all; j; j = j->next_all)
			if (j->pid > 0)
				apply_control_locked(r, j, now);
	}
	pthread_mutex_unlock(&r->mu);
}

static void arm_timer(struct lane *r, int64_t at, int64_t now)
{
	struct itimerspec its = {0};

	/* An earlier arming stays: it fires early at worst and is re-armed. */
	if (at == NO_DEADLINE || (r->armed > now && r->armed <= at))
		return;
	its.it_value.tv_sec = at / 1000;
	its.it_value.tv_nsec = (at % 1000) * 1000000;
	if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
		its.it_value.tv_nsec = 1;
	timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &its, NULL);
	r->armed = at;
}

static bool should_stop(struct lane *r)
{
	bool stop;

	if (r->running)
		return false;
	pthread_mutex_lock(&r->mu);
	stop = r->stop && !r->pending && !r->at_pool;
	pthread_mutex_unlock(&r->mu);
	return stop;
}

static void set_step(struct lane *r, const char *step)
{
	r->step = step;
}

static void *runner_main(void *arg)
{
	struct lane *r = arg;
	struct epoll_event evs[64];

	sbx_spawner_bind(r->spawner);
	for (;;) {
		int64_t now, next = NO_DEADLINE;
		int n;

		r->busy_since = 0;
		set_step(r, "waiting");
		n = epoll_wait(r->epfd, evs, 64, -1);
		r->busy_since = mono_ms();
		if (n < 0 && errno != EINTR)
			abort(); /* only EBADF/EFAULT/EINVAL: a bug */
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;

			if (p == &r->efd_tag) {
				set_step(r, "starting commands");
				take_control(r);
			} else if (p == &r->tfd_tag) {
				uint64_t v;

				if (read(r->tfd, &v, sizeof(v)) < 0) {
					/* EAGAIN: re-armed meanwhile */
				}
				r->armed = NO_DEADLINE;
			} else {
				set_step(r, "reading output");
				handle_event(r, p, evs[i].events);
			}
		}
		set_step(r, "finishing commands");
		/* Jobs finish only here, after the batch: an event later in the
		 * batch may still point at one. */
		now = mono_ms();
		for (struct job **pj = &r->running; *pj;) {
			struct job *j = *pj;
			int64_t t = job_due(r, j, now);

			if (j->reaped && j->fd[W_STDOUT] < 0 && j->fd[W_STDERR] < 0) {
				*pj = j->next_run;
				unregister(r, j);
				report_exit(r, j);
				job_free(j);
				continue;
			}
			if (t < next)
				next = t;
			pj = &j->next_run;
		}
		arm_timer(r, next, now);
		if (should_stop(r))
			break;
	}
	r->busy_since = 0;
	pthread_mutex_lock(&r->done_mu);
	r->done = true;
	pthread_cond_broadcast(&r->done_cv);
	pthread_mutex_unlock(&r->done_mu);
	return NULL;
}

/* What lane_init made, once its thread is gone (or never started). */
static void lane_release(struct lane *r)
{
	sbx_spawner_free(&r->spawner);
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->efd >= 0)
		close(r->efd);
	if (r->tfd >= 0)
		close(r->tfd);
	pthread_mutex_destroy(&r->mu);
	pthread_mutex_destroy(&r->done_mu);
	pthread_cond_destroy(&r->done_cv);
	free(r->buf);
}

/* The lane's fds and locks; its thread is started by lane_start. */
static int lane_init(struct lane *r, struct sbx_runner *owner, size_t idx)
{
	struct epoll_event ev = {.events = EPOLLIN};
	pthread_condattr_t ca;

	r->owner = owner;
	r->idx = idx;
	r->epfd = r->efd = r->tfd = -1;
	r->armed = NO_DEADLINE;
	r->step = "waiting";
	pthread_mutex_init(&r->mu, NULL);
	pthread_mutex_init(&r->done_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->done_cv, &ca);
	pthread_condattr_destroy(&ca);
	r->buf = xmalloc(READ_BUF);
	/* First: its slots are then the lowest fds free (sandbox/backend.h). */
	int rc = sbx_spawner_new(&r->spawner);
	if (rc < 0)
		return rc;
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (r->epfd < 0 || r->efd < 0 || r->tfd < 0)
		return -errno;
	ev.data.ptr = &r->efd_tag;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->efd, &ev) < 0)
		return -errno;
	ev.data.ptr = &r->tfd_tag;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->tfd, &ev) < 0)
		return -errno;
	return 0;
}

static int lane_start(struct lane *r)
{
	char name[16];
	int rc = -pthread_create(&r->thread, NULL, runner_main, r);

	if (rc)
		return rc;
	r->started = true;
	snprintf(name, sizeof(name), "runner-%zu", r->idx);
	(void)pthread_setname_np(r->thread, name); /* for ps, top and perf */
	return 0;
}

static void wake(struct lane *r)
{
	uint64_t one = 1;

	while (write(r->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

/* Refuse new jobs, cancel every job (shutdown). */
static void lane_cancel_all(struct lane *r, bool stop)
{
	pthread_mutex_lock(&r->mu);
	if (stop)
		r->stop = true;
	for (struct job *j = r->all; j; j = j->next_all)
		j->cancel_req = true;
	r->cancel_dirty = true;
	pthread_mutex_unlock(&r->mu);
	wake(r);
}

/* Wait until the lane's thread has left its loop (or until, absolute
 * CLOCK_MONOTONIC), and join it once; whether it has. */
static bool lane_wait_done(struct lane *r, const struct timespec *until)
{
	int rc = 0;
	bool done, join;

	pthread_mutex_lock(&r->done_mu);
	while (!r->done && r->started && rc == 0)
		rc = until ? pthread_cond_timedwait(&r->done_cv, &r->done_mu, until)
			   : pthread_cond_wait(&r->done_cv, &r->done_mu);
	done = r->done || !r->started;
	join = r->done && r->started && !r->joined;
	if (join)
		r->joined = true;
	pthread_mutex_unlock(&r->done_mu);
	if (join)
		pthread_join(r->thread, NULL);
	return done;
}

static void runner_release(struct sbx_runner *rn)
{
	sbx_netpool_free(&rn->net);
	for (size_t i = 0; i < rn->n; i++)
		lane_release(&rn->lanes[i]);
	free(rn->lanes);
	free(rn);
}

int sbx_runner_new(struct sbx_runner **out, size_t threads)
{
	struct sbx_runner *rn;
	size_t made = 0;
	int rc = 0;

	if (!out || threads < 1 || threads > SBX_RUNNER_MAX_THREADS)
		return -EINVAL;
	rn = xcalloc(1, sizeof(*rn));
	rn->lanes = xcalloc(threads, sizeof(*rn->lanes));
	rn->next_seq = 1;
	sbx_netpool_new(&rn->net);
	for (; made < threads && rc == 0; made++)
		rc = lane_init(&rn->lanes[made], rn, made);
	rn->n = made;
	for (size_t i = 0; i < rn->n && rc == 0; i++)
		rc = lane_start(&rn->lanes[i]);
	if (rc) {
		/* The threads already running own nothing yet: stop them. */
		for (size_t i = 0; i < rn->n; i++)
			if (rn->lanes[i].started)
				lane_cancel_all(&rn->lanes[i], true);
		for (size_t i = 0; i < rn->n; i++)
			lane_wait_done(&rn->lanes[i], NULL);
		runner_release(rn);
		return rc;
	}
	*out = rn;
	return 0;
}

int sbx_runner_stop_within(struct sbx_runner *rn, int64_t timeout_ms)
{
	struct timespec until;
	bool all_done = true;

	if (!rn)
		return 0;
	for (size_t i = 0; i < rn->n; i++)
		lane_cancel_all(&rn->lanes[i], true);
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	/* One deadline for all: each thread was told at once. */
	for (size_t i = 0; i < rn->n; i++)
		all_done = lane_wait_done(&rn->lanes[i], &until) && all_done;
	return all_done ? 0 : -ETIMEDOUT;
}

void sbx_runner_stop(struct sbx_runner *r)
{
	while (r && sbx_runner_stop_within(r, 3600 * 1000) == -ETIMEDOUT)
		;
}

static int64_t lane_busy_ms(struct lane *r, const char **step)
{
	int64_t since = r->busy_since;
	int64_t now = mono_ms();

	if (step)
		*step = r->step;
	return since && now > since ? now - since : 0;
}

int64_t sbx_runner_busy_ms(struct sbx_runner *rn, const char **step)
{
	int64_t worst = -1;

	if (step)
		*step = "stopped";
	for (size_t i = 0; rn && i < rn->n; i++) {
		const char *s;
		int64_t b = lane_busy_ms(&rn->lanes[i], &s);

		if (b > worst) {
			worst = b;
			if (step)
				*step = s;
		}
	}
	return worst > 0 ? worst : 0;
}

void sbx_runner_net_config(struct sbx_runner *rn, const struct sbx_netpool_config *c)
{
	if (rn)
		sbx_netpool_configure(rn->net, c);
}

void sbx_runner_net_counts(struct sbx_runner *rn, unsigned *waiting, unsigned *running)
{
	*waiting = *running = 0;
	if (rn)
		sbx_netpool_counts(rn->net, waiting, running);
}

void sbx_runner_free(struct sbx_runner **pr)
{
	if (!pr || !*pr)
		return;
	sbx_runner_stop(*pr);
	runner_release(*pr);
	*pr = NULL;
}

/* The lane to take a new job: fewest waiting to start (a spawn blocks its
 * thread, and a stuck thread's queue only grows), then fewest owned; the
 * scan starts at a rotating lane, so ties go round. */
static struct lane *pick_lane(struct sbx_runner *rn)
{
	size_t start = atomic_fetch_add(&rn->rr, 1) % rn->n, best = start;

	for (size_t k = 1; k < rn->n; k++) {
		size_t i = (start + k) % rn->n;
		const struct lane *a = &rn->lanes[i], *b = &rn->lanes[best];

		if (a->queued < b->queued || (a->queued == b->queued && a->active < b->active))
			best = i;
	}
	return &rn->lanes[best];
}

/* The lane owning job handle h, or NULL for a handle no lane made. */
static struct lane *lane_of(struct sbx_runner *rn, uint64_t h)
{
	return rn && h ? &rn->lanes[h % rn->n] : NULL;
}

int sbx_runner_submit(struct sbx_runner *rn, const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx,
		      uint64_t *job)
{
	struct lane *r;
	struct job *j;

	if (!rn || !req || !cb || !req->backend || !req->spawn.command) {
		struct sbx_rootimg_ref *img = req ? req->rootimg : NULL;
		sbx_rootimg_close(&img);
		return -EINVAL;
	}
	j = job_copy(req);
	j->cb = cb;
	j->ctx = ctx;
	r = pick_lane(rn);
	pthread_mutex_lock(&r->mu);
	if (r->stop) {
		pthread_mutex_unlock(&r->mu);
		job_free(j);
		return -ESHUTDOWN;
	}
	j->id = atomic_fetch_add(&rn->next_seq, 1) * rn->n + r->idx;
	j->req.spawn.seq = j->id; /* the server's name for its cgroup */
	j->next_all = r->all;
	r->all = j;
	if (r->pending_tail)
		r->pending_tail->next_q = j;
	else
		r->pending = j;
	r->pending_tail = j;
	r->active++;
	r->queued++;
	if (job)
		*job = j->id;
	pthread_mutex_unlock(&r->mu);
	wake(r);
	return 0;
}

static struct job *find_locked(struct lane *r, uint64_t job)
{
	for (struct job *j = r->all; j; j = j->next_all)
		if (j->id == job)
			return j;
	return NULL;
}

int sbx_runner_cancel(struct sbx_runner *rn, uint64_t job)
{
	struct lane *r = lane_of(rn, job);
	struct job *j;

	if (!rn)
		return -EINVAL;
	if (!r)
		return -ESRCH;
	pthread_mutex_lock(&r->mu);
	j = find_locked(r, job);
	if (j)
		j->cancel_req = r->cancel_dirty = true;
	pthread_mutex_unlock(&r->mu);
	if (j)
		wake(r);
	return j ? 0 : -ESRCH;
}

int sbx_runner_kill(struct sbx_runner *rn, uint64_t job)
{
	struct lane *r = lane_of(rn, job);
	struct job *j;

	if (!rn)
		return -EINVAL;
	if (!r)
		return -ESRCH;
	pthread_mutex_lock(&r->mu);
	j = find_locked(r, job);
	if (j)
		j->kill_req = j->cancel_req = r->cancel_dirty = true;
	pthread_mutex_unlock(&r->mu);
	if (j)
		wake(r);
	return j ? 0 : -ESRCH;
}

#define STDIN_BUFFER_DEFAULT (64 * 1024)
#define TTY_EOF '\x04' /* VEOF of a fresh terminal: ^D */

static int queue_stdin_locked(struct job *j, const void *p, size_t n, bool eof)
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

int sbx_runner_stdin(struct sbx_runner *rn, uint64_t job, const void *p, size_t n, bool eof, size_t *pending)
{
	struct lane *r = lane_of(rn, job);
	struct job *j;
	int rc = -ESRCH;

	if (!rn)
		return -EINVAL;
	if (!r)
		return -ESRCH;
	pthread_mutex_lock(&r->mu);
	j = find_locked(r, job);
	if (j) {
		rc = queue_stdin_locked(j, p, n, eof);
		if (rc == 0)
			r->cancel_dirty = true;
		if (pending)
			*pending = j->in_len;
	}
	pthread_mutex_unlock(&r->mu);
	if (rc == 0)
		wake(r);
	return rc;
}

int sbx_runner_resize(struct sbx_runner *rn, uint64_t job, unsigned short cols, unsigned short rows)
{
	struct lane *r = lane_of(rn, job);
	struct job *j;
	int rc = -ESRCH;

	if (!rn)
		return -EINVAL;
	if (!r)
		return -ESRCH;
	pthread_mutex_lock(&r->mu);
	j = find_locked(r, job);
	if (j && !j->req.tty) {
		rc = -ENOTTY;
	} else if (j) {
		j->cols = cols;
		j->rows = rows;
		j->resize_req = r->cancel_dirty = true;
		rc = 0;
	}
	pthread_mutex_unlock(&r->mu);
	if (rc == 0)
		wake(r);
	return rc;
}

void sbx_runner_cancel_all(struct sbx_runner *rn)
{
	for (size_t i = 0; rn && i < rn->n; i++)
		lane_cancel_all(&rn->lanes[i], false);
}

size_t sbx_runner_active(struct sbx_runner *rn)
{
	size_t n = 0;

	for (size_t i = 0; rn && i < rn->n; i++)
		n += rn->lanes[i].active;
	return n;
}

size_t sbx_runner_threads(const struct sbx_runner *rn)
{
	return rn ? rn->n : 0;
}

int sbx_runner_thread_stats(struct sbx_runner *rn, size_t i, struct sbx_runner_thread_stats *st)
{
	struct lane *r;

	if (!rn || !st || i >= rn->n)
		return -EINVAL;
	r = &rn->lanes[i];
	st->busy_ms = lane_busy_ms(r, &st->step);
	st->jobs = r->active;
	st->queued = r->queued;
	st->spawns = r->spawns;
	st->spawn_ns = r->spawn_ns;
	return 0;
}

void sbx_runner_spawn_overlap(struct sbx_runner *rn, uint64_t *counts, size_t n)
{
	for (size_t k = 0; k < n; k++)
		counts[k] = 0;
	for (size_t k = 0; rn && n && k < SBX_RUNNER_MAX_THREADS; k++)
		counts[k < n ? k : n - 1] += rn->overlap[k];
}
