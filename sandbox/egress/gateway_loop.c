/* One event loop of the gateway: epoll over its sessions' listeners and
 * connections, a queue of messages from other threads (woken by an
 * eventfd), the deadlines of undecided connections, and the graveyard.
 *
 * Floor 2: it calls only gateway.c (its thread). It knows the shapes of
 * handles, messages and deadlines, not what they mean: each is handed up
 * through l->ops, so that the files above may call it and not the other
 * way round. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "sandbox/egress/gateway_int.h"

#define BATCH 64

void gw_loop_watch(struct gw_loop *l, struct gw_handle *h, uint32_t events)
{
	if (events == h->events)
		return;
	struct epoll_event ev = {.events = events, .data.ptr = h};
	int op = !events ? EPOLL_CTL_DEL : h->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
	/* Only a bad fd fails, a bug of ours: the state stays as it was. */
	if (epoll_ctl(l->ep, op, h->fd, &ev) == 0)
		h->events = events;
}

void gw_loop_post(struct gw_loop *l, int kind, void *obj)
{
	struct gw_msg *m = xmalloc(sizeof(*m));
	*m = (struct gw_msg){.kind = kind, .obj = obj};
	pthread_mutex_lock(&l->mu);
	if (l->tail)
		l->tail->next = m;
	else
		l->head = m;
	l->tail = m;
	pthread_mutex_unlock(&l->mu);
	uint64_t one = 1;
	/* EAGAIN only when the counter is near overflow: it is awake anyway. */
	(void)!write(l->wake.fd, &one, sizeof(one));
}

void gw_loop_timed_add(struct gw_loop *l, struct gw_conn *c)
{
	if (!c->timed) {
		c->tprev = NULL;
		c->tnext = l->timed;
		if (l->timed)
			l->timed->tprev = c;
		l->timed = c;
		c->timed = true;
	}
	if (c->due < l->next_due)
		l->next_due = c->due;
}

void gw_loop_timed_del(struct gw_loop *l, struct gw_conn *c)
{
	if (!c->timed)
		return;
	if (c->tprev)
		c->tprev->tnext = c->tnext;
	else
		l->timed = c->tnext;
	if (c->tnext)
		c->tnext->tprev = c->tprev;
	c->timed = false;
}

void gw_loop_bury(struct gw_loop *l, struct gw_conn *c)
{
	c->gnext = l->graveyard;
	l->graveyard = c;
}

/* Deadlines are rare events: the list is walked only when one is due. */
static void run_deadlines(struct gw_loop *l)
{
	int64_t now = mono_ms();
	if (now < l->next_due)
		return;
	l->next_due = INT64_MAX;
	for (struct gw_conn *c = l->timed, *next; c; c = next) {
		next = c->tnext;
		if (c->due <= now)
			l->ops->deadline(c);
	}
	for (struct gw_conn *c = l->timed; c; c = c->tnext)
		if (c->due < l->next_due)
			l->next_due = c->due;
}

static void handle_msg(const struct gw_loop *l, struct gw_msg *m)
{
	switch (m->kind) {
	case GW_M_ADD:
		l->ops->session_add(m->obj);
		break;
	case GW_M_CLOSE:
		l->ops->session_close(m->obj);
		break;
	case GW_M_RESOLVED:
		l->ops->resolved(m->obj);
		break;
	}
	free(m);
}

static bool drain_queue(struct gw_loop *l)
{
	pthread_mutex_lock(&l->mu);
	struct gw_msg *m = l->head;
	l->head = l->tail = NULL;
	bool stop = l->stop;
	pthread_mutex_unlock(&l->mu);
	while (m) {
		struct gw_msg *next = m->next;
		handle_msg(l, m);
		m = next;
	}
	return !stop;
}

static void free_graveyard(struct gw_loop *l)
{
	while (l->graveyard) {
		struct gw_conn *c = l->graveyard;
		l->graveyard = c->gnext;
		l->ops->conn_free(c);
	}
}

static void dispatch(const struct gw_loop *l, struct gw_handle *h, uint32_t events)
{
	struct sbx_egress_session *s = h->obj;
	switch (h->kind) {
	case GW_H_WAKE: {
		uint64_t n;
		(void)!read(h->fd, &n, sizeof(n));
		break;
	}
	case GW_H_TCP:
		l->ops->accept(s, h->fd);
		break;
	case GW_H_DNS:
		l->ops->dns_read(s, h->fd, h == &s->h_dns6 ? AF_INET6 : AF_INET);
		break;
	case GW_H_NFLOG:
		l->ops->nflog_read(s, h->fd);
		break;
	case GW_H_CLIENT:
	case GW_H_UPSTREAM:
		l->ops->conn_event(h->obj, h, events);
		break;
	}
}

static int wait_ms(const struct gw_loop *l)
{
	if (l->next_due == INT64_MAX)
		return -1;
	int64_t d = l->next_due - mono_ms();
	return d < 0 ? 0 : d > 60000 ? 60000 : (int)d + 1;
}

static void *loop_main(void *arg)
{
	struct gw_loop *l = arg;
	struct epoll_event evs[BATCH];
	for (;;) {
		int n = epoll_wait(l->ep, evs, BATCH, wait_ms(l));
		for (int i = 0; i < n; i++) {
			struct gw_handle *h = evs[i].data.ptr;
			/* A connection ended earlier in this batch is on the graveyard. */
			if ((h->kind == GW_H_CLIENT || h->kind == GW_H_UPSTREAM) &&
			    ((struct gw_conn *)h->obj)->st == GW_C_DEAD)
				continue;
			dispatch(l, h, evs[i].events);
		}
		run_deadlines(l);
		bool go_on = drain_queue(l);
		free_graveyard(l);
		if (!go_on)
			return NULL;
	}
}

int gw_loop_start(struct gw_loop *l, struct sbx_egress_gateway *g, const struct gw_loop_ops *ops)
{
	l->g = g;
	l->ops = ops;
	l->next_due = INT64_MAX;
	l->ep = epoll_create1(EPOLL_CLOEXEC);
	l->wake =
	    (struct gw_handle){.kind = GW_H_WAKE, .obj = l, .fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
	l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	pthread_mutex_init(&l->mu, NULL);
	if (l->ep < 0 || l->wake.fd < 0 || l->spare_fd < 0)
		goto fail;
	gw_loop_watch(l, &l->wake, EPOLLIN);
	if (gw_thread_start(&l->thr, loop_main, l) < 0)
		goto fail;
	return 0;
fail:
	if (l->ep >= 0)
		close(l->ep);
	if (l->wake.fd >= 0)
		close(l->wake.fd);
	if (l->spare_fd >= 0)
		close(l->spare_fd);
	pthread_mutex_destroy(&l->mu);
	return -1;
}

/* Every session is closed before (sbx_egress_gateway_free): what is left
 * in the queue are resolver answers of connections already ended. */
void gw_loop_stop(struct gw_loop *l)
{
	pthread_mutex_lock(&l->mu);
	l->stop = true;
	pthread_mutex_unlock(&l->mu);
	uint64_t one = 1;
	(void)!write(l->wake.fd, &one, sizeof(one));
	pthread_join(l->thr, NULL);
	drain_queue(l);
	close(l->ep);
	close(l->wake.fd);
	close(l->spare_fd);
	pthread_mutex_destroy(&l->mu);
}
