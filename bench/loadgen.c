/* loadgen: a small HTTP/1.1 load generator for the sandboxd benchmarks,
 * for the cases wrk does not fit (POST /exec bodies with per-request
 * latency percentiles, a thousand SSE watchers, requests held in flight).
 * Raw sockets on 127.0.0.1, blocking I/O in one thread per client for
 * request/response modes, one epoll loop for SSE watchers.
 *
 *   loadgen req     -p PORT [-a AUTH] [-m METHOD] [-u PATH] [-b BODY]
 *                   -c CLIENTS (-n REQS_PER_CLIENT | -d SECONDS) [-w WARMUP]
 *       keep-alive request loop; prints one line of key=value figures:
 *       ok (2xx) r429 other err secs rps p50_ms p90_ms p99_ms max_ms
 *       (latencies of 2xx answers only; a 429 is retried at once, or
 *       after -R MS milliseconds). -t MS: each client pauses MS after
 *       every answer (think time: a warm pool refills meanwhile).
 *   loadgen sse     -p PORT -a AUTH -i ID[,ID...] -c WATCHERS -d SECONDS [-r READYFILE]
 *       opens WATCHERS GET /exec/{id}/events streams (ids round robin),
 *       writes "connected=N" to READYFILE once every stream answered,
 *       and at the end prints connected, events, heartbeats, bytes.
 *   loadgen hold    -p PORT -a AUTH -i ID[,ID...] -b COMMAND -d SECONDS
 *       POSTs one /exec per id and keeps each connection open (closing it
 *       would cancel the command) until SECONDS pass or SIGTERM.
 *   loadgen ballast -p PORT -a AUTH -c CONNS -s BYTES -d SECONDS [-r READYFILE]
 *       opens CONNS buffered PUT /fs/write?path=ballast-K uploads of BYTES,
 *       sends all but the last byte and holds them in flight.
 *
 * AUTH is the whole header value ("Bearer eyJ..."). Every mode is bounded
 * by -n or -d, and SIGTERM/SIGINT end it early with the figures so far. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop_flag;
static int port = 8080;
static const char *auth;
static const char *method = "POST";
static const char *upath = "/exec";
static const char *body = "{\"command\":\"true\"}";
static int clients = 1;
static long nreq = 0;
static double dur = 0;
static long warmup = 0;
static const char *ids;
static const char *readyfile;
static long long bsize = 16 << 20;
static int backoff_ms;
static int think_ms; /* -t: each client's pause after every answer (an agent's think time) */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_sig(int s)
{
	(void)s;
	stop_flag = 1;
}

static int dial(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int one = 1, fd;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* ---- one keep-alive connection reading whole responses ---- */

struct conn {
	int fd;
	char *buf;
	size_t cap, len, off; /* unread data is buf[off..len) */
};

static int fill(struct conn *c)
{
	ssize_t r;
	if (c->off == c->len)
		c->off = c->len = 0;
	if (c->len == c->cap) {
		if (c->off) {
			memmove(c->buf, c->buf + c->off, c->len - c->off);
			c->len -= c->off;
			c->off = 0;
		} else {
			c->cap *= 2;
			c->buf = realloc(c->buf, c->cap);
		}
	}
	do
		r = read(c->fd, c->buf + c->len, c->cap - c->len);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		return -1;
	c->len += (size_t)r;
	return 0;
}

/* Find the end of a line starting at off; returns index after "\r\n" or 0. */
static size_t line_end(struct conn *c, size_t from)
{
	for (size_t i = from; i + 1 < c->len; i++)
		if (c->buf[i] == '\r' && c->buf[i + 1] == '\n')
			return i + 2;
	return 0;
}

/* Skip n body bytes. */
static int skip(struct conn *c, long long n)
{
	while (n > 0) {
		size_t have = c->len - c->off;
		if (!have) {
			if (fill(c) < 0)
				return -1;
			continue;
		}
		size_t k = have < (unsigned long long)n ? have : (size_t)n;
		c->off += k;
		n -= (long long)k;
	}
	return 0;
}

/* Read one response; returns the status, or -1 on a broken connection.
 * *closing is set when the server announced Connection: close. */
static int read_response(struct conn *c, int *closing)
{
	size_t hend, p;
	int status = 0, chunked = 0;
	long long clen = -1;

	*closing = 0;
	for (;;) {
		char *e = memmem(c->buf + c->off, c->len - c->off, "\r\n\r\n", 4);
		if (e) {
			hend = (size_t)(e - c->buf) + 4;
			break;
		}
		if (fill(c) < 0)
			return -1;
	}
	if (sscanf(c->buf + c->off, "HTTP/1.%*d %d", &status) != 1)
		return -1;
	for (p = c->off; p < hend;) {
		size_t le = line_end(c, p);
		if (!le)
			break;
		char *l = c->buf + p;
		if (strncasecmp(l, "content-length:", 15) == 0) {
			char *end;
			errno = 0;
			clen = strtoll(l + 15, &end, 10);
			if (errno || end == l + 15 || clen < 0)
				return -1;
		} else if (strncasecmp(l, "transfer-encoding:", 18) == 0 && memmem(l, le - p, "chunked", 7))
			chunked = 1;
		else if (strncasecmp(l, "connection:", 11) == 0 && memmem(l, le - p, "close", 5))
			*closing = 1;
		p = le;
	}
	c->off = hend;
	if (status == 100)
		return read_response(c, closing);
	if (chunked) {
		for (;;) {
			size_t le;
			while (!(le = line_end(c, c->off)))
				if (fill(c) < 0)
					return -1;
			long long n = strtoll(c->buf + c->off, NULL, 16);
			c->off = le;
			if (n == 0) { /* trailers end with an empty line */
				for (;;) {
					while (!(le = line_end(c, c->off)))
						if (fill(c) < 0)
							return -1;
					int empty = le == c->off + 2;
					c->off = le;
					if (empty)
						return status;
				}
			}
			if (skip(c, n + 2) < 0)
				return -1;
		}
	}
	if (clen >= 0)
		return skip(c, clen) < 0 ? -1 : status;
	/* no length: read to close */
	while (fill(c) == 0)
		c->off = c->len;
	*closing = 1;
	return status;
}

/* ---- req mode ---- */

struct worker {
	pthread_t th;
	double *lat;
	size_t nlat, caplat;
	long ok, r429, other, err;
};

static char *request_text;
static size_t request_len;
static double deadline;

static void *req_worker(void *arg)
{
	struct worker *w = arg;
	struct conn c = {.fd = -1, .cap = 65536};
	long i = 0;

	c.buf = malloc(c.cap);
	for (;;) {
		if (stop_flag)
			break;
		if (nreq && i >= nreq + warmup)
			break;
		if (dur > 0 && now() >= deadline)
			break;
		if (c.fd < 0) {
			c.fd = dial();
			c.off = c.len = 0;
			if (c.fd < 0) {
				w->err++;
				usleep(1000);
				if (w->err > 100000)
					break;
				continue;
			}
		}
		double t0 = now();
		int closing = 0, st = -1;
		if (write_all(c.fd, request_text, request_len) == 0)
			st = read_response(&c, &closing);
		double t1 = now();
		if (think_ms)
			usleep((useconds_t)think_ms * 1000);
		if (st < 0 || closing) {
			close(c.fd);
			c.fd = -1;
		}
		if (st < 0) {
			w->err++;
			continue;
		}
		i++;
		if (i <= warmup)
			continue;
		if (st >= 200 && st < 300) {
			w->ok++;
			if (w->nlat == w->caplat) {
				w->caplat = w->caplat ? w->caplat * 2 : 4096;
				w->lat = realloc(w->lat, w->caplat * sizeof(double));
			}
			w->lat[w->nlat++] = (t1 - t0) * 1000.0;
		} else if (st == 429) {
			w->r429++;
			if (backoff_ms)
				usleep((useconds_t)backoff_ms * 1000);
		} else
			w->other++;
	}
	if (c.fd >= 0)
		close(c.fd);
	free(c.buf);
	return NULL;
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
	if (!n)
		return 0;
	size_t k = (size_t)(p * (double)(n - 1) + 0.5);
	return v[k];
}

#define REQUEST_FMT "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s%sContent-Type: application/json\r\n%s\r\n%s"

static int mode_req(void)
{
	struct worker *ws = calloc((size_t)clients, sizeof(*ws));
	size_t blen = strlen(body);
	int has_body = strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0;

	/* Formatted twice, the first time only to size it: the method and
	 * path come from the command line and have no bound of their own. */
	char clen[48] = "";
	if (has_body)
		snprintf(clen, sizeof clen, "Content-Length: %zu\r\n", blen);
	const char *ah = auth ? "Authorization: " : "", *av = auth ? auth : "", *ae = auth ? "\r\n" : "";
	const char *b = has_body ? body : "";
	int n0 = snprintf(NULL, 0, REQUEST_FMT, method, upath, ah, av, ae, clen, b);
	request_text = n0 < 0 ? NULL : malloc((size_t)n0 + 1);
	if (!request_text) {
		perror("loadgen");
		exit(1);
	}
	snprintf(request_text, (size_t)n0 + 1, REQUEST_FMT, method, upath, ah, av, ae, clen, b);
	request_len = (size_t)n0;

	double t0 = now();
	deadline = t0 + dur;
	for (int i = 0; i < clients; i++)
		pthread_create(&ws[i].th, NULL, req_worker, &ws[i]);
	long ok = 0, r429 = 0, other = 0, err = 0;
	size_t n = 0;
	for (int i = 0; i < clients; i++) {
		pthread_join(ws[i].th, NULL);
		ok += ws[i].ok, r429 += ws[i].r429, other += ws[i].other, err += ws[i].err;
		n += ws[i].nlat;
	}
	double secs = now() - t0;
	double *all = malloc((n ? n : 1) * sizeof(double));
	size_t k = 0;
	for (int i = 0; i < clients; i++) {
		memcpy(all + k, ws[i].lat, ws[i].nlat * sizeof(double));
		k += ws[i].nlat;
		free(ws[i].lat);
	}
	qsort(all, n, sizeof(double), cmpd);
	printf("ok=%ld r429=%ld other=%ld err=%ld secs=%.3f rps=%.1f p50_ms=%.3f p90_ms=%.3f "
	       "p99_ms=%.3f max_ms=%.3f\n",
	       ok, r429, other, err, secs, ok / secs, pct(all, n, 0.5), pct(all, n, 0.9), pct(all, n, 0.99),
	       n ? all[n - 1] : 0.0);
	free(all);
	free(ws);
	return ok > 0 ? 0 : 1;
}

/* ---- sse mode ---- */

struct sse {
	int fd;
	int state; /* 0 sent, 1 headers seen, 2 closed */
	int status;
	char line[4096];
	size_t ll;
	int overflow;
};

static char **split_ids(int *n)
{
	char *s = strdup(ids), *comma;
	char **v = NULL;
	*n = 0;
	if (!s)
		return NULL;
	/* Comma-separated, empty fields skipped; the ids point into s. */
	for (char *t = s; t; t = comma ? comma + 1 : NULL) {
		comma = strchr(t, ',');
		if (comma)
			*comma = '\0';
		if (!*t)
			continue;
		char **grown = realloc(v, sizeof(*v) * (size_t)(*n + 1));
		if (!grown) {
			perror("loadgen");
			exit(1);
		}
		v = grown;
		v[(*n)++] = t;
	}
	return v;
}

static void write_ready(const char *what, long n)
{
	if (!readyfile)
		return;
	FILE *f = fopen(readyfile, "w");
	if (f) {
		fprintf(f, "%s=%ld\n", what, n);
		fclose(f);
	}
}

struct sse_counts {
	long connected, events, heartbeats, closed, failed;
	long long bytes;
};

/* Connect watcher i and send its request; state 2 when that failed. */
static void sse_dial(struct sse *s, int ep, uint32_t i, const char *id, struct sse_counts *n)
{
	char req[8192];
	int fd = -1;
	for (int tries = 0; tries < 50 && fd < 0; tries++) {
		fd = dial();
		if (fd < 0)
			usleep(20000);
	}
	s->fd = fd;
	if (fd < 0) {
		n->failed++;
		s->state = 2;
		return;
	}
	int len = snprintf(req, sizeof(req),
			   "GET /exec/%s/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\n"
			   "Accept: text/event-stream\r\n\r\n",
			   id, auth);
	if (write_all(fd, req, (size_t)len) < 0) {
		n->failed++;
		close(fd);
		s->state = 2;
		return;
	}
	fcntl(fd, F_SETFL, O_NONBLOCK);
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
	epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

/* One complete line of watcher s: the status line, then event names. */
static void sse_line(struct sse *s, struct sse_counts *n)
{
	s->line[s->ll] = '\0';
	if (s->ll && s->line[s->ll - 1] == '\r')
		s->line[--s->ll] = '\0';
	if (s->state == 0) {
		if (strncmp(s->line, "HTTP/1.", 7) == 0) {
			s->status = s->ll > 9 ? (int)strtol(s->line + 9, NULL, 10) : 0;
			if (s->status == 200)
				n->connected++;
			else
				n->failed++;
		} else if (s->ll == 0) {
			s->state = 1;
		}
	} else if (!s->overflow && strncmp(s->line, "event:", 6) == 0) {
		n->events++;
		if (strstr(s->line, "heartbeat"))
			n->heartbeats++;
	}
	s->ll = 0;
	s->overflow = 0;
}

/* Read what watcher s has; close it at EOF. */
static void sse_drain(struct sse *s, int ep, struct sse_counts *n)
{
	char buf[65536];
	for (;;) {
		ssize_t r = read(s->fd, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		if (r <= 0) {
			epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
			close(s->fd);
			s->state = 2;
			n->closed++;
			return;
		}
		n->bytes += r;
		for (ssize_t j = 0; j < r; j++) {
			if (buf[j] == '\n') {
				sse_line(s, n);
			} else if (s->ll + 1 < sizeof(s->line)) {
				s->line[s->ll++] = buf[j];
			} else {
				s->overflow = 1;
			}
		}
	}
}

static int mode_sse(void)
{
	int nid = 0;
	char **idv = split_ids(&nid);
	if (!nid)
		return 2;
	struct sse *ss = calloc((size_t)clients, sizeof(*ss));
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct sse_counts n = {0};
	int ready_written = 0;
	double t0 = now(), end = t0 + dur, ready_deadline = t0 + 30;

	for (int i = 0; i < clients && !stop_flag; i++) {
		sse_dial(&ss[i], ep, (uint32_t)i, idv[i % nid], &n);
		if (i % 100 == 99)
			usleep(5000); /* do not overrun the listen backlog */
	}
	while (!stop_flag) {
		double t = now();
		if (t >= end)
			break;
		if (!ready_written && (n.connected + n.failed + n.closed >= clients || t >= ready_deadline)) {
			write_ready("connected", n.connected);
			ready_written = 1;
		}
		struct epoll_event evs[256];
		int k = epoll_wait(ep, evs, 256, 100);
		for (int e = 0; e < k; e++)
			sse_drain(&ss[evs[e].data.u32], ep, &n);
	}
	if (!ready_written)
		write_ready("connected", n.connected);
	printf("watchers=%d connected=%ld failed=%ld closed_early=%ld events=%ld heartbeats=%ld bytes=%lld "
	       "secs=%.3f\n",
	       clients, n.connected, n.failed, n.closed, n.events, n.heartbeats, n.bytes, now() - t0);
	for (int i = 0; i < clients; i++)
		if (ss[i].state != 2 && ss[i].fd >= 0)
			close(ss[i].fd);
	return n.connected ? 0 : 1;
}

/* ---- hold mode ---- */

static int mode_hold(void)
{
	int nid = 0;
	char **idv = split_ids(&nid);
	int *fds = calloc((size_t)nid, sizeof(int));
	double end = now() + dur;
	int held = 0;

	for (int i = 0; i < nid; i++) {
		char req[8192], js[4096];
		int jl = snprintf(js, sizeof(js), "{\"command\":\"%s\",\"id\":\"%s\",\"timeout_s\":%d}", body,
				  idv[i], (int)dur + 60);
		int len = snprintf(req, sizeof(req),
				   "POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\n"
				   "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				   auth, jl, js);
		fds[i] = dial();
		if (fds[i] >= 0 && write_all(fds[i], req, (size_t)len) == 0)
			held++;
	}
	write_ready("held", held);
	while (!stop_flag && now() < end)
		usleep(50000);
	for (int i = 0; i < nid; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	printf("held=%d\n", held);
	return held == nid ? 0 : 1;
}

/* ---- ballast mode ---- */

static int mode_ballast(void)
{
	int *fds = calloc((size_t)clients, sizeof(int));
	size_t chunk = 1 << 20;
	char *zeros = malloc(chunk);
	double end = now() + dur;
	int held = 0;

	memset(zeros, 'b', chunk);
	for (int i = 0; i < clients && !stop_flag; i++) {
		char req[8192];
		int len = snprintf(
		    req, sizeof(req),
		    "PUT /fs/write?path=ballast-%d HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\n"
		    "Content-Length: %lld\r\n\r\n",
		    i, auth, bsize);
		fds[i] = dial();
		if (fds[i] < 0 || write_all(fds[i], req, (size_t)len) < 0)
			continue;
		long long left = bsize - 1;
		int ok = 1;
		while (left > 0 && ok) {
			size_t k = left < (long long)chunk ? (size_t)left : chunk;
			ok = write_all(fds[i], zeros, k) == 0;
			left -= (long long)k;
		}
		held += ok;
	}
	write_ready("held", held);
	while (!stop_flag && now() < end)
		usleep(50000);
	for (int i = 0; i < clients; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	printf("ballast_held=%d bytes_each=%lld\n", held, bsize - 1);
	return held ? 0 : 1;
}

static void usage(void)
{
	fprintf(
	    stderr,
	    "usage: loadgen req|sse|hold|ballast -p PORT [-a AUTH] [-m METHOD] [-u PATH] [-b BODY]\n"
	    "       [-c N] [-n N] [-d SECONDS] [-w N] [-i IDS] [-r READYFILE] [-s BYTES] [-R MS] [-t MS]\n");
	exit(2);
}

/* An option's value: a whole number within [lo, hi], or the usage text. */
static long long opt_int(const char *s, long long lo, long long hi)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		usage();
	return v;
}

static double opt_double(const char *s)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end)
		usage();
	return v;
}

/* The options after the mode (argv[2...]) into the globals above. */
static void parse_opts(int argc, char **argv)
{
	int o;

	optind = 2;
	while ((o = getopt(argc, argv, "p:a:m:u:b:c:n:d:w:i:r:s:R:t:")) != -1) {
		switch (o) {
		case 'p':
			port = (int)opt_int(optarg, 1, 65535);
			break;
		case 'a':
			auth = optarg;
			break;
		case 'm':
			method = optarg;
			break;
		case 'u':
			upath = optarg;
			break;
		case 'b':
			body = optarg;
			break;
		case 'c':
			clients = (int)opt_int(optarg, 1, INT_MAX);
			break;
		case 'n':
			nreq = (long)opt_int(optarg, 0, LONG_MAX);
			break;
		case 'd':
			dur = opt_double(optarg);
			break;
		case 'w':
			warmup = (long)opt_int(optarg, 0, LONG_MAX);
			break;
		case 'i':
			ids = optarg;
			break;
		case 'r':
			readyfile = optarg;
			break;
		case 's':
			bsize = opt_int(optarg, 1, LLONG_MAX);
			break;
		case 'R':
			backoff_ms = (int)opt_int(optarg, 0, INT_MAX);
			break;
		case 't':
			think_ms = (int)opt_int(optarg, 0, 60000);
			break;
		default:
			usage();
		}
	}
}

/* SIGPIPE ignored, SIGTERM/SIGINT stop the run, and as many descriptors
 * as the hard limit allows. */
static void prepare_process(void)
{
	struct rlimit rl;
	struct sigaction sa = {.sa_handler = on_sig};

	signal(SIGPIPE, SIG_IGN);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int main(int argc, char **argv)
{
	const char *mode;

	if (argc < 2)
		usage();
	mode = argv[1];
	parse_opts(argc, argv);
	if (clients < 1 || (!nreq && dur <= 0) || dur > 3600)
		usage();
	prepare_process();
	if (strcmp(mode, "req") == 0)
		return mode_req();
	if (!auth)
		usage();
	if (strcmp(mode, "sse") == 0)
		return ids ? mode_sse() : 2;
	if (strcmp(mode, "hold") == 0)
		return ids ? mode_hold() : 2;
	if (strcmp(mode, "ballast") == 0)
		return mode_ballast();
	usage();
	return 2;
}
