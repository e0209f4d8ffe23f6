#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "harness.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/loop.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth/auth.h"
#include "common/buf.h"
#include "common/xmalloc.h"

const char *it_bin(void)
{
	const char *b = getenv("SANDBOXD_BIN");
	return b ? b : "./sandboxd";
}

int it_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof a;
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &n) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return ntohs(a.sin_port);
}

/* What is left to read on f, up to cap bytes (caller frees). */
static char *read_all(FILE *f, size_t cap, size_t *len)
{
	struct buf b;
	buf_init(&b, cap);
	char tmp[65536];
	size_t n;
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
		buf_append(&b, tmp, n);
	return buf_steal(&b, len);
}

char *it_cli(struct it_server *s, int *status, const char *args)
{
	char as[96] = "";
	if (s->as_user)
		snprintf(as, sizeof as, "setpriv --reuid=%u --regid=%u --clear-groups -- ",
			 (unsigned)s->as_uid, (unsigned)s->as_gid);
	char *cmd = xasprintf("%s'%s' %s --data-dir '%s' 2>>'%s'", as, it_bin(), args, s->dir, s->log);
	FILE *p = popen(cmd, "r");
	free(cmd);
	if (!p)
		return NULL;
	char *out = read_all(p, 1u << 24, NULL);
	int st = pclose(p);
	if (status)
		*status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return out;
}

char *it_token(struct it_server *s, const char *tenant, const char *scope)
{
	return it_token_sub(s, tenant, scope, NULL);
}

char *it_token_sub(struct it_server *s, const char *tenant, const char *scope, const char *sub)
{
	char *who = sub ? xasprintf(" --sub '%s'", sub) : xstrdup("");
	char *args = scope ? xasprintf("token --tenant %s --scope '%s'%s --ttl 600", tenant, scope, who)
			   : xasprintf("token --tenant %s%s --ttl 600", tenant, who);
	free(who);
	int st = 0;
	char *out = it_cli(s, &st, args);
	if (!out || st != 0) {
		fprintf(stderr, "harness: sandboxd %s exited %d: %s\n", args, st, out ? out : "(no output)");
		free(args);
		free(out);
		return NULL;
	}
	free(args);
	out[strcspn(out, "\n")] = '\0';
	return out;
}

char *it_token_hs256(const char *secret, const char *kid, const char *tenant, const char *scope,
		     const char *sub)
{
	int64_t now = (int64_t)time(NULL);
	return auth_mint_hs256_kid((const unsigned char *)secret, strlen(secret), kid, tenant, scope, sub,
				   now, now + 600, NULL);
}

static long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Up to 60 s for /healthz to answer 200: a deadline, not a count of
 * tries, since a start's cost depends on the machine (images made and
 * mounted for three tenants under a TCG guest took past the 6 s that
 * 300 tries of 20 ms gave). A server that exits fails at once. */
static int wait_healthy(struct it_server *s)
{
	for (long until = mono_ms() + 60000; mono_ms() < until;) {
		struct it_resp r;
		if (it_http(s, "GET", "/healthz", NULL, NULL, NULL, 0, &r) == 0) {
			long st = r.status;
			it_resp_free(&r);
			if (st == 200)
				return 0;
		}
		int status;
		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			fprintf(stderr, "harness: server exited during start; the log's end (%s):\n", s->log);
			it_sh("tail -n 30 '%s' >&2", s->log);
			s->pid = 0;
			return -1;
		}
		usleep(20000);
	}
	fprintf(stderr, "harness: no healthy answer within 60 s; the log's end (%s):\n", s->log);
	it_sh("tail -n 30 '%s' >&2", s->log);
	return -1;
}

/* On a pure cgroup-v2 host (tests/vm's guest) a root server gets a group
 * of its own, as systemd's Delegate=yes gives a unit: a sibling of the
 * test's group, <parent>/<data dir's name>.service, the same across
 * restarts (a restart sweeps what the last run left there). In the test's group
 * it would share its place with ctest and the test (the v2 rule: a group
 * that enables controllers holds no process, so the server could not
 * delegate to its commands). The test's group is then the root, or one
 * whose parent enables the controllers (tests/vm/README.md). Into dir:
 * the group's path, "" when the server stays where it is. */
static void cgroup2_group_of(const struct it_server *s, char *dir, size_t dirsz)
{
	struct statfs sf;
	char buf[4096];
	dir[0] = '\0';
	if (geteuid() != 0 || statfs("/sys/fs/cgroup", &sf) < 0 || sf.f_type != 0x63677270)
		return;
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return;
	while (fgets(buf, sizeof buf, f) && strncmp(buf, "0::", 3) != 0)
		;
	fclose(f);
	if (strncmp(buf, "0::/", 4) != 0)
		return;
	buf[strcspn(buf, "\n")] = '\0';
	char *slash = strrchr(buf + 3, '/');
	if (slash == buf + 3) /* the root group: exempt from the rule */
		return;
	*slash = '\0';
	const char *name = strrchr(s->dir, '/');
	snprintf(dir, dirsz, "/sys/fs/cgroup%s/%s.service", buf + 3, name ? name + 1 : "sandboxd-it");
}

void it_cgroup2_base(const struct it_server *s, char *out, size_t outsz)
{
	cgroup2_group_of(s, out, outsz);
	if (out[0])
		return;
	char *t = it_read_file("/proc/self/cgroup", NULL);
	const char *p = t ? strstr(t, "0::") : NULL;
	size_t n = p ? strcspn(p + 3, "\n") : 0;
	snprintf(out, outsz, "/sys/fs/cgroup%.*s", p && strncmp(p + 3, "/\n", 2) != 0 ? (int)n : 0,
		 p ? p + 3 : "");
	free(t);
}

/* Every group below dir, and dir, removed deepest first (they are empty
 * once the server is gone: it removed its commands' groups, or the next
 * start of the same uid-base swept them). */
static void rmdir_tree(const char *dir, int depth)
{
	DIR *d = depth < 8 ? opendir(dir) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		char *sub = xasprintf("%s/%s", dir, de->d_name);
		rmdir_tree(sub, depth + 1);
		free(sub);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

static int spawn(struct it_server *s, const char *const *extra)
{
	if (!s->keep_port || !s->port)
		s->port = it_free_port();
	snprintf(s->base, sizeof s->base, "%s://127.0.0.1:%d", s->tls ? "https" : "http", s->port);
	char listen[64];
	snprintf(listen, sizeof listen, "127.0.0.1:%d", s->port);
	const char *argv[64] = {it_bin(), "serve", "--data-dir", s->dir, "--listen", listen};
	int n = 6;
	bool has_base = false, has_disk = false;
	const char *ub = NULL; /* the uid-base it runs with: its cgroup root's name */
	for (int i = 0; extra && extra[i] && n < 58; i++) {
		argv[n++] = extra[i];
		if (strncmp(extra[i], "uid-base=", 9) == 0)
			ub = extra[i] + 9;
		has_base = has_base || ub;
		has_disk = has_disk || strncmp(extra[i], "disk-quota=", 11) == 0;
	}
	/* A root test server with loop devices would otherwise give every
	 * tenant a disk image (disk-quota=auto): the host has few loop
	 * devices, and the suites run side by side. Tests of disk quotas ask. */
	if (!has_disk) {
		argv[n++] = "--set";
		argv[n++] = "disk-quota=none";
	}
	/* Every server gets a uid range (and so a cgroup root) of its own:
	 * two servers on one host must not share one (the second refuses to
	 * start), and suites run side by side. Kept across restarts. */
	if (!has_base) {
		static int count;
		if (!s->uid_base[0])
			snprintf(s->uid_base, sizeof s->uid_base, "uid-base=%ld",
				 3000000L + (long)(getpid() % 100000) * 256 + (long)(count++ % 16) * 16);
		argv[n++] = "--set";
		argv[n++] = s->uid_base;
		ub = s->uid_base + strlen("uid-base=");
	}
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
		}
		/* A restart joins the leaf the last run moved itself into (its
		 * group enables controllers now: it takes no process), as a
		 * container's init restarting the server would keep it there;
		 * the server then finds its base above it. */
		char cg[4200], procs[4400];
		cgroup2_group_of(s, cg, sizeof cg);
		snprintf(procs, sizeof procs, "%s/sandboxd/%s/server/cgroup.procs", cg, ub ? ub : "");
		if (cg[0] && (!ub || access(procs, F_OK) < 0))
			snprintf(procs, sizeof procs, "%s/cgroup.procs", cg);
		/* The parent hands the controllers down (systemd enables them
		 * in system.slice; a login session's user slice may lack cpu
		 * or io): as a unit's slice would, errors left to the server. */
		char *up =
		    cg[0] ? xasprintf("%.*s/cgroup.subtree_control", (int)(strrchr(cg, '/') - cg), cg) : NULL;
		if (up && (fd = open(up, O_WRONLY | O_CLOEXEC)) >= 0) {
			for (const char *c = "+memory\0+pids\0+cpu\0+io\0"; *c; c += strlen(c) + 1) {
				ssize_t w =
				    write(fd, c, strlen(c)); /* fails for a controller the host lacks */
				(void)w;
			}
			close(fd);
		}
		free(up);
		if (cg[0] && ((mkdir(cg, 0755) < 0 && errno != EEXIST) ||
			      (fd = open(procs, O_WRONLY | O_CLOEXEC)) < 0 || write(fd, "0", 1) != 1))
			_exit(125);
		if (s->as_user && (setgroups(0, NULL) < 0 || setgid(s->as_gid) < 0 || setuid(s->as_uid) < 0))
			_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	s->pid = pid;
	return wait_healthy(s);
}

/* Make the data directory under parent, add the three tenants, start. */
static int start_fresh(struct it_server *s, const char *parent, const char *const *extra)
{
	for (int i = 0; extra && extra[i]; i++)
		if (strcmp(extra[i], "--tls-cert") == 0)
			s->tls = true;
	snprintf(s->dir, sizeof s->dir, "%s/sandboxd-it-XXXXXX", parent);
	if (!mkdtemp(s->dir))
		return -1;
	chmod(s->dir, 0755);
	if (s->as_user && chown(s->dir, s->as_uid, s->as_gid) < 0)
		return -1;
	/* The log stays in /tmp whatever disk the data is on. */
	snprintf(s->log, sizeof s->log, "/tmp/%s.log", strrchr(s->dir, '/') + 1);
	int st = 0;
	/* acme and globex have approver keys: the approval suites' approve
	 * tokens are minted with them (`sandboxd token --scope approve`). */
	static const char *const tenants[] = {"tenant add acme", "tenant add globex",
					      "tenant add ops --operator", "tenant set-approver acme",
					      "tenant set-approver globex"};
	for (size_t i = 0; i < sizeof tenants / sizeof tenants[0]; i++) {
		free(it_cli(s, &st, tenants[i]));
		if (st != 0)
			return -1;
	}
	return spawn(s, extra);
}

int it_start(struct it_server *s, const char *const *extra)
{
	return it_start_under(s, "/tmp", extra);
}

int it_start_under(struct it_server *s, const char *parent, const char *const *extra)
{
	memset(s, 0, sizeof *s);
	return start_fresh(s, parent, extra);
}

/* In a child as uid:gid (no supplementary groups): the first directory
 * on path's way it may not search, written to fd; exit 0 when it can run
 * path. */
static void probe_as(const char *path, uid_t uid, gid_t gid, int fd)
{
	if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
		_exit(2);
	if (access(path, X_OK) == 0)
		_exit(0);
	char dir[4096];
	for (const char *p = strchr(path + 1, '/'); p; p = strchr(p + 1, '/')) {
		snprintf(dir, sizeof dir, "%.*s", (int)(p - path), path);
		if (access(dir, X_OK) < 0) {
			ssize_t n = write(fd, dir, strlen(dir));
			(void)n;
			_exit(1);
		}
	}
	_exit(1);
}

int it_runnable_as(const char *bin, uid_t uid, gid_t gid, char *why, size_t whysz)
{
	char *real = realpath(bin, NULL), blocked[4096] = "";
	int p[2];
	if (!real || pipe(p) < 0) {
		snprintf(why, whysz, "cannot resolve %s: %s", bin, strerror(errno));
		free(real);
		return -1;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		probe_as(real, uid, gid, p[1]);
	close(p[1]);
	ssize_t n = pid > 0 ? read(p[0], blocked, sizeof blocked - 1) : -1;
	blocked[n > 0 ? n : 0] = '\0';
	close(p[0]);
	int st = 0;
	while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	int rc = pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
	struct stat sb;
	if (rc < 0 && blocked[0] && stat(blocked, &sb) == 0)
		snprintf(why, whysz,
			 "%s cannot be run by uid %u: %s (mode %04o, owner %u) is not searchable by it. The "
			 "test runs sandboxd as another user, so the checkout and build directory must be "
			 "reachable by every user: chmod o+x %s (0711 is enough), or clone and build under a "
			 "directory every user can search (docs/testing.md: \"A checkout every user can "
			 "reach\")",
			 real, (unsigned)uid, blocked, (unsigned)(sb.st_mode & 07777), (unsigned)sb.st_uid,
			 blocked);
	else if (rc < 0)
		snprintf(why, whysz, "%s cannot be run by uid %u (not executable by it)", real,
			 (unsigned)uid);
	free(real);
	return rc;
}

int it_start_as(struct it_server *s, uid_t uid, gid_t gid, const char *const *extra)
{
	char why[8192];
	if (it_runnable_as(it_bin(), uid, gid, why, sizeof why) < 0) {
		fprintf(stderr, "harness: %s\n", why);
		return -1;
	}
	memset(s, 0, sizeof *s);
	s->as_user = true;
	s->as_uid = uid;
	s->as_gid = gid;
	return start_fresh(s, "/tmp", extra);
}

int it_restart(struct it_server *s, const char *const *extra)
{
	return spawn(s, extra);
}

int it_stop(struct it_server *s, int sig)
{
	if (s->pid <= 0)
		return -1;
	kill(s->pid, sig);
	int status = 0;
	for (int i = 0; i < 3000; i++) {
		pid_t r = waitpid(s->pid, &status, WNOHANG);
		if (r == s->pid)
			break;
		if (i == 2999) {
			kill(s->pid, SIGKILL);
			waitpid(s->pid, &status, 0);
		}
		usleep(10000);
	}
	s->pid = 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

__attribute__((format(printf, 2, 0))) static int vsh(bool quiet, const char *fmt, va_list ap)
{
	char *cmd = xvasprintf(fmt, ap);
	char *run = quiet ? xasprintf("(%s) >/dev/null 2>&1", cmd) : xstrdup(cmd);
	int st = system(run);
	free(run);
	free(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int it_sh(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int st = vsh(false, fmt, ap);
	va_end(ap);
	return st;
}

int it_sh_quiet(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int st = vsh(true, fmt, ap);
	va_end(ap);
	return st;
}

static void exit_failed(void)
{
	fprintf(stderr, "harness: a suite's teardown failed: exit 1\n");
	_exit(1);
}

void it_fail_at_exit(void)
{
	static bool registered;
	if (!registered)
		atexit(exit_failed);
	registered = true;
}

/* A killed server leaves its cgroups behind (its next start would sweep
 * them): remove the groups of the uid-base the harness gave it, in every
 * v1 hierarchy sandboxd uses, bottom up, once its commands (killed with
 * it) are gone: up to 5 s. */
static void remove_cgroups(const struct it_server *s)
{
	const char *base = s->uid_base + strlen("uid-base=");
	if (!s->uid_base[0] || s->as_user || geteuid() != 0)
		return;
	for (int i = 0; i < 50; i++) {
		if (it_sh_quiet(
			"for h in memory pids cpu cpuacct; do d=/sys/fs/cgroup/$h/sandboxd/%s; "
			"if [ -d $d ]; then find $d -depth -type d -exec rmdir {} + || exit 1; fi; done",
			base) == 0)
			return;
		usleep(100000);
	}
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_mountinfo(char *s)
{
	char *o = s;
	for (; *s; s++) {
		unsigned v;
		if (s[0] == '\\' && sscanf(s + 1, "%3o", &v) == 1 && s[1] && s[2] && s[3]) {
			*o++ = (char)v;
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* Mounts in this (the host's) namespace at a point under prefix; with
 * release, detached. */
static int mounts_under(const char *prefix, bool release)
{
	int n = 0;
	char line[8192], point[4096];
	FILE *f = fopen("/proc/self/mountinfo", "re");
	while (f && fgets(line, sizeof line, f)) {
		if (sscanf(line, "%*u %*u %*s %*s %4095s", point) != 1)
			continue;
		unescape_mountinfo(point);
		if (strncmp(point, prefix, strlen(prefix)) != 0)
			continue;
		n++;
		if (release) {
			fprintf(stderr, "harness: left mounted: %s", line);
			(void)umount2(point, MNT_DETACH);
		}
	}
	if (f)
		fclose(f);
	return n;
}

/* Loop devices whose backing file is under prefix; with release,
 * cleared (on one still in use that only sets autoclear). */
static int loops_under(const char *prefix, bool release)
{
	int n = 0;
	DIR *d = opendir("/sys/block");
	for (struct dirent *e; d && (e = readdir(d));) {
		char path[300], back[4096] = "";
		if (strncmp(e->d_name, "loop", 4) != 0)
			continue;
		snprintf(path, sizeof path, "/sys/block/%s/loop/backing_file", e->d_name);
		FILE *f = fopen(path, "re");
		bool ours = f && fgets(back, sizeof back, f) && strncmp(back, prefix, strlen(prefix)) == 0;
		if (f)
			fclose(f);
		if (!ours)
			continue;
		n++;
		if (release)
			fprintf(stderr, "harness: left attached: /dev/%s to %s", e->d_name, back);
		snprintf(path, sizeof path, "/dev/%s", e->d_name);
		int fd = release ? open(path, O_RDWR | O_CLOEXEC) : -1;
		if (fd >= 0) {
			(void)ioctl(fd, LOOP_CLR_FD, 0);
			close(fd);
		}
	}
	if (d)
		closedir(d);
	return n;
}

/* Whatever a test did, a server gone (even killed) leaves no mount and no
 * loop device of its data directory on the host: its images live in its
 * own mount namespace, which dies with it (the kernel may take a moment).
 * Anything left is released, then the suite fails. */
static void check_nothing_left(const struct it_server *s)
{
	char *real = realpath(s->dir, NULL), *prefix = xasprintf("%s/", real ? real : s->dir);
	free(real);
	long until = mono_ms() + 15000;
	bool quiet = true;
	while (quiet && (mounts_under(prefix, false) > 0 || loops_under(prefix, false) > 0))
		quiet = mono_ms() < until && usleep(50000) == 0;
	if (!quiet) {
		fprintf(stderr, "harness: the server of %s left mounts or loop devices on the host\n",
			s->dir);
		for (int i = 0; i < 16 && mounts_under(prefix, true) > 0; i++)
			;
		loops_under(prefix, true);
		it_fail_at_exit();
	}
	free(prefix);
}

void it_cleanup(struct it_server *s)
{
	if (s->pid > 0) {
		it_stop(s, SIGKILL);
		remove_cgroups(s);
	}
	if (!*s->dir)
		return;
	char cg[4200];
	cgroup2_group_of(s, cg, sizeof cg);
	if (cg[0] && access(cg, F_OK) == 0) {
		/* What a killed server left (cgroup.kill: the whole tree), then
		 * the groups, once the kernel has let its tasks go. */
		char *kill_file = xasprintf("%s/cgroup.kill", cg);
		it_write_file(kill_file, "1", 1);
		free(kill_file);
		for (int i = 0; i < 200 && access(cg, F_OK) == 0; i++) {
			rmdir_tree(cg, 0);
			if (access(cg, F_OK) == 0)
				usleep(10000);
		}
	}
	check_nothing_left(s);
	if (getenv("IT_KEEP")) {
		fprintf(stderr, "harness: kept %s (log %s)\n", s->dir, s->log);
		return;
	}
	char *cmd = xasprintf("rm -rf '%s' '%s'", s->dir, s->log);
	int rc = system(cmd);
	(void)rc;
	free(cmd);
}

/* With SANDBOXD_RECORD_DIR set, every it_http response is appended as one
 * JSON line to DIR/<pid>.ndjson: {"method", "path" (no query), "status",
 * "content_type", "body" (parsed JSON, or null)}, plus "suite" and, when a
 * JSON content type holds no JSON, "body_error". tests/contract/
 * validate-responses.mjs checks them against openapi/openapi.yaml. */
static void record_response(const char *method, const char *path, const struct it_resp *r)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	const char *dir = getenv("SANDBOXD_RECORD_DIR");
	if (!dir || !*dir)
		return;
	char *ct = it_header(r, "Content-Type");
	json_t *body = NULL;
	bool json_ct = ct && strncasecmp(ct, "application/json", 16) == 0;
	if (json_ct && r->len > 0)
		body = json_loadb(r->body, r->len, JSON_DECODE_ANY, NULL);
	extern char *program_invocation_short_name;
	json_t *line = json_pack("{s:s, s:s%, s:I, s:s?, s:o?, s:s}", "method", method, "path", path,
				 strcspn(path, "?"), "status", (json_int_t)r->status, "content_type", ct,
				 "body", body ? body : json_null(), "suite", program_invocation_short_name);
	if (line && json_ct && !body && strcmp(method, "HEAD") != 0)
		json_object_set_new(line, "body_error",
				    json_string(r->len ? "the body is not JSON" : "the body is empty"));
	char *text = line ? json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
	if (!text)
		fprintf(stderr, "harness: cannot record %s %s (not UTF-8?)\n", method, path);
	else {
		char *file = xasprintf("%s/%d.ndjson", dir, (int)getpid());
		char *out = xasprintf("%s\n", text);
		pthread_mutex_lock(&mu);
		int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0 || write(fd, out, strlen(out)) != (ssize_t)strlen(out))
			fprintf(stderr, "harness: cannot record to %s\n", file);
		if (fd >= 0)
			close(fd);
		pthread_mutex_unlock(&mu);
		free(out);
		free(file);
	}
	free(text);
	json_decref(line);
	free(ct);
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
	buf_append(ud, p, sz * n);
	return sz * n;
}

int it_http(struct it_server *s, const char *method, const char *path, const char *token,
	    const char *const *headers, const void *body, size_t len, struct it_resp *out)
{
	memset(out, 0, sizeof *out);
	CURL *c = curl_easy_init();
	struct buf b, h;
	buf_init(&b, 1u << 30);
	buf_init(&h, 1u << 20);
	char *url = xasprintf("%s%s", s->base, path);
	struct curl_slist *hl = NULL;
	char *auth = NULL;
	if (token) {
		auth = xasprintf("Authorization: Bearer %s", token);
		hl = curl_slist_append(hl, auth);
	}
	for (int i = 0; headers && headers[i]; i++)
		hl = curl_slist_append(hl, headers[i]);
	hl = curl_slist_append(hl, "Expect:");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	if (strcmp(method, "HEAD") == 0)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	CURLcode rc = curl_easy_perform(c);
	if (rc == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
		out->body = buf_steal(&b, &out->len);
		out->headers = buf_steal(&h, NULL);
		record_response(method, path, out);
	}
	buf_free(&b);
	buf_free(&h);
	curl_slist_free_all(hl);
	curl_easy_cleanup(c);
	free(url);
	free(auth);
	return rc == CURLE_OK ? 0 : -1;
}

long it_metric(struct it_server *s, const char *token, const char *series)
{
	struct it_resp r;
	assert_int_equal(it_http(s, "GET", "/metrics", token, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	char *key = xasprintf("\n%s ", series);
	const char *p = strstr(r.body, key);
	long v = p ? strtol(p + strlen(key), NULL, 10) : -1;
	free(key);
	it_resp_free(&r);
	return v;
}

char *it_header(const struct it_resp *r, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = r->headers; p && *p;) {
		const char *eol = strstr(p, "\r\n");
		if (!eol)
			break;
		if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
			const char *v = p + n + 1;
			while (*v == ' ')
				v++;
			return xstrndup(v, (size_t)(eol - v));
		}
		p = eol + 2;
	}
	return NULL;
}

json_t *it_json(const struct it_resp *r)
{
	if (!r->body)
		return NULL;
	return json_loadb(r->body, r->len, 0, NULL);
}

const char *it_error_code(const struct it_resp *r)
{
	static char code[64];
	code[0] = '\0';
	json_t *j = it_json(r);
	const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
	if (c)
		snprintf(code, sizeof code, "%s", c);
	json_decref(j);
	return code;
}

void it_resp_free(struct it_resp *r)
{
	free(r->body);
	free(r->headers);
	memset(r, 0, sizeof *r);
}

char *it_raw(struct it_server *s, const void *data, size_t len, int timeout_ms)
{
	bool closed = false;
	return it_raw_closed(s, data, len, timeout_ms, &closed);
}

int it_connect(struct it_server *s)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)s->port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

char *it_raw_closed(struct it_server *s, const void *data, size_t len, int timeout_ms, bool *closed)
{
	*closed = false;
	int fd = it_connect(s);
	if (fd < 0)
		return NULL;
	const char *p = data;
	size_t off = 0;
	while (off < len) {
		ssize_t w = send(fd, p + off, len - off, MSG_NOSIGNAL);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	struct buf b;
	buf_init(&b, 1u << 20);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	while (poll(&pfd, 1, timeout_ms) > 0) {
		char tmp[4096];
		ssize_t r = recv(fd, tmp, sizeof tmp, 0);
		if (r <= 0) {
			*closed = true;
			break;
		}
		buf_append(&b, tmp, (size_t)r);
	}
	close(fd);
	return buf_steal(&b, NULL);
}

long it_rss_kib(struct it_server *s)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)s->pid);
	FILE *f = fopen(path, "r");
	long kib = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kib = strtol(line + 6, NULL, 10);
	fclose(f);
	return kib;
}

int it_fd_count(struct it_server *s)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)s->pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

bool it_alive(struct it_server *s)
{
	return s->pid > 0 && kill(s->pid, 0) == 0 && waitpid(s->pid, NULL, WNOHANG) == 0;
}

int it_write_file(const char *path, const char *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(data, 1, len, f);
	fclose(f);
	return w == len ? 0 : -1;
}

char *it_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *out = read_all(f, 1u << 30, len);
	fclose(f);
	return out;
}

void it_show(const struct it_resp *r)
{
	fprintf(stderr, "  got %ld: %.*s\n", r->status, (int)(r->len > 600 ? 600 : r->len),
		r->body ? r->body : "");
}

void it_expect_status(const struct it_resp *r, long status)
{
	if (r->status != status)
		it_show(r);
	assert_int_equal(r->status, status);
}

void it_expect_error(const struct it_resp *r, long status, const char *code)
{
	if (r->status != status || strcmp(it_error_code(r), code) != 0) {
		fprintf(stderr, "expected %ld %s\n", status, code);
		it_show(r);
	}
	assert_int_equal(r->status, status);
	assert_string_equal(it_error_code(r), code);
	char *ct = it_header(r, "Content-Type");
	assert_non_null(ct);
	assert_string_equal(ct, "application/json");
	free(ct);
}

void it_expect_header(const struct it_resp *r, const char *name, const char *want)
{
	char *v = it_header(r, name);
	if (!v || strcmp(v, want) != 0)
		fprintf(stderr, "  header %s: want \"%s\", got \"%s\"\n", name, want, v ? v : "(none)");
	assert_non_null(v);
	assert_string_equal(v, want);
	free(v);
}

void it_expect_audit_tenant(const struct it_resp *r, const char *tenant)
{
	json_t *j = it_json(r);
	json_t *recs = json_object_get(j, "records");
	size_t k;
	json_t *rec;
	assert_true(json_array_size(recs) > 0);
	json_array_foreach(recs, k, rec) {
		assert_string_equal(json_string_value(json_object_get(rec, "tenant")), tenant);
	}
	json_decref(j);
}

void it_expect_error_at(struct it_server *s, const char *method, const char *path, const char *token,
			long status, const char *code)
{
	struct it_resp r;
	assert_int_equal(it_http(s, method, path, token, NULL, NULL, 0, &r), 0);
	it_expect_error(&r, status, code);
	it_resp_free(&r);
}

void it_session_segment(const char *key, char *out, size_t outsz)
{
	static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
	unsigned long long h = 5381;
	size_t n = strlen(key), o = 0;
	for (size_t i = 0; i < n; i++)
		h = h * 33 + (unsigned char)key[i];
	for (size_t i = 0; i < n && i < 32 && o + 1 < outsz; i++) {
		char c = key[i];
		bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			  c == '.' || c == '_' || c == '-';
		out[o++] = ok ? c : '_';
	}
	char b36[16];
	int nb = 0;
	do {
		b36[nb++] = digits[h % 36];
		h /= 36;
	} while (h);
	if (o + 1 < outsz)
		out[o++] = '-';
	while (nb > 0 && o + 1 < outsz)
		out[o++] = b36[--nb];
	out[o] = '\0';
}

int it_mint_all(struct it_server *s, const struct it_tok *t, size_t n)
{
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		*t[i].out = it_token(s, t[i].tenant, t[i].scope);
		if (!*t[i].out)
			rc = -1;
	}
	return rc;
}

int it_start_minted(struct it_server *s, const char *const *extra, const struct it_tok *t, size_t n)
{
	if (it_start(s, extra) < 0)
		return -1;
	return it_mint_all(s, t, n);
}

void it_free_all(const struct it_tok *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(*t[i].out);
		*t[i].out = NULL;
	}
}
