#pragma once
/* The tenant-level seam: one ops table for the SandboxApi's files and
 * commands, chosen once per tenant when it is loaded (routes/tenant_cache.c, by
 * routes/providers.c from the `backend` key of its policy; so a policy
 * change applies within the tenant cache's few seconds, or at once when
 * made through PUT /tenants/{name}/policy). Every served tenant has one:
 *
 * - local (routes/local.c): this server's workspace (sandbox/workspace.c
 *   and fsops.c) and its runner with a spawn-level struct sbx_backend,
 *   bwrap or local;
 * - remote (routes/remote.c): another sandboxd, through libsandboxd;
 * - ssh (routes/ssh.c): a host reached over SSH.
 *
 * (A tenant this server cannot serve, t->unserved set, has none: the
 * HTTP layer refuses its requests before any handler runs.) The file
 * routes (routes/fs.c) and POST /exec call its ops and branch on nothing
 * else; what a provider cannot do is said by its caps: a route that
 * needs the workspace here (RF_WORKSPACE in routes/table.c) is refused in
 * one place, route_provider_admit, and POST /exec's fields in one
 * place of routes/exec.c.
 *
 * Every op returns data, never an answer: 0 with its results, or a
 * negative code (errno or SBX_E_*) with, in the call (struct route_call),
 * the words of a failure the provider knows better than the code (a
 * remote server's message, a host that went away) and a Retry-After. The
 * routes (routes/fs.c, routes/exec.c) render every reply and every error
 * once, for every provider alike. rel is the resolved path as route_path
 * gives it. A provider that cannot be reached fails with -SBX_E_BACKEND
 * (503 backend_unavailable, with Retry-After). The file ops may block and
 * run on the file pool (RF_POOL), never on an HTTP event thread (they
 * return -EAGAIN after nowait_blocked() in no-wait mode).
 *
 * Threads: a provider is immutable after it is made (what it shares, such
 * as connections, it locks itself) and is used by any number of threads;
 * it is freed with its tenant, when no request and no job uses it. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandbox/runner.h"

struct app;
struct http_req;
struct route_policy;
struct route_provider;
struct sbx_dir_page;
struct sbx_stat;
struct tenant;
struct http_route;

/* What a provider can do beyond the file ops and plain commands. */
enum route_provider_caps {
	/* The tenant's workspace is on this server: sessions, streaming
	 * transfers and /code (RF_WORKSPACE routes). */
	ROUTE_CAN_WORKSPACE = 1u << 0,
	/* Commands run here, on this server's backends (sandbox/backend.h):
	 * root images, I/O budgets, track_changes, stdin_pipe, tty, network
	 * through the egress gateway. */
	ROUTE_CAN_RUN_HERE = 1u << 1,
};

/* One op of a request, as a provider sees it: what it may know of the
 * request (never the HTTP request itself), and what it says of a
 * failure. route_call_init fills it from a request; route_call_fail
 * renders a failed op's error on it. */
struct route_call {
	struct app *app;
	struct tenant *tenant; /* its provider is the one called */
	const char *request_id;
	const char *session_key; /* the session's key (session_key_len bytes), NULL for none */
	size_t session_key_len;
	const char *session_rel; /* its directory, NULL for none */
	uint64_t max_bytes;	 /* the most a read may return (max_buffered_bytes) */
	/* Out, on failure: the words ("": the route says it from the code and
	 * the path) and a Retry-After in seconds (0: none). */
	char why[1024];
	int64_t retry_after_s;
};

struct route_provider_ops {
	const char *name;  /* the policy's backend: "local" for bwrap and local, "remote", "ssh" */
	const char *where; /* for refusals: "on another sandboxd (backend remote)" */
	/* An exec's error when the provider went away mid-command (NULL: the
	 * runner's own reasons say it). */
	const char *down;
	unsigned caps; /* enum route_provider_caps */
	/* POST /exec before the command is accepted. NULL: nothing to check. */
	int (*check)(struct route_call *c);
	/* The file's bytes [start, start + want) (want 0: to its end), at
	 * most c->max_bytes of them (more: -EFBIG). Ranged (start or want
	 * not 0) only for a provider without open. */
	int (*read)(struct route_call *c, const char *rel, uint64_t start, uint64_t want, char **data,
		    size_t *len);
	/* The file open for reading, and its size: a provider whose files are
	 * here answers with the file itself (ranges, no copy). NULL: read. */
	int (*open)(struct route_call *c, const char *rel, int *fd, uint64_t *size);
	/* The file's bytes replaced by data; *size: the file's size after. */
	int (*write)(struct route_call *c, const char *rel, const char *data, size_t len, uint64_t *size);
	int (*stat)(struct route_call *c, const char *rel, struct sbx_stat *st);
	/* Up to limit entries after the cursor after (NULL: from the start);
	 * -EBADMSG: after is not a cursor of this directory. */
	int (*readdir)(struct route_call *c, const char *rel, const char *after, size_t limit, bool detail,
		       struct sbx_dir_page *page);
	int (*exists)(struct route_call *c, const char *rel, bool *exists);
	int (*mkdir)(struct route_call *c, const char *rel, bool recursive);
	int (*rm)(struct route_call *c, const char *rel, bool recursive, bool force, bool *removed);
	int (*move)(struct route_call *c, const char *from, const char *to, bool overwrite);
	/* POST /exec's cwd (a rel path; asked: the client's spelling, NULL
	 * for the session's directory) before the command is accepted. NULL:
	 * the provider checks it when the command starts. */
	int (*cwd)(struct route_call *c, const char *rel, const char *asked);
	/* Start a command (see route_jobs_submit): 0 with *job, or -errno. */
	int (*submit)(struct app *a, struct route_provider *p, const char *session, size_t session_len,
		      const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx, uint64_t *job);
	void (*free)(struct route_provider *p);
};

/* Each provider's state begins with this. */
struct route_provider {
	const struct route_provider_ops *ops;
};

/* The provider the policy's backend names, for tenant `tenant`. Never
 * fails: settings that cannot work make every request of the tenant 503
 * backend_unavailable saying why. */
struct route_provider *route_provider_new(struct app *a, const char *tenant, const struct route_policy *p);
/* Accepts NULL; no call may be running on it. */
void route_provider_free(struct route_provider **p);
/* This server's own (routes/local.c): shared by every local tenant, never freed. */
extern struct route_provider route_local_provider;
/* The one refusal of what the tenant's provider cannot serve: flags of a
 * route of the table (or of an MCP tool, which runs a route's code)
 * with RF_WORKSPACE, for a provider without ROUTE_CAN_WORKSPACE:
 * -SBX_E_FORBIDDEN with why, which names it as what ("POST /code").
 * 0 otherwise. */
int route_provider_admit(const struct tenant *t, unsigned flags, const char *what, char *why, size_t whysz);
/* The same for a route that finds its tenant itself (a transfer token):
 * 403 forbidden answered on r (returns the code), or 0. */
int route_provider_refuse(struct http_req *r, const char *what);
/* A call for an op of r's tenant on behalf of r. */
void route_call_init(struct route_call *c, struct http_req *r);
/* Answer r with a failed op's error and return the code: c's words when
 * it has them (and its Retry-After), else route_fail_path's for what
 * ("read", "create", ...) on path rel. */
int route_call_fail(struct http_req *r, const struct route_call *c, int rc, const char *what,
		    const char *rel);
/* The op's failure in c's words (printf-style): returns rc. */
int route_call_why(struct route_call *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- commands: the runner's interface, for every provider's jobs ----
 *
 * Handles of jobs that run elsewhere have the top bit set, so one uint64_t names a
 * job of either kind and the registry (routes/exec_registry.c) keeps one
 * code path. A provider job runs on a thread of its own and reports
 * SBX_EV_START, SBX_EV_OUTPUT and SBX_EV_EXIT to cb as the runner would
 * (from that thread; the registry's callbacks never block). A provider
 * that goes away mid-command ends it with an exit without result and
 * spawn_error -SBX_E_BACKEND (503 backend_unavailable: what became of the
 * command is unknown). */
struct route_jobs;
void route_jobs_new(struct route_jobs **out);
/* Cancel every provider job and wait until each has reported its exit. */
void route_jobs_free(struct route_jobs **j);
/* The provider's job: session (len bytes) is the session it runs in. The
 * local provider hands req to sbx_runner_submit on a->runner; a provider
 * without ROUTE_CAN_RUN_HERE uses req->spawn.cwd_rel, command, env, the
 * timeouts, stdin and max_output_bytes and ignores the rest, which is the
 * local runner's (req->rootimg is closed: taken, as by sbx_runner_submit). */
int route_jobs_submit(struct app *a, struct route_provider *p, const char *session, size_t session_len,
		      const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx, uint64_t *job);
/* sbx_runner_cancel / sbx_runner_kill for either kind: 0 or -ESRCH. */
int route_jobs_cancel(struct app *a, uint64_t job);
int route_jobs_kill(struct app *a, uint64_t job);
/* Cancel every provider job (shutdown; the local ones: sbx_runner_cancel_all). */
void route_jobs_cancel_all(struct app *a);

/* What a provider implementation uses to run a job, so that every
 * provider reports its events and its end the same way (the order the
 * runner keeps: start, output and heartbeats, then one exit). j, a
 * struct route_job, is the first member of the provider's job state.
 *
 * route_job_init copies what the provider needs of req (command, cwd_rel,
 * env as "NAME=value", stdin: its own copies, freed by route_job_clear)
 * and sets fire, which is called under the list's lock on a cancel and
 * must not block. route_job_start gives j its handle (and *job), lists it
 * and runs main(j) on a detached thread that reports to cb(ctx, ...)
 * (0 or -errno: then j is not listed and still the caller's). */
struct route_job {
	void (*fire)(struct route_job *j);
	char *command, *cwd_rel;
	char **env; /* nenv "NAME=value" strings, then NULL */
	size_t nenv;
	char *stdin_data; /* stdin_len bytes and a NUL, or NULL */
	size_t stdin_len;
	/* route_job_start's */
	struct route_jobs *owner;
	uint64_t handle;
	sbx_event_cb cb;
	void *ctx;
	struct route_job *next;
};
void route_job_init(struct route_job *j, const struct sbx_exec_req *req, void (*fire)(struct route_job *j));
void route_job_clear(struct route_job *j);
int route_job_start(struct app *a, struct route_job *j, void *(*main)(void *), sbx_event_cb cb, void *ctx,
		    uint64_t *job);
/* From j's thread: SBX_EV_START, SBX_EV_OUTPUT (data borrowed for the
 * call), and a heartbeat hb given the job's handle. */
void route_job_started(struct route_job *j);
void route_job_output(struct route_job *j, int stream, const char *data, size_t len);
void route_job_heartbeat(struct route_job *j, const struct sbx_event *hb);
/* The last call of j's thread: unlist j (a cancel then finds nothing,
 * and the registry may free the tenant once it has the exit), report
 * SBX_EV_EXIT with res (the callee may take its strings; the rest is
 * cleared here), or with res NULL: spawn error err, message (NULL: none;
 * borrowed for the call) and retry_after_s; then free_job(j) (which
 * calls route_job_clear) and count the thread ended for
 * route_jobs_free. */
void route_job_exit(struct route_job *j, struct sbx_exec_result *res, int err, const char *message,
		    int64_t retry_after_s, void (*free_job)(struct route_job *j));

/* A provider could not be reached (what: where and why), for /readyz; and
 * /readyz's line about the provider `backend` into out. */
void route_jobs_note_down(struct app *a, const char *backend, const char *what);
/* It was reached (a connection made or reused), for /readyz. */
void route_jobs_note_up(struct app *a, const char *backend);
void route_jobs_describe(struct app *a, const char *backend, char *out, size_t outsz);
