/* Both directions of an allowed connection, with splice(2) through a pipe
 * each (no copy through user space), level-triggered: every event of
 * either socket moves what can move, then says what to wait for. A pipe
 * is filled from its source while it has room and drained into its
 * destination while it holds data, both at once: a destination that is
 * full (the sandbox's reader behind) does not stop the source's reads
 * until the pipe is full too, so both sockets stay busy. A
 * direction ends at its source's EOF, which is passed on as
 * shutdown(SHUT_WR) of its destination (half-close); the connection ends
 * when both have, or at the first error of either socket.
 *
 * A plain HTTP connection's client side is read() and write() instead,
 * through sbx_egress_http_feed, so that every request on it is checked. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "sandbox/egress/gateway_int.h"

/* A pipe of 512 KiB per direction (the default 64 KiB moves a bulk
 * download at about half the speed of a direct one: bench/ P13); its
 * pages are taken only as data waits in it. */
#define SPLICE_MAX (512 * 1024)
#define HTTP_BUF 16384

struct dir {
	int src, dst;
	int pipe[2];   /* splice: read end, write end; -1 with copy */
	size_t cap;    /* the pipe's size; with copy, HTTP_BUF */
	size_t queued; /* in the pipe, or in buf[off..len) */
	uint8_t *buf;  /* copy (HTTP) */
	size_t off, len;
	bool eof, done; /* source ended; passed on and nothing queued */
	/* Worth a syscall: no EAGAIN since the side's last event (a read
	 * or write that would block costs as much as one that moves, and
	 * every event pumps both directions) */
	bool src_ready, dst_ready;
	uint64_t bytes; /* delivered to dst */
};

struct gw_relay {
	struct dir up, down;
	struct sbx_egress_http *http;
};

static int dir_init(struct dir *d, int src, int dst, bool copy)
{
	*d = (struct dir){.src = src, .dst = dst, .pipe = {-1, -1}, .src_ready = true, .dst_ready = true};
	if (copy) {
		d->buf = xmalloc(HTTP_BUF);
		d->cap = HTTP_BUF;
		return 0;
	}
	if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) < 0)
		return -1;
	/* best effort: the default works, slower */
	int sz = fcntl(d->pipe[1], F_SETPIPE_SZ, SPLICE_MAX);
	if (sz < 0)
		sz = fcntl(d->pipe[1], F_GETPIPE_SZ);
	d->cap = sz > 0 ? (size_t)sz : 65536;
	return 0;
}

static void dir_fini(struct dir *d)
{
	for (int i = 0; i < 2; i++)
		if (d->pipe[i] >= 0)
			close(d->pipe[i]);
	free(d->buf);
}

struct gw_relay *gw_relay_new(int cfd, int ufd, struct sbx_egress_http *http)
{
	struct gw_relay *r = xcalloc(1, sizeof(*r));
	r->http = http;
	if (dir_init(&r->up, cfd, ufd, http != NULL) < 0 || dir_init(&r->down, ufd, cfd, false) < 0) {
		gw_relay_free(&r);
		return NULL;
	}
	return r;
}

void gw_relay_free(struct gw_relay **rp)
{
	struct gw_relay *r = *rp;
	if (!r)
		return;
	dir_fini(&r->up);
	dir_fini(&r->down);
	sbx_egress_http_free(&r->http);
	free(r);
	*rp = NULL;
}

void gw_relay_bytes(const struct gw_relay *r, uint64_t *up, uint64_t *down)
{
	*up = r->up.bytes;
	*down = r->down.bytes;
}

static bool again(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

static int fail(const char *side, char *why, size_t whysz)
{
	snprintf(why, whysz, "%s: %s", side, strerror(errno));
	return -1;
}

/* Drain the pipe or buffer into dst. 0: empty now or dst is full; -1: dst failed. */
static int dir_flush(struct dir *d)
{
	while (d->queued) {
		ssize_t n = d->buf ? write(d->dst, d->buf + d->off, d->queued)
				   : splice(d->pipe[0], NULL, d->dst, NULL, d->queued,
					    SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0) {
			if (!again())
				return -1;
			d->dst_ready = false;
			return 0;
		}
		d->queued -= (size_t)n;
		d->off += (size_t)n;
		d->bytes += (uint64_t)n;
	}
	return 0;
}

/* Room to fill: the pipe's free part; the buffer only once it is empty
 * (its bytes are checked and written in order). */
static size_t dir_room(const struct dir *d)
{
	if (d->eof)
		return 0;
	if (d->buf)
		return d->queued ? 0 : HTTP_BUF;
	return d->cap - d->queued;
}

/* Fill from src into the room there is. >0: bytes queued; 0: EOF or src
 * is empty; -1: src failed (errno), -2: the HTTP check ended
 * it (why). */
static ssize_t dir_fill(struct dir *d, struct sbx_egress_http *http, char *why, size_t whysz)
{
	size_t room = dir_room(d);
	ssize_t n = d->buf ? read(d->src, d->buf, room)
			   : splice(d->src, NULL, d->pipe[1], NULL, room, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
	if (n < 0) {
		if (!again())
			return -1;
		d->src_ready = false;
		return 0;
	}
	if (n == 0) {
		d->eof = true;
		return 0;
	}
	if (http && sbx_egress_http_feed(http, d->buf, (size_t)n, why, whysz) < 0)
		return -2;
	if (d->buf)
		d->off = 0;
	d->queued += (size_t)n;
	return n;
}

/* Move what can move in one direction: fill while there is room and the
 * source gives, drain while the destination takes, until neither moves,
 * or for PUMP_ROUNDS rounds: the loop's other connections get their turn,
 * and level-triggered epoll brings this one back at once. */
#define PUMP_ROUNDS 16
static int dir_pump(struct dir *d, struct sbx_egress_http *http, const char *src_side, const char *dst_side,
		    char *why, size_t whysz)
{
	for (int round = 0; round < PUMP_ROUNDS && !d->done; round++) {
		size_t before = d->queued;
		if (d->dst_ready && dir_flush(d) < 0)
			return fail(dst_side, why, whysz);
		if (d->eof && !d->queued) {
			/* the source's EOF, passed on once all before it is */
			shutdown(d->dst, SHUT_WR);
			d->done = true;
			return 0;
		}
		bool had_room = dir_room(d) > 0, was_eof = d->eof;
		ssize_t n = had_room && d->src_ready ? dir_fill(d, http, why, whysz) : 0;
		if (n == -1)
			return fail(src_side, why, whysz);
		if (n < 0)
			return -1;
		if (n > 0 || d->eof != was_eof)
			continue; /* new data or a new EOF: drain it */
		if (!had_room && !d->eof && d->queued < before)
			continue; /* the drain made room the fill did not try */
		return 0;
	}
	return 0;
}

/* What d waits for: its destination writable while it holds data, its
 * source readable while it has room. */
static void dir_wants(const struct dir *d, uint32_t *src_ev, uint32_t *dst_ev)
{
	if (d->done)
		return;
	if (d->queued)
		*dst_ev |= EPOLLOUT;
	if (dir_room(d))
		*src_ev |= EPOLLIN;
}

/* What an event of fd makes worth trying: readable wakes the direction
 * it is the source of, writable the one it is the destination of; an
 * error or hangup both, so that the syscall reports it. */
static void mark_ready(struct gw_relay *r, int fd, uint32_t events)
{
	bool in = events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR);
	bool out = events & (EPOLLOUT | EPOLLHUP | EPOLLERR);
	struct dir *dirs[2] = {&r->up, &r->down};
	for (int i = 0; i < 2; i++) {
		if (fd < 0 || (in && dirs[i]->src == fd))
			dirs[i]->src_ready = true;
		if (fd < 0 || (out && dirs[i]->dst == fd))
			dirs[i]->dst_ready = true;
	}
}

int gw_relay_pump(struct gw_relay *r, int fd, uint32_t events, uint32_t *cev, uint32_t *uev, char *why,
		  size_t whysz)
{
	mark_ready(r, fd, events);
	if (dir_pump(&r->up, r->http, "sandbox", "destination", why, whysz) < 0 ||
	    dir_pump(&r->down, NULL, "destination", "sandbox", why, whysz) < 0)
		return -1;
	if (r->up.done && r->down.done)
		return 1;
	*cev = *uev = 0;
	dir_wants(&r->up, cev, uev);
	dir_wants(&r->down, uev, cev);
	return 0;
}
