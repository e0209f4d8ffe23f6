/* GET /exec/{id}/events and GET /events: live progress as server-sent
 * events, through http/hub.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "routes/app.h"
#include "routes/exec.h"
#include "routes/exec_registry.h"
#include "routes/exec_row.h"
#include "routes/routes.h"
#include "http/hub.h"
#include "store/store.h"

static int64_t last_event_id(struct http_req *r)
{
	const char *v = http_header(r, "Last-Event-ID");
	if (!v)
		return 0;
	char *end = NULL;
	long long x = strtoll(v, &end, 10);
	return (*end || x < 0) ? 0 : x;
}

/* Whose events: the token's tenant, or with admin any tenant= (NULL: all). */
static int which_tenant(struct http_req *r, const char **tenant, bool allow_all)
{
	const char *q = http_query(r, "tenant");
	if (r->claims.scopes & AUTH_SCOPE_ADMIN) {
		*tenant = q ? q : (allow_all ? NULL : r->claims.tenant);
		return 0;
	}
	if (q && strcmp(q, r->claims.tenant) != 0)
		return http_fail(r, -SBX_E_SCOPE, "tenant= needs the admin scope of an operator tenant");
	*tenant = r->claims.tenant;
	return 0;
}

int route_exec_events(struct http_req *r)
{
	const char *tenant = NULL;
	int rc = which_tenant(r, &tenant, false);
	if (rc < 0)
		return rc;
	const char *id = r->params[0];
	http_set_target(r, id);
	/* ?output=true: the command's output as it is printed, too (bounded
	 * per subscriber like the rest; chunks are dropped, with a note, for a
	 * client that reads too slowly, never the stream). */
	rc = http_hub_subscribe_exec(r->app->hub, r, tenant, id, last_event_id(r),
				     http_query_bool(r, "output"));
	if (rc != -ENOENT)
		return rc; /* answered, or a subscriber that could not answer: not a second one */
	/* Not running: answer from the store. */
	struct store_exec ex;
	rc = store_exec_get(r->app->store, tenant, id, &ex);
	if (rc == -ENOENT)
		return route_exec_unknown(r, id);
	if (rc < 0)
		return http_fail(r, rc, "cannot read the exec record");
	if (ex.state == EXEC_REJECTED) {
		store_exec_clear(&ex);
		return http_fail(r, -SBX_E_REJECTED, "exec %s was rejected", id);
	}
	/* Another tenant's exec (admin): its row's window, as this request
	 * holds no other tenant's workspace to rebuild it from. */
	bool own = r->tenant && strcmp(tenant, r->tenant->name) == 0;
	json_t *res = route_exec_row_result(own ? r->tenant : NULL, &ex);
	json_t *start = route_exec_start_json(&ex);
	bool running = store_exec_state_live(ex.state);
	int64_t exit_id = ex.exit_event_id;
	store_exec_clear(&ex);
	if (!res) {
		json_decref(start);
		/* Running with no live channel (between its store row and its
		 * channel), or lost in a restart. */
		if (running)
			r->retry_after_s = 1;
		return http_fail(r, running ? -EAGAIN : -SBX_E_CONFLICT,
				 running ? "the exec is finishing; retry" : "the exec was lost in a restart");
	}
	rc = http_hub_reply_ended(r->app->hub, r, start, res, exit_id, last_event_id(r));
	json_decref(start);
	json_decref(res);
	return rc;
}

int route_events(struct http_req *r)
{
	const char *tenant = NULL;
	int rc = which_tenant(r, &tenant, true);
	if (rc < 0)
		return rc;
	return http_hub_subscribe_feed(r->app->hub, r, tenant, last_event_id(r));
}
