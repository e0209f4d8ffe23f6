/* Matching a request's method and path against the route table (see
 * route.h): no connection and no libmicrohttpd here, so it runs alone in
 * the unit tests. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/errors.h"
#include "common/xmalloc.h"
#include "http/route.h"

/* Match "/exec/{id}/cancel" against a path; captures into params (when
 * not NULL). A route with RF_TAIL has its last {x} take the rest of the
 * path, '/'s included, or nothing. */
static bool match(const struct http_route *rt, const char *path, const char **params)
{
	const char *p = rt->pattern, *s = path;
	size_t nparams = 0;
	while (*p && *s) {
		if (*p == '{') {
			const char *pe = strchr(p, '}');
			const char *se = (rt->flags & RF_TAIL) && pe[1] == '\0' ? NULL : strchr(s, '/');
			if (!se)
				se = s + strlen(s);
			if (se == s || nparams >= REQ_MAX_PARAMS)
				return false;
			if (params)
				params[nparams] = xstrndup(s, (size_t)(se - s));
			nparams++;
			p = pe + 1;
			s = se;
			continue;
		}
		if (*p != *s)
			return false;
		p++;
		s++;
	}
	/* An RF_TAIL route's tail may be empty ("/docs/" of "/docs/{path}"). */
	if (*p == '{' && !*s && (rt->flags & RF_TAIL) && strchr(p, '}')[1] == '\0' &&
	    nparams < REQ_MAX_PARAMS) {
		if (params)
			params[nparams] = xstrdup("");
		return true;
	}
	return *p == '\0' && *s == '\0';
}

/* The methods the route table has for path, ", "-separated, into allow
 * (for a 405's Allow); whether any route matched the path at all. */
static bool allowed_methods(const struct http_route *routes, size_t n, const char *path, char *allow,
			    size_t allowsz)
{
	bool path_matched = false;
	size_t allow_len = 0;
	allow[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		const struct http_route *rt = &routes[i];
		if (!match(rt, path, NULL))
			continue;
		path_matched = true;
		if (strstr(allow, rt->method))
			continue;
		/* Appended with an explicit length; a method that does not fit
		 * (never with HTTP's few) is left out whole, not cut. */
		size_t room = allowsz - allow_len;
		int w = snprintf(allow + allow_len, room, "%s%s", allow_len ? ", " : "", rt->method);
		if (w > 0 && (size_t)w < room)
			allow_len += (size_t)w;
		else
			allow[allow_len] = '\0';
	}
	return path_matched;
}

/* The first route of method for path, or NULL. */
static const struct http_route *find_route(const struct http_route *routes, size_t n, const char *method,
					   const char *path)
{
	for (size_t i = 0; i < n; i++) {
		const struct http_route *rt = &routes[i];
		if (strcmp(rt->method, method) == 0 && match(rt, path, NULL))
			return rt;
	}
	return NULL;
}

int http_route_match(const struct http_route *routes, size_t n, const char *method, const char *path,
		     const struct http_route **found, const char **params, char *allow, size_t allowsz)
{
	const struct http_route *rt = find_route(routes, n, method, path);
	/* HEAD is answered as GET (libmicrohttpd drops the body). */
	if (!rt && strcmp(method, "HEAD") == 0)
		rt = find_route(routes, n, "GET", path);
	if (!rt)
		return allowed_methods(routes, n, path, allow, allowsz) ? -SBX_E_METHOD : -ENOENT;
	*found = rt;
	match(rt, path, params);
	return 0;
}
