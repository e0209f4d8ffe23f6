#include "http/daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth/auth.h"
#include "common/config.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/nowait.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/metrics.h"
#include "http/req_int.h"
#include "http/route.h"

struct http_daemon {
	struct MHD_Daemon *d;
	struct http_env *env;
	char *cert, *key;
	uint16_t port;
	atomic_bool quiesced; /* new connections are closed at once */
};

static char *read_file(const char *path, char *err, size_t errsz)
{
	struct buf b;
	buf_init(&b, 1u << 20);
	int rc = buf_read_file(&b, path);
	if (rc < 0) { /* a cut-off PEM would fail later with a vaguer message */
		snprintf(err, errsz, "%s: %s", path, rc == -E2BIG ? "larger than 1 MiB" : sbx_strerror(rc));
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b, NULL);
}

static int parse_listen(const char *listen, struct sockaddr_storage *ss, char *err, size_t errsz)
{
	char host[256];
	const char *colon = strrchr(listen, ':');
	if (!colon || colon == listen) {
		snprintf(err, errsz, "listen: expected HOST:PORT, got '%s'", listen);
		return -EINVAL;
	}
	size_t hl = (size_t)(colon - listen);
	if (listen[0] == '[' && hl >= 2 && listen[hl - 1] == ']') {
		listen++;
		hl -= 2;
	}
	if (hl >= sizeof host) {
		snprintf(err, errsz, "listen: host too long");
		return -EINVAL;
	}
	memcpy(host, listen, hl);
	host[hl] = '\0';
	char *end = NULL;
	long port = strtol(colon + 1, &end, 10);
	if (*end || port < 0 || port > 65535) {
		snprintf(err, errsz, "listen: bad port '%s'", colon + 1);
		return -EINVAL;
	}
	memset(ss, 0, sizeof *ss);
	struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof host, "127.0.0.1");
	if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)port);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)port);
		return 0;
	}
	snprintf(err, errsz, "listen: '%s' is not an IPv4 or IPv6 address", host);
	return -EINVAL;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void make_request_id(struct http_req_core *c)
{
	struct http_req *r = &c->req;
	const char *given = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "X-Request-Id");
	if (given) {
		/* Echo the client's id when it is sane (bounded, printable, no spaces). */
		size_t n = strlen(given);
		bool ok = n > 0 && n < sizeof r->request_id;
		for (size_t i = 0; ok && i < n; i++)
			ok = given[i] > 0x20 && given[i] < 0x7f;
		if (ok) {
			memcpy(r->request_id, given, n + 1);
			return;
		}
	}
	/* Ids must be unique, not secret: a per-thread splitmix64 sequence
	 * seeded once from the kernel saves a getrandom() per request. */
	static _Thread_local uint64_t state;
	static _Thread_local bool seeded;
	if (!seeded) {
		if (auth_random(&state, sizeof state) < 0)
			state = (uint64_t)mono_ns() ^ (uint64_t)(uintptr_t)&state;
		seeded = true;
	}
	/* 16 + 8 hex digits, spelled by hand: snprintf's format machinery
	 * was a visible share of a 4 KiB read's user time (bench/NOTES.md). */
	uint64_t a = splitmix64(&state), b = splitmix64(&state) >> 32;
	static const char hex[] = "0123456789abcdef";
	for (int i = 15; i >= 0; i--, a >>= 4)
		r->request_id[i] = hex[a & 15];
	for (int i = 23; i >= 16; i--, b >>= 4)
		r->request_id[i] = hex[b & 15];
	r->request_id[24] = '\0';
}

/* Dotted decimal of an IPv4 address into out (>= 16 bytes): glibc's
 * inet_ntop goes through sprintf for it, once per request. */
static void ipv4_text(const struct in_addr *a, char *out)
{
	const unsigned char *b = (const unsigned char *)&a->s_addr;
	char *o = out;
	for (int i = 0; i < 4; i++) {
		unsigned v = b[i];
		if (v >= 100)
			*o++ = (char)('0' + v / 100);
		if (v >= 10)
			*o++ = (char)('0' + v / 10 % 10);
		*o++ = (char)('0' + v % 10);
		*o++ = i < 3 ? '.' : '\0';
	}
}

static void client_address(struct http_req_core *c)
{
	struct http_req *r = &c->req;
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	r->client[0] = '\0';
	if (!ci || !ci->client_addr)
		return;
	const struct sockaddr *sa = ci->client_addr;
	if (sa->sa_family == AF_INET)
		ipv4_text(&((const struct sockaddr_in *)sa)->sin_addr, r->client);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, r->client,
			  sizeof r->client);
}

static enum MHD_Result fail(struct http_req *r, int code)
{
	if (r->status)
		return MHD_YES; /* a response is already queued */
	return http_render_error(r, code) == 0 ? MHD_YES : MHD_NO;
}

/* How much of a refused request body is read and dropped before giving up. */
#define SWALLOW_MAX (64ll << 20)
/* How much of a refused JSON body is kept for the audit's target. */
#define REFUSED_BODY_KEEP 4096

/* Event threads: a new connection, refused once quiesced. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t len)
{
	(void)addr;
	(void)len;
	struct http_daemon *h = cls;
	return atomic_load(&h->quiesced) ? MHD_NO : MHD_YES;
}

/* The first call for a request: its state made, then matched,
 * authenticated and authorised (http_begin); a refusal is answered now
 * or once its body is read. */
static enum MHD_Result request_start(struct http_daemon *h, struct MHD_Connection *conn, const char *url,
				     const char *method, void **con_cls)
{
	struct http_req_core *c = xcalloc(1, sizeof *c);
	struct http_req *r = &c->req;
	r->env = h->env;
	r->app = h->env->app;
	c->conn = conn;
	c->started_ns = mono_ns();
	r->at_ms = now_ms();
	/* The method is echoed into the log, the audit and a 405's
	 * message: printable ASCII only. */
	size_t ml = strnlen(method, sizeof r->method - 1);
	for (size_t i = 0; i < ml; i++)
		r->method[i] =
		    (unsigned char)method[i] <= 0x20 || (unsigned char)method[i] >= 0x7f ? '?' : method[i];
	r->method[ml] = '\0';
	r->url = xstrdup(url);
	buf_init(&r->body, (size_t)h->env->cfg->max_buffered_bytes);
	make_request_id(c);
	client_address(c);
	http_metrics_inflight(h->env->metrics, 1);
	*con_cls = r;
	int rc = http_begin(r);
	if (rc < 0) {
		c->pending_error = rc; /* answered once the body is read (or given up on) */
		/* A client waiting for "100 Continue" has sent no body yet:
		 * answer now, so a refused upload is never sent at all
		 * (libmicrohttpd then skips the 100 and the body). A request
		 * whose body length is ambiguous is answered now too: its
		 * body must never be read, as this request's or the next. */
		const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Expect");
		if (c->refuse_now || (expect && strcasecmp(expect, "100-continue") == 0))
			return fail(r, rc);
	}
	return MHD_YES;
}

/* Body bytes: to the route, or, for a refused request, counted and
 * dropped (the start of a JSON body kept for the audit). */
static enum MHD_Result request_upload(struct http_req_core *c, const char *upload_data, size_t n)
{
	struct http_req *r = &c->req;
	if (!c->pending_error) {
		int rc = http_body(r, upload_data, n);
		if (rc < 0)
			c->pending_error = rc;
	} else {
		r->bytes_in += (int64_t)n;
		/* The start of a refused JSON body stays for the audit: what
		 * was attempted (a command, a path) is worth a row. */
		if (r->route && (r->route->flags & RF_JSON) && r->body.len < REFUSED_BODY_KEEP)
			buf_append(&r->body, upload_data,
				   n < REFUSED_BODY_KEEP - r->body.len ? n : REFUSED_BODY_KEEP - r->body.len);
	}
	/* A refused body is read and dropped so the client sees the answer
	 * rather than a reset, up to a bound; past it, answer and close. */
	if (c->pending_error && r->bytes_in > SWALLOW_MAX)
		return fail(r, c->pending_error);
	return MHD_YES;
}

/* Resumed after http_suspend: the handler has something to say. */
static enum MHD_Result request_resumed(struct http_req_core *c)
{
	struct http_req *r = &c->req;
	c->suspended = false;
	if (!r->on_resume)
		return MHD_YES;
	int rc = r->on_resume(r);
	if (rc == 0 && r->hang_up)
		return MHD_NO;
	return rc < 0 ? fail(r, rc) : MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				  const char *version, const char *upload_data, size_t *upload_data_size,
				  void **con_cls)
{
	struct http_daemon *h = cls;
	struct http_req *r = *con_cls;
	nowait_event_thread(); /* once per thread: never the network here (common/nowait.h) */
	if (!r)
		return request_start(h, conn, url, method, con_cls);
	struct http_req_core *c = http_req_core_of(r);
	if (r->status) {
		/* Already answered: swallow what is left. */
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (c->suspended)
		return request_resumed(c);
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		return request_upload(c, upload_data, n);
	}
	if (r->ran) {
		/* Called again while a handler's response is pending (a resumed
		 * request without a new answer): nothing to do. */
		return MHD_YES;
	}
	if (c->pending_error)
		return fail(r, c->pending_error);
	int rc = http_run(r);
	if (rc < 0)
		return fail(r, rc);
	return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_daemon *h = cls;
	struct http_req *r = *con_cls;
	if (!r)
		return;
	*con_cls = NULL;
	http_metrics_inflight(h->env->metrics, -1);
	http_complete(r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
}

__attribute__((format(printf, 2, 0))) static void on_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	/* Messages may quote what a client sent: keep them printable ASCII
	 * (log_msg needs valid UTF-8). */
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)msg[i] < 0x20 || (unsigned char)msg[i] >= 0x7f)
			msg[i] = '?';
	log_msg("warn", "libmicrohttpd: %s", msg);
}

int http_daemon_start(struct http_daemon **out, struct http_env *env, char *err, size_t errsz)
{
	const struct sbx_config *cfg = env->cfg;
	struct sockaddr_storage ss;
	int rc = parse_listen(cfg->listen, &ss, err, errsz);
	if (rc < 0)
		return rc;
	struct http_daemon *h = xcalloc(1, sizeof *h);
	h->env = env;
	auth_cache_new(&env->auth_cache, cfg->audience);
	unsigned flags =
	    MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_ITC;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	if (cfg->tls_cert || cfg->tls_key) {
		if (!cfg->tls_cert || !cfg->tls_key) {
			snprintf(err, errsz, "TLS needs both --tls-cert and --tls-key");
			rc = -EINVAL;
			goto fail;
		}
		h->cert = read_file(cfg->tls_cert, err, errsz);
		h->key = h->cert ? read_file(cfg->tls_key, err, errsz) : NULL;
		if (!h->cert || !h->key) {
			rc = -ENOENT;
			goto fail;
		}
		flags |= MHD_USE_TLS;
	}
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned threads = cfg->threads > 0 ? (unsigned)cfg->threads : (unsigned)(ncpu > 0 ? ncpu : 1);
	struct MHD_OptionItem tls_opts[] = {
	    {MHD_OPTION_HTTPS_MEM_CERT, 0, h->cert},
	    {MHD_OPTION_HTTPS_MEM_KEY, 0, h->key},
	    /* TLS 1.2 and newer only, GnuTLS priority string. */
	    {MHD_OPTION_HTTPS_PRIORITIES, 0,
	     (void *)"SECURE256:+SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:%SERVER_PRECEDENCE"},
	    {MHD_OPTION_END, 0, NULL},
	};
	/* No MHD_OPTION_LISTENING_ADDRESS_REUSE: its 1 is SO_REUSEPORT, with
	 * which a second server (or any process of this uid) binds the same
	 * port and silently takes a share of the connections and their tokens.
	 * libmicrohttpd's default SO_REUSEADDR is enough for a quick restart. */
	h->d = MHD_start_daemon(flags, 0, on_accept, h, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_log, h,
				MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE,
				threads, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->connection_timeout_s,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
				MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_connections_per_ip,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->connection_memory_bytes,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_ARRAY,
				(flags & MHD_USE_TLS) ? tls_opts : tls_opts + 3, MHD_OPTION_END);
	if (!h->d) {
		snprintf(err, errsz, "cannot listen on %s (address in use, or bad TLS files?)", cfg->listen);
		rc = -EADDRINUSE;
		goto fail;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	h->port = di ? di->port : 0;
	*out = h;
	return 0;
fail:
	auth_cache_free(&env->auth_cache);
	free(h->cert);
	free(h->key);
	free(h);
	return rc;
}

uint16_t http_daemon_port(const struct http_daemon *h)
{
	return h->port;
}

/* Not MHD_quiesce_daemon: with epoll it races the event threads over the
 * listening socket (both remove it from the epoll set, and the loser
 * aborts the process: "Failed to remove listen FD from epoll set", an
 * open libmicrohttpd defect), which a shutdown while requests are being
 * served hits now and then. The accept policy refuses new connections
 * instead; the socket closes with the daemon. */
void http_daemon_quiesce(struct http_daemon *h)
{
	if (h)
		atomic_store(&h->quiesced, true);
}

void http_daemon_stop(struct http_daemon **hp)
{
	struct http_daemon *h = *hp;
	if (!h)
		return;
	if (h->d)
		MHD_stop_daemon(h->d);
	auth_cache_free(&h->env->auth_cache);
	free(h->cert);
	free(h->key);
	free(h);
	*hp = NULL;
}
