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
#include "http/response.h"
#include "routes/app.h"
#include "routes/fs.h"
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

int route_remote_fail(struct http_req *r, struct route_remote *rr, int rc, const struct sbxc_err *e)
{
	bool refused_us = e->status == 401 || strcmp(e->code, "insufficient_scope") == 0;
	if (e->status == 0 || refused_us || !e->code[0]) {
		char text[700], what[1000];
		r->retry_after_s = e->retry_after_s > 0 ? e->retry_after_s : DOWN_RETRY_AFTER_S;
		snprintf(what, sizeof what, "%s %s", rr->url,
			 refused_us ? "refused this server's token (check remote_token_file)"
				    : sbxc_err_text(e, rc, text, sizeof text));
		route_jobs_note_down(r->app, "remote", what);
		/* The log and /readyz (the operator's) name the back; the
		 * tenant's answer names neither its URL nor the token file. */
		log_msg("warn", "backend remote: tenant %s, request %s: %s", rr->tenant, r->request_id, what);
		return http_fail(r, -SBX_E_BACKEND,
				 "the tenant's remote sandboxd %s (the server's log has the details)",
				 refused_us ? "refused this server's token" : "cannot be reached");
	}
	if (e->retry_after_s > 0)
		r->retry_after_s = e->retry_after_s;
	return http_fail(r, http_errno_of_wire(e->code), "%s", e->message);
}

int route_remote_call(struct http_req *r, struct remote_call *rc)
{
	struct route_remote *rr = (struct route_remote *)r->tenant->provider;
	*rc = (struct remote_call){.h = rr->h};
	/* A call to another server waits on the network: never on an event
	 * thread in no-wait mode (http/router.c sends the request to the
	 * pool when this says it would wait). */
	if (nowait_on()) {
		nowait_blocked();
		return -EAGAIN;
	}
	if (!rr->h) {
		r->retry_after_s = 60;
		return http_fail(r, -SBX_E_BACKEND, "%s", rr->why);
	}
	size_t n = r->session_key_len < sizeof rc->session - 1 ? r->session_key_len : sizeof rc->session - 1;
	memcpy(rc->session, r->session_key, n);
	rc->session[n] = '\0';
	rc->c.session = rc->session;
	rc->c.request_id = r->request_id;
	rc->c.max_retries = -1;
	return 0;
}

static int remote_check(struct http_req *r)
{
	struct remote_call k;
	return route_remote_call(r, &k);
}

static void wire(const char *rel, char out[SBX_PATH_MAX + 16])
{
	sbx_path_wire(rel, out, SBX_PATH_MAX + 16);
}

#define REMOTE_BEGIN(r, rc)                                                                                  \
	struct remote_call rc;                                                                               \
	do {                                                                                                 \
		int begin_rc_ = route_remote_call((r), &(rc));                                               \
		if (begin_rc_ < 0)                                                                           \
			return begin_rc_;                                                                    \
	} while (0)

#define REMOTE_FAIL(r, rc, err)                                                                              \
	route_remote_fail((r), (struct route_remote *)(r)->tenant->provider, (rc), &(err).e)

static int remote_read(struct http_req *r, const char *rel)
{
	REMOTE_BEGIN(r, k);
	char w[SBX_PATH_MAX + 16];
	wire(rel, w);
	char *data = NULL;
	size_t len = 0;
	int rc = sbxc_read_file(k.h, &k.c, w, &data, &len, &k.e);
	if (rc < 0)
		return REMOTE_FAIL(r, rc, k);
	return http_reply_text(r, 200, data, len); /* as route_fs_reply_text: an envelope's too */
}

/* Read bytes [*start, *end] (the request's Range against the size the
 * back states, or the whole file) into a response. */
static int remote_read_buffer(struct http_req *r, const char *rel)
{
	REMOTE_BEGIN(r, k);
	char w[SBX_PATH_MAX + 16];
	wire(rel, w);
	const char *range = http_header(r, "Range");
	uint64_t start = 0, end = 0, want = 0, fsize = 0;
	int status = 200;
	if (range) {
		struct sbxc_stat st = {0};
		int rc = sbxc_stat(k.h, &k.c, w, &st, &k.e);
		uint64_t size = fsize = st.size;
		sbxc_stat_clear(&st);
		if (rc < 0)
			return REMOTE_FAIL(r, rc, k);
		rc = route_fs_parse_range(range, size, &start, &end);
		if (rc == -ERANGE)
			return http_fail_range(r, size);
		if (rc == 0) {
			status = 206;
			want = size ? end - start + 1 : 0;
			if (want == 0)
				status = 200;
		} else {
			start = 0; /* a malformed Range is ignored, as locally */
		}
	}
	char *data = NULL;
	size_t len = 0;
	int rc = sbxc_read_file_buffer(k.h, &k.c, w, start, want, &data, &len, &k.e);
	if (rc < 0)
		return REMOTE_FAIL(r, rc, k);
	if (status == 206 && len != want) {
		free(data);
		r->retry_after_s = 1;
		return http_fail(r, -EAGAIN, "the file changed while it was read; read it again");
	}
	struct http_response *resp = http_response_bytes(data, len);
	route_fs_range_headers(resp, status, start, end, fsize);
	r->bytes_out += (int64_t)len;
	return http_reply_response(r, status, resp);
}

static int remote_write(struct http_req *r, const char *rel)
{
	REMOTE_BEGIN(r, k);
	char w[SBX_PATH_MAX + 16];
	wire(rel, w);
	uint64_t size = 0;
	int rc = sbxc_write_file(k.h, &k.c, w, r->body.ptr ? r->body.ptr : "", r->body.len, &size, &k.e);
	if (rc < 0)
		return REMOTE_FAIL(r, rc, k);
	return http_reply_json(r, 200, json_pack("{s:s, s:I}", "path", w, "size", (json_int_t)size));
}

static const char *type_name(enum sbxc_type t)
{
	switch (t) {
	case SBXC_FILE:
		return "file";
	case SBXC_DIR:
		return "directory";
	case SBXC_SYMLINK:
		return "symlink";
	default:
		return "other";
	}
}

static json_t *time_json(int64_t ms)
{
	char t[40];
	rfc3339_ms(ms, t, sizeof t);
	return json_string(t);
}

static int remote_stat(struct http_req *r, const char *rel)
{
	REMOTE_BEGIN(r, k);
	char w[SBX_PATH_MAX + 16];
	wire(rel, w);
	struct sbxc_stat st = {0};
	int rc = sbxc_stat(k.h, &k.c, w, &st, &k.e);
	if (rc < 0)
		return REMOTE_FAIL(r, rc, k);
	json_t *o = json_pack("{s:s, s:s, s:b}", "path", st.path ? st.path : w, "type", type_name(st.type),
			      "is_symlink", st.is_symlink);
	if (st.has_size)
		json_object_set_new(o, "size", json_integer((json_int_t)st.size));
	if (st.has_mtime)
		json_object_set_new(o, "mtime", time_json(st.mtime_ms));
	if (st.has_mode) {
		char mode[8];
		snprintf(mode, sizeof mode, "%04o", st.mode & 07777);
		json_object_set_new(o, "mode", json_string(mode));
	}
	sbxc_stat_clear(&st);
	return http_reply_json(r, 200, o);
}

static int remote_readdir(struct http_req *r, const char *rel, const char *after, int64_t limit, bool detail)
{
	REMOTE_BEGIN(r, k);
	char w[SBX_PATH_MAX + 16];
	wire(rel, w);
	struct sbxc_dirent *v = NULL;
	size_t n = 0;
	char *next = NULL;
	int rc = sbxc_readdir_page(k.h, &k.c, w, detail, after, (int)limit, &v, &n, &next, &k.e);
	if (rc < 0)
		return REMOTE_FAIL(r, rc, k);
	json_t *entries = json_array();
	for (size_t i = 0; i < n; i++) {
		if (!detail) {
			json_array_append_new(entries, json_string(v[i].name));
			continue;
		}
		json_t *e = json_pack("{s:s, s:s, s:I}", "name", v[i].name, "type", type_name(v[i].type),
				      "size", (json_int_t)v[i].size);
		if (v[i].has_mtime)
			json_object_set_new(e, "mtime", time_json(v[i].mtime_ms));
		json_array_append_new(entries, e);
	}
	sbxc_dirents_free(v, n);
	json_t *o = json_pack("{s:o, s:b, s:o}", "entries", entries, "more", next != NULL, "next",
			      next ? json_string(next) : json_null());
	free(next);
	return http_reply_json(r, 200, o);
}

static int remote_exists(struct http_req *r, const char *rel)
{
	REMOTE_BEGIN(r, k);
	char w[SBX_PATH_MAX + 16];
	wire(rel, w);
	bool yes = false;
	int rc = sbxc_exists(k.h, &k.c, w, &yes, &k.e);
	if (rc < 0)
		return REMOTE_FAIL(r, rc, k);
	return http_reply_json(r, 200, json_pack("{s:b}", "exists", yes));
}

static int remote_mkdir(struct http_req *r, const char *rel, bool recursive)
{
	REMOTE_BEGIN(r, k);
	char w[SBX_PATH_MAX + 16];
	wire(rel, w);
	int rc = sbxc_mkdir(k.h, &k.c, w, recursive, &k.e);
	if (rc < 0)
		return REMOTE_FAIL(r, rc, k);
	return http_reply_json(r, 201, json_pack("{s:s}", "path", w));
}

static int remote_rm(struct http_req *r, const char *rel, bool recursive, bool force)
{
	REMOTE_BEGIN(r, k);
	char w[SBX_PATH_MAX + 16];
	wire(rel, w);
	bool removed = false;
	int rc = sbxc_rm(k.h, &k.c, w, recursive, force, &removed, &k.e);
	if (rc < 0)
		return REMOTE_FAIL(r, rc, k);
	return http_reply_json(r, 200, json_pack("{s:s, s:b}", "path", w, "removed", removed));
}

static int remote_move(struct http_req *r, const char *from, const char *to, bool overwrite)
{
	REMOTE_BEGIN(r, k);
	char wf[SBX_PATH_MAX + 16], wt[SBX_PATH_MAX + 16];
	wire(from, wf);
	wire(to, wt);
	int rc = sbxc_move(k.h, &k.c, wf, wt, overwrite, &k.e);
	if (rc < 0)
		return REMOTE_FAIL(r, rc, k);
	return http_reply_json(r, 200, json_pack("{s:s}", "path", wt));
}

static const struct route_provider_ops remote_ops = {
    .name = "remote",
    .where = "by another sandboxd (backend remote); use that server for it",
    .down = "the tenant's remote sandboxd cannot be reached, or went away while the command ran (what "
	    "became of it there is unknown)",
    .caps = 0, /* files and commands on the back: no workspace, nothing run here */
    .check = remote_check,
    .read = remote_read,
    .read_buffer = remote_read_buffer,
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
