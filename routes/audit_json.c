/* The audit record's wire shape (routes/audit.h), shared by GET /audit,
 * the merged history of many nodes (routes/audit_nodes.c), GET
 * /exec/{id}/egress and `sandboxd audit`. */
#include "routes/audit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/timeutil.h"
#include "common/utf8.h"

json_t *route_text_json(const char *s, const char *dflt)
{
	if (!s)
		return dflt ? json_string(dflt) : json_null();
	size_t n = strlen(s);
	if (utf8_valid(s, n))
		return json_stringn(s, n);
	char *t = utf8_sanitize(s, n, &n);
	json_t *j = json_stringn(t, n);
	free(t);
	return j;
}

json_t *route_audit_json(const struct store_audit *a, const char *node)
{
	char at[40];
	rfc3339_ms(a->at, at, sizeof at);
	json_t *session = json_null();
	if (a->session) {
		size_t n = 0;
		char *s = utf8_sanitize(a->session, a->session_len, &n);
		session = json_stringn(s, n);
		free(s);
	}
	return json_pack(
	    "{s:I, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:o, s:o, s:b, s:b, s:b, s:I, s:I, s:f, s:o, s:s, "
	    "s:o, s:o}",
	    "id", (json_int_t)a->id, "at", at, "tenant", route_text_json(a->tenant, ""), "session", session,
	    "request_id", route_text_json(a->request_id, ""), "method", route_text_json(a->method, ""),
	    "route", route_text_json(a->route, ""), "target", route_text_json(a->target, NULL), "status",
	    a->status, "outcome", route_text_json(a->outcome, ""), "exit_code",
	    a->has_exit_code ? json_integer(a->exit_code) : json_null(), "oom_killed", a->why.oom_killed,
	    "pids_limited", a->why.pids_limited, "uncontained", a->why.uncontained, "bytes_in",
	    (json_int_t)a->bytes_in, "bytes_out", (json_int_t)a->bytes_out, "duration_ms", a->duration_ms,
	    "client", route_text_json(a->client, NULL), "node", node, "sub", route_text_json(a->sub, NULL),
	    "exec_id", route_text_json(a->exec_id, NULL));
}

int route_audit_collect(void *page, const struct store_audit *a)
{
	struct route_audit_page *p = page;
	json_array_append_new(p->records, route_audit_json(a, p->node));
	return 0;
}
