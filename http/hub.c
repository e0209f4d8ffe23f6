#include "http/hub.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/utf8.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/metrics.h"
#include "http/req.h"

#include "http/hub_int.h"

/* ---- replay rings (hub lock held) ---- */

static void ring_init(struct ring *r, size_t cap, size_t max_bytes)
{
	r->m = xcalloc(cap, sizeof *r->m);
	r->n = r->bytes = 0;
	r->cap = cap;
	r->max_bytes = max_bytes;
}

static void ring_add(struct ring *r, struct msg *m)
{
	while (r->n == r->cap || (r->n && r->bytes + m->len > r->max_bytes)) {
		r->bytes -= r->m[0]->len;
		hub_msg_put(r->m[0]);
		memmove(r->m, r->m + 1, (r->n - 1) * sizeof r->m[0]);
		r->n--;
	}
	r->m[r->n++] = hub_msg_ref(m);
	r->bytes += m->len;
}

static void ring_free(struct ring *r)
{
	for (size_t i = 0; i < r->n; i++)
		hub_msg_put(r->m[i]);
	free(r->m);
	r->m = NULL;
	r->n = 0;
}

/* ---- keepalive ---- */

static void *keepalive(void *arg)
{
	struct http_hub *h = arg;
	struct msg *ka = hub_msg_comment("keepalive");
	pthread_mutex_lock(&h->mu);
	while (!h->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&h->cv, &h->mu, &ts);
		int64_t now = now_ms();
		for (struct sub *s = h->subs; s; s = s->next)
			if (!s->closing && !s->dead && now - s->last_write_ms >= KEEPALIVE_MS && !s->head) {
				s->last_write_ms = now;
				hub_enqueue(s, ka);
			}
	}
	pthread_mutex_unlock(&h->mu);
	hub_msg_put(ka);
	return NULL;
}

void http_hub_new(struct http_hub **out, struct http_metrics *metrics, struct http_watch *watch,
		  size_t feed_replay, void (*cancel)(void *ctx, uint64_t job), void *cancel_ctx)
{
	struct http_hub *h = xcalloc(1, sizeof *h);
	h->feed_replay = feed_replay ? feed_replay : 1;
	h->id_base = now_ms() * 1000;
	h->all_next_id = h->id_base;
	ring_init(&h->all, h->feed_replay, FEED_ALL_BYTES);
	h->metrics = metrics;
	h->watch = watch;
	h->cancel = cancel;
	h->cancel_ctx = cancel_ctx;
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	pthread_create(&h->ka, NULL, keepalive, h);
	*out = h;
}

void http_hub_close_all(struct http_hub *h)
{
	pthread_mutex_lock(&h->mu);
	h->closed = true;
	for (struct sub *s = h->subs; s; s = s->next)
		hub_end_stream(s);
	pthread_mutex_unlock(&h->mu);
}

void http_hub_free(struct http_hub **hp)
{
	struct http_hub *h = *hp;
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	h->stop = true;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
	pthread_join(h->ka, NULL);
	ring_free(&h->all);
	for (struct keytab_node *n; (n = keytab_first(&h->feeds));) {
		keytab_remove(&h->feeds, n);
		ring_free(&((struct tenant_feed *)n)->ring);
		free(n);
	}
	while (h->channels) {
		struct http_hub_channel *c = h->channels;
		h->channels = c->next;
		ring_free(&c->ring);
		hub_msg_put(c->start_msg);
		json_decref(c->start);
		free(c);
	}
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	free(h);
	*hp = NULL;
}

/* ---- channels (hub lock held) ---- */

void hub_channel_put_locked(struct http_hub *h, struct http_hub_channel *c)
{
	if (--c->refs > 0)
		return;
	for (struct http_hub_channel **p = &h->channels; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	ring_free(&c->ring);
	hub_msg_put(c->start_msg);
	json_decref(c->start);
	free(c);
}

struct tenant_feed *hub_feed_find(struct http_hub *h, const char *tenant)
{
	return (struct tenant_feed *)keytab_find(&h->feeds, tenant);
}

/* A tenant's feed, made at its first event (never for a mere subscriber:
 * an admin's ?tenant= may name anything). */
static struct tenant_feed *feed_of(struct http_hub *h, const char *tenant)
{
	struct tenant_feed *f = hub_feed_find(h, tenant);
	if (f)
		return f;
	f = (struct tenant_feed *)keytab_find_or_add(&h->feeds, tenant, sizeof *f);
	f->next_id = h->id_base;
	ring_init(&f->ring, h->feed_replay, FEED_TENANT_BYTES);
	return f;
}

void http_hub_forget_tenant(struct http_hub *h, const char *tenant)
{
	pthread_mutex_lock(&h->mu);
	struct tenant_feed *f = hub_feed_find(h, tenant);
	if (f) { /* next_id stays: ids never go backwards */
		size_t cap = f->ring.cap, max = f->ring.max_bytes;
		ring_free(&f->ring);
		ring_init(&f->ring, cap, max);
	}
	/* Its exec channels keep publishing (their commands are being
	 * killed) under a name no tenant can have. */
	for (struct http_hub_channel *c = h->channels; c; c = c->next)
		if (strcmp(c->tenant, tenant) == 0)
			snprintf(c->tenant, sizeof c->tenant, "%s", "(removed)");
	for (struct sub *s = h->subs; s; s = s->next)
		if ((s->feed && strcmp(s->tenant, tenant) == 0) ||
		    (s->chan && strcmp(s->chan->tenant, "(removed)") == 0))
			hub_end_stream(s);
	pthread_mutex_unlock(&h->mu);
}

/* An exec's event in the feeds: the tenant's own (its ids) and the
 * every-tenant view (ids of its own). In a feed no event is the last. */
static void publish_feed(struct http_hub *h, const char *tenant, const char *event, enum msg_kind kind,
			 json_t *data)
{
	if (kind == MSG_FINAL)
		kind = MSG_OTHER;
	struct tenant_feed *f = feed_of(h, tenant);
	struct msg *mt = hub_msg_event(f->next_id++, event, data, kind);
	struct msg *ma = hub_msg_event(h->all_next_id++, event, data, kind);
	ring_add(&f->ring, mt);
	ring_add(&h->all, ma);
	for (struct sub *s = h->feed_subs; s; s = s->gnext) {
		if (!*s->tenant)
			hub_enqueue(s, ma);
		else if (strcmp(s->tenant, tenant) == 0)
			hub_enqueue(s, mt);
	}
	hub_msg_put(mt);
	hub_msg_put(ma);
}

/* Publish an event of a channel: to its subscribers and (start, heartbeat,
 * exit) to the matching feeds. */
static struct msg *publish(struct http_hub *h, struct http_hub_channel *c, const char *event,
			   enum msg_kind kind, json_t *data, json_t *feed_data)
{
	struct msg *m = hub_msg_event(++c->seq, event, data, kind);
	ring_add(&c->ring, m);
	for (struct sub *s = c->subs; s; s = s->gnext)
		hub_enqueue(s, m);
	hub_msg_put(m); /* the ring keeps it */
	if (feed_data)
		publish_feed(h, c->tenant, event, kind, feed_data);
	return m;
}

static json_t *with_tenant(json_t *data, const char *tenant)
{
	json_t *o = json_copy(data);
	json_object_set_new(o, "tenant", json_string(tenant));
	return o;
}

struct http_hub_channel *http_hub_channel_open(struct http_hub *h, const char *tenant, const char *id,
					       json_t *start)
{
	struct http_hub_channel *c = xcalloc(1, sizeof *c);
	atomic_init(&c->output_subs, 0);
	snprintf(c->tenant, sizeof c->tenant, "%s", tenant);
	snprintf(c->id, sizeof c->id, "%s", id);
	c->start = start;
	c->refs = 2; /* the hub's list until exit, and the opener's */
	ring_init(&c->ring, CHANNEL_RING, SIZE_MAX);
	pthread_mutex_lock(&h->mu);
	c->next = h->channels;
	h->channels = c;
	pthread_mutex_unlock(&h->mu);
	return c;
}

void http_hub_feed_event(struct http_hub *h, const char *tenant, const char *event, json_t *data)
{
	json_t *fd = with_tenant(data, tenant);
	pthread_mutex_lock(&h->mu);
	publish_feed(h, tenant, event, MSG_OTHER, fd);
	pthread_mutex_unlock(&h->mu);
	json_decref(fd);
}

void http_hub_channel_set_start(struct http_hub *h, struct http_hub_channel *c, const char *key,
				json_t *value)
{
	pthread_mutex_lock(&h->mu);
	if (!c->started)
		json_object_set(c->start, key, value);
	pthread_mutex_unlock(&h->mu);
	json_decref(value);
}

void http_hub_channel_started(struct http_hub *h, struct http_hub_channel *c)
{
	pthread_mutex_lock(&h->mu);
	c->started = true;
	json_t *fd = with_tenant(c->start, c->tenant);
	c->start_msg = hub_msg_ref(publish(h, c, "start", MSG_OTHER, c->start, fd));
	json_decref(fd);
	pthread_mutex_unlock(&h->mu);
}

void http_hub_channel_heartbeat(struct http_hub *h, struct http_hub_channel *c, json_t *data)
{
	pthread_mutex_lock(&h->mu);
	json_t *fd = with_tenant(data, c->tenant);
	publish(h, c, "heartbeat", MSG_HEARTBEAT, data, fd);
	json_decref(fd);
	pthread_mutex_unlock(&h->mu);
	json_decref(data);
}

void http_hub_channel_output(struct http_hub *h, struct http_hub_channel *c, int stream, const char *p,
			     size_t n)
{
	/* Every exec reports its output; most have nobody following it. */
	if (atomic_load_explicit(&c->output_subs, memory_order_relaxed) == 0)
		return;
	pthread_mutex_lock(&h->mu);
	/* Format the chunk only when an owner has room for it. */
	bool wanted = false;
	for (struct sub *s = c->subs; s; s = s->gnext)
		if (s->output && !s->closing && !s->dead) {
			if (s->qbytes < s->qmax)
				wanted = true;
			else
				hub_note(s, &s->output_noted,
					 "output events dropped: the client reads too slowly");
		}
	if (wanted) {
		size_t len = 0;
		char *text = utf8_sanitize(p, n, &len);
		json_t *d =
		    json_pack("{s:s, s:s%}", "stream", stream == 2 ? "stderr" : "stdout", "data", text, len);
		struct msg *m = hub_msg_event(++c->seq, "output", d, MSG_OUTPUT);
		for (struct sub *s = c->subs; s; s = s->gnext)
			if (s->output)
				hub_enqueue(s, m);
		hub_msg_put(m);
		json_decref(d);
		free(text);
	}
	pthread_mutex_unlock(&h->mu);
}

void http_hub_channel_exit(struct http_hub *h, struct http_hub_channel *c, json_t *result, json_t *error)
{
	pthread_mutex_lock(&h->mu);
	if (result) {
		json_t *fd = with_tenant(result, c->tenant);
		publish(h, c, "exit", MSG_FINAL, result, fd);
		json_decref(fd);
		/* The owner's request (POST /exec with stream: true) is audited
		 * with the exit code, like any other exec. */
		for (struct sub *s = c->subs; s; s = s->gnext)
			if (s->cancel_handle && !s->req_gone)
				http_set_exec_result(s->r, result);
	} else if (error) {
		/* Not "error": EventSource reserves that name for its own. */
		publish(h, c, "exec_error", MSG_FINAL, error, NULL);
	}
	c->ended = true;
	for (struct sub *s = c->subs; s; s = s->gnext)
		hub_end_stream(s);
	/* Out of the live list: late subscribers read the store. */
	for (struct http_hub_channel **p = &h->channels; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	c->next = NULL;
	hub_channel_put_locked(h, c); /* the list's reference */
	hub_channel_put_locked(h, c); /* the opener's */
	pthread_mutex_unlock(&h->mu);
}

/* The id the exit event of c will have: recorded with the result, so a
 * finished exec replays it with that id. */
int64_t http_hub_channel_exit_id(struct http_hub *h, struct http_hub_channel *c)
{
	pthread_mutex_lock(&h->mu);
	int64_t id = c->seq + 1;
	pthread_mutex_unlock(&h->mu);
	return id;
}
