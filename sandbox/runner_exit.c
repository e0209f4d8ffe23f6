/* A running job's end: its deadlines (timeout, idle timeout, the kill
 * after the grace, heartbeats, the drain of pipes a grandchild holds),
 * cancel and kill, the reap and the exit report, and its removal from
 * the lane's table. Calls runner_io.c and runner_job.c. */
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
	j->kill_at = rn_add_ms(now, j->req.kill_grace_ms);
	j->timeout_at = NO_DEADLINE;
	/* heartbeats go on through the grace: it still runs */
}

void rn_reap(struct lane *r, struct job *j)
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
	rn_unwatch(r, j, W_PIDFD);
	pthread_mutex_lock(&r->mu);
	rn_close_stdin_locked(r, j);
	pthread_mutex_unlock(&r->mu);
	j->timeout_at = j->kill_at = j->next_hb = NO_DEADLINE;
	j->drain_until = rn_add_ms(mono_ms(), DRAIN_MS);
}

void rn_report_exit(struct lane *r, struct job *j)
{
	struct sbx_exec_result res = {0};
	struct sbx_event ev = {.kind = SBX_EV_EXIT, .result = &res};
	const char *sp;

	for (int k = 0; k < W_COUNT; k++)
		rn_unwatch(r, j, k);
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
	rn_emit(j, &ev, 0);
	sbx_exec_result_clear(&res);
}

/* Forget the job: out of r->all (cancel now answers -ESRCH), one less active. */
void rn_unregister(struct lane *r, struct job *j)
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
	rn_emit(j, &ev, 0);
}

static int64_t idle_at(const struct job *j)
{
	if (!j->req.idle_timeout_ms || j->reaped || j->term_sent)
		return NO_DEADLINE;
	return rn_add_ms(j->last_out_mono, j->req.idle_timeout_ms);
}

/* Fire what is due; returns the job's next deadline. */
int64_t rn_job_due(struct lane *r, struct job *j, int64_t now)
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
			j->next_hb = rn_add_ms(now, j->req.heartbeat_ms);
		}
	} else if (j->drain_until <= now) {
		/* a detached grandchild holds the pipes: stop waiting */
		rn_unwatch(r, j, W_STDOUT);
		rn_unwatch(r, j, W_STDERR);
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

void rn_apply_cancel(struct job *j, int64_t now)
{
	/* the first of timeout and cancel wins; an exited job is done */
	if (j->reaped || j->term_sent)
		return;
	j->cancelled = true;
	stop_job(j, now);
}

void rn_apply_kill(struct job *j)
{
	if (j->reaped || j->kill_sent)
		return;
	if (!j->term_sent)
		j->cancelled = true;
	signal_group(j, SIGKILL);
	j->term_sent = j->kill_sent = true;
	j->kill_at = j->timeout_at = NO_DEADLINE;
}
