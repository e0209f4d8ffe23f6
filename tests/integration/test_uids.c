/* One uid per tenant when sandboxd is not root (issue 13). The real server
 * runs as a throwaway unprivileged user this test makes (useradd), first
 * with a subordinate range it appends to /etc/subuid and /etc/subgid
 * (usermod --add-subuids): tenants then run as distinct host uids of that
 * range, RLIMIT_NPROC counts per tenant, and one tenant cannot signal
 * another's processes. Then without the range: two tenants sharing one
 * uid are refused unless allow-shared-uid=true. newuidmap is also driven
 * directly and its map read back from /proc/PID/uid_map.
 *
 * main() forks: the suites run in the child, and the parent removes
 * exactly what it added (the range, the user, stray processes of their
 * uids) however the child ended. Skipped (77) when not root. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#define RANGE_N 64 /* ids in the subordinate range */
#define NPROC 48   /* nproc-limit: what one tenant's processes may reach */
#define DEADLINE_MS 20000

static char user[32];
static uid_t uid;
static gid_t gid;
static unsigned range; /* first id of the range */
static char nonce[16];

static struct it_server srv;
static char *tok_acme, *tok_globex;
/* Requests in background threads: static, so that a failed assertion
 * (cmocka longjmps out of the test) leaves no thread writing to a stack
 * frame that is gone. */
static struct bg_req bg_fill, bg_a, bg_g;

/* ---- the throwaway user and its range ---- */

/* shadow's tools refuse while another holds /etc/passwd's lock: retry. */
static int sh_retry(const char *cmd)
{
	long until = it_now_ms() + DEADLINE_MS;
	int st;
	while ((st = it_sh("%s", cmd)) != 0 && it_now_ms() < until)
		usleep(200000);
	return st;
}

static bool range_listed(const char *file)
{
	char *want = xasprintf("%s:%u:%d\n", user, range, RANGE_N);
	char *text = it_read_file(file, NULL);
	bool there = text && strstr(text, want);
	free(text);
	free(want);
	return there;
}

static int range_add(void)
{
	char *cmd = xasprintf("usermod --add-subuids %u-%u --add-subgids %u-%u %s", range,
			      range + RANGE_N - 1, range, range + RANGE_N - 1, user);
	int st = sh_retry(cmd);
	free(cmd);
	return st == 0 && range_listed("/etc/subuid") && range_listed("/etc/subgid") ? 0 : -1;
}

static int range_del(void)
{
	if (!range_listed("/etc/subuid") && !range_listed("/etc/subgid"))
		return 0;
	char *cmd = xasprintf("usermod --del-subuids %u-%u --del-subgids %u-%u %s", range,
			      range + RANGE_N - 1, range, range + RANGE_N - 1, user);
	int st = sh_retry(cmd);
	free(cmd);
	return st == 0 && !range_listed("/etc/subuid") && !range_listed("/etc/subgid") ? 0 : -1;
}

/* The ids of user name: 0, or -1. */
static int ids_of(const char *name, uid_t *u, gid_t *g)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	if (getpwnam_r(name, &pw, buf, sizeof buf, &res) != 0 || !res)
		return -1;
	*u = pw.pw_uid;
	*g = pw.pw_gid;
	return 0;
}

static int user_add(void)
{
	snprintf(user, sizeof user, "sbxuid%d", (int)getpid());
	/* A system account: useradd gives it no subordinate range itself. */
	char *cmd = xasprintf("useradd --system --user-group --no-create-home --home-dir /nonexistent "
			      "--shell /usr/sbin/nologin %s",
			      user);
	int st = sh_retry(cmd);
	free(cmd);
	if (st != 0 || ids_of(user, &uid, &gid) < 0)
		return -1;
	range = 1500000000u + (unsigned)(getpid() % 100000) * RANGE_N;
	snprintf(nonce, sizeof nonce, "%d", 100 + (int)(getpid() % 900));
	return 0;
}

/* SIGKILL every process whose real uid is u (by pid). */
static int kill_uid(uid_t u)
{
	DIR *d = opendir("/proc");
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char path[300], line[256];
		long ruid = -1;
		snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
		FILE *f = isdigit((unsigned char)e->d_name[0]) ? fopen(path, "r") : NULL;
		while (f && fgets(line, sizeof line, f))
			if (strncmp(line, "Uid:", 4) == 0)
				ruid = strtol(line + 4, NULL, 10);
		if (f)
			fclose(f);
		if (ruid == (long)u && kill((pid_t)strtol(e->d_name, NULL, 10), SIGKILL) == 0)
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

/* Processes of the user or of its range left by a failed run. */
static void kill_strays(void)
{
	for (int pass = 0; pass < 50; pass++) {
		int n = kill_uid(uid);
		for (unsigned i = 0; i < RANGE_N; i++)
			n += kill_uid(range + i);
		if (n == 0)
			return;
		usleep(100000);
	}
}

/* Data directories of servers of the user that a killed run left. */
static void remove_dirs(void)
{
	DIR *d = opendir("/tmp");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		struct stat st;
		char *p = xasprintf("/tmp/%s", e->d_name);
		if (strncmp(e->d_name, "sandboxd-it-", 12) == 0 && lstat(p, &st) == 0 &&
		    S_ISDIR(st.st_mode) && st.st_uid == uid)
			it_sh("rm -rf '%s' '%s.log'", p, p);
		free(p);
	}
	if (d)
		closedir(d);
}

static void user_del(void)
{
	kill_strays();
	remove_dirs();
	if (range_del() < 0)
		fprintf(stderr, "test_uids: could not remove %s:%u:%d from /etc/subuid or /etc/subgid\n",
			user, range, RANGE_N);
	char *cmd = xasprintf("userdel %s", user);
	if (sh_retry(cmd) != 0)
		fprintf(stderr, "test_uids: could not remove user %s\n", user);
	free(cmd);
}

/* ---- helpers ---- */

static json_t *run(const char *tok, const char *cmd)
{
	return ex_run(&srv, tok, cmd);
}

static long number_out(const char *tok, const char *cmd)
{
	json_t *r = run(tok, cmd);
	long v = strtol(ex_stdout_ok(r), NULL, 10);
	json_decref(r);
	return v;
}

static json_t *readyz(long *status)
{
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/readyz", NULL, NULL, NULL, 0, &r), 0);
	*status = r.status;
	json_t *j = it_json(&r);
	it_resp_free(&r);
	assert_non_null(j);
	return j;
}

static const char *uids_field(json_t *ready, const char *k)
{
	const char *v = jstr(json_object_get(ready, "uids"), k);
	return v ? v : "(missing)";
}

/* A command that must not run: refused (503), or failed to fork. */
static void cannot_run(const char *tok, const char *cmd)
{
	json_t *r = NULL;
	long st =
	    ex_post(&srv, tok, NULL, json_pack("{s:s, s:i}", "command", cmd, "timeout_s", 30), &r, NULL);
	if (st == 200)
		fprintf(stderr, "expected to fail: exit %lld, stderr %s\n", jint(r, "exit_code"),
			jstr(r, "stderr"));
	assert_true(st == 503 || (st == 200 && jint(r, "exit_code") != 0));
	json_decref(r);
}

static uid_t host_owner(const char *tenant, const char *rel)
{
	char *p = xasprintf("%s/tenants/%s/workspace/sessions/", srv.dir, tenant);
	char *cmd = xasprintf("stat -c %%u %s*/%s", p, rel);
	FILE *f = popen(cmd, "r");
	long v = -1;
	if (f && fscanf(f, "%ld", &v) != 1)
		v = -1;
	if (f)
		pclose(f);
	free(cmd);
	free(p);
	return (uid_t)v;
}

/* The pid of the one host process of uid running `sleep <arg>`, or -1. */
static pid_t sleeper(uid_t owner, const char *arg)
{
	char *cmd = xasprintf("pgrep -U %u -f '^sleep %s$' | head -n1", (unsigned)owner, arg);
	FILE *f = popen(cmd, "r");
	long pid = -1;
	if (f && fscanf(f, "%ld", &pid) != 1)
		pid = -1;
	if (f)
		pclose(f);
	free(cmd);
	return (pid_t)pid;
}

static pid_t wait_sleeper(uid_t owner, const char *arg)
{
	long until = it_now_ms() + DEADLINE_MS;
	pid_t p;
	while ((p = sleeper(owner, arg)) < 0 && it_now_ms() < until)
		usleep(50000);
	return p;
}

static void cancel(const char *tok, const char *id)
{
	char *path = xasprintf("/exec/%s/cancel", id);
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", path, tok, NULL, NULL, 0, &r), 0);
	it_resp_free(&r);
	free(path);
}

/* Start a tenant's command that holds every process its uid may have:
 * sleepers until a fork fails (dash then ends the subshell), then the
 * marker, then a sleep that forks nothing more. */
static void fill(struct bg_req *b, const char *tok, const char *tenant, const char *id)
{
	char *cmd = xasprintf("(while :; do sleep 9%s & done) 2>/dev/null; touch /workspace/.filled; "
			      "exec sleep 9%s",
			      nonce, nonce);
	bg_exec(b, &srv, tok, json_pack("{s:s, s:s, s:i}", "command", cmd, "id", id, "timeout_s", 120), NULL);
	free(cmd);
	char *mark = xasprintf("%s/tenants/%s/workspace/.filled", srv.dir, tenant);
	long until = it_now_ms() + DEADLINE_MS;
	while (access(mark, F_OK) != 0 && it_now_ms() < until)
		usleep(50000);
	assert_int_equal(access(mark, F_OK), 0);
	unlink(mark);
	free(mark);
}

static void unfill(struct bg_req *b, const char *tok, const char *id, uid_t owner)
{
	cancel(tok, id);
	json_decref(bg_join(b));
	it_resp_free(&b->resp);
	char arg[24];
	snprintf(arg, sizeof arg, "9%s", nonce);
	assert_int_equal(host_procs_wait_gone(owner, "sleep", arg, DEADLINE_MS), 0);
}

/* ---- newuidmap, directly ---- */

/* A child of the user in a new user namespace, waiting on *release. */
static pid_t userns_child(int *release)
{
	int ready[2], rel[2];
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(rel), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c = 'r';
		close(ready[0]);
		close(rel[1]); /* or its own copy would keep the release from coming */
		if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0 ||
		    unshare(CLONE_NEWUSER) < 0)
			c = 'x';
		if (write(ready[1], &c, 1) != 1 || read(rel[0], &c, 1) < 0)
			_exit(1);
		_exit(0);
	}
	close(ready[1]);
	close(rel[0]);
	char c = 0;
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	assert_int_equal(c, 'r');
	*release = rel[1];
	return pid;
}

static char *map_of(pid_t pid, const char *which)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, which);
	char *t = it_read_file(path, NULL);
	assert_non_null(t);
	return t;
}

/* "a b c" lines of a map, whitespace-normalised, into out. */
static void squeeze(const char *map, char *out, size_t outsz)
{
	size_t n = 0;
	unsigned long a, b, c;
	int used = 0;
	while (sscanf(map, "%lu %lu %lu%n", &a, &b, &c, &used) == 3 && n + 64 < outsz) {
		n += (size_t)snprintf(out + n, outsz - n, "%lu %lu %lu\n", a, b, c);
		map += used;
	}
	out[n] = '\0';
}

static void test_newuidmap_direct(void **state)
{
	(void)state;
	int release;
	pid_t pid = userns_child(&release);
	char *as_user =
	    xasprintf("setpriv --reuid=%u --regid=%u --clear-groups --", (unsigned)uid, (unsigned)gid);
	/* Outside the user's range: refused, nothing written. */
	assert_int_not_equal(it_sh("%s newuidmap %d 0 %u 1 %u %u 2 2>/dev/null", as_user, (int)pid,
				   (unsigned)uid, range + RANGE_N - 1, range + RANGE_N - 1),
			     0);
	char *m = map_of(pid, "uid_map");
	assert_string_equal(m, "");
	free(m);
	/* Its own uid as 0 and the range one to one, as the server asks. */
	assert_int_equal(
	    it_sh("%s newuidmap %d 0 %u 1 %u %u %d", as_user, (int)pid, (unsigned)uid, range, range, RANGE_N),
	    0);
	assert_int_equal(
	    it_sh("%s newgidmap %d 0 %u 1 %u %u %d", as_user, (int)pid, (unsigned)gid, range, range, RANGE_N),
	    0);
	char got[256], want[256];
	const char *files[2] = {"uid_map", "gid_map"};
	unsigned own[2] = {(unsigned)uid, (unsigned)gid};
	for (int i = 0; i < 2; i++) {
		m = map_of(pid, files[i]);
		squeeze(m, got, sizeof got);
		snprintf(want, sizeof want, "0 %u 1\n%u %u %d\n", own[i], range, range, RANGE_N);
		assert_string_equal(got, want);
		free(m);
	}
	m = map_of(pid, "setgroups");
	assert_string_equal(m, "allow\n"); /* a subordinate gid range keeps setgroups */
	free(m);
	free(as_user);
	close(release);
	int st = 0;
	waitpid(pid, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* ---- the server with a subordinate range ---- */

static int mint(void)
{
	free(tok_acme);
	free(tok_globex);
	tok_acme = it_token(&srv, "acme", NULL);
	tok_globex = it_token(&srv, "globex", NULL);
	return tok_acme && tok_globex ? 0 : -1;
}

static int subuid_setup(void **state)
{
	(void)state;
	if (range_add() < 0)
		return -1;
	char base[40], nproc[40];
	snprintf(base, sizeof base, "uid-base=%u", range);
	snprintf(nproc, sizeof nproc, "nproc-limit=%d", NPROC);
	/* Not root of the host: no cgroups, so the server must be told to
	 * start without them (the fail-closed rule; test_fail_closed). */
	const char *const extra[] = {"--set", base, "--set", nproc, "--allow-uncontained", NULL};
	if (it_start_as(&srv, uid, gid, extra) < 0)
		return -1;
	return mint();
}

/* Both groups: stop the server (exit 0 on SIGTERM, a clean log). */
static int server_teardown(void **state)
{
	(void)state;
	int rc = it_finish(&srv);
	free(tok_acme);
	free(tok_globex);
	tok_acme = tok_globex = NULL;
	return rc;
}

static void test_subuid_mode_stated(void **state)
{
	(void)state;
	char want[96];
	snprintf(want, sizeof want, "subuid range %u..%u via newuidmap", range, range + RANGE_N - 1);
	long st = 0;
	json_t *r = readyz(&st);
	assert_int_equal(st, 200);
	/* root of its own user namespace only: no cgroups, never `ready` */
	assert_string_equal(jstr(r, "status"), "degraded");
	assert_string_equal(uids_field(r, "status"), "ok");
	assert_string_equal(uids_field(r, "mode"), "subuid");
	assert_string_equal(uids_field(r, "detail"), want);
	json_decref(r);
	char *log = it_read_file(srv.log, NULL);
	assert_non_null(log);
	assert_non_null(strstr(log, want));
	free(log);
	/* The server itself: uid 0 of a namespace newuidmap mapped. */
	char got[256], map[256];
	char *m = map_of(srv.pid, "uid_map");
	squeeze(m, got, sizeof got);
	snprintf(map, sizeof map, "0 %u 1\n%u %u %d\n", (unsigned)uid, range, range, RANGE_N);
	assert_string_equal(got, map);
	free(m);
}

static void test_distinct_uids_own_files(void **state)
{
	(void)state;
	long a = number_out(tok_acme, "touch by-cmd; id -u");
	long b = number_out(tok_globex, "touch by-cmd; id -u");
	assert_int_not_equal(a, b);
	assert_int_equal(number_out(tok_acme, "id -g"), a);
	for (int i = 0; i < 2; i++) {
		long v = i ? b : a;
		assert_true(v >= (long)range && v < (long)range + RANGE_N - 1);
		assert_int_not_equal(v, (long)uid);
		/* What the command made is its uid's on the host. */
		assert_int_equal(host_owner(i ? "globex" : "acme", "by-cmd"), (uid_t)v);
	}
	/* What the server writes for the tenant is the tenant's too, and its
	 * commands can change it; what a command keeps to itself (0600) the
	 * file routes still read. */
	struct it_resp w;
	assert_int_equal(it_http(&srv, "PUT", "/fs/write?path=by-srv.txt", tok_acme, NULL, "one", 3, &w), 0);
	it_expect_status(&w, 200);
	it_resp_free(&w);
	assert_int_equal(host_owner("acme", "by-srv.txt"), (uid_t)a);
	json_t *r = run(tok_acme, "echo two >> by-srv.txt && cat by-srv.txt; echo x > mine; chmod 600 mine");
	assert_string_equal(ex_stdout_ok(r), "onetwo\n");
	json_decref(r);
	assert_int_equal(it_http(&srv, "GET", "/fs/read?path=mine", tok_acme, NULL, NULL, 0, &w), 0);
	it_expect_status(&w, 200);
	it_resp_free(&w);
}

/* acme holds every process its uid may have; globex's commands, which
 * need processes too, still run. */
static void test_nproc_per_tenant(void **state)
{
	(void)state;
	uid_t a = (uid_t)number_out(tok_acme, "id -u");
	fill(&bg_fill, tok_acme, "acme", "fill-sub");
	char arg[24];
	snprintf(arg, sizeof arg, "9%s", nonce);
	int held = host_procs_of_uid(a, "sleep", arg);
	fprintf(stderr, "acme holds %d sleepers (nproc-limit %d)\n", held, NPROC);
	assert_true(held >= NPROC / 2);
	/* acme is at its limit: a command of its own cannot start ... */
	cannot_run(tok_acme, "for i in 1 2 3 4 5 6 7 8; do sleep 0 & done; wait; echo started");
	/* ... and globex does not notice. */
	json_t *r;
	for (int i = 0; i < 3; i++) {
		r = run(tok_globex, "sleep 0 & sleep 0 & wait; echo ok");
		assert_string_equal(ex_stdout_ok(r), "ok\n");
		json_decref(r);
	}
	unfill(&bg_fill, tok_acme, "fill-sub", a);
}

/* acme's processes cannot signal globex's: not from its sandbox (kill -1),
 * and not as its uid on the host either (the boundary should a pid
 * namespace ever leak). */
static void test_no_signals_across(void **state)
{
	(void)state;
	uid_t a = (uid_t)number_out(tok_acme, "id -u"), g = (uid_t)number_out(tok_globex, "id -u");
	char aarg[24], garg[24];
	snprintf(aarg, sizeof aarg, "7%s", nonce);
	snprintf(garg, sizeof garg, "8%s", nonce);
	char *ca = xasprintf("exec sleep %s", aarg), *cg = xasprintf("exec sleep %s", garg);
	bg_exec(&bg_a, &srv, tok_acme,
		json_pack("{s:s, s:s, s:i}", "command", ca, "id", "a-sleep", "timeout_s", 120), NULL);
	bg_exec(&bg_g, &srv, tok_globex,
		json_pack("{s:s, s:s, s:i}", "command", cg, "id", "g-sleep", "timeout_s", 120), NULL);
	free(ca);
	free(cg);
	pid_t pa = wait_sleeper(a, aarg), pg = wait_sleeper(g, garg);
	assert_true(pa > 0 && pg > 0);
	json_t *r = run(tok_acme, "kill -KILL -1 2>/dev/null; echo sent");
	assert_string_equal(ex_stdout_ok(r), "sent\n");
	json_decref(r);
	assert_int_equal(sleeper(g, garg), pg);
	json_t *v = ex_wait_state(&srv, tok_globex, "g-sleep", "running", 1000);
	assert_non_null(v);
	json_decref(v);
	/* As acme's uid on the host: its own sleeper yes, globex's no. */
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t c = fork();
	if (c == 0) {
		int res[2] = {-1, -1};
		if (setgroups(0, NULL) == 0 && setresgid(a, a, a) == 0 && setresuid(a, a, a) == 0) {
			res[0] = kill(pa, 0) == 0 ? 0 : errno;
			res[1] = kill(pg, 0) == 0 ? 0 : errno;
		}
		_exit(write(p[1], res, sizeof res) == sizeof res ? 0 : 1);
	}
	close(p[1]);
	int res[2] = {-1, -1};
	assert_int_equal(read(p[0], res, sizeof res), (ssize_t)sizeof res);
	close(p[0]);
	waitpid(c, NULL, 0);
	assert_int_equal(res[0], 0);
	assert_int_equal(res[1], EPERM);
	cancel(tok_acme, "a-sleep");
	cancel(tok_globex, "g-sleep");
	json_decref(bg_join(&bg_a));
	json_decref(bg_join(&bg_g));
	it_resp_free(&bg_a.resp);
	it_resp_free(&bg_g.resp);
	assert_int_equal(host_procs_wait_gone(g, "sleep", garg, DEADLINE_MS), 0);
}

/* ---- the same user without a range: one uid for all ---- */

/* A server that is not root has no cgroups: it starts only when told
 * (degraded; the fail-closed rule is test_fail_closed's). */
static const char *const uncontained[] = {"--allow-uncontained", NULL};

static int shared_setup(void **state)
{
	(void)state;
	return range_del();
}

static void test_shared_refused_then_allowed(void **state)
{
	(void)state;
	/* Three tenants would share the server's uid: it does not start. */
	assert_int_equal(it_start_as(&srv, uid, gid, uncontained), -1);
	char *log = it_read_file(srv.log, NULL);
	assert_non_null(log);
	char want[64];
	snprintf(want, sizeof want, "3 tenants would share uid %u", (unsigned)uid);
	assert_non_null(strstr(log, want));
	assert_non_null(strstr(log, "allow-shared-uid=true"));
	free(log);
	/* The operator says so: it starts, and says what it is doing. */
	const char *const allow[] = {"--set", "allow-shared-uid=true", "--allow-uncontained", NULL};
	assert_int_equal(it_restart(&srv, allow), 0);
	assert_int_equal(mint(), 0);
	long st = 0;
	json_t *r = readyz(&st);
	assert_int_equal(st, 200);
	assert_string_equal(uids_field(r, "mode"), "shared");
	assert_string_equal(uids_field(r, "status"), "ok");
	assert_non_null(strstr(uids_field(r, "detail"), "shared uid (allowed by allow-shared-uid)"));
	json_decref(r);
	assert_int_equal(number_out(tok_acme, "id -u"), (long)uid);
	assert_int_equal(number_out(tok_globex, "id -u"), (long)uid);
}

/* Why the range matters: with one uid, acme at its limit stops globex. */
static void test_shared_neighbour_starves(void **state)
{
	(void)state;
	fill(&bg_fill, tok_acme, "acme", "fill-shared");
	/* A few processes: a thread the server ended meanwhile may have
	 * freed a slot or two of the shared count. */
	cannot_run(tok_globex, "for i in 1 2 3 4 5 6 7 8; do sleep 0 & done; wait; echo ok");
	unfill(&bg_fill, tok_acme, "fill-shared", uid);
}

/* One tenant may have the server's uid to itself; a second one added
 * while it runs makes both refused (as a restart would) until the
 * operator acts. */
static void test_shared_second_tenant(void **state)
{
	(void)state;
	assert_int_equal(it_stop(&srv, SIGTERM), 0);
	int st = 0;
	free(it_cli(&srv, &st, "tenant remove globex"));
	assert_int_equal(st, 0);
	free(it_cli(&srv, &st, "tenant remove ops"));
	assert_int_equal(st, 0);
	assert_int_equal(it_restart(&srv, uncontained), 0);
	long code = 0;
	json_t *r = readyz(&code);
	assert_int_equal(code, 200);
	assert_non_null(strstr(uids_field(r, "detail"), "shared uid (one tenant)"));
	json_decref(r);
	assert_int_equal(number_out(tok_acme, "id -u"), (long)uid);

	free(it_cli(&srv, &st, "tenant add globex"));
	assert_int_equal(st, 0);
	free(tok_globex);
	tok_globex = it_token(&srv, "globex", NULL);
	const char *body = "{\"command\":\"id -u\"}";
	const char *toks[2] = {tok_globex, tok_acme};
	for (int i = 0; i < 2; i++) {
		long until = it_now_ms() + DEADLINE_MS;
		struct it_resp x;
		for (;;) {
			assert_int_equal(
			    it_http(&srv, "POST", "/exec", toks[i], NULL, body, strlen(body), &x), 0);
			if (x.status == 503 || it_now_ms() > until)
				break;
			it_resp_free(&x);
			usleep(200000);
		}
		it_expect_error(&x, 503, "backend_unavailable");
		assert_non_null(strstr(x.body, "allow-shared-uid"));
		it_resp_free(&x);
	}
	r = readyz(&code);
	assert_int_equal(code, 503);
	assert_string_equal(uids_field(r, "status"), "unavailable");
	json_decref(r);
}

static int run_suites(void)
{
	const struct CMUnitTest direct[] = {
	    cmocka_unit_test(test_newuidmap_direct),	    cmocka_unit_test(test_subuid_mode_stated),
	    cmocka_unit_test(test_distinct_uids_own_files), cmocka_unit_test(test_nproc_per_tenant),
	    cmocka_unit_test(test_no_signals_across),
	};
	const struct CMUnitTest shared[] = {
	    cmocka_unit_test(test_shared_refused_then_allowed),
	    cmocka_unit_test(test_shared_neighbour_starves),
	    cmocka_unit_test(test_shared_second_tenant),
	};
	int failed = cmocka_run_group_tests_name("subuid", direct, subuid_setup, server_teardown);
	failed += cmocka_run_group_tests_name("shared", shared, shared_setup, server_teardown);
	return failed;
}

/* Users an earlier run of this test left (killed before it could clean
 * up): sbxuid<pid> whose pid is gone, with their ranges. */
static void sweep_stale(void)
{
	FILE *f = fopen("/etc/passwd", "r");
	char line[512];
	while (f && fgets(line, sizeof line, f)) {
		int pid = 0;
		char rest = 0;
		if (sscanf(line, "sbxuid%d%c", &pid, &rest) != 2 || rest != ':' || pid <= 0 ||
		    kill(pid, 0) == 0)
			continue;
		snprintf(user, sizeof user, "sbxuid%d", pid);
		if (ids_of(user, &uid, &gid) < 0)
			continue;
		range = 1500000000u + (unsigned)(pid % 100000) * RANGE_N;
		fprintf(stderr, "test_uids: removing %s, left by an earlier run\n", user);
		user_del();
	}
	if (f)
		fclose(f);
}

static pid_t suites = -1;

/* Killed (a timeout): end the suites, so that main can clean up. */
static void on_term(int sig)
{
	(void)sig;
	if (suites > 0)
		kill(suites, SIGKILL);
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "skipped: needs root (useradd, /etc/subuid, servers run as another user)\n");
		return 77;
	}
	sweep_stale();
	if (user_add() < 0) {
		fprintf(stderr, "test_uids: cannot create the user\n");
		return 1;
	}
	char why[8192];
	if (it_runnable_as(it_bin(), uid, gid, why, sizeof why) < 0) {
		fprintf(stderr, "skipped: %s\n", why);
		user_del();
		return 77;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		_exit(run_suites() ? 1 : 0);
	suites = pid;
	struct sigaction sa = {.sa_handler = on_term};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	int st = 0;
	while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	user_del();
	return pid > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
