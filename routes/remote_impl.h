#pragma once
/* Shared by routes/remote.c and remote_exec.c only. */
#include "client/sandboxd.h"
#include "routes/provider.h"

struct route_remote {
	struct route_provider base;
	struct sbxc *h; /* NULL: unusable, why says */
	char why[320];
	char url[256];	   /* remote_url, for the server's log only */
	char tenant[64];   /* the front tenant */
	char back[400];	   /* route_remote_back_of, "" when unknown */
	bool back_claimed; /* back is this tenant's in the process-wide table */
};

/* One call's settings and error. */
struct remote_call {
	struct sbxc *h;
	struct sbxc_call c;
	struct sbxc_err e;
	char session[1024];
};

/* The provider's command start (routes/provider.h's submit). */
int route_remote_submit(struct app *a, struct route_provider *p, const char *session, size_t session_len,
			const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx, uint64_t *job);
