/* GET and PUT /tenants/{name}/policy: a tenant's policy, for operators
 * (the admin scope of an operator tenant; the dispatcher checks it). The
 * same as `sandboxd tenant show` and `tenant set`; a change applies to
 * the tenant's next command, and its network rules to the next
 * connection of its running commands on this server too (the egress
 * gateway's; another node's at that tenant's next command there); its
 * audit row names who (the token's tenant and sub) and the old and new
 * values (its target). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "routes/app.h"
#include "routes/tenant_cache.h"
#include "sandbox/egress/gateway.h"
#include "routes/policy.h"
#include "routes/routes.h"

/* The tenant's running commands decide their next connection on its new
 * rules (sandbox/egress/gateway.h). */
static void egress_apply(struct app *a, const char *name)
{
	struct route_policy p = {0};
	struct sbx_egress_rules *rules = NULL;
	char err[256];

	if (!a->egress || route_policy_load(a->store, a->cfg, name, &p, NULL, NULL) < 0)
		return;
	if (!p.network || sbx_egress_rules_parse(p.network, &rules, err, sizeof err) == 0)
		sbx_egress_gateway_set_rules(a->egress, name, rules);
	sbx_egress_rules_unref(&rules);
	route_policy_clear(&p);
}

static int view(struct http_req *r, const char *name)
{
	json_t *out = NULL;
	int rc = route_policy_view(r->app->store, r->app->cfg, name, &out);
	if (rc == -ENOENT)
		return http_fail(r, rc, "no tenant %s", name);
	if (rc < 0)
		return http_fail(r, rc, "cannot read the policy of %s", name);
	return http_reply_json(r, 200, out);
}

int route_tenant_policy_get(struct http_req *r)
{
	http_set_target(r, r->params[0]);
	return view(r, r->params[0]);
}

int route_tenant_policy_put(struct http_req *r)
{
	const char *name = r->params[0];
	char err[512] = "";
	json_t *change = NULL;
	http_set_target(r, name);
	/* An I/O budget binds the tenant's disk image's loop device (io.max):
	 * without images there is nothing to throttle, and a budget stored
	 * here would be a promise not kept. */
	const char *io = r->app->disk_mode == DISK_IMAGE ? NULL : route_policy_io_set(r->json);
	if (io)
		return http_fail(
		    r, -SBX_E_CONFLICT,
		    "%s: I/O budgets need disk images (disk-quota=image): this server bounds its "
		    "tenants' disks %s, and has no device of the tenant's own to throttle",
		    io, r->app->disk_mode == DISK_PROJECT ? "by project quotas" : "not at all");
	int rc = route_policy_update(r->app->store, r->app->cfg, name, r->json, &change, err, sizeof err);
	if (rc == -ENOENT)
		return http_fail(r, rc, "no tenant %s", name);
	if (rc == -EINVAL || rc == -EEXIST)
		return http_fail(r, rc, "%s", err);
	if (rc < 0)
		return http_fail(r, rc, "cannot store the policy of %s", name);
	route_tenant_expire(r->app, name); /* its backend applies to the next request */
	egress_apply(r->app, name);
	json_object_set_new(change, "tenant", json_string(name));
	char *text = json_dumps(change, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(change);
	if (text)
		http_set_target(r, text);
	free(text);
	return view(r, name);
}
