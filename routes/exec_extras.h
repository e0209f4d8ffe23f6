#pragma once
/* The POST /exec fields agent runs add (track_changes, background,
 * stdin_pipe, tty, cols, rows): read, checked and applied here so that
 * routes/exec.c keeps one line per step; files_changed; and base64. HTTP
 * threads, except the first snapshot of track_changes, which runs on the
 * file pool. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/fields.h"

struct app;
struct http_req;
struct route_exec_opts;
struct sbx_exec_req;
struct sbx_snapshot;
struct sbx_workspace;

struct route_exec_extras {
	bool track_changes, background, stdin_pipe, tty;
	int64_t cols, rows;
	bool cols_set, rows_set;
};

/* The extra POST /exec fields, for its field table. */
#define ROUTE_EXEC_EXTRA_FIELDS(x)                                                                           \
	{"track_changes", F_BOOL, false, &(x).track_changes, NULL, 0, 0, NULL},                              \
	    {"background", F_BOOL, false, &(x).background, NULL, 0, 0, NULL},                                \
	    {"stdin_pipe", F_BOOL, false, &(x).stdin_pipe, NULL, 0, 0, NULL},                                \
	    {"tty", F_BOOL, false, &(x).tty, NULL, 0, 0, NULL},                                              \
	    {"cols", F_INT, false, &(x).cols, NULL, 1, 1000, &(x).cols_set},                                 \
	{                                                                                                    \
		"rows", F_INT, false, &(x).rows, NULL, 1, 1000, &(x).rows_set                                \
	}

/* 0, or -EINVAL after http_fail (background with stream; cols/rows
 * without tty). */
int route_exec_extras_check(struct http_req *r, const struct route_exec_extras *x, bool stream);
/* Add the fields that change what runs to the idempotency key (only
 * those set, so keys of plain requests stay what they were). */
void route_exec_extras_hash(const struct route_exec_extras *x, json_t *canon);
/* POST /exec with track_changes, once its fields and policy are read
 * (a request refused for them does no file work): the snapshot before the
 * run walks the session directory (up to changes-max-files entries), so
 * it is taken on the file pool (http_pool_then), and POST /exec starts
 * again on the event thread with it. true when it was handed over (the
 * handler returns *rc); false when there is nothing to take, or it is
 * taken already. rerun: the handler that starts again (POST /exec's). */
bool route_exec_snapshot_deferred(struct http_req *r, int *rc, int (*rerun)(struct http_req *r));
/* Pool: that snapshot (of the request's session, made if new), kept for
 * POST /exec's start: 0, or the error after http_fail. */
int route_exec_snapshot_work(struct http_req *r);
/* Fill run (stdin pipe, terminal, stdin bound) and o (background, the
 * snapshot before the run when track_changes: the one the pool took). 0,
 * or an error after http_fail (the snapshot could not be taken). */
int route_exec_extras_apply(struct http_req *r, const struct route_exec_extras *x, struct sbx_exec_req *run,
			    struct route_exec_opts *o);

/* Completion thread: compare the session directory with before and add
 * "files_changed" and "files_changed_truncated" to result. */
void route_code_add_changes(struct app *a, const struct sbx_workspace *ws, const struct sbx_snapshot *before,
			    json_t *result);

/* Standard base64 (with padding) of n bytes into a fresh buffer (*out,
 * caller frees; *len bytes). -EINVAL when it is not. */
int route_base64_decode(const char *s, size_t n, unsigned char **out, size_t *len);
