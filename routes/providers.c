/* Which provider a tenant gets (routes/provider.h): the one place that
 * turns the backend its policy names into an ops table. Providers of
 * other machines are routes/remote.c and routes/ssh.c; jobs.c below runs
 * their commands. */
#include <stddef.h>

#include "common/errors.h"
#include "http/errors.h"
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
	return NULL;
}

void route_provider_free(struct route_provider **p)
{
	if (!p || !*p)
		return;
	(*p)->ops->free(*p);
	*p = NULL;
}

int route_provider_refuse(struct http_req *r, const char *what)
{
	if (!r->tenant || !r->tenant->provider)
		return 0;
	return http_fail(r, -SBX_E_FORBIDDEN,
			 "%s is not available for tenant %s: its files and commands are served %s", what,
			 r->tenant->name, r->tenant->provider->ops->where);
}
