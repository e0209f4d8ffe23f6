/* The calls of the providers' ops (struct route_call, routes/provider.h):
 * made from a request, their failures in the provider's words, and
 * answered. Below the providers and the routes that call them. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "common/config.h"
#include "http/errors.h"
#include "http/req.h"
#include "routes/app.h"
#include "routes/paths.h"
#include "routes/provider.h"

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
