/* The egress gateway started and stopped: the top of its files (floor 5;
 * it may call any of them). It makes the shared core (gateway.c), the
 * worker pool and the loops (gateway_loop.c), tells the loops what their
 * events mean (loop_ops), and at the end closes the sessions left
 * (gateway_session.c) before it stops them. Nothing calls into it but
 * the gateway's users (sandbox/egress/gateway.h). */
#include "sandbox/egress/gateway.h"

#include <pthread.h>
#include <stdlib.h>

#include "common/errors.h"
#include "common/xmalloc.h"
#include "sandbox/egress/gateway_int.h"

/* On its loop. Its connections end first, so that their records are in
 * the summary by the time the closing thread reads it. */
static void session_close(struct sbx_egress_session *s)
{
	gw_conn_end_all(s);
	gw_session_detach(s);
}

static const struct gw_loop_ops loop_ops = {
    .session_add = gw_session_attach,
    .session_close = session_close,
    .resolved = gw_conn_resolved,
    .accept = gw_conn_accept,
    .dns_read = gw_dns_read,
    .nflog_read = gw_nflog_read,
    .conn_event = gw_conn_event,
    .deadline = gw_conn_deadline,
    .conn_free = gw_conn_free,
};

static unsigned or_default(unsigned v, unsigned d)
{
	return v ? v : d;
}

static void config_defaults(struct sbx_egress_config *c)
{
	c->threads = or_default(c->threads, 2);
	c->pool = or_default(c->pool, 4);
	c->tenant_conns = or_default(c->tenant_conns, 256);
	c->tenant_pending = or_default(c->tenant_pending, 64);
	c->command_conns = or_default(c->command_conns, 64);
	c->command_conn_per_s = or_default(c->command_conn_per_s, 10);
	c->hello_ms = or_default(c->hello_ms, 5000);
	c->first_byte_ms = or_default(c->first_byte_ms, 300);
	c->connect_ms = or_default(c->connect_ms, 5000);
	c->resolve_ms = or_default(c->resolve_ms, 2000);
}

int sbx_egress_gateway_new(const struct sbx_egress_config *c, struct sbx_egress_gateway **out)
{
	struct sbx_egress_gateway *g = xcalloc(1, sizeof(*g));
	g->c = *c;
	config_defaults(&g->c);
	pthread_mutex_init(&g->mu, NULL);
	pthread_mutex_init(&g->wq_mu, NULL);
	pthread_mutex_init(&g->health_mu, NULL);
	pthread_cond_init(&g->wq_cv, NULL);
	g->nspool = sbx_egress_nspool_new(g->c.pool);
	g->loops = xcalloc(g->c.threads, sizeof(*g->loops));
	if (gw_pool_start(g) < 0)
		goto fail;
	for (; g->n_loops < g->c.threads; g->n_loops++)
		if (gw_loop_start(&g->loops[g->n_loops], g, &loop_ops) < 0)
			goto fail;
	*out = g;
	return 0;
fail:
	sbx_egress_gateway_free(&g);
	return -SBX_E_BACKEND;
}

void sbx_egress_gateway_free(struct sbx_egress_gateway **gp)
{
	struct sbx_egress_gateway *g = gp ? *gp : NULL;
	if (!g)
		return;
	/* Sessions first (their loops write their records), then the pool (no
	 * more answers are posted), then the loops. */
	for (;;) {
		pthread_mutex_lock(&g->mu);
		struct sbx_egress_session *s = g->n_sessions ? g->sessions[0] : NULL;
		pthread_mutex_unlock(&g->mu);
		if (!s)
			break;
		sbx_egress_session_close(&s, NULL);
	}
	gw_pool_stop(g);
	for (unsigned i = 0; i < g->n_loops; i++)
		gw_loop_stop(&g->loops[i]);
	free(g->loops);
	sbx_egress_nspool_free(&g->nspool);
	gw_tenants_free(g);
	free(g->sessions);
	pthread_cond_destroy(&g->wq_cv);
	pthread_mutex_destroy(&g->wq_mu);
	pthread_mutex_destroy(&g->health_mu);
	pthread_mutex_destroy(&g->mu);
	free(g);
	*gp = NULL;
}
