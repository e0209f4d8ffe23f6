/* The event hub's messages, formatted once and shared, and a
 * subscriber's bounded queue of them (see hub_int.h). */
#include "http/hub_int.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"

/* ---- messages ---- */

struct msg *hub_msg_alloc(const char *text, size_t len, enum msg_kind kind)
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

struct msg *hub_msg_event(int64_t id, const char *event, json_t *data, enum msg_kind kind)
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

struct msg *hub_msg_comment(const char *text)
{
	char *t = xasprintf(": %s\n\n", text);
	struct msg *m = hub_msg_alloc(t, strlen(t), MSG_OTHER);
	free(t);
	return m;
}

struct msg *hub_msg_ref(struct msg *m)
{
	atomic_fetch_add(&m->refs, 1);
	return m;
}

void hub_msg_put(struct msg *m)
{
	if (m && atomic_fetch_sub(&m->refs, 1) == 1)
		free(m);
}

/* `gap`: events after the client's last id are no longer kept; first_id
 * is the first one it can have (it re-lists with GET /execs). No id: the
 * client's Last-Event-ID stays where it was. */
struct msg *hub_msg_gap(int64_t first_id)
{
	char t[96];
	int n = snprintf(t, sizeof t, "event: gap\ndata: {\"first_id\":%lld}\n\n", (long long)first_id);
	return hub_msg_alloc(t, (size_t)n, MSG_OTHER);
}

/* ---- subscribers (hub lock held) ---- */

void hub_wake(struct sub *s)
{
	if (s->suspended && !s->req_gone) {
		s->suspended = false;
		MHD_resume_connection(s->conn);
	}
}

void hub_push(struct sub *s, struct msg *m)
{
	struct qitem *q = xmalloc(sizeof *q);
	q->m = hub_msg_ref(m);
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
void hub_replay(struct sub *s, const struct ring *r, int64_t last_id, int64_t next_id)
{
	int64_t first = r->n ? r->m[0]->id : next_id;
	if (last_id + 1 < first) {
		struct msg *g = hub_msg_gap(first);
		hub_push(s, g);
		hub_msg_put(g);
	}
	for (size_t i = 0; i < r->n; i++)
		if (r->m[i]->id > last_id)
			hub_push(s, r->m[i]);
}

void hub_note(struct sub *s, bool *noted, const char *text)
{
	if (*noted)
		return;
	struct msg *c = hub_msg_comment(text);
	hub_push(s, c);
	hub_msg_put(c);
	*noted = true;
}

void hub_enqueue(struct sub *s, struct msg *m)
{
	if (s->closing || s->dead)
		return;
	/* The last event of a stream always goes out: it is one message,
	 * shared with every other queue, and the stream ends with it. */
	if (m->kind != MSG_FINAL && s->qbytes + m->len > s->qmax) {
		if (m->kind == MSG_OUTPUT) {
			/* The owner's output is in the final result anyway: drop
			 * live chunks rather than the stream. */
			hub_note(s, &s->output_noted, "output events dropped: the client reads too slowly");
			return;
		}
		if (s->output && m->kind == MSG_HEARTBEAT) {
			/* The owner of a streamed exec waits for its result: skip
			 * heartbeats while it catches up rather than end its stream. */
			hub_note(s, &s->heartbeat_noted, "heartbeats dropped: the client reads too slowly");
			return;
		}
		struct msg *c = hub_msg_comment("dropped: the client reads too slowly");
		hub_push(s, c);
		hub_msg_put(c);
		s->closing = true;
		hub_wake(s);
		return;
	}
	hub_push(s, m);
	hub_wake(s);
}

void hub_end_stream(struct sub *s)
{
	s->closing = true;
	hub_wake(s);
}
