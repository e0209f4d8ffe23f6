#pragma once
/* Internal to sandbox/runner*.c: the job, the lane (one runner thread
 * and the jobs it owns) and the runner, and the functions two of the
 * files share (prefix rn_). The files stand on floors, each calling
 * only those below it: runner.c (the public calls, the lanes' life) on
 * top, then runner_loop.c (the thread's loop), runner_exit.c (deadlines,
 * cancel, kill, reap, the exit report), runner_spawn.c (the child's
 * fds and its spawn), runner_io.c (output and stdin) and runner_job.c
 * (the job's copy and free, events, epoll registration) at the bottom.
 * runner.h stays the public interface. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/runner.h"

struct sbx_collector;
struct sbx_spawner;

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

/* runner_job.c */
int64_t rn_add_ms(int64_t t, uint64_t ms);
void rn_job_free(struct job *j);
struct job *rn_job_copy(const struct sbx_exec_req *req);
void rn_emit(struct job *j, struct sbx_event *ev, int spawn_error);
void rn_unwatch(struct lane *r, struct job *j, int k);
int rn_watch(struct lane *r, struct job *j, int k, uint32_t events);

/* runner_io.c */
void rn_close_stdin_locked(struct lane *r, struct job *j);
void rn_feed_stdin_locked(struct lane *r, struct job *j);
void rn_feed_stdin(struct lane *r, struct job *j);
void rn_read_stream(struct lane *r, struct job *j, int k);
int rn_queue_stdin_locked(struct job *j, const void *p, size_t n, bool eof);

/* runner_spawn.c */
int rn_job_start(struct lane *r, struct job *j);

/* runner_exit.c */
void rn_reap(struct lane *r, struct job *j);
void rn_report_exit(struct lane *r, struct job *j);
void rn_unregister(struct lane *r, struct job *j);
int64_t rn_job_due(struct lane *r, struct job *j, int64_t now);
void rn_apply_cancel(struct job *j, int64_t now);
void rn_apply_kill(struct job *j);

/* runner_loop.c */
void rn_wake(struct lane *r);
void *rn_main(void *arg);
