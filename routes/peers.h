#pragma once
/* GET requests to the cluster's other nodes (common/nodes.h), for the
 * merged audit history: libcurl, all of them at once, bounded in time and
 * size. It is small on purpose; the remote backend's requests go through
 * the client library (client/) instead, which speaks sandboxd's own API.
 *
 * Threads: route_peers_get blocks its caller until every request has
 * answered or timeout_ms has passed, so it is called from a worker thread
 * (routes/audit_nodes.c) or the command line, never on an HTTP thread.
 * libcurl's global state is made at the first call; when it cannot be,
 * each request's error says so. */
#include <stddef.h>

#include "common/buf.h"
#include "common/nodes.h"

struct route_peer_get {
	/* in */
	const struct sbx_peer *peer;
	char *path;	    /* "/audit?...", borrowed */
	const char *bearer; /* presented when the peer has no token-file; NULL: none */
	/* out */
	long status;	 /* the HTTP status, 0 when none came */
	struct buf body; /* the body, at most max_body bytes (route_peers_get inits it) */
	char error[200]; /* why there is no status: connect, timeout, token-file, size */
};

/* Send every v[i] at once; returns when all are done or timeout_ms (for
 * connecting and answering together) has passed. Never fails as a whole:
 * each v[i] says what happened to it. Free each body with buf_free. */
void route_peers_get(struct route_peer_get *v, size_t n, long timeout_ms, size_t max_body);
