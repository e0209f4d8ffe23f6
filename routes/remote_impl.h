#pragma once
/* Shared by routes/remote.c and remote_exec.c only. */
#include "client/sandboxd.h"

struct http_req;

struct route_remote {
	struct sbxc *h; /* NULL: unusable, why says */
	char why[320];
	char url[256]; /* remote_url, for messages */
};

/* One call's settings and error, for request r. */
struct remote_call {
	struct sbxc *h;
	struct sbxc_call c;
	struct sbxc_err e;
	char session[1024];
};

/* Fill rc for a call on behalf of r (its session, request id; never
 * retried here). 0, or r answered 503 (the tenant's settings cannot work)
 * and the code returned. */
int route_remote_call(struct http_req *r, struct remote_call *rc);
/* Answer r with a failed call's error (see remote.h); returns the code. */
int route_remote_fail(struct http_req *r, struct route_remote *rr, int rc, const struct sbxc_err *e);
