/* Audit paging (wire.md "Operators"): GET /audit, oldest first, one page
 * at a time with the opaque cursor the server hands back. */
#include "client/internal.h"

#include <stdlib.h>

#include "common/xmalloc.h"

static void record_from(json_t *o, struct sbxc_audit_record *r)
{
	*r = (struct sbxc_audit_record){0};
	r->id = sbxc__jint(o, "id", 0);
	r->at = sbxc__jstrdup(o, "at");
	r->tenant = sbxc__jstrdup(o, "tenant");
	r->session = sbxc__jstrdup(o, "session");
	r->request_id = sbxc__jstrdup(o, "request_id");
	r->method = sbxc__jstrdup(o, "method");
	r->route = sbxc__jstrdup(o, "route");
	r->target = sbxc__jstrdup(o, "target");
	r->outcome = sbxc__jstrdup(o, "outcome");
	r->client = sbxc__jstrdup(o, "client");
	r->status = (long)sbxc__jint(o, "status", 0);
	r->has_exit_code = json_is_integer(json_object_get(o, "exit_code"));
	r->exit_code = (int)sbxc__jint(o, "exit_code", 0);
	r->bytes_in = sbxc__jint(o, "bytes_in", 0);
	r->bytes_out = sbxc__jint(o, "bytes_out", 0);
	r->duration_ms = sbxc__jint(o, "duration_ms", 0);
}

int sbxc_audit_page(struct sbxc *h, const struct sbxc_call *c, const struct sbxc_audit_query *aq,
		    struct sbxc_audit_record **out, size_t *n, char **next, struct sbxc_err *err)
{
	static const struct sbxc_audit_query none = {0};
	const struct sbxc_audit_query *a = aq ? aq : &none;
	struct buf q;
	buf_init(&q, 8192);
	sbxc__q(&q, "since", a->since);
	sbxc__q(&q, "until", a->until);
	sbxc__q(&q, "session", a->session);
	sbxc__q(&q, "route", a->route);
	sbxc__q(&q, "outcome", a->outcome);
	sbxc__q(&q, "tenant", a->tenant);
	sbxc__q(&q, "after", a->after);
	if (a->limit > 0)
		sbxc__qi(&q, "limit", a->limit);
	json_t *o = NULL;
	int rc = sbxc__get_json(h, c, "/audit", &q, &o, err);
	buf_free(&q);
	if (rc < 0)
		return rc;
	json_t *arr = json_object_get(o, "records");
	size_t k = json_array_size(arr);
	struct sbxc_audit_record *v = xcalloc(k ? k : 1, sizeof *v);
	for (size_t i = 0; i < k; i++)
		record_from(json_array_get(arr, i), &v[i]);
	json_t *nx = json_object_get(o, "next");
	*next = json_is_string(nx)
		    ? xstrdup(json_string_value(nx))
		    : (json_is_integer(nx) ? xasprintf("%lld", (long long)json_integer_value(nx)) : NULL);
	json_decref(o);
	*out = v;
	*n = k;
	return 0;
}

void sbxc_audit_free(struct sbxc_audit_record *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++) {
		struct sbxc_audit_record *r = &v[i];
		free(r->at);
		free(r->tenant);
		free(r->session);
		free(r->request_id);
		free(r->method);
		free(r->route);
		free(r->target);
		free(r->outcome);
		free(r->client);
	}
	free(v);
}
