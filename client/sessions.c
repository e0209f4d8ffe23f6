/* Sessions and readiness (wire.md "Operators"): GET /sessions,
 * DELETE /session, GET /readyz. */
#include "client/internal.h"

#include <errno.h>
#include <stdlib.h>

#include "common/xmalloc.h"

int sbxc_sessions(struct sbxc *h, const struct sbxc_call *c, struct sbxc_session **out, size_t *n,
		  struct sbxc_err *err)
{
	json_t *o = NULL;
	int rc = sbxc__get_json(h, c, "/sessions", NULL, &o, err);
	if (rc < 0)
		return rc;
	json_t *arr = json_object_get(o, "sessions");
	size_t k = json_array_size(arr);
	struct sbxc_session *v = xcalloc(k ? k : 1, sizeof *v);
	for (size_t i = 0; i < k; i++) {
		json_t *e = json_array_get(arr, i);
		v[i].key = sbxc__jstrdup(e, "key");
		v[i].dir = sbxc__jstrdup(e, "dir");
		sbxc__jcopy(e, "created_at", v[i].created_at, sizeof v[i].created_at);
		sbxc__jcopy(e, "last_used_at", v[i].last_used_at, sizeof v[i].last_used_at);
	}
	json_decref(o);
	*out = v;
	*n = k;
	return 0;
}

void sbxc_sessions_free(struct sbxc_session *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++) {
		free(v[i].key);
		free(v[i].dir);
	}
	free(v);
}

int sbxc_session_delete(struct sbxc *h, const struct sbxc_call *c, struct sbxc_err *err)
{
	/* Deleting a deleted session is deleting it: safe to repeat. */
	struct creq rq = {.method = "DELETE", .path = "/session", .idempotent = true, .retry = true};
	struct cresp r;
	int rc = sbxc__do(h, c, &rq, &r, err);
	cresp_free(&r);
	return rc;
}

int sbxc_ready(struct sbxc *h, const struct sbxc_call *c, char **detail, struct sbxc_err *err)
{
	struct creq rq = {.method = "GET", .path = "/readyz", .idempotent = true};
	struct cresp r;
	int rc = sbxc__do(h, c, &rq, &r, err);
	if (detail)
		*detail = r.status ? xstrndup(r.body.ptr ? r.body.ptr : "", r.body.len) : NULL;
	cresp_free(&r);
	return rc;
}
