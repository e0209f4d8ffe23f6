/* The remote provider's handle and file routes (see remote.h). */
#include "routes/remote.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth/auth.h"
#include "client/sandboxd.h"
#include "common/nowait.h"
#include "common/config.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/secretfile.h"
#include "common/xmalloc.h"
#include "http/errors.h"
#include "routes/app.h"
#include "routes/policy.h"
#include "routes/remote_back.h"
#include "routes/remote_impl.h"
#include "sandbox/fsops.h"
#include "sandbox/workspace.h"

#define CONNECT_TIMEOUT_MS 3000
#define CALL_TIMEOUT_MS 60000
#define DOWN_RETRY_AFTER_S 5

/* Which front tenant holds each back tenant in this process: a second
 * one naming it is refused at use as well (a policy set before this
 * check, or a token file changed since). An entry goes with its last
 * provider (the tenant cache reloads every few seconds). */
struct back_entry {
	char tenant[64];
	char back[400];
	int refs;
	struct back_entry *next;
};
static pthread_mutex_t backs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct back_entry *backs;

/* 0, or -EEXIST with holder filled. */
static int back_claim(const char *tenant, const char *back, char *holder, size_t holdersz)
{
	pthread_mutex_lock(&backs_mu);
	struct back_entry *e = backs;
	for (; e; e = e->next)
		if (strcmp(e->back, back) == 0)
			break;
	int rc = 0;
	if (e && strcmp(e->tenant, tenant) != 0) {
		snprintf(holder, holdersz, "%s", e->tenant);
		rc = -EEXIST;
	} else if (e) {
		e->refs++;
	} else {
		e = xcalloc(1, sizeof *e);
		snprintf(e->tenant, sizeof e->tenant, "%s", tenant);
		snprintf(e->back, sizeof e->back, "%s", back);
		e->refs = 1;
		e->next = backs;
		backs = e;
	}
	pthread_mutex_unlock(&backs_mu);
	return rc;
}

static void back_release(const char *back)
{
	pthread_mutex_lock(&backs_mu);
	for (struct back_entry **pp = &backs; *pp; pp = &(*pp)->next) {
		struct back_entry *e = *pp;
		if (strcmp(e->back, back) != 0)
			continue;
		if (--e->refs == 0) {
			*pp = e->next;
			free(e);
		}
		break;
	}
	pthread_mutex_unlock(&backs_mu);
}

/* What the tenant reads of why: the reason without the server's paths
 * and URLs (the log has them whole). */
static void tenant_why(struct route_remote *rr, const char *reason)
{
	log_msg("warn", "backend remote: tenant %s (%s): %s", rr->tenant, rr->url, rr->why);
	snprintf(rr->why, sizeof rr->why,
		 "the tenant's remote backend is not usable: %s (the server's log has the details)", reason);
}

/* Why a token file was refused, in words that name no path. */
static const char *token_reason(const char *why)
{
	if (strstr(why, "readable by it alone"))
		return "its token file must be readable by it alone";
	if (strstr(why, "one token"))
		return "its token file must hold one token";
	return "its token file cannot be read";
}

static void open_handle(struct route_remote *rr, const struct app *a, const struct route_policy *p)
{
	if (!route_policy_backend_offered(a->cfg, "remote")) {
		snprintf(rr->why, sizeof rr->why,
			 "backend remote is not offered by this server (backends: %s)", a->cfg->backends);
		return;
	}
	if (!p->remote_url || !p->remote_token_file) {
		snprintf(rr->why, sizeof rr->why,
			 "backend remote needs remote_url and remote_token_file in the tenant's policy");
		return;
	}
	char *token = route_remote_token_read(p->remote_token_file, rr->why, sizeof rr->why);
	if (!token) {
		tenant_why(rr, token_reason(rr->why));
		return;
	}
	char holder[64];
	if (route_remote_back_of(p, rr->back, sizeof rr->back, rr->why, sizeof rr->why) < 0) {
		tenant_why(rr, "the back tenant it names cannot be told (set remote_tenant)");
	} else if (back_claim(rr->tenant, rr->back, holder, sizeof holder) < 0) {
		snprintf(rr->why, sizeof rr->why, "back tenant %.200s is front tenant %s's", rr->back,
			 holder);
		tenant_why(rr, "refused: another tenant of this server already uses the back tenant it names "
			       "(one back tenant per front tenant)");
	} else {
		rr->back_claimed = true;
		const struct sbxc_opts o = {.base_url = p->remote_url,
					    .token = token,
					    .tenant = p->remote_tenant,
					    .connect_timeout_ms = CONNECT_TIMEOUT_MS,
					    .timeout_ms = CALL_TIMEOUT_MS,
					    .max_retries = -1,
					    .max_body_bytes = (size_t)a->cfg->max_buffered_bytes + 65536,
					    .user_agent = "sandboxd-remote/" SANDBOXD_VERSION};
		if (sbxc_new(&rr->h, &o) < 0) {
			snprintf(rr->why, sizeof rr->why, "remote_url %s is not usable", p->remote_url);
			tenant_why(rr, "its remote_url is not usable");
		}
	}
	memset(token, 0, strlen(token));
	free(token);
}

static void remote_free(struct route_provider *p)
{
	struct route_remote *rr = (struct route_remote *)p;
	if (rr->back_claimed)
		back_release(rr->back);
	sbxc_free(&rr->h);
	free(rr);
}

static const struct route_provider_ops remote_ops;

struct route_provider *route_remote_new(const struct app *a, const char *tenant, const struct route_policy *p)
{
	struct route_remote *rr = xcalloc(1, sizeof *rr);
	rr->base.ops = &remote_ops;
	snprintf(rr->url, sizeof rr->url, "%s", p->remote_url ? p->remote_url : "(none)");
	snprintf(rr->tenant, sizeof rr->tenant, "%s", tenant);
	open_handle(rr, a, p);
	return &rr->base;
}

static struct route_remote *of(const struct route_call *c)
{
	return (struct route_remote *)c->tenant->provider;
}

/* A failed call's error into c (see remote.h); returns its code. */
static int fail(struct route_call *c, int rc, const struct sbxc_err *e)
{
	struct route_remote *rr = of(c);
	bool refused_us = e->status == 401 || strcmp(e->code, "insufficient_scope") == 0;
	if (e->status == 0 || refused_us || !e->code[0]) {
		char text[700], what[1000];
		c->retry_after_s = e->retry_after_s > 0 ? e->retry_after_s : DOWN_RETRY_AFTER_S;
		snprintf(what, sizeof what, "%s %s", rr->url,
			 refused_us ? "refused this server's token (check remote_token_file)"
				    : sbxc_err_text(e, rc, text, sizeof text));
		route_jobs_note_down(c->app, "remote", what);
		/* The log and /readyz (the operator's) name the back; the
		 * tenant's answer names neither its URL nor the token file. */
		log_msg("warn", "backend remote: tenant %s, request %s: %s", rr->tenant, c->request_id, what);
		return route_call_why(c, -SBX_E_BACKEND,
				      "the tenant's remote sandboxd %s (the server's log has the details)",
				      refused_us ? "refused this server's token" : "cannot be reached");
	}
	if (e->retry_after_s > 0)
		c->retry_after_s = e->retry_after_s;
	return route_call_why(c, http_errno_of_wire(e->code), "%s", e->message);
}

/* Fill k for a call on behalf of c (its session, request id; never
 * retried here): 0, or the code of why it cannot be made (-SBX_E_BACKEND:
 * the tenant's settings cannot work; -EAGAIN on an event thread). */
static int call(struct route_call *c, struct remote_call *k)
{
	struct route_remote *rr = of(c);
	*k = (struct remote_call){.h = rr->h};
	/* A call to another server waits on the network: never on an event
	 * thread in no-wait mode (http/router.c sends the request to the
	 * pool when this says it would wait). */
	if (nowait_on()) {
		nowait_blocked();
		return -EAGAIN;
	}
	if (!rr->h) {
		c->retry_after_s = 60;
		return route_call_why(c, -SBX_E_BACKEND, "%s", rr->why);
	}
	size_t n = c->session_key_len < sizeof k->session - 1 ? c->session_key_len : sizeof k->session - 1;
	if (c->session_key)
		memcpy(k->session, c->session_key, n);
	k->session[c->session_key ? n : 0] = '\0';
	k->c.session = k->session;
	k->c.request_id = c->request_id;
	k->c.max_retries = -1;
	return 0;
}

static int remote_check(struct route_call *c)
{
	struct remote_call k;
	return call(c, &k);
}

static void wire(const char *rel, char out[SBX_PATH_MAX + 16])
{
	sbx_path_wire(rel, out, SBX_PATH_MAX + 16);
}

/* Each op: the call made (its failure already in c's words), then the
 * back's answer, whose failure fail() says. */
static int remote_read(struct route_call *c, const char *rel, uint64_t start, uint64_t want, char **data,
		       size_t *len)
{
	struct remote_call k;
	char w[SBX_PATH_MAX + 16];
	int rc = call(c, &k);
	if (rc < 0)
		return rc;
	wire(rel, w);
	rc = sbxc_read_file_buffer(k.h, &k.c, w, start, want, data, len, &k.e);
	return rc < 0 ? fail(c, rc, &k.e) : 0;
}

static int remote_write(struct route_call *c, const char *rel, const char *data, size_t len, uint64_t *size)
{
	struct remote_call k;
	char w[SBX_PATH_MAX + 16];
	int rc = call(c, &k);
	if (rc < 0)
		return rc;
	wire(rel, w);
	rc = sbxc_write_file(k.h, &k.c, w, data, len, size, &k.e);
	return rc < 0 ? fail(c, rc, &k.e) : 0;
}

static enum sbx_ftype ftype_of(enum sbxc_type t)
{
	switch (t) {
	case SBXC_FILE:
		return SBX_FT_FILE;
	case SBXC_DIR:
		return SBX_FT_DIR;
	case SBXC_SYMLINK:
		return SBX_FT_SYMLINK;
	default:
		return SBX_FT_OTHER;
	}
}

static struct timespec ts_of(int64_t ms)
{
	return (struct timespec){.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
}

/* The back's stat as this server's: a link it describes without a size
 * dangles or leaves the workspace (see route_fs_stat_json). */
static int remote_stat(struct route_call *c, const char *rel, struct sbx_stat *st)
{
	struct remote_call k;
	struct sbxc_stat got = {0};
	char w[SBX_PATH_MAX + 16];
	int rc = call(c, &k);
	if (rc < 0)
		return rc;
	wire(rel, w);
	if ((rc = sbxc_stat(k.h, &k.c, w, &got, &k.e)) < 0)
		return fail(c, rc, &k.e);
	*st = (struct sbx_stat){.type = ftype_of(got.type),
				.is_symlink = got.is_symlink,
				.followed = got.is_symlink && got.has_size,
				.size = got.size,
				.mtime = ts_of(got.mtime_ms),
				.mode = got.mode & 07777};
	sbxc_stat_clear(&got);
	return 0;
}

/* The back's page as this server's; its cursor is a sandboxd's, which
 * fits (a longer one is not a sandboxd's answer). */
static int page_of(struct route_call *c, struct sbxc_dirent *v, size_t n, char *next,
		   struct sbx_dir_page *page)
{
	*page = (struct sbx_dir_page){.ents = xcalloc(n ? n : 1, sizeof *page->ents), .n = n, .more = next};
	for (size_t i = 0; i < n; i++) {
		page->ents[i] = (struct sbx_dirent){.name = v[i].name,
						    .type = ftype_of(v[i].type),
						    .size = v[i].size,
						    .mtime = ts_of(v[i].mtime_ms)};
		v[i].name = NULL; /* taken */
	}
	sbxc_dirents_free(v, n);
	int rc = 0;
	if (next && snprintf(page->next, sizeof page->next, "%s", next) >= (int)sizeof page->next) {
		sbx_dir_page_clear(page);
		rc = route_call_why(c, -SBX_E_BACKEND,
				    "the tenant's remote sandboxd gave a cursor that is not one");
	}
	free(next);
	return rc;
}

static int remote_readdir(struct route_call *c, const char *rel, const char *after, size_t limit, bool detail,
			  struct sbx_dir_page *page)
{
	struct remote_call k;
	struct sbxc_dirent *v = NULL;
	size_t n = 0;
	char *next = NULL, w[SBX_PATH_MAX + 16];
	int rc = call(c, &k);
	if (rc < 0)
		return rc;
	wire(rel, w);
	if ((rc = sbxc_readdir_page(k.h, &k.c, w, detail, after, (int)limit, &v, &n, &next, &k.e)) < 0)
		return fail(c, rc, &k.e);
	return page_of(c, v, n, next, page);
}

static int remote_exists(struct route_call *c, const char *rel, bool *exists)
{
	struct remote_call k;
	char w[SBX_PATH_MAX + 16];
	int rc = call(c, &k);
	if (rc < 0)
		return rc;
	wire(rel, w);
	rc = sbxc_exists(k.h, &k.c, w, exists, &k.e);
	return rc < 0 ? fail(c, rc, &k.e) : 0;
}

static int remote_mkdir(struct route_call *c, const char *rel, bool recursive)
{
	struct remote_call k;
	char w[SBX_PATH_MAX + 16];
	int rc = call(c, &k);
	if (rc < 0)
		return rc;
	wire(rel, w);
	rc = sbxc_mkdir(k.h, &k.c, w, recursive, &k.e);
	return rc < 0 ? fail(c, rc, &k.e) : 0;
}

static int remote_rm(struct route_call *c, const char *rel, bool recursive, bool force, bool *removed)
{
	struct remote_call k;
	char w[SBX_PATH_MAX + 16];
	int rc = call(c, &k);
	if (rc < 0)
		return rc;
	wire(rel, w);
	rc = sbxc_rm(k.h, &k.c, w, recursive, force, removed, &k.e);
	return rc < 0 ? fail(c, rc, &k.e) : 0;
}

static int remote_move(struct route_call *c, const char *from, const char *to, bool overwrite)
{
	struct remote_call k;
	char wf[SBX_PATH_MAX + 16], wt[SBX_PATH_MAX + 16];
	int rc = call(c, &k);
	if (rc < 0)
		return rc;
	wire(from, wf);
	wire(to, wt);
	rc = sbxc_move(k.h, &k.c, wf, wt, overwrite, &k.e);
	return rc < 0 ? fail(c, rc, &k.e) : 0;
}

static const struct route_provider_ops remote_ops = {
    .name = "remote",
    .where = "by another sandboxd (backend remote); use that server for it",
    .down = "the tenant's remote sandboxd cannot be reached, or went away while the command ran (what "
	    "became of it there is unknown)",
    .caps = 0, /* files and commands on the back: no workspace, nothing run here */
    .check = remote_check,
    .read = remote_read,
    .open = NULL, /* its files are on the back: read copies them */
    .write = remote_write,
    .stat = remote_stat,
    .readdir = remote_readdir,
    .exists = remote_exists,
    .mkdir = remote_mkdir,
    .rm = remote_rm,
    .move = remote_move,
    .submit = route_remote_submit,
    .free = remote_free,
};
