#include "routes/app.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/utf8.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "common/log.h"
#include "http/auditgate.h"
#include "http/hub.h"
#include "http/metrics.h"
#include "http/route.h"
#include "routes/admit.h"
#include "routes/exec_registry.h"
#include "routes/policy.h"
#include "routes/provider.h"
#include "routes/routes.h"
#include "routes/storage.h"
#include "sandbox/backend.h"
#include "sandbox/uids.h"
#include "sandbox/workspace.h"
#include "store/store.h"

/* How long a cached tenant is trusted before it is read again, so that
 * `sandboxd tenant remove` (another process) takes effect quickly. */
#define TENANT_TTL_MS 5000

static int tenant_get(struct app *a, const char *name, struct tenant **out);

/* ---- what the HTTP layer asks of the routes (http/route.h) ---- */

/* A tenant the uid mode cannot serve is still loaded, so that its token
 * is verified before it learns that (tenant_admit). */
static int hook_tenant_get(void *ctx, const char *name, struct tenant **t, struct auth_key *key)
{
	int rc = tenant_get(ctx, name, t);
	if (rc == 0)
		*key = (*t)->key;
	return rc;
}

static int hook_tenant_admit(void *ctx, struct tenant *t, const struct http_route *rt, char *why,
			     size_t whysz)
{
	int rc;
	if (!t)
		return 0;
	if (!t->unserved[0])
		return (rc = route_provider_admit(t, rt, why, whysz)) < 0
			   ? rc
			   : route_storage_admit(ctx, t, why, whysz);
	snprintf(why, whysz, "this server cannot serve tenant %s: %s", t->name, t->unserved);
	return -SBX_E_BACKEND;
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

static void tenant_free(struct tenant *t)
{
	route_provider_free(&t->provider);
	sbx_workspace_free(&t->ws);
	free(t->keybuf);
	free(t->approver_keybuf);
	free(t);
}

void route_app_fini(struct app *a)
{
	for (size_t i = 0; i < a->ntenants; i++)
		tenant_free(a->tenants[i]);
	free(a->tenants);
	a->tenants = NULL;
	for (size_t i = 0; i < a->nloads; i++)
		free(a->loads[i]);
	free(a->loads);
	a->loads = NULL;
	a->nloads = 0;
	a->ntenants = 0;
	sbx_nodes_free(&a->nodes);
	http_metrics_free(&a->metrics);
	http_audit_gate_free(&a->audit_gate);
	free(a->store_dir);
	free(a->images_dir);
	pthread_mutex_destroy(&a->tenants_lock);
}

/* How many tenants the store holds; -1 when it cannot say. */
static long tenant_count(struct app *a)
{
	struct store_tenant *v = NULL;
	size_t n = 0;
	if (store_tenant_list(a->store, &v, &n) < 0)
		return -1;
	store_tenants_free(v, n);
	return (long)n;
}

/* Not root, no subordinate range, and the operator did not accept shared
 * uids: at most one tenant is served. */
static bool shared_strict(const struct app *a)
{
	return a->uids && a->uids->mode == SBX_UIDS_SHARED && !a->cfg->allow_shared_uid;
}

/* Why the uid mode cannot serve a tenant in this slot ("" when it can). */
static void unserved_why(struct app *a, int64_t slot, char *out, size_t outsz)
{
	out[0] = '\0';
	if (!a->uids)
		return;
	int64_t id = a->cfg->uid_base + slot;
	if (!sbx_uids_tenant_ok(a->uids, id))
		snprintf(out, outsz,
			 "its uid %lld lies outside the server's subordinate uid range (the operator must "
			 "extend the range)",
			 (long long)id);
	else if (shared_strict(a) && tenant_count(a) != 1)
		snprintf(out, outsz,
			 "its tenants would share one uid (the operator must give the server a subordinate "
			 "uid range, or set allow-shared-uid=true)");
}

/* tenants/<name>/workspace, owned by the tenant's uid. */
static int open_workspace(struct app *a, struct tenant *t)
{
	/* tenants/<name> is search-only for others: bubblewrap, as the
	 * tenant's uid, must reach the workspace below it. */
	char *tdir = xasprintf("%s/tenants/%s", a->cfg->data_dir, t->name);
	if (mkdir(tdir, 0711) == 0 || errno == EEXIST)
		chmod(tdir, 0711);
	free(tdir);
	t->quota_rc = route_storage_attach_image(a, t);
	char *dir = xasprintf("%s/tenants/%s/workspace", a->cfg->data_dir, t->name);
	struct sbx_owner owner = {.uid = t->uid, .gid = t->gid, .chown = a->drop_privs};
	int rc = sbx_workspace_open(&t->ws, dir, &owner);
	free(dir);
	return rc;
}

/* The tenant-level provider its policy names (routes/provider.h): NULL for
 * bwrap and local. A policy that cannot be read fails the load; one
 * stored that this binary cannot apply leaves the tenant loaded but
 * unserved (503 naming why), its workspace not opened: which backend
 * holds its files is not known, and its budgets are not either. */
static int load_provider(struct app *a, struct tenant *t)
{
	struct route_policy p;
	int rc = route_policy_load(a->store, a->cfg, t->name, &p, NULL, NULL);
	if (rc == -SBX_E_BACKEND) {
		if (!t->unserved[0])
			snprintf(t->unserved, sizeof t->unserved,
				 "the tenant's stored policy cannot be applied (the operator must fix it)");
		return 0;
	}
	if (rc < 0)
		return -SBX_E_STORE; /* never a remote tenant's files served here */
	t->provider = route_provider_new(a, t->name, &p);
	t->store_max_bytes = p.store_max_bytes;
	t->store_max_rows = p.store_max_rows;
	route_policy_clear(&p);
	return 0;
}

void route_tenant_expire(struct app *a, const char *name)
{
	pthread_mutex_lock(&a->tenants_lock);
	for (size_t i = 0; i < a->ntenants; i++)
		if (strcmp(a->tenants[i]->name, name) == 0)
			a->tenants[i]->loaded_at_ms = -TENANT_TTL_MS; /* stale, not orphaned (-1) */
	pthread_mutex_unlock(&a->tenants_lock);
}

/* Load a tenant from the store and open its workspace (unless the uid
 * mode cannot serve it: then t->unserved says why and ws stays NULL). */
static int load(struct app *a, const char *name, struct tenant **out)
{
	struct store_tenant st;
	int rc = store_tenant_get(a->store, name, &st);
	if (rc < 0)
		return rc;
	struct tenant *t = xcalloc(1, sizeof *t);
	snprintf(t->name, sizeof t->name, "%s", st.name);
	if (auth_alg_parse(st.alg, &t->key.alg) < 0) {
		rc = -EINVAL;
		goto fail;
	}
	t->keybuf = st.key;
	st.key = NULL;
	t->key.key = t->keybuf;
	t->key.key_len = st.key_len;
	t->key.operator_tenant = st.operator_tenant;
	t->incarnation = st.incarnation;
	/* An approver key the server cannot read approves nothing: kept out. */
	if (st.approver_key && auth_alg_parse(st.approver_alg, &t->key.approver_alg) == 0) {
		t->approver_keybuf = st.approver_key;
		st.approver_key = NULL;
		t->key.approver_key = t->approver_keybuf;
		t->key.approver_key_len = st.approver_key_len;
	}
	t->uid = (uid_t)(a->cfg->uid_base + st.slot);
	t->gid = (gid_t)(a->cfg->uid_base + st.slot);
	unserved_why(a, st.slot, t->unserved, sizeof t->unserved);
	if ((rc = load_provider(a, t)) < 0)
		goto fail;
	if (!t->unserved[0] && (rc = open_workspace(a, t)) < 0)
		goto fail;
	if (!t->unserved[0] && t->quota_rc == 0)
		t->quota_rc = route_storage_apply_quota(a, t);
	t->loaded_at_ms = now_ms();
	store_tenant_clear(&st);
	*out = t;
	return 0;
fail:
	store_tenant_clear(&st);
	route_provider_free(&t->provider);
	free(t->keybuf);
	free(t->approver_keybuf);
	free(t);
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

/* Take the cached entry of name's life incarnation out of the cache (in
 * use: orphaned, freed by its last put), so that the next use loads the
 * store's and no one finds the ended life again. Caller holds
 * tenants_lock. */
static void drop_life_locked(struct app *a, const char *name, int64_t incarnation)
{
	for (size_t i = 0; i < a->ntenants; i++) {
		struct tenant *t = a->tenants[i];
		if (strcmp(t->name, name) != 0 || t->incarnation != incarnation)
			continue;
		if (t->refs == 0)
			tenant_free(t);
		else
			t->loaded_at_ms = -1;
		a->tenants[i] = a->tenants[--a->ntenants];
		return;
	}
}

/* Another process (`sandboxd tenant add|remove|set`) changed the store:
 * every cached tenant is checked now, so that neither a removed tenant
 * nor a removed-and-added-again one is served from the cache for the
 * rest of its few seconds, and the commands of an ended life stop even
 * when nobody asks for its name again. */
static void recheck_cache(struct app *a)
{
	if (!store_changed_elsewhere(a->store, &a->store_seen))
		return;
	pthread_mutex_lock(&a->tenants_lock);
	size_t n = a->ntenants;
	char(*names)[64] = n ? xcalloc(n, sizeof *names) : NULL;
	int64_t *lives = n ? xcalloc(n, sizeof *lives) : NULL;
	uid_t *uids = n ? xcalloc(n, sizeof *uids) : NULL;
	for (size_t i = 0; i < n; i++) {
		snprintf(names[i], sizeof names[i], "%s", a->tenants[i]->name);
		lives[i] = a->tenants[i]->incarnation;
		uids[i] = a->tenants[i]->uid;
		a->tenants[i]->loaded_at_ms = -TENANT_TTL_MS; /* stale: read again at the next use */
	}
	pthread_mutex_unlock(&a->tenants_lock);
	for (size_t i = 0; i < n; i++) {
		struct store_tenant st;
		int rc = store_tenant_get(a->store, names[i], &st);
		bool ended = (rc == 0 && st.incarnation != lives[i]) || rc == -ENOENT;
		if (ended) {
			pthread_mutex_lock(&a->tenants_lock);
			drop_life_locked(a, names[i], lives[i]);
			pthread_mutex_unlock(&a->tenants_lock);
			/* No new life is loaded yet: what is attached is the old one's. */
			life_ended(a, names[i], uids[i], lives[i], rc == -ENOENT, true);
		}
		if (rc == 0)
			store_tenant_clear(&st);
	}
	free(names);
	free(lives);
	free(uids);
}

static int tenant_get(struct app *a, const char *name, struct tenant **out)
{
	recheck_cache(a);
	int64_t now = now_ms();
	pthread_mutex_lock(&a->tenants_lock);
	for (size_t i = 0; i < a->ntenants; i++) {
		struct tenant *t = a->tenants[i];
		if (strcmp(t->name, name) != 0)
			continue;
		if (now - t->loaded_at_ms < TENANT_TTL_MS) {
			t->refs++;
			*out = t;
			pthread_mutex_unlock(&a->tenants_lock);
			return 0;
		}
		break;
	}
	pthread_mutex_unlock(&a->tenants_lock);

	struct tenant *fresh = NULL;
	int rc = load(a, name, &fresh);

	bool removed = false, readded = false;
	int64_t ended = 0;
	uid_t ended_uid = 0;
	pthread_mutex_lock(&a->tenants_lock);
	/* Replace (or drop) the cached entry; in-flight holders keep theirs. */
	for (size_t i = 0; i < a->ntenants; i++) {
		struct tenant *t = a->tenants[i];
		if (strcmp(t->name, name) != 0)
			continue;
		removed = rc == -ENOENT;
		readded = rc == 0 && fresh->incarnation != t->incarnation;
		ended = t->incarnation;
		ended_uid = t->uid;
		if (t->refs == 0)
			tenant_free(t);
		else
			t->loaded_at_ms = -1; /* orphaned: freed by the last put */
		a->tenants[i] = a->tenants[--a->ntenants];
		break;
	}
	if (rc == 0) {
		for (size_t i = 0; i < a->nloads && !fresh->load; i++)
			if (strcmp(a->loads[i]->name, name) == 0)
				fresh->load = a->loads[i];
		if (!fresh->load) {
			fresh->load = xcalloc(1, sizeof *fresh->load);
			snprintf(fresh->load->name, sizeof fresh->load->name, "%s", name);
			a->loads = xrealloc(a->loads, (a->nloads + 1) * sizeof *a->loads);
			a->loads[a->nloads++] = fresh->load;
		}
		a->tenants = xrealloc(a->tenants, (a->ntenants + 1) * sizeof *a->tenants);
		a->tenants[a->ntenants++] = fresh;
		fresh->refs = 1;
		*out = fresh;
	}
	pthread_mutex_unlock(&a->tenants_lock);
	/* A name from the store, not from a request. Re-added: the new
	 * life's image is attached now (load), and stays. */
	if (removed || readded)
		life_ended(a, name, ended_uid, ended, removed, removed);
	return rc;
}

int route_tenant_get(struct app *a, const char *name, struct tenant **out)
{
	int rc = tenant_get(a, name, out);
	if (rc == 0 && (*out)->unserved[0]) {
		route_tenant_put(a, out);
		return -SBX_E_BACKEND;
	}
	return rc;
}

void route_tenant_put(struct app *a, struct tenant **tp)
{
	struct tenant *t = *tp;
	if (!t)
		return;
	*tp = NULL;
	pthread_mutex_lock(&a->tenants_lock);
	t->refs--;
	bool orphan = t->loaded_at_ms == -1 && t->refs == 0;
	pthread_mutex_unlock(&a->tenants_lock);
	if (orphan)
		tenant_free(t);
}

static int acquire(struct app *a, int *counter, int64_t limit)
{
	int rc = 0;
	pthread_mutex_lock(&a->tenants_lock);
	if (*counter >= limit)
		rc = -SBX_E_TOO_MANY;
	else
		(*counter)++;
	pthread_mutex_unlock(&a->tenants_lock);
	return rc;
}

static void release(struct app *a, int *counter)
{
	pthread_mutex_lock(&a->tenants_lock);
	(*counter)--;
	pthread_mutex_unlock(&a->tenants_lock);
}

struct sbx_backend *route_backend_find(struct app *a, const char *name)
{
	for (size_t i = 0; i < a->nbackends; i++)
		if (strcmp(sbx_backend_name(a->backends[i]), name) == 0)
			return a->backends[i];
	return NULL;
}

int route_tenant_acquire_exec(struct app *a, struct tenant *t, int64_t limit)
{
	return acquire(a, &t->load->execs, limit);
}

void route_tenant_release_exec(struct app *a, struct tenant *t)
{
	pthread_mutex_lock(&a->tenants_lock);
	t->load->execs--;
	struct route_admit *next = route_admit_next_locked(a, t->load);
	pthread_mutex_unlock(&a->tenants_lock);
	route_admit_resume(next);
}

/* Issue 26, item 7: 32 commands waiting for approval with 14 MB of
 * inline stdin each kept 619 MiB in the server, outside every tenant's
 * budget, for up to the approval timeout. */
int route_tenant_hold_locked(struct app *a, struct tenant_load *l, int64_t n)
{
	int64_t per = a->cfg->wait_stdin_bytes_per_tenant;
	if (n <= 0)
		return 0;
	if (n > per)
		return -E2BIG;
	if (l->held_stdin > per - n || a->held_stdin > a->cfg->wait_stdin_bytes - n)
		return -ENOBUFS;
	l->held_stdin += n;
	a->held_stdin += n;
	return 0;
}

void route_tenant_unhold_locked(struct app *a, struct tenant_load *l, int64_t n)
{
	if (n <= 0)
		return;
	l->held_stdin -= n;
	a->held_stdin -= n;
}

int route_tenant_hold_fail(struct http_req *r, int rc, int64_t n)
{
	const struct sbx_config *c = r->app->cfg;
	if (rc == -E2BIG)
		return http_fail(r, -E2BIG,
				 "an inline stdin of %lld bytes cannot wait (for approval or an exec slot): "
				 "wait-stdin-bytes-per-tenant is %lld; send it with stdin_pipe or as a file",
				 (long long)n, (long long)c->wait_stdin_bytes_per_tenant);
	r->retry_after_s = 1;
	return http_fail(
	    r, -SBX_E_TOO_MANY,
	    "requests waiting (for approval or an exec slot) already keep their bound of inline "
	    "stdin (wait-stdin-bytes-per-tenant %lld, wait-stdin-bytes %lld in all); retry later, "
	    "or send it with stdin_pipe or as a file",
	    (long long)c->wait_stdin_bytes_per_tenant, (long long)c->wait_stdin_bytes);
}

int route_tenant_acquire_pending(struct app *a, struct tenant *t, int64_t limit, int64_t stdin_bytes)
{
	struct tenant_load *l = t->load;
	int rc = 0;
	pthread_mutex_lock(&a->tenants_lock);
	if (l->pending >= limit)
		rc = -SBX_E_TOO_MANY;
	else if ((rc = route_tenant_hold_locked(a, l, stdin_bytes)) == 0)
		l->pending++;
	pthread_mutex_unlock(&a->tenants_lock);
	return rc;
}

void route_tenant_release_pending(struct app *a, struct tenant *t, int64_t stdin_bytes)
{
	pthread_mutex_lock(&a->tenants_lock);
	t->load->pending--;
	route_tenant_unhold_locked(a, t->load, stdin_bytes);
	pthread_mutex_unlock(&a->tenants_lock);
}

/* The limit is read at each transfer: a policy change applies to the next one. */
int route_tenant_acquire_transfer(struct app *a, struct tenant *t)
{
	struct route_policy p;
	int64_t limit = a->cfg->tenant_max_transfers;
	int rc = route_policy_load(a->store, a->cfg, t->name, &p, NULL, NULL);
	if (rc == -SBX_E_BACKEND)
		return rc; /* a stored limit it cannot apply: refused, not the default */
	if (rc == 0) {
		limit = p.max_transfers;
		route_policy_clear(&p);
	}
	return acquire(a, &t->load->transfers, limit);
}

void route_tenant_release_transfer(struct app *a, struct tenant *t)
{
	release(a, &t->load->transfers);
}

bool route_uids_describe(struct app *a, char *out, size_t outsz)
{
	const struct sbx_uids *u = a->uids;
	if (!u || u->mode != SBX_UIDS_SHARED) {
		snprintf(out, outsz, "%s", u ? u->detail : "root: one uid per tenant");
		return true;
	}
	unsigned uid = (unsigned)u->outer_uid;
	if (a->cfg->allow_shared_uid) {
		snprintf(out, outsz,
			 "shared uid (allowed by allow-shared-uid): every tenant runs as uid %u; %s", uid,
			 u->why_shared);
		return true;
	}
	long n = tenant_count(a);
	if (n == 0 || n == 1) {
		snprintf(out, outsz, "shared uid (one tenant): commands run as uid %u; %s", uid,
			 u->why_shared);
		return true;
	}
	snprintf(out, outsz,
		 "shared uid refused: %ld tenants would share uid %u (%s); give user %s a subordinate range "
		 "or set allow-shared-uid=true",
		 n, uid, u->why_shared, *u->user ? u->user : "?");
	return false;
}

int route_uids_check_start(struct app *a, char *err, size_t errsz)
{
	const struct sbx_uids *u = a->uids;
	struct store_tenant *v = NULL;
	size_t n = 0;
	int rc = 0;
	if (!u || store_tenant_list(a->store, &v, &n) < 0)
		return 0; /* the store's own checks report that */
	long long base = (long long)a->cfg->uid_base;
	if (shared_strict(a) && n > 1) {
		snprintf(err, errsz,
			 "%zu tenants would share uid %u: the server is not root and %s. Fix: give user %s "
			 "a subordinate range (apt-get install uidmap; usermod --add-subuids %lld-%lld "
			 "--add-subgids %lld-%lld %s) whose first id is uid-base, or run as root, or accept "
			 "shared uids with --set allow-shared-uid=true",
			 n, (unsigned)u->outer_uid, u->why_shared, u->user, base, base + 65535, base,
			 base + 65535, u->user);
		rc = -EPERM;
	}
	for (size_t i = 0; i < n && rc == 0; i++)
		if (!sbx_uids_tenant_ok(u, a->cfg->uid_base + v[i].slot)) {
			snprintf(
			    err, errsz,
			    "tenant %s would run as uid %lld, outside the subordinate ids %u..%u of user %s "
			    "(the last one is the start probe's). Fix: extend its ranges in /etc/subuid and "
			    "/etc/subgid",
			    v[i].name, base + v[i].slot, u->uids.first, u->uids.first + u->uids.count - 1,
			    u->user);
			rc = -EPERM;
		}
	store_tenants_free(v, n);
	return rc;
}
