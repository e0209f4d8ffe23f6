/* Following server-sent events (wire.md "Live progress") with automatic
 * reconnection: Last-Event-ID after the last event handed over, a delay
 * growing from 100 ms to a bound and reset by every event, and an idle
 * limit (the server comments at least every 15 s) that turns a silent
 * dead connection into a reconnect. */
#include "client/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/xmalloc.h"

#define FIRST_DELAY_MS 100

struct follow {
	const struct sbxc_follow *f;
	sbxc_event_fn on_event;
	void *arg;
	bool ended;	/* an exec's stream sent its last event */
	long delivered; /* events handed over on this connection */
};

static int pass_on(void *arg, const struct sbxc_event *ev)
{
	struct follow *w = arg;
	w->delivered++;
	if (w->f->exec_id && (strcmp(ev->name, "exit") == 0 || strcmp(ev->name, "exec_error") == 0))
		w->ended = true;
	return w->on_event(w->arg, ev);
}

static char *follow_path(const struct sbxc_follow *f, struct buf *q)
{
	if (!f->exec_id) {
		sbxc__q(q, "tenant", f->tenant);
		return xstrdup("/events");
	}
	if (f->output)
		sbxc__q(q, "output", "true");
	return xasprintf("/exec/%s/events", f->exec_id);
}

/* One connection: 0 when the server ended the stream or answered 204,
 * 1 when the receiver stopped, else the error. */
static int connect_once(struct sbxc *h, const struct sbxc_call *c, struct follow *w, char *last_id,
			size_t last_sz, long *retry_after, struct sbxc_err *err)
{
	struct buf q;
	buf_init(&q, 4096);
	char *path = follow_path(w->f, &q);
	char lei[160];
	snprintf(lei, sizeof lei, "Last-Event-ID: %s", last_id);
	const char *hdrs[] = {"Accept: text/event-stream", last_id[0] ? lei : NULL, NULL};
	struct sse s;
	sse_init(&s, pass_on, w, 64u << 20);
	snprintf(s.last_id, sizeof s.last_id, "%s", last_id);
	struct creq rq = {.method = "GET",
			  .path = path,
			  .query = &q,
			  .headers = hdrs,
			  .sink = sse_feed,
			  .sink_arg = &s,
			  .idempotent = true,
			  .open_ended = true,
			  .idle_ms = w->f->idle_timeout_ms > 0 ? w->f->idle_timeout_ms : 45000};
	struct cresp r;
	w->delivered = 0;
	int rc = sbxc__do(h, c, &rq, &r, err);
	*retry_after = err ? err->retry_after_s : -1;
	snprintf(last_id, last_sz, "%s", s.last_id);
	if (s.stopped)
		rc = 1;
	cresp_free(&r);
	sse_free(&s);
	buf_free(&q);
	free(path);
	return rc;
}

/* Whether a failed connection is worth another: the server or the
 * network, not the request. */
static bool transient(int rc, const struct sbxc_err *e)
{
	if (rc == -ECANCELED || rc == -EPROTO || rc == -EINVAL)
		return false;
	long st = e ? e->status : 0;
	return st == 0 || st == 429 || st >= 500;
}

int sbxc_follow(struct sbxc *h, const struct sbxc_call *c, const struct sbxc_follow *f,
		sbxc_event_fn on_event, void *arg, struct sbxc_err *err)
{
	struct sbxc_err local;
	if (!err)
		err = &local;
	if (!f || !on_event)
		return sbxc__fail(err, -EINVAL, "nothing to follow");
	if (f->exec_id && !sbxc__id_ok(f->exec_id))
		return sbxc__fail(err, -EINVAL, "an exec id matches [A-Za-z0-9_-]{1,64}");
	struct follow w = {.f = f, .on_event = on_event, .arg = arg};
	char last_id[128];
	snprintf(last_id, sizeof last_id, "%s", f->last_event_id ? f->last_event_id : "");
	long delay = FIRST_DELAY_MS, max_delay = f->max_backoff_ms > 0 ? f->max_backoff_ms : 5000;
	int64_t deadline = sbxc__deadline(h, c, true);
	struct sbxc_call call = c ? *c : (struct sbxc_call){0};
	for (int fails = 0;;) {
		call.timeout_ms = deadline == INT64_MAX ? -1 : deadline - sbxc__now_ms();
		if (call.timeout_ms == 0 || call.timeout_ms < -1)
			return sbxc__fail(err, -ETIMEDOUT, "the follow's deadline passed");
		long retry_after = -1;
		int rc = connect_once(h, &call, &w, last_id, sizeof last_id, &retry_after, err);
		if (rc == 1 || w.ended || (rc == 0 && err->status == 204))
			return 0;
		if (rc < 0 && !transient(rc, err))
			return rc;
		if (w.delivered > 0) {
			delay = FIRST_DELAY_MS;
			fails = 0;
		} else if (f->max_reconnects > 0 && ++fails > f->max_reconnects) {
			return rc < 0 ? rc : sbxc__fail(err, -EIO, "the stream keeps ending without events");
		}
		long wait = retry_after >= 0 ? retry_after * 1000 : delay;
		delay = delay * 2 > max_delay ? max_delay : delay * 2;
		if (sbxc__sleep(c, wait > max_delay ? max_delay : wait) < 0)
			return sbxc__fail(err, -ECANCELED, "cancelled");
	}
}
