#pragma once
/* A few long-lived runner threads own the child processes. Each command
 * belongs to the thread that spawned it for its whole life (bwrap's
 * --die-with-parent is PR_SET_PDEATHSIG, which follows the spawning
 * *thread*): that thread spawns it through the backend, waits on its
 * pipes, pidfd and its timer with epoll, feeds the collectors, fires
 * timeouts and idle timeouts, writes its stdin, cancels, reaps, throttles
 * heartbeats and reports events through a callback. A submission goes to
 * the least-loaded thread (fewest commands waiting to start, then fewest
 * owned); the job handle names its thread, so cancel, kill, stdin and
 * resize reach the owner without a shared table. A spawn blocks only its
 * own thread (clone with CLONE_VFORK waits for the child's execve), so
 * starts on different threads overlap. No HTTP here. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandbox/backend.h"
#include "sandbox/egress/gateway.h"

struct sbx_workspace;
struct sbx_rootimg_ref;
struct sbx_runner;

struct sbx_exec_req {
	struct sbx_backend *backend;
	struct sbx_workspace *ws;   /* for spill files; also gives the host dir */
	struct sbx_spawn_req spawn; /* std*_fd are filled in by the runner */
	const char *id;		    /* exec id, names the spill files */
	uint64_t timeout_ms;	    /* 0: none */
	uint64_t idle_timeout_ms;   /* 0: none */
	uint64_t kill_grace_ms;	    /* SIGTERM -> SIGKILL delay */
	const void *stdin_data;	    /* copied at submit; closed after written unless stdin_pipe */
	size_t stdin_len;
	/* stdin stays open after stdin_data for sbx_runner_stdin; what waits
	 * to be written is bounded by stdin_buffer_max (beyond: -EAGAIN). */
	bool stdin_pipe;
	size_t stdin_buffer_max;
	/* A pseudo-terminal of cols x rows: the runner holds the master, the
	 * slave is the command's stdin, stdout and stderr (output arrives as
	 * stdout); implies stdin_pipe. */
	bool tty;
	unsigned short cols, rows;
	size_t max_output_bytes; /* per stream window */
	uint64_t spill_cap;	 /* per stream spill file cap */
	uint64_t heartbeat_ms;	 /* 0: no heartbeats */
	bool want_output_events; /* deliver SBX_EV_OUTPUT chunks */
	/* The root image spawn.rootfs is of (sandbox/rootimg.h), or NULL:
	 * sbx_runner_submit takes it whatever it returns, and closes it when
	 * the command has ended (the image cannot be removed meanwhile). */
	struct sbx_rootimg_ref *rootimg;
};

struct sbx_exec_result {
	int exit_code; /* status, 128+N for signal N, 124 on timeout */
	bool timed_out, idle, cancelled, truncated;
	/* Why it ended, as its cgroup saw it (sandbox/cgroup.h): the OOM
	 * killer ended a task of it (its memory limit or its tenant's
	 * budget); a pids limit refused one of its forks. uncontained: it ran
	 * without cgroups (rlimits only: sbx_backend_contained false). */
	bool oom_killed, pids_limited, uncontained;
	/* A command with network (net_allow): what its egress gateway refused
	 * (sandbox/egress/gateway.h), for the model to read. */
	bool networked;
	struct sbx_egress_summary egress;
	char *stdout_text; /* valid UTF-8, window (see collector.h) */
	size_t stdout_len;
	char *stderr_text;
	size_t stderr_len;
	uint64_t stdout_bytes, stderr_bytes;
	char *stdout_spill; /* wire path or NULL */
	char *stderr_spill;
	/* The spill file holds the whole stream, so the window can be
	 * rebuilt from it (collector.h); window: max_output_bytes. */
	bool stdout_spill_whole, stderr_spill_whole;
	size_t window;
	int64_t started_at_ms, finished_at_ms; /* Unix epoch ms */
};
void sbx_exec_result_clear(struct sbx_exec_result *r);

enum sbx_event_kind { SBX_EV_START, SBX_EV_OUTPUT, SBX_EV_HEARTBEAT, SBX_EV_EXIT };

struct sbx_event {
	enum sbx_event_kind kind;
	uint64_t job; /* the handle from sbx_runner_submit */
	int64_t at_ms;
	/* SBX_EV_START */
	int pid;
	/* SBX_EV_OUTPUT */
	int stream;	  /* 1 stdout, 2 stderr */
	const char *data; /* raw bytes, borrowed for the call */
	size_t len;
	/* SBX_EV_HEARTBEAT */
	int64_t elapsed_ms;
	uint64_t stdout_bytes, stderr_bytes;
	int64_t last_output_at_ms; /* 0: nothing printed yet */
	const char *tail;	   /* last line, bounded, UTF-8, borrowed */
	/* SBX_EV_EXIT */
	struct sbx_exec_result *result; /* the callee may take its strings (set them NULL) */
	/* SBX_EV_EXIT without result, from a provider that knows more than
	 * an errno (routes/provider.h: the back server's message and
	 * Retry-After); the runner leaves them NULL and 0. */
	const char *message;
	int64_t retry_after_s;
};

/* Called on the job's runner thread (jobs on different threads call
 * concurrently; one job's events never overlap); must not block. After SBX_EV_EXIT the
 * runner forgets the job and never calls again for it. Submit only queues:
 * a job that cannot start is reported as SBX_EV_EXIT with result == NULL
 * and spawn_error set (negative errno, or -SBX_E_BACKEND); otherwise
 * spawn_error is 0. */
typedef void (*sbx_event_cb)(void *ctx, const struct sbx_event *ev, int spawn_error);

#define SBX_RUNNER_MAX_THREADS 64

/* threads: 1..SBX_RUNNER_MAX_THREADS (else -EINVAL), each started at
 * once and named runner-<i>. */
int sbx_runner_new(struct sbx_runner **out, size_t threads);
/* Network on request: a job with spawn.net_allow gets its namespace
 * from the runner's setup threads (sandbox/netpool.h) before its runner
 * thread spawns it, so names that resolve slowly hold no runner thread.
 * Configure before the first submission (defaults otherwise). A tenant's
 * network job beyond c->commands_per_tenant ends with spawn_error
 * -SBX_E_TOO_MANY. Counts: setups waiting for a thread and running. */
struct sbx_netpool_config;
void sbx_runner_net_config(struct sbx_runner *r, const struct sbx_netpool_config *c);
void sbx_runner_net_counts(struct sbx_runner *r, unsigned *waiting, unsigned *running);
/* Refuse new jobs (submit: -ESHUTDOWN), cancel every running job, wait
 * until each is reaped and reported, and stop the threads. Afterwards the
 * runner stays valid memory: cancel answers -ESRCH. Idempotent. Never call
 * it from an event callback (it waits for the thread running it). */
void sbx_runner_stop(struct sbx_runner *r);
/* sbx_runner_stop, then free. */
void sbx_runner_free(struct sbx_runner **r);

/* Queue a job on the least-loaded thread, which spawns it. The request
 * is deep-copied. *job receives a handle (never 0, increasing in the
 * order of submission, below 2^63; its thread is handle % threads). It is
 * also the spawn's seq. cb/ctx receive every event. */
int sbx_runner_submit(struct sbx_runner *r, const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx,
		      uint64_t *job);
/* Ask a job to stop as a cancel (SIGTERM to the group, SIGKILL after the
 * grace). -ESRCH if it has already been reported finished. */
int sbx_runner_cancel(struct sbx_runner *r, uint64_t job);
/* Stop a job at once: SIGKILL to its group, no grace (its session is
 * being removed); reported as cancelled. -ESRCH as cancel. */
int sbx_runner_kill(struct sbx_runner *r, uint64_t job);
/* Queue n bytes for the job's stdin, all or nothing, and with eof close
 * it once they are written (on a terminal eof queues the EOF character,
 * ^D, instead: the terminal stays). Never blocks. *pending (optional):
 * bytes still queued afterwards. Errors: -ESRCH (not running),
 * -ENOTCONN (started without stdin_pipe), -EPIPE (stdin closed: eof
 * was sent, or the command closed it), -EAGAIN (the queue would exceed
 * stdin_buffer_max: nothing was taken; the command is not reading),
 * -EFBIG (n alone exceeds stdin_buffer_max). */
int sbx_runner_stdin(struct sbx_runner *r, uint64_t job, const void *p, size_t n, bool eof, size_t *pending);
/* Set a terminal job's window size (the foreground job gets SIGWINCH).
 * -ESRCH, -ENOTTY (not a terminal). */
int sbx_runner_resize(struct sbx_runner *r, uint64_t job, unsigned short cols, unsigned short rows);
/* Cancel every job (shutdown). */
void sbx_runner_cancel_all(struct sbx_runner *r);
/* The watchdog's view of the worst thread: how long it has been busy in
 * its current turn (0 while it waits in epoll, as an idle runner does),
 * and what it is doing (a static string, e.g. "starting commands"). A turn
 * never waits on anything a tenant controls, so a long one is a defect:
 * /readyz turns 503 past a few seconds. Any thread may call it. */
int64_t sbx_runner_busy_ms(struct sbx_runner *r, const char **step);
/* sbx_runner_stop with a bound: -ETIMEDOUT when a thread has not ended
 * within timeout_ms (it is then left running; the caller exits the
 * process), else 0. */
int sbx_runner_stop_within(struct sbx_runner *r, int64_t timeout_ms);
/* Number of jobs running or queued, all threads. */
size_t sbx_runner_active(struct sbx_runner *r);

/* One thread's figures (any thread may ask; each is read atomically, the
 * set is not a snapshot). */
struct sbx_runner_thread_stats {
	int64_t busy_ms;   /* as sbx_runner_busy_ms, this thread */
	const char *step;  /* static */
	size_t jobs;	   /* owned: queued or running */
	size_t queued;	   /* submitted, not started yet (a start in progress included) */
	uint64_t spawns;   /* sbx_backend_spawn calls made */
	uint64_t spawn_ns; /* time inside them (CLONE_VFORK: until the child's execve) */
};
size_t sbx_runner_threads(const struct sbx_runner *r);
/* -EINVAL when i >= sbx_runner_threads. */
int sbx_runner_thread_stats(struct sbx_runner *r, size_t i, struct sbx_runner_thread_stats *st);
/* How much starts overlapped: counts[k] = spawns that began while k other
 * threads were inside a spawn (k < n; the last slot takes the rest). A
 * count, not a time: it does not depend on the machine's load. */
void sbx_runner_spawn_overlap(struct sbx_runner *r, uint64_t *counts, size_t n);
