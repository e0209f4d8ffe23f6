#pragma once
/* The audit history of every node of the cluster as one (README "Running
 * many nodes"): this node's records from its store, the others' through
 * their GET /audit (routes/peers.c), merged by routes/audit_merge.c.
 * Used by GET /audit?nodes=all (operator tenants) and `sandboxd audit
 * --all-nodes`. */
#include <jansson.h>
#include <stddef.h>

#include "common/config.h"
#include "common/nodes.h"
#include "store/store.h"

struct http_req;

/* What a merged page asks for. Strings borrowed. */
struct route_audit_ask {
	struct store_audit_filter
	    f;		    /* tenant, since, until, session, route, outcome, limit; f.after unused */
	const char *cursor; /* a merged cursor ("next" of an earlier page); NULL: the start */
	const char *bearer; /* token shown to nodes without a token-file; NULL: none */
};

/* One merged page: {"records", "next", "nodes": [{"id", "status", "error"?}]}
 * where status is ok, unavailable (no answer in time, or 5xx), refused
 * (401/403: the token is not an operator's there) or invalid (an answer
 * that is not that node's audit page). Blocks up to cfg->nodes_timeout_ms:
 * never on an HTTP thread. 0 with *out (new), -EINVAL for a bad cursor,
 * or the store's error; err says why. */
int route_audit_gather(const struct sbx_config *cfg, const struct sbx_nodes *nodes, struct store *store,
		       const struct route_audit_ask *ask, json_t **out, char *err, size_t errsz);

/* GET /audit?nodes=all: ask (deep-copied) is gathered on a worker thread
 * while r is suspended, and answered when it is done. At most a few run
 * at once (429 beyond). 0, or an error code after http_fail. */
int route_audit_nodes_reply(struct http_req *r, const struct route_audit_ask *ask);
/* Wait until no worker runs (every suspended request has been resumed):
 * before the HTTP daemon stops. */
void route_audit_nodes_drain(void);
