#pragma once
/* The tenant cache (routes/tenant_cache.c). */
#include <stdbool.h>
#include <stddef.h>

struct app;
struct tenant;
struct sbx_backend;

/* Look up a tenant (cached for a few seconds, then re-read so a removal or
 * a key change takes effect) and take a reference. -ENOENT unknown;
 * -SBX_E_BACKEND when the uid mode cannot serve it (t->unserved says
 * why: requests of such a tenant are refused after authentication);
 * other -errno. */
int route_tenant_get(struct app *a, const char *name, struct tenant **out);
void route_tenant_put(struct app *a, struct tenant **t);
/* The same lookup, but a tenant the uid mode cannot serve is returned too
 * (the HTTP layer verifies its token before it learns that). */
int route_tenant_lookup(struct app *a, const char *name, struct tenant **out);
/* Free every cached tenant (at the end: no request holds one). */
void route_tenant_cache_free(struct app *a);
/* Make the next lookup of tenant name read it again (its policy changed). */
void route_tenant_expire(struct app *a, const char *name);
/* The started backend called name, or NULL when this server does not offer it. */
struct sbx_backend *route_backend_find(struct app *a, const char *name);
/* The uid mode as /readyz and the log state it ("root: one uid per
 * tenant", "subuid range N..M via newuidmap", "shared uid (allowed by
 * allow-shared-uid): ..."), into out. false when it cannot serve the
 * tenants there are: uids shared by several tenants without
 * allow-shared-uid. */
bool route_uids_describe(struct app *a, char *out, size_t outsz);
/* At start: 0, or -EPERM with the reason and the fix in err when a tenant
 * cannot be served (several tenants would share a uid, or a tenant's uid
 * lies outside the subordinate range). */
int route_uids_check_start(struct app *a, char *err, size_t errsz);
