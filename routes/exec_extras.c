/* The POST /exec fields of agent runs (see exec_extras.h): read,
 * checked and applied here so that routes/exec.c keeps one line per step;
 * the files_changed of track_changes; and the base64 that inline stdin
 * and POST /code's inputs share. */
#include "routes/exec_extras.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/xmalloc.h"
#include "http/errors.h"
#include "http/pool.h"
#include "routes/app.h"
#include "routes/exec_registry.h"
#include "routes/paths.h"
#include "routes/provider.h"
#include "routes/routes.h"
#include "sandbox/changes.h"
#include "sandbox/runner.h"
#include "sandbox/workspace.h"

int route_exec_extras_check(struct http_req *r, const struct route_exec_extras *x, bool stream)
{
	if (x->background && stream)
		return http_fail(r, -EINVAL,
				 "background and stream exclude each other: follow a background "
				 "exec with GET /exec/{id}/events");
	if ((x->cols_set || x->rows_set) && !x->tty)
		return http_fail(r, -EINVAL, "cols and rows size a terminal: they need tty: true");
	return 0;
}

void route_exec_extras_hash(const struct route_exec_extras *x, json_t *canon)
{
	if (x->track_changes)
		json_object_set_new(canon, "track_changes", json_true());
	if (x->background)
		json_object_set_new(canon, "background", json_true());
	if (x->stdin_pipe)
		json_object_set_new(canon, "stdin_pipe", json_true());
	if (x->tty)
		json_object_set_new(canon, "tty",
				    json_pack("[I, I]", (json_int_t)x->cols, (json_int_t)x->rows));
}

static void snapshot_stash_free(void *stash)
{
	struct sbx_snapshot *s = stash;
	sbx_snapshot_free(&s);
}

static int take_snapshot(struct http_req *r, struct sbx_snapshot **out)
{
	int rc =
	    sbx_snapshot_take(r->tenant->ws, r->session_rel, (size_t)r->app->cfg->changes_max_files, out);
	if (rc < 0)
		return http_fail(r, rc, "cannot list the session directory: %s", sbx_strerror(rc));
	return 0;
}

int route_exec_snapshot_work(struct http_req *r)
{
	struct sbx_snapshot *s = NULL;
	int rc = route_session(r);
	if (rc == 0)
		rc = take_snapshot(r, &s);
	if (rc < 0)
		return rc;
	r->stash = s;
	r->stash_free = snapshot_stash_free;
	return 0;
}

bool route_exec_snapshot_deferred(struct http_req *r, int *rc, int (*rerun)(struct http_req *r))
{
	/* A remote tenant's track_changes is refused by POST /exec itself. */
	if (r->stash_free || !r->tenant || !(r->tenant->provider->ops->caps & ROUTE_CAN_RUN_HERE) ||
	    !json_is_true(json_object_get(r->json, "track_changes")))
		return false;
	*rc = http_pool_then(r->env->pool, r, route_exec_snapshot_work, rerun);
	return true;
}

int route_exec_extras_apply(struct http_req *r, const struct route_exec_extras *x, struct sbx_exec_req *run,
			    struct route_exec_opts *o)
{
	run->stdin_pipe = x->stdin_pipe || x->tty;
	run->stdin_buffer_max = (size_t)r->app->cfg->stdin_buffer_bytes;
	run->tty = x->tty;
	run->cols = (unsigned short)(x->cols_set ? x->cols : 80);
	run->rows = (unsigned short)(x->rows_set ? x->rows : 24);
	o->background = x->background;
	if (!x->track_changes)
		return 0;
	if (r->stash_free == snapshot_stash_free) { /* taken on the pool */
		o->before = r->stash;
		r->stash = NULL;
		r->stash_free = NULL;
		return 0;
	}
	return take_snapshot(r, &o->before);
}

void route_code_add_changes(struct app *a, const struct sbx_workspace *ws, const struct sbx_snapshot *before,
			    json_t *result)
{
	const struct sbx_changes_limits lim = {
	    .max_files = (size_t)a->cfg->changes_max_files,
	    .max_reported = (size_t)a->cfg->changes_max_listed,
	    .max_hash_bytes = (uint64_t)a->cfg->changes_hash_bytes,
	};
	struct sbx_change *v = NULL;
	size_t n = 0;
	bool truncated = false;
	json_t *arr = json_array();
	int rc = sbx_changes_diff(ws, before, &lim, &v, &n, &truncated);
	if (rc < 0) {
		log_msg("warn", "files_changed: cannot list the session directory: %s", sbx_strerror(rc));
		truncated = true;
	}
	for (size_t i = 0; i < n; i++) {
		char wire[SBX_PATH_MAX + 16];
		sbx_path_wire(v[i].rel, wire, sizeof wire);
		json_array_append_new(arr, json_pack("{s:s, s:s, s:I, s:o}", "path", wire, "kind",
						     sbx_change_kind_name(v[i].kind), "size",
						     (json_int_t)v[i].size, "sha256",
						     v[i].hashed ? json_string(v[i].sha256) : json_null()));
	}
	sbx_changes_free(v, n);
	json_object_set_new(result, "files_changed", arr);
	json_object_set_new(result, "files_changed_truncated", json_boolean(truncated));
}

int route_base64_decode(const char *s, size_t n, unsigned char **out, size_t *len)
{
	if (n % 4 != 0)
		return -EINVAL;
	unsigned char *buf = xmalloc(n / 4 * 3 + 1);
	int got = n ? EVP_DecodeBlock(buf, (const unsigned char *)s, (int)n) : 0;
	if (got < 0 || memchr(s, '\0', n)) {
		free(buf);
		return -EINVAL;
	}
	size_t pad = n >= 1 && s[n - 1] == '=' ? (n >= 2 && s[n - 2] == '=' ? 2 : 1) : 0;
	*out = buf;
	*len = (size_t)got - pad;
	return 0;
}
