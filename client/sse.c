/* Server-sent events, parsed incrementally: an event is dispatched (and
 * its id becomes the one to resume after) only when its blank line
 * arrives, so a connection cut mid-event loses nothing: the event comes
 * again after Last-Event-ID. */
#include "client/internal.h"

#include <stdio.h>
#include <string.h>

void sse_init(struct sse *s, sbxc_event_fn fn, void *arg, size_t max_event)
{
	*s = (struct sse){.on_event = fn, .arg = arg};
	buf_init(&s->line, max_event);
	buf_init(&s->data, max_event);
}

void sse_free(struct sse *s)
{
	buf_free(&s->line);
	buf_free(&s->data);
}

static int dispatch(struct sse *s)
{
	int r = 0;
	if (s->data.len > 0) {
		/* the data lines were joined with a trailing '\n' each: drop the last */
		s->data.len--;
		struct sbxc_event ev = {.id = s->has_id ? s->id : NULL,
					.name = s->name[0] ? s->name : "message",
					.data = buf_cstr(&s->data),
					.data_len = s->data.len};
		if (s->on_event(s->arg, &ev) != 0) {
			s->stopped = 1;
			r = 1;
		}
	}
	if (s->has_id)
		snprintf(s->last_id, sizeof s->last_id, "%s", s->id);
	buf_reset(&s->data);
	s->name[0] = '\0';
	s->has_id = false;
	return r;
}

static int field(struct sse *s, const char *line, size_t len)
{
	if (len == 0)
		return dispatch(s);
	if (line[0] == ':')
		return 0; /* a comment: the server's keep-alive */
	const char *colon = memchr(line, ':', len);
	size_t nlen = colon ? (size_t)(colon - line) : len;
	const char *v = colon ? colon + 1 : line + len;
	if (colon && v < line + len && *v == ' ')
		v++;
	size_t vlen = (size_t)(line + len - v);
	if (nlen == 4 && memcmp(line, "data", 4) == 0) {
		if (buf_append(&s->data, v, vlen) < 0 || buf_append(&s->data, "\n", 1) < 0)
			return -1; /* an event larger than the bound: treat as a broken stream */
	} else if (nlen == 5 && memcmp(line, "event", 5) == 0) {
		snprintf(s->name, sizeof s->name, "%.*s", (int)vlen, v);
	} else if (nlen == 2 && memcmp(line, "id", 2) == 0 && !memchr(v, '\0', vlen)) {
		snprintf(s->id, sizeof s->id, "%.*s", (int)vlen, v);
		s->has_id = true;
	}
	return 0;
}

int sse_feed(void *arg, const void *p, size_t n)
{
	struct sse *s = arg;
	const char *c = p, *end = c + n;
	while (c < end) {
		const char *nl = memchr(c, '\n', (size_t)(end - c));
		if (!nl)
			return buf_append(&s->line, c, (size_t)(end - c)) < 0 ? -1 : 0;
		if (buf_append(&s->line, c, (size_t)(nl - c)) < 0)
			return -1;
		size_t len = s->line.len;
		if (len > 0 && s->line.ptr[len - 1] == '\r')
			len--;
		int r = field(s, s->line.len ? s->line.ptr : "", len);
		buf_reset(&s->line);
		if (r != 0)
			return r; /* 1: the receiver stopped; -1: an event over the bound */
		c = nl + 1;
	}
	return 0;
}
