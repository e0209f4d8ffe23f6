/* Backend ssh (issue 19): tenant acme's files and commands on a host over
 * SSH. The suite starts a real sshd (Debian's openssh-server) on a free
 * loopback port with a throwaway host key, a throwaway user and its own
 * authorized_keys; tenant acme (backend ssh) and tenant globex (bwrap,
 * local) get the same requests, and the answers must be the same (file
 * routes, errors, exec results). Then: symlinks a command plants that
 * lead out of ssh_root are refused by every file route; timeout and
 * cancel end the remote command's whole process group; a wrong host key
 * is refused; a failed connect does not poison the next; sshd killed
 * mid-command gives 503 backend_unavailable promptly, and once sshd is
 * back the next command works. Skipped (with the reason) only when
 * /usr/sbin/sshd or ssh-keygen is missing (scripts/deps installs them) or
 * when not run as root (CI runs as root). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

#define SSHD "/usr/sbin/sshd"

static struct it_server srv;
static char *tok_a, *tok_g, *tok_admin;
static char dir[64];  /* the suite's own directory (sshd's files, the remote root) */
static char user[32]; /* the throwaway account */
static int sshd_port;
static pid_t sshd_pid = -1;
static char pin[1024]; /* "ssh-ed25519 AAAA..." of the throwaway host key */
static char skip_why[200];
static bool user_made;

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	int port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static bool port_open(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* sshd in the foreground (-D), logging to stderr (-e) into a file. */
static int sshd_start(void)
{
	char *cfg = xasprintf("%s/sshd_config", dir);
	char *log = xasprintf("%s/sshd.log", dir);
	pid_t pid = fork();
	if (pid == 0) {
		setsid();
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0)
			dup2(fd, 2);
		execl(SSHD, SSHD, "-D", "-e", "-f", cfg, (char *)NULL);
		_exit(127);
	}
	free(cfg);
	free(log);
	if (pid < 0)
		return -1;
	sshd_pid = pid;
	long until = it_now_ms() + 10000;
	while (it_now_ms() < until) {
		if (port_open(sshd_port))
			return 0;
		if (waitpid(pid, NULL, WNOHANG) == pid) {
			sshd_pid = -1;
			return -1;
		}
		usleep(20000);
	}
	return -1;
}

/* Every process named sshd that descends from the listener, and the
 * listener: what a crash of sshd takes away (the command it ran lives on,
 * in its own session). */
static void sshd_kill(void)
{
	if (sshd_pid <= 0)
		return;
	pid_t pids[256];
	size_t n = 0;
	pids[n++] = sshd_pid;
	for (size_t round = 0; round < 4; round++) {
		DIR *d = opendir("/proc");
		struct dirent *e;
		while (d && (e = readdir(d)) && n < 256) {
			if (!isdigit((unsigned char)e->d_name[0]))
				continue;
			char path[300], name[64] = "";
			long ppid = -1;
			snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
			FILE *f = fopen(path, "r");
			char line[256];
			while (f && fgets(line, sizeof line, f)) {
				if (strncmp(line, "Name:", 5) == 0)
					sscanf(line + 5, "%63s", name);
				else if (strncmp(line, "PPid:", 5) == 0)
					ppid = strtol(line + 5, NULL, 10);
			}
			if (f)
				fclose(f);
			pid_t pid = (pid_t)atol(e->d_name);
			bool known = false, parent = false;
			for (size_t i = 0; i < n; i++) {
				known |= pids[i] == pid;
				parent |= pids[i] == ppid;
			}
			if (!known && parent && strcmp(name, "sshd") == 0)
				pids[n++] = pid;
		}
		if (d)
			closedir(d);
	}
	for (size_t i = n; i-- > 0;)
		kill(pids[i], SIGKILL);
	waitpid(sshd_pid, NULL, 0);
	sshd_pid = -1;
}

static int make_files(void)
{
	snprintf(user, sizeof user, "sbxssh%d", (int)getpid() % 100000);
	snprintf(dir, sizeof dir, "/tmp/sbx-ssh-XXXXXX");
	if (!mkdtemp(dir) || chmod(dir, 0755) < 0)
		return -1;
	if (it_sh("useradd -M -d %s/home -s /bin/sh -p '*' %s", dir, user) != 0)
		return -1;
	user_made = true;
	sshd_port = free_port();
	if (it_sh_quiet("ssh-keygen -q -t ed25519 -N '' -f %s/host_key && ssh-keygen -q -t ed25519 -N '' -f "
			"%s/client_key && cp %s/client_key.pub %s/authorized_keys && chmod 0644 "
			"%s/authorized_keys && mkdir -p %s/root %s/home && chown %s: %s/root %s/home && "
			"mkdir -p /run/sshd",
			dir, dir, dir, dir, dir, dir, dir, user, dir, dir) != 0)
		return -1;
	char *cfg = xasprintf("Port %d\nListenAddress 127.0.0.1\nHostKey %s/host_key\nPidFile none\n"
			      "AuthorizedKeysFile %s/authorized_keys\nStrictModes no\nUsePAM no\n"
			      "PasswordAuthentication no\nKbdInteractiveAuthentication no\nAllowUsers %s\n"
			      "Subsystem sftp /usr/lib/openssh/sftp-server\nLogLevel VERBOSE\n",
			      sshd_port, dir, dir, user);
	char *path = xasprintf("%s/sshd_config", dir);
	int rc = it_write_file(path, cfg, strlen(cfg));
	free(cfg);
	free(path);
	path = xasprintf("%s/host_key.pub", dir);
	char *pub = it_read_file(path, NULL);
	free(path);
	if (rc < 0 || !pub)
		return -1;
	/* "TYPE BASE64 comment": the pin is the first two fields. */
	char type[64], b64[900];
	rc = sscanf(pub, "%63s %899s", type, b64) == 2 ? 0 : -1;
	snprintf(pin, sizeof pin, "%s %s", type, b64);
	free(pub);
	return rc;
}

/* acme's policy: backend ssh to our sshd; port and host_key as given. */
static long set_acme(int port, const char *host_key)
{
	char *body =
	    xasprintf("{\"backend\":\"ssh\",\"ssh_host\":\"127.0.0.1\",\"ssh_port\":%d,"
		      "\"ssh_user\":\"%s\",\"ssh_root\":\"%s/root\",\"ssh_key_file\":\"%s/client_key\","
		      "\"ssh_host_key\":\"%s\"}",
		      port, user, dir, dir, host_key);
	long st = pol_put(&srv, tok_admin, "acme", body, NULL);
	free(body);
	return st;
}

static int setup(void **state)
{
	(void)state;
	if (access(SSHD, X_OK) != 0 || it_sh_quiet("command -v ssh-keygen >/dev/null") != 0) {
		snprintf(skip_why, sizeof skip_why, "%s or ssh-keygen is not installed (scripts/deps)", SSHD);
		return 0;
	}
	if (geteuid() != 0) { /* CI runs as root */
		snprintf(skip_why, sizeof skip_why, "needs root (a throwaway account and sshd)");
		return 0;
	}
	const char *const extra[] = {"--set", "backends=bwrap,ssh", "--set", "heartbeat-ms=200", NULL};
	if (make_files() < 0 || sshd_start() < 0 || it_start(&srv, extra) < 0)
		return -1;
	tok_a = it_token(&srv, "acme", NULL);
	tok_g = it_token(&srv, "globex", NULL);
	tok_admin = it_token(&srv, "ops", "admin");
	if (!tok_a || !tok_g || !tok_admin)
		return -1;
	return set_acme(sshd_port, pin) == 200 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = 0;
	/* sshd, the account and the files first: a failing server check
	 * below must not leave them behind. */
	sshd_kill();
	if (user_made) {
		it_sh_quiet("pkill -KILL -u %s; true", user);
		it_sh_quiet("userdel %s", user);
	}
	if (dir[0])
		it_sh_quiet("rm -rf %s", dir);
	if (srv.pid > 0)
		rc = it_finish(&srv);
	free(tok_a);
	free(tok_g);
	free(tok_admin);
	return rc;
}

#define SKIP_UNLESS_SSHD()                                                                                   \
	do {                                                                                                 \
		if (skip_why[0]) {                                                                           \
			fprintf(stderr, "skipped: %s\n", skip_why);                                          \
			skip();                                                                              \
		}                                                                                            \
	} while (0)

static const char *session_hdr = "X-Session-Key: ssh-suite";

static struct it_resp req_as(const char *tok, const char *method, const char *path, const char *body,
			     const char *extra)
{
	struct it_resp r;
	const char *const hdrs[] = {"Content-Type: application/json", session_hdr, extra, NULL};
	assert_int_equal(it_http(&srv, method, path, tok, hdrs, body, body ? strlen(body) : 0, &r), 0);
	return r;
}

static struct it_resp req(const char *method, const char *path, const char *body)
{
	return req_as(tok_a, method, path, body, NULL);
}

/* JSON without the mtimes (the two trees were written at other times). */
static void drop_mtimes(json_t *v)
{
	if (json_is_object(v)) {
		json_object_del(v, "mtime");
		const char *k;
		json_t *x;
		json_object_foreach(v, k, x)
			drop_mtimes(x);
	} else if (json_is_array(v)) {
		size_t i;
		json_t *x;
		json_array_foreach(v, i, x)
			drop_mtimes(x);
	}
}

/* The same request as acme (ssh) and as globex (local): same status, same
 * body (JSON compared as values, mtimes aside), same Content-Range. */
static void same_x(const char *method, const char *path, const char *body, const char *extra, long status)
{
	struct it_resp s = req_as(tok_a, method, path, body, extra);
	struct it_resp l = req_as(tok_g, method, path, body, extra);
	if (s.status != status || l.status != status) {
		fprintf(stderr, "%s %s:\n", method, path);
		it_show(&s);
		it_show(&l);
	}
	assert_int_equal(s.status, status);
	assert_int_equal(l.status, status);
	json_t *js = it_json(&s), *jl = it_json(&l);
	if (js || jl) {
		assert_non_null(js);
		assert_non_null(jl);
		drop_mtimes(js);
		drop_mtimes(jl);
		json_object_del(json_object_get(js, "error"), "request_id");
		json_object_del(json_object_get(jl, "error"), "request_id");
		if (!json_equal(js, jl))
			fprintf(stderr, "%s %s differs:\nssh:   %s\nlocal: %s\n", method, path,
				json_dumps(js, 0), json_dumps(jl, 0));
		assert_true(json_equal(js, jl));
	} else {
		assert_int_equal(s.len, l.len);
		assert_memory_equal(s.body, l.body, s.len);
	}
	char *cs = it_header(&s, "Content-Range"), *cl = it_header(&l, "Content-Range");
	assert_true((!cs && !cl) || (cs && cl && strcmp(cs, cl) == 0));
	free(cs);
	free(cl);
	json_decref(js);
	json_decref(jl);
	it_resp_free(&s);
	it_resp_free(&l);
}

static void same(const char *method, const char *path, const char *body, long status)
{
	same_x(method, path, body, NULL, status);
}

/* Logins sshd accepted so far (its log). */
static int logins(void)
{
	char *path = xasprintf("%s/sshd.log", dir);
	char *log = it_read_file(path, NULL);
	free(path);
	int n = 0;
	for (const char *p = log; p && (p = strstr(p, "Accepted publickey")); p++)
		n++;
	free(log);
	return n;
}

static int logins_before; /* at the start of the file and exec suites */

static void test_files_equal(void **state)
{
	(void)state;
	SKIP_UNLESS_SSHD();
	logins_before = logins();
	same("PUT", "/fs/write?path=docs/a.txt", "hello, host\n", 200);
	/* On the host, under ssh_root, the remote user's. */
	char seg[80];
	it_session_segment("ssh-suite", seg, sizeof seg);
	char *host = xasprintf("%s/root/sessions/%s/docs/a.txt", dir, seg);
	char *data = it_read_file(host, NULL);
	assert_non_null(data);
	assert_string_equal(data, "hello, host\n");
	free(data);
	free(host);
	/* ssh_root is the user's alone, as a local workspace is (made 0755 above) */
	struct stat rst;
	host = xasprintf("%s/root", dir);
	assert_int_equal(stat(host, &rst), 0);
	assert_int_equal(rst.st_mode & 07777, 0700);
	free(host);
	same("GET", "/fs/read?path=docs/a.txt", NULL, 200);
	same("GET", "/fs/read_buffer?path=docs/a.txt", NULL, 200);
	same("GET", "/fs/stat?path=docs/a.txt", NULL, 200);
	same("GET", "/fs/exists?path=docs/a.txt", NULL, 200);
	same("GET", "/fs/exists?path=docs/none", NULL, 200);
	same("POST", "/fs/mkdir", "{\"path\":\"docs/sub/deep\",\"recursive\":true}", 201);
	same("POST", "/fs/mkdir", "{\"path\":\"docs/sub\"}", 409);
	same("GET", "/fs/readdir?path=docs", NULL, 200);
	same("GET", "/fs/readdir?path=docs&detail=true", NULL, 200);
	same("GET", "/fs/readdir?path=/workspace", NULL, 200);
	/* Errors: the local routes' codes and messages. */
	same("GET", "/fs/read?path=docs/none", NULL, 404);
	same("GET", "/fs/read?path=docs", NULL, 409);
	same("GET", "/fs/read?path=docs/a.txt/x", NULL, 409);
	same("POST", "/fs/mkdir", "{\"path\":\"docs/x/y\"}", 404);
	same("GET", "/fs/read?path=../../etc/passwd", NULL, 404); /* clamped at the root, as locally */
	same("POST", "/fs/move", "{\"from\":\"docs/none\",\"to\":\"docs/b.txt\"}", 404);
	same("POST", "/fs/rm", "{\"path\":\"docs/sub\"}", 409);
	same("POST", "/fs/rm", "{\"path\":\"docs/none\",\"force\":true}", 200);
	same("POST", "/fs/rm", "{\"path\":\"docs/none\"}", 404);
	same("POST", "/fs/rm", "{\"path\":\"/workspace\",\"recursive\":true}", 403);
	same("PUT", "/fs/write?path=docs/c.txt", "c", 200);
	same("POST", "/fs/move", "{\"from\":\"docs/a.txt\",\"to\":\"docs/c.txt\"}", 409);
	same("POST", "/fs/move", "{\"from\":\"docs/a.txt\",\"to\":\"docs/c.txt\",\"overwrite\":true}", 200);
	same("GET", "/fs/read?path=docs/c.txt", NULL, 200);
	same("POST", "/fs/move", "{\"from\":\"docs/c.txt\",\"to\":\"nodir/c.txt\"}", 404);
	same("POST", "/fs/rm", "{\"path\":\"docs/sub\",\"recursive\":true}", 200);
	same("GET", "/fs/readdir?path=docs", NULL, 200);
	same("PUT", "/fs/write?path=bin.dat", "\xff\xfe", 200);
	same("GET", "/fs/read?path=bin.dat", NULL, 422);
	same("PUT", "/fs/write?path=r.bin", "0123456789", 200);
	same_x("GET", "/fs/read_buffer?path=r.bin", NULL, "Range: bytes=2-5", 206);
	same_x("GET", "/fs/read_buffer?path=r.bin", NULL, "Range: bytes=-3", 206);
	same_x("GET", "/fs/read_buffer?path=r.bin", NULL, "Range: bytes=20-", 416);
	/* A new session's directory is there from its first request on. */
	session_hdr = "X-Session-Key: fresh-1";
	same("GET", "/fs/readdir?path=.", NULL, 200);
	session_hdr = "X-Session-Key: fresh-2";
	same("POST", "/fs/mkdir", "{\"path\":\"d\"}", 201);
	session_hdr = "X-Session-Key: fresh-3";
	same("GET", "/fs/stat?path=.", NULL, 200);
	session_hdr = "X-Session-Key: ssh-suite";
	/* What needs a local workspace is refused, not done wrongly. */
	struct it_resp r = req("GET", "/sessions", NULL);
	it_expect_error(&r, 403, "forbidden");
	it_resp_free(&r);
	r = req("GET", "/fs/read_stream?path=r.bin", NULL);
	it_expect_error(&r, 403, "forbidden");
	it_resp_free(&r);
}

static json_t *exec_as(const char *tok, const char *body, long status)
{
	struct it_resp r = req_as(tok, "POST", "/exec", body, NULL);
	if (r.status != status)
		it_show(&r);
	assert_int_equal(r.status, status);
	json_t *v = it_json(&r);
	it_resp_free(&r);
	return v;
}

static void test_exec_equal(void **state)
{
	(void)state;
	SKIP_UNLESS_SSHD();
	const char *bodies[] = {
	    ("{\"command\":\"echo out; echo err >&2; cat; echo $GREETING; ls; exit 3\",\"stdin\":\"in\\n\","
	     "\"env\":{\"GREETING\":\"hi there 'q'\"},\"timeout_s\":30}"),
	    "{\"command\":\"head -c 5000 /dev/zero | tr '\\\\0' x\",\"max_output_bytes\":256}",
	    "{\"command\":\"kill -TERM $$\"}",
	    "{\"command\":\"sleep 20\",\"timeout_s\":1}",
	    "{\"command\":\"sleep 20\",\"timeout_s\":10,\"idle_timeout_s\":1}",
	};
	for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
		json_t *s = exec_as(tok_a, bodies[i], 200), *l = exec_as(tok_g, bodies[i], 200);
		const char *keys[] = {"exit_code", "timed_out",	   "idle",	   "cancelled",
				      "truncated", "stdout_bytes", "stderr_bytes", "stderr"};
		for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
			if (!json_equal(json_object_get(s, keys[k]), json_object_get(l, keys[k])))
				fprintf(stderr, "%s: %s differs:\nssh:   %s\nlocal: %s\n", bodies[i], keys[k],
					json_dumps(s, 0), json_dumps(l, 0));
			assert_true(json_equal(json_object_get(s, keys[k]), json_object_get(l, keys[k])));
		}
		if (i == 0) {
			assert_int_equal(jint(s, "exit_code"), 3);
			assert_string_equal(jstr(s, "stdout"), jstr(l, "stdout"));
			assert_non_null(strstr(jstr(s, "stdout"), "out\nin\nhi there 'q'\n"));
		}
		json_decref(s);
		json_decref(l);
	}
	/* A cwd that is not there, refused as locally. */
	json_t *v = exec_as(tok_a, "{\"command\":\"true\",\"cwd\":\"no/such/dir\"}", 404);
	json_decref(v);
	/* What the ssh backend does not carry is refused. */
	v = exec_as(tok_a, "{\"command\":\"true\",\"track_changes\":true}", 403);
	json_decref(v);
	v = exec_as(tok_a, "{\"command\":\"true\",\"stdin_pipe\":true,\"background\":true}", 403);
	json_decref(v);
	/* Streamed: start, output, heartbeats (every 200 ms here) and exit. */
	struct it_resp s = req("POST", "/exec", "{\"command\":\"echo live; sleep 1\",\"stream\":true}");
	it_expect_status(&s, 200);
	assert_non_null(strstr(s.body, "event: start"));
	assert_non_null(strstr(s.body, "live"));
	assert_non_null(strstr(s.body, "event: heartbeat"));
	assert_non_null(strstr(s.body, "\"stdout_bytes\":5"));
	assert_non_null(strstr(s.body, "event: exit"));
	it_resp_free(&s);
	/* The exec record and the audit, as for local commands. */
	json_t *list = NULL;
	assert_int_equal(it_get_json(&srv, tok_a, "/execs?limit=5", &list), 200);
	assert_true(json_array_size(json_object_get(list, "execs")) >= 3);
	json_decref(list);
	/* Connections are pooled (also across the tenant cache's reloads,
	 * every 5 s): one request after the other, a login or two for all. */
	int n = logins() - logins_before;
	if (n > 3)
		fprintf(stderr, "%d logins for the file and exec suites\n", n);
	assert_true(n <= 3);
}

/* A command plants symlinks to /etc: no file route follows them out. */
static void test_symlink_escape(void **state)
{
	(void)state;
	SKIP_UNLESS_SSHD();
	json_t *v = exec_as(
	    tok_a,
	    "{\"command\":\"mkdir -p esc && ln -s /etc esc/etc && ln -s /etc/passwd esc/pw && "
	    "ln -s ../../../../../.. esc/up && ln -s inside.txt esc/in && echo ok > esc/inside.txt\"}",
	    200);
	assert_int_equal(jint(v, "exit_code"), 0);
	json_decref(v);
	const char *bad[][3] = {
	    {"GET", "/fs/read?path=esc/pw", NULL},
	    {"GET", "/fs/read?path=esc/etc/passwd", NULL},
	    {"GET", "/fs/read?path=esc/up/etc/passwd", NULL},
	    {"GET", "/fs/read_buffer?path=esc/pw", NULL},
	    {"PUT", "/fs/write?path=esc/etc/sbx-escape", "x"},
	    {"PUT", "/fs/write?path=esc/pw", "x"},
	    {"GET", "/fs/stat?path=esc/etc/passwd", NULL},
	    {"GET", "/fs/readdir?path=esc/etc", NULL},
	    {"GET", "/fs/exists?path=esc/etc/passwd", NULL},
	    {"POST", "/fs/mkdir", "{\"path\":\"esc/etc/sbx-escape\"}"},
	    {"POST", "/fs/mkdir", "{\"path\":\"esc/etc/sbx-escape/x\",\"recursive\":true}"},
	    {"POST", "/fs/rm", "{\"path\":\"esc/etc/hostname\"}"},
	    {"POST", "/fs/move", "{\"from\":\"esc/etc/hostname\",\"to\":\"stolen\"}"},
	    {"POST", "/fs/move", "{\"from\":\"esc/inside.txt\",\"to\":\"esc/etc/sbx-escape\"}"},
	    {"POST", "/exec", "{\"command\":\"pwd\",\"cwd\":\"esc/etc\"}"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct it_resp r = req(bad[i][0], bad[i][1], bad[i][2]);
		if (r.status != 403)
			fprintf(stderr, "%s %s: not refused\n", bad[i][0], bad[i][1]);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
	}
	assert_int_equal(access("/etc/sbx-escape", F_OK), -1);
	assert_int_equal(access("/etc/hostname", F_OK), 0);
	/* The links themselves: described as themselves, and removable; a
	 * link that stays inside is followed. */
	struct it_resp r = req("GET", "/fs/stat?path=esc/pw", NULL);
	it_expect_status(&r, 200);
	json_t *st = it_json(&r);
	assert_true(jtrue(st, "is_symlink"));
	assert_string_equal(jstr(st, "type"), "symlink");
	json_decref(st);
	it_resp_free(&r);
	r = req("GET", "/fs/read?path=esc/in", NULL);
	it_expect_status(&r, 200);
	assert_string_equal(r.body, "ok\n");
	it_resp_free(&r);
	r = req("POST", "/fs/rm", "{\"path\":\"esc/etc\"}");
	it_expect_status(&r, 200);
	it_resp_free(&r);
	assert_int_equal(access("/etc/hostname", F_OK), 0);
}

/* The pid written to path by the remote command (bounded wait). */
static long wait_pid_file(const char *path)
{
	long until = it_now_ms() + 15000;
	while (it_now_ms() < until) {
		char *s = it_read_file(path, NULL);
		long pid = s ? atol(s) : 0;
		free(s);
		if (pid > 0)
			return pid;
		usleep(20000);
	}
	return -1;
}

static bool gone_within(long pid, long ms)
{
	long until = it_now_ms() + ms;
	while (it_now_ms() < until) {
		if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
			return true;
		usleep(20000);
	}
	return false;
}

static void test_timeout_and_cancel_kill_remote(void **state)
{
	(void)state;
	SKIP_UNLESS_SSHD();
	/* A child in the background: the whole group must go, not the shell only. */
	char *body =
	    xasprintf("{\"command\":\"sleep 300 & echo $! > %s/root/t.pid; wait\",\"timeout_s\":1}", dir);
	json_t *v = exec_as(tok_a, body, 200);
	free(body);
	assert_true(jtrue(v, "timed_out"));
	assert_int_equal(jint(v, "exit_code"), 124);
	json_decref(v);
	char *pf = xasprintf("%s/root/t.pid", dir);
	long pid = wait_pid_file(pf);
	free(pf);
	assert_true(pid > 0);
	assert_true(gone_within(pid, 10000));

	body =
	    xasprintf("{\"command\":\"sleep 300 & echo $! > %s/root/c.pid; wait\",\"background\":true}", dir);
	v = exec_as(tok_a, body, 202);
	free(body);
	char id[80], path[160];
	snprintf(id, sizeof id, "%s", jstr(v, "id"));
	json_decref(v);
	pf = xasprintf("%s/root/c.pid", dir);
	pid = wait_pid_file(pf);
	free(pf);
	assert_true(pid > 0);
	assert_int_equal(kill((pid_t)pid, 0), 0);
	snprintf(path, sizeof path, "/exec/%s/cancel", id);
	struct it_resp c = req("POST", path, NULL);
	it_expect_status(&c, 202);
	it_resp_free(&c);
	json_t *done = ex_wait_state(&srv, tok_a, id, "cancelled", 15000);
	assert_non_null(done);
	assert_true(jtrue(json_object_get(done, "result"), "cancelled"));
	json_decref(done);
	assert_true(gone_within(pid, 10000));
}

static void expect_503(const char *method, const char *path, const char *body, const char *why)
{
	long t0 = it_now_ms();
	struct it_resp r = req(method, path, body);
	it_expect_error(&r, 503, "backend_unavailable");
	if (why && !strstr(r.body, why))
		it_show(&r);
	if (why)
		assert_non_null(strstr(r.body, why));
	char *ra = it_header(&r, "Retry-After");
	assert_non_null(ra);
	assert_true(atol(ra) >= 1);
	free(ra);
	assert_true(it_now_ms() - t0 < 15000);
	it_resp_free(&r);
}

static void test_host_key_pinned(void **state)
{
	(void)state;
	SKIP_UNLESS_SSHD();
	/* Another key: refused, and /readyz says why. */
	char *other = xasprintf("%s/client_key.pub", dir);
	char *pub = it_read_file(other, NULL);
	free(other);
	char type[64], b64[900], wrong[1000];
	assert_int_equal(sscanf(pub, "%63s %899s", type, b64), 2);
	free(pub);
	snprintf(wrong, sizeof wrong, "%s %s", type, b64);
	assert_int_equal(set_acme(sshd_port, wrong), 200);
	expect_503("GET", "/fs/exists?path=x", NULL, "not the pinned ssh_host_key");
	expect_503("POST", "/exec", "{\"command\":\"true\"}", "not the pinned ssh_host_key");
	json_t *ready = NULL;
	assert_int_equal(it_get_json(&srv, NULL, "/readyz", &ready), 200);
	char *bt = json_dumps(json_object_get(ready, "backends"), 0);
	assert_non_null(strstr(bt, "not the pinned ssh_host_key"));
	assert_non_null(strstr(bt, "remote account"));
	free(bt);
	json_decref(ready);
	/* A pin that is no key at all is refused when set. */
	json_t *out = NULL;
	char *body = xasprintf("{\"ssh_host_key\":\"not a key\"}");
	assert_int_equal(pol_put(&srv, tok_admin, "acme", body, &out), 200);
	free(body);
	json_decref(out);
	expect_503("GET", "/fs/exists?path=x", NULL, "ssh_host_key must be");
	/* The right key by its SHA256 fingerprint: served again. */
	char *cmd = xasprintf("ssh-keygen -lf %s/host_key.pub | awk '{print $2}' > %s/fp", dir, dir);
	assert_int_equal(it_sh_quiet("%s", cmd), 0);
	free(cmd);
	char *fpp = xasprintf("%s/fp", dir);
	char *fp = it_read_file(fpp, NULL);
	free(fpp);
	assert_non_null(fp);
	fp[strcspn(fp, "\n")] = '\0';
	assert_int_equal(set_acme(sshd_port, fp), 200);
	free(fp);
	struct it_resp r = req("GET", "/fs/exists?path=x", NULL);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	assert_int_equal(set_acme(sshd_port, pin), 200);
}

static void test_failed_connect_then_good(void **state)
{
	(void)state;
	SKIP_UNLESS_SSHD();
	int closed = free_port();
	assert_int_equal(set_acme(closed, pin), 200);
	expect_503("GET", "/fs/read?path=docs/c.txt", NULL, "cannot connect");
	expect_503("POST", "/exec", "{\"command\":\"true\"}", "cannot connect");
	assert_int_equal(set_acme(sshd_port, pin), 200);
	json_t *v = exec_as(tok_a, "{\"command\":\"echo fine\"}", 200);
	assert_string_equal(jstr(v, "stdout"), "fine\n");
	json_decref(v);
	/* Policies missing a key are refused when set. */
	json_t *out = NULL;
	assert_int_equal(pol_put(&srv, tok_admin, "globex", "{\"backend\":\"ssh\"}", &out), 400);
	assert_non_null(strstr(jstr(json_object_get(out, "error"), "message"), "ssh_host"));
	json_decref(out);
}

static void *exec_long(void *arg)
{
	long *out = arg;
	json_t *res = NULL;
	long t0 = it_now_ms();
	char *body = xasprintf("{\"command\":\"echo $$ > %s/root/k.pid; sleep 120\",\"timeout_s\":200}", dir);
	struct it_resp r = req("POST", "/exec", body);
	free(body);
	out[0] = r.status;
	out[1] = it_now_ms() - t0;
	res = it_json(&r);
	const char *code = json_string_value(json_object_get(json_object_get(res, "error"), "code"));
	out[2] = code && strcmp(code, "backend_unavailable") == 0;
	json_decref(res);
	it_resp_free(&r);
	return NULL;
}

/* A command of the tenant stops every sftp-server of its account. */
static void stop_sftp(void)
{
	json_t *v =
	    exec_as(tok_a, "{\"command\":\"pkill -STOP -u \\\"$(id -u)\\\" sftp-server; true\"}", 200);
	json_decref(v);
	assert_int_equal(it_sh_quiet("pgrep -r T -u %s sftp-server >/dev/null", user), 0);
}

/* Start b; probe /healthz (which must answer) until b is done, for at
 * most 60 s: whether it was (then it is joined, except on false). */
static bool run_probing(struct bg_req *b, int *probes)
{
	pthread_create(&b->th, NULL, bg_main, b);
	for (long t0 = it_now_ms(); it_now_ms() - t0 < 60000;) {
		struct it_resp h = req("GET", "/healthz", NULL);
		it_expect_status(&h, 200);
		it_resp_free(&h);
		(*probes)++;
		usleep(200000); /* a probe every 200 ms until it answered */
		if (pthread_tryjoin_np(b->th, NULL) == 0)
			return true;
	}
	return false;
}

/* The tenant stops its own account's sftp-server (stock sshd runs it as a
 * process of the account): a file request and an exec still answer in
 * bounded time (the connection's deadline cuts it), the server stays up,
 * and once the process goes on, requests work again. */
static void test_sftp_server_stopped(void **state)
{
	(void)state;
	SKIP_UNLESS_SSHD();
	struct it_resp r = req("GET", "/fs/read?path=docs/c.txt", NULL); /* a live SFTP session */
	it_expect_status(&r, 200);
	it_resp_free(&r);
	stop_sftp();
	static const char *const hdrs[] = {"X-Session-Key: ssh-suite", NULL};
	struct bg_req f = {.s = &srv,
			   .tok = tok_a,
			   .method = "GET",
			   .path = "/fs/read?path=docs/c.txt",
			   .hdrs = hdrs,
			   .rc = -1};
	struct bg_req e = {.s = &srv,
			   .tok = tok_a,
			   .method = "POST",
			   .path = "/exec",
			   .body = xstrdup("{\"command\":\"echo hi\",\"timeout_s\":3}"),
			   .hdrs = hdrs,
			   .rc = -1};
	/* One after the other, each on the pooled connection the pkill went
	 * back to (its own server stopped too). */
	int probes = 0;
	bool e_done = run_probing(&e, &probes), f_done = false;
	if (e_done) {
		stop_sftp();
		f_done = run_probing(&f, &probes);
	}
	it_sh_quiet("pkill -CONT -u %s sftp-server; true", user); /* the threads end either way */
	if (!e_done)
		pthread_join(e.th, NULL);
	else if (!f_done)
		pthread_join(f.th, NULL);
	free(e.body);
	fprintf(stderr, "  fs/read %ld in %ld ms, exec %ld in %ld ms, %d health probes\n", f.resp.status,
		f.ms, e.resp.status, e.ms, probes);
	assert_true(f_done && e_done);
	assert_true(f.ms < 30000 && e.ms < 30000);
	assert_int_equal(f.resp.status, 503);
	assert_non_null(strstr(f.resp.body, "did not answer a file operation in time"));
	assert_int_equal(e.resp.status, 503);
	assert_non_null(strstr(e.resp.body, "did not answer within the command's timeout_s"));
	assert_true(probes > 0);
	it_resp_free(&f.resp);
	it_resp_free(&e.resp);
	/* Going on again: the next requests work. */
	r = req("GET", "/fs/read?path=docs/c.txt", NULL);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	json_t *v = exec_as(tok_a, "{\"command\":\"echo again\"}", 200);
	assert_string_equal(jstr(v, "stdout"), "again\n");
	json_decref(v);
}

static void test_sshd_killed_and_back(void **state)
{
	(void)state;
	SKIP_UNLESS_SSHD();
	static long out[3];
	pthread_t th;
	pthread_create(&th, NULL, exec_long, out);
	char *pf = xasprintf("%s/root/k.pid", dir);
	long pid = wait_pid_file(pf);
	free(pf);
	long t_kill = it_now_ms();
	sshd_kill(); /* (also when the pid never came: the thread must end) */
	pthread_join(th, NULL);
	assert_true(pid > 0);
	assert_int_equal(out[0], 503);
	assert_true(out[2]);
	assert_true(it_now_ms() - t_kill < 10000);
	kill((pid_t)pid, SIGKILL); /* what became of it is unknown to the server: ours to clean */
	expect_503("GET", "/fs/read?path=docs/c.txt", NULL, "cannot connect");
	assert_int_equal(sshd_start(), 0);
	json_t *v = exec_as(tok_a, "{\"command\":\"echo back\"}", 200);
	assert_string_equal(jstr(v, "stdout"), "back\n");
	json_decref(v);
	struct it_resp r = req("GET", "/fs/read?path=docs/c.txt", NULL);
	it_expect_status(&r, 200);
	it_resp_free(&r);
}

/* A second tenant on the same account is refused (it could reach the
 * first one's files and kill its commands), saying why. */
static void test_one_account_per_tenant(void **state)
{
	(void)state;
	SKIP_UNLESS_SSHD();
	char *body =
	    xasprintf("{\"backend\":\"ssh\",\"ssh_host\":\"127.0.0.1\",\"ssh_port\":%d,"
		      "\"ssh_user\":\"%s\",\"ssh_root\":\"%s/root/other\",\"ssh_key_file\":\"%s/client_key\","
		      "\"ssh_host_key\":\"%s\"}",
		      sshd_port, user, dir, dir, pin);
	assert_int_equal(pol_put(&srv, tok_admin, "globex", body, NULL), 200);
	free(body);
	struct it_resp r = req_as(tok_g, "GET", "/fs/read?path=docs/c.txt", NULL, NULL);
	it_expect_status(&r, 503);
	assert_non_null(strstr(r.body, "one account per tenant"));
	it_resp_free(&r);
	assert_int_equal(pol_put(&srv, tok_admin, "globex", "{\"backend\":\"bwrap\"}", NULL), 200);
	r = req("GET", "/fs/read?path=docs/c.txt", NULL); /* acme's own still works */
	it_expect_status(&r, 200);
	it_resp_free(&r);
}

/* Every route above reached the host off the HTTP event threads: had
 * one tried SSH I/O on an event thread (http/daemon.c marks them,
 * common/nowait.h), sandbox/ssh.c would have refused it and logged the
 * bug (tests/unit/http/test_daemon.c: the marking itself). */
static void test_no_ssh_on_event_threads(void **state)
{
	(void)state;
	SKIP_UNLESS_SSHD();
	size_t n = 0;
	char *log = it_read_file(srv.log, &n);
	assert_non_null(log);
	assert_non_null(strstr(log, "/fs/read")); /* the server's log, with the requests above */
	assert_null(strstr(log, "network I/O refused on an HTTP event thread"));
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_files_equal),
	    cmocka_unit_test(test_exec_equal),
	    cmocka_unit_test(test_symlink_escape),
	    cmocka_unit_test(test_timeout_and_cancel_kill_remote),
	    cmocka_unit_test(test_host_key_pinned),
	    cmocka_unit_test(test_failed_connect_then_good),
	    cmocka_unit_test(test_sftp_server_stopped),
	    cmocka_unit_test(test_sshd_killed_and_back),
	    cmocka_unit_test(test_one_account_per_tenant),
	    cmocka_unit_test(test_no_ssh_on_event_threads),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
