#include "sandbox/collector.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/utf8.h"
#include "common/xmalloc.h"
#include "sandbox/fsops.h"
#include "sandbox/workspace.h"

struct sbx_collector {
	size_t max;
	size_t spill_at; /* the spill file opens when output passes this */
	size_t head_max; /* floor(40 % of max) */
	size_t tail_max; /* the rest: the ring's capacity */
	char *head;	 /* head_max bytes, allocated on first feed */
	size_t head_len;
	char *ring;	   /* tail_max bytes, allocated once the head is full */
	size_t ring_start; /* index of the oldest byte */
	size_t ring_len;
	uint64_t total;

	struct sbx_workspace *ws;
	char *spill_rel;
	char *spill_wire; /* set once the spill file is open */
	uint64_t spill_cap;
	uint64_t spill_written;
	struct sbx_upload *spill; /* published: written through its fd */
	int spill_err;		  /* first spill error (negative errno), 0 if none */
	bool spill_tried;
};

int sbx_collector_new(struct sbx_collector **out, size_t max, struct sbx_workspace *ws, const char *spill_rel,
		      uint64_t spill_cap)
{
	struct sbx_collector *c;

	if (!out)
		return -EINVAL;
	c = xcalloc(1, sizeof(*c));
	c->max = max;
	/* floor(max * 0.4) without floating point or overflow */
	c->head_max = max / 5 * 2 + (max % 5) * 2 / 5;
	c->tail_max = max - c->head_max;
	c->spill_at = max < SBX_COLLECTOR_ROW_WINDOW ? max : SBX_COLLECTOR_ROW_WINDOW;
	c->ws = ws;
	c->spill_rel = (ws && spill_rel && spill_cap > 0) ? xstrdup(spill_rel) : NULL;
	c->spill_cap = spill_cap;
	*out = c;
	return 0;
}

/* Tee bytes to the spill file, up to the cap; the first error stops it. */
static void spill_write(struct sbx_collector *c, const char *p, size_t n)
{
	int rc;

	if (!c->spill || c->spill_err)
		return;
	if (c->spill_written >= c->spill_cap)
		return;
	if (n > c->spill_cap - c->spill_written)
		n = (size_t)(c->spill_cap - c->spill_written);
	rc = sbx_upload_write(c->spill, p, n);
	if (rc) {
		c->spill_err = rc;
		return;
	}
	c->spill_written += n;
}

/* The spill file is made like an upload (a fresh temp file, created
 * exclusively beside the target) and renamed into place at once: the
 * runner thread never opens a name a command controls, so a FIFO, socket
 * or link planted at the spill path is replaced, never opened. */
static int spill_open(struct sbx_collector *c)
{
	int rc;

	rc = sbx_upload_begin(&c->spill, c->ws, c->spill_rel, true);
	if (rc == 0)
		rc = sbx_upload_publish(c->spill);
	if (rc) {
		sbx_upload_abort(&c->spill);
		return rc;
	}
	c->spill_wire = xasprintf("/workspace/%s", c->spill_rel);
	return 0;
}

/* Output passes spill_at (at most the window) for the first time:
 * nothing has been dropped yet, so head + ring is the whole stream so far. */
static void spill_start(struct sbx_collector *c)
{
	size_t first;

	c->spill_tried = true;
	if (!c->spill_rel)
		return;
	c->spill_err = spill_open(c);
	if (c->spill_err)
		return;
	spill_write(c, c->head, c->head_len);
	/* the ring has not wrapped yet */
	first = c->ring_len;
	if (first > 0)
		spill_write(c, c->ring + c->ring_start, first);
}

static void ring_push(struct sbx_collector *c, const char *p, size_t n)
{
	size_t cap = c->tail_max, pos, first;

	if (cap == 0 || n == 0)
		return;
	if (!c->ring)
		c->ring = xmalloc(cap);
	if (n >= cap) {
		memcpy(c->ring, p + (n - cap), cap);
		c->ring_start = 0;
		c->ring_len = cap;
		return;
	}
	pos = (c->ring_start + c->ring_len) % cap;
	first = cap - pos < n ? cap - pos : n;
	memcpy(c->ring + pos, p, first);
	memcpy(c->ring, p + first, n - first);
	if (c->ring_len + n <= cap) {
		c->ring_len += n;
	} else {
		c->ring_start = (c->ring_start + c->ring_len + n) % cap;
		c->ring_len = cap;
	}
}

int sbx_collector_feed(struct sbx_collector *c, const void *p, size_t n)
{
	const char *b = p;

	if (!c || n == 0)
		return 0;
	if (!c->spill_tried && c->total + n > c->spill_at)
		spill_start(c);
	if (c->spill_tried)
		spill_write(c, b, n);
	c->total += n;
	if (c->head_len < c->head_max) {
		size_t take = c->head_max - c->head_len;

		if (take > n)
			take = n;
		if (!c->head)
			c->head = xmalloc(c->head_max);
		memcpy(c->head + c->head_len, b, take);
		c->head_len += take;
		b += take;
		n -= take;
	}
	ring_push(c, b, n);
	return 0;
}

uint64_t sbx_collector_total(const struct sbx_collector *c)
{
	return c ? c->total : 0;
}

bool sbx_collector_truncated(const struct sbx_collector *c)
{
	return c && c->total > c->max;
}

const char *sbx_collector_spill_path(const struct sbx_collector *c)
{
	return c ? c->spill_wire : NULL;
}

bool sbx_collector_spill_whole(const struct sbx_collector *c)
{
	return c && c->spill_wire && !c->spill_err && c->spill_written == c->total;
}

/* Copy the last k bytes of what the window keeps, in stream order, into
 * dst; returns how many. When nothing was dropped that is head + ring. */
static size_t copy_last(const struct sbx_collector *c, char *dst, size_t k)
{
	size_t have = c->ring_len, n = 0, skip, first;

	if (!sbx_collector_truncated(c))
		have += c->head_len;
	if (k > have)
		k = have;
	skip = have - k;
	if (!sbx_collector_truncated(c)) {
		if (skip < c->head_len) {
			n = c->head_len - skip;
			memcpy(dst, c->head + skip, n);
			skip = 0;
		} else {
			skip -= c->head_len;
		}
	}
	/* ring bytes from logical offset skip */
	while (n < k) {
		size_t pos = (c->ring_start + skip) % c->tail_max;

		first = c->tail_max - pos;
		if (first > k - n)
			first = k - n;
		memcpy(dst + n, c->ring + pos, first);
		n += first;
		skip += first;
	}
	return n;
}

void sbx_collector_tail(const struct sbx_collector *c, char *out, size_t max)
{
	char *buf = NULL, *clean = NULL;
	size_t want, n, end, start, clen, from;

	if (!out || max == 0)
		return;
	out[0] = '\0';
	if (!c || max == 1)
		return;
	/* the line's last max-1 bytes, its '\n', a few bytes to find a
	 * character start, and one to see the preceding '\n' */
	want = (max - 1) + 1 + 4 + 1;
	buf = xmalloc(want);
	n = copy_last(c, buf, want);
	end = n;
	if (end > 0 && buf[end - 1] == '\n')
		end--;
	start = end;
	while (start > 0 && buf[start - 1] != '\n')
		start--;
	if (start == 0 && n < c->total)
		start = utf8_cut_start(buf, end); /* the line began before what we copied */
	clean = utf8_sanitize(buf + start, end - start, &clen);
	from = 0;
	if (clen > max - 1) {
		from = clen - (max - 1);
		from += utf8_cut_start(clean + from, clen - from);
	}
	memcpy(out, clean + from, clen - from);
	out[clen - from] = '\0';
	free(clean);
	free(buf);
}

void sbx_collector_finish(struct sbx_collector *c, char **text, size_t *len)
{
	char *head = NULL, *tail = NULL, *marker = NULL, *res;
	size_t hl, tl, ml, hcut, tstart, omitted;

	sbx_upload_abort(&c->spill); /* published: only closes */
	if (!sbx_collector_truncated(c)) {
		char *all = xmalloc(c->total + 1);
		size_t n = copy_last(c, all, c->total);

		*text = utf8_sanitize(all, n, len);
		free(all);
		return;
	}
	hcut = utf8_cut_end(c->head, c->head_len);
	head = utf8_sanitize(c->head, hcut, &hl);
	{
		char *raw = xmalloc(c->ring_len + 1);
		size_t rn = copy_last(c, raw, c->ring_len);

		tstart = utf8_cut_start(raw, rn);
		tail = utf8_sanitize(raw + tstart, rn - tstart, &tl);
		free(raw);
	}
	omitted = (size_t)(c->total - hcut - (c->ring_len - tstart));
	if (c->spill_wire && c->spill_written == c->total)
		marker = xasprintf("\n[... sandboxd: %zu bytes omitted; full output in %s ...]\n", omitted,
				   c->spill_wire);
	else if (c->spill_wire)
		marker =
		    xasprintf("\n[... sandboxd: %zu bytes omitted; first %llu bytes of output in %s ...]\n",
			      omitted, (unsigned long long)c->spill_written, c->spill_wire);
	else
		marker =
		    xasprintf("\n[... sandboxd: %zu bytes omitted; full output not kept ...]\n", omitted);
	ml = strlen(marker);
	res = xmalloc(hl + ml + tl + 1);
	memcpy(res, head, hl);
	memcpy(res + hl, marker, ml);
	memcpy(res + hl + ml, tail, tl);
	res[hl + ml + tl] = '\0';
	*text = res;
	*len = hl + ml + tl;
	free(head);
	free(tail);
	free(marker);
}

void sbx_collector_free(struct sbx_collector **pc)
{
	struct sbx_collector *c;

	if (!pc || !*pc)
		return;
	c = *pc;
	sbx_upload_abort(&c->spill);
	free(c->head);
	free(c->ring);
	free(c->spill_rel);
	free(c->spill_wire);
	free(c);
	*pc = NULL;
}

/* Feed n bytes of fd from offset off into c. */
static int replay_feed(struct sbx_collector *c, int fd, uint64_t off, uint64_t n)
{
	char buf[65536];

	while (n > 0) {
		size_t want = n < sizeof buf ? (size_t)n : sizeof buf;
		ssize_t got = pread(fd, buf, want, (off_t)off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -EIO;
		sbx_collector_feed(c, buf, (size_t)got);
		off += (uint64_t)got;
		n -= (uint64_t)got;
	}
	return 0;
}

int sbx_collector_replay(int fd, size_t max, uint64_t total, const char *spill_wire, char **text, size_t *len)
{
	struct sbx_collector *c = NULL;
	struct stat st;
	int rc;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != total)
		return -EBADF;
	sbx_collector_new(&c, max, NULL, NULL, 0);
	c->spill_tried = true; /* replaying: nothing is teed again */
	if (total <= max) {
		rc = replay_feed(c, fd, 0, total);
	} else {
		/* the head, then only the bytes the ring would keep */
		rc = replay_feed(c, fd, 0, c->head_max);
		c->total += total - c->head_max - c->tail_max;
		if (rc == 0)
			rc = replay_feed(c, fd, total - c->tail_max, c->tail_max);
	}
	if (rc == 0) {
		c->spill_wire = xstrdup(spill_wire);
		c->spill_written = total;
		sbx_collector_finish(c, text, len);
	}
	sbx_collector_free(&c);
	return rc;
}

void sbx_window_cut(const char *text, size_t len, size_t window, const char *spill_wire, char **out,
		    size_t *outlen)
{
	if (len <= window) {
		*out = xstrndup(text, len);
		*outlen = len;
		return;
	}
	size_t head = utf8_cut_end(text, window / 5 * 2);
	size_t tail_from = len - (window - window / 5 * 2);
	tail_from += utf8_cut_start(text + tail_from, len - tail_from);
	char *marker =
	    xasprintf("\n[... sandboxd: %zu bytes of this result omitted here; the whole result is "
		      "rebuilt from %s ...]\n",
		      tail_from - head, spill_wire);
	size_t ml = strlen(marker), tl = len - tail_from;
	char *res = xmalloc(head + ml + tl + 1);
	memcpy(res, text, head);
	memcpy(res + head, marker, ml);
	memcpy(res + head + ml, text + tail_from, tl);
	res[head + ml + tl] = '\0';
	free(marker);
	*out = res;
	*outlen = head + ml + tl;
}
