#pragma once
/* The exec rows (execs.c), part of store.h's API. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;

/* Why a command ended, as its cgroup saw it (sandbox/cgroup.h), kept on
 * its exec row and the audit record of the request that ran it. */
struct store_exec_why {
	bool oom_killed, pids_limited, uncontained;
};

/* An exec's state; the store keeps its name (the wire's `state`). Zero is
 * running, what store_exec_begin writes unless told otherwise. */
enum store_exec_state {
	EXEC_RUNNING,
	EXEC_PENDING_APPROVAL,
	EXEC_EXITED,
	EXEC_TIMED_OUT,
	EXEC_CANCELLED,
	EXEC_REJECTED,
	EXEC_LOST,
};
#define EXEC_STATES 7
/* The wire name of s ("running", "pending_approval", ...). */
const char *store_exec_state_name(enum store_exec_state s);
/* The state named name: 0, or -EINVAL for no state. */
int store_exec_state_parse(const char *name, enum store_exec_state *out);
/* Not over yet: running, or waiting for a person's decision. */
static inline bool store_exec_state_live(enum store_exec_state s)
{
	return s == EXEC_RUNNING || s == EXEC_PENDING_APPROVAL;
}

struct store_exec {
	char tenant[64];
	char id[72];
	char *session; /* owned */
	size_t session_len;
	char *command;		     /* owned */
	char *cwd;		     /* owned: wire path */
	char *request_hash;	     /* owned: hex digest of the canonical request */
	enum store_exec_state state; /* the table's CHECK admits only these names */
	bool has_exit_code;
	int exit_code;
	char *result; /* owned: ShellResult JSON, or NULL */
	int64_t started_at;
	int64_t finished_at;   /* 0 while running */
	int64_t exit_event_id; /* id of its `exit` event (0: not recorded) */
	char *policy;	       /* owned: the effective policy (JSON), or NULL */
	char *requested_by;    /* owned: the requesting token's sub, or NULL */
	char decision[12];     /* "", approved, rejected */
	char *decided_by;      /* owned: the approver's sub, or NULL */
	int64_t decided_at;    /* 0: no decision */
	char *reason;	       /* owned: why it was rejected, or NULL */
	int64_t incarnation;   /* its tenant's life (store_tenant.incarnation); 0 at begin: the living one */
	struct store_exec_why why; /* set by store_exec_finish */
};
/* Insert a row in e->state, 'running' or 'pending_approval', with its
 * policy and requester (fail closed: the command must not start unless
 * this returns 0). -EEXIST when (tenant, id) exists. */
int store_exec_begin(struct store *s, const struct store_exec *e);
/* Decide on a 'pending_approval' row: decision "approved" makes it
 * 'running' (started_at = at), "rejected" makes it 'rejected'
 * (finished_at = at). decided_by and reason may be NULL. -ENOENT when the
 * row is not pending (any more). */
int store_exec_decide(struct store *s, const char *tenant, const char *id, const char *decision,
		      const char *decided_by, const char *reason, int64_t at);
/* Finish: state, exit code, result JSON, finished_at, the id its
 * `exit` event has on the live stream, and why it ended (NULL: nothing
 * said, all false). */
int store_exec_finish(struct store *s, const char *tenant, const char *id, enum store_exec_state state,
		      int exit_code, const char *result, int64_t finished_at, int64_t exit_event_id,
		      const struct store_exec_why *why);
/* Remove a row still 'running' whose command never started (the backend
 * refused it), so the id can be retried. -ENOENT. */
int store_exec_delete(struct store *s, const char *tenant, const char *id);
/* -ENOENT. Free with store_exec_clear. */
int store_exec_get(struct store *s, const char *tenant, const char *id, struct store_exec *out);
/* Newest first; state/session may be NULL (no filter); results omitted
 * (result NULL) when with_result is false. */
int store_exec_list(struct store *s, const char *tenant, const enum store_exec_state *state,
		    const char *session, size_t session_len, size_t limit, bool with_result,
		    struct store_exec **out, size_t *n);
void store_exec_clear(struct store_exec *e);
void store_execs_free(struct store_exec *v, size_t n);
