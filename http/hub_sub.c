/* The event hub's subscribers (see hub.h, hub_int.h): the libmicrohttpd
 * stream that drains each one's queue, its hang-up watch, and the
 * subscribing entry points. */
#include "http/hub_int.h"

#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/metrics.h"
#include "http/req.h"
#include "http/req_int.h"
#include "http/response.h"
#include "http/watch.h"

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

static void sub_put_locked(struct http_hub *h, struct sub *s)
{
	if (--s->refs > 0)
		return;
	sub_unlink(h, s);
	while (s->head) {
		struct qitem *q = s->head;
		s->head = q->next;
		hub_msg_put(q->m);
		free(q);
	}
	if (s->chan) {
		if (s->output)
			atomic_fetch_sub(&s->chan->output_subs, 1);
		hub_channel_put_locked(h, s->chan);
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
			hub_msg_put(q->m);
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
	hub_wake(s);
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
	struct msg *m = hub_msg_alloc("retry: 2000\n\n", 13, MSG_OTHER);
	hub_push(s, m);
	hub_msg_put(m);
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
		hub_replay(s, &c->ring, last_id, c->seq + 1);
	} else if (c->start_msg) {
		/* `start`, then the most recent heartbeat if any. */
		hub_push(s, c->start_msg);
		for (size_t i = c->ring.n; i-- > 0;)
			if (c->ring.m[i]->kind == MSG_HEARTBEAT) {
				hub_push(s, c->ring.m[i]);
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
			struct tenant_feed *f = hub_feed_find(h, tenant);
			hub_replay(s, f ? &f->ring : &none, last_id, f ? f->next_id : h->id_base);
		} else {
			hub_replay(s, &h->all, last_id, h->all_next_id);
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
	struct msg *m1 = hub_msg_event(1, "start", start, MSG_OTHER);
	struct msg *m2 = hub_msg_event(exit_id, "exit", result, MSG_FINAL);
	if (last_id <= 0) {
		hub_push(s, m1);
	} else if (last_id + 1 < exit_id) {
		/* heartbeats between the client's last and the exit are gone */
		struct msg *g = hub_msg_gap(exit_id);
		hub_push(s, g);
		hub_msg_put(g);
	}
	hub_push(s, m2);
	hub_msg_put(m1);
	hub_msg_put(m2);
	s->closing = true;
	pthread_mutex_unlock(&h->mu);
	return sub_answer(h, r, s, false);
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
