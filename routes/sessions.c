/* The tenant's sessions: GET /sessions lists them, DELETE /session removes
 * the one named by X-Session-Key (its directory, then its record). Neither
 * creates the session of the request: listing or deleting is not using. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/nowait.h"
#include "common/utf8.h"
#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "routes/app.h"
#include "routes/provider.h"
#include "routes/exec_registry.h"
#include "routes/routes.h"
#include "routes/storage.h"
#include "sandbox/fsops.h"
#include "sandbox/workspace.h"
#include "store/store.h"

#define SESSIONS_LIMIT_DEFAULT 1000
#define SESSIONS_LIMIT_MAX 10000
#define SESSION_STOP_WAIT_MS 5000 /* SIGKILLed commands end in a runner turn; bounded all the same */

/* Keys are bytes; JSON wants UTF-8. */
static json_t *key_json(const char *key, size_t len)
{
	size_t n = 0;
	char *s = utf8_sanitize(key, len, &n);
	json_t *j = json_stringn(s, n);
	free(s);
	return j;
}

static json_t *session_json(const struct store_session *s)
{
	char rel[sizeof "sessions/" + SBX_SEGMENT_MAX], dir[sizeof rel + 16], created[40], used[40];
	snprintf(rel, sizeof rel, "sessions/%s", s->segment);
	sbx_path_wire(rel, dir, sizeof dir);
	rfc3339_ms(s->created_at, created, sizeof created);
	rfc3339_ms(s->last_used_at, used, sizeof used);
	return json_pack("{s:o, s:s, s:s, s:s}", "key", key_json(s->key, s->key_len), "dir", dir,
			 "created_at", created, "last_used_at", used);
}

int route_sessions_list(struct http_req *r)
{
	int64_t limit = 0;
	int rc = http_query_int(r, "limit", SESSIONS_LIMIT_DEFAULT, 1, SESSIONS_LIMIT_MAX, &limit);
	if (rc < 0)
		return rc;
	struct store_session *v = NULL;
	size_t n = 0;
	rc = store_session_list(r->app->store, r->tenant->name, (size_t)limit, &v, &n);
	if (rc < 0)
		return http_fail(r, rc, "cannot read the sessions");
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, session_json(&v[i]));
	store_sessions_free(v, n);
	return http_reply_json(r, 200, json_pack("{s:o}", "sessions", arr));
}

int route_session_delete(struct http_req *r)
{
	char segment[64];
	int rc =
	    store_session_find(r->app->store, r->tenant->name, r->session_key, r->session_key_len, segment);
	if (rc == -ENOENT)
		return http_fail(r, rc, "no such session");
	if (rc < 0)
		return http_fail(r, rc, "cannot read the session");
	char rel[sizeof "sessions/" + SBX_SEGMENT_MAX], dir[sizeof rel + 16];
	snprintf(rel, sizeof rel, "sessions/%s", segment);
	sbx_path_wire(rel, dir, sizeof dir);
	http_set_target(r, dir);
	/* Its commands go first (background ones too), at once: nothing
	 * writes into the directory while it is removed. */
	route_execs_stop_session(r->app->execs, r->tenant->name, r->session_key, r->session_key_len,
				 SESSION_STOP_WAIT_MS);
	/* The directory first: should its removal fail, the record stays and
	 * the client can retry; the other way round would orphan it. */
	rc = sbx_session_dir_remove(r->tenant->ws, segment);
	if (rc < 0)
		return http_fail(r, rc, "cannot remove the session directory %s: %s", dir, sbx_strerror(rc));
	rc = store_session_delete(r->app->store, r->tenant->name, r->session_key, r->session_key_len, NULL);
	if (rc < 0 && rc != -ENOENT) /* ENOENT: a concurrent delete won; the session is gone all the same */
		return http_fail(r, rc, "cannot delete the session record");
	/* A request of the session that ran meanwhile may have made the
	 * directory again under the memo; forget it once more. */
	sbx_session_dir_forget(r->tenant->ws, segment);
	return http_reply_json(
	    r, 200,
	    json_pack("{s:o, s:b}", "key", key_json(r->session_key, r->session_key_len), "removed", 1));
}
