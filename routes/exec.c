/* POST /exec, GET /exec/{id}, POST /exec/{id}/cancel, GET /execs.
 *
 * A POST /exec suspends its connection and hands the command to the
 * runner thread; the runner's exit event finishes the store row and
 * resumes every request waiting on that exec (the first one, and
 * idempotent retries with the same id). A client that hangs up while
 * its command runs cancels it (routes/watch.c notices). */
#include "routes/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth/auth.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "routes/app.h"
#include "routes/fields.h"
#include "routes/errors.h"
#include "routes/exec_registry.h"
#include "routes/handlers.h"
#include "routes/hub.h"
#include "routes/metrics.h"
#include "routes/watch.h"
#include "sandbox/collector.h"
#include "sandbox/fsops.h"
#include "sandbox/runner.h"
#include "sandbox/workspace.h"
#include "store/store.h"

#define ENV_MAX 256


static bool id_ok(const char *id, size_t n)
{
	if (n < 1 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static bool env_name_ok(const char *k)
{
	if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_'))
		return false;
	for (const char *p = k + 1; *p; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
			return false;
	return strlen(k) <= 256;
}

static void sha256_hex(const char *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned int len = 0;
	EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
	for (size_t i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

struct exec_params {
	const char *command, *cwd, *stdin_data, *id;
	size_t command_len, cwd_len, stdin_len, id_len;
	json_t *env;
	int64_t timeout_s, idle_timeout_s, max_output;
	bool stream;
};

int route_exec_post(struct req *r)
{
	struct app *a = r->app;
	const struct sbx_config *cfg = a->cfg;
	struct exec_params p = { .timeout_s = cfg->exec_timeout_default_s,
				 .max_output = cfg->max_output_bytes_default };
	const struct field f[] = {
		{ "command", F_STRING, true, &p.command, &p.command_len, 0, 0, NULL },
		{ "cwd", F_STRING, false, &p.cwd, &p.cwd_len, 0, 0, NULL },
		{ "env", F_OBJECT, false, &p.env, NULL, 0, 0, NULL },
		{ "timeout_s", F_INT, false, &p.timeout_s, NULL, 1, 604800, NULL },
		{ "idle_timeout_s", F_INT, false, &p.idle_timeout_s, NULL, 1, 604800, NULL },
		{ "stdin", F_STRING, false, &p.stdin_data, &p.stdin_len, 0, 0, NULL },
		{ "max_output_bytes", F_INT, false, &p.max_output, NULL, 256, INT64_MAX, NULL },
		{ "id", F_STRING, false, &p.id, &p.id_len, 0, 0, NULL },
		{ "stream", F_BOOL, false, &p.stream, NULL, 0, 0, NULL },
	};
	int rc = fields_read(r, r->json, f, sizeof f / sizeof f[0]);
	if (rc < 0)
		return rc;
	if (p.command_len == 0 || memchr(p.command, '\0', p.command_len))
		return req_fail(r, -EINVAL, "command must be a non-empty string without NUL bytes");
	if (p.id && !id_ok(p.id, p.id_len))
		return req_fail(r, -EINVAL, "id must match [A-Za-z0-9_-]{1,64}");
	/* Server caps: a larger ask is clamped, not refused. */
	if (p.timeout_s > cfg->exec_timeout_max_s)
		p.timeout_s = cfg->exec_timeout_max_s;
	if (p.max_output > cfg->max_output_bytes_cap)
		p.max_output = cfg->max_output_bytes_cap;

	const char *envv[ENV_MAX + 1];
	char *envbuf[ENV_MAX];
	size_t nenv = 0;
	json_t *env_sorted = json_object();
	if (p.env) {
		const char *k;
		json_t *v;
		json_object_foreach(p.env, k, v) {
			if (nenv == ENV_MAX) {
				rc = req_fail(r, -EINVAL, "at most %d environment variables", ENV_MAX);
				goto out;
			}
			if (!env_name_ok(k)) {
				rc = req_fail(r, -EINVAL, "env name \"%s\" must match [A-Za-z_][A-Za-z0-9_]*", k);
				goto out;
			}
			if (!json_is_string(v) || memchr(json_string_value(v), '\0', json_string_length(v))) {
				rc = req_fail(r, -EINVAL, "env value of %s must be a string without NUL bytes", k);
				goto out;
			}
			envbuf[nenv] = xasprintf("%s=%s", k, json_string_value(v));
			envv[nenv] = envbuf[nenv];
			nenv++;
			json_object_set(env_sorted, k, v);
		}
	}
	envv[nenv] = NULL;

	char cwd_rel[SBX_PATH_MAX];
	if ((rc = req_session(r)) < 0)
		goto out;
	if (p.cwd) {
		if ((rc = req_path(r, p.cwd, p.cwd_len, cwd_rel, sizeof cwd_rel)) < 0)
			goto out;
	} else {
		snprintf(cwd_rel, sizeof cwd_rel, "%s", r->session_rel);
	}
	/* Resolved beneath the workspace fd: a symlink (made by a command) that
	 * leads out is an escape (403 outside_workspace), not "not a
	 * directory"; a dangling one is missing (404); one that stays inside is
	 * followed. */
	int cwd_fd = sbx_ws_openat(r->tenant->ws, cwd_rel, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
	if (cwd_fd < 0) {
		rc = cwd_fd == -EXDEV || cwd_fd == -ENOTDIR || cwd_fd == -ELOOP ? cwd_fd : -ENOENT;
		rc = req_fail(r, rc, "cwd %s %s", p.cwd ? p.cwd : "(session)",
			      rc == -EXDEV ? "leaves the workspace" : "is not a directory in the workspace");
		goto out;
	}
	close(cwd_fd);
	char cwd_wire[SBX_PATH_MAX + 16];
	sbx_path_wire(cwd_rel, cwd_wire, sizeof cwd_wire);
	req_set_target(r, p.command);

	/* The idempotency key covers everything that changes what runs. */
	json_t *canon = json_pack("{s:s%, s:s%, s:s, s:O, s:I, s:I, s:s%, s:I}", "command", p.command, p.command_len,
				  "session", r->session_key, r->session_key_len, "cwd", cwd_wire, "env", env_sorted,
				  "timeout_s", (json_int_t)p.timeout_s, "idle_timeout_s", (json_int_t)p.idle_timeout_s,
				  "stdin", p.stdin_data ? p.stdin_data : "", p.stdin_len, "max_output_bytes",
				  (json_int_t)p.max_output);
	char *ctext = json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(canon);
	char hash[65];
	sha256_hex(ctext, strlen(ctext), hash);
	free(ctext);

	char idbuf[72];
	if (p.id) {
		memcpy(idbuf, p.id, p.id_len);
		idbuf[p.id_len] = '\0';
	} else {
		unsigned char rnd[10];
		auth_random(rnd, sizeof rnd);
		snprintf(idbuf, sizeof idbuf, "x");
		for (size_t i = 0; i < sizeof rnd; i++)
			snprintf(idbuf + 1 + 2 * i, 3, "%02x", rnd[i]);
	}

	if (a->stopping) {
		r->retry_after_s = 5;
		rc = req_fail(r, -SBX_E_BACKEND, "the server is shutting down");
		goto out;
	}
	/* Fail closed: nothing runs unless its start is recorded. */
	struct store_exec row = { 0 };
	snprintf(row.tenant, sizeof row.tenant, "%s", r->tenant->name);
	snprintf(row.id, sizeof row.id, "%s", idbuf);
	row.session = r->session_key;
	row.session_len = r->session_key_len;
	row.command = (char *)p.command;
	row.cwd = cwd_wire;
	row.request_hash = hash;
	snprintf(row.state, sizeof row.state, "running");

	/* The row of a new exec and its registry entry appear together, under
	 * the registry lock: a concurrent request with the same id that reads
	 * the row as running always finds the job to wait on (never a
	 * "running" row without a job, which looks like one lost in a
	 * restart). */
	struct route_execs *e = a->execs;
	for (int attempt = 0;; attempt++) {
		if (p.id && (rc = answer_existing(r, idbuf, hash, p.stream)) != -ENOENT)
			goto out; /* answered (or waiting) from the earlier exec */
		if ((rc = app_tenant_acquire_exec(a, r->tenant)) < 0) {
			r->retry_after_s = 1;
			rc = req_fail(r, rc, "tenant %s already runs %lld commands", r->tenant->name,
				      (long long)cfg->tenant_max_execs);
			goto out;
		}
		row.started_at = now_ms();
		pthread_mutex_lock(&e->mu);
		rc = store_exec_begin(a->store, &row);
		if (rc == 0)
			break; /* e->mu stays held until the job is registered */
		pthread_mutex_unlock(&e->mu);
		app_tenant_release_exec(a, r->tenant);
		if (rc == -EEXIST && p.id && attempt < 3)
			continue; /* a concurrent request started it: answer from that exec */
		if (rc == -EEXIST && p.id) {
			rc = req_fail(r, -SBX_E_CONFLICT, "exec id %s is being started by another request", idbuf);
		} else if (rc == -EEXIST) {
			rc = req_fail(r, -SBX_E_CONFLICT, "generated exec id collided; retry");
		} else {
			r->retry_after_s = 1;
			rc = req_fail(r, -SBX_E_STORE, "cannot record the start of the command; it was not run");
		}
		goto out;
	}

	struct exec_job *j = xcalloc(1, sizeof *j);
	j->app = a;
	snprintf(j->id, sizeof j->id, "%s", idbuf);
	if (app_tenant_get(a, r->tenant->name, &j->tenant) < 0) {
		/* Removed this instant: run under the request's reference. */
		j->tenant = r->tenant;
		r->tenant = NULL;
	}
	j->refs = 1; /* the runner's */
	j->chan = hub_channel_open(a->hub, j->tenant->name, j->id,
				   start_json(j->id, p.command, r->session_key, r->session_key_len, cwd_wire,
					      row.started_at));

	struct sbx_exec_req er = {
		.backend = a->backend,
		.ws = j->tenant->ws,
		.spawn = {
			.command = p.command,
			.workspace_host_dir = sbx_workspace_host_dir(j->tenant->ws),
			.cwd_rel = cwd_rel,
			.env = envv,
			.uid = j->tenant->uid,
			.gid = j->tenant->gid,
			.drop_privs = a->drop_privs,
			.limits = { .mem_bytes = (uint64_t)cfg->mem_limit_bytes, .nproc = (uint64_t)cfg->nproc_limit,
				    .fsize_bytes = (uint64_t)cfg->fsize_limit_bytes, .nofile = (uint64_t)cfg->nofile_limit,
				    .tmp_bytes = (uint64_t)cfg->tmp_size_bytes },
		},
		.id = j->id,
		.timeout_ms = (uint64_t)p.timeout_s * 1000,
		.idle_timeout_ms = (uint64_t)p.idle_timeout_s * 1000,
		.kill_grace_ms = (uint64_t)cfg->exec_kill_grace_ms,
		.stdin_data = p.stdin_data,
		.stdin_len = p.stdin_len,
		.max_output_bytes = (size_t)p.max_output,
		.spill_cap = (uint64_t)cfg->spill_cap_bytes,
		.heartbeat_ms = (uint64_t)cfg->heartbeat_ms,
		.want_output_events = p.stream,
	};
	if (strcmp(sbx_backend_name(a->backend), "local") == 0)
		log_msg("warn", "exec %s of tenant %s runs on the host without isolation (backend local)", j->id,
			j->tenant->name);

	j->next = e->jobs;
	e->jobs = j;
	/* Wait (or subscribe) before the runner can possibly answer. */
	if (p.stream)
		hub_subscribe_exec(a->hub, r, j->tenant->name, j->id, 0, true);
	else
		wait_on_locked(r, j);
	rc = sbx_runner_submit(a->runner, &er, on_event, j, &j->handle);
	if (rc == 0 && p.stream) {
		metrics_exec_started(a->metrics);
		hub_set_cancel(a->hub, r, j->handle);
	} else if (rc == 0) {
		metrics_exec_started(a->metrics);
		int fd = -1;
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (ci)
			fd = ci->connect_fd;
		if (fd >= 0) {
			int64_t w = watch_add(a->watch, fd, on_hangup, j);
			j->watch = w > 0 ? w : 0;
		}
	}
	pthread_mutex_unlock(&e->mu);
	if (rc < 0) {
		/* Could not even queue it: report through the resume path. */
		struct sbx_event ev = { .kind = SBX_EV_EXIT };
		on_event(j, &ev, rc);
	}
	rc = 0;
out:
	for (size_t i = 0; i < nenv; i++)
		free(envbuf[i]);
	json_decref(env_sorted);
	return rc;
}

static json_t *exec_view(const struct store_exec *ex, bool with_result)
{
	json_t *o = exec_start_json(ex);
	json_object_set_new(o, "state", json_string(ex->state));
	if (with_result) {
		json_t *res = ex->result ? json_loads(ex->result, 0, NULL) : NULL;
		json_object_set_new(o, "result", res ? res : json_null());
	}
	return o;
}

int route_exec_get(struct req *r)
{
	const char *id = r->params[0];
	if (!id_ok(id, strlen(id)))
		return req_fail(r, -ENOENT, "no exec %s", id);
	struct store_exec ex;
	int rc = store_exec_get(r->app->store, r->tenant->name, id, &ex);
	if (rc == -ENOENT)
		return req_fail(r, rc, "no exec %s", id);
	if (rc < 0)
		return req_fail(r, rc, "cannot read the exec record");
	json_t *o = exec_view(&ex, true);
	store_exec_clear(&ex);
	return reply_json(r, 200, o);
}

int route_exec_cancel(struct req *r)
{
	const char *id = r->params[0];
	struct route_execs *e = r->app->execs;
	uint64_t handle = 0;
	pthread_mutex_lock(&e->mu);
	struct exec_job *j = id_ok(id, strlen(id)) ? find_locked(e, r->tenant->name, id) : NULL;
	if (j && !j->finished)
		handle = j->handle;
	pthread_mutex_unlock(&e->mu);
	req_set_target(r, id);
	if (handle && sbx_runner_cancel(r->app->runner, handle) == 0)
		return reply_json(r, 202, json_pack("{s:s, s:s}", "id", id, "state", "cancelling"));
	struct store_exec ex;
	int rc = id_ok(id, strlen(id)) ? store_exec_get(r->app->store, r->tenant->name, id, &ex) : -ENOENT;
	if (rc == -ENOENT)
		return req_fail(r, rc, "no exec %s", id);
	if (rc < 0)
		return req_fail(r, rc, "cannot read the exec record");
	char state[16];
	snprintf(state, sizeof state, "%s", ex.state);
	store_exec_clear(&ex);
	return req_fail(r, -SBX_E_CONFLICT, "exec %s has already finished (%s)", id, state);
}

int route_exec_list(struct req *r)
{
	const char *state = req_query(r, "state");
	const char *session = req_query(r, "session");
	int64_t limit;
	int rc = req_query_int(r, "limit", 100, 1, 1000, &limit);
	if (rc < 0)
		return rc;
	static const char *const states[] = { "running", "exited", "timed_out", "cancelled", "lost" };
	if (state) {
		bool ok = false;
		for (size_t i = 0; i < 5; i++)
			ok |= strcmp(state, states[i]) == 0;
		if (!ok)
			return req_fail(r, -EINVAL, "state must be running, exited, timed_out, cancelled or lost");
	}
	struct store_exec *v = NULL;
	size_t n = 0;
	rc = store_exec_list(r->app->store, r->tenant->name, state, session, session ? strlen(session) : 0,
			     (size_t)limit, false, &v, &n);
	if (rc < 0)
		return req_fail(r, rc, "cannot list execs");
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, exec_view(&v[i], false));
	store_execs_free(v, n);
	return reply_json(r, 200, json_pack("{s:o}", "execs", arr));
}
