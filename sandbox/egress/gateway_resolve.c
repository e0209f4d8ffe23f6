/* Names resolved on the worker pool with getaddrinfo, never on a loop.
 * A job belongs to the pool until it is posted to its loop, then to the
 * loop; the connection only points at it, and a connection that ends
 * first (its resolve_ms deadline, the session's end) forgets it: the
 * answer is then thrown away when it comes.
 *
 * Floor 3: it calls gateway_loop.c (the answer is posted) and gateway.c
 * (the pool); the connection takes the answer from the loop's
 * GW_M_RESOLVED, through gateway_start.c's gw_loop_ops. */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"
#include "sandbox/egress/gateway_int.h"

struct gw_job {
	struct gw_work w;
	struct gw_loop *loop;
	struct gw_conn *conn; /* loop thread only; NULL: forgotten */
	char name[SBX_EGRESS_NAME_MAX + 1];
	struct gw_resolved res;
};

static void job_run(struct gw_work *w)
{
	struct gw_job *j = (struct gw_job *)w;
	/* No AI_ADDRCONFIG: its answer depends on the addresses of the
	 * server's interfaces; a family without a route fails at connect and
	 * the next address is tried. */
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *ai = NULL;
	j->res.err = getaddrinfo(j->name, NULL, &hints, &ai);
	for (struct addrinfo *p = ai; p && j->res.n < GW_ADDRS_MAX; p = p->ai_next)
		if ((p->ai_family == AF_INET || p->ai_family == AF_INET6) &&
		    p->ai_addrlen <= sizeof(j->res.a[0]))
			memcpy(&j->res.a[j->res.n++], p->ai_addr, p->ai_addrlen);
	if (ai)
		freeaddrinfo(ai);
	gw_loop_post(j->loop, GW_M_RESOLVED, j);
}

static void job_drop(struct gw_work *w)
{
	struct gw_job *j = (struct gw_job *)w;
	j->res.err = EAI_SYSTEM;
	gw_loop_post(j->loop, GW_M_RESOLVED, j);
}

struct gw_job *gw_resolve_start(struct sbx_egress_gateway *g, struct gw_loop *l, struct gw_conn *c,
				const char *name)
{
	struct gw_job *j = xcalloc(1, sizeof(*j));
	j->w.run = job_run;
	j->w.drop = job_drop;
	j->w.t = c->s->t;
	j->loop = l;
	j->conn = c;
	snprintf(j->name, sizeof(j->name), "%s", name);
	gw_work_post(g, &j->w);
	return j;
}

void gw_resolve_forget(struct gw_job *j)
{
	j->conn = NULL;
}

struct gw_conn *gw_job_conn(const struct gw_job *j)
{
	return j->conn;
}

const struct gw_resolved *gw_job_result(const struct gw_job *j)
{
	return &j->res;
}

void gw_job_free(struct gw_job *j)
{
	free(j);
}
