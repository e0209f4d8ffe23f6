/* The runner's public calls (sandbox/runner.h) and its lanes' life: a
 * lane's fds, locks and thread (rn_main, handed to pthread_create),
 * submission to the least-loaded lane, cancel, kill, stdin, resize and
 * the figures, stop and free. The top floor: calls runner_loop.c (the
 * wakeup) and runner_job.c, runner_io.c below it. */
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
#include "sandbox/runner_int.h"

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
	int rc = -pthread_create(&r->thread, NULL, rn_main, r);

	if (rc)
		return rc;
	r->started = true;
	snprintf(name, sizeof(name), "runner-%zu", r->idx);
	(void)pthread_setname_np(r->thread, name); /* for ps, top and perf */
	return 0;
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
	rn_wake(r);
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
	j = rn_job_copy(req);
	j->cb = cb;
	j->ctx = ctx;
	r = pick_lane(rn);
	pthread_mutex_lock(&r->mu);
	if (r->stop) {
		pthread_mutex_unlock(&r->mu);
		rn_job_free(j);
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
	rn_wake(r);
	return 0;
}

static struct job *find_locked(struct lane *r, uint64_t job)
{
	for (struct job *j = r->all; j; j = j->next_all)
		if (j->id == job)
			return j;
	return NULL;
}

/* Cancel asks the job to stop; kill also asks for it to be killed outright. */
static int runner_stop(struct sbx_runner *rn, uint64_t job, bool kill)
{
	struct lane *r = lane_of(rn, job);
	struct job *j;

	if (!rn)
		return -EINVAL;
	if (!r)
		return -ESRCH;
	pthread_mutex_lock(&r->mu);
	j = find_locked(r, job);
	if (j) {
		if (kill)
			j->kill_req = true;
		j->cancel_req = r->cancel_dirty = true;
	}
	pthread_mutex_unlock(&r->mu);
	if (j)
		rn_wake(r);
	return j ? 0 : -ESRCH;
}

int sbx_runner_cancel(struct sbx_runner *rn, uint64_t job)
{
	return runner_stop(rn, job, false);
}

int sbx_runner_kill(struct sbx_runner *rn, uint64_t job)
{
	return runner_stop(rn, job, true);
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
		rc = rn_queue_stdin_locked(j, p, n, eof);
		if (rc == 0)
			r->cancel_dirty = true;
		if (pending)
			*pending = j->in_len;
	}
	pthread_mutex_unlock(&r->mu);
	if (rc == 0)
		rn_wake(r);
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
		rn_wake(r);
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
