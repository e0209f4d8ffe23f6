#include "routes/audit_nodes.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/errors.h"
#include "common/xmalloc.h"
#include "http/route.h"
#include "routes/app.h"
#include "routes/audit.h"
#include "routes/audit_merge.h"
#include "routes/peers.h"

#define PEER_BODY_MAX (64u << 20)
#define WORKERS_MAX 4

/* ---- the page of each node ---- */

static void add_param(struct buf *b, const char *name, const char *v, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	buf_appendf(b, "&%s=", name);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
		    c == '_' || c == '.' || c == '~')
			buf_append(b, &v[i], 1);
		else
			buf_appendf(b, "%%%c%c", hex[c >> 4], hex[c & 15]);
	}
}

/* GET /audit of a node with the ask's filters, from its position. */
static char *peer_path(const struct route_audit_ask *ask, int64_t after)
{
	const struct store_audit_filter *f = &ask->f;
	struct buf b;
	buf_init(&b, 1u << 20);
	buf_appendf(&b, "/audit?format=json&limit=%zu&after=%lld", f->limit, (long long)after);
	if (f->tenant)
		add_param(&b, "tenant", f->tenant, strlen(f->tenant));
	if (f->since) /* /audit takes epoch milliseconds as well as RFC 3339 */
		buf_appendf(&b, "&since=%lld", (long long)f->since);
	if (f->until)
		buf_appendf(&b, "&until=%lld", (long long)f->until);
	if (f->session)
		add_param(&b, "session", f->session, f->session_len);
	if (f->route)
		add_param(&b, "route", f->route, strlen(f->route));
	if (f->outcome)
		add_param(&b, "outcome", f->outcome, strlen(f->outcome));
	if (f->egress)
		add_param(&b, "egress", f->egress, strlen(f->egress));
	return buf_steal(&b, NULL);
}

static int local_source(struct store *store, const struct route_audit_ask *ask, struct route_audit_src *s)
{
	struct store_audit_filter f = ask->f;
	f.after = s->after;
	struct route_audit_page p = {json_array(), s->node};
	int64_t last = 0;
	int rc = store_audit_query(store, &f, route_audit_collect, &p, &last);
	if (rc < 0) {
		json_decref(p.records);
		return rc;
	}
	s->records = p.records;
	s->full = json_array_size(p.records) == f.limit;
	return 0;
}

/* A node's answer, checked: its own records (node field), ids rising
 * from its position. The status word and a reason for anything else. */
static const char *peer_source(struct route_peer_get *g, struct route_audit_src *s, size_t limit, char *why,
			       size_t whysz)
{
	if (g->status == 0) {
		snprintf(why, whysz, "no answer: %s", g->error[0] ? g->error : "unknown");
		return "unavailable";
	}
	if (g->status >= 500) {
		snprintf(why, whysz, "answered %ld", g->status);
		return "unavailable";
	}
	if (g->status == 401 || g->status == 403) {
		snprintf(why, whysz, "answered %ld: the token is not an operator's admin token there",
			 g->status);
		return "refused";
	}
	json_t *body =
	    g->status == 200 ? json_loadb(g->body.ptr ? g->body.ptr : "", g->body.len, 0, NULL) : NULL;
	json_t *recs = json_object_get(body, "records");
	bool ok = json_is_array(recs) && json_array_size(recs) <= limit;
	int64_t prev = s->after;
	for (size_t i = 0; ok && i < json_array_size(recs); i++) {
		json_t *r = json_array_get(recs, i);
		json_t *id = json_object_get(r, "id");
		const char *node = json_string_value(json_object_get(r, "node"));
		ok = json_is_integer(id) && json_integer_value(id) > prev && node &&
		     strcmp(node, s->node) == 0;
		prev = ok ? (int64_t)json_integer_value(id) : prev;
	}
	if (!ok) {
		snprintf(why, whysz, "answered %ld without an audit page of node %s", g->status, s->node);
		json_decref(body);
		return "invalid";
	}
	s->records = json_incref(recs);
	s->full = json_array_size(recs) == limit;
	json_decref(body);
	return "ok";
}

/* ---- one merged page ---- */

static json_t *node_status(const char *id, const char *status, const char *why)
{
	json_t *o = json_pack("{s:s, s:s}", "id", id, "status", status);
	if (why && *why)
		json_object_set_new(o, "error", json_string(why));
	return o;
}

/* Fetch every other node's page into src[1..n-1] and say how each went. */
static void fetch_peers(const struct sbx_config *cfg, const struct route_audit_ask *ask,
			const struct sbx_peer **peers, struct route_audit_src *src, size_t n, json_t *status)
{
	struct route_peer_get *g = xcalloc(n + 1, sizeof *g);
	for (size_t i = 1; i < n; i++)
		g[i] = (struct route_peer_get){
		    .peer = peers[i], .path = peer_path(ask, src[i].after), .bearer = ask->bearer};
	route_peers_get(g + 1, n - 1, (long)cfg->nodes_timeout_ms, PEER_BODY_MAX);
	for (size_t i = 1; i < n; i++) {
		char why[256] = "";
		const char *st = peer_source(&g[i], &src[i], ask->f.limit, why, sizeof why);
		json_array_append_new(status, node_status(src[i].node, st, why));
		free(g[i].path);
		buf_free(&g[i].body);
	}
	free(g);
}

int route_audit_gather(const struct sbx_config *cfg, const struct sbx_nodes *nodes, struct store *store,
		       const struct route_audit_ask *ask, json_t **out, char *err, size_t errsz)
{
	size_t n = 1;
	struct route_audit_src *src = xcalloc(nodes->n + 2, sizeof *src);
	const struct sbx_peer **peers = xcalloc(nodes->n + 2, sizeof *peers);
	snprintf(src[0].node, sizeof src[0].node, "%s", cfg->node_id);
	for (size_t i = 0; i < nodes->n; i++)
		if (strcmp(nodes->v[i].id, cfg->node_id) != 0) {
			peers[n] = &nodes->v[i];
			snprintf(src[n++].node, sizeof src[0].node, "%s", nodes->v[i].id);
		}
	json_t *status = json_array();
	int rc = route_audit_cursor_parse(ask->cursor, src, n);
	if (rc < 0)
		snprintf(err, errsz, "after must be a cursor returned as next by a nodes=all page");
	else if ((rc = local_source(store, ask, &src[0])) < 0)
		snprintf(err, errsz, "cannot read the audit history");
	if (rc == 0) {
		json_array_append_new(status, node_status(src[0].node, "ok", NULL));
		fetch_peers(cfg, ask, peers, src, n, status);
		bool more = false;
		json_t *page = route_audit_merge(src, n, ask->f.limit, &more);
		char *next = more ? route_audit_cursor_format(src, n) : NULL;
		*out = json_pack("{s:o, s:o, s:o}", "records", page, "next",
				 next ? json_string(next) : json_null(), "nodes", status);
		status = NULL;
		free(next);
	}
	json_decref(status);
	for (size_t i = 0; i < n; i++)
		json_decref(src[i].records);
	free(src);
	free(peers);
	return rc;
}

/* ---- GET /audit?nodes=all on a worker thread ---- */

static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t workers_idle = PTHREAD_COND_INITIALIZER;
static int workers;

struct job {
	struct http_req *r;
	struct route_audit_ask ask;
	char *tenant, *session, *route, *outcome, *cursor, *bearer;
	json_t *result;
	int rc;
	char err[256];
};

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

static void job_free(struct http_req *r)
{
	struct job *j = r->hstate;
	if (!j)
		return;
	free(j->tenant);
	free(j->session);
	free(j->route);
	free(j->outcome);
	free(j->cursor);
	free(j->bearer);
	json_decref(j->result);
	free(j);
	r->hstate = NULL;
}

static int job_resume(struct http_req *r)
{
	struct job *j = r->hstate;
	if (j->rc < 0)
		return http_fail(r, j->rc, "%s", j->err);
	json_t *res = j->result;
	j->result = NULL;
	return http_reply_json(r, 200, res);
}

static void *job_main(void *arg)
{
	struct job *j = arg;
	struct app *a = j->r->app;
	j->rc = route_audit_gather(a->cfg, &a->nodes, a->store, &j->ask, &j->result, j->err, sizeof j->err);
	http_resume(j->r);
	/* After the resume: drain() returning means every request is resumed. */
	pthread_mutex_lock(&workers_lock);
	if (--workers == 0)
		pthread_cond_broadcast(&workers_idle);
	pthread_mutex_unlock(&workers_lock);
	return NULL;
}

static struct job *job_new(struct http_req *r, const struct route_audit_ask *ask)
{
	struct job *j = xcalloc(1, sizeof *j);
	j->r = r;
	j->ask = *ask;
	j->ask.f.tenant = j->tenant = dup_or_null(ask->f.tenant);
	j->session = ask->f.session ? xmalloc(ask->f.session_len + 1) : NULL;
	if (j->session) {
		memcpy(j->session, ask->f.session, ask->f.session_len);
		j->session[ask->f.session_len] = '\0';
	}
	j->ask.f.session = j->session;
	j->ask.f.route = j->route = dup_or_null(ask->f.route);
	j->ask.f.outcome = j->outcome = dup_or_null(ask->f.outcome);
	j->ask.cursor = j->cursor = dup_or_null(ask->cursor);
	j->ask.bearer = j->bearer = dup_or_null(ask->bearer);
	return j;
}

int route_audit_nodes_reply(struct http_req *r, const struct route_audit_ask *ask)
{
	pthread_mutex_lock(&workers_lock);
	bool room = workers < WORKERS_MAX;
	if (room)
		workers++;
	pthread_mutex_unlock(&workers_lock);
	if (!room) {
		r->retry_after_s = 1;
		return http_fail(r, -SBX_E_TOO_MANY, "%d merged audit pages are being gathered; retry",
				 WORKERS_MAX);
	}
	struct job *j = job_new(r, ask);
	r->hstate = j;
	r->on_free = job_free;
	r->on_resume = job_resume;
	http_suspend(r);
	pthread_t th;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&th, &attr, job_main, j);
	pthread_attr_destroy(&attr);
	if (rc != 0) /* no thread: gather here, once, rather than fail */
		job_main(j);
	return 0;
}

void route_audit_nodes_drain(void)
{
	pthread_mutex_lock(&workers_lock);
	while (workers > 0)
		pthread_cond_wait(&workers_idle, &workers_lock);
	pthread_mutex_unlock(&workers_lock);
}
