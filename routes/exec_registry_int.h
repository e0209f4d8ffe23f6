#pragma once
/* Inside the exec registry (routes/exec_registry.h): its structs and the
 * functions its files share. Included by those files only.
 *
 * The files stand on floors, top first; each calls only into the files
 * listed below it, never up (a function handed down as a pointer, the
 * runner callback or a thread's main, is no call: the top file passes
 * it on). exec_registry.h stays the face of them all: the files below
 * define some of its functions.
 *
 *   exec_registry.c  the registry's life (new, wake, flush, free), the
 *                    start of an exec and its steps, progress and
 *                    handles, DELETE /session's stop and a tenant's end.
 *                    Calls everything below; starts the completion and
 *                    approvals threads and hands the runner xr_on_event.
 *   exec_approval.c  a command waiting for approval: parking it, the
 *                    decisions, cancels, the approvals thread. Calls
 *                    answer, complete and jobs.
 *   exec_answer.c    the requests: waiters and their suspension, the
 *                    first answer, answers from an earlier exec of the
 *                    same id, 404 and 409. Calls complete and jobs.
 *   exec_complete.c  the exit: result JSON, the store row, waking the
 *                    waiters, the completion thread, the runner's event
 *                    callback. Calls jobs only.
 *   exec_jobs.c      the floor: job references, lookup, shared helpers.
 *                    Calls nothing above.
 *
 * Every function here starts xr_; its comment is at its definition. */
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "routes/exec_registry.h"
#include "sandbox/runner.h"
#include "store/store.h"

struct http_req;

#define TAIL_BYTES 1024

struct waiter {
	struct http_req *r;
	struct waiter *next;
};

/* A command waiting for approval: what to run once approved (copies). */
struct pending {
	struct sbx_exec_req run; /* its pointers lead into the copies below */
	char *command, *cwd_rel, *net_allow, *net_tenant, *net_sub, *rootfs;
	char **env; /* run.rootimg: the root image, held (owned) until submitted */
	void *stdin_data;
	int64_t deadline_ms; /* monotonic: rejected when undecided by then */
	bool deciding;	     /* under registry lock: approved, rejected or cancelled */
};

/* A job's share of its tenant's limits, released when it ends: a pending
 * slot while it waits for approval, an exec slot once it runs, none when
 * it was cancelled while it waited for one (routes/admit.h). */
enum job_slot { SLOT_PENDING, SLOT_EXEC, SLOT_NONE };

struct exec_job {
	struct app *app;
	struct tenant *tenant; /* referenced until the exit */
	char id[72];
	uint64_t handle;	       /* the runner's */
	int64_t watch;		       /* disconnect watch of the first request */
	struct http_hub_channel *chan; /* live events */
	int refs;		       /* under registry lock */
	bool finished;
	struct waiter *waiters; /* under registry lock */
	struct exec_job *next;
	/* The exit, set by whoever queues it, read by the completion thread. */
	json_t *result;	     /* NULL: never started */
	bool spill_whole[2]; /* stdout, stderr: the row may keep less (routes/exec_row.h) */
	size_t window;
	int error;		     /* with result NULL */
	enum store_exec_state state; /* with result: exited, timed_out, cancelled */
	int exit_code;
	int64_t finished_at_ms, duration_ms;
	struct exec_job *done_next; /* under done_mu */
	/* The waiting request that records this exit itself (under done_mu):
	 * xr_queue_exit resumes it rather than wake the completion thread. */
	struct http_req *direct;
	/* set at the start, read by the completion thread and lookups */
	struct sbx_snapshot *before; /* files_changed at the exit */
	char *session;		     /* the session key, for DELETE /session */
	size_t session_len;
	/* progress for GET /exec/{id}: the runner thread writes, under pmu */
	pthread_mutex_t pmu;
	uint64_t bytes[2]; /* stdout, stderr */
	int64_t last_output_at, started_mono;
	char tail[TAIL_BYTES];
	size_t tail_len;
	/* Approval. */
	struct pending *pend;  /* non-NULL: it waited (or waits) for approval; owned */
	char *requested_by;    /* the requesting token's sub; owned */
	char *reason;	       /* with error: the message (-SBX_E_REJECTED, or a remote's); owned */
	int64_t retry_after_s; /* with error: a remote's Retry-After (0: none) */
	int64_t max_execs;
	int64_t held_bytes;	       /* with SLOT_PENDING: the inline stdin it keeps (counted) */
	enum job_slot slot;	       /* which of its tenant's slots it holds */
	_Atomic bool hung_up;	       /* the waiting client went away (the watch thread says) */
	bool hangup_handled;	       /* under registry lock */
	struct exec_job *expired_next; /* the approvals thread's list */
};

struct route_execs {
	struct app *app;
	struct sbx_exec_req base;
	pthread_mutex_t mu;
	struct exec_job *jobs;
	/* Exits waiting for the completion thread, oldest first. */
	pthread_mutex_t done_mu;
	pthread_cond_t done_wake, done_idle;
	struct exec_job *done_head, *done_tail;
	bool done_busy, done_stop;
	size_t done_direct;  /* exits handed to a waiter, not recorded yet */
	pthread_cond_t gone; /* under mu: a job left the registry */
	pthread_t done_thread;
	/* Approval deadlines and hang-ups of waiting clients (under mu). */
	pthread_cond_t pend_wake;
	bool pend_stop;
	pthread_t pend_thread;
};

/* A suspended request's view of its exec. */
struct exec_wait {
	struct exec_job *job;
	json_t *result; /* set before the resume */
	int error;	/* or this */
	char *reason;	/* with error: its message, when there is one */
	int64_t retry_after_s;
	bool records; /* under done_mu: resumed to record the exit (xr_complete) first */
};

/* exec_jobs.c */
void xr_job_put_locked(struct exec_job *j);
struct exec_job *xr_find_locked(struct route_execs *e, const char *tenant, int64_t life, const char *id);
json_t *xr_time_json(int64_t ms);

/* exec_complete.c */
void xr_complete(struct exec_job *j, struct http_req *self);
void *xr_completion_main(void *arg);
void xr_set_exit(struct exec_job *j, const struct sbx_event *ev, int spawn_error);
void xr_queue_exit(struct exec_job *j);
void xr_take_direct(struct http_req *r, bool gone);
void xr_on_event(void *ctx, const struct sbx_event *ev, int spawn_error);

/* exec_answer.c */
json_t *xr_start_json(const char *id, const char *command, const char *session, size_t session_len,
		      const char *cwd, int64_t started_at);
void xr_wait_on_locked(struct http_req *r, struct exec_job *j);
void xr_watch_hangup(struct http_req *r, struct exec_job *j);
void xr_first_answer_locked(struct http_req *r, struct exec_job *j, const struct store_exec *row,
			    const struct route_exec_opts *o);
int xr_answer_existing(struct http_req *r, const char *id, const char *hash, const struct route_exec_opts *o);

/* exec_approval.c */
bool xr_take_decision_locked(struct exec_job *j);
void xr_end_cancelled(struct exec_job *j);
int xr_park_locked(struct http_req *r, struct exec_job *j, const struct store_exec *row,
		   struct sbx_exec_req *run, const struct route_exec_opts *o);
int xr_end_withdrawn_locked(struct http_req *r, struct exec_job *j, const struct store_exec *row,
			    const struct route_exec_opts *o);
void *xr_approvals_main(void *arg);
