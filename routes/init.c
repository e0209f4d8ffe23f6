/* The routes' state built and wired: the route table and the hooks the
 * HTTP layer calls (a tenant's lookup and admission, the audit row of
 * every request), and what the end of a tenant's life stops. The top of
 * routes/: nothing here is called by a route. */
#include "routes/app.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/auditgate.h"
#include "http/hub.h"
#include "http/metrics.h"
#include "http/route.h"
#include "routes/exec_registry.h"
#include "routes/provider.h"
#include "routes/routes.h"
#include "routes/storage.h"
#include "routes/tenant_cache.h"
#include "sandbox/backend.h"
#include "store/store.h"

/* ---- what the HTTP layer asks of the routes (http/route.h) ---- */

/* A tenant the uid mode cannot serve is still loaded, so that its token
 * is verified before it learns that (tenant_admit). */
static int hook_tenant_get(void *ctx, const char *name, struct tenant **t, struct auth_key *key)
{
	int rc = route_tenant_lookup(ctx, name, t);
	if (rc == 0)
		*key = (*t)->key;
	return rc;
}

static int hook_tenant_admit(void *ctx, struct tenant *t, const struct http_route *rt, char *why,
			     size_t whysz)
{
	if (!t)
		return 0;
	if (t->unserved[0]) {
		snprintf(why, whysz, "this server cannot serve tenant %s: %s", t->name, t->unserved);
		return -SBX_E_BACKEND;
	}
	int rc = 0;
	if (rt->flags & RF_WORKSPACE) { /* named only when it may be refused: not per request */
		char what[160];
		snprintf(what, sizeof what, "%s %s", rt->method, rt->pattern);
		rc = route_provider_admit(t, rt->flags, what, why, whysz);
	}
	return rc < 0 ? rc : route_storage_admit(ctx, t, why, whysz);
}

static void hook_tenant_put(void *ctx, struct tenant **t)
{
	route_tenant_put(ctx, t);
}

/* A request refused before its handler ran: what it tried, from its JSON
 * body (the command of an exec, the path of a file operation), bounded
 * and valid UTF-8; NULL when it named none. */
static char *attempted(const struct http_req *r)
{
	if (r->target || r->ran || !r->body.len)
		return NULL;
	json_t *j = json_loadb(r->body.ptr, r->body.len, JSON_DISABLE_EOF_CHECK, NULL);
	const char *keys[] = {"command", "path", "from"}, *v = NULL;
	for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !v; i++)
		v = json_string_value(json_object_get(j, keys[i]));
	char *out = NULL;
	if (v) /* bounded, and its full length said, as every audit target */
		out = store_audit_target_cap(v, strlen(v));
	json_decref(j);
	return out;
}

static int hook_audit(void *ctx, const struct http_req *r, const char *route, const char *outcome, double ms)
{
	struct app *a = ctx;
	char *tried = attempted(r);
	bool named = r->authed || r->audit_tenant;
	struct store_audit rec = {
	    .at = r->at_ms,
	    .tenant = named ? r->claims.tenant : "",
	    .session = named ? r->session_key : NULL,
	    .session_len = named ? r->session_key_len : 0,
	    .request_id = r->request_id,
	    .method = r->method,
	    .route = route,
	    .target = tried ? tried : r->target,
	    .status = r->audit_status ? r->audit_status : r->status,
	    .outcome = outcome,
	    .has_exit_code = r->has_exit_code,
	    .exit_code = r->exit_code,
	    .why = {r->oom_killed, r->pids_limited, r->uncontained},
	    .bytes_in = r->bytes_in,
	    .bytes_out = r->bytes_out,
	    .duration_ms = ms,
	    .client = r->client,
	    .sub = named && r->claims.sub[0] ? r->claims.sub : NULL,
	    .incarnation = named && r->tenant && strcmp(r->tenant->name, r->claims.tenant) == 0
			       ? r->tenant->incarnation
			       : 0,
	    .exec_id = r->exec_id[0] ? r->exec_id : NULL,
	};
	int rc = store_audit_append(a->store, &rec);
	free(tried);
	return rc;
}

/* A life of a tenant ended (removed, or removed and added again under
 * its name): nothing of it may serve the next life. Its commands are
 * killed (no process of its uid stays), its events forgotten, its disk
 * image let go. name comes from the store, not from a request. */
static void life_ended(struct app *a, const char *name, uid_t uid, int64_t incarnation, bool removed,
		       bool forget_storage)
{
	log_msg("info", "tenant %s (life %lld) %s: its commands are stopped and its events dropped", name,
		(long long)incarnation, removed ? "was removed" : "was removed and added again");
	if (a->execs)
		route_execs_stop_life(a->execs, name, incarnation);
	for (size_t i = 0; i < a->nbackends; i++) /* its warm sandboxes hold its workspace */
		sbx_backend_warm_flush(a->backends[i], uid);
	if (a->hub)
		http_hub_forget_tenant(a->hub, name);
	if (forget_storage)
		route_storage_forget(a, name);
}

int route_app_init(struct app *a, struct sbx_config *cfg, struct store *store, char *err, size_t errsz)
{
	memset(a, 0, sizeof *a);
	a->cfg = cfg;
	a->store = store;
	a->drop_privs = geteuid() == 0;
	a->images_dir = xasprintf("%s/images", cfg->data_dir);
	a->store_dir = xstrdup(cfg->db_path);
	char *slash = strrchr(a->store_dir, '/');
	if (slash)
		slash[slash == a->store_dir] = '\0';
	else
		snprintf(a->store_dir, strlen(a->store_dir) + 1, ".");
	a->started_at_ms = now_ms();
	pthread_mutex_init(&a->tenants_lock, NULL);
	a->life_ended = life_ended;
	http_metrics_new(&a->metrics, route_table, route_count);
	http_audit_gate_new(&a->audit_gate, cfg->audit_unauth_per_s, cfg->audit_unauth_burst);
	a->http = (struct http_env){
	    .cfg = cfg,
	    .routes = route_table,
	    .nroutes = route_count,
	    .metrics = a->metrics,
	    .audit_gate = a->audit_gate,
	    .hooks = {.ctx = a,
		      .tenant_get = hook_tenant_get,
		      .tenant_put = hook_tenant_put,
		      .tenant_admit = hook_tenant_admit,
		      .audit = hook_audit},
	    .app = a,
	};
	/* Checked when the configuration was read: cannot fail here. */
	return sbx_nodes_parse(cfg->nodes, &a->nodes, err, errsz);
}

void route_app_fini(struct app *a)
{
	route_tenant_cache_free(a);
	sbx_nodes_free(&a->nodes);
	http_metrics_free(&a->metrics);
	http_audit_gate_free(&a->audit_gate);
	free(a->store_dir);
	free(a->images_dir);
	pthread_mutex_destroy(&a->tenants_lock);
}
