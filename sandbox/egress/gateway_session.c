/* A command's network: a namespace from the pool, its listeners on one
 * loop, what it was refused (the summary), and its loopback grants, which
 * follow the tenant's rules as they are set.
 *
 * Floor 3: it calls gateway_loop.c and gateway.c. Its connections and DNS
 * questions (floor 4) note their records here; the session's end reaches
 * them from gateway_start.c, which ends them before gw_session_detach. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/xmalloc.h"
#include "sandbox/egress/gateway_int.h"

#define LOOPBACK_MAX 64 /* port ranges per family (rules are at most 64) */

static void handle_init(struct gw_handle *h, enum gw_kind kind, void *obj, int fd)
{
	*h = (struct gw_handle){.kind = kind, .obj = obj, .fd = fd};
}

/* Under s->ns_mu. */
static int apply_loopback(struct sbx_egress_session *s, char *err, size_t errsz)
{
	uint16_t p4[LOOPBACK_MAX][2], p6[LOOPBACK_MAX][2];
	size_t n4 = 0, n6 = 0;
	struct sbx_egress_rules *r = gw_rules_now(s->g, s->t);
	if (r) {
		n4 = sbx_egress_rules_loopback(r, AF_INET, p4, LOOPBACK_MAX);
		n6 = sbx_egress_rules_loopback(r, AF_INET6, p6, LOOPBACK_MAX);
	}
	sbx_egress_rules_unref(&r);
	return sbx_egress_ns_loopback(&s->ns, (const uint16_t(*)[2])p4, n4, (const uint16_t(*)[2])p6, n6, err,
				      errsz);
}

struct loopback_work {
	struct gw_work w;
	struct sbx_egress_session *s;
};

static void loopback_drop(struct gw_work *w)
{
	struct loopback_work *lw = (struct loopback_work *)w;
	gw_session_unref(lw->s);
	free(lw);
}

/* Each change reads the rules as they are when it runs, and changes are
 * serialised by ns_mu: the last one to run applies the newest rules. */
static void loopback_run(struct gw_work *w)
{
	struct sbx_egress_session *s = ((struct loopback_work *)w)->s;
	char err[200];
	pthread_mutex_lock(&s->ns_mu);
	/* A failed change leaves the old sets: their ports stay granted. */
	if (!s->ns_closed && apply_loopback(s, err, sizeof(err)) < 0)
		log_msg("warn", "egress: command %llu: its loopback grants did not change: %s",
			(unsigned long long)s->seq, err);
	pthread_mutex_unlock(&s->ns_mu);
	loopback_drop(w);
}

/* Under g->mu (set_rules). */
void gw_session_loopback_later(struct sbx_egress_session *s)
{
	struct loopback_work *lw = xcalloc(1, sizeof(*lw));
	lw->w.run = loopback_run;
	lw->w.drop = loopback_drop;
	atomic_fetch_add(&s->refs, 1);
	lw->s = s;
	gw_work_post(s->g, &lw->w);
}

void sbx_egress_gateway_set_rules(struct sbx_egress_gateway *g, const char *tenant,
				  struct sbx_egress_rules *rules)
{
	pthread_mutex_lock(&g->mu);
	struct gw_tenant *t = gw_tenant_find(g, tenant);
	struct sbx_egress_rules *old = t->rules;
	t->rules = rules ? sbx_egress_rules_ref(rules) : NULL;
	/* The live sessions' loopback sets follow, on the pool. */
	for (size_t i = 0; i < g->n_sessions; i++)
		if (g->sessions[i]->t == t)
			gw_session_loopback_later(g->sessions[i]);
	pthread_mutex_unlock(&g->mu);
	sbx_egress_rules_unref(&old);
}

void gw_session_unref(struct sbx_egress_session *s)
{
	if (atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	sbx_egress_names_free(&s->names);
	free(s->dns_seen);
	free(s->exec_id);
	free(s->sub);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->ns_mu);
	free(s);
}

static void sessions_add(struct sbx_egress_gateway *g, struct sbx_egress_session *s)
{
	pthread_mutex_lock(&g->mu);
	if (g->n_sessions == g->cap_sessions) {
		g->cap_sessions = g->cap_sessions ? 2 * g->cap_sessions : 16;
		g->sessions = xrealloc(g->sessions, g->cap_sessions * sizeof(*g->sessions));
	}
	g->sessions[g->n_sessions++] = s;
	s->loop = &g->loops[g->next_loop++ % g->n_loops];
	pthread_mutex_unlock(&g->mu);
}

static void sessions_del(struct sbx_egress_gateway *g, struct sbx_egress_session *s)
{
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; i < g->n_sessions; i++)
		if (g->sessions[i] == s) {
			g->sessions[i] = g->sessions[--g->n_sessions];
			break;
		}
	pthread_mutex_unlock(&g->mu);
}

static struct sbx_egress_session *session_new(struct sbx_egress_gateway *g, const struct sbx_egress_bind *b)
{
	struct sbx_egress_session *s = xcalloc(1, sizeof(*s));
	s->g = g;
	s->t = gw_tenant_get(g, b->tenant);
	s->exec_id = xstrdup(b->exec_id ? b->exec_id : "");
	s->sub = b->sub ? xstrdup(b->sub) : NULL;
	s->seq = b->seq;
	s->names = sbx_egress_names_new();
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_mutex_init(&s->ns_mu, NULL);
	atomic_init(&s->refs, 1);
	return s;
}

int sbx_egress_session_open(struct sbx_egress_gateway *g, const struct sbx_egress_bind *b,
			    struct sbx_egress_session **out, char *err, size_t errsz)
{
	if (b->rules)
		sbx_egress_gateway_set_rules(g, b->tenant, b->rules);
	struct sbx_egress_session *s = session_new(g, b);
	int rc = sbx_egress_nspool_take(g->nspool, &s->ns, err, errsz);
	if (rc < 0) {
		gw_session_unref(s);
		return rc;
	}
	/* Listed before its loopback sets are made: a set_rules from now on
	 * reaches it (ns_mu orders the two). */
	sessions_add(g, s);
	pthread_mutex_lock(&s->ns_mu);
	rc = apply_loopback(s, err, errsz);
	if (rc < 0) {
		sbx_egress_ns_close(&s->ns);
		s->ns_closed = true;
	}
	pthread_mutex_unlock(&s->ns_mu);
	if (rc < 0) {
		sessions_del(g, s);
		gw_session_unref(s);
		return -SBX_E_BACKEND;
	}
	handle_init(&s->h_tcp4, GW_H_TCP, s, s->ns.tcp4);
	handle_init(&s->h_tcp6, GW_H_TCP, s, s->ns.tcp6);
	handle_init(&s->h_dns4, GW_H_DNS, s, s->ns.dns4);
	handle_init(&s->h_dns6, GW_H_DNS, s, s->ns.dns6);
	handle_init(&s->h_nflog, GW_H_NFLOG, s, s->ns.nflog);
	gw_loop_post(s->loop, GW_M_ADD, s);
	*out = s;
	return 0;
}

int sbx_egress_session_rebind(struct sbx_egress_session *s, const struct sbx_egress_bind *b, char *err,
			      size_t errsz)
{
	if (b->rules)
		sbx_egress_gateway_set_rules(s->g, s->t->name, b->rules); /* the session's tenant */
	/* Nothing reads these yet: no process of the command runs, so no
	 * connection or datagram of it has reached a loop (the hand-over that
	 * releases the command comes after this, through the kernel). */
	free(s->exec_id);
	free(s->sub);
	s->exec_id = xstrdup(b->exec_id ? b->exec_id : "");
	s->sub = b->sub ? xstrdup(b->sub) : NULL;
	s->seq = b->seq;
	/* The newest rules' loopback grants before the command starts, as an
	 * open gives them (the set_rules above only queued the change). */
	pthread_mutex_lock(&s->ns_mu);
	int rc = s->ns_closed ? -SBX_E_BACKEND : apply_loopback(s, err, errsz);
	pthread_mutex_unlock(&s->ns_mu);
	return rc < 0 ? -SBX_E_BACKEND : 0;
}

int sbx_egress_session_netns(const struct sbx_egress_session *s)
{
	return s->ns.netns;
}

static struct gw_handle *handles(struct sbx_egress_session *s, size_t i)
{
	struct gw_handle *h[] = {&s->h_tcp4, &s->h_tcp6, &s->h_dns4, &s->h_dns6, &s->h_nflog};
	return i < sizeof(h) / sizeof(h[0]) ? h[i] : NULL;
}

/* On its loop. */
void gw_session_attach(struct sbx_egress_session *s)
{
	struct gw_handle *h;
	for (size_t i = 0; (h = handles(s, i)); i++)
		if (h->fd >= 0)
			gw_loop_watch(s->loop, h, EPOLLIN);
}

/* On its loop, its connections ended (their records are in the summary):
 * the listeners go, and the closing thread is told it may free the
 * session. */
void gw_session_detach(struct sbx_egress_session *s)
{
	struct gw_handle *h;
	for (size_t i = 0; (h = handles(s, i)); i++)
		if (h->fd >= 0)
			gw_loop_watch(s->loop, h, 0);
	pthread_mutex_lock(&s->mu);
	s->ended = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void sbx_egress_session_summary(struct sbx_egress_session *s, struct sbx_egress_summary *sum)
{
	pthread_mutex_lock(&s->mu);
	memset(sum, 0, sizeof(*sum));
	memcpy(sum->denied, s->sum.denied, sizeof(sum->denied));
	sum->n_denied = s->sum.n;
	sum->denied_total = s->sum.denied_total;
	sum->allowed_total = s->sum.allowed_total;
	pthread_mutex_unlock(&s->mu);
}

void sbx_egress_session_close(struct sbx_egress_session **sp, struct sbx_egress_summary *sum)
{
	struct sbx_egress_session *s = sp ? *sp : NULL;
	if (!s)
		return;
	*sp = NULL;
	sessions_del(s->g, s);
	/* The handshake: the loop detaches it after its current batch, and
	 * from then on no event, deadline or message of the loop names it
	 * (resolver answers name connections, all ended by then). */
	gw_loop_post(s->loop, GW_M_CLOSE, s);
	pthread_mutex_lock(&s->mu);
	while (!s->ended)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	if (sum)
		sbx_egress_session_summary(s, sum);
	pthread_mutex_lock(&s->ns_mu);
	sbx_egress_ns_close(&s->ns);
	s->ns_closed = true;
	pthread_mutex_unlock(&s->ns_mu);
	gw_session_unref(s);
}

void gw_session_base(const struct sbx_egress_session *s, struct sbx_egress_record *r)
{
	memset(r, 0, sizeof(*r));
	r->tenant = s->t->name;
	r->exec_id = s->exec_id;
	r->sub = s->sub;
}

static void summary_note(struct gw_denied_list *d, const struct sbx_egress_record *r, const char *dest,
			 uint64_t n)
{
	if (r->allowed) {
		d->allowed_total += n;
		return;
	}
	d->denied_total += n;
	if (!dest)
		return;
	for (size_t i = 0; i < d->n; i++)
		if (strcmp(d->denied[i].dest, dest) == 0)
			return;
	if (d->n == SBX_EGRESS_DENIED_MAX)
		return;
	snprintf(d->denied[d->n].dest, sizeof(d->denied[d->n].dest), "%s", dest);
	snprintf(d->denied[d->n].reason, sizeof(d->denied[d->n].reason), "%s", r->reason ? r->reason : "");
	d->n++;
}

static void count(struct gw_tenant *t, const struct sbx_egress_record *r, uint64_t n)
{
	if (strcmp(r->proto, "udp") == 0)
		atomic_fetch_add(&t->udp_dropped, n);
	else if (!r->allowed && strcmp(r->proto, "dns") == 0)
		atomic_fetch_add(&t->dns_refused, n);
	else
		atomic_fetch_add(r->allowed ? &t->allowed : &t->denied, n);
	atomic_fetch_add(&t->bytes_up, r->bytes_up);
	atomic_fetch_add(&t->bytes_down, r->bytes_down);
}

void gw_session_note(struct sbx_egress_session *s, const struct sbx_egress_record *r, const char *dest,
		     uint64_t n)
{
	pthread_mutex_lock(&s->mu);
	summary_note(&s->sum, r, dest, n);
	pthread_mutex_unlock(&s->mu);
	count(s->t, r, n);
	if (s->g->c.record)
		s->g->c.record(s->g->c.record_ctx, r);
}
