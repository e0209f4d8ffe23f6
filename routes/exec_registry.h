#pragma once
/* The execs running now, by (tenant, id): for each, the runner job, the
 * requests waiting for its result, its live event channel and the
 * disconnect watch of the request that started it. Also idempotency (a
 * POST /exec repeating an id is answered from that exec) and the runner's
 * event callback. routes/exec.c parses and checks requests; this file
 * starts them and answers them.
 *
 * Threads: HTTP threads start execs, wait on them and look them up, under
 * one registry lock. The runner thread publishes progress to the hub and,
 * at an exit, only hands the job on (it never waits on the store or on
 * the registry lock, as runner.h asks). Whoever records an exit writes the
 * store row first, then publishes the `exit` event, frees the tenant's
 * slot and resumes the waiting requests: a client that is answered (or a
 * stream that ends) always finds the result in the store. That is the
 * first waiting request, which the runner thread resumes directly (its
 * HTTP thread records, then answers: one thread hand-off, not two), or,
 * when no request waits (a background or streamed exec, or its waiter
 * left) or files_changed is to be computed (a walk of the workspace), a
 * completion thread owned by the registry, in queue order. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct app;
struct http_req;
struct route_execs;
struct sbx_exec_req;
struct sbx_snapshot;
struct store_exec;

/* Create the registry of app a and start its completion thread. base
 * (copied) holds what every command runs with: backend, limits, grace,
 * spill cap, heartbeat. Aborts when no thread can be made. */
void route_execs_new(struct route_execs **out, struct app *a, const struct sbx_exec_req *base);
/* Wait until every exit queued before this call has been recorded and
 * answered. Call after the runner stopped, before the HTTP daemon stops
 * (it must not stop with suspended connections). Accepts NULL. */
void route_execs_flush(struct route_execs *e);
/* Flush, stop the thread, free; *e = NULL. Accepts NULL. Call after the
 * runner has stopped and before the hub, the watcher and the store go. */
void route_execs_free(struct route_execs **e);

/* Make the approvals thread look at the deadlines again (a request now
 * waits in the exec admission queue, routes/admit.h). */
void route_execs_wake(struct route_execs *e);

/* The request every command starts from (see route_execs_new); borrowed. */
const struct sbx_exec_req *route_execs_base(const struct route_execs *e);

/* How a POST /exec wants its command run and answered. */
struct route_exec_opts {
	bool id_given;		     /* the client chose the id: idempotency */
	bool stream;		     /* answer text/event-stream */
	bool background;	     /* answer 202 at once; the command outlives the request */
	struct sbx_snapshot *before; /* taken: files_changed is added to the result (NULL: none) */
	bool approval;		     /* wait for a person's decision before it runs */
	bool wait;		     /* with approval: the request waits (else 202 at once) */
	int64_t max_execs;	     /* the tenant's concurrent commands (its policy) */
	int64_t exec_queue;	     /* requests that may wait for one of them (routes/admit.h) */
	int64_t approval_timeout_ms; /* with approval: rejected when no one decides by then */
	int64_t held_bytes;	     /* set by route_execs_start: the inline stdin it keeps while it waits */
	int (*rerun)(struct http_req *r); /* the handler run again once a slot admits r (POST /exec's) */
};

/* Start the command of r, or answer r from the earlier exec of the same
 * id (o->id_given). row: tenant, id, session, command, cwd, request_hash
 * (borrowed; started_at is set here). run: the runner request without its
 * tenant parts (ws, host dir, uid, gid, id, filled in here); borrowed,
 * the runner copies it. On success r is suspended (a waiter, or a
 * stream subscriber when stream) and answered at the exit, or (background)
 * answered 202 with the exec's view; returns 0. Otherwise r has been
 * answered with the error and its code returned. A command that finds
 * its tenant running max_execs waits for a slot (routes/admit.h): r is
 * suspended and 0 returned, and its handler runs again once admitted; a
 * stream's head comes when the command starts. A background request
 * never waits (its 202 comes at once): 429 at the limit, as before.
 * o->before is taken in
 * every case (and set NULL). row->policy and row->requested_by are
 * recorded with it.
 *
 * With o->approval the command does not start: its row is
 * 'pending_approval', the tenant feed gets a `pending_approval` event,
 * and it waits for route_execs_decide, a cancel, or the approval timeout
 * (a rejection); the request waits too, or (!o->wait, or background) is
 * answered 202 with the exec's view. At shutdown a waiting command is
 * cancelled; after a crash its row becomes 'lost' like a running one's. */
/* 404 for an exec id; one that names another node says so: a balancer
 * sent it to the wrong node (README "Running many nodes"). */
int route_exec_unknown(struct http_req *r, const char *id);

int route_execs_start(struct http_req *r, struct store_exec *row, struct sbx_exec_req *run,
		      struct route_exec_opts *o);

/* POST /exec/{id}/approve (approve) or /reject: decide on tenant r's exec
 * id and answer r. The deciding token must carry a sub, and never
 * approves a request of its own sub (403 forbidden). 404 unknown, 409
 * not waiting for a decision, 429 approving beyond max_execs. */
int route_execs_decide(struct http_req *r, const char *id, bool approve, const char *reason);

/* Answer r about exec id of its tenant, which is not (any more) in the
 * state the route needs: 404 unknown, else 409 conflict "exec ID WHY
 * (its state)". Returns the code. */
int route_execs_answer_state(struct http_req *r, const char *id, const char *why);

/* Cancel the exec (tenant, id) if it waits for approval: it ends as
 * cancelled without having run. true when it did. */
bool route_execs_cancel_pending(struct route_execs *e, const char *tenant, const char *id);
/* Cancel every exec that waits for approval (shutdown). */
void route_execs_cancel_all_pending(struct route_execs *e);

/* {"stdout_bytes", "stderr_bytes", "last_output_at", "elapsed_ms", "tail"}
 * of the running exec (tenant, id) (tail: its last KiB of output, UTF-8),
 * or NULL when it is not running here. */
json_t *route_execs_progress(struct route_execs *e, const char *tenant, const char *id);

/* Stop every running exec of the tenant's session at once (SIGKILL, as a
 * cancel) and wait up to wait_ms until they are recorded. Returns how
 * many were stopped. For DELETE /session. */
int route_execs_stop_session(struct route_execs *e, const char *tenant, const char *key, size_t key_len,
			     int64_t wait_ms);

/* A life of the tenant ended (removed, or removed and added again):
 * every exec it has here is stopped, SIGKILL for those running, cancelled
 * for those waiting for approval, so no process of its uid outlives it. */
void route_execs_stop_life(struct route_execs *e, const char *tenant, int64_t incarnation);

/* The runner handle of the running exec (tenant, id), or 0. */
uint64_t route_execs_handle(struct route_execs *e, const char *tenant, const char *id);
