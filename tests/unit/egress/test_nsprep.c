/* The egress namespace (sandbox/egress/nsprep.h): what a sandboxed
 * program in it can reach, seen from a child process that joined it.
 * Every address is inside the namespace (TEST-NET and documentation
 * ranges on its dummy, which delivers nothing); each child checks that
 * the namespace has no other interface or route before its first packet. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "unit.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <net/if.h> /* before the kernel headers: glibc first */
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/errors.h"
#include "sandbox/egress/nsprep.h"

#define WAIT_MS 3000
/* A check in the child: its line goes back to the test when it fails. */
#define CHECK(c)                                                                                             \
	do {                                                                                                 \
		if (!(c))                                                                                    \
			return __LINE__;                                                                     \
	} while (0)

union addr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
};

static bool need_root(void)
{
	if (geteuid() == 0)
		return true;
	print_message("skipped: making network namespaces needs root\n");
	return false;
}

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static bool readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1;
}

static union addr sockaddr_of(const char *text, uint16_t port)
{
	union addr u = {0};

	if (inet_pton(AF_INET, text, &u.in.sin_addr) == 1) {
		u.in.sin_family = AF_INET;
		u.in.sin_port = htons(port);
	} else {
		u.in6.sin6_family = AF_INET6;
		u.in6.sin6_port = htons(port);
		inet_pton(AF_INET6, text, &u.in6.sin6_addr);
	}
	return u;
}

static socklen_t len_of(const union addr *u)
{
	return u->sa.sa_family == AF_INET ? sizeof(u->in) : sizeof(u->in6);
}

/* ---- in the namespace ---- */

typedef int (*child_fn)(const struct sbx_egress_ns *ns, const void *arg);

/* fn in a child process that joined ns: 0, or the line of the check
 * that failed there (and its errno, printed). */
static int in_ns(const struct sbx_egress_ns *ns, child_fn fn, const void *arg)
{
	int p[2], res[2] = {-1, 0};
	pid_t pid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		errno = 0;
		res[0] = setns(ns->netns, CLONE_NEWNET) < 0 ? __LINE__ : fn(ns, arg);
		res[1] = errno;
		if (write(p[1], res, sizeof(res)) != sizeof(res))
			_exit(1);
		_exit(0);
	}
	close(p[1]);
	if (read(p[0], res, sizeof(res)) != sizeof(res))
		res[0] = -1;
	close(p[0]);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	if (res[0])
		print_message("in the namespace: check at line %d failed (errno: %s)\n", res[0],
			      strerror(res[1]));
	return res[0];
}

static bool is_up(const char *name)
{
	struct ifreq ifr = {0};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	bool up;

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	up = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_UP);
	if (fd >= 0)
		close(fd);
	return up;
}

/* Every route of the table in path (its device in column dev_col) is
 * on lo or egress0, and one is the default through egress0. */
static int routes_ours(const char *path, unsigned dev_col, const char *default_prefix)
{
	char line[512], whole[512];
	bool dflt = false;
	FILE *f = fopen(path, "re");

	CHECK(f);
	while (fgets(line, sizeof(line), f)) {
		char *save = NULL, *col, *dev = NULL;

		memcpy(whole, line, sizeof(whole));
		col = strtok_r(line, " \t\n", &save);

		for (unsigned i = 0; col; i++, col = strtok_r(NULL, " \t\n", &save)) {
			if (i == dev_col)
				dev = col;
		}
		if (!dev || !strcmp(dev, "Iface"))
			continue;
		CHECK(!strcmp(dev, "lo") || !strcmp(dev, "egress0"));
		dflt |= !strcmp(dev, "egress0") && !strncmp(whole, default_prefix, strlen(default_prefix));
	}
	fclose(f);
	CHECK(dflt);
	return 0;
}

/* Nothing here leads out: only lo and the dummy, both up, and every
 * route through one of them. Called before a child's first packet. */
static int only_ours(const struct sbx_egress_ns *ns)
{
	struct if_nameindex *ifs = if_nameindex();
	size_t n = 0;
	int rc;

	CHECK(ifs);
	for (; ifs[n].if_name; n++)
		CHECK(!strcmp(ifs[n].if_name, "lo") || !strcmp(ifs[n].if_name, "egress0"));
	if_freenameindex(ifs);
	CHECK(n == 2);
	CHECK(is_up("lo") && is_up("egress0"));
	/* /proc/net/route: Iface first, Destination second. */
	if ((rc = routes_ours("/proc/net/route", 0, "egress0\t00000000")))
		return rc;
	/* /proc/net/ipv6_route: destination and prefix first, device last. */
	if (ns->tcp6 >= 0 &&
	    (rc = routes_ours("/proc/net/ipv6_route", 9, "00000000000000000000000000000000 00")))
		return rc;
	return 0;
}

static int no_way_out(const struct sbx_egress_ns *ns, const void *arg)
{
	return only_ours(ns);
}

/* A blocking connect that gives up after WAIT_MS. The socket, or -1. */
static int connect_to(const char *text, uint16_t port)
{
	union addr u = sockaddr_of(text, port);
	struct timeval tv = {WAIT_MS / 1000, 0};
	int fd = socket(u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, &u.sa, len_of(&u)) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* The connection waiting on listener lfd, and where it was going. */
static int accept_original(int lfd, union addr *orig)
{
	socklen_t len = sizeof(*orig);
	int fd;

	CHECK(readable(lfd, WAIT_MS));
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	CHECK(fd >= 0);
	memset(orig, 0, sizeof(*orig));
	if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &orig->in, &len) < 0) {
		len = sizeof(*orig);
		CHECK(getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &orig->in6, &len) == 0);
	}
	close(fd);
	return 0;
}

static bool same(const union addr *u, const char *text, uint16_t port)
{
	union addr want = sockaddr_of(text, port);

	if (u->sa.sa_family != want.sa.sa_family)
		return false;
	if (u->sa.sa_family == AF_INET)
		return u->in.sin_port == want.in.sin_port && u->in.sin_addr.s_addr == want.in.sin_addr.s_addr;
	return u->in6.sin6_port == want.in6.sin6_port &&
	       !memcmp(&u->in6.sin6_addr, &want.in6.sin6_addr, sizeof(want.in6.sin6_addr));
}

struct dest {
	const char *addr;
	uint16_t port;
	bool v6;
};

/* A connect to d lands on the gateway's listener, which sees d. */
static int redirected(const struct sbx_egress_ns *ns, const void *arg)
{
	const struct dest *d = arg;
	union addr orig;
	int fd, rc;

	if ((rc = only_ours(ns)))
		return rc;
	fd = connect_to(d->addr, d->port);
	CHECK(fd >= 0);
	if ((rc = accept_original(d->v6 ? ns->tcp6 : ns->tcp4, &orig)))
		return rc;
	close(fd);
	CHECK(same(&orig, d->addr, d->port));
	return 0;
}

/* A connect to d goes where the sandbox sent it: to its own listener
 * when there is one (lfd), else refused, never to the gateway. */
static int not_redirected(const struct sbx_egress_ns *ns, const void *arg)
{
	const struct dest *d = arg;
	union addr u = sockaddr_of(d->addr, d->port);
	int one = 1, lfd, fd, rc;

	if ((rc = only_ours(ns)))
		return rc;
	lfd = socket(u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(lfd >= 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(bind(lfd, &u.sa, len_of(&u)) == 0 && listen(lfd, 4) == 0);
	fd = connect_to(d->addr, d->port);
	CHECK(fd >= 0);
	CHECK(readable(lfd, WAIT_MS));
	close(fd);
	close(lfd);
	/* No listener: refused at once, not taken by the gateway. */
	fd = connect_to(d->addr, d->port);
	CHECK(fd < 0 && errno == ECONNREFUSED);
	CHECK(!readable(d->v6 ? ns->tcp6 : ns->tcp4, 0));
	return 0;
}

/* ---- the tests ---- */

static void make(struct sbx_egress_ns *ns)
{
	char err[256] = "";

	if (sbx_egress_ns_make(ns, err, sizeof(err)) < 0)
		fail_msg("sbx_egress_ns_make: %s", err);
}

static ino_t my_netns(void)
{
	struct stat st;

	assert_int_equal(stat("/proc/thread-self/ns/net", &st), 0);
	return st.st_ino;
}

static void assert_gw_fd(int fd)
{
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
}

static void test_make(void **state)
{
	struct sbx_egress_ns ns;
	ino_t before;
	int64_t t0, best = INT64_MAX, sum = 0;

	if (!need_root())
		skip();
	before = my_netns();
	for (int i = 0; i < 10; i++) {
		t0 = now_us();
		make(&ns);
		t0 = now_us() - t0;
		sum += t0;
		best = t0 < best ? t0 : best;
		/* The making thread is back home. */
		assert_true(my_netns() == before);
		assert_gw_fd(ns.tcp4);
		assert_gw_fd(ns.dns4);
		assert_gw_fd(ns.nflog);
		if (access("/proc/sys/net/ipv6", F_OK) == 0) {
			assert_gw_fd(ns.tcp6);
			assert_gw_fd(ns.dns6);
		}
		assert_int_equal(in_ns(&ns, no_way_out, NULL), 0);
		sbx_egress_ns_close(&ns);
		assert_int_equal(ns.netns, -1);
	}
	print_message("make: %.2f ms mean, %.2f ms best of 10\n", (double)sum / 10000, (double)best / 1000);
}

/* fn in a new namespace for d4, and for d6 when the host has IPv6. */
static void in_both(child_fn fn, const struct dest *d4, const struct dest *d6)
{
	struct sbx_egress_ns ns;

	make(&ns);
	assert_int_equal(in_ns(&ns, fn, d4), 0);
	if (ns.tcp6 >= 0)
		assert_int_equal(in_ns(&ns, fn, d6), 0);
	sbx_egress_ns_close(&ns);
}

static void test_tcp_redirected(void **state)
{
	const struct dest d4 = {"198.51.100.7", 443, false}, d6 = {"2001:db8::7", 443, true};

	if (!need_root())
		skip();
	in_both(redirected, &d4, &d6);
}

static void test_loopback(void **state)
{
	struct sbx_egress_ns ns;
	const struct dest own4 = {"127.0.0.1", 8080, false}, own6 = {"::1", 8080, true};
	const struct dest other4 = {"127.0.0.1", 8081, false}, other6 = {"::1", 8081, true};
	const uint16_t grant[][2] = {{8080, 8080}, {9000, 9010}}, bad[][2] = {{9010, 9000}};
	char err[256] = "";
	bool v6;

	if (!need_root())
		skip();
	make(&ns);
	v6 = ns.tcp6 >= 0;
	/* The sandbox's own loopback is its own. */
	assert_int_equal(in_ns(&ns, not_redirected, &own4), 0);
	if (v6)
		assert_int_equal(in_ns(&ns, not_redirected, &own6), 0);
	/* A granted host loopback port goes to the gateway; the others stay. */
	assert_int_equal(sbx_egress_ns_loopback(&ns, grant, 2, grant, 2, err, sizeof(err)), 0);
	assert_int_equal(in_ns(&ns, redirected, &own4), 0);
	assert_int_equal(in_ns(&ns, not_redirected, &other4), 0);
	if (v6) {
		assert_int_equal(in_ns(&ns, redirected, &own6), 0);
		assert_int_equal(in_ns(&ns, not_redirected, &other6), 0);
	}
	/* The sets are replaced, not added to. */
	assert_int_equal(sbx_egress_ns_loopback(&ns, NULL, 0, NULL, 0, err, sizeof(err)), 0);
	assert_int_equal(in_ns(&ns, not_redirected, &own4), 0);
	assert_int_equal(sbx_egress_ns_loopback(&ns, bad, 1, NULL, 0, err, sizeof(err)), -SBX_E_BACKEND);
	assert_true(strstr(err, "loopback ports: ") == err && strlen(err) > 16);
	sbx_egress_ns_close(&ns);
}

/* A query to port 53 of text reaches the gateway's DNS socket gw, and
 * the answer comes back to fd from where it was sent. */
static int dns_answered(int fd, int gw, const char *text)
{
	union addr dns = sockaddr_of(text, 53), peer, from;
	socklen_t len = sizeof(peer);
	char c = 0;

	CHECK(sendto(fd, "q", 1, 0, &dns.sa, len_of(&dns)) == 1);
	CHECK(readable(gw, WAIT_MS));
	CHECK(recvfrom(gw, &c, 1, 0, &peer.sa, &len) == 1 && c == 'q');
	CHECK(sendto(gw, "a", 1, 0, &peer.sa, len) == 1);
	len = sizeof(from);
	CHECK(readable(fd, WAIT_MS));
	CHECK(recvfrom(fd, &c, 1, 0, &from.sa, &len) == 1 && c == 'a' && same(&from, text, 53));
	return 0;
}

/* The next NFLOG message names text:port. */
static int logged(int nflog, const char *text, uint16_t port)
{
	char buf[4096];
	uint8_t addr[16], want[16];
	uint16_t got = 0;
	int family = 0;
	ssize_t n;

	CHECK(readable(nflog, WAIT_MS));
	n = recv(nflog, buf, sizeof(buf), 0);
	CHECK(n > 0);
	CHECK(sbx_egress_nflog_parse(buf, (size_t)n, &family, addr, &got) == 0);
	CHECK(inet_pton(family, text, want) == 1);
	CHECK(got == port && !memcmp(addr, want, family == AF_INET ? 4 : 16));
	return 0;
}

/* DNS to d is answered by the gateway; a datagram to port 443 of d
 * reaches nothing and is logged with its destination. */
static int udp_paths(const struct sbx_egress_ns *ns, const void *arg)
{
	const struct dest *d = arg;
	union addr other = sockaddr_of(d->addr, 443), any = sockaddr_of(d->v6 ? "::" : "0.0.0.0", 443);
	int fd, sink, rc;

	if ((rc = only_ours(ns)))
		return rc;
	fd = socket(other.sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	if ((rc = dns_answered(fd, d->v6 ? ns->dns6 : ns->dns4, d->addr)))
		return rc;
	/* Something listening on port 443 here would be where it leaked. */
	sink = socket(any.sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(sink >= 0 && bind(sink, &any.sa, len_of(&any)) == 0);
	/* Dropped on the way out: the sender may be told (EPERM). */
	CHECK(sendto(fd, "x", 1, 0, &other.sa, len_of(&other)) == 1 || errno == EPERM);
	if ((rc = logged(ns->nflog, d->addr, 443)))
		return rc;
	CHECK(!readable(sink, 0) && !readable(d->v6 ? ns->dns6 : ns->dns4, 0));
	close(sink);
	close(fd);
	return 0;
}

/* A flood of refused datagrams is logged at the filter's rate (50 a
 * second after a burst of 5), not one message each. */
static int udp_flood(const struct sbx_egress_ns *ns, const void *arg)
{
	union addr other = sockaddr_of("198.51.100.7", 443);
	char buf[4096];
	int64_t t0;
	unsigned n = 0;
	int fd, rc;

	if ((rc = only_ours(ns)))
		return rc;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	t0 = now_us();
	for (int i = 0; i < 500; i++)
		CHECK(sendto(fd, "x", 1, 0, &other.sa, sizeof(other.in)) == 1 || errno == EPERM);
	t0 = now_us() - t0;
	/* Logging is done before sendto returns: what is there is all. */
	for (; readable(ns->nflog, 0); n++)
		CHECK(recv(ns->nflog, buf, sizeof(buf), 0) > 0);
	close(fd);
	CHECK(n >= 1 && n <= 5 + 50 * (unsigned)(t0 / 1000000 + 1));
	return 0;
}

static void test_udp(void **state)
{
	const struct dest d4 = {"198.51.100.7", 0, false}, d6 = {"2001:db8::7", 0, true};

	if (!need_root())
		skip();
	in_both(udp_paths, &d4, &d6);
}

static void test_udp_flood(void **state)
{
	struct sbx_egress_ns ns;

	if (!need_root())
		skip();
	make(&ns);
	assert_int_equal(in_ns(&ns, udp_flood, NULL), 0);
	sbx_egress_ns_close(&ns);
}

/* An ICMP echo is refused on the way out (the sender is told at once). */
static int icmp_refused(const struct sbx_egress_ns *ns, const void *arg)
{
	union addr to = sockaddr_of("198.51.100.7", 0);
	struct icmphdr echo = {.type = ICMP_ECHO};
	int fd, rc;

	if ((rc = only_ours(ns)))
		return rc;
	fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
	CHECK(fd >= 0);
	echo.checksum = htons((uint16_t) ~(ICMP_ECHO << 8));
	CHECK(sendto(fd, &echo, sizeof(echo), 0, &to.sa, sizeof(to.in)) < 0 && errno == EPERM);
	close(fd);
	return 0;
}

static void test_icmp_refused(void **state)
{
	struct sbx_egress_ns ns;

	if (!need_root())
		skip();
	make(&ns);
	assert_int_equal(in_ns(&ns, icmp_refused, NULL), 0);
	sbx_egress_ns_close(&ns);
}

/* An NFLOG packet message of the IPv4 packet ip (n bytes) into buf. */
static size_t nflog_msg(char *buf, int family, const uint8_t *ip, size_t n)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct nfgenmsg *nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
	uint8_t hdr[4] = {0x08, 0x00, 2, 0};

	nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
	nfg->nfgen_family = (uint8_t)family;
	mnl_attr_put(nlh, NFULA_PACKET_HDR, sizeof(hdr), hdr);
	mnl_attr_put(nlh, NFULA_PAYLOAD, n, ip);
	return nlh->nlmsg_len;
}

static void test_nflog_parse(void **state)
{
	/* IPv4, UDP, 192.0.2.1 -> 198.51.100.7, 5000 -> 443 */
	uint8_t ip[28] = {0x45, 0, 0,	28, 0,	 0, 0x40, 0,	64,   17,   0, 0, 192, 0,
			  2,	1, 198, 51, 100, 7, 0x13, 0x88, 0x01, 0xbb, 0, 8, 0,   0};
	/* IPv6 with a destination options header before UDP to port 53 */
	uint8_t ip6[56] = {
	    0x60, [6] = 60, [24] = 0x20, 0x01, 0x0d, 0xb8, [39] = 7, [40] = 17, 0, [50] = 0, 53};
	char buf[512];
	uint8_t addr[16];
	uint16_t port;
	int family;
	size_t len = nflog_msg(buf, AF_INET, ip, sizeof(ip));

	assert_int_equal(sbx_egress_nflog_parse(buf, len, &family, addr, &port), 0);
	assert_int_equal(family, AF_INET);
	assert_int_equal(port, 443);
	assert_memory_equal(addr, ((uint8_t[]){198, 51, 100, 7}), 4);
	/* Any shorter read is refused, whatever the header claims. */
	for (size_t n = 0; n < len; n++)
		assert_int_equal(sbx_egress_nflog_parse(buf, n, &family, addr, &port), -EINVAL);
	/* A header longer than the packet, a later fragment, not UDP. */
	ip[0] = 0x4f;
	assert_int_equal(
	    sbx_egress_nflog_parse(buf, nflog_msg(buf, AF_INET, ip, sizeof(ip)), &family, addr, &port),
	    -EINVAL);
	ip[0] = 0x45;
	ip[7] = 1;
	assert_int_equal(
	    sbx_egress_nflog_parse(buf, nflog_msg(buf, AF_INET, ip, sizeof(ip)), &family, addr, &port),
	    -EINVAL);
	ip[7] = 0;
	ip[9] = 6;
	assert_int_equal(
	    sbx_egress_nflog_parse(buf, nflog_msg(buf, AF_INET, ip, sizeof(ip)), &family, addr, &port),
	    -EINVAL);
	/* A family that does not match the packet. */
	ip[9] = 17;
	assert_int_equal(
	    sbx_egress_nflog_parse(buf, nflog_msg(buf, AF_INET6, ip, sizeof(ip)), &family, addr, &port),
	    -EINVAL);
	/* IPv6 through its extension header; then one that runs past the end. */
	len = nflog_msg(buf, AF_INET6, ip6, sizeof(ip6));
	assert_int_equal(sbx_egress_nflog_parse(buf, len, &family, addr, &port), 0);
	assert_int_equal(family, AF_INET6);
	assert_int_equal(port, 53);
	assert_int_equal(addr[15], 7);
	ip6[41] = 255;
	len = nflog_msg(buf, AF_INET6, ip6, sizeof(ip6));
	assert_int_equal(sbx_egress_nflog_parse(buf, len, &family, addr, &port), -EINVAL);
	/* Mutations of a good message, in allocations of exactly their
	 * length: refused or parsed, never read past it (ASan). */
	ip6[41] = 0;
	len = nflog_msg(buf, AF_INET6, ip6, sizeof(ip6));
	srand(29);
	for (int i = 0; i < 20000; i++) {
		size_t n = (size_t)rand() % (len + 1);
		uint8_t *m = malloc(n ? n : 1);

		memcpy(m, buf, n);
		for (int k = rand() % 4; k >= 0 && n; k--)
			m[(size_t)rand() % n] = (uint8_t)rand();
		sbx_egress_nflog_parse(m, n, &family, addr, &port);
		free(m);
	}
}

static unsigned count_dir(const char *path)
{
	DIR *d = opendir(path);
	unsigned n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Wait until path has n entries. */
static bool wait_count(const char *path, unsigned n)
{
	int64_t deadline = now_us() + WAIT_MS * 1000;

	while (count_dir(path) != n) {
		if (now_us() > deadline)
			return false;
		poll(NULL, 0, 5);
	}
	return true;
}

/* The fds of one namespace. */
static unsigned ns_fds(void)
{
	return access("/proc/sys/net/ipv6", F_OK) == 0 ? 6 : 4;
}

static void test_pool(void **state)
{
	unsigned fds0, tasks0, per_ns;
	struct sbx_egress_nspool *p;
	struct sbx_egress_ns ns[4];
	char err[256] = "";
	int64_t t;

	if (!need_root())
		skip();
	fds0 = count_dir("/proc/self/fd");
	tasks0 = count_dir("/proc/self/task");
	per_ns = ns_fds();
	p = sbx_egress_nspool_new(2);
	/* More than are ready: the rest are made on this thread. */
	for (int i = 0; i < 3; i++)
		assert_int_equal(sbx_egress_nspool_take(p, &ns[i], err, sizeof(err)), 0);
	assert_true(ns[0].netns != ns[1].netns && ns[1].netns != ns[2].netns);
	/* Refilled off this thread: 3 taken and 2 ready. */
	assert_true(wait_count("/proc/self/fd", fds0 + 5 * per_ns));
	t = now_us();
	assert_int_equal(sbx_egress_nspool_take(p, &ns[3], err, sizeof(err)), 0);
	t = now_us() - t;
	print_message("take from a full pool: %.3f ms\n", (double)t / 1000);
	assert_int_equal(in_ns(&ns[3], no_way_out, NULL), 0);
	for (int i = 0; i < 4; i++)
		sbx_egress_ns_close(&ns[i]);
	sbx_egress_nspool_free(&p);
	assert_null(p);
	sbx_egress_nspool_free(&p);
	assert_int_equal(count_dir("/proc/self/fd"), fds0);
	assert_true(wait_count("/proc/self/task", tasks0));
}

static void test_probe(void **state)
{
	char msg[256] = "";

	if (!need_root())
		skip();
	assert_int_equal(sbx_egress_ns_probe(msg, sizeof(msg)), 0);
	assert_string_equal(msg, "in-process namespaces (netlink, libnftables)");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_make),	cmocka_unit_test(test_tcp_redirected),
	    cmocka_unit_test(test_loopback),	cmocka_unit_test(test_udp),
	    cmocka_unit_test(test_udp_flood),	cmocka_unit_test(test_icmp_refused),
	    cmocka_unit_test(test_nflog_parse), cmocka_unit_test(test_pool),
	    cmocka_unit_test(test_probe),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
