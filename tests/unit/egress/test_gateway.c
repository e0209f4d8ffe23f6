/* The egress gateway end to end, inside namespaces this test makes:
 *   - the test process is in a fresh network namespace (the gateway's
 *     outgoing side) joined by a veth pair to a second one, "upstream",
 *     where small TCP servers listen on 198.51.100.10 and .11 (TEST-NET-2)
 *     and answer with the address they were reached on; neither namespace
 *     has any route but the veth's subnet (checked before the first packet);
 *   - a private mount namespace puts a hosts file of test names over
 *     /etc/hosts (and "hosts: files" over /etc/nsswitch.conf);
 *   - the "sandbox" is sockets made in the session's namespace.
 * Root only (skipped otherwise). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/ssl.h>

#include "common/timeutil.h"
#include "sandbox/egress/gateway.h"
#include "unit.h"

extern char **environ;

#define ALLOWED_IP "198.51.100.10"
#define OTHER_IP "198.51.100.11"
#define ALLOWED6_IP "2001:db8::10"
#define OTHER6_IP "2001:db8::11"
#define MIB (1024 * 1024)
#define WAIT_MS 5000

struct rec {
	char proto[8], name[256], name_source[8], dialled[64], addr[64], reason[256], tenant[32];
	bool has_addr, has_reason, allowed, used;
	uint16_t port;
	uint64_t up, down;
	int64_t started, ended;
};

static struct {
	bool ready;
	char why[256];
	char dir[64];
	pid_t up_tid;
	int up_stage; /* 1: its namespace is made, 2: it listens, -1: failed */
	int up_stop[2];
	pthread_t up_thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct rec recs[256];
	size_t n_recs;
	struct sbx_egress_gateway *g;
} T = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void copy(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

static void on_record(void *ctx, const struct sbx_egress_record *r)
{
	(void)ctx;
	pthread_mutex_lock(&T.mu);
	if (T.n_recs < sizeof(T.recs) / sizeof(T.recs[0])) {
		struct rec *x = &T.recs[T.n_recs++];
		memset(x, 0, sizeof(*x));
		copy(x->proto, sizeof(x->proto), r->proto);
		copy(x->name, sizeof(x->name), r->name);
		copy(x->name_source, sizeof(x->name_source), r->name_source);
		copy(x->dialled, sizeof(x->dialled), r->dialled);
		copy(x->addr, sizeof(x->addr), r->addr);
		copy(x->reason, sizeof(x->reason), r->reason);
		copy(x->tenant, sizeof(x->tenant), r->tenant);
		x->has_addr = r->addr != NULL;
		x->has_reason = r->reason != NULL;
		x->allowed = r->allowed;
		x->port = r->port;
		x->up = r->bytes_up;
		x->down = r->bytes_down;
		x->started = r->started_ms;
		x->ended = r->ended_ms;
	}
	pthread_cond_broadcast(&T.cv);
	pthread_mutex_unlock(&T.mu);
}

/* The first record not yet looked at of proto dialling dialled (NULL: any),
 * waited for up to WAIT_MS. */
static struct rec wait_rec(const char *proto, const char *dialled)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&T.mu);
	for (;;) {
		for (size_t i = 0; i < T.n_recs; i++) {
			struct rec *x = &T.recs[i];
			if (!x->used && strcmp(x->proto, proto) == 0 &&
			    (!dialled || strcmp(x->dialled, dialled) == 0)) {
				x->used = true;
				struct rec out = *x;
				pthread_mutex_unlock(&T.mu);
				return out;
			}
		}
		if (pthread_cond_timedwait(&T.cv, &T.mu, &until) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&T.mu);
	fail_msg("no %s record of %s within %d ms", proto, dialled ? dialled : "anything", WAIT_MS);
	return (struct rec){0};
}

/* --- the namespaces --------------------------------------------------- */

/* Run argv (NULL-terminated) and wait: 0 when it exited 0. */
static int run(const char *const *argv)
{
	pid_t pid;
	int st;
	if (posix_spawnp(&pid, argv[0], NULL, NULL, (char *const *)argv, environ) != 0)
		return -1;
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return -1;
	return 0;
}
#define RUN(...) run((const char *const[]){__VA_ARGS__, NULL})

static int write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

static int bind_over(const char *dir, const char *name, const char *text, const char *target)
{
	char p[128];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	if (write_file(p, text) < 0 || mount(p, target, NULL, MS_BIND, NULL) < 0)
		return -1;
	return 0;
}

/* Only the veth's subnets (and IPv6's link-local, local, multicast and
 * reject routes, which lead nowhere else): nothing can leave the machine. */
static bool only_veth_routes(const char *netdir)
{
	char p[128], line[256];
	snprintf(p, sizeof(p), "%s/route", netdir);
	FILE *f = fopen(p, "re");
	if (!f)
		return false;
	unsigned dst, mask;
	bool ok = fgets(line, sizeof(line), f) != NULL; /* the header */
	while (ok && fgets(line, sizeof(line), f))
		ok = sscanf(line, "%*s %x %*s %*s %*s %*s %*s %x", &dst, &mask) == 2 &&
		     ntohl(dst) == 0xc6336400u && ntohl(mask) == 0xffffff00u;
	fclose(f);
	snprintf(p, sizeof(p), "%s/ipv6_route", netdir);
	f = fopen(p, "re");
	char d6[40];
	unsigned len, flags;
	/* The kernel's own unreachable ::/0 on lo (RTF_REJECT) leads nowhere. */
	while (ok && f && fgets(line, sizeof(line), f))
		ok = sscanf(line, "%39s %x %*s %*s %*s %*s %*s %*s %x", d6, &len, &flags) == 3 &&
		     (strncmp(d6, "fe80", 4) == 0 || strncmp(d6, "ff", 2) == 0 || len == 128 ||
		      (flags & 0x200) || (strcmp(d6, "20010db8000000000000000000000000") == 0 && len == 64));
	if (f)
		fclose(f);
	return ok;
}

/* ip: IPv4 or IPv6 text. */
static socklen_t sockaddr_of(const char *ip, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
		return sizeof(*a6);
	}
	struct sockaddr_in *a = (struct sockaddr_in *)ss;
	a->sin_family = AF_INET;
	a->sin_port = htons(port);
	inet_pton(AF_INET, ip, &a->sin_addr);
	return sizeof(*a);
}

static int listen_on(const char *ip, uint16_t port)
{
	struct sockaddr_storage a;
	socklen_t len = sockaddr_of(ip, port, &a);
	int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, len) < 0 || listen(fd, 128) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void read_to_eof(int fd, uint64_t *n)
{
	char b[16384];
	ssize_t r;
	while ((r = read(fd, b, sizeof(b))) > 0)
		if (n)
			*n += (uint64_t)r;
}

static void write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w <= 0)
			return;
		c += w;
		n -= (size_t)w;
	}
}

/* One upstream connection: the port says how it behaves.
 *   22    speaks first: its identity and EOF, then reads to EOF;
 *   9000  reads 1 MiB, then writes 1 MiB;
 *   else  reads once, answers its identity, reads to EOF. */
static void *serve_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct sockaddr_storage me;
	socklen_t len = sizeof(me);
	getsockname(fd, (struct sockaddr *)&me, &len);
	char id[64], ip[INET6_ADDRSTRLEN], b[16384];
	const struct sockaddr_in *m4 = (const struct sockaddr_in *)&me;
	const struct sockaddr_in6 *m6 = (const struct sockaddr_in6 *)&me;
	inet_ntop(me.ss_family,
		  me.ss_family == AF_INET6 ? (const void *)&m6->sin6_addr : (const void *)&m4->sin_addr, ip,
		  sizeof(ip));
	snprintf(id, sizeof(id), "ID %s\n", ip);
	uint16_t port = ntohs(me.ss_family == AF_INET6 ? m6->sin6_port : m4->sin_port);
	if (port == 22) {
		write_all(fd, id, strlen(id));
		shutdown(fd, SHUT_WR);
	} else if (port == 9000) {
		size_t got = 0;
		ssize_t r;
		while (got < MIB && (r = read(fd, b, sizeof(b))) > 0)
			got += (size_t)r;
		memset(b, 'd', sizeof(b));
		for (size_t sent = 0; sent < MIB; sent += sizeof(b))
			write_all(fd, b, sizeof(b));
		shutdown(fd, SHUT_WR);
	} else if (read(fd, b, sizeof(b)) > 0) {
		write_all(fd, id, strlen(id));
		shutdown(fd, SHUT_WR);
	}
	read_to_eof(fd, NULL);
	close(fd);
	return NULL;
}

static const struct {
	const char *ip;
	uint16_t port;
} servers[] = {{ALLOWED_IP, 80}, {ALLOWED_IP, 443}, {ALLOWED_IP, 22},  {ALLOWED_IP, 9000}, {OTHER_IP, 80},
	       {OTHER_IP, 443},	 {OTHER_IP, 22},    {ALLOWED6_IP, 80}, {OTHER6_IP, 80}};
#define N_SERVERS (sizeof(servers) / sizeof(servers[0]))

static void accept_loop(const int *lfd)
{
	struct pollfd p[N_SERVERS + 1];
	for (size_t i = 0; i < N_SERVERS; i++)
		p[i] = (struct pollfd){.fd = lfd[i], .events = POLLIN};
	p[N_SERVERS] = (struct pollfd){.fd = T.up_stop[0], .events = POLLIN};
	while (poll(p, N_SERVERS + 1, -1) >= 0 && !p[N_SERVERS].revents)
		for (size_t i = 0; i < N_SERVERS; i++) {
			int fd = p[i].revents ? accept4(lfd[i], NULL, NULL, SOCK_CLOEXEC) : -1;
			pthread_t t;
			if (fd >= 0 && pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)fd) == 0)
				pthread_detach(t);
		}
}

static void up_signal(int stage)
{
	pthread_mutex_lock(&T.mu);
	T.up_stage = stage;
	T.up_tid = (pid_t)syscall(SYS_gettid);
	pthread_cond_broadcast(&T.cv);
	pthread_mutex_unlock(&T.mu);
}

/* The upstream namespace's thread: it makes the namespace, waits for its
 * addresses (configured from outside), then listens and serves. */
static void *upstream_main(void *arg)
{
	(void)arg;
	int lfd[N_SERVERS];
	if (unshare(CLONE_NEWNET) < 0) {
		up_signal(-1);
		return NULL;
	}
	up_signal(1);
	char c;
	if (read(T.up_stop[0], &c, 1) != 1 || c != 'g') /* the addresses are there */
		return NULL;
	for (size_t i = 0; i < N_SERVERS; i++)
		lfd[i] = listen_on(servers[i].ip, servers[i].port);
	up_signal(2);
	accept_loop(lfd);
	for (size_t i = 0; i < N_SERVERS; i++)
		close(lfd[i]);
	return NULL;
}

static int up_wait(int stage)
{
	pthread_mutex_lock(&T.mu);
	while (T.up_stage >= 0 && T.up_stage < stage)
		pthread_cond_wait(&T.cv, &T.mu);
	int rc = T.up_stage < 0 ? -1 : 0;
	pthread_mutex_unlock(&T.mu);
	return rc;
}

static int set_up_network(void)
{
	char tid[16], nsfile[64], up[64];
	snprintf(tid, sizeof(tid), "%d", (int)T.up_tid);
	snprintf(nsfile, sizeof(nsfile), "--net=/proc/%d/task/%d/ns/net", (int)getpid(), (int)T.up_tid);
	snprintf(up, sizeof(up), "/proc/%d/task/%d/net", (int)getpid(), (int)T.up_tid);
	if (RUN("ip", "link", "set", "lo", "up") < 0 ||
	    RUN("ip", "link", "add", "gw0", "type", "veth", "peer", "name", "up0", "netns", tid) < 0 ||
	    RUN("ip", "addr", "add", "198.51.100.1/24", "dev", "gw0") < 0 ||
	    RUN("ip", "-6", "addr", "add", "2001:db8::1/64", "dev", "gw0", "nodad") < 0 ||
	    RUN("ip", "link", "set", "gw0", "up") < 0 ||
	    RUN("nsenter", nsfile, "ip", "link", "set", "lo", "up") < 0 ||
	    RUN("nsenter", nsfile, "ip", "addr", "add", ALLOWED_IP "/24", "dev", "up0") < 0 ||
	    RUN("nsenter", nsfile, "ip", "addr", "add", OTHER_IP "/24", "dev", "up0") < 0 ||
	    RUN("nsenter", nsfile, "ip", "-6", "addr", "add", ALLOWED6_IP "/64", "dev", "up0", "nodad") < 0 ||
	    RUN("nsenter", nsfile, "ip", "-6", "addr", "add", OTHER6_IP "/64", "dev", "up0", "nodad") < 0 ||
	    RUN("nsenter", nsfile, "ip", "link", "set", "up0", "up") < 0) {
		copy(T.why, sizeof(T.why), "ip or nsenter failed");
		return -1;
	}
	if (!only_veth_routes("/proc/thread-self/net") || !only_veth_routes(up)) {
		copy(T.why, sizeof(T.why), "a namespace has a route out");
		return -1;
	}
	return 0;
}

static int setup_world(void)
{
	if (geteuid() != 0) {
		copy(T.why, sizeof(T.why), "needs root");
		return -1;
	}
	if (unshare(CLONE_NEWNET | CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    unit_tmpdir(T.dir, sizeof(T.dir), "gateway") < 0 ||
	    bind_over(
		T.dir, "hosts",
		"198.51.100.10 allowed.test\n198.51.100.11 other.test\n10.9.9.9 private.test\n" ALLOWED6_IP
		" allowed6.test\n",
		"/etc/hosts") < 0 ||
	    bind_over(T.dir, "nsswitch.conf", "hosts: files\n", "/etc/nsswitch.conf") < 0 ||
	    pipe2(T.up_stop, O_CLOEXEC) < 0) {
		snprintf(T.why, sizeof(T.why), "namespaces: %s", strerror(errno));
		return -1;
	}
	if (pthread_create(&T.up_thr, NULL, upstream_main, NULL) != 0 || up_wait(1) < 0)
		return -1;
	if (set_up_network() < 0)
		return -1;
	write_all(T.up_stop[1], "g", 1);
	return up_wait(2);
}

/* --- the sandbox's side ----------------------------------------------- */

struct fx {
	struct sbx_egress_session *s, *s2;
};

static struct sbx_egress_rules *rules(const char *spec)
{
	struct sbx_egress_rules *r = NULL;
	char err[200];
	assert_int_equal(sbx_egress_rules_parse(spec, &r, err, sizeof(err)), 0);
	return r;
}

static void gw_start(const struct sbx_egress_config *over)
{
	if (!T.ready)
		skip();
	struct sbx_egress_config c = *over;
	c.pool = 2;
	c.record = on_record;
	pthread_mutex_lock(&T.mu);
	T.n_recs = 0;
	pthread_mutex_unlock(&T.mu);
	assert_int_equal(sbx_egress_gateway_new(&c, &T.g), 0);
}

static struct sbx_egress_session *open_session(const char *tenant, const char *spec)
{
	struct sbx_egress_rules *r = rules(spec);
	struct sbx_egress_bind b = {.tenant = tenant, .exec_id = "e1", .rules = r, .seq = 1};
	struct sbx_egress_session *s = NULL;
	char err[200] = "";
	int rc = sbx_egress_session_open(T.g, &b, &s, err, sizeof(err));
	sbx_egress_rules_unref(&r);
	if (rc < 0)
		fail_msg("session_open: %s", err);
	return s;
}

/* A socket of the sandbox: made in its namespace. */
static int sbx_socket6(struct sbx_egress_session *s, int family, int type)
{
	int here = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	assert_true(here >= 0);
	assert_int_equal(setns(sbx_egress_session_netns(s), CLONE_NEWNET), 0);
	int fd = socket(family, type | SOCK_CLOEXEC, 0);
	assert_int_equal(setns(here, CLONE_NEWNET), 0);
	close(here);
	struct timeval tv = {.tv_sec = WAIT_MS / 1000};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

static int sbx_socket(struct sbx_egress_session *s, int type)
{
	return sbx_socket6(s, AF_INET, type);
}

static int sbx_connect(struct sbx_egress_session *s, const char *ip, uint16_t port)
{
	struct sockaddr_storage a;
	socklen_t len = sockaddr_of(ip, port, &a);
	int fd = sbx_socket6(s, a.ss_family, SOCK_STREAM);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, len), 0);
	return fd;
}

/* Send req (n bytes), then read the answer to EOF: its text ("" when the
 * gateway refused: a reset or an empty EOF). */
static void exchange(int fd, const void *req, size_t n, char *ans, size_t cap)
{
	write_all(fd, req, n);
	size_t got = 0;
	ssize_t r;
	while (got + 1 < cap && (r = read(fd, ans + got, cap - 1 - got)) > 0)
		got += (size_t)r;
	ans[got] = 0;
	close(fd);
}

static void http_to(struct sbx_egress_session *s, const char *ip, const char *host, char *ans, size_t cap)
{
	char req[256];
	int n = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host);
	exchange(sbx_connect(s, ip, 80), req, (size_t)n, ans, cap);
}

/* A ClientHello with sni, as OpenSSL's client sends it. */
static size_t client_hello(const char *sni, uint8_t *out, size_t cap)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
	SSL_set_bio(ssl, rb, wb);
	SSL_set_tlsext_host_name(ssl, sni);
	assert_true(SSL_connect(ssl) <= 0); /* wants the server's answer */
	int n = BIO_read(wb, out, (int)cap);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	assert_true(n > 0);
	return (size_t)n;
}

static void tls_to(struct sbx_egress_session *s, const char *ip, const char *sni, char *ans, size_t cap)
{
	uint8_t hello[4096];
	size_t n = client_hello(sni, hello, sizeof(hello));
	exchange(sbx_connect(s, ip, 443), hello, n, ans, cap);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	if (f) {
		sbx_egress_session_close(&f->s, NULL);
		sbx_egress_session_close(&f->s2, NULL);
	}
	sbx_egress_gateway_free(&T.g);
	return 0;
}

static int setup(void **state)
{
	static struct fx f;
	memset(&f, 0, sizeof(f));
	*state = &f;
	return 0;
}

/* --- the cases -------------------------------------------------------- */

static void count_cb(void *ctx, const char *tenant, const struct sbx_egress_counts *c)
{
	if (strcmp(tenant, "t1") == 0)
		*(struct sbx_egress_counts *)ctx = *c;
}

static const struct sbx_egress_config base = {.threads = 2, .first_byte_ms = 100};

static void http_by_host(void **state)
{
	struct fx *f = *state;
	char ans[256];
	gw_start(&base);
	f->s = open_session("t1", "allowed.test");
	/* Host allowed.test sent to other.test's address: allowed.test's server. */
	http_to(f->s, OTHER_IP, "allowed.test", ans, sizeof(ans));
	assert_string_equal(ans, "ID " ALLOWED_IP "\n");
	struct rec r = wait_rec("http", OTHER_IP ":80");
	assert_true(r.allowed);
	assert_false(r.has_reason);
	assert_string_equal(r.name, "allowed.test");
	assert_string_equal(r.name_source, "host");
	assert_string_equal(r.addr, ALLOWED_IP ":80");
	assert_string_equal(r.tenant, "t1");
	/* An unlisted Host on the same address: refused, said why. */
	http_to(f->s, ALLOWED_IP, "other.test", ans, sizeof(ans));
	assert_string_equal(ans, "");
	r = wait_rec("http", ALLOWED_IP ":80");
	assert_false(r.allowed);
	assert_false(r.has_addr);
	assert_string_equal(r.name, "other.test");
	assert_true(r.reason[0]);
	struct sbx_egress_summary sum;
	sbx_egress_session_summary(f->s, &sum);
	assert_int_equal(sum.n_denied, 1);
	assert_string_equal(sum.denied[0].dest, "other.test:80");
	assert_int_equal(sum.allowed_total, 1);
	struct sbx_egress_counts c = {0};
	sbx_egress_gateway_counts(T.g, count_cb, &c);
	assert_int_equal(c.allowed, 1);
	assert_int_equal(c.denied, 1);
	assert_int_equal(c.open, 0);
}

/* IPv6 the same way: Host decides, the gateway connects to the name's
 * IPv6 address. */
static void http_by_host6(void **state)
{
	struct fx *f = *state;
	char ans[256];
	gw_start(&base);
	f->s = open_session("t1", "allowed6.test");
	char req[] = "GET / HTTP/1.1\r\nHost: allowed6.test\r\n\r\n";
	exchange(sbx_connect(f->s, OTHER6_IP, 80), req, sizeof(req) - 1, ans, sizeof(ans));
	assert_string_equal(ans, "ID " ALLOWED6_IP "\n");
	struct rec r = wait_rec("http", "[" OTHER6_IP "]:80");
	assert_true(r.allowed);
	assert_string_equal(r.addr, "[" ALLOWED6_IP "]:80");
}

/* A client that ends its side right after its request (nc -N) still
 * gets the whole answer: the EOF is passed on, not taken for the end. */
static void half_close(void **state)
{
	struct fx *f = *state;
	static const char req[] = "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n";
	char ans[256];
	gw_start(&base);
	f->s = open_session("t1", "allowed.test");
	int fd = sbx_connect(f->s, OTHER_IP, 80);
	write_all(fd, req, sizeof(req) - 1);
	shutdown(fd, SHUT_WR);
	exchange(fd, "", 0, ans, sizeof(ans));
	assert_string_equal(ans, "ID " ALLOWED_IP "\n");
	struct rec r = wait_rec("http", OTHER_IP ":80");
	assert_true(r.allowed);
	assert_false(r.has_reason);
	assert_int_equal(r.up, sizeof(req) - 1);
}

/* Pipelined requests on one connection: each one's Host is checked. */
static void http_second_host(void **state)
{
	struct fx *f = *state;
	char ans[256];
	gw_start(&base);
	f->s = open_session("t1", "allowed.test, other.test");
	static const char two[] = "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
				  "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n";
	exchange(sbx_connect(f->s, ALLOWED_IP, 80), two, sizeof(two) - 1, ans, sizeof(ans));
	assert_string_equal(ans, "");
	struct rec r = wait_rec("http", ALLOWED_IP ":80");
	assert_false(r.allowed);
	assert_true(r.reason[0]);
}

static void tls_by_sni(void **state)
{
	struct fx *f = *state;
	char ans[256];
	gw_start(&base);
	f->s = open_session("t1", "allowed.test");
	tls_to(f->s, ALLOWED_IP, "allowed.test", ans, sizeof(ans));
	assert_string_equal(ans, "ID " ALLOWED_IP "\n");
	struct rec r = wait_rec("tls", ALLOWED_IP ":443");
	assert_true(r.allowed);
	assert_string_equal(r.name_source, "sni");
	/* A forged SNI sent to another address lands on the name's own. */
	tls_to(f->s, OTHER_IP, "allowed.test", ans, sizeof(ans));
	assert_string_equal(ans, "ID " ALLOWED_IP "\n");
	r = wait_rec("tls", OTHER_IP ":443");
	assert_string_equal(r.addr, ALLOWED_IP ":443");
	tls_to(f->s, OTHER_IP, "other.test", ans, sizeof(ans));
	assert_string_equal(ans, "");
	assert_false(wait_rec("tls", OTHER_IP ":443").allowed);
}

static void private_answer_refused(void **state)
{
	struct fx *f = *state;
	char ans[256];
	gw_start(&base);
	f->s = open_session("t1", "private.test");
	http_to(f->s, ALLOWED_IP, "private.test", ans, sizeof(ans));
	assert_string_equal(ans, "");
	struct rec r = wait_rec("http", ALLOWED_IP ":80");
	assert_false(r.allowed);
	assert_false(r.has_addr);
	assert_true(r.reason[0]);
}

/* A DNS question from the sandbox: rcode, and the A record's address. */
static int ask(struct sbx_egress_session *s, const char *name, uint8_t a4[4])
{
	uint8_t q[300] = {0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}, ans[512];
	size_t n = 12;
	for (const char *p = name; *p;) {
		size_t l = strcspn(p, ".");
		q[n++] = (uint8_t)l;
		memcpy(q + n, p, l);
		n += l;
		p += l + (p[l] == '.');
	}
	q[n++] = 0;
	memcpy(q + n, "\0\1\0\1", 4); /* A, IN */
	n += 4;
	int fd = sbx_socket(s, SOCK_DGRAM);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(53)};
	inet_pton(AF_INET, "127.0.0.53", &a.sin_addr);
	assert_int_equal(sendto(fd, q, n, 0, (struct sockaddr *)&a, sizeof(a)), (ssize_t)n);
	ssize_t got = recv(fd, ans, sizeof(ans), 0);
	close(fd);
	assert_true(got >= 12);
	assert_int_equal(ans[0] << 8 | ans[1], 0x1234);
	if (ans[7] == 1) /* ANCOUNT 1: the A record's data is last */
		memcpy(a4, ans + got - 4, 4);
	return ans[3] & 0x0f;
}

static void dns_then_name(void **state)
{
	struct fx *f = *state;
	char ans[256], ip[INET_ADDRSTRLEN], dialled[64];
	uint8_t a4[4] = {0};
	gw_start(&base);
	f->s = open_session("t1", "allowed.test");
	assert_int_equal(ask(f->s, "allowed.test", a4), 0);
	assert_true(a4[0] == 198 && (a4[1] & 0xfe) == 18);
	struct rec r = wait_rec("dns", NULL);
	assert_true(r.allowed);
	assert_string_equal(r.name, "allowed.test");
	/* A protocol where the server speaks first, to the synthetic address:
	 * decided on the DNS name after first_byte_ms. */
	inet_ntop(AF_INET, a4, ip, sizeof(ip));
	exchange(sbx_connect(f->s, ip, 22), "", 0, ans, sizeof(ans));
	assert_string_equal(ans, "ID " ALLOWED_IP "\n");
	snprintf(dialled, sizeof(dialled), "%s:22", ip);
	r = wait_rec("tcp", dialled);
	assert_true(r.allowed);
	assert_string_equal(r.name_source, "dns");
	assert_string_equal(r.addr, ALLOWED_IP ":22");
	/* Not listed: REFUSED, recorded. */
	assert_int_equal(ask(f->s, "other.test", a4), 5);
	r = wait_rec("dns", NULL);
	assert_false(r.allowed);
	assert_string_equal(r.name, "other.test");
	assert_true(r.reason[0]);
}

static size_t n_recs_of(const char *proto)
{
	size_t n = 0;
	pthread_mutex_lock(&T.mu);
	for (size_t i = 0; i < T.n_recs; i++)
		n += strcmp(T.recs[i].proto, proto) == 0;
	pthread_mutex_unlock(&T.mu);
	return n;
}

/* A DNS flood costs its own session: beyond the rate bound questions are
 * dropped (and said once a second), another session on the same loop is
 * answered meanwhile. */
static void dns_flood(void **state)
{
	struct fx *f = *state;
	struct sbx_egress_config c = base;
	c.threads = 1;
	gw_start(&c);
	f->s = open_session("t1", "allowed.test");
	f->s2 = open_session("t2", "allowed.test");
	static const uint8_t q[] = {0,	 1,   1,   0, 0,   1,	0,   0,	  0, 0, 0, 0, 4, 'e',
				    'v', 'i', 'l', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1};
	int fd = sbx_socket(f->s, SOCK_DGRAM);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(53)};
	inet_pton(AF_INET, "127.0.0.53", &a.sin_addr);
	int64_t t0 = mono_ms();
	for (int i = 0; i < 1000; i++)
		sendto(fd, q, sizeof(q), 0, (struct sockaddr *)&a, sizeof(a));
	uint8_t a4[4];
	assert_int_equal(ask(f->s2, "allowed.test", a4), 0);
	/* One more question a while later says how many were dropped. */
	bool said = false;
	for (int64_t until = mono_ms() + WAIT_MS; !said && mono_ms() < until;) {
		sendto(fd, q, sizeof(q), 0, (struct sockaddr *)&a, sizeof(a));
		struct pollfd p = {.fd = -1};
		poll(&p, 0, 100);
		pthread_mutex_lock(&T.mu);
		for (size_t i = 0; i < T.n_recs; i++)
			said = said || strstr(T.recs[i].reason, "DNS rate bound");
		pthread_mutex_unlock(&T.mu);
	}
	assert_true(said);
	/* The burst (200) and the rate since, the allowed name's record and
	 * the one of the dropped: not a record per packet. */
	assert_true(n_recs_of("dns") <= 200 + (size_t)(mono_ms() - t0) / 10 + 3);
	close(fd);
}

static void live_rule_change(void **state)
{
	struct fx *f = *state;
	char ans[256];
	gw_start(&base);
	f->s = open_session("t1", "allowed.test");
	http_to(f->s, ALLOWED_IP, "allowed.test", ans, sizeof(ans));
	assert_string_equal(ans, "ID " ALLOWED_IP "\n");
	struct sbx_egress_rules *r = rules("other.test");
	sbx_egress_gateway_set_rules(T.g, "t1", r);
	sbx_egress_rules_unref(&r);
	http_to(f->s, ALLOWED_IP, "allowed.test", ans, sizeof(ans));
	assert_string_equal(ans, "");
	http_to(f->s, ALLOWED_IP, "other.test", ans, sizeof(ans));
	assert_string_equal(ans, "ID " OTHER_IP "\n");
}

static void command_bound(void **state)
{
	struct fx *f = *state;
	struct sbx_egress_config c = base;
	c.first_byte_ms = c.hello_ms = 10000;
	c.command_conn_per_s = 1000;
	c.tenant_pending = 1000;
	gw_start(&c);
	f->s = open_session("t1", "allowed.test");
	int fds[65];
	for (int i = 0; i < 65; i++)
		fds[i] = sbx_connect(f->s, ALLOWED_IP, 80);
	struct rec r = wait_rec("tcp", ALLOWED_IP ":80");
	assert_false(r.allowed);
	assert_string_equal(r.reason, "too many connections of this command (64)");
	char b;
	assert_true(read(fds[64], &b, 1) <= 0); /* reset */
	struct pollfd p = {.fd = fds[0], .events = POLLIN};
	assert_int_equal(poll(&p, 1, 0), 0); /* the others wait for their bytes */
	for (int i = 0; i < 65; i++)
		close(fds[i]);
}

/* The command's rate (burst twice), then the tenant's undecided bound,
 * which another command of the tenant meets. */
static void rate_and_pending_bounds(void **state)
{
	struct fx *f = *state;
	struct sbx_egress_config c = base;
	c.first_byte_ms = c.hello_ms = 10000;
	c.tenant_pending = 2;
	c.command_conn_per_s = 1;
	gw_start(&c);
	f->s = open_session("t1", "allowed.test");
	f->s2 = open_session("t1", "allowed.test");
	int fds[4];
	fds[0] = sbx_connect(f->s, ALLOWED_IP, 80);
	fds[1] = sbx_connect(f->s, ALLOWED_IP, 80);
	fds[2] = sbx_connect(f->s, ALLOWED_IP, 80);
	assert_string_equal(wait_rec("tcp", ALLOWED_IP ":80").reason,
			    "too many new connections of this command per second (1)");
	fds[3] = sbx_connect(f->s2, ALLOWED_IP, 80);
	assert_string_equal(wait_rec("tcp", ALLOWED_IP ":80").reason,
			    "too many undecided connections of this tenant (2)");
	for (size_t i = 0; i < 4; i++)
		close(fds[i]);
}

static void slow_hello(void **state)
{
	struct fx *f = *state;
	struct sbx_egress_config c = base;
	c.threads = 1; /* one loop: the slow one and the other share it */
	c.hello_ms = 300;
	gw_start(&c);
	f->s = open_session("t1", "allowed.test");
	f->s2 = open_session("t2", "allowed.test");
	uint8_t hello[4096];
	client_hello("allowed.test", hello, sizeof(hello));
	int slow = sbx_connect(f->s, ALLOWED_IP, 443);
	int64_t t0 = mono_ms();
	write_all(slow, hello, 20);
	char ans[256];
	http_to(f->s2, ALLOWED_IP, "allowed.test", ans, sizeof(ans));
	assert_string_equal(ans, "ID " ALLOWED_IP "\n");
	if (mono_ms() - t0 < 250) { /* the other went through meanwhile */
		struct pollfd p = {.fd = slow, .events = POLLIN};
		assert_int_equal(poll(&p, 1, 0), 0);
	}
	struct rec r = wait_rec("tls", ALLOWED_IP ":443");
	assert_false(r.allowed);
	assert_string_equal(r.reason, "no complete ClientHello or request head within 300 ms");
	assert_true(r.ended - r.started >= 290);
	char b;
	assert_true(read(slow, &b, 1) <= 0);
	close(slow);
}

/* 1 MiB for port 9000: a ClientHello for allowed.test, then filler. */
static const uint8_t *mib_upload(void)
{
	static uint8_t up[MIB];
	size_t n = client_hello("allowed.test", up, sizeof(up));
	memset(up + n, 'u', MIB - n);
	return up;
}

static void bytes_counted(void **state)
{
	struct fx *f = *state;
	gw_start(&base);
	f->s = open_session("t1", "allowed.test");
	int fd = sbx_connect(f->s, ALLOWED_IP, 9000);
	write_all(fd, mib_upload(), MIB);
	uint64_t down = 0;
	read_to_eof(fd, &down);
	close(fd);
	assert_int_equal(down, MIB);
	struct rec r = wait_rec("tls", ALLOWED_IP ":9000");
	assert_true(r.allowed);
	assert_false(r.has_reason);
	assert_int_equal(r.up, MIB);
	assert_int_equal(r.down, MIB);
}

/* A reader far behind its upstream: the pipe holds data when the
 * upstream's EOF reaches the gateway, and the EOF is passed on only after
 * every byte before it (the relay fills while the sandbox's side is full). */
static void slow_reader_every_byte(void **state)
{
	struct fx *f = *state;
	gw_start(&base);
	f->s = open_session("t1", "allowed.test");
	struct sockaddr_storage a;
	socklen_t len = sockaddr_of(ALLOWED_IP, 9000, &a);
	int fd = sbx_socket6(f->s, a.ss_family, SOCK_STREAM);
	int small = 4096;
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, len), 0);
	write_all(fd, mib_upload(), MIB);
	uint64_t down = 0;
	char b[4096];
	ssize_t r;
	while ((r = read(fd, b, sizeof(b))) > 0) {
		for (ssize_t i = 0; i < r; i++)
			assert_int_equal(b[i], 'd');
		down += (uint64_t)r;
	}
	close(fd);
	assert_int_equal(down, MIB);
	struct rec rr = wait_rec("tls", ALLOWED_IP ":9000");
	assert_true(rr.allowed);
	assert_int_equal(rr.down, MIB);
}

/* UDP other than DNS goes nowhere and is recorded (QUIC by its port). */
static void udp_dropped(void **state)
{
	struct fx *f = *state;
	gw_start(&base);
	f->s = open_session("t1", "allowed.test");
	int fd = sbx_socket(f->s, SOCK_DGRAM);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(443)};
	inet_pton(AF_INET, ALLOWED_IP, &a.sin_addr);
	sendto(fd, "q", 1, 0, (struct sockaddr *)&a, sizeof(a));
	close(fd);
	struct rec r = wait_rec("udp", ALLOWED_IP ":443");
	assert_false(r.allowed);
	assert_string_equal(r.reason, "QUIC refused; use TCP");
}

/* A connection still open when the command ends: ended, recorded healthy
 * with its bytes. */
static void close_ends_open(void **state)
{
	struct fx *f = *state;
	gw_start(&base);
	f->s = open_session("t1", "allowed.test");
	uint8_t hello[4096];
	size_t n = client_hello("allowed.test", hello, sizeof(hello));
	int fd = sbx_connect(f->s, ALLOWED_IP, 443);
	write_all(fd, hello, n);
	char ans[64] = "";
	assert_true(read(fd, ans, sizeof(ans) - 1) > 0);
	assert_string_equal(ans, "ID " ALLOWED_IP "\n");
	struct sbx_egress_summary sum;
	sbx_egress_session_close(&f->s, &sum);
	struct rec r = wait_rec("tls", ALLOWED_IP ":443");
	assert_true(r.allowed);
	assert_false(r.has_reason);
	assert_int_equal(r.up, n);
	assert_int_equal(r.down, strlen(ans));
	assert_int_equal(sum.allowed_total, 1);
	close(fd);
}

/* A host loopback port the rules grant reaches the server's own
 * 127.0.0.1; without the grant the sandbox's loopback is its own. */
static void loopback_grant(void **state)
{
	struct fx *f = *state;
	gw_start(&base);
	int lfd = listen_on("127.0.0.1", 18080);
	assert_true(lfd >= 0);
	f->s = open_session("t1", "127.0.0.1:18080");
	int fd = sbx_connect(f->s, "127.0.0.1", 18080);
	int up = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(up >= 0);
	write_all(up, "ID lo\n", 6);
	close(up);
	char ans[64];
	exchange(fd, "", 0, ans, sizeof(ans));
	assert_string_equal(ans, "ID lo\n");
	assert_true(wait_rec("tcp", "127.0.0.1:18080").allowed);
	/* Rules without it: the next connection stays in the sandbox. */
	struct sbx_egress_rules *r = rules("allowed.test");
	sbx_egress_gateway_set_rules(T.g, "t1", r);
	sbx_egress_rules_unref(&r);
	fd = sbx_socket(f->s, SOCK_STREAM);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(18080)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	int rc = -1;
	for (int64_t until = mono_ms() + WAIT_MS; mono_ms() < until;) {
		/* The namespace's sets change on the worker pool: soon, not now. */
		rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
		if (rc < 0)
			break;
		close(fd);
		wait_rec("tcp", "127.0.0.1:18080");
		fd = sbx_socket(f->s, SOCK_STREAM);
	}
	assert_int_equal(rc, -1);
	assert_int_equal(errno, ECONNREFUSED);
	close(fd);
	close(lfd);
}

static void health_without_default_route(void **state)
{
	(void)state;
	gw_start(&base);
	char msg[256];
	/* The test's namespace has only the veth's subnets, no default route:
	 * enough, a host may reach only its own networks. */
	assert_int_equal(sbx_egress_gateway_health(T.g, msg, sizeof(msg)), 0);
	assert_non_null(strstr(msg, "IPv4 and IPv6"));
}

static void stop_world(void)
{
	if (T.up_stop[1] > 0) {
		write_all(T.up_stop[1], "s", 1);
		pthread_join(T.up_thr, NULL);
	}
	if (T.dir[0]) {
		umount("/etc/hosts");
		umount("/etc/nsswitch.conf");
		unit_rm_rf(T.dir);
	}
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN); /* writes to the connections the gateway resets */
	T.ready = setup_world() == 0;
	if (!T.ready)
		fprintf(stderr, "test_gateway: skipped: %s\n", T.why);
	const struct CMUnitTest tests[] = {
	    UNIT_TEST_FX(http_by_host),
	    UNIT_TEST_FX(tls_by_sni),
	    UNIT_TEST_FX(private_answer_refused),
	    UNIT_TEST_FX(dns_then_name),
	    UNIT_TEST_FX(live_rule_change),
	    UNIT_TEST_FX(command_bound),
	    UNIT_TEST_FX(rate_and_pending_bounds),
	    UNIT_TEST_FX(slow_hello),
	    UNIT_TEST_FX(bytes_counted),
	    UNIT_TEST_FX(slow_reader_every_byte),
	    UNIT_TEST_FX(http_second_host),
	    UNIT_TEST_FX(half_close),
	    UNIT_TEST_FX(http_by_host6),
	    UNIT_TEST_FX(udp_dropped),
	    UNIT_TEST_FX(close_ends_open),
	    UNIT_TEST_FX(dns_flood),
	    UNIT_TEST_FX(loopback_grant),
	    UNIT_TEST_FX(health_without_default_route),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	stop_world();
	return rc;
}
