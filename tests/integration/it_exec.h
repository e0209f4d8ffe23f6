#pragma once
/* Helpers shared by the exec and isolation suites: POST /exec and its
 * friends, requests in background threads, polling an exec's state,
 * processes of a uid on the host, and the sanitizer scan of the server
 * log. Include after <cmocka.h>. Background threads never assert (cmocka's
 * failure path is not thread-safe): they record, the main thread checks. */
#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"

static inline long it_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "uid-base=N" for `--set`: a uid range of this test process's own. Every
 * server's first tenant is slot 0, so servers started with the default
 * base (other suites on this host) would all run their first tenant as
 * uid 100000, and RLIMIT_NPROC, which counts per uid, would let one
 * suite's fork bomb starve another's commands. */
static inline const char *it_uid_base_arg(long *base)
{
	static char arg[40];
	long b = 200000 + (long)(getpid() % 100000) * 16;
	snprintf(arg, sizeof arg, "uid-base=%ld", b);
	if (base)
		*base = b;
	return arg;
}

/* Whether the cgroup v1 memory and pids hierarchies are ours to write
 * here (root): the suites of limits and budgets skip otherwise. */
static inline bool it_cgroups_here(void)
{
	return geteuid() == 0 && access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) == 0 &&
	       access("/sys/fs/cgroup/pids/cgroup.procs", W_OK) == 0;
}

/* Whether a root server here runs its commands in cgroups with either
 * driver: the v1 hierarchies above, or the unified cgroup v2 hierarchy
 * (tests/vm's guest, where the harness gives each server its own group). */
static inline bool it_contained_here(void)
{
	struct statfs sf;
	return it_cgroups_here() || (geteuid() == 0 && statfs("/sys/fs/cgroup", &sf) == 0 &&
				     sf.f_type == 0x63677270 /* CGROUP2_SUPER_MAGIC */);
}

/* Whether name exists in tenant's workspace on the host (a mark a
 * command left). */
static inline bool it_ws_exists(struct it_server *s, const char *tenant, const char *name)
{
	char *p = xasprintf("%s/tenants/%s/workspace/%s", s->dir, tenant, name);
	bool there = access(p, F_OK) == 0;
	free(p);
	return there;
}

/* POST /exec with body req (stolen). Returns the HTTP status (-1 on a
 * transport error); *out (optional) gets the parsed body. */
static inline long ex_post(struct it_server *s, const char *tok, const char *const *hdrs, json_t *req,
			   json_t **out, struct it_resp *raw)
{
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	struct it_resp r;
	int rc = it_http(s, "POST", "/exec", tok, hdrs, body, strlen(body), &r);
	free(body);
	if (out)
		*out = rc == 0 ? it_json(&r) : NULL;
	long st = rc == 0 ? r.status : -1;
	if (raw)
		*raw = r;
	else
		it_resp_free(&r);
	return st;
}

/* POST /exec expecting 200; returns the ShellResult. */
static inline json_t *ex_ok(struct it_server *s, const char *tok, const char *const *hdrs, json_t *req)
{
	struct it_resp raw;
	json_t *res = NULL;
	long st = ex_post(s, tok, hdrs, req, &res, &raw);
	if (st != 200 || !res)
		fprintf(stderr, "exec: expected 200, got %ld: %.*s\n", st, (int)raw.len,
			raw.body ? raw.body : "");
	it_resp_free(&raw);
	assert_int_equal(st, 200);
	assert_non_null(res);
	return res;
}

/* Run one command (timeout 30 s) and return its ShellResult. */
static inline json_t *ex_run(struct it_server *s, const char *tok, const char *cmd)
{
	return ex_ok(s, tok, NULL, json_pack("{s:s, s:i}", "command", cmd, "timeout_s", 30));
}

static inline const char *jstr(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static inline long long jint(json_t *o, const char *k)
{
	return (long long)json_integer_value(json_object_get(o, k));
}

static inline bool jtrue(json_t *o, const char *k)
{
	return json_is_true(json_object_get(o, k));
}

/* Assert a command exited 0 and return its stdout (borrowed from res). */
static inline const char *ex_stdout_ok(json_t *res)
{
	if (jint(res, "exit_code") != 0)
		fprintf(stderr, "command failed: exit %lld, stdout %s, stderr %s\n", jint(res, "exit_code"),
			jstr(res, "stdout"), jstr(res, "stderr"));
	assert_int_equal(jint(res, "exit_code"), 0);
	return jstr(res, "stdout");
}

/* GET path; returns status, *out the parsed body (optional). */
static inline long it_get_json(struct it_server *s, const char *tok, const char *path, json_t **out)
{
	struct it_resp r;
	if (it_http(s, "GET", path, tok, NULL, NULL, 0, &r) != 0) {
		if (out)
			*out = NULL;
		return -1;
	}
	if (out)
		*out = it_json(&r);
	long st = r.status;
	it_resp_free(&r);
	return st;
}

/* Poll GET /exec/{id} until its state is one of the '|'-separated states
 * in want (e.g. "running", "cancelled|exited"); returns the last view
 * (new reference) or NULL on timeout. */
static inline json_t *ex_wait_state(struct it_server *s, const char *tok, const char *id, const char *want,
				    long timeout_ms)
{
	char path[128];
	snprintf(path, sizeof path, "/exec/%s", id);
	long until = it_now_ms() + timeout_ms;
	do {
		json_t *v = NULL;
		if (it_get_json(s, tok, path, &v) == 200 && v) {
			const char *st = jstr(v, "state");
			size_t n = st ? strlen(st) : 0;
			for (const char *p = want; st && *p;) {
				size_t k = strcspn(p, "|");
				if (k == n && strncmp(p, st, n) == 0)
					return v;
				p += k;
				if (*p == '|')
					p++;
			}
		}
		json_decref(v);
		usleep(50000);
	} while (it_now_ms() < until);
	return NULL;
}

/* A request in a background thread. */
struct bg_req {
	struct it_server *s;
	const char *tok;
	const char *method, *path;
	char *body;
	const char *const *hdrs;
	pthread_barrier_t *barrier; /* optional: start together */
	struct it_resp resp;
	int rc;
	long ms; /* how long the request took */
	pthread_t th;
};

static inline void *bg_main(void *arg)
{
	struct bg_req *b = arg;
	if (b->barrier)
		pthread_barrier_wait(b->barrier);
	long t0 = it_now_ms();
	b->rc = it_http(b->s, b->method, b->path, b->tok, b->hdrs, b->body, b->body ? strlen(b->body) : 0,
			&b->resp);
	b->ms = it_now_ms() - t0;
	return NULL;
}

/* Start POST /exec with req (stolen) in a thread. */
static inline void bg_exec(struct bg_req *b, struct it_server *s, const char *tok, json_t *req,
			   pthread_barrier_t *barrier)
{
	memset(b, 0, sizeof *b);
	b->s = s;
	b->tok = tok;
	b->method = "POST";
	b->path = "/exec";
	b->body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	b->barrier = barrier;
	b->rc = -1;
	pthread_create(&b->th, NULL, bg_main, b);
}

/* Join; returns the parsed body (new reference, may be NULL). */
static inline json_t *bg_join(struct bg_req *b)
{
	pthread_join(b->th, NULL);
	free(b->body);
	b->body = NULL;
	return b->rc == 0 ? it_json(&b->resp) : NULL;
}

/* The real uid of process pid (a /proc entry's name) and its command
 * name (name[64]); -1 when it is gone. */
static inline long proc_ruid(const char *pid, char name[64])
{
	char path[300], line[256];
	snprintf(path, sizeof path, "/proc/%s/status", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long ruid = -1;
	name[0] = '\0';
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, "Name:", 5) == 0)
			sscanf(line + 5, "%63s", name);
		else if (strncmp(line, "Uid:", 4) == 0)
			ruid = strtol(line + 4, NULL, 10);
	}
	fclose(f);
	return ruid;
}

/* Whether pid runs the warm sandboxes' launcher (sandbox/warm.c: exec'd
 * from its memfd, "sbx-launch"): the sandbox it is in waits for a
 * command. */
static inline bool it_pid_is_launcher(const char *pid)
{
	char path[300], link[128];
	snprintf(path, sizeof path, "/proc/%s/exe", pid);
	ssize_t n = readlink(path, link, sizeof link - 1);
	if (n <= 0)
		return false;
	link[n] = '\0';
	return strncmp(link, "/memfd:sbx-launch", 17) == 0;
}

/* Whether the cgroup directory dir holds a warm sandbox waiting for a
 * command (a launcher among its processes). */
static inline bool it_cgroup_is_warm(const char *dir)
{
	char *p = xasprintf("%s/cgroup.procs", dir);
	char *t = it_read_file(p, NULL);
	free(p);
	bool warm = false;
	for (char *q = t; q && *q && !warm;) {
		char pid[16];
		size_t len = strcspn(q, "\n");
		snprintf(pid, sizeof pid, "%.*s", (int)(len < 15 ? len : 15), q);
		warm = len && it_pid_is_launcher(pid);
		q += len + (q[len] == '\n');
	}
	free(t);
	return warm;
}

/* Whether process pid is in a waiting warm sandbox: its cgroup
 * (/proc/PID/cgroup's last line: v2's, or v1's last hierarchy) holds a
 * launcher. */
static inline bool it_pid_in_warm(const char *pid)
{
	char path[300];
	snprintf(path, sizeof path, "/proc/%s/cgroup", pid);
	char *cg = it_read_file(path, NULL);
	char *last = cg ? strrchr(cg, ':') : NULL;
	bool warm = false;
	if (last) {
		last[strcspn(last, "\n")] = '\0';
		char *dir = xasprintf("/sys/fs/cgroup%s", last + 1);
		warm = it_cgroup_is_warm(dir);
		free(dir);
	}
	free(cg);
	return warm;
}

/* Host processes whose real uid is uid (and, if comm is given, whose
 * command name is comm and whose command line contains arg; with
 * unwarm, not in a warm sandbox waiting for a command). */
static inline int host_procs_count(uid_t uid, const char *comm, const char *arg, bool unwarm)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char path[300], name[64];
		if (proc_ruid(e->d_name, name) != (long)uid)
			continue;
		if ((comm && strcmp(name, comm) != 0) || (unwarm && it_pid_in_warm(e->d_name)))
			continue;
		if (arg) {
			snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
			size_t len = 0;
			char *cl = it_read_file(path, &len);
			bool hit = false;
			/* cppcheck-suppress nullPointerArithmeticRedundantCheck ; steps only if cl */
			for (size_t i = 0; cl && i < len; i += strlen(cl + i) + 1)
				if (strstr(cl + i, arg))
					hit = true;
			free(cl);
			if (!hit)
				continue;
		}
		n++;
	}
	closedir(d);
	return n;
}

static inline int host_procs_of_uid(uid_t uid, const char *comm, const char *arg)
{
	return host_procs_count(uid, comm, arg, false);
}

/* Processes of uid outside waiting warm sandboxes: a command's, or
 * leftovers. */
static inline int host_procs_of_uid_unwarm(uid_t uid)
{
	return host_procs_count(uid, NULL, NULL, true);
}

/* Wait (bounded) until no process of uid matching comm/arg is left. */
static inline int host_procs_wait_gone(uid_t uid, const char *comm, const char *arg, long timeout_ms)
{
	long until = it_now_ms() + timeout_ms;
	int n;
	while ((n = host_procs_of_uid(uid, comm, arg)) > 0 && it_now_ms() < until)
		usleep(50000);
	return n;
}

/* How many of the cgroup hierarchies hier[0..n) still hold the groups of
 * the server whose uid-base is base (/sys/fs/cgroup/<hier>/sandboxd/<base>),
 * each named on stderr: a server stopped cleanly leaves none. */
static inline int it_cgroups_left(long base, const char *const *hier, size_t n)
{
	int left = 0;
	for (size_t i = 0; i < n; i++) {
		char path[128];
		snprintf(path, sizeof path, "/sys/fs/cgroup/%s/sandboxd/%ld", hier[i], base);
		if (access(path, F_OK) == 0) {
			fprintf(stderr, "left behind after a clean stop: %s\n", path);
			left++;
		}
	}
	return left;
}

/* Fail if the server log holds a sanitizer report. */
static inline void assert_log_clean(struct it_server *s)
{
	size_t len = 0;
	char *log = it_read_file(s->log, &len);
	if (!log)
		return;
	static const char *const bad[] = {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
					  "runtime error:", "WARNING: ThreadSanitizer"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *hit = strstr(log, bad[i]);
		if (hit) {
			const char *from = hit - log > 200 ? hit - 200 : log;
			fprintf(stderr, "sanitizer report in %s:\n%.3000s\n", s->log, from);
		}
		assert_null(hit);
	}
	free(log);
}

/* Stop a suite's server with SIGTERM (it must exit 0), check its log,
 * remove its data. */
static inline int it_finish(struct it_server *s)
{
	int rc = 0;
	if (s->pid > 0) {
		int st = it_stop(s, SIGTERM);
		if (st != 0) {
			fprintf(stderr, "server exited %d on SIGTERM (log %s)\n", st, s->log);
			rc = -1;
		}
	}
	size_t len = 0;
	char *log = it_read_file(s->log, &len);
	if (log && (strstr(log, "ERROR: AddressSanitizer") || strstr(log, "ERROR: LeakSanitizer") ||
		    strstr(log, "runtime error:"))) {
		fprintf(stderr, "sanitizer report in the server log %s (kept)\n", s->log);
		rc = -1;
	}
	free(log);
	if (rc == 0)
		it_cleanup(s);
	else
		it_fail_at_exit();
	return rc;
}

/* it_finish, then free the suite's tokens. */
static inline int it_finish_minted(struct it_server *s, const struct it_tok *t, size_t n)
{
	int rc = it_finish(s);
	it_free_all(t, n);
	return rc;
}
