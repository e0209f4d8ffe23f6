/* Backend ssh's route glue: files and commands of a tenant on an SSH host
 * (see ssh.h; the protocol is sandbox/ssh*.c's). */
#include "routes/ssh.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/nowait.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/errors.h"
#include "http/response.h"
#include "routes/app.h"
#include "routes/fs.h"
#include "routes/paths.h"
#include "routes/policy.h"
#include "routes/provider.h"
#include "sandbox/ssh.h"
#include "sandbox/workspace.h"

#define TIMEOUT_MS 10000
#define DOWN_RETRY_AFTER_S 5
#define BAD_RETRY_AFTER_S 60

struct route_ssh {
	struct route_provider base;
	struct sbx_ssh_host *h; /* NULL: unusable, why says */
	char why[400];
	char tenant[64];
};

static struct route_ssh *of(struct http_req *r)
{
	return (struct route_ssh *)r->tenant->provider;
}

/* Hosts outlive the tenant cache's reloads (every few seconds), so their
 * pooled connections do: a reloaded tenant whose settings and key are
 * unchanged shares the host its earlier entry made. Process-wide, as the
 * connections are; an entry goes with its last user. */
struct host_entry {
	char tenant[64];
	struct sbx_ssh_host *h;
	int refs;
	struct host_entry *next;
};
static pthread_mutex_t hosts_mu = PTHREAD_MUTEX_INITIALIZER;
static struct host_entry *hosts;

/* fresh, or the equal host already shared (then fresh is freed); NULL
 * with why (fresh freed) when another loaded tenant uses the same account:
 * its commands could reach this tenant's files and kill its commands. */
static struct sbx_ssh_host *host_share(const char *tenant, struct sbx_ssh_host *fresh, char *why,
				       size_t whysz)
{
	pthread_mutex_lock(&hosts_mu);
	for (struct host_entry *o = hosts; o; o = o->next)
		if (strcmp(o->tenant, tenant) != 0 && sbx_ssh_host_same_account(o->h, fresh)) {
			snprintf(why, whysz,
				 "refused: tenant %s already uses this ssh_host, ssh_port and ssh_user "
				 "(one account per tenant)",
				 o->tenant);
			pthread_mutex_unlock(&hosts_mu);
			sbx_ssh_host_free(&fresh);
			return NULL;
		}
	struct host_entry *e = hosts;
	while (e && !(strcmp(e->tenant, tenant) == 0 && sbx_ssh_host_same(e->h, fresh)))
		e = e->next;
	if (e) {
		sbx_ssh_host_free(&fresh);
	} else {
		e = xcalloc(1, sizeof *e);
		snprintf(e->tenant, sizeof e->tenant, "%s", tenant);
		e->h = fresh;
		e->next = hosts;
		hosts = e;
	}
	e->refs++;
	pthread_mutex_unlock(&hosts_mu);
	return e->h;
}

static void host_unshare(struct sbx_ssh_host *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&hosts_mu);
	for (struct host_entry **p = &hosts; *p; p = &(*p)->next) {
		struct host_entry *e = *p;
		if (e->h != h)
			continue;
		if (--e->refs == 0) {
			*p = e->next;
			sbx_ssh_host_free(&e->h);
			free(e);
		}
		break;
	}
	pthread_mutex_unlock(&hosts_mu);
}

/* The host could not be reached: for the log and /readyz. */
static void note_down(struct app *a, const char *tenant, const char *why)
{
	char what[600];
	snprintf(what, sizeof what, "tenant %s: %s", tenant, why);
	log_msg("warn", "backend ssh: %s", what);
	route_jobs_note_down(a, "ssh", what);
}

/* Give c back; answer r with rc's error (as the local routes do). */
static int end(struct http_req *r, struct sbx_ssh_conn **c, int rc, const char *what, const char *rel)
{
	bool late = rc == -SBX_E_BACKEND && sbx_ssh_expired(*c);
	sbx_ssh_put(of(r)->h, c, rc != -SBX_E_BACKEND);
	if (rc == -SBX_E_BACKEND) {
		const char *why = late ? "the host did not answer a file operation in time (a stopped "
					 "sftp-server?); the connection was dropped"
				       : "the connection broke during a file operation";
		note_down(r->app, of(r)->tenant, why);
		r->retry_after_s = DOWN_RETRY_AFTER_S;
		return http_fail(r, rc, "the SSH connection to the tenant's host: %s; try again", why);
	}
	return rc < 0 ? route_fail_path(r, rc, what, rel) : 0;
}

/* A connection for r, or r answered 503 (or -EAGAIN on an event thread). */
static int begin(struct http_req *r, struct sbx_ssh_conn **c)
{
	if (nowait_on()) {
		nowait_blocked(); /* the network: on the file pool only */
		return -EAGAIN;
	}
	struct route_ssh *rs = of(r);
	if (!rs->h) {
		r->retry_after_s = BAD_RETRY_AFTER_S;
		return http_fail(r, -SBX_E_BACKEND, "%s", rs->why);
	}
	char why[400];
	if (sbx_ssh_get(rs->h, c, why, sizeof why) < 0) {
		note_down(r->app, rs->tenant, why);
		r->retry_after_s = DOWN_RETRY_AFTER_S;
		return http_fail(r, -SBX_E_BACKEND, "the tenant's SSH host: %s", why);
	}
	route_jobs_note_up(r->app, "ssh");
	/* The session's directory, as route_session makes it locally. */
	int rc = r->session_rel ? sbx_ssh_session(*c, r->session_rel) : 0;
	if (rc == 0)
		return 0;
	if (rc == -SBX_E_BACKEND)
		return end(r, c, rc, "mkdir", r->session_rel);
	sbx_ssh_put(rs->h, c, true);
	return http_fail(r, rc, "cannot make the session's directory on the tenant's SSH host: %s",
			 sbx_strerror(rc));
}

static json_t *wire_json(const char *rel)
{
	char w[SBX_PATH_MAX + 16];
	sbx_path_wire(rel, w, sizeof w);
	return json_string(w);
}

/* POST /exec, on the event thread: the settings only. The host is
 * reached by the job's own thread (run), which reports why it could not. */
static int ssh_check(struct http_req *r)
{
	struct route_ssh *rs = of(r);
	if (rs->h)
		return 0;
	r->retry_after_s = BAD_RETRY_AFTER_S;
	return http_fail(r, -SBX_E_BACKEND, "%s", rs->why);
}

static int ssh_read(struct http_req *r, const char *rel)
{
	struct sbx_ssh_conn *c = NULL;
	int rc = begin(r, &c);
	if (rc < 0)
		return rc;
	char *data = NULL;
	size_t len = 0, max = (size_t)r->app->cfg->max_buffered_bytes;
	uint64_t size = 0;
	rc = sbx_ssh_read(c, rel, 0, 0, max, &data, &len, &size);
	if (rc == -EFBIG) {
		sbx_ssh_put(of(r)->h, &c, true);
		return http_fail(r, rc, "file is %llu bytes or more, over the buffered limit of %zu",
				 (unsigned long long)size, max);
	}
	if ((rc = end(r, &c, rc, "read", rel)) < 0)
		return rc;
	return route_fs_reply_text(r, data, len);
}

static int ssh_read_buffer(struct http_req *r, const char *rel)
{
	struct sbx_ssh_conn *c = NULL;
	int rc = begin(r, &c);
	if (rc < 0)
		return rc;
	struct sbx_stat st;
	uint64_t start = 0, stop = 0, want = 0, max = (uint64_t)r->app->cfg->max_buffered_bytes;
	int status = 200;
	if ((rc = sbx_ssh_stat(c, rel, &st)) == 0) {
		const char *range = http_header(r, "Range");
		int pr = range ? route_fs_parse_range(range, st.size, &start, &stop) : -EINVAL;
		if (pr == -ERANGE) {
			sbx_ssh_put(of(r)->h, &c, true);
			return http_fail_range(r, st.size);
		}
		status = pr == 0 && st.size ? 206 : 200;
		want = status == 206 ? stop - start + 1 : 0;
		start = status == 206 ? start : 0;
		stop = st.size ? (status == 206 ? stop : st.size - 1) : 0;
		if ((want ? want : st.size) > max) {
			sbx_ssh_put(of(r)->h, &c, true);
			return http_fail(r, -EFBIG, "%llu bytes is over the buffered limit of %llu",
					 (unsigned long long)(want ? want : st.size),
					 (unsigned long long)max);
		}
	}
	char *data = NULL;
	size_t len = 0;
	uint64_t size = 0;
	if (rc == 0)
		rc = sbx_ssh_read(c, rel, start, want, (size_t)max, &data, &len, &size);
	if ((rc = end(r, &c, rc, "read", rel)) < 0)
		return rc;
	struct http_response *resp = http_response_bytes(data, len);
	route_fs_range_headers(resp, status, start, stop, size);
	r->bytes_out += (int64_t)len;
	return http_reply_response(r, status, resp);
}

static int ssh_write(struct http_req *r, const char *rel)
{
	struct sbx_ssh_conn *c = NULL;
	int rc = begin(r, &c);
	if (rc < 0)
		return rc;
	rc = sbx_ssh_write(c, rel, r->body.ptr ? r->body.ptr : "", r->body.len);
	if ((rc = end(r, &c, rc, "write", rel)) < 0)
		return rc;
	return http_reply_json(
	    r, 200, json_pack("{s:o, s:I}", "path", wire_json(rel), "size", (json_int_t)r->body.len));
}

static int ssh_stat(struct http_req *r, const char *rel)
{
	struct sbx_ssh_conn *c = NULL;
	int rc = begin(r, &c);
	if (rc < 0)
		return rc;
	struct sbx_stat st;
	rc = sbx_ssh_stat(c, rel, &st);
	if ((rc = end(r, &c, rc, "stat", rel)) < 0)
		return rc;
	return http_reply_json(r, 200, route_fs_stat_json(rel, &st));
}

static int ssh_readdir(struct http_req *r, const char *rel, const char *after, int64_t limit, bool detail)
{
	struct sbx_ssh_conn *c = NULL;
	int rc = begin(r, &c);
	if (rc < 0)
		return rc;
	struct sbx_dir_page page;
	rc = sbx_ssh_readdir(c, rel, after, (size_t)limit, detail, &page);
	if ((rc = end(r, &c, rc, "list", rel)) < 0)
		return rc;
	json_t *o = route_fs_page_json(&page, detail);
	sbx_dir_page_clear(&page);
	return http_reply_json(r, 200, o);
}

static int ssh_exists(struct http_req *r, const char *rel)
{
	struct sbx_ssh_conn *c = NULL;
	int rc = begin(r, &c);
	if (rc < 0)
		return rc;
	bool yes = false;
	rc = sbx_ssh_exists(c, rel, &yes);
	if ((rc = end(r, &c, rc, "look up", rel)) < 0)
		return rc;
	return http_reply_json(r, 200, json_pack("{s:b}", "exists", yes));
}

static int ssh_mkdir(struct http_req *r, const char *rel, bool recursive)
{
	struct sbx_ssh_conn *c = NULL;
	int rc = begin(r, &c);
	if (rc < 0)
		return rc;
	rc = sbx_ssh_mkdir(c, rel, recursive);
	if ((rc = end(r, &c, rc, "create", rel)) < 0)
		return rc;
	return http_reply_json(r, 201, json_pack("{s:o}", "path", wire_json(rel)));
}

static int ssh_rm(struct http_req *r, const char *rel, bool recursive, bool force)
{
	struct sbx_ssh_conn *c = NULL;
	int rc = begin(r, &c);
	if (rc < 0)
		return rc;
	bool removed = false;
	rc = sbx_ssh_rm(c, rel, recursive, force, &removed);
	if ((rc = end(r, &c, rc, "remove", rel)) < 0)
		return rc;
	return http_reply_json(r, 200, json_pack("{s:o, s:b}", "path", wire_json(rel), "removed", removed));
}

static int ssh_move(struct http_req *r, const char *from, const char *to, bool overwrite)
{
	struct sbx_ssh_conn *c = NULL;
	int rc = begin(r, &c);
	if (rc < 0)
		return rc;
	rc = sbx_ssh_move(c, from, to, overwrite);
	if ((rc = end(r, &c, rc, "move", rc == -EEXIST || rc == -SBX_E_PARENT_MISSING ? to : from)) < 0)
		return rc;
	return http_reply_json(r, 200, json_pack("{s:o}", "path", wire_json(to)));
}

/* ---- commands ---- */

struct sjob {
	struct route_job base; /* first: routes/jobs.c's */
	struct route_ssh *rs;  /* the tenant's: the registry holds the tenant until the exit */
	struct app *app;
	_Atomic bool cancel;
	int64_t start_mono;
	struct sbx_ssh_exec x;
};

static void sjob_fire(struct route_job *base)
{
	((struct sjob *)base)->cancel = true;
}

static void sjob_free(struct route_job *base)
{
	route_job_clear(base);
	free((struct sjob *)base);
}

static void on_start(void *ctx)
{
	route_job_started(ctx);
}

static void on_output(void *ctx, int stream, const char *data, size_t len)
{
	route_job_output(ctx, stream, data, len);
}

static void on_heartbeat(void *ctx, const struct sbx_event *hb)
{
	route_job_heartbeat(ctx, hb);
}

/* A job's failure when its deadline or cancel cut the connection
 * (expired: sbx_ssh_expired's): a cancel is -ECANCELED (nothing ran, as
 * locally), a deadline 503 saying so. */
static int expired_why(int rc, int expired, struct sjob *j, char *why, size_t whysz)
{
	if (rc == 0 || !expired)
		return rc;
	if (expired == 2)
		return -ECANCELED;
	snprintf(why, whysz,
		 "the tenant's SSH host did not answer within the command's timeout_s (%lld ms); "
		 "the connection was dropped (a stopped sftp-server?)",
		 (long long)j->x.timeout_ms);
	return -SBX_E_BACKEND;
}

/* Connect, find the cwd, run: 0 with *res, or the error with why. */
static int run(struct sjob *j, struct sbx_exec_result *res, char *why, size_t whysz)
{
	struct sbx_ssh_conn *c = NULL;
	/* Until the command runs: its timeout_s and cancel bound the connect,
	 * the cwd walk and the stdin (sbx_ssh_run's pump keeps them after). */
	int64_t deadline = j->start_mono + (j->x.timeout_ms ? (int64_t)j->x.timeout_ms : 6 * TIMEOUT_MS);
	int rc = sbx_ssh_get_by(j->rs->h, deadline, &j->cancel, &c, why, whysz);
	if (rc < 0)
		return expired_why(rc, j->cancel ? 2 : 0, j, why, whysz);
	route_jobs_note_up(j->app, "ssh");
	char abs[4096];
	const char *cwd = j->base.cwd_rel;
	rc = sbx_ssh_dir(c, cwd, strncmp(cwd, "sessions/", 9) == 0 && !strchr(cwd + 9, '/'), abs, sizeof abs);
	if (rc < 0 && rc != -SBX_E_BACKEND) { /* as a local cwd is refused */
		rc = rc == -EXDEV || rc == -ENOTDIR || rc == -ELOOP ? rc : -ENOENT;
		snprintf(why, whysz, "cwd %s",
			 rc == -EXDEV ? "leaves the workspace" : "is not a directory in the workspace");
	} else if (rc < 0)
		snprintf(why, whysz, "the SSH connection broke before the command started");
	j->x.dir = abs;
	if (rc == 0)
		rc = sbx_ssh_run(c, &j->x, res, why, whysz);
	rc = expired_why(rc, rc < 0 ? sbx_ssh_expired(c) : 0, j, why, whysz);
	sbx_ssh_put(j->rs->h, &c, rc != -SBX_E_BACKEND);
	return rc;
}

static void *sjob_main(void *arg)
{
	struct sjob *j = arg;
	struct sbx_exec_result res;
	char why[400] = "";
	int rc = run(j, &res, why, sizeof why);
	if (rc == -SBX_E_BACKEND)
		note_down(j->app, j->rs->tenant, why);
	route_job_exit(&j->base, rc == 0 ? &res : NULL, rc, why,
		       rc == -SBX_E_BACKEND ? DOWN_RETRY_AFTER_S : 0, sjob_free);
	return NULL;
}

static struct sjob *sjob_new(struct route_ssh *rs, const struct sbx_exec_req *req)
{
	struct sjob *j = xcalloc(1, sizeof *j);
	route_job_init(&j->base, req, sjob_fire);
	j->rs = rs;
	j->start_mono = mono_ms();
	j->x = (struct sbx_ssh_exec){.env = (const char *const *)j->base.env,
				     .command = j->base.command,
				     .stdin_data = j->base.stdin_data,
				     .stdin_len = j->base.stdin_len,
				     .timeout_ms = req->timeout_ms,
				     .idle_timeout_ms = req->idle_timeout_ms,
				     .heartbeat_ms = req->heartbeat_ms,
				     .max_output_bytes = req->max_output_bytes,
				     .cancel = &j->cancel,
				     .ctx = &j->base,
				     .on_start = on_start,
				     .on_output = req->want_output_events ? on_output : NULL,
				     .on_heartbeat = on_heartbeat};
	return j;
}

static int ssh_submit(struct app *a, struct route_provider *p, const char *session, size_t session_len,
		      const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx, uint64_t *job)
{
	struct route_ssh *rs = (struct route_ssh *)p;
	if (!rs->h)
		return -SBX_E_BACKEND; /* unusable settings */
	struct sjob *j = sjob_new(rs, req);
	j->app = a;
	int rc = route_job_start(a, &j->base, sjob_main, cb, ctx, job);
	if (rc < 0)
		sjob_free(&j->base);
	return rc;
}

static void ssh_free(struct route_provider *p)
{
	struct route_ssh *rs = (struct route_ssh *)p;
	host_unshare(rs->h);
	free(rs);
}

static const struct route_provider_ops ssh_ops = {
    .name = "ssh",
    .where = "on a host over SSH (backend ssh)",
    .down = "the tenant's SSH host cannot be reached, or the connection broke while the command ran "
	    "(what became of it there is unknown)",
    .caps = 0, /* files and commands on the host: no workspace, nothing run here */
    .check = ssh_check,
    .read = ssh_read,
    .read_buffer = ssh_read_buffer,
    .write = ssh_write,
    .stat = ssh_stat,
    .readdir = ssh_readdir,
    .exists = ssh_exists,
    .mkdir = ssh_mkdir,
    .rm = ssh_rm,
    .move = ssh_move,
    .cwd = NULL, /* checked by the job (run): never SSH on an event thread */
    .submit = ssh_submit,
    .free = ssh_free,
};

struct route_provider *route_ssh_new(struct app *a, const char *tenant, const struct route_policy *p)
{
	struct route_ssh *rs = xcalloc(1, sizeof *rs);
	rs->base.ops = &ssh_ops;
	snprintf(rs->tenant, sizeof rs->tenant, "%s", tenant);
	if (!route_policy_backend_offered(a->cfg, "ssh")) {
		snprintf(rs->why, sizeof rs->why, "backend ssh is not offered by this server (backends: %s)",
			 a->cfg->backends);
		return &rs->base;
	}
	const struct sbx_ssh_opts o = {.host = p->ssh_host,
				       .port = (int)p->ssh_port,
				       .user = p->ssh_user,
				       .root = p->ssh_root,
				       .key_file = p->ssh_key_file,
				       .host_key = p->ssh_host_key,
				       .timeout_ms = TIMEOUT_MS};
	struct sbx_ssh_host *h = NULL;
	if (sbx_ssh_host_new(&h, &o, rs->why, sizeof rs->why) < 0)
		log_msg("warn", "backend ssh: tenant %s: %s", tenant, rs->why);
	else if (!(rs->h = host_share(tenant, h, rs->why, sizeof rs->why)))
		note_down(a, tenant, rs->why);
	return &rs->base;
}
