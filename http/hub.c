#include "http/hub.h"

#include <errno.h>
#include <microhttpd.h>
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
#include "http/req_int.h"
#include "http/response.h"
#include "http/watch.h"

#define CHANNEL_RING 64 /* replayable events per exec */
/* Feed replay: the count is the server's setting (per tenant); the bytes
 * bound it too: an exit event carries the whole ShellResult (up to two
 * max-output-bytes-cap streams, JSON-escaped), so a count alone would let
 * one tenant's execs pin gigabytes. The newest event always stays. */
#define FEED_TENANT_BYTES (8u << 20)
#define FEED_ALL_BYTES (32u << 20) /* the every-tenant view of admin feeds */
#define QUEUE_MAX (256 * 1024)	   /* a watcher's backlog before it is dropped */
#define QUEUE_MAX_OUTPUT (4 << 20) /* the owner of a streamed exec */
/* wire.md promises a comment at least every 15 s; the keepalive tick is 1 s,
 * so idle streams get one after 12 s, leaving room for a busy scheduler. */
#define KEEPALIVE_MS 12000

/* One formatted event, shared by every queue it is in. */
enum msg_kind {
	MSG_OTHER,  /* start, comments */
	MSG_OUTPUT, /* output chunks: only to the owner of a streamed exec */
	MSG_HEARTBEAT,
	MSG_FINAL, /* exit or error: the last event of an exec's stream */
};

struct msg {
	atomic_int refs;
	enum msg_kind kind;
	int64_t id; /* the event's id: (0: none) */
	size_t len;
	char data[]; /* len bytes, NUL-terminated */
};

struct qitem {
	struct msg *m;
	struct qitem *next;
};

struct sub {
	struct http_hub *h;
	struct http_hub_channel *chan; /* exec stream; NULL for a feed */
	bool feed;		       /* a tenant feed */
	char tenant[64];	       /* feed filter; "" = every tenant */
	bool output;
	struct MHD_Connection *conn;
	struct http_req *r; /* until req_gone: bytes_out for the audit */
	struct qitem *head, *tail;
	size_t off, qbytes, qmax;
	bool suspended, closing, dead, req_gone, output_noted, heartbeat_noted;
	int refs; /* the request and the response */
	int64_t last_write_ms;
	int64_t watch;
	uint64_t cancel_handle; /* a runner job to cancel when the client hangs up */
	struct sub *next;	/* every subscriber (hub->subs) */
	struct sub *gnext;	/* its group: its channel's (chan->subs) or the feeds' (hub->feed_subs) */
};

/* A bounded replay buffer of formatted events, oldest first, ids rising. */
struct ring {
	struct msg **m;
	size_t n, cap, bytes, max_bytes;
};

struct http_hub_channel {
	char tenant[64];
	char id[72];
	json_t *start;
	int64_t seq;
	struct ring ring;
	struct msg *start_msg; /* kept for late joiners even when the ring has moved on */
	bool started, ended;
	int refs;
	/* Subscribers that asked for output (changed under the hub lock; read
	 * without it by the runner, which formats no chunk while it is 0). */
	atomic_int output_subs;
	/* Its subscribers: an event of this exec visits them only, not every
	 * stream of the server (a thousand watchers of other execs must not
	 * cost each exec's start and exit a walk of a thousand). */
	struct sub *subs;
	struct http_hub_channel *next;
};

/* One tenant's feed: its own ids, which never go backwards (they start
 * at the server's start time in microseconds: a restart begins above any
 * id a previous run gave, unless it published a million events a second
 * on average), and its own replay buffer. */
struct tenant_feed {
	char tenant[64];
	int64_t next_id;
	struct ring ring;
	struct tenant_feed *next;
};

struct http_hub {
	struct http_metrics *metrics;
	struct http_watch *watch;
	void (*cancel)(void *ctx, uint64_t job); /* cancels a streamed command whose owner left */
	void *cancel_ctx;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct http_hub_channel *channels;
	struct sub *subs;      /* all, for keepalives and shutdown */
	struct sub *feed_subs; /* the tenant feeds' (GET /events) */
	struct tenant_feed *feeds;
	size_t feed_replay;  /* events kept per tenant */
	int64_t id_base;     /* first id of every feed in this run */
	int64_t all_next_id; /* the every-tenant view (admin) has ids of its own */
	struct ring all;
	pthread_t ka;
	bool stop;
	bool closed; /* http_hub_close_all ran: new streams end after their replay */
};

/* ---- messages ---- */

static struct msg *msg_alloc(const char *text, size_t len, enum msg_kind kind)
{
	struct msg *m = xmalloc(sizeof *m + len + 1);
	atomic_init(&m->refs, 1);
	m->kind = kind;
	m->id = 0;
	m->len = len;
	memcpy(m->data, text, len);
	m->data[len] = '\0';
	return m;
}

static struct msg *msg_event(int64_t id, const char *event, json_t *data, enum msg_kind kind)
{
	/* Compact JSON has no raw newline: one data line. Formatted straight
	 * into the message (an output chunk is up to a read buffer large). */
	char head[96];
	int hn = snprintf(head, sizeof head, "id: %lld\nevent: %s\ndata: ", (long long)id, event);
	char *j = json_dumps(data, JSON_COMPACT);
	size_t jn = j ? strlen(j) : 4;
	size_t len = (size_t)hn + jn + 2;
	struct msg *m = xmalloc(sizeof *m + len + 1);
	atomic_init(&m->refs, 1);
	m->kind = kind;
	m->id = id;
	m->len = len;
	memcpy(m->data, head, (size_t)hn);
	memcpy(m->data + hn, j ? j : "null", jn);
	memcpy(m->data + hn + jn, "\n\n", 3);
	free(j);
	return m;
}

static struct msg *msg_comment(const char *text)
{
	char *t = xasprintf(": %s\n\n", text);
	struct msg *m = msg_alloc(t, strlen(t), MSG_OTHER);
	free(t);
	return m;
}

static struct msg *msg_ref(struct msg *m)
{
	atomic_fetch_add(&m->refs, 1);
	return m;
}

static void msg_put(struct msg *m)
{
	if (m && atomic_fetch_sub(&m->refs, 1) == 1)
		free(m);
}

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
		msg_put(r->m[0]);
		memmove(r->m, r->m + 1, (r->n - 1) * sizeof r->m[0]);
		r->n--;
	}
	r->m[r->n++] = msg_ref(m);
	r->bytes += m->len;
}

static void ring_free(struct ring *r)
{
	for (size_t i = 0; i < r->n; i++)
		msg_put(r->m[i]);
	free(r->m);
	r->m = NULL;
	r->n = 0;
}

/* `gap`: events after the client's last id are no longer kept; first_id
 * is the first one it can have (it re-lists with GET /execs). No id: the
 * client's Last-Event-ID stays where it was. */
static struct msg *msg_gap(int64_t first_id)
{
	char t[96];
	int n = snprintf(t, sizeof t, "event: gap\ndata: {\"first_id\":%lld}\n\n", (long long)first_id);
	return msg_alloc(t, (size_t)n, MSG_OTHER);
}

/* ---- subscribers (hub lock held) ---- */

static void wake(struct sub *s)
{
	if (s->suspended && !s->req_gone) {
		s->suspended = false;
		MHD_resume_connection(s->conn);
	}
}

static void push(struct sub *s, struct msg *m)
{
	struct qitem *q = xmalloc(sizeof *q);
	q->m = msg_ref(m);
	q->next = NULL;
	if (s->tail)
		s->tail->next = q;
	else
		s->head = q;
	s->tail = q;
	s->qbytes += m->len;
}

/* Replay to s what came after last_id (> 0): a `gap` first when some of
 * it is gone; next_id is the id the next event will have. */
static void replay(struct sub *s, const struct ring *r, int64_t last_id, int64_t next_id)
{
	int64_t first = r->n ? r->m[0]->id : next_id;
	if (last_id + 1 < first) {
		struct msg *g = msg_gap(first);
		push(s, g);
		msg_put(g);
	}
	for (size_t i = 0; i < r->n; i++)
		if (r->m[i]->id > last_id)
			push(s, r->m[i]);
}

static void note(struct sub *s, bool *noted, const char *text)
{
	if (*noted)
		return;
	struct msg *c = msg_comment(text);
	push(s, c);
	msg_put(c);
	*noted = true;
}

static void enqueue(struct sub *s, struct msg *m)
{
	if (s->closing || s->dead)
		return;
	/* The last event of a stream always goes out: it is one message,
	 * shared with every other queue, and the stream ends with it. */
	if (m->kind != MSG_FINAL && s->qbytes + m->len > s->qmax) {
		if (m->kind == MSG_OUTPUT) {
			/* The owner's output is in the final result anyway: drop
			 * live chunks rather than the stream. */
			note(s, &s->output_noted, "output events dropped: the client reads too slowly");
			return;
		}
		if (s->output && m->kind == MSG_HEARTBEAT) {
			/* The owner of a streamed exec waits for its result: skip
			 * heartbeats while it catches up rather than end its stream. */
			note(s, &s->heartbeat_noted, "heartbeats dropped: the client reads too slowly");
			return;
		}
		struct msg *c = msg_comment("dropped: the client reads too slowly");
		push(s, c);
		msg_put(c);
		s->closing = true;
		wake(s);
		return;
	}
	push(s, m);
	wake(s);
}

static void end_stream(struct sub *s)
{
	s->closing = true;
	wake(s);
}

static void sub_unlink(struct http_hub *h, struct sub *s)
{
	for (struct sub **p = &h->subs; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	struct sub **g = s->chan ? &s->chan->subs : s->feed ? &h->feed_subs : NULL;
	for (; g && *g; g = &(*g)->gnext)
		if (*g == s) {
			*g = s->gnext;
			break;
		}
}

static void channel_put_locked(struct http_hub *h, struct http_hub_channel *c);

static void sub_put_locked(struct http_hub *h, struct sub *s)
{
	if (--s->refs > 0)
		return;
	sub_unlink(h, s);
	while (s->head) {
		struct qitem *q = s->head;
		s->head = q->next;
		msg_put(q->m);
		free(q);
	}
	if (s->chan) {
		if (s->output)
			atomic_fetch_sub(&s->chan->output_subs, 1);
		channel_put_locked(h, s->chan);
	}
	http_metrics_sse(h->metrics, -1);
	free(s);
}

/* libmicrohttpd asks for bytes. */
static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct sub *s = cls;
	struct http_hub *h = s->h;
	(void)pos;
	pthread_mutex_lock(&h->mu);
	if (s->dead) {
		pthread_mutex_unlock(&h->mu);
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	size_t n = 0;
	while (s->head && n < max) {
		struct qitem *q = s->head;
		size_t take = q->m->len - s->off;
		if (take > max - n)
			take = max - n;
		memcpy(buf + n, q->m->data + s->off, take);
		n += take;
		s->off += take;
		if (s->off == q->m->len) {
			s->head = q->next;
			if (!s->head)
				s->tail = NULL;
			s->qbytes -= q->m->len;
			s->off = 0;
			msg_put(q->m);
			free(q);
		}
	}
	if (n) {
		s->last_write_ms = now_ms();
		if (!s->req_gone)
			s->r->bytes_out += (int64_t)n; /* this thread completes the request too */
		pthread_mutex_unlock(&h->mu);
		return (ssize_t)n;
	}
	if (s->closing) {
		pthread_mutex_unlock(&h->mu);
		return MHD_CONTENT_READER_END_OF_STREAM;
	}
	/* Nothing to send: sleep until a publish resumes us (returning 0
	 * without suspending would spin). */
	s->suspended = true;
	MHD_suspend_connection(s->conn);
	pthread_mutex_unlock(&h->mu);
	return 0;
}

static void response_free(void *cls)
{
	struct sub *s = cls;
	struct http_hub *h = s->h;
	pthread_mutex_lock(&h->mu);
	sub_put_locked(h, s);
	pthread_mutex_unlock(&h->mu);
}

/* The request completed: never touch its connection again. */
static void request_free(struct http_req *r)
{
	struct sub *s = r->hstate;
	struct http_hub *h = s->h;
	r->hstate = NULL;
	http_watch_remove(h->watch, s->watch); /* outside the hub lock: the watch callback takes it */
	pthread_mutex_lock(&h->mu);
	s->req_gone = true;
	s->dead = true;
	/* The owner of a streamed exec went away before its end (libmicrohttpd
	 * noticed first, e.g. a failed write): that cancels the command too. */
	uint64_t job = !r->completed_ok && s->chan && !s->chan->ended ? s->cancel_handle : 0;
	sub_put_locked(h, s);
	pthread_mutex_unlock(&h->mu);
	if (job)
		h->cancel(h->cancel_ctx, job);
}

static void on_hangup(void *ctx)
{
	struct sub *s = ctx;
	struct http_hub *h = s->h;
	uint64_t job = 0;
	pthread_mutex_lock(&h->mu);
	s->dead = true;
	job = s->cancel_handle;
	wake(s);
	pthread_mutex_unlock(&h->mu);
	if (job)
		h->cancel(h->cancel_ctx, job);
}

/* A subscriber for r (hub lock held); sub_answer() then answers r. */
static struct sub *sub_new_locked(struct http_hub *h, struct http_req *r, bool output)
{
	struct sub *s = xcalloc(1, sizeof *s);
	s->h = h;
	s->conn = http_req_core_of(r)->conn;
	s->r = r;
	s->output = output;
	s->qmax = output ? QUEUE_MAX_OUTPUT : QUEUE_MAX;
	s->refs = 2;
	s->closing = h->closed; /* shutting down: the replay, then the end */
	s->last_write_ms = now_ms();
	s->next = h->subs;
	h->subs = s;
	r->hstate = s;
	r->on_free = request_free;
	http_metrics_sse(h->metrics, 1);
	/* Tell the client how long to wait before reconnecting. */
	struct msg *m = msg_alloc("retry: 2000\n\n", 13, MSG_OTHER);
	push(s, m);
	msg_put(m);
	return s;
}

static void watch_sub(struct http_hub *h, struct http_req *r, struct sub *s)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(http_req_core_of(r)->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return;
	int64_t w = http_watch_add(h->watch, ci->connect_fd, on_hangup, s);
	pthread_mutex_lock(&h->mu);
	s->watch = w > 0 ? w : 0;
	pthread_mutex_unlock(&h->mu);
}

/* Answer r with the stream of s, and watch its client for a hang-up.
 * Without the hub lock: a response libmicrohttpd refuses is freed at
 * once, and response_free takes the lock. The reader cannot run before
 * the handler returns (this thread), so nothing is sent early. */
static int sub_answer(struct http_hub *h, struct http_req *r, struct sub *s, bool watch)
{
	struct http_response *resp =
	    http_response_stream(HTTP_SIZE_UNKNOWN, 32 * 1024, reader, s, response_free);
	if (!resp) {
		pthread_mutex_lock(&h->mu);
		sub_put_locked(h, s); /* the response's reference */
		pthread_mutex_unlock(&h->mu);
		return -ENOMEM;
	}
	http_response_header(resp, "Content-Type", "text/event-stream; charset=utf-8");
	http_response_header(resp, "X-Accel-Buffering", "no");
	/* An event stream's connection ends with the stream: the server closes
	 * it rather than waiting in keep-alive for the client to hang up (a
	 * resumed connection in libmicrohttpd 0.9.75's epoll mode was seen to
	 * linger until the idle timeout). EventSource reconnects anyway. */
	http_response_header(resp, "Connection", "close");
	int rc = http_reply_response(r, 200, resp);
	if (rc == 0 && watch)
		watch_sub(h, r, s);
	return rc;
}

/* ---- keepalive ---- */

static void *keepalive(void *arg)
{
	struct http_hub *h = arg;
	struct msg *ka = msg_comment("keepalive");
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
				enqueue(s, ka);
			}
	}
	pthread_mutex_unlock(&h->mu);
	msg_put(ka);
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
		end_stream(s);
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
	while (h->feeds) {
		struct tenant_feed *f = h->feeds;
		h->feeds = f->next;
		ring_free(&f->ring);
		free(f);
	}
	while (h->channels) {
		struct http_hub_channel *c = h->channels;
		h->channels = c->next;
		ring_free(&c->ring);
		msg_put(c->start_msg);
		json_decref(c->start);
		free(c);
	}
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	free(h);
	*hp = NULL;
}

/* ---- channels (hub lock held) ---- */

static void channel_put_locked(struct http_hub *h, struct http_hub_channel *c)
{
	if (--c->refs > 0)
		return;
	for (struct http_hub_channel **p = &h->channels; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	ring_free(&c->ring);
	msg_put(c->start_msg);
	json_decref(c->start);
	free(c);
}

static struct tenant_feed *feed_find(struct http_hub *h, const char *tenant)
{
	struct tenant_feed *f = h->feeds;
	while (f && strcmp(f->tenant, tenant) != 0)
		f = f->next;
	return f;
}

/* A tenant's feed, made at its first event (never for a mere subscriber:
 * an admin's ?tenant= may name anything). */
static struct tenant_feed *feed_of(struct http_hub *h, const char *tenant)
{
	struct tenant_feed *f = feed_find(h, tenant);
	if (f)
		return f;
	f = xcalloc(1, sizeof *f);
	snprintf(f->tenant, sizeof f->tenant, "%s", tenant);
	f->next_id = h->id_base;
	ring_init(&f->ring, h->feed_replay, FEED_TENANT_BYTES);
	f->next = h->feeds;
	h->feeds = f;
	return f;
}

void http_hub_forget_tenant(struct http_hub *h, const char *tenant)
{
	pthread_mutex_lock(&h->mu);
	struct tenant_feed *f = feed_find(h, tenant);
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
			end_stream(s);
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
	struct msg *mt = msg_event(f->next_id++, event, data, kind);
	struct msg *ma = msg_event(h->all_next_id++, event, data, kind);
	ring_add(&f->ring, mt);
	ring_add(&h->all, ma);
	for (struct sub *s = h->feed_subs; s; s = s->gnext) {
		if (!*s->tenant)
			enqueue(s, ma);
		else if (strcmp(s->tenant, tenant) == 0)
			enqueue(s, mt);
	}
	msg_put(mt);
	msg_put(ma);
}

/* Publish an event of a channel: to its subscribers and (start, heartbeat,
 * exit) to the matching feeds. */
static struct msg *publish(struct http_hub *h, struct http_hub_channel *c, const char *event,
			   enum msg_kind kind, json_t *data, json_t *feed_data)
{
	struct msg *m = msg_event(++c->seq, event, data, kind);
	ring_add(&c->ring, m);
	for (struct sub *s = c->subs; s; s = s->gnext)
		enqueue(s, m);
	msg_put(m); /* the ring keeps it */
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
	c->start_msg = msg_ref(publish(h, c, "start", MSG_OTHER, c->start, fd));
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
				note(s, &s->output_noted,
				     "output events dropped: the client reads too slowly");
		}
	if (wanted) {
		size_t len = 0;
		char *text = utf8_sanitize(p, n, &len);
		json_t *d =
		    json_pack("{s:s, s:s%}", "stream", stream == 2 ? "stderr" : "stdout", "data", text, len);
		struct msg *m = msg_event(++c->seq, "output", d, MSG_OUTPUT);
		for (struct sub *s = c->subs; s; s = s->gnext)
			if (s->output)
				enqueue(s, m);
		msg_put(m);
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
		end_stream(s);
	/* Out of the live list: late subscribers read the store. */
	for (struct http_hub_channel **p = &h->channels; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	c->next = NULL;
	channel_put_locked(h, c); /* the list's reference */
	channel_put_locked(h, c); /* the opener's */
	pthread_mutex_unlock(&h->mu);
}

/* ---- subscribing ---- */

int http_hub_subscribe_exec(struct http_hub *h, struct http_req *r, const char *tenant, const char *id,
			    int64_t last_id, bool output)
{
	pthread_mutex_lock(&h->mu);
	struct http_hub_channel *c = h->channels;
	while (c && !(strcmp(c->id, id) == 0 && strcmp(c->tenant, tenant) == 0))
		c = c->next;
	if (!c || c->ended) {
		pthread_mutex_unlock(&h->mu);
		return -ENOENT;
	}
	struct sub *s = sub_new_locked(h, r, output);
	s->chan = c;
	s->gnext = c->subs;
	c->subs = s;
	c->refs++;
	if (output)
		atomic_fetch_add(&c->output_subs, 1);
	/* Replay what the subscriber missed; a late joiner without an id
	 * gets `start` and the latest state. */
	if (last_id > 0) {
		replay(s, &c->ring, last_id, c->seq + 1);
	} else if (c->start_msg) {
		/* `start`, then the most recent heartbeat if any. */
		push(s, c->start_msg);
		for (size_t i = c->ring.n; i-- > 0;)
			if (c->ring.m[i]->kind == MSG_HEARTBEAT) {
				push(s, c->ring.m[i]);
				break;
			}
	}
	s->qmax += s->qbytes; /* the replay is held by the ring anyway */
	pthread_mutex_unlock(&h->mu);
	return sub_answer(h, r, s, true);
}

int http_hub_subscribe_feed(struct http_hub *h, struct http_req *r, const char *tenant, int64_t last_id)
{
	pthread_mutex_lock(&h->mu);
	struct sub *s = sub_new_locked(h, r, false);
	s->feed = true;
	s->gnext = h->feed_subs;
	h->feed_subs = s;
	snprintf(s->tenant, sizeof s->tenant, "%s", tenant ? tenant : "");
	if (last_id > 0) {
		if (tenant) {
			static const struct ring none;
			struct tenant_feed *f = feed_find(h, tenant);
			replay(s, f ? &f->ring : &none, last_id, f ? f->next_id : h->id_base);
		} else {
			replay(s, &h->all, last_id, h->all_next_id);
		}
	}
	s->qmax += s->qbytes; /* the replay is held by the ring anyway */
	pthread_mutex_unlock(&h->mu);
	return sub_answer(h, r, s, true);
}

int http_hub_reply_ended(struct http_hub *h, struct http_req *r, json_t *start, json_t *result,
			 int64_t exit_id, int64_t last_id)
{
	if (exit_id < 2)
		exit_id = 2; /* recorded before exit ids were kept: start, then exit */
	if (last_id >= exit_id) {
		/* Nothing more, ever: 204 is what makes EventSource stop. */
		struct http_response *resp = http_response_static("", 0);
		return resp ? http_reply_response(r, 204, resp) : -ENOMEM;
	}
	pthread_mutex_lock(&h->mu);
	struct sub *s = sub_new_locked(h, r, false);
	struct msg *m1 = msg_event(1, "start", start, MSG_OTHER);
	struct msg *m2 = msg_event(exit_id, "exit", result, MSG_FINAL);
	if (last_id <= 0) {
		push(s, m1);
	} else if (last_id + 1 < exit_id) {
		/* heartbeats between the client's last and the exit are gone */
		struct msg *g = msg_gap(exit_id);
		push(s, g);
		msg_put(g);
	}
	push(s, m2);
	msg_put(m1);
	msg_put(m2);
	s->closing = true;
	pthread_mutex_unlock(&h->mu);
	return sub_answer(h, r, s, false);
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

void http_hub_set_cancel(struct http_hub *h, struct http_req *r, uint64_t job)
{
	struct sub *s = r->hstate;
	pthread_mutex_lock(&h->mu);
	s->cancel_handle = job;
	bool gone = s->dead; /* hung up before the job was known */
	pthread_mutex_unlock(&h->mu);
	if (gone)
		h->cancel(h->cancel_ctx, job);
}
