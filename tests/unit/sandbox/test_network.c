/* Network on request through the bwrap backend: a command with net_allow
 * reaches what the allowlist names and nothing else (other loopback
 * ports, link-local and metadata addresses, the other family of an
 * allowed loopback port), names resolve, and without net_allow there is
 * no network at all; every namespace and pasta goes with its command. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/errors.h"
#include "common/xmalloc.h"
#include "sandbox/backend.h"
#include "sandbox/network.h"
#include "sandbox/runner.h"
#include "sandbox/workspace.h"
#include "unit.h"

#define TENANT_UID 100000

/* A loopback listener answering every connection with a fixed HTTP
 * response, on a thread of its own. */
struct server {
	int fd;
	int port;
	const char *body;
	pthread_t thread;
};

struct fixture {
	char base[64];
	char ws[96];
	struct sbx_backend *bwrap, *local;
	struct server a, b, c, a6, h; /* h: on the host's own address */
	uint64_t seq;
	bool net;	 /* network on request works here */
	char why[256];	 /* sbx_net_health's line */
	bool first_line; /* run() stops at the first line */
};

static void *serve(void *arg)
{
	struct server *s = arg;
	char req[1024], resp[256];

	snprintf(resp, sizeof(resp), "HTTP/1.0 200 OK\r\nContent-Length: %zu\r\n\r\n%s", strlen(s->body),
		 s->body);
	for (;;) {
		int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL; /* shutdown() at teardown */
		}
		(void)!read(c, req, sizeof(req));
		(void)!write(c, resp, strlen(resp));
		close(c);
	}
}

/* Listen on addr (network order; NULL: the loopback of family) at port
 * (0: any free one). */
static int server_start_at(struct server *s, int family, const void *addr, int port, const char *body)
{
	struct sockaddr_storage ss = {0};
	socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	int one = 1;

	s->fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	s->body = body;
	if (family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;

		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (addr)
			memcpy(&in->sin_addr, addr, 4);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		in6->sin6_addr = in6addr_loopback;
		setsockopt(s->fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	}
	setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&ss, len) < 0 || listen(s->fd, 16) < 0 ||
	    getsockname(s->fd, (struct sockaddr *)&ss, &len) < 0) {
		if (s->fd >= 0)
			close(s->fd);
		s->fd = -1;
		return -1;
	}
	s->port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					  : ((struct sockaddr_in6 *)&ss)->sin6_port);
	return pthread_create(&s->thread, NULL, serve, s) == 0 ? 0 : -1;
}

static int server_start(struct server *s, int family, int port, const char *body)
{
	return server_start_at(s, family, NULL, port, body);
}

/* The host's first IPv4 address that is not loopback, as text; false
 * when it has none. */
static bool host_addr(struct in_addr *out, char *text, size_t n)
{
	struct ifaddrs *all, *i;
	bool found = false;

	if (getifaddrs(&all) < 0)
		return false;
	for (i = all; i && !found; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		*out = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
		found = (ntohl(out->s_addr) >> 24) != 127;
	}
	freeifaddrs(all);
	if (found)
		inet_ntop(AF_INET, out, text, (socklen_t)n);
	return found;
}

static void server_stop(struct server *s)
{
	if (s->fd < 0)
		return;
	shutdown(s->fd, SHUT_RDWR);
	pthread_join(s->thread, NULL);
	close(s->fd);
	s->fd = -1;
}

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	struct sbx_backend_config bc = {.name = "bwrap"}, lc = {.name = "local"};

	signal(SIGPIPE, SIG_IGN);
	f->a.fd = f->b.fd = f->c.fd = f->a6.fd = f->h.fd = -1;
	if (unit_tmpdir(f->base, sizeof(f->base), "net") < 0 || chmod(f->base, 0755) < 0)
		return -1;
	snprintf(f->ws, sizeof(f->ws), "%s/ws", f->base);
	if (mkdir(f->ws, 0755) < 0 || (geteuid() == 0 && chown(f->ws, TENANT_UID, TENANT_UID) < 0))
		return -1;
	if (sbx_backend_new(&f->bwrap, &bc) < 0 || sbx_backend_new(&f->local, &lc) < 0)
		return -1;
	if (server_start(&f->a, AF_INET, 0, "hello-from-A") < 0 ||
	    server_start(&f->b, AF_INET, 0, "hello-from-B") < 0 ||
	    server_start(&f->c, AF_INET, 0, "hello-from-C") < 0)
		return -1;
	/* The same port as A on the host's IPv6 loopback: allowing
	 * 127.0.0.1:A must not open it. Optional: the port may be taken. */
	server_start(&f->a6, AF_INET6, f->a.port, "hello-from-A6");
	f->net = sbx_net_health(f->why, sizeof(f->why)) == 0;
	print_message("network on request: %s\n", f->why);
	f->seq = 1000;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	server_stop(&f->a);
	server_stop(&f->b);
	server_stop(&f->c);
	server_stop(&f->a6);
	server_stop(&f->h);
	sbx_backend_free(&f->bwrap);
	sbx_backend_free(&f->local);
	unit_rm_rf(f->base);
	free(f);
	return 0;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Skip where the host cannot (not root, passt or nftables not
 * installed); where it should, its absence fails the test. */
static void need_net(struct fixture *f)
{
	if (f->net)
		return;
	if (geteuid() == 0 && access("/usr/bin/pasta", X_OK) == 0 && access("/usr/sbin/nft", X_OK) == 0)
		fail_msg("network on request %s", f->why);
	skip();
}

static struct sbx_spawn_req req_for(struct fixture *f, const char *cmd, const char *allow)
{
	struct sbx_spawn_req r = {
	    .command = cmd,
	    .workspace_host_dir = f->ws,
	    .cwd_rel = "",
	    .uid = TENANT_UID,
	    .gid = TENANT_UID,
	    .drop_privs = geteuid() == 0,
	    .limits = {.mem_bytes = 1ULL << 30, .nproc = 256, .nofile = 256, .tmp_bytes = 16ULL << 20},
	    .seq = ++f->seq,
	    .net_allow = allow,
	    .stdin_fd = -1,
	    .stdout_fd = -1,
	    .stderr_fd = -1,
	};
	return r;
}

/* Run cmd with allow to its end (20 s at most; or only to its first line
 * of output when f->first_line), kill what is left, reap it; its stdout
 * into out. Returns the spawn result; *code the exit code. */
static int run(struct fixture *f, const char *allow, const char *cmd, char *out, size_t outsz, int *code)
{
	struct sbx_spawn_req r = req_for(f, cmd, allow);
	int p[2], pidfd, st, rc;
	size_t len = 0;
	pid_t pid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	r.stdout_fd = p[1];
	rc = sbx_backend_spawn(f->bwrap, &r, &pid, &pidfd);
	close(p[1]);
	if (rc == 0) {
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		int64_t deadline = now_ms() + 20000;
		ssize_t n = 1;

		while (n > 0 && len + 1 < outsz && now_ms() < deadline &&
		       !(f->first_line && memchr(out, '\n', len))) {
			if (poll(&pf, 1, (int)(deadline - now_ms())) <= 0)
				continue;
			n = read(p[0], out + len, outsz - 1 - len);
			len += n > 0 ? (size_t)n : 0;
		}
		kill(-pid, SIGKILL);
		assert_int_equal(waitpid(pid, &st, 0), pid);
		close(pidfd);
		sbx_backend_reap(f->bwrap, &r, NULL);
		*code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}
	out[len] = '\0';
	close(p[0]);
	return rc;
}

/* curl from inside the sandbox: prints the body, then "rc=N". */
static char *curl(const char *url)
{
	return xasprintf("curl -s -S --max-time 5 %s 2>&1; echo rc=$?", url);
}

static void expect_body(struct fixture *f, const char *allow, const char *url, const char *body)
{
	char out[4096], *cmd = curl(url);
	int code;

	assert_int_equal(run(f, allow, cmd, out, sizeof(out), &code), 0);
	if (!strstr(out, body) || !strstr(out, "rc=0"))
		fail_msg("allow '%s', %s: want '%s', got '%s'", allow ? allow : "(none)", url, body, out);
	free(cmd);
}

/* Refused at once (curl exit 7: could not connect), never answered, never
 * left to time out (28). */
static void expect_refused(struct fixture *f, const char *allow, const char *url)
{
	char out[4096], *cmd = curl(url);
	int code;

	assert_int_equal(run(f, allow, cmd, out, sizeof(out), &code), 0);
	if (strstr(out, "hello-from") || !strstr(out, "rc=7"))
		fail_msg("allow '%s', %s: want refused (rc=7), got '%s'", allow ? allow : "(none)", url, out);
	free(cmd);
}

static char *url(const char *host, int port)
{
	return xasprintf("http://%s:%d/", host, port);
}

static void test_allowlist(void **state)
{
	struct fixture *f = *state;
	char out[4096], *allow, *ua, *ub, *uc, *ua6;
	int code;

	need_net(f);
	/* every address at port 80: the metadata ones stay refused */
	allow = xasprintf("127.0.0.1:%d, example.invalid:443, 0.0.0.0/0:80, [::/0]:80", f->a.port);
	ua = url("127.0.0.1", f->a.port);
	ub = url("127.0.0.1", f->b.port);
	uc = url("127.0.0.1", f->c.port);
	ua6 = url("[::1]", f->a.port);
	expect_body(f, allow, ua, "hello-from-A");
	expect_refused(f, allow, ub);
	expect_refused(f, allow, uc);
	if (f->a6.fd >= 0)
		expect_refused(f, allow, ua6); /* same port, the family not named */
	/* The metadata and link-local ranges this allowlist must still
	 * refuse are not dialled: tests send nothing to an address outside
	 * the machine, not even to see it refused. test_netspec checks that
	 * the ruleset rejects them ahead of every accept. */
	free(allow);
	/* The command cannot change its namespace: not its filter, not its
	 * routes (the namespace is root's, the command has no capability). */
	allow = xasprintf("127.0.0.1:%d", f->a.port);
	assert_int_equal(run(f, allow,
			     "nft flush ruleset 2>/dev/null; echo nft=$?; ip route add 169.254.0.0/16 dev lo "
			     "2>/dev/null; echo ip=$?; ip link set lo down 2>/dev/null; echo link=$?",
			     out, sizeof(out), &code),
			 0);
	assert_non_null(strstr(out, "ip=2"));
	assert_non_null(strstr(out, "link=2"));
	assert_null(strstr(out, "nft=0"));
	expect_refused(f, allow, ub);
	free(allow);
	/* The other way round: [::1] named, 127.0.0.1 not. */
	if (f->a6.fd >= 0) {
		allow = xasprintf("[::1]:%d", f->a.port);
		expect_body(f, allow, ua6, "hello-from-A6");
		expect_refused(f, allow, ua);
		free(allow);
	}
	/* A CIDR holding every address holds not the host's loopback. */
	allow = xasprintf("0.0.0.0/0:%d", f->b.port);
	expect_refused(f, allow, ub);
	free(allow);
	/* Nor the host's own addresses: in the namespace they are its own. */
	{
		struct in_addr ha;
		char text[INET_ADDRSTRLEN];

		if (host_addr(&ha, text, sizeof(text)) &&
		    server_start_at(&f->h, AF_INET, &ha, 0, "hello-from-H") == 0) {
			char *uh = url(text, f->h.port);

			allow = xasprintf("%s:%d", text, f->h.port);
			expect_refused(f, allow, uh);
			free(allow);
			free(uh);
		}
	}
	/* Without net_allow: no network at all, the host's loopback neither. */
	expect_refused(f, NULL, ua);
	free(ua);
	free(ub);
	free(uc);
	free(ua6);
}

/* A name in the allowlist resolves (by the server, into the sandbox's
 * /etc/hosts) and is reachable at its port only. */
static void test_names(void **state)
{
	struct fixture *f = *state;
	char out[4096], *allow, *ua, *ub;
	int code;

	need_net(f);
	ua = url("localhost", f->a.port);
	ub = url("localhost", f->b.port);
	/* A name resolving to the host's loopback reaches it only when a
	 * literal entry names that address too (issue 26: whoever owns a
	 * name chooses its addresses). */
	allow = xasprintf("localhost:%d", f->a.port);
	expect_refused(f, allow, ua);
	free(allow);
	allow = xasprintf("localhost:%d, 127.0.0.1:%d", f->a.port, f->a.port);
	expect_body(f, allow, ua, "hello-from-A");
	expect_refused(f, allow, ub);
	free(allow);
	/* The same port by name and by address, both families: one forward. */
	allow = xasprintf("localhost:%d, 127.0.0.1:%d, [::1]:%d", f->a.port, f->a.port, f->a.port);
	expect_body(f, allow, ua, "hello-from-A");
	/* no resolver inside: only the hosts file */
	assert_int_equal(run(f, allow, "cat /etc/resolv.conf; getent hosts example.com; echo rc=$?", out,
			     sizeof(out), &code),
			 0);
	assert_string_equal(out, "rc=2\n");
	free(allow);
	free(ua);
	free(ub);
}

static void test_refusals(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req r = req_for(f, "true", "bad spec!");
	char msg[256];
	pid_t pid;
	int pidfd;

	need_net(f);
	assert_int_equal(sbx_backend_spawn(f->bwrap, &r, &pid, &pidfd), -EINVAL);
	/* local cannot filter: it refuses rather than pretend, and says so */
	r = req_for(f, "true", "127.0.0.1:80");
	assert_int_equal(sbx_backend_spawn(f->local, &r, &pid, &pidfd), -SBX_E_BACKEND);
	assert_int_equal(sbx_backend_net_health(f->local, msg, sizeof(msg)), -SBX_E_BACKEND);
	assert_non_null(strstr(msg, "cannot filter"));
	assert_int_equal(sbx_backend_net_health(f->bwrap, msg, sizeof(msg)), 0);
	assert_non_null(strstr(msg, "pasta + nftables"));
	/* and /readyz's line of the backend says so */
	assert_int_equal(sbx_backend_health(f->bwrap, msg, sizeof(msg)), 0);
	assert_non_null(strstr(msg, "; network on request: pasta + nftables"));
}

/* The processes whose parent is this one and whose name says pasta. */
static int pasta_children(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	while ((de = readdir(d))) {
		char path[300], text[512];
		FILE *fp;

		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		fp = fopen(path, "r");
		if (!fp)
			continue;
		if (fgets(text, sizeof(text), fp)) {
			char *rp = strrchr(text, ')');
			int ppid = 0;

			if (rp && sscanf(rp + 2, "%*c %d", &ppid) == 1 && ppid == getpid() &&
			    (strstr(text, "(pasta") || strstr(text, "(passt")))
				n++;
		}
		fclose(fp);
	}
	closedir(d);
	return n;
}

/* Now, in clock ticks since boot (the unit of a process's start time). */
static uint64_t boot_ticks(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000) *
	       (uint64_t)sysconf(_SC_CLK_TCK) / 1000;
}

/* The start time of process pid (field 22 of its stat), or UINT64_MAX. */
static uint64_t start_ticks(const char *pid)
{
	char path[300], text[1024];
	unsigned long long t = 0;
	FILE *fp;
	char *rp;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	fp = fopen(path, "r");
	if (!fp)
		return UINT64_MAX;
	rp = fgets(text, sizeof(text), fp) ? strrchr(text, ')') : NULL;
	fclose(fp);
	if (!rp ||
	    sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
		   &t) != 1)
		return UINT64_MAX;
	return t;
}

/* Link path reads ino. */
static bool reads(const char *path, const char *ino)
{
	char link[64];
	ssize_t n = readlink(path, link, sizeof(link) - 1);

	if (n <= 0)
		return false;
	link[n] = '\0';
	return strcmp(link, ino) == 0;
}

/* Process pid is in the namespace ino ("net:[N]") or holds an fd of it
 * (as pasta does). */
static bool holds(const char *pid, const char *ino)
{
	char path[300];
	DIR *d;
	struct dirent *de;
	bool found;

	snprintf(path, sizeof(path), "/proc/%s/ns/net", pid);
	found = reads(path, ino);
	snprintf(path, sizeof(path), "/proc/%s/fd", pid);
	d = opendir(path);
	while (d && !found && (de = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/%s/fd/%s", pid, de->d_name);
		found = reads(path, ino);
	}
	if (d)
		closedir(d);
	return found;
}

/* Some process that started by the tick before still holds the
 * namespace ino. Namespaces' numbers are reused at once, and this
 * machine's other servers make namespaces all the time: only processes
 * older than the end of our command can be its leftovers. */
static bool netns_alive(const char *ino, uint64_t before)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool found = false;

	while (d && !found && (de = readdir(d))) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9' || start_ticks(de->d_name) > before)
			continue;
		found = holds(de->d_name, ino);
	}
	if (d)
		closedir(d);
	return found;
}

/* A killed bwrap's sandbox dies right after it (--die-with-parent),
 * holding the namespace until then: wait for that, with a deadline. */
static void wait_netns_gone(const char *ino, uint64_t before)
{
	int64_t deadline = now_ms() + 10000;
	struct timespec tick = {0, 20 * 1000000L};

	while (netns_alive(ino, before) && now_ms() < deadline)
		nanosleep(&tick, NULL);
	if (netns_alive(ino, before))
		fail_msg("namespace %s outlived its command", ino);
}

/* Many commands, ended every way (exit, killed, timed out): afterwards
 * none of their namespaces (and so none of their rules) nor pastas is
 * left. Prints what a command with network costs to start. */
static void test_teardown(void **state)
{
	struct fixture *f = *state;
	char out[256], ino[12][64], *allow;
	uint64_t ended[12];
	int64_t t0, with = 0, without = 0;
	int code, n = 0;

	need_net(f);
	allow = xasprintf("127.0.0.1:%d", f->a.port);
	for (int i = 0; i < 12; i++) {
		/* 0: exits; 1: killed by its own hand; 2: "timed out" (the
		 * runner kills the group the same way run() does at the end) */
		static const char *const cmds[] = {"readlink /proc/self/ns/net",
						   "readlink /proc/self/ns/net; kill -9 $$",
						   "readlink /proc/self/ns/net; exec sleep 60 >/dev/null"};

		t0 = now_ms();
		f->first_line = i % 3 == 2;
		assert_int_equal(run(f, allow, cmds[i % 3], out, sizeof(out), &code), 0);
		f->first_line = false;
		with += now_ms() - t0;
		out[strcspn(out, "\n")] = '\0';
		assert_true(strncmp(out, "net:[", 5) == 0);
		ended[n] = boot_ticks();
		snprintf(ino[n++], sizeof(ino[0]), "%.40s", out);
		t0 = now_ms();
		assert_int_equal(run(f, NULL, "true", out, sizeof(out), &code), 0);
		without += now_ms() - t0;
	}
	print_message("start to end, with network %lld ms, without %lld ms (mean of 12)\n",
		      (long long)(with / 12), (long long)(without / 12));
	assert_int_equal(pasta_children(), 0);
	for (int i = 0; i < n; i++)
		wait_netns_gone(ino[i], ended[i]);
	free(allow);
}

/* ---- through the runner: timed out and cancelled commands ---- */

struct done {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool exited, printed;
	int spawn_error;
	struct sbx_exec_result res;
};

static void on_event(void *ctx, const struct sbx_event *ev, int spawn_error)
{
	struct done *d = ctx;

	pthread_mutex_lock(&d->mu);
	if (ev->kind == SBX_EV_OUTPUT)
		d->printed = true;
	pthread_cond_broadcast(&d->cv);
	if (ev->kind != SBX_EV_EXIT) {
		pthread_mutex_unlock(&d->mu);
		return;
	}
	d->spawn_error = spawn_error;
	if (ev->result) {
		d->res = *ev->result;
		ev->result->stdout_text = ev->result->stderr_text = NULL;
		ev->result->stdout_spill = ev->result->stderr_spill = NULL;
	}
	d->exited = true;
	pthread_mutex_unlock(&d->mu);
}

/* Submit cmd with allow; cancel it once it printed its namespace when
 * cancel; wait for its end (20 s at most). Its namespace into ino. */
static void runner_run(struct fixture *f, struct sbx_runner *r, struct sbx_workspace *ws, const char *allow,
		       uint64_t timeout_ms, bool cancel, char *ino, size_t inosz, struct done *d)
{
	struct sbx_exec_req req = {
	    .backend = f->bwrap,
	    .ws = ws,
	    .spawn = req_for(f, "readlink /proc/self/ns/net; exec sleep 30", allow),
	    .id = "net1",
	    .timeout_ms = timeout_ms,
	    .kill_grace_ms = 200,
	    .max_output_bytes = 4096,
	    .spill_cap = 1 << 20,
	    .want_output_events = true,
	};
	struct timespec until;
	uint64_t job;

	memset(d, 0, sizeof(*d));
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	assert_int_equal(sbx_runner_submit(r, &req, on_event, d, &job), 0);
	pthread_mutex_lock(&d->mu);
	/* cancelled once it printed its namespace */
	while (cancel && !d->printed && !d->exited && pthread_cond_timedwait(&d->cv, &d->mu, &until) == 0)
		;
	if (cancel) {
		pthread_mutex_unlock(&d->mu); /* the runner calls on_event */
		sbx_runner_cancel(r, job);
		pthread_mutex_lock(&d->mu);
	}
	while (!d->exited && pthread_cond_timedwait(&d->cv, &d->mu, &until) == 0)
		;
	pthread_mutex_unlock(&d->mu);
	assert_true(d->exited);
	assert_int_equal(d->spawn_error, 0);
	snprintf(ino, inosz, "%.*s", (int)strcspn(d->res.stdout_text ? d->res.stdout_text : "", "\n"),
		 d->res.stdout_text ? d->res.stdout_text : "");
	sbx_exec_result_clear(&d->res);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
}

static void test_runner_timeout_cancel(void **state)
{
	struct fixture *f = *state;
	struct sbx_owner owner = {.uid = TENANT_UID, .gid = TENANT_UID, .chown = geteuid() == 0};
	struct sbx_workspace *ws = NULL;
	struct sbx_runner *r = NULL;
	struct done d;
	char ino[6][64], *allow;
	uint64_t ended[6];

	need_net(f);
	assert_int_equal(sbx_workspace_open(&ws, f->ws, &owner), 0);
	assert_int_equal(sbx_runner_new(&r, 1), 0);
	allow = xasprintf("127.0.0.1:%d", f->a.port);
	for (int i = 0; i < 6; i++) {
		/* the timeout counts from before the network's setup: ample, so
		 * that the command prints its namespace on a busy machine too */
		runner_run(f, r, ws, allow, i % 2 ? 0 : 2000, i % 2, ino[i], sizeof(ino[i]), &d);
		ended[i] = boot_ticks();
		assert_true(i % 2 ? d.res.cancelled : d.res.timed_out);
		assert_true(strncmp(ino[i], "net:[", 5) == 0);
	}
	sbx_runner_free(&r);
	sbx_workspace_free(&ws);
	free(allow);
	assert_int_equal(pasta_children(), 0);
	for (int i = 0; i < 6; i++)
		wait_netns_gone(ino[i], ended[i]);
}

/* ---- the server killed: nothing of its commands' networks stays ---- */

/* The child mode of this program (argv: --crash-child WORKSPACE): a
 * "server" that starts a network command there and prints its
 * namespace, then waits for its SIGKILL. */
static int crash_child(const char *ws)
{
	struct fixture f = {.seq = 1};
	struct sbx_backend_config bc = {.name = "bwrap"};
	struct sbx_spawn_req r;
	pid_t pid;
	int pidfd;

	snprintf(f.ws, sizeof(f.ws), "%s", ws);
	if (sbx_backend_new(&f.bwrap, &bc) < 0)
		return 1;
	r = req_for(&f, "readlink /proc/self/ns/net; exec sleep 60", "127.0.0.1:9");
	r.stdout_fd = 1;
	if (sbx_backend_spawn(f.bwrap, &r, &pid, &pidfd) < 0)
		return 1;
	for (;;)
		pause();
}

/* The first line child writes on fd within 20 s, into line. */
static void read_line(int fd, char *line, size_t n)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	size_t len = 0;

	while (!memchr(line, '\n', len) && len + 1 < n && poll(&pf, 1, 20000) > 0) {
		ssize_t got = read(fd, line + len, n - 1 - len);

		if (got <= 0)
			break;
		len += (size_t)got;
	}
	line[len] = '\0';
	line[strcspn(line, "\n")] = '\0';
}

static void test_server_killed(void **state)
{
	struct fixture *f = *state;
	char ino[64] = "";
	uint64_t killed;
	int p[2];
	pid_t child;

	need_net(f);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		/* only async-signal-safe calls until exec */
		dup2(p[1], 1);
		execl("/proc/self/exe", "test_network", "--crash-child", f->ws, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	read_line(p[0], ino, sizeof(ino));
	close(p[0]);
	assert_true(strncmp(ino, "net:[", 5) == 0);
	assert_true(netns_alive(ino, boot_ticks())); /* the check sees a live one */
	kill(child, SIGKILL);
	assert_int_equal(waitpid(child, NULL, 0), child);
	killed = boot_ticks();
	/* pasta (PR_SET_PDEATHSIG) and the sandbox (--die-with-parent) die
	 * with it, and with them the namespace and its rules */
	wait_netns_gone(ino, killed);
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "--crash-child") == 0)
		return crash_child(argv[2]);
	{
		const struct CMUnitTest tests[] = {
		    cmocka_unit_test(test_allowlist),
		    cmocka_unit_test(test_names),
		    cmocka_unit_test(test_refusals),
		    cmocka_unit_test(test_teardown),
		    cmocka_unit_test(test_runner_timeout_cancel),
		    cmocka_unit_test(test_server_killed),
		};

		return cmocka_run_group_tests(tests, setup, teardown);
	}
}
