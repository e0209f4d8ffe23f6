/* One TCP connection of a sandbox, from accept to its record:
 *   accept     the dialled destination (SO_ORIGINAL_DST), the bounds;
 *   PEEK       the client's first bytes until sbx_egress_peek decides
 *              (hello_ms; nothing within first_byte_ms: OTHER);
 *   decide     by name (SNI, Host, the sandbox's DNS name of the dialled
 *              address) on the tenant's rules now, or by the address;
 *   RESOLVE    the name on the worker pool (resolve_ms), every address
 *              checked again (rules_addr, from_name);
 *   CONNECT    each address in turn from the server's namespace
 *              (connect_ms overall); never the dialled address when
 *              there is a name;
 *   FLUSH      the bytes read so far go to the destination;
 *   RELAY      gateway_relay.c until both directions end.
 * A refusal is a reset (SO_LINGER 0), so that clients fail at once.
 *
 * Floor 4: it calls gateway_session.c (records), gateway_resolve.c,
 * gateway_loop.c, gateway_relay.c and gateway.c; the loop's events reach
 * it through gateway_start.c's gw_loop_ops. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "sandbox/egress/gateway_int.h"

/* linux/netfilter_ipv4.h and linux/netfilter_ipv6/ip6_tables.h (whose
 * kernel headers clash with the libc ones). */
#define GW_SO_ORIGINAL_DST 80
#define GW_IP6T_SO_ORIGINAL_DST 80
#define ACCEPT_BATCH 32

void gw_addr_txt(const struct sockaddr_storage *ss, char *out, size_t outsz)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		snprintf(out, outsz, "[%s]:%u", ip, ntohs(a->sin6_port));
		return;
	}
	const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
	inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
	snprintf(out, outsz, "%s:%u", ip, ntohs(a->sin_port));
}

void gw_rst_close(int *fd)
{
	if (*fd < 0)
		return;
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	setsockopt(*fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(*fd);
	*fd = -1;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static const uint8_t *addr_bytes(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? (const uint8_t *)&((const struct sockaddr_in6 *)ss)->sin6_addr
					 : (const uint8_t *)&((const struct sockaddr_in *)ss)->sin_addr;
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)ss)->sin_port = htons(port);
}

static bool is_loopback(const struct sockaddr_storage *ss)
{
	static const uint8_t lo6[16] = {[15] = 1};
	const uint8_t *a = addr_bytes(ss);
	return ss->ss_family == AF_INET6 ? memcmp(a, lo6, 16) == 0 : a[0] == 127;
}

static void watch(struct gw_conn *c, struct gw_handle *h, uint32_t ev)
{
	if (h->fd >= 0)
		gw_loop_watch(c->s->loop, h, ev);
}

static void set_due(struct gw_conn *c, int64_t due)
{
	c->due = due;
	gw_loop_timed_add(c->s->loop, c);
}

static void not_pending(struct gw_conn *c)
{
	if (c->pending) {
		atomic_fetch_sub(&c->s->t->pending, 1);
		c->pending = false;
	}
	gw_loop_timed_del(c->s->loop, c);
}

static void conn_record(struct gw_conn *c, const char *reason)
{
	struct sbx_egress_record r;
	gw_session_base(c->s, &r);
	r.proto = c->proto ? c->proto : "tcp";
	r.name = c->name[0] ? c->name : NULL;
	r.name_source = c->name_source;
	r.dialled = c->dialled_txt;
	r.addr = c->addr_txt[0] ? c->addr_txt : NULL;
	r.port = c->port;
	r.allowed = c->allowed;
	r.reason = reason;
	if (c->relay)
		gw_relay_bytes(c->relay, &r.bytes_up, &r.bytes_down);
	r.bytes_up += c->bytes_up;
	r.bytes_down += c->bytes_down;
	r.started_ms = c->started_ms;
	r.ended_ms = now_ms();
	char dest[sizeof(((struct sbx_egress_denied *)0)->dest)];
	if (c->name[0])
		snprintf(dest, sizeof(dest), "%s:%u", c->name, c->port);
	else
		snprintf(dest, sizeof(dest), "%s", c->dialled_txt);
	gw_session_note(c->s, &r, c->allowed ? NULL : dest, 1);
}

void gw_conn_end(struct gw_conn *c, const char *reason)
{
	struct sbx_egress_session *s = c->s;
	conn_record(c, reason);
	not_pending(c);
	if (c->counted) {
		s->open--;
		atomic_fetch_sub(&s->t->open, 1);
	}
	if (c->job)
		gw_resolve_forget(c->job);
	c->job = NULL;
	if (c->prev)
		c->prev->next = c->next;
	else if (s->conns == c)
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	/* A healthy end closes gracefully (both directions are done); a
	 * refusal or an error resets both sides. */
	if (reason) {
		gw_rst_close(&c->hc.fd);
		gw_rst_close(&c->hu.fd);
	}
	close_fd(&c->hc.fd);
	close_fd(&c->hu.fd);
	c->st = GW_C_DEAD;
	gw_loop_bury(s->loop, c);
}

void gw_conn_end_all(struct sbx_egress_session *s)
{
	while (s->conns)
		gw_conn_end(s->conns,
			    s->conns->st == GW_C_RELAY ? NULL : "the command ended before it was decided");
}

static void refuse(struct gw_conn *c, const char *why)
{
	c->allowed = false;
	gw_conn_end(c, why);
}

void gw_conn_free(struct gw_conn *c)
{
	free(c->buf);
	gw_relay_free(&c->relay);
	sbx_egress_http_free(&c->http);
	sbx_egress_rules_unref(&c->rules);
	free(c);
}

/* The bounds of the command and of its tenant; NULL: within them. */
static const char *over_bounds(struct sbx_egress_session *s, char *why, size_t whysz)
{
	const struct sbx_egress_config *k = &s->g->c;
	if (s->open >= k->command_conns)
		snprintf(why, whysz, "too many connections of this command (%u)", k->command_conns);
	else if (!gw_bucket_take(&s->conn_rate, k->command_conn_per_s, 2.0 * k->command_conn_per_s,
				 mono_ms()))
		snprintf(why, whysz, "too many new connections of this command per second (%u)",
			 k->command_conn_per_s);
	else if (s->t->open >= k->tenant_conns)
		snprintf(why, whysz, "too many connections of this tenant (%u)", k->tenant_conns);
	else if (s->t->pending >= k->tenant_pending)
		snprintf(why, whysz, "too many undecided connections of this tenant (%u)", k->tenant_pending);
	else
		return NULL;
	return why;
}

/* Where the sandbox meant to go. false: nowhere we can tell (why). */
static bool original_dst(struct gw_conn *c, bool v6, char *why, size_t whysz)
{
	socklen_t len = sizeof(c->dialled);
	int rc = v6 ? getsockopt(c->hc.fd, SOL_IPV6, GW_IP6T_SO_ORIGINAL_DST, &c->dialled, &len)
		    : getsockopt(c->hc.fd, SOL_IP, GW_SO_ORIGINAL_DST, &c->dialled, &len);
	if (rc < 0) {
		snprintf(why, whysz, "no original destination: %s", strerror(errno));
		return false;
	}
	c->dialled.ss_family = v6 ? AF_INET6 : AF_INET;
	gw_addr_txt(&c->dialled, c->dialled_txt, sizeof(c->dialled_txt));
	c->port = ntohs(v6 ? ((struct sockaddr_in6 *)&c->dialled)->sin6_port
			   : ((struct sockaddr_in *)&c->dialled)->sin_port);
	/* The sandbox dialled the listener itself (its own loopback is never
	 * redirected): it would be a connection to nowhere, or a loop. */
	if (c->port == SBX_EGRESS_GW_PORT && is_loopback(&c->dialled)) {
		snprintf(why, whysz, "the egress gateway itself");
		return false;
	}
	return true;
}

static void decide_addr(struct gw_conn *c);
static void peek_step(struct gw_conn *c, bool eof);

static struct gw_conn *conn_new(struct sbx_egress_session *s, int fd)
{
	struct gw_conn *c = xcalloc(1, sizeof(*c));
	c->s = s;
	c->hc = (struct gw_handle){.kind = GW_H_CLIENT, .obj = c, .fd = fd};
	c->hu = (struct gw_handle){.kind = GW_H_UPSTREAM, .obj = c, .fd = -1};
	c->started_ms = now_ms();
	c->accepted_mono = mono_ms();
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	return c;
}

static void accept_one(struct sbx_egress_session *s, int fd, bool v6)
{
	struct gw_conn *c = conn_new(s, fd);
	char why[SBX_EGRESS_WHY_MAX];
	if (!original_dst(c, v6, why, sizeof(why)) || over_bounds(s, why, sizeof(why))) {
		refuse(c, why);
		return;
	}
	c->counted = c->pending = true;
	s->open++;
	atomic_fetch_add(&s->t->open, 1);
	atomic_fetch_add(&s->t->pending, 1);
	/* A granted host loopback port is an address connection: no name
	 * can say where 127.0.0.1 is. Decided now, without waiting for bytes. */
	if (is_loopback(&c->dialled)) {
		decide_addr(c);
		return;
	}
	c->st = GW_C_PEEK;
	c->buf = xmalloc(SBX_EGRESS_PEEK_MAX);
	unsigned first = s->g->c.first_byte_ms, hello = s->g->c.hello_ms;
	set_due(c, c->accepted_mono + (first < hello ? first : hello));
	watch(c, &c->hc, EPOLLIN);
}

/* Out of descriptors, the listener stays readable (level-triggered: the
 * loop would spin): the loop's spare one makes room to take the
 * connection and reset it. */
static void out_of_fds(struct gw_loop *l, int lfd)
{
	close(l->spare_fd);
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	gw_rst_close(&fd);
	l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void gw_conn_accept(struct sbx_egress_session *s, int lfd)
{
	/* A batch at a time: a flood on one listener lets the loop's other
	 * sessions have their turn (level-triggered: the rest comes next). */
	for (int i = 0; i < ACCEPT_BATCH; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
			out_of_fds(s->loop, lfd);
			return;
		}
		if (fd < 0)
			return;
		accept_one(s, fd, lfd == s->ns.tcp6);
	}
}

/* Connect to the next address; none left: the connection ends. */
static void connect_next(struct gw_conn *c, const char *last_err)
{
	char why[SBX_EGRESS_WHY_MAX];
	gw_rst_close(&c->hu.fd);
	c->hu.events = 0;
	while (c->next_addr < c->n_addrs) {
		struct sockaddr_storage *a = &c->addrs[c->next_addr++];
		gw_addr_txt(a, c->addr_txt, sizeof(c->addr_txt));
		int fd = socket(a->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		socklen_t len =
		    a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
		if (fd >= 0 && (connect(fd, (struct sockaddr *)a, len) == 0 || errno == EINPROGRESS)) {
			c->hu.fd = fd;
			watch(c, &c->hu, EPOLLOUT);
			return;
		}
		snprintf(why, sizeof(why), "connect to %s: %s", c->addr_txt, strerror(errno));
		last_err = why;
		if (fd >= 0)
			close(fd);
	}
	gw_conn_end(c, last_err ? last_err : "no address to connect to");
}

static void connect_start(struct gw_conn *c)
{
	c->st = GW_C_CONNECT;
	c->allowed = true;
	set_due(c, mono_ms() + c->s->g->c.connect_ms);
	connect_next(c, NULL);
}

/* No name: the dialled address itself, when an address rule allows it. */
static void decide_addr(struct gw_conn *c)
{
	char why[SBX_EGRESS_WHY_MAX] = "no network rules";
	struct sbx_egress_rules *r = gw_rules_now(c->s->g, c->s->t);
	bool ok = r && sbx_egress_rules_addr(r, c->dialled.ss_family, addr_bytes(&c->dialled), c->port, false,
					     why, sizeof(why));
	sbx_egress_rules_unref(&r);
	if (!ok) {
		refuse(c, why);
		return;
	}
	c->addrs[0] = c->dialled;
	c->n_addrs = 1;
	connect_start(c);
}

static void decide_name(struct gw_conn *c)
{
	char why[SBX_EGRESS_WHY_MAX] = "no network rules";
	c->rules = gw_rules_now(c->s->g, c->s->t);
	if (!c->rules || !sbx_egress_rules_name(c->rules, c->name, c->port, why, sizeof(why))) {
		refuse(c, why);
		return;
	}
	/* A plain HTTP connection stays on its name: every later request is
	 * checked, from the first byte on. */
	if (c->proto && strcmp(c->proto, "http") == 0) {
		c->http = sbx_egress_http_new(c->name);
		if (sbx_egress_http_feed(c->http, c->buf, c->len, why, sizeof(why)) < 0) {
			refuse(c, why);
			return;
		}
	}
	c->st = GW_C_RESOLVE;
	set_due(c, mono_ms() + c->s->g->c.resolve_ms);
	c->job = gw_resolve_start(c->s->g, c->s->loop, c, c->name);
}

/* Undecided bytes: a TLS handshake record, or something else. */
static const char *proto_guess(const struct gw_conn *c)
{
	return c->len && c->buf[0] == 0x16 ? "tls" : "tcp";
}

static const char *proto_of(const struct sbx_egress_peek *p, const struct gw_conn *c)
{
	switch (p->proto) {
	case SBX_EGRESS_TLS:
		return "tls";
	case SBX_EGRESS_HTTP:
		return "http";
	case SBX_EGRESS_REFUSE:
		return proto_guess(c);
	default:
		return "tcp";
	}
}

/* The name the sandbox's DNS gave the dialled address, if it is one. */
static bool dns_name(struct gw_conn *c)
{
	if (c->dialled.ss_family != AF_INET)
		return false;
	const uint8_t *a4 = addr_bytes(&c->dialled);
	return sbx_egress_names_synthetic(a4) &&
	       sbx_egress_names_lookup(c->s->names, a4, c->name, sizeof(c->name));
}

static void decide(struct gw_conn *c, const struct sbx_egress_peek *p)
{
	watch(c, &c->hc, 0); /* more bytes wait in the socket until relaying */
	c->proto = proto_of(p, c);
	if (p->proto == SBX_EGRESS_REFUSE) {
		refuse(c, p->why);
		return;
	}
	if (p->name[0]) {
		snprintf(c->name, sizeof(c->name), "%s", p->name);
		c->name_source = p->proto == SBX_EGRESS_TLS ? "sni" : "host";
	} else if (dns_name(c)) {
		c->name_source = "dns";
	}
	if (c->name[0])
		decide_name(c);
	else
		decide_addr(c);
}

static void peek_step(struct gw_conn *c, bool eof)
{
	struct sbx_egress_peek p;
	sbx_egress_peek(c->buf, c->len, &p);
	if (p.proto != SBX_EGRESS_MORE) {
		decide(c, &p);
		return;
	}
	if (!eof)
		return;
	/* The client ended its side: nothing at all is a protocol where the
	 * server speaks first; a part of a hello is not going to be more. */
	if (c->len) {
		refuse(c, "the connection ended before its ClientHello or request head");
		return;
	}
	p.proto = SBX_EGRESS_OTHER;
	decide(c, &p);
}

static void peek_read(struct gw_conn *c)
{
	ssize_t n = read(c->hc.fd, c->buf + c->len, SBX_EGRESS_PEEK_MAX - c->len);
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR)
			refuse(c, strerror(errno));
		return;
	}
	if (n > 0 && c->len == 0)
		set_due(c, c->accepted_mono + c->s->g->c.hello_ms);
	c->len += (size_t)n;
	peek_step(c, n == 0);
}

void gw_conn_deadline(struct gw_conn *c)
{
	char why[SBX_EGRESS_WHY_MAX], name_why[SBX_EGRESS_NAME_MAX + 64];
	switch (c->st) {
	case GW_C_PEEK:
		if (c->len == 0) {
			peek_step(c, true); /* nothing within first_byte_ms */
			return;
		}
		snprintf(why, sizeof(why), "no complete ClientHello or request head within %u ms",
			 c->s->g->c.hello_ms);
		c->proto = proto_guess(c);
		refuse(c, why);
		return;
	case GW_C_RESOLVE:
		snprintf(name_why, sizeof(name_why), "%s did not resolve within %u ms", c->name,
			 c->s->g->c.resolve_ms);
		refuse(c, name_why);
		return;
	case GW_C_CONNECT:
		snprintf(why, sizeof(why), "connect to %s timed out (%u ms)", c->addr_txt,
			 c->s->g->c.connect_ms);
		gw_conn_end(c, why);
		return;
	default:
		gw_loop_timed_del(c->s->loop, c);
	}
}

/* The resolved addresses the rules allow, on the dialled port. */
static void keep_allowed(struct gw_conn *c, const struct gw_resolved *res)
{
	char why[SBX_EGRESS_WHY_MAX];
	for (size_t i = 0; i < res->n; i++) {
		struct sockaddr_storage a = res->a[i];
		set_port(&a, c->port);
		if (sbx_egress_rules_addr(c->rules, a.ss_family, addr_bytes(&a), c->port, true, why,
					  sizeof(why)))
			c->addrs[c->n_addrs++] = a;
		else if (!c->first_why[0])
			snprintf(c->first_why, sizeof(c->first_why), "%s", why);
	}
}

void gw_conn_resolved(void *job)
{
	struct gw_conn *c = gw_job_conn(job);
	const struct gw_resolved *res = gw_job_result(job);
	if (c) {
		c->job = NULL;
		char why[SBX_EGRESS_NAME_MAX + 64];
		if (res->err || !res->n) {
			snprintf(why, sizeof(why), "%s does not resolve: %s", c->name,
				 res->err ? gai_strerror(res->err) : "no address");
			refuse(c, why);
		} else {
			keep_allowed(c, res);
			if (c->n_addrs)
				connect_start(c);
			else
				refuse(c, c->first_why);
		}
	}
	gw_job_free(job);
}

static void relay_pump(struct gw_conn *c, int fd, uint32_t events)
{
	char why[SBX_EGRESS_WHY_MAX];
	uint32_t cev, uev;
	int rc = gw_relay_pump(c->relay, fd, events, &cev, &uev, why, sizeof(why));
	if (rc != 0) {
		gw_conn_end(c, rc > 0 ? NULL : why);
		return;
	}
	watch(c, &c->hc, cev);
	watch(c, &c->hu, uev);
}

static void relay_start(struct gw_conn *c)
{
	c->relay = gw_relay_new(c->hc.fd, c->hu.fd, c->http);
	c->http = NULL;
	free(c->buf);
	c->buf = NULL;
	if (!c->relay) {
		gw_conn_end(c, "out of pipes");
		return;
	}
	c->st = GW_C_RELAY;
	relay_pump(c, -1, 0);
}

/* The bytes read before the decision go first. */
static void flush_step(struct gw_conn *c)
{
	while (c->off < c->len) {
		ssize_t n = write(c->hu.fd, c->buf + c->off, c->len - c->off);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			watch(c, &c->hu, EPOLLOUT);
			return;
		}
		if (n < 0) {
			char why[SBX_EGRESS_WHY_MAX];
			snprintf(why, sizeof(why), "destination: %s", strerror(errno));
			gw_conn_end(c, why);
			return;
		}
		c->off += (size_t)n;
		c->bytes_up += (uint64_t)n;
	}
	relay_start(c);
}

static void connect_done(struct gw_conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(c->hu.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		char why[SBX_EGRESS_WHY_MAX];
		snprintf(why, sizeof(why), "connect to %s: %s", c->addr_txt, strerror(err));
		connect_next(c, why);
		return;
	}
	not_pending(c);
	sbx_egress_rules_unref(&c->rules);
	c->st = GW_C_FLUSH;
	flush_step(c);
}

void gw_conn_event(struct gw_conn *c, struct gw_handle *h, uint32_t events)
{
	switch (c->st) {
	case GW_C_PEEK:
		if (h == &c->hc)
			peek_read(c);
		break;
	case GW_C_CONNECT:
		if (h == &c->hu)
			connect_done(c);
		break;
	case GW_C_FLUSH:
		flush_step(c);
		break;
	case GW_C_RELAY:
		relay_pump(c, h->fd, events);
		break;
	default:
		break;
	}
}
