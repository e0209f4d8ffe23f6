/* A runner thread's loop (rn_main): epoll over its jobs' fds, its
 * wakeup eventfd and its timer; new jobs and what HTTP threads asked
 * (cancel, kill, stdin, resize) taken under the lane's lock; network
 * setups sent to the pool and queued back; finished jobs reported.
 * Calls runner_exit.c, runner_spawn.c, runner_io.c and runner_job.c. */
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

static void handle_event(struct lane *r, struct watch *w, uint32_t events)
{
	struct job *j = w->job;

	switch (w->kind) {
	case W_STDIN:
		if (j->fd[W_STDIN] < 0)
			break;
		if (events & (EPOLLERR | EPOLLHUP)) {
			pthread_mutex_lock(&r->mu);
			rn_close_stdin_locked(r, j);
			pthread_mutex_unlock(&r->mu);
		} else {
			rn_feed_stdin(r, j);
		}
		break;
	case W_STDOUT:
	case W_STDERR:
		rn_read_stream(r, j, w->kind);
		break;
	case W_PIDFD:
		if (j->fd[W_PIDFD] >= 0)
			rn_reap(r, j);
		break;
	default:
		break;
	}
}

/* What HTTP threads asked of a started job (under r->mu). */
static void apply_control_locked(struct lane *r, struct job *j, int64_t now)
{
	if (j->kill_req) {
		j->kill_req = j->cancel_req = false;
		rn_apply_kill(j);
	}
	if (j->cancel_req) {
		j->cancel_req = false;
		rn_apply_cancel(j, now);
	}
	if (j->in_dirty)
		rn_feed_stdin_locked(r, j);
	if (j->resize_req && !j->reaped && j->req.tty && j->fd[W_STDOUT] >= 0) {
		struct winsize ws = {.ws_row = j->rows, .ws_col = j->cols};

		(void)ioctl(j->fd[W_STDOUT], TIOCSWINSZ, &ws);
	}
	j->resize_req = false;
}

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
	rn_wake(r);
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
			rc = rn_job_start(r, q);
		r->queued--;
		if (rc) {
			struct sbx_event ev = {.kind = SBX_EV_EXIT};

			if (rc == -SBX_E_TOO_MANY && q->net_allow && !q->net_sent) {
				ev.message = "the tenant runs its limit of commands with network at once "
					     "(network-tenant-commands)";
				ev.retry_after_s = 1;
			}
			rn_unregister(r, q);
			rn_emit(q, &ev, rc);
			rn_job_free(q);
			continue;
		}
		q->next_run = r->running;
		r->running = q;
		{
			struct sbx_event ev = {.kind = SBX_EV_START, .pid = q->pid};

			rn_emit(q, &ev, 0);
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

void *rn_main(void *arg)
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
			int64_t t = rn_job_due(r, j, now);

			if (j->reaped && j->fd[W_STDOUT] < 0 && j->fd[W_STDERR] < 0) {
				*pj = j->next_run;
				rn_unregister(r, j);
				rn_report_exit(r, j);
				rn_job_free(j);
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

void rn_wake(struct lane *r)
{
	uint64_t one = 1;

	while (write(r->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}
