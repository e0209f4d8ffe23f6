/* Which provider a tenant gets (routes/provider.h): the one place that
 * turns the backend its policy names into an ops table. Providers of
 * other machines are routes/remote.c and routes/ssh.c; jobs.c below runs
 * their commands. */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common/errors.h"
#include "http/errors.h"
#include "http/req.h"
#include "http/route.h"
#include "routes/app.h"
#include "routes/policy.h"
#include "routes/provider.h"
#include "routes/remote.h"
#include "routes/ssh.h"
#include "sandbox/registry.h"

struct route_provider *route_provider_new(struct app *a, const char *tenant, const struct route_policy *p)
{
	switch (route_policy_kind(p)->id) {
	case SBX_BK_REMOTE:
		return route_remote_new(a, tenant, p);
	case SBX_BK_SSH:
		return route_ssh_new(a, tenant, p);
	case SBX_BK_BWRAP:
	case SBX_BK_LOCAL:
		break; /* this server's own (sandbox/backend.h) */
	}
	return &route_local_provider;
}

void route_provider_free(struct route_provider **p)
{
	if (!p || !*p)
		return;
	(*p)->ops->free(*p);
	*p = NULL;
}

static bool has_workspace(const struct tenant *t)
{
	return !t->provider || (t->provider->ops->caps & ROUTE_CAN_WORKSPACE);
}

int route_provider_admit(const struct tenant *t, unsigned flags, const char *what, char *why, size_t whysz)
{
	if (!(flags & RF_WORKSPACE) || has_workspace(t))
		return 0;
	snprintf(why, whysz, "%s is not available for tenant %s: its files and commands are served %s", what,
		 t->name, t->provider->ops->where);
	return -SBX_E_FORBIDDEN;
}

int route_provider_refuse(struct http_req *r, const char *what)
{
	if (!r->tenant || has_workspace(r->tenant))
		return 0;
	return http_fail(r, -SBX_E_FORBIDDEN,
			 "%s is not available for tenant %s: its files and commands are served %s", what,
			 r->tenant->name, r->tenant->provider->ops->where);
}
