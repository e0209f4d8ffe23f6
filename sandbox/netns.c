/* One command's network namespace: made by the server, filtered with nft,
 * connected by pasta, torn down when the command is reaped. See
 * sandbox/network.h for what the sandbox can reach and why. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/xmalloc.h"
#include "sandbox/backend_impl.h"
#include "sandbox/cgroup.h"
#include "sandbox/netplan.h"

#define PASTA_PATH "/usr/bin/pasta"
#define NFT_PATH "/usr/sbin/nft"
#define PASTA_READY_MS 2000
#define NET_TEXT_MAX (1u << 20)
#define HOSTS_BASE "127.0.0.1\tlocalhost\n::1\tlocalhost\n"

struct sbx_netns {
	int fd; /* the namespace */
	pid_t pasta;
	int pasta_pidfd;
	char *hosts;
	/* pasta's group (sbx_cgroup_helper_prepare), NULL: none */
	char *cg_root;
	uid_t cg_uid;
	uint64_t cg_seq;
	int cg_fds[SBX_CGROUP_MAX];
	int n_cg_fds;
};

/* ---- names ---- */

/* Lookups still running when their deadline passed: glibc may still
 * write into them, so they are freed only once it is done (checked at
 * the next command with network; one still running at exit goes with
 * the process). */
struct lookup {
	struct gaicb cb;
	struct addrinfo hints;
	struct lookup *next;
};
static pthread_mutex_t late_mu = PTHREAD_MUTEX_INITIALIZER;
static struct lookup *late;

static void free_lookup(struct lookup *l)
{
	if (l->cb.ar_result)
		freeaddrinfo(l->cb.ar_result);
	free((char *)l->cb.ar_name);
	free(l);
}

static void late_add(struct lookup *l)
{
	pthread_mutex_lock(&late_mu);
	l->next = late;
	late = l;
	pthread_mutex_unlock(&late_mu);
}

static void late_collect(void)
{
	struct lookup **pp, *l;

	pthread_mutex_lock(&late_mu);
	for (pp = &late; (l = *pp);) {
		if (gai_error(&l->cb) == EAI_INPROGRESS) {
			pp = &l->next;
			continue;
		}
		*pp = l->next;
		free_lookup(l);
	}
	pthread_mutex_unlock(&late_mu);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for every lookup until the deadline. */
static void wait_lookups(struct gaicb **list, size_t n, unsigned ms)
{
	int64_t deadline = mono_ms() + ms;

	for (;;) {
		size_t busy = 0;
		int64_t left = deadline - mono_ms();
		struct timespec ts = {left / 1000, (left % 1000) * 1000000L};

		for (size_t i = 0; i < n; i++)
			busy += gai_error(list[i]) == EAI_INPROGRESS;
		if (!busy || left <= 0)
			return;
		gai_suspend((const struct gaicb *const *)list, (int)n, &ts);
	}
}

static bool covered(const struct sbx_net_allow *a, int family, const uint8_t *addr)
{
	for (size_t i = 0; i < a->n; i++) {
		if (sbx_net_covers(&a->e[i], family, addr))
			return true;
	}
	return false;
}

/* One resolved address of a's entry e: a destination and a hosts line.
 * An internal address (loopback, private, link-local, metadata) only
 * when a literal entry of a covers it, and then only the hosts line: the
 * literal entry says which ports; else neither (a name's owner must not
 * choose where on the host or its network a command connects). */
static void add_resolved(const struct sbx_net_allow *a, const struct sbx_net_entry *e,
			 const struct sockaddr *sa, struct sbx_net_allow *dest, struct buf *hosts)
{
	struct sbx_net_entry *d = &dest->e[dest->n];
	char text[INET6_ADDRSTRLEN];

	memset(d, 0, sizeof(*d));
	d->family = sa->sa_family;
	if (d->family == AF_INET)
		memcpy(d->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	else
		memcpy(d->addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	d->prefix = d->family == AF_INET ? 32 : 128;
	d->lo = e->lo;
	d->hi = e->hi;
	d->has_port = e->has_port;
	inet_ntop(d->family, d->addr, text, sizeof(text));
	if (sbx_net_is_internal(d->family, d->addr)) {
		if (!covered(a, d->family, d->addr))
			return;
		buf_appendf(hosts, "%s\t%s\n", text, e->name);
		return;
	}
	buf_appendf(hosts, "%s\t%s\n", text, e->name);
	dest->n++;
}

static void add_results(const struct sbx_net_allow *a, const struct sbx_net_entry *e,
			const struct addrinfo *ai, struct sbx_net_allow *dest, size_t cap, struct buf *hosts)
{
	for (; ai && dest->n < cap; ai = ai->ai_next) {
		if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6)
			add_resolved(a, e, ai->ai_addr, dest, hosts);
	}
}

/* dest gets the address entries of a, with its names resolved; hosts
 * the names' lines. Names that do not resolve in time are left out. */
static void resolve(const struct sbx_net_allow *a, unsigned ms, struct sbx_net_allow *dest, struct buf *hosts)
{
	struct lookup *lk[SBX_NET_ENTRIES_MAX];
	struct gaicb *list[SBX_NET_ENTRIES_MAX];
	size_t n = 0, cap = SBX_NET_ENTRIES_MAX * 16;

	late_collect();
	dest->e = xcalloc(cap, sizeof(*dest->e));
	for (size_t i = 0; i < a->n; i++) {
		if (a->e[i].family) {
			dest->e[dest->n] = a->e[i];
			dest->e[dest->n++].name = NULL;
			continue;
		}
		lk[n] = xcalloc(1, sizeof(*lk[n]));
		lk[n]->hints.ai_socktype = SOCK_STREAM;
		lk[n]->cb.ar_name = xstrdup(a->e[i].name);
		lk[n]->cb.ar_request = &lk[n]->hints;
		list[n] = &lk[n]->cb;
		n++;
	}
	/* When some could not be queued the others still run: each is
	 * judged by its own state below (one never queued reads as done
	 * without a result). */
	if (n)
		getaddrinfo_a(GAI_NOWAIT, list, (int)n, NULL);
	wait_lookups(list, n, ms);
	for (size_t i = 0, k = 0; i < a->n; i++) {
		if (a->e[i].family)
			continue;
		if (gai_error(&lk[k]->cb) == 0)
			add_results(a, &a->e[i], lk[k]->cb.ar_result, dest, cap, hosts);
		if (gai_error(&lk[k]->cb) == EAI_INPROGRESS && gai_cancel(&lk[k]->cb) != EAI_CANCELED)
			late_add(lk[k]);
		else
			free_lookup(lk[k]);
		k++;
	}
}

/* ---- helpers' processes ---- */

static int memfd_with(const char *name, const char *text)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	size_t len = text ? strlen(text) : 0, off = 0;

	if (fd < 0)
		return -errno;
	while (off < len) {
		ssize_t w = write(fd, text + off, len - off);

		if (w <= 0 && errno != EINTR) {
			close(fd);
			return -EIO;
		}
		off += w > 0 ? (size_t)w : 0;
	}
	lseek(fd, 0, SEEK_SET);
	return fd;
}

/* The first line a helper wrote to its stderr memfd, into err; pasta's
 * complaints that there is no syslog (it has none to log to here) are
 * skipped. */
static void first_line(int fd, const char *who, char *err, size_t errsz)
{
	static const char noise[] = "Failed to send ";
	char text[2048], *line;
	ssize_t n = pread(fd, text, sizeof(text) - 1, 0);

	text[n > 0 ? n : 0] = '\0';
	for (line = text; *line && strncmp(line, noise, sizeof(noise) - 1) == 0;) {
		char *nl = strchr(line, '\n');

		line = nl ? nl + 1 : line + strlen(line);
	}
	line[strcspn(line, "\n")] = '\0';
	snprintf(err, errsz, "%s failed%s%.200s", who, line[0] ? ": " : "", line);
}

/* A helper as root in the namespace: stdin from a memfd of text, stdout
 * discarded, stderr into errfd. */
static int helper_start(struct sbx_launch *l, int netns, const char *text, int errfd, pid_t *pid, int *pidfd)
{
	int in = memfd_with("net-in", text), devnull = open("/dev/null", O_WRONLY | O_CLOEXEC), rc;

	if (in < 0 || devnull < 0) {
		rc = in < 0 ? in : -errno;
	} else {
		l->std_fds[0] = in;
		l->std_fds[1] = devnull;
		l->std_fds[2] = errfd;
		l->netns_fd = netns;
		l->pdeathsig = true;
		rc = sbx_launch_start(l, pid, pidfd);
	}
	if (in >= 0)
		close(in);
	if (devnull >= 0)
		close(devnull);
	return rc;
}

/* nft loads the filter into the namespace while pasta starts (they do
 * not depend on each other; the command starts after both). */
struct nft_run {
	pid_t pid;
	int errfd;
	int rc;
};

static void nft_start(struct nft_run *r, int netns, const char *rules)
{
	struct sbx_launch l;
	int pidfd = -1;

	sbx_launch_init(&l);
	l.path = NFT_PATH;
	sbx_strv_add(&l.argv, "nft");
	sbx_strv_add(&l.argv, "-f");
	sbx_strv_add(&l.argv, "/dev/stdin");
	r->pid = -1;
	r->errfd = memfd_create("nft-err", MFD_CLOEXEC);
	r->rc = r->errfd < 0 ? -errno : helper_start(&l, netns, rules, r->errfd, &r->pid, &pidfd);
	if (pidfd >= 0)
		close(pidfd);
	sbx_launch_release(&l);
}

/* Wait for nft; 0 when the filter is in place, else -SBX_E_BACKEND
 * with its complaint in err (when err is still empty). */
static int nft_finish(struct nft_run *r, char *err, size_t errsz)
{
	int st = r->rc == 0 ? sbx_wait_status(r->pid) : -1, rc = 0;

	if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		if (!err[0] && r->rc < 0)
			snprintf(err, errsz, "nft could not start: %s", strerror(-r->rc));
		else if (!err[0])
			first_line(r->errfd, "nft", err, errsz);
		rc = -SBX_E_BACKEND;
	}
	if (r->errfd >= 0)
		close(r->errfd);
	return rc;
}

static void pasta_argv(struct sbx_strv *argv, const char *ports)
{
	static const char *const fixed[] = {
	    "pasta", "--quiet", "--foreground", "--runas", "0", "--pid", "/proc/self/fd/3",
	    /* the namespace gets the host's addresses and routes; the
	     * gateway is not the host, nothing is forwarded in */
	    "--config-net", "--no-map-gw", "--tcp-ports", "none", "--udp-ports", "none", "--udp-ns", "none",
	    "--no-udp", "--no-icmp", "--no-dhcp", "--no-dhcpv6", "--no-ra", "--no-netns-quit", "--netns",
	    "/proc/self/fd/4", "--tcp-ns"};

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		sbx_strv_add(argv, fixed[i]);
	sbx_strv_add(argv, ports);
}

/* pasta writes its pid file once the namespace is configured: wait for
 * that line (or its end) on the pipe. */
static int pasta_ready(int rfd)
{
	int64_t deadline = mono_ms() + PASTA_READY_MS;
	char c;

	for (;;) {
		struct pollfd p = {.fd = rfd, .events = POLLIN};
		int64_t left = deadline - mono_ms();
		ssize_t n;

		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
			return -errno;
		if (!(p.revents & (POLLIN | POLLHUP)))
			continue;
		n = read(rfd, &c, 1);
		if (n == 1 && c == '\n')
			return 0;
		if (n == 0)
			return -EPIPE;
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
	}
}

static int start_pasta(struct sbx_netns *ns, const char *ports, char *err, size_t errsz)
{
	struct sbx_launch l;
	int pipefd[2] = {-1, -1}, errfd = memfd_create("pasta-err", MFD_CLOEXEC), rc;

	sbx_launch_init(&l);
	l.path = PASTA_PATH;
	pasta_argv(&l.argv, ports);
	if (errfd < 0 || pipe2(pipefd, O_CLOEXEC) < 0) {
		rc = -errno;
		goto out;
	}
	rc = sbx_launch_keep(&l, pipefd[1]); /* fd 3: its pid file */
	pipefd[1] = -1;
	if (rc >= 0) {
		int nsfd = fcntl(ns->fd, F_DUPFD_CLOEXEC, 0);

		rc = nsfd < 0 ? -errno : sbx_launch_keep(&l, nsfd); /* fd 4: the namespace */
	}
	for (int i = 0; i < ns->n_cg_fds; i++)
		l.cgroup_fds[i] = ns->cg_fds[i]; /* joined before its exec: all it uses is charged there */
	l.n_cgroup_fds = ns->n_cg_fds;
	if (rc >= 0)
		rc = helper_start(&l, -1, NULL, errfd, &ns->pasta, &ns->pasta_pidfd);
	if (rc < 0)
		goto out;
	sbx_launch_release(&l); /* our copy of the pid pipe's write end */
	rc = pasta_ready(pipefd[0]);
out:
	if (rc < 0 && ns->pasta > 0)
		first_line(errfd, "pasta", err, errsz);
	else if (rc < 0)
		snprintf(err, errsz, "pasta could not start: %s", strerror(-rc));
	for (int i = 0; i < 2; i++) {
		if (pipefd[i] >= 0)
			close(pipefd[i]);
	}
	if (errfd >= 0)
		close(errfd);
	sbx_launch_release(&l);
	return rc < 0 ? -SBX_E_BACKEND : 0;
}

/* ---- the namespace ---- */

/* A new network namespace, made on this thread and left at once: the
 * thread is back in its own before anything else runs on it. */
static int new_netns(void)
{
	int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC), fd = -1, rc = 0;

	if (self < 0)
		return -errno;
	/* Only leave where this thread can come back: in a user namespace
	 * (the subordinate-range mode) the host's namespace is not ours to
	 * join, and a thread stuck in a new one would take every later
	 * command there. Joining the one it is in is that same check. */
	if (setns(self, CLONE_NEWNET) < 0 || unshare(CLONE_NEWNET) < 0) {
		rc = -errno;
		close(self);
		return rc;
	}
	fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		rc = -errno;
	if (setns(self, CLONE_NEWNET) < 0) {
		/* Everything this thread starts would share the namespace. */
		log_msg("error", "cannot return to the server's network namespace: %s", strerror(errno));
		abort();
	}
	close(self);
	if (fd < 0)
		return rc;
	return fd;
}

pid_t sbx_netns_helper_pid(const struct sbx_netns *n)
{
	return n && n->pasta > 0 ? n->pasta : -1;
}

int sbx_netns_fd(const struct sbx_netns *n)
{
	return n ? n->fd : -1;
}

const char *sbx_netns_hosts(const struct sbx_netns *n)
{
	return n ? n->hosts : HOSTS_BASE;
}

void sbx_netns_down(struct sbx_netns **pn)
{
	struct sbx_netns *n;

	if (!pn || !*pn)
		return;
	n = *pn;
	if (n->pasta > 0) {
		syscall(SYS_pidfd_send_signal, n->pasta_pidfd, SIGKILL, NULL, 0);
		sbx_wait_status(n->pasta);
		close(n->pasta_pidfd);
	}
	if (n->fd >= 0)
		close(n->fd);
	for (int i = 0; i < n->n_cg_fds; i++)
		close(n->cg_fds[i]);
	if (n->cg_root)
		sbx_cgroup_helper_remove(n->cg_root, n->cg_uid, n->cg_seq);
	free(n->cg_root);
	free(n->hosts);
	free(n);
	*pn = NULL;
}

/* The namespace for dest: filter first, then pasta. */
static int build(struct sbx_netns *n, const struct sbx_net_allow *dest, const struct sbx_net_limits *lim,
		 char *err, size_t errsz)
{
	struct buf rules, ports;
	int rc;

	buf_init(&rules, NET_TEXT_MAX);
	buf_init(&ports, NET_TEXT_MAX);
	n->fd = new_netns();
	if (n->fd < 0) {
		snprintf(err, errsz, "cannot make a network namespace: %s", strerror(-n->fd));
		rc = -SBX_E_BACKEND;
	} else if (sbx_net_ruleset(dest->e, dest->n, lim, &rules) < 0 ||
		   sbx_net_pasta_ports(dest->e, dest->n, &ports) < 0) {
		snprintf(err, errsz, "the allowlist's rules are too long");
		rc = -SBX_E_BACKEND;
	} else {
		struct nft_run nft;
		int nrc;

		err[0] = '\0';
		nft_start(&nft, n->fd, buf_cstr(&rules));
		rc = start_pasta(n, buf_cstr(&ports), err, errsz);
		nrc = nft_finish(&nft, err, errsz);
		if (rc == 0)
			rc = nrc;
	}
	buf_free(&rules);
	buf_free(&ports);
	return rc;
}

/* pasta's group, before pasta starts. */
static int helper_group(struct sbx_netns *n, const struct sbx_net_cgroup *cg, char *err, size_t errsz)
{
	int rc;

	if (!cg)
		return 0;
	rc = sbx_cgroup_helper_prepare(cg->root, cg->uid, cg->seq, cg->lim, n->cg_fds);
	if (rc < 0) {
		snprintf(err, errsz, "cannot make pasta's cgroup: %s", strerror(-rc));
		return -SBX_E_BACKEND;
	}
	n->n_cg_fds = rc;
	n->cg_root = xstrdup(cg->root);
	n->cg_uid = cg->uid;
	n->cg_seq = cg->seq;
	return 0;
}

int sbx_netns_up(const char *spec, const struct sbx_net_limits *lim, const struct sbx_net_cgroup *cg,
		 struct sbx_netns **out, char *err, size_t errsz)
{
	struct sbx_net_allow a = {0}, dest = {0};
	struct sbx_netns *n;
	struct buf hosts;
	int rc;

	rc = sbx_net_allow_parse(spec, &a, err, errsz);
	if (rc < 0)
		return rc;
	buf_init(&hosts, NET_TEXT_MAX);
	buf_appendf(&hosts, HOSTS_BASE);
	resolve(&a, lim && lim->resolve_ms ? lim->resolve_ms : SBX_NET_RESOLVE_MS, &dest, &hosts);
	n = xcalloc(1, sizeof(*n));
	n->fd = -1;
	n->pasta_pidfd = -1;
	n->hosts = buf_steal(&hosts, NULL);
	rc = helper_group(n, cg, err, errsz);
	if (rc == 0)
		rc = build(n, &dest, lim, err, errsz);
	if (rc < 0)
		sbx_netns_down(&n);
	else
		*out = n;
	free(dest.e);
	sbx_net_allow_clear(&a);
	buf_free(&hosts);
	return rc;
}

/* ---- health ---- */

static pthread_once_t health_once = PTHREAD_ONCE_INIT;
static int health_rc;
static char health_msg[256];

static void health_probe(void)
{
	struct sbx_netns *n = NULL;
	char err[200] = "";

	health_rc = -SBX_E_BACKEND;
	if (geteuid() != 0) {
		snprintf(health_msg, sizeof(health_msg), "unavailable: needs the server to run as root");
		return;
	}
	if (access(PASTA_PATH, X_OK) < 0 || access(NFT_PATH, X_OK) < 0) {
		snprintf(health_msg, sizeof(health_msg), "unavailable: %s missing (packages passt, nftables)",
			 access(PASTA_PATH, X_OK) < 0 ? PASTA_PATH : NFT_PATH);
		return;
	}
	if (access("/dev/net/tun", F_OK) < 0) {
		/* pasta's tap device; a container needs it passed in */
		snprintf(health_msg, sizeof(health_msg), "unavailable: no /dev/net/tun");
		return;
	}
	if (sbx_netns_up("127.0.0.1:1", NULL, NULL, &n, err, sizeof(err)) < 0) {
		snprintf(health_msg, sizeof(health_msg), "unavailable: %s", err);
		return;
	}
	sbx_netns_down(&n);
	health_rc = 0;
	snprintf(health_msg, sizeof(health_msg), "pasta + nftables (TCP to the allowlist only)");
}

int sbx_net_health(char *msg, size_t msgsz)
{
	pthread_once(&health_once, health_probe);
	if (msg && msgsz)
		snprintf(msg, msgsz, "%s", health_msg);
	return health_rc;
}
