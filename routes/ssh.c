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
#include "routes/app.h"
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

static struct route_ssh *of(const struct route_call *c)
{
	return (struct route_ssh *)c->tenant->provider;
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

/* Give conn back; rc, with the words of a broken connection. */
static int end(struct route_call *c, struct sbx_ssh_conn **conn, int rc)
{
	bool late = rc == -SBX_E_BACKEND && sbx_ssh_expired(*conn);
	sbx_ssh_put(of(c)->h, conn, rc != -SBX_E_BACKEND);
	if (rc != -SBX_E_BACKEND)
		return rc;
	const char *why = late ? "the host did not answer a file operation in time (a stopped "
				 "sftp-server?); the connection was dropped"
			       : "the connection broke during a file operation";
	note_down(c->app, of(c)->tenant, why);
	c->retry_after_s = DOWN_RETRY_AFTER_S;
	return route_call_why(c, rc, "the SSH connection to the tenant's host: %s; try again", why);
}

/* A connection for c, in the session's directory; or -SBX_E_BACKEND (or
 * -EAGAIN on an event thread). */
static int begin(struct route_call *c, struct sbx_ssh_conn **conn)
{
	if (nowait_on()) {
		nowait_blocked(); /* the network: on the file pool only */
		return -EAGAIN;
	}
	struct route_ssh *rs = of(c);
	if (!rs->h) {
		c->retry_after_s = BAD_RETRY_AFTER_S;
		return route_call_why(c, -SBX_E_BACKEND, "%s", rs->why);
	}
	char why[400];
	if (sbx_ssh_get(rs->h, conn, why, sizeof why) < 0) {
		note_down(c->app, rs->tenant, why);
		c->retry_after_s = DOWN_RETRY_AFTER_S;
		return route_call_why(c, -SBX_E_BACKEND, "the tenant's SSH host: %s", why);
	}
	route_jobs_note_up(c->app, "ssh");
	/* The session's directory, as route_session makes it locally. */
	int rc = c->session_rel ? sbx_ssh_session(*conn, c->session_rel) : 0;
	if (rc == 0 || rc == -SBX_E_BACKEND)
		return rc == 0 ? 0 : end(c, conn, rc);
	sbx_ssh_put(rs->h, conn, true);
	return route_call_why(c, rc, "cannot make the session's directory on the tenant's SSH host: %s",
			      sbx_strerror(rc));
}

/* POST /exec, on the event thread: the settings only. The host is
 * reached by the job's own thread (run), which reports why it could not. */
static int ssh_check(struct route_call *c)
{
	struct route_ssh *rs = of(c);
	if (rs->h)
		return 0;
	c->retry_after_s = BAD_RETRY_AFTER_S;
	return route_call_why(c, -SBX_E_BACKEND, "%s", rs->why);
}

static int ssh_read(struct route_call *c, const char *rel, uint64_t start, uint64_t want, char **data,
		    size_t *len)
{
	struct sbx_ssh_conn *conn = NULL;
	uint64_t size = 0;
	int rc = begin(c, &conn);
	if (rc < 0)
		return rc;
	rc = sbx_ssh_read(conn, rel, start, want, (size_t)c->max_bytes, data, len, &size);
	if (rc == -EFBIG)
		route_call_why(c, rc, "file is %llu bytes or more, over the buffered limit of %llu",
			       (unsigned long long)size, (unsigned long long)c->max_bytes);
	return end(c, &conn, rc);
}

static int ssh_write(struct route_call *c, const char *rel, const char *data, size_t len, uint64_t *size)
{
	struct sbx_ssh_conn *conn = NULL;
	int rc = begin(c, &conn);
	*size = len;
	return rc < 0 ? rc : end(c, &conn, sbx_ssh_write(conn, rel, data, len));
}

static int ssh_stat(struct route_call *c, const char *rel, struct sbx_stat *st)
{
	struct sbx_ssh_conn *conn = NULL;
	int rc = begin(c, &conn);
	return rc < 0 ? rc : end(c, &conn, sbx_ssh_stat(conn, rel, st));
}

static int ssh_readdir(struct route_call *c, const char *rel, const char *after, size_t limit, bool detail,
		       struct sbx_dir_page *page)
{
	struct sbx_ssh_conn *conn = NULL;
	int rc = begin(c, &conn);
	return rc < 0 ? rc : end(c, &conn, sbx_ssh_readdir(conn, rel, after, limit, detail, page));
}

static int ssh_exists(struct route_call *c, const char *rel, bool *exists)
{
	struct sbx_ssh_conn *conn = NULL;
	int rc = begin(c, &conn);
	return rc < 0 ? rc : end(c, &conn, sbx_ssh_exists(conn, rel, exists));
}

static int ssh_mkdir(struct route_call *c, const char *rel, bool recursive)
{
	struct sbx_ssh_conn *conn = NULL;
	int rc = begin(c, &conn);
	return rc < 0 ? rc : end(c, &conn, sbx_ssh_mkdir(conn, rel, recursive));
}

static int ssh_rm(struct route_call *c, const char *rel, bool recursive, bool force, bool *removed)
{
	struct sbx_ssh_conn *conn = NULL;
	int rc = begin(c, &conn);
	return rc < 0 ? rc : end(c, &conn, sbx_ssh_rm(conn, rel, recursive, force, removed));
}

static int ssh_move(struct route_call *c, const char *from, const char *to, bool overwrite)
{
	struct sbx_ssh_conn *conn = NULL;
	int rc = begin(c, &conn);
	return rc < 0 ? rc : end(c, &conn, sbx_ssh_move(conn, from, to, overwrite));
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
    .open = NULL, /* its files are on the host: read copies them */
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
