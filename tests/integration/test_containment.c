/* Containment regressions (issue 11, security.md "What must always hold"
 * 7 and 8): each test is an attack a hostile tenant made from outside,
 * over HTTP, against the real bwrap backend, and the safe outcome checked
 * from outside. Every one of them failed before its fix. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#define CG_MEM "/sys/fs/cgroup/memory"
#define CG_PIDS "/sys/fs/cgroup/pids"

static struct it_server srv;
static char *tok, *tok_globex;
static const struct it_tok toks[] = {{&tok, "acme", NULL}, {&tok_globex, "globex", NULL}};
static long uid_base;
static char acme_ws[512]; /* acme's workspace on the host */

static int setup(void **state)
{
	(void)state;
	/* A memory limit small enough that a tmpfs fill reaches it quickly,
	 * and a /tmp larger than the limit: only the cgroup stops it. */
	const char *const extra[] = {
	    "--set", it_uid_base_arg(&uid_base),  "--set", "mem-limit-bytes=268435456",
	    "--set", "tmp-size-bytes=1073741824", NULL};
	if (it_start_minted(&srv, extra, toks, IT_NTOKS(toks)) < 0)
		return -1;
	snprintf(acme_ws, sizeof acme_ws, "%s/tenants/acme/workspace", srv.dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

static json_t *run_id(const char *t, const char *cmd, const char *id, int timeout_s)
{
	return ex_ok(&srv, t, NULL,
		     json_pack("{s:s, s:s, s:i}", "command", cmd, "id", id, "timeout_s", timeout_s));
}

static void globex_still_served(void)
{
	json_t *r =
	    ex_ok(&srv, tok_globex, NULL, json_pack("{s:s, s:i}", "command", "echo ok", "timeout_s", 30));
	assert_string_equal(ex_stdout_ok(r), "ok\n");
	json_decref(r);
}

/* ---- 1: objects planted where the server opens files ---- */

static void plant(const char *kind, const char *rel)
{
	char *path = xasprintf("%s/%s", acme_ws, rel);
	char *cmd;
	/* Commands start in the session directory: plant from the root. */
	if (strcmp(kind, "fifo") == 0)
		cmd = xasprintf("cd /workspace && mkdir -p \"$(dirname %s)\" && mkfifo %s", rel, rel);
	else if (strcmp(kind, "socket") == 0)
		cmd =
		    xasprintf("cd /workspace && mkdir -p \"$(dirname %s)\" && python3 -c 'import socket,sys; "
			      "socket.socket(socket.AF_UNIX).bind(sys.argv[1])' %s",
			      rel, rel);
	else if (strcmp(kind, "symlink") == 0)
		cmd = xasprintf("cd /workspace && mkdir -p \"$(dirname %s)\" && ln -s /etc/passwd %s", rel,
				rel);
	else
		cmd = xasprintf("cd /workspace && mkdir -p %s/sub", rel);
	json_t *r = ex_run(&srv, tok, cmd);
	assert_int_equal(jint(r, "exit_code"), 0);
	json_decref(r);
	free(cmd);
	free(path);
}

static void test_planted_spill_paths(void **state)
{
	(void)state;
	static const char *const kinds[] = {"fifo", "socket", "symlink", "dir"};
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		char id[32], rel[96];
		snprintf(id, sizeof id, "dos-%s", kinds[i]);
		snprintf(rel, sizeof rel, ".sandboxd/spill/%s.stdout", id);
		plant(kinds[i], rel);
		/* Overflows the window, so the spill file is opened. */
		json_t *r = run_id(tok, "head -c 200000 /dev/zero | tr \"\\\\0\" a", id, 2);
		assert_int_equal(jint(r, "exit_code"), 0);
		assert_int_equal(jint(r, "stdout_bytes"), 200000);
		char *host = xasprintf("%s/%s", acme_ws, rel);
		struct stat st;
		assert_int_equal(lstat(host, &st), 0);
		if (strcmp(kinds[i], "dir") == 0 || strcmp(kinds[i], "symlink") == 0) {
			/* A directory, or a link leading out, is not replaced (as
			 * PUT /fs/write would refuse it): no spill, and the
			 * answer says so. */
			assert_true(S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode));
			assert_true(json_is_null(json_object_get(r, "stdout_spill")));
		} else {
			/* Whatever was there is replaced by the server's own file. */
			assert_true(S_ISREG(st.st_mode));
			assert_int_equal(st.st_size, 200000);
			char *wire = xasprintf("/workspace/%s", rel);
			assert_string_equal(jstr(r, "stdout_spill"), wire);
			free(wire);
		}
		free(host);
		json_decref(r);
		globex_still_served();
	}
	/* The runner kept turning, and says so. */
	struct it_resp rz;
	assert_int_equal(it_http(&srv, "GET", "/readyz", NULL, NULL, NULL, 0, &rz), 0);
	assert_int_equal(rz.status, 200);
	json_t *ready = it_json(&rz);
	assert_string_equal(json_string_value(json_object_get(json_object_get(ready, "runner"), "status")),
			    "ok");
	json_decref(ready);
	it_resp_free(&rz);
	/* The host's /etc/passwd was not written through the link. */
	struct stat pw;
	assert_int_equal(stat("/etc/passwd", &pw), 0);
	assert_true(pw.st_size < 200000);
}

/* Objects where a session's directory would be made, and at the path of
 * a file route: answered at once, never waited on, nothing outside
 * touched. */
static void test_planted_session_and_file_paths(void **state)
{
	(void)state;
	static const char *const kinds[] = {"fifo", "socket", "symlink", "file"};
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		char key[32], seg[64];
		snprintf(key, sizeof key, "planted-%s", kinds[i]);
		it_session_segment(key, seg, sizeof seg);
		char *rel = xasprintf("sessions/%s", seg);
		if (strcmp(kinds[i], "file") == 0) {
			char *cmd = xasprintf("cd /workspace && mkdir -p sessions && echo x > %s", rel);
			json_t *r = ex_ok(&srv, tok, NULL, json_pack("{s:s}", "command", cmd));
			json_decref(r);
			free(cmd);
		} else {
			plant(kinds[i], rel);
		}
		free(rel);
		char hdr[64];
		snprintf(hdr, sizeof hdr, "X-Session-Key: %s", key);
		const char *const hdrs[] = {hdr, NULL};
		struct it_resp resp;
		assert_int_equal(
		    it_http(&srv, "GET", "/fs/read?path=/workspace/x", tok, hdrs, NULL, 0, &resp), 0);
		assert_true(resp.status >= 400 && resp.status < 600);
		it_resp_free(&resp);
		assert_int_equal(
		    it_http(&srv, "PUT", "/fs/write?path=/workspace/y", tok, hdrs, "data", 4, &resp), 0);
		assert_true(resp.status >= 400 && resp.status < 600);
		it_resp_free(&resp);
		struct it_resp er;
		const char *body = "{\"command\":\"echo hi > y\"}";
		assert_int_equal(it_http(&srv, "POST", "/exec", tok, hdrs, body, strlen(body), &er), 0);
		assert_true(er.status >= 400 && er.status < 600);
		it_resp_free(&er);
	}
	/* Nothing was written through the link (to /etc/passwd). */
	struct stat pw;
	assert_int_equal(stat("/etc/y", &pw), -1);

	json_t *r =
	    ex_ok(&srv, tok, NULL, json_pack("{s:s}", "command", "cd /workspace && mkfifo fifo-file"));
	json_decref(r);
	struct it_resp resp;
	assert_int_equal(
	    it_http(&srv, "GET", "/fs/read?path=/workspace/fifo-file", tok, NULL, NULL, 0, &resp), 0);
	assert_int_equal(resp.status, 403);
	it_resp_free(&resp);
	globex_still_served();
}

/* The spill directory itself planted as a link out, or as a FIFO: the
 * command runs, without a spill file. */
static void test_planted_spill_dir(void **state)
{
	(void)state;
	json_t *r = ex_run(
	    &srv, tok, "cd /workspace && rm -rf .sandboxd && mkdir .sandboxd && ln -s /etc .sandboxd/spill");
	json_decref(r);
	r = run_id(tok, "head -c 200000 /dev/zero | tr \"\\\\0\" a", "spill-link", 5);
	assert_int_equal(jint(r, "stdout_bytes"), 200000);
	assert_true(json_is_null(json_object_get(r, "stdout_spill")));
	json_decref(r);
	assert_int_equal(access("/etc/spill-link.stdout", F_OK), -1);
	r = ex_run(&srv, tok, "cd /workspace && rm .sandboxd/spill && mkfifo .sandboxd/spill");
	json_decref(r);
	r = run_id(tok, "head -c 200000 /dev/zero | tr \"\\\\0\" a", "spill-fifo", 5);
	assert_int_equal(jint(r, "stdout_bytes"), 200000);
	assert_true(json_is_null(json_object_get(r, "stdout_spill")));
	json_decref(r);
	r = ex_run(&srv, tok, "rm -rf /workspace/.sandboxd");
	json_decref(r);
	globex_still_served();
}

/* ---- 2: client ids never name a cgroup ---- */

/* Every directory below base is u<digits>, and below those j<digits>. */
static bool names_are_servers(const char *base, int depth)
{
	DIR *d = opendir(base);
	if (!d)
		return depth > 0;
	bool ok = true;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		const char *n = de->d_name;
		ok = ok && n[0] == (depth == 0 ? 'u' : 'j') && n[1] &&
		     strspn(n + 1, "0123456789") == strlen(n + 1);
		if (!ok)
			fprintf(stderr, "cgroup %s/%s is not a server name\n", base, n);
		if (depth == 0 && ok) {
			char *sub = xasprintf("%s/%s", base, n);
			ok = names_are_servers(sub, 1);
			free(sub);
		}
	}
	closedir(d);
	return ok;
}

static void test_exec_id_cannot_switch_limits_off(void **state)
{
	(void)state;
	if (!it_cgroups_here())
		skip();
	/* Control files of cgroup v1 that an id may spell ("cgroup.procs" and
	 * the like are refused by the id pattern already). */
	static const char *const ids[] = {"notify_on_release", "tasks", "ordinary"};
	for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
		/* 400 MiB into /tmp (a 1 GiB tmpfs, charged to the command's
		 * memory cgroup of 256 MiB): the cgroup must stop it. */
		json_t *r = run_id(tok, "head -c 419430400 /dev/zero > /tmp/fill && echo filled", ids[i], 60);
		const char *out = jstr(r, "stdout");
		if (strstr(out, "filled"))
			fprintf(stderr, "id %s: not stopped by the memory cgroup\n", ids[i]);
		assert_null(strstr(out, "filled"));
		json_decref(r);
	}
	/* None was refused: every command got its group. */
	struct it_resp m;
	char *tok_ops = it_token(&srv, "ops", "admin");
	assert_int_equal(it_http(&srv, "GET", "/metrics", tok_ops, NULL, NULL, 0, &m), 0);
	assert_int_equal(m.status, 200);
	assert_non_null(strstr(m.body, "\nsandboxd_exec_refused_limits_total 0\n"));
	it_resp_free(&m);
	free(tok_ops);
	/* The groups carry the server's names only: u<uid>/j<seq>. */
	static const char *const hiers[] = {CG_MEM, CG_PIDS};
	for (size_t h = 0; h < 2; h++) {
		char base[128];
		snprintf(base, sizeof base, "%s/sandboxd/%ld", hiers[h], uid_base);
		assert_true(names_are_servers(base, 0));
	}
	globex_still_served();
}

/* ---- 3: every filesystem a command can write is bounded ---- */

static void test_root_and_dev_bounded(void **state)
{
	(void)state;
	json_t *r = ex_run(&srv, tok,
			   "touch /x 2>/dev/null && echo root-writable; "
			   "touch /dev/x 2>/dev/null && echo dev-writable; "
			   "mkdir /etc/x 2>/dev/null && echo etc-writable; "
			   "head -c 100000000 /dev/zero > /dev/shm/f 2>/dev/null || echo shm-bounded; "
			   "echo ok > /dev/null && echo devnull-ok");
	assert_string_equal(jstr(r, "stdout"), "shm-bounded\ndevnull-ok\n");
	json_decref(r);
}

/* ---- 5: no host path is readable inside ---- */

static void test_no_host_paths_inside(void **state)
{
	(void)state;
	json_t *r =
	    ex_run(&srv, tok,
		   "for p in /proc/1/cmdline /proc/1/environ /proc/self/cmdline /proc/1/task/1/cmdline; do "
		   "tr '\\0' ' ' < $p; echo; done; grep -v ' /workspace ' /proc/self/mountinfo");
	const char *out = jstr(r, "stdout");
	assert_int_equal(jint(r, "exit_code"), 0);
	if (strstr(out, srv.dir) || strstr(out, "/tmp/"))
		fprintf(stderr, "host paths inside:\n%s\n", out);
	assert_null(strstr(out, srv.dir));
	assert_null(strstr(out, "/tmp/"));
	assert_null(strstr(out, "sandboxd-"));
	json_decref(r);
}

/* ---- 8: a kill -9 leaves nothing behind after the next start ---- */

static int count_subdirs(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_type == DT_DIR && de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* Subdirectories of dir that still have subdirectories of their own. */
static int busy_children(const char *dir)
{
	int n = 0;
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *de;
		while ((de = readdir(d))) {
			if (de->d_type != DT_DIR || de->d_name[0] == '.')
				continue;
			char *sub = xasprintf("%s/%s", dir, de->d_name);
			n += count_subdirs(sub) > 0;
			free(sub);
		}
		closedir(d);
	}
	return n;
}

static void test_kill9_leftovers_cleaned(void **state)
{
	(void)state;
	if (!it_cgroups_here())
		skip();
	char nonce[32];
	snprintf(nonce, sizeof nonce, "271.%d", (int)getpid());
	char *cmd = xasprintf("sleep %s", nonce);
	struct bg_req b;
	bg_exec(&b, &srv, tok, json_pack("{s:s, s:s, s:i}", "command", cmd, "id", "left-1", "timeout_s", 120),
		NULL);
	free(cmd);
	json_t *v = ex_wait_state(&srv, tok, "left-1", "running", 10000);
	assert_non_null(v);
	json_decref(v);
	char base[128];
	snprintf(base, sizeof base, CG_PIDS "/sandboxd/%ld", uid_base);
	assert_true(count_subdirs(base) > 0);

	it_stop(&srv, SIGKILL);
	json_decref(bg_join(&b));
	it_resp_free(&b.resp);
	const char *const extra[] = {
	    "--set", it_uid_base_arg(NULL),	  "--set", "mem-limit-bytes=268435456",
	    "--set", "tmp-size-bytes=1073741824", NULL};
	assert_int_equal(it_restart(&srv, extra), 0);
	/* The restart removed the cgroups of the commands it lost. */
	char mem[128];
	snprintf(mem, sizeof mem, CG_MEM "/sandboxd/%ld", uid_base);
	assert_int_equal(busy_children(base), 0);
	assert_int_equal(busy_children(mem), 0);
	assert_int_equal(host_procs_wait_gone((uid_t)uid_base, NULL, nonce, 5000), 0);
	globex_still_served();
}

/* Two servers on one host with one uid-base would share tenant uids and
 * cgroups (and sweep each other's commands at start): the second refuses,
 * naming the fix. */
static void test_shared_uid_base_refused(void **state)
{
	(void)state;
	if (!it_cgroups_here())
		skip();
	struct it_server s2;
	char base[40];
	snprintf(base, sizeof base, "uid-base=%ld", uid_base);
	const char *const same[] = {"--set", base, NULL};
	assert_int_equal(it_start(&s2, same), -1); /* exits instead of serving */
	char *log = it_read_file(s2.log, NULL);
	assert_non_null(log);
	assert_non_null(strstr(log, "uid-base"));
	free(log);
	it_cleanup(&s2);
	/* The first is untouched. */
	globex_still_served();
}

/* ---- 4: a data directory the tenants cannot reach ---- */

static void test_unreachable_data_dir_refused(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip(); /* tenants share the server's uid: nothing to reach */
	struct it_server s;
	memset(&s, 0, sizeof s);
	char top[] = "/tmp/sandboxd-it-locked-XXXXXX";
	assert_non_null(mkdtemp(top)); /* 0700: the tenants' uids cannot pass */
	snprintf(s.dir, sizeof s.dir, "%s/data", top);
	snprintf(s.log, sizeof s.log, "%s.log", top);
	int st = 0;
	free(it_cli(&s, &st, "tenant add acme"));
	assert_int_equal(st, 0);
	/* (a uid range of its own, given by the harness: this suite's server
	 * holds the suite's) */
	assert_int_equal(it_restart(&s, NULL), -1); /* exits instead of serving */
	char *log = it_read_file(s.log, NULL);
	assert_non_null(log);
	if (!strstr(log, top) || !strstr(log, "chmod"))
		fprintf(stderr, "log:\n%s\n", log);
	assert_non_null(strstr(log, top));     /* names the directory */
	assert_non_null(strstr(log, "chmod")); /* and the fix */
	free(log);
	unlink(s.log);

	/* The fix it names works. */
	assert_int_equal(chmod(top, 0711), 0);
	assert_int_equal(it_restart(&s, NULL), 0);
	char *t = it_token(&s, "acme", NULL);
	json_t *r = ex_run(&s, t, "echo reached");
	assert_string_equal(ex_stdout_ok(r), "reached\n");
	json_decref(r);
	free(t);
	it_stop(&s, SIGTERM);
	char *rm = xasprintf("rm -rf %s %s.log", top, top);
	assert_int_equal(system(rm), 0);
	free(rm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_planted_spill_paths),
	    cmocka_unit_test(test_planted_session_and_file_paths),
	    cmocka_unit_test(test_planted_spill_dir),
	    cmocka_unit_test(test_exec_id_cannot_switch_limits_off),
	    cmocka_unit_test(test_root_and_dev_bounded),
	    cmocka_unit_test(test_no_host_paths_inside),
	    cmocka_unit_test(test_unreachable_data_dir_refused),
	    cmocka_unit_test(test_shared_uid_base_refused),
	    cmocka_unit_test(test_kill9_leftovers_cleaned),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
