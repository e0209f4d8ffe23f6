/* The tenant cache: a tenant read from the store with its key, its
 * policy's provider and budgets, and its workspace opened, cached for a
 * few seconds and reference-counted; a life that ended (removed, or
 * removed and added again) is noticed here and handed to a->life_ended.
 * Also the uid mode as it serves tenants, and the backends offered. Data
 * only: it calls no route family. */
#include "routes/tenant_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "routes/app.h"
#include "routes/policy.h"
#include "routes/provider.h"
#include "routes/storage.h"
#include "sandbox/backend.h"
#include "sandbox/uids.h"
#include "sandbox/workspace.h"
#include "store/store.h"

/* How long a cached tenant is trusted before it is read again, so that
 * `sandboxd tenant remove` (another process) takes effect quickly. */
#define TENANT_TTL_MS 5000

static void tenant_free(struct tenant *t)
{
	route_provider_free(&t->provider);
	sbx_workspace_free(&t->ws);
	free(t->keybuf);
	free(t->approver_keybuf);
	free(t);
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
			a->life_ended(a, names[i], uids[i], lives[i], rc == -ENOENT, true);
		}
		if (rc == 0)
			store_tenant_clear(&st);
	}
	free(names);
	free(lives);
	free(uids);
}

int route_tenant_lookup(struct app *a, const char *name, struct tenant **out)
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
		a->life_ended(a, name, ended_uid, ended, removed, removed);
	return rc;
}

int route_tenant_get(struct app *a, const char *name, struct tenant **out)
{
	int rc = route_tenant_lookup(a, name, out);
	if (rc == 0 && (*out)->unserved[0]) {
		route_tenant_put(a, out);
		return -SBX_E_BACKEND;
	}
	return rc;
}

void route_tenant_cache_free(struct app *a)
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

struct sbx_backend *route_backend_find(struct app *a, const char *name)
{
	for (size_t i = 0; i < a->nbackends; i++)
		if (strcmp(sbx_backend_name(a->backends[i]), name) == 0)
			return a->backends[i];
	return NULL;
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
