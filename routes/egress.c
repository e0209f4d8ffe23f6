/* GET /exec/{id}/egress: the egress ledger of one of the tenant's execs
 * (every connection, DNS refusal and dropped datagram of its command),
 * oldest first, paged by an opaque cursor. Scoped as GET /exec/{id}: the
 * caller's own tenant, exec or audit:read; another tenant's exec is as
 * unknown as one that never was. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "routes/app.h"
#include "routes/audit.h"
#include "routes/exec.h"
#include "routes/routes.h"

#define EGRESS_LIMIT_MAX 1000

static int egress_collect(void *ctx, const struct store_egress *e)
{
	char started[40], ended[40];
	rfc3339_ms(e->started_at, started, sizeof started);
	rfc3339_ms(e->ended_at, ended, sizeof ended);
	json_t *o =
	    json_pack("{s:o, s:o, s:o, s:o, s:o, s:i, s:s, s:o, s:I, s:I, s:s, s:s}", "proto",
		      route_text_json(e->proto, ""), "name", route_text_json(e->name, NULL), "name_source",
		      route_text_json(e->name_source, NULL), "dialled", route_text_json(e->dialled, ""),
		      "addr", route_text_json(e->addr, NULL), "port", (int)e->port, "verdict",
		      e->allowed ? "allowed" : "denied", "reason", route_text_json(e->reason, NULL),
		      "bytes_up", (json_int_t)e->bytes_up, "bytes_down", (json_int_t)e->bytes_down,
		      "started_at", started, "ended_at", ended);
	return json_array_append_new(ctx, o) == 0 ? 0 : -ENOMEM;
}

/* ?verdict=, ?after=, ?limit= into f. 0, or the 400 (http_fail). */
static int parse_filter(struct http_req *r, struct store_egress_filter *f)
{
	int64_t limit;
	int rc = http_query_int(r, "limit", 100, 1, EGRESS_LIMIT_MAX, &limit);
	if (rc < 0)
		return rc;
	f->limit = (size_t)limit;
	const char *v = http_query(r, "verdict");
	if (v && strcmp(v, "allowed") && strcmp(v, "denied"))
		return http_fail(r, -EINVAL, "verdict must be allowed or denied");
	f->verdict = v;
	if ((v = http_query(r, "after")) && *v) {
		char *end = NULL;
		errno = 0;
		long long x = strtoll(v, &end, 10);
		if (errno || *end || x < 0)
			return http_fail(r, -EINVAL, "after must be a cursor returned as next");
		f->after = x;
	}
	return 0;
}

int route_exec_egress(struct http_req *r)
{
	const char *id = r->params[0];
	http_set_target(r, id);
	struct store_exec ex;
	int rc = route_exec_load(r, id, &ex);
	if (rc < 0)
		return rc;
	store_exec_clear(&ex);
	/* The exec's life: rows of an earlier tenant of the name never show. */
	struct store_egress_filter f = {
	    .tenant = r->tenant->name, .incarnation = r->tenant->incarnation, .exec_id = id};
	if ((rc = parse_filter(r, &f)) < 0)
		return rc;
	json_t *conns = json_array();
	int64_t last = 0;
	rc = store_egress_query(r->app->store, &f, egress_collect, conns, &last);
	if (rc < 0) {
		json_decref(conns);
		return http_fail(r, rc, "cannot read the egress ledger");
	}
	json_t *next = json_null();
	if (json_array_size(conns) == f.limit) {
		char cur[24];
		snprintf(cur, sizeof cur, "%lld", (long long)last);
		next = json_string(cur);
	}
	return http_reply_json(
	    r, 200, json_pack("{s:s, s:o, s:o}", "exec_id", id, "connections", conns, "next", next));
}
