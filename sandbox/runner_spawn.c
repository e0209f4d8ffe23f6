/* Starting a job on its runner thread: the child's std fds (three pipes
 * or a pseudo-terminal), the counted sbx_backend_spawn, and the epoll
 * registration of the pidfd and the pipes. Calls runner_io.c (stdin's
 * first write or close) and runner_job.c. */
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
int rn_job_start(struct lane *r, struct job *j)
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
	rc = rn_watch(r, j, W_PIDFD, EPOLLIN);
	if (!rc)
		rc = set_nonblock(j->fd[W_STDOUT]);
	if (!rc && j->fd[W_STDERR] >= 0)
		rc = set_nonblock(j->fd[W_STDERR]);
	if (!rc)
		rc = rn_watch(r, j, W_STDOUT, EPOLLIN);
	if (!rc && j->fd[W_STDERR] >= 0)
		rc = rn_watch(r, j, W_STDERR, EPOLLIN);
	if (rc) {
		/* It would run unobserved: kill it, reap it, report a failure. */
		kill(-pid, SIGKILL);
		while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
			;
		sbx_backend_reap(j->req.backend, &j->req.spawn, NULL, NULL);
		for (int k = 0; k < W_COUNT; k++)
			rn_unwatch(r, j, k);
		j->pid = -1;
		goto out;
	}
	pthread_mutex_lock(&r->mu);
	if ((!j->req.stdin_pipe && j->in_len == 0) || set_nonblock(j->fd[W_STDIN]) ||
	    rn_watch(r, j, W_STDIN, 0))
		rn_close_stdin_locked(r, j);
	else
		rn_feed_stdin_locked(r, j);
	pthread_mutex_unlock(&r->mu);
	j->last_out_mono = j->start_mono;
	if (j->req.timeout_ms)
		j->timeout_at = rn_add_ms(j->start_mono, j->req.timeout_ms);
	if (j->req.heartbeat_ms)
		j->next_hb = rn_add_ms(j->start_mono, j->req.heartbeat_ms);
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
