#pragma once
/* The egress suites' world (issue 29): nothing a test does can leave this
 * machine. it_egress_enter, first thing in main (before any thread),
 * moves the test process into a network and mount namespace of its own,
 * so the server it starts makes its outgoing connections there, and
 * joins it by a veth pair to an upstream namespace (held by a child that
 * only waits) where tests/integration/egress_upstream.py serves:
 *
 *   test side   198.51.100.1/24  2001:db8:5b::1/64   (TEST-NET-2, documentation)
 *   upstream    198.51.100.10  allowed.test (and shared.test: one address, two names)
 *               198.51.100.11  other.test
 *               198.51.100.12  wild.test, api.wild.test
 *               2001:db8:5b::10 v6only.test
 *               10.77.0.5       private.test      (a private address)
 *               169.254.169.254 meta.test         (the metadata address)
 *
 * each with HTTP on 80, HTTPS on 443 (a test CA's certificate for every
 * name), a banner on 2222 and a UDP sink on 9999; every answer says who
 * answers ("I am allowed.test at 198.51.100.10 host=... sni=..."), and
 * every connection and datagram is a line of the upstream log. The names
 * are in a generated /etc/hosts bind-mounted over the host's in the
 * private mount namespace (the server's resolver reads it). No default
 * route anywhere: the routes of both namespaces are checked before the
 * first packet. Everything ends with the test process (the holder and
 * the servers die with it; the namespaces with their last process).
 * Skips (77) unless root with ip, openssl, curl, nsenter and python3.
 * Include after <cmocka.h>. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>

#include "it_exec.h"
#include "it_policy.h"

#define EG_TEST4 "198.51.100.1"
#define EG_ALLOWED "198.51.100.10"
#define EG_OTHER "198.51.100.11"
#define EG_WILD "198.51.100.12"
#define EG_V6 "2001:db8:5b::10"
#define EG_PRIVATE "10.77.0.5"
#define EG_META "169.254.169.254"

struct it_egress {
	char dir[64]; /* ca.pem, srv.pem, hosts, log, ready */
	pid_t holder; /* keeps the upstream namespace */
	pid_t upstream;
};

/* name=address of every upstream server; the hosts file has the same. */
static const char *const eg_names[][2] = {
    {"allowed.test", EG_ALLOWED}, {"shared.test", EG_ALLOWED}, {"other.test", EG_OTHER},
    {"wild.test", EG_WILD},	  {"api.wild.test", EG_WILD},  {"v6only.test", EG_V6},
    {"private.test", EG_PRIVATE}, {"meta.test", EG_META},
};
#define EG_NNAMES (sizeof(eg_names) / sizeof(eg_names[0]))

static inline void eg_skip(const char *why)
{
	fprintf(stderr, "skipped: %s\n", why);
	exit(77);
}

static inline void eg_die(const char *what)
{
	fprintf(stderr, "egress harness: %s (%s)\n", what, strerror(errno));
	exit(1);
}

/* An it_sh that must succeed. */
#define EG_SH(...)                                                                                           \
	do {                                                                                                 \
		if (it_sh(__VA_ARGS__) != 0)                                                                 \
			eg_die("setup command failed");                                                      \
	} while (0)

/* The routes (ip -j route show table all) of the namespace `in` runs
 * in ("" here): each must be a table local one (own addresses), or a
 * veth subnet, link-local, or one of the two host routes to the upstream's
 * internal addresses. Returns how many others there are (each on stderr). */
static inline int eg_bad_routes(const char *in)
{
	static const char *const ok[] = {"198.51.100.0/24", EG_PRIVATE, EG_META, "2001:db8:5b::/64",
					 "fe80::/64"};
	int bad = 0;
	for (int fam = 4; fam <= 6; fam += 2) {
		char cmd[160];
		snprintf(cmd, sizeof cmd, "%s ip -j -%d route show table all", in, fam);
		FILE *p = popen(cmd, "r");
		json_error_t e;
		json_t *routes = p ? json_loadf(p, 0, &e) : NULL;
		if (!p || pclose(p) != 0 || !json_is_array(routes))
			eg_die("cannot list the routes");
		size_t i;
		json_t *r;
		json_array_foreach(routes, i, r) {
			const char *dst = jstr(r, "dst"), *table = jstr(r, "table");
			bool fine =
			    dst && strcmp(dst, "default") != 0 && table && strcmp(table, "local") == 0;
			for (size_t k = 0; dst && k < sizeof ok / sizeof ok[0]; k++)
				fine = fine || strcmp(dst, ok[k]) == 0;
			if (!fine) {
				char *txt = json_dumps(r, JSON_COMPACT);
				fprintf(stderr, "route out of the test's world (%s): %s\n", *in ? in : "test",
					txt);
				free(txt);
				bad++;
			}
		}
		json_decref(routes);
	}
	return bad;
}

/* A child in a new network namespace that waits for its parent's end. */
static inline pid_t eg_holder(void)
{
	int fds[2];
	char c = 0;
	if (pipe2(fds, O_CLOEXEC) < 0)
		eg_die("pipe");
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (unshare(CLONE_NEWNET) < 0)
			_exit(1);
		(void)!write(fds[1], &c, 1);
		for (;;)
			pause();
	}
	close(fds[1]);
	if (pid < 0 || read(fds[0], &c, 1) != 1)
		eg_die("the upstream namespace's holder did not start");
	close(fds[0]);
	return pid;
}

static inline void eg_links(pid_t holder)
{
	EG_SH("ip link set lo up && ip link add eg0 type veth peer name eg1 netns %d", (int)holder);
	EG_SH("ip addr add " EG_TEST4 "/24 dev eg0 && ip addr add 2001:db8:5b::1/64 dev eg0 nodad && "
	      "ip link set eg0 up && ip route add " EG_PRIVATE "/32 via " EG_ALLOWED " && "
	      "ip route add " EG_META "/32 via " EG_ALLOWED);
	EG_SH("nsenter -t %d -n sh -ec 'ip link set lo up; for a in " EG_ALLOWED " " EG_OTHER " " EG_WILD
	      "; do ip addr add $a/24 dev eg1; done; ip addr add " EG_PRIVATE "/32 dev eg1; "
	      "ip addr add " EG_META "/32 dev eg1; ip addr add " EG_V6
	      "/64 dev eg1 nodad; ip link set eg1 up'",
	      (int)holder);
}

/* The test CA and one server certificate naming every upstream name. */
static inline void eg_certs(const char *dir)
{
	char san[512] = "subjectAltName=DNS:";
	for (size_t i = 0; i < EG_NNAMES; i++)
		snprintf(san + strlen(san), sizeof san - strlen(san), "%s%s", i ? ",DNS:" : "",
			 eg_names[i][0]);
	char *ext = xasprintf("%s/ext.cnf", dir);
	if (it_write_file(ext, san, strlen(san)) != 0)
		eg_die("ext.cnf");
	free(ext);
	EG_SH(
	    "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
	    "-keyout ca.key -out ca.pem -days 2 -subj /CN=sandboxd-egress-test-ca "
	    "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null && "
	    "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout srv.key "
	    "-out srv.csr -subj /CN=allowed.test 2>/dev/null && "
	    "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
	    "-extfile ext.cnf -out srv.pem 2>/dev/null",
	    dir);
}

static inline void eg_hosts(const char *dir)
{
	char hosts[1024] = "127.0.0.1 localhost\n::1 localhost\n";
	for (size_t i = 0; i < EG_NNAMES; i++)
		snprintf(hosts + strlen(hosts), sizeof hosts - strlen(hosts), "%s %s\n", eg_names[i][1],
			 eg_names[i][0]);
	char *path = xasprintf("%s/hosts", dir);
	if (it_write_file(path, hosts, strlen(hosts)) != 0 ||
	    mount(path, "/etc/hosts", NULL, MS_BIND, NULL) < 0)
		eg_die("bind-mount the test's /etc/hosts");
	free(path);
}

/* A TCP connection to addr:port from here, within timeout_ms. */
static inline bool eg_probe(const char *addr, int port, long timeout_ms)
{
	for (long until = it_now_ms() + timeout_ms; it_now_ms() < until; usleep(20000)) {
		struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
		struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		bool v6 = strchr(addr, ':') != NULL;
		int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (v6)
			inet_pton(AF_INET6, addr, &in6.sin6_addr);
		else
			inet_pton(AF_INET, addr, &in.sin_addr);
		int rc = v6 ? connect(fd, (struct sockaddr *)&in6, sizeof in6)
			    : connect(fd, (struct sockaddr *)&in, sizeof in);
		close(fd);
		if (rc == 0)
			return true;
	}
	return false;
}

static inline void eg_upstream(struct it_egress *e)
{
	char *ready = xasprintf("%s/ready", e->dir);
	e->upstream = fork();
	if (e->upstream == 0) {
		char hold[16], *argv[8 + EG_NNAMES];
		size_t k = 0;
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		snprintf(hold, sizeof hold, "%d", (int)e->holder);
		argv[k++] = "nsenter";
		argv[k++] = "-t";
		argv[k++] = hold;
		argv[k++] = "-n";
		argv[k++] = "python3";
		argv[k++] = xasprintf("%s/tests/integration/egress_upstream.py", SBX_SOURCE_DIR);
		argv[k++] = e->dir;
		argv[k++] = xasprintf("%s/srv.pem", e->dir);
		argv[k++] = xasprintf("%s/srv.key", e->dir);
		for (size_t i = 0; i < EG_NNAMES; i++)
			if (strcmp(eg_names[i][0], "shared.test") != 0 &&
			    strcmp(eg_names[i][0], "wild.test") != 0)
				argv[k++] = xasprintf("%s=%s", eg_names[i][0], eg_names[i][1]);
		argv[k] = NULL;
		execvp(argv[0], argv);
		_exit(127);
	}
	long until = it_now_ms() + 20000;
	while (access(ready, F_OK) != 0 && it_now_ms() < until && waitpid(e->upstream, NULL, WNOHANG) == 0)
		usleep(20000);
	if (access(ready, F_OK) != 0)
		eg_die("the upstream servers did not start");
	free(ready);
	static const char *const addrs[] = {EG_ALLOWED, EG_OTHER, EG_WILD, EG_V6, EG_PRIVATE, EG_META};
	for (size_t i = 0; i < sizeof addrs / sizeof addrs[0]; i++)
		if (!eg_probe(addrs[i], 443, 10000))
			eg_die("an upstream server does not answer from the test's namespace");
}

static inline void eg_require(void)
{
	if (geteuid() != 0)
		eg_skip("the egress suites need root (network namespaces)");
	if (it_sh_quiet("command -v ip && command -v openssl && command -v curl && command -v nsenter && "
			"command -v python3") != 0)
		eg_skip("ip, openssl, curl, nsenter or python3 missing");
}

/* Everything above; exits 77 (skip) or 1 (setup failed). */
static inline void it_egress_enter(struct it_egress *e)
{
	eg_require();
	snprintf(e->dir, sizeof e->dir, "/tmp/it-egress-XXXXXX");
	if (!mkdtemp(e->dir) || chmod(e->dir, 0755) < 0)
		eg_die("mkdtemp");
	if (unshare(CLONE_NEWNET | CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		eg_die("private network and mount namespaces");
	e->holder = eg_holder();
	eg_links(e->holder);
	char in[48];
	snprintf(in, sizeof in, "nsenter -t %d -n", (int)e->holder);
	if (eg_bad_routes("") + eg_bad_routes(in) > 0) {
		errno = EPERM;
		eg_die("a route leads out of the test's namespaces; nothing was sent");
	}
	eg_hosts(e->dir);
	eg_certs(e->dir);
	eg_upstream(e);
}

/* Stop the servers and the holder (ours, by pid); remove the directory. */
static inline void it_egress_leave(struct it_egress *e)
{
	const pid_t pids[] = {e->upstream, e->holder};
	for (size_t i = 0; i < 2; i++)
		if (pids[i] > 0) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
		}
	if (e->dir[0])
		it_sh_quiet("rm -rf %s", e->dir);
}

/* Lines of the upstream log containing a and (unless NULL) b. */
static inline int it_egress_seen(const struct it_egress *e, const char *a, const char *b)
{
	char *path = xasprintf("%s/log", e->dir), *log = it_read_file(path, NULL);
	int n = 0;
	free(path);
	for (char *line = log, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		else
			next = line + strlen(line);
		n += strstr(line, a) && (!b || strstr(line, b));
	}
	free(log);
	return n;
}

/* Forget the upstream log so far (a case counts its own lines). */
static inline void it_egress_forget(const struct it_egress *e)
{
	char *path = xasprintf("%s/log", e->dir);
	assert_int_equal(truncate(path, 0) == 0 || errno == ENOENT, 1);
	free(path);
}

/* Upload the test CA into tenant tok's workspace as /workspace/ca.pem. */
static inline void it_egress_upload_ca(struct it_server *s, const struct it_egress *e, const char *tok)
{
	char *path = xasprintf("%s/ca.pem", e->dir);
	size_t len = 0;
	char *pem = it_read_file(path, &len);
	struct it_resp r;
	assert_non_null(pem);
	assert_int_equal(it_http(s, "PUT", "/fs/write?path=/workspace/ca.pem", tok, NULL, pem, len, &r), 0);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	free(pem);
	free(path);
}

/* Wait (30 s) for the mark name a background exec id of tenant leaves in
 * its workspace; fail at once, with its view, when it ends first. */
static inline void it_egress_wait_mark(struct it_server *s, const char *tenant, const char *tok,
				       const char *id, const char *name)
{
	char *path = xasprintf("/exec/%s", id);
	long t0 = it_now_ms();
	for (long until = t0 + 30000; !it_ws_exists(s, tenant, name); usleep(20000)) {
		json_t *v = NULL;
		long st = it_get_json(s, tok, path, &v);
		const char *state = st == 200 ? jstr(v, "state") : NULL;
		/* a command that failed to start is soon no exec at all */
		bool gone = st == 404 && it_now_ms() > t0 + 2000;
		if (gone || (state && strcmp(state, "running") != 0) || it_now_ms() > until) {
			char *txt = v ? json_dumps(v, JSON_COMPACT) : NULL;
			fail_msg("no mark %s of exec %s: %ld %s", name, id, st, txt ? txt : "");
		}
		json_decref(v);
	}
	free(path);
}

/* PUT tenant's policy network=spec with the operator's token: 200. */
static inline void it_egress_policy(struct it_server *s, const char *tok_ops, const char *tenant,
				    const char *spec)
{
	char *body = xasprintf("{\"network\": \"%s\"}", spec);
	long st = pol_put(s, tok_ops, tenant, body, NULL);
	if (st != 200)
		fail_msg("PUT /tenants/%s/policy network=%s: %ld", tenant, spec, st);
	free(body);
}

/* POST /exec of cmd with network, in the background: its id (caller frees). */
static inline char *it_egress_bg(struct it_server *s, const char *tok, const char *cmd)
{
	json_t *res = NULL;
	long st = ex_post(
	    s, tok, NULL,
	    json_pack("{s:s, s:b, s:b, s:i}", "command", cmd, "network", 1, "background", 1, "timeout_s", 90),
	    &res, NULL);
	assert_true(st == 200 || st == 202);
	char *id = xstrdup(jstr(res, "id"));
	json_decref(res);
	return id;
}

/* Leave the (empty) mark /workspace/name for a command to see. */
static inline void it_egress_mark(struct it_server *s, const char *tok, const char *name)
{
	char *path = xasprintf("/fs/write?path=/workspace/%s", name);
	struct it_resp r;
	assert_int_equal(it_http(s, "PUT", path, tok, NULL, "", 0, &r), 0);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	free(path);
}

/* Wait (60 s) for background exec id to exit; its ShellResult (new
 * reference), its output on stderr. */
static inline json_t *it_egress_result(struct it_server *s, const char *tok, const char *id)
{
	json_t *v = ex_wait_state(s, tok, id, "exited", 60000);
	if (!v)
		fail_msg("exec %s did not exit", id);
	json_t *res = json_incref(json_object_get(v, "result"));
	json_decref(v);
	assert_non_null(res);
	fprintf(stderr, "--- %s%s", jstr(res, "stdout"), jstr(res, "stderr"));
	return res;
}
