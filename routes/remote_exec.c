/* Commands of remote tenants: one thread per command drives sbxc_exec on
 * the back server and reports the runner's events (see remote.h). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "common/xmalloc.h"
#include "http/errors.h"
#include "routes/app.h"
#include "routes/remote.h"
#include "routes/remote_impl.h"
#include "sandbox/rootimg.h"
#include "sandbox/workspace.h"

#define GRACE_MS 30000	     /* beyond the command's own timeouts, for the answer */
#define CANCEL_WAIT_MS 10000 /* for the back's record of a cancelled command */

struct rjob {
	struct route_job base; /* first: routes/jobs.c's */
	struct sbxc *h;	       /* the tenant's: the registry holds the tenant until the exit */
	struct sbxc_cancel *cancel;
	_Atomic bool cancelled;
	_Atomic bool started; /* the back accepted the command */
	char id[72];
	char *session, *cwd;   /* cwd: base.cwd_rel as the wire says it */
	struct sbxc_env *envv; /* base.env's: names copied, values pointing into it */
	long timeout_s, idle_s, max_output;
};

/* Under the job list's lock: never blocks. */
static void rjob_fire(struct route_job *base)
{
	struct rjob *j = (struct rjob *)base;
	j->cancelled = true;
	sbxc_cancel_fire(j->cancel);
}

static void rjob_free(struct route_job *base)
{
	struct rjob *j = (struct rjob *)base;
	for (size_t i = 0; j->envv && i < j->base.nenv; i++)
		free((char *)j->envv[i].name);
	free(j->envv);
	free(j->session);
	free(j->cwd);
	sbxc_cancel_free(&j->cancel);
	route_job_clear(&j->base);
	free(j);
}

static void on_started(void *arg, const char *id)
{
	(void)id;
	struct rjob *j = arg;
	j->started = true;
	route_job_started(&j->base);
}

static int on_output(void *arg, int stream, const char *data, size_t len)
{
	struct rjob *j = arg;
	route_job_output(&j->base, stream, data, len);
	return 0;
}

/* The streamed request was cut by a cancel: ask the back to cancel too
 * (the cut alone makes it cancel, as a client's hang-up does) and wait
 * for its record of the end. 0 with *res, or the error. */
static int finish_cancel(struct rjob *j, struct sbxc_result *res)
{
	struct sbxc_call c = {.session = j->session, .timeout_ms = CANCEL_WAIT_MS, .max_retries = -1};
	struct sbxc_err e;
	int rc = sbxc_exec_cancel(j->h, &c, j->id, &e);
	if (rc < 0 && rc != -EBUSY && rc != -ENOENT)
		return rc;
	int64_t until = mono_ms() + CANCEL_WAIT_MS;
	for (long wait_ms = 20; mono_ms() < until; wait_ms = wait_ms < 500 ? wait_ms * 2 : 500) {
		struct sbxc_exec_info x = {0};
		c.timeout_ms = until - mono_ms() > 0 ? until - mono_ms() : 1;
		rc = sbxc_exec_get(j->h, &c, j->id, &x, &e);
		if (rc == 0 && x.has_result) {
			*res = x.result;
			x.has_result = false;
			x.result = (struct sbxc_result){0};
			sbxc_exec_info_clear(&x);
			return 0;
		}
		sbxc_exec_info_clear(&x);
		if (rc < 0 && rc != -ENOENT)
			return rc;
		struct timespec ts = {wait_ms / 1000, (wait_ms % 1000) * 1000000};
		nanosleep(&ts, NULL); /* polling the back's record, bounded above */
	}
	return -ETIMEDOUT;
}

static int64_t time_ms(const char *s, int64_t dflt)
{
	int64_t ms = 0;
	return s && rfc3339_parse(s, &ms) == 0 ? ms : dflt;
}

/* s into dst, NUL-terminated, cut to fit at a character's start: a JSON
 * string must stay UTF-8 (a sandboxd back's values fit: its arrays are
 * these). */
static void copy_cut(char *dst, size_t dstsz, const char *s)
{
	size_t n = strnlen(s, dstsz - 1);
	if (s[n])
		n = utf8_cut_end(s, n);
	memcpy(dst, s, n);
	dst[n] = '\0';
}

/* The back's egress_denied as the front's (the back's gateway decided);
 * the back's counts of connections are not in its ShellResult and stay
 * 0. */
static void to_egress(const struct sbxc_result *in, struct sbx_egress_summary *out)
{
	for (size_t i = 0; i < in->n_egress_denied && out->n_denied < SBX_EGRESS_DENIED_MAX; i++) {
		struct sbx_egress_denied *d = &out->denied[out->n_denied++];
		copy_cut(d->dest, sizeof d->dest, in->egress_denied[i].dest);
		copy_cut(d->reason, sizeof d->reason, in->egress_denied[i].reason);
	}
}

/* The back's ShellResult as the runner's result; takes its strings. */
static void to_result(struct sbxc_result *in, struct sbx_exec_result *out)
{
	int64_t now = now_ms();
	*out = (struct sbx_exec_result){
	    .exit_code = in->exit_code,
	    .timed_out = in->timed_out,
	    .idle = in->idle,
	    .cancelled = in->cancelled,
	    .truncated = in->truncated,
	    .oom_killed = in->oom_killed,
	    .pids_limited = in->pids_limited,
	    .uncontained = in->uncontained,
	    .stdout_text = in->stdout_text,
	    .stdout_len = in->stdout_text ? strlen(in->stdout_text) : 0,
	    .stderr_text = in->stderr_text,
	    .stderr_len = in->stderr_text ? strlen(in->stderr_text) : 0,
	    .stdout_bytes = in->stdout_bytes,
	    .stderr_bytes = in->stderr_bytes,
	    .stdout_spill = in->stdout_spill,
	    .stderr_spill = in->stderr_spill,
	    .finished_at_ms = time_ms(in->finished_at, now),
	    .networked = in->networked,
	};
	to_egress(in, &out->egress);
	out->started_at_ms = time_ms(in->started_at, out->finished_at_ms - in->duration_ms);
	in->stdout_text = in->stderr_text = in->stdout_spill = in->stderr_spill = NULL;
}

/* The errno the registry answers with when the back gave no result. */
static int spawn_error_of(int rc, const struct sbxc_err *e)
{
	if (e->status == 0 || e->status == 401 || strcmp(e->code, "insufficient_scope") == 0 || !e->code[0])
		return rc == -ECANCELED ? -ECANCELED : -SBX_E_BACKEND;
	return http_errno_of_wire(e->code);
}

static void *job_main(void *arg)
{
	struct rjob *j = arg;
	struct sbxc_call c = {.session = j->session,
			      .timeout_ms = (j->timeout_s + j->idle_s) * 1000 + GRACE_MS,
			      .cancel = j->cancel,
			      .max_retries = -1};
	const struct sbxc_exec_req q = {.command = j->base.command,
					.cwd = j->cwd,
					.env = j->envv,
					.nenv = j->base.nenv,
					.timeout_s = j->timeout_s,
					.idle_timeout_s = j->idle_s,
					.stdin_data = j->base.stdin_data,
					.stdin_len = j->base.stdin_len,
					.max_output_bytes = j->max_output,
					.id = j->id};
	struct sbxc_result res = {0};
	struct sbxc_err e = {0};
	int rc = sbxc_exec(j->h, &c, &q, on_output, on_started, j, &res, &e);
	if (rc == -ECANCELED && j->cancelled && !j->started) {
		/* Cut before the back accepted it: if it did, the cut cancels it. */
		e = (struct sbxc_err){0};
	} else if (rc == -ECANCELED && j->cancelled) {
		rc = finish_cancel(j, &res);
		if (rc < 0)
			log_msg("warn", "exec %s: the remote sandboxd did not confirm its cancel: %s", j->id,
				sbx_strerror(rc));
		e = (struct sbxc_err){0};
	}
	struct sbx_exec_result out;
	if (rc == 0)
		to_result(&res, &out);
	else if (e.status == 0)
		log_msg("warn", "exec %s: the remote sandboxd failed: %s", j->id, sbx_strerror(rc));
	sbxc_result_clear(&res); /* out took its strings */
	int err = rc == 0 ? 0 : spawn_error_of(rc, &e);
	const char *message = NULL;
	int64_t retry_after_s = 0;
	if (err && err != -SBX_E_BACKEND && err != -ECANCELED && e.message[0]) {
		message = e.message; /* the back's refusal, as it said it */
		retry_after_s = e.retry_after_s > 0 ? e.retry_after_s : 0;
	} else if (err == -SBX_E_BACKEND) {
		retry_after_s = e.retry_after_s > 0 ? e.retry_after_s : 5;
	}
	route_job_exit(&j->base, rc == 0 ? &out : NULL, err, message, retry_after_s, rjob_free);
	return NULL;
}

static struct rjob *rjob_new(struct route_remote *rr, const char *session, size_t session_len,
			     const struct sbx_exec_req *req)
{
	struct rjob *j = xcalloc(1, sizeof *j);
	route_job_init(&j->base, req, rjob_fire);
	j->h = rr->h;
	snprintf(j->id, sizeof j->id, "%s", req->id);
	j->session = xstrndup(session, session_len);
	char cwd[SBX_PATH_MAX + 16];
	sbx_path_wire(j->base.cwd_rel, cwd, sizeof cwd);
	j->cwd = xstrdup(cwd);
	j->envv = xcalloc(j->base.nenv + 1, sizeof *j->envv);
	for (size_t i = 0; i < j->base.nenv; i++) {
		const char *s = j->base.env[i], *eq = strchr(s, '=');
		j->envv[i] =
		    (struct sbxc_env){eq ? xstrndup(s, (size_t)(eq - s)) : xstrdup(s), eq ? eq + 1 : ""};
	}
	j->timeout_s = (long)(req->timeout_ms / 1000);
	j->idle_s = (long)(req->idle_timeout_ms / 1000);
	j->max_output = (long)req->max_output_bytes;
	sbxc_cancel_new(&j->cancel);
	return j;
}

int route_remote_submit(struct app *a, struct route_provider *p, const char *session, size_t session_len,
			const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx, uint64_t *job)
{
	struct route_remote *rr = (struct route_remote *)p;
	if (!rr->h)
		return -SBX_E_BACKEND; /* unusable settings */
	struct rjob *j = rjob_new(rr, session, session_len, req);
	int rc = route_job_start(a, &j->base, job_main, cb, ctx, job);
	if (rc < 0)
		rjob_free(&j->base);
	return rc;
}
