/* Which provider a tenant gets (routes/provider.h): the one place that
 * turns the backend its policy names into an ops table. Providers of
 * other machines are routes/remote.c and routes/ssh.c; jobs.c below runs
 * their commands. Also the calls of their ops (struct route_call): made
 * from a request, and their failures answered. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/config.h"
#include "common/errors.h"
#include "http/errors.h"
#include "http/req.h"
#include "http/route.h"
#include "routes/app.h"
#include "routes/paths.h"
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

void route_call_init(struct route_call *c, struct http_req *r)
{
	c->app = r->app;
	c->tenant = r->tenant;
	c->request_id = r->request_id;
	c->session_key = r->session_key;
	c->session_key_len = r->session_key_len;
	c->session_rel = r->session_rel;
	c->max_bytes = (uint64_t)r->app->cfg->max_buffered_bytes;
	c->why[0] = '\0';
	c->retry_after_s = 0;
}

int route_call_fail(struct http_req *r, const struct route_call *c, int rc, const char *what, const char *rel)
{
	if (c->retry_after_s > 0)
		r->retry_after_s = c->retry_after_s;
	if (c->why[0])
		return http_fail(r, rc, "%s", c->why);
	return route_fail_path(r, rc, what, rel);
}

int route_call_why(struct route_call *c, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->why, sizeof c->why, fmt, ap);
	va_end(ap);
	return rc;
}
