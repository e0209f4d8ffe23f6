#pragma once
/* The tenant-level seam. A tenant's files and commands are served either
 * here (the local provider: sandbox/workspace.c and fsops.c for files,
 * the runner and a spawn-level struct sbx_backend, bwrap or local, for
 * commands) or by another sandboxd (backend `remote`: this file), chosen
 * by the `backend` key of the tenant's policy when the tenant is loaded
 * (routes/app.c; so a policy change applies within the tenant cache's few
 * seconds, or at once when made through PUT /tenants/{name}/policy).
 * struct tenant's `remote` is NULL for a local tenant; the file routes
 * (routes/fs.c) and POST /exec call the route_remote_* functions below
 * instead of sandbox/ when it is set, and routes that only make sense on
 * a local workspace (streaming transfers, sessions, /code, stdin and
 * terminals) refuse such a tenant with route_remote_refuse.
 *
 * The remote provider speaks the wire contract to the back server through
 * libsandboxd (client/sandboxd.h): paths are resolved here first (the same
 * normalisation and audit target) and sent as absolute wire paths with the
 * request's session key; answers are rendered exactly as the local routes
 * render theirs. Errors of the back are passed on with their code,
 * message and Retry-After; a back that cannot be reached (refused, reset,
 * or past the deadline) is 503 backend_unavailable with Retry-After 5.
 * Nothing here retries: the client gets the back's 429/503 and its hint.
 *
 * Threads: a struct route_remote is immutable after route_remote_new and
 * shared by any number of threads (libsandboxd handles are thread-safe);
 * the file functions block on the network, within a deadline, and run on
 * the file pool (RF_POOL), never on an HTTP event thread. Commands run on
 * a thread of their own each (route_jobs_* below). */
#include <stdbool.h>
#include <stdint.h>

#include "sandbox/runner.h"

struct app;
struct http_req;
struct route_policy;
struct route_remote;

/* The provider for a tenant whose policy names backend remote (never
 * fails: settings that cannot work, such as an unreadable token file or a
 * server that does not offer `remote`, make every request of the tenant
 * 503 backend_unavailable saying why). The token file is read now. */
struct route_remote *route_remote_new(const struct app *a, const struct route_policy *p);
/* Accepts NULL; no call may be running on it. */
void route_remote_free(struct route_remote **rr);

/* The file routes of a remote tenant: rel is the resolved path (as
 * route_path gives it), the rest as the route parsed it. Each answers r
 * and returns 0 or the error code. */
int route_remote_read(struct http_req *r, const char *rel);
int route_remote_read_buffer(struct http_req *r, const char *rel);
int route_remote_write(struct http_req *r, const char *rel);
int route_remote_stat(struct http_req *r, const char *rel);
int route_remote_readdir(struct http_req *r, const char *rel, const char *after, int64_t limit, bool detail);
int route_remote_exists(struct http_req *r, const char *rel);
int route_remote_mkdir(struct http_req *r, const char *rel, bool recursive);
int route_remote_rm(struct http_req *r, const char *rel, bool recursive, bool force);
int route_remote_move(struct http_req *r, const char *from, const char *to, bool overwrite);

/* 0 when a remote tenant's settings can work, else r answered 503
 * backend_unavailable saying why and the code returned. */
int route_remote_check(struct http_req *r);
/* A route that needs the local workspace: 403 forbidden for a remote
 * tenant (returns the code), 0 for a local one. */
int route_remote_refuse(struct http_req *r, const char *what);

/* ---- commands: the runner's interface, for local and remote jobs ----
 *
 * Handles of remote jobs have the top bit set, so one uint64_t names a job
 * of either kind and the registry (routes/exec_registry.c) keeps one code
 * path. A remote job runs sbxc_exec (streamed) on a thread of its own and
 * reports SBX_EV_START, SBX_EV_OUTPUT and SBX_EV_EXIT to cb as the runner
 * would (from that thread; the registry's callbacks never block). The
 * back's result becomes the result; a back that goes away mid-command is
 * an exit without result and spawn_error -SBX_E_BACKEND (503
 * backend_unavailable: what became of the command is unknown). A cancel
 * closes the streamed request, asks the back to cancel (POST
 * /exec/{id}/cancel) and reports the back's final record (cancelled). */
struct route_jobs;
void route_jobs_new(struct route_jobs **out);
/* Cancel every remote job and wait until each has reported its exit. */
void route_jobs_free(struct route_jobs **j);
/* rr NULL: sbx_runner_submit on a->runner. Else a remote job: session
 * (len bytes) is the session it runs in; req->spawn.cwd_rel, command, env,
 * the timeouts, stdin and max_output_bytes are sent; the rest of req is
 * the local runner's and ignored (req->rootimg is closed: taken, as by
 * sbx_runner_submit). */
int route_jobs_submit(struct app *a, struct route_remote *rr, const char *session, size_t session_len,
		      const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx, uint64_t *job);
/* sbx_runner_cancel / sbx_runner_kill for either kind: 0 or -ESRCH. */
int route_jobs_cancel(struct app *a, uint64_t job);
int route_jobs_kill(struct app *a, uint64_t job);
/* A back server could not be reached (what: its URL and why), for
 * /readyz; and /readyz's line about the remote backend into out. */
void route_jobs_note_down(struct app *a, const char *what);
void route_jobs_describe(struct app *a, char *out, size_t outsz);
/* Cancel every remote job (shutdown; the local ones: sbx_runner_cancel_all). */
void route_jobs_cancel_all(struct app *a);
