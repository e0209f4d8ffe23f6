/* sandboxd doctor (server/doctor.c, docs/doctor.md), from outside with the
 * real binary: one line per check, ok / missing with its fix / not
 * needed, exit 1 when something is missing, --format json the same
 * checks; and serve, which runs the same table at start, refuses on the
 * same item. Each broken host is made for real: a data directory under a
 * 0700 parent, TLS files that are not there or do not match, a binary
 * built "after" the clock, a store of a newer schema, the uid range held
 * by a running server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

static char top[64];  /* this suite's scratch directory */
static char base[48]; /* "uid-base=N": a range of this suite's own */
static long uid_base_n;
static struct it_server held; /* test_uid_range_held's server, stopped by teardown if it fails */

static int setup(void **state)
{
	(void)state;
	snprintf(top, sizeof top, "/tmp/sandboxd-doctor-XXXXXX");
	if (!mkdtemp(top))
		return -1;
	chmod(top, 0711);
	uid_base_n = 3900000L + (long)(getpid() % 10000) * 64;
	snprintf(base, sizeof base, "uid-base=%ld", uid_base_n);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (held.pid > 0) { /* a test that failed while it ran */
		it_stop(&held, SIGKILL);
		it_cleanup(&held);
	}
	it_sh_quiet("chmod -R u+rwx '%s'; rm -rf '%s'", top, top);
	/* the (empty) cgroup roots the backends' probe makes, as serve would */
	it_sh_quiet("for h in memory pids cpu cpuacct; do d=/sys/fs/cgroup/$h/sandboxd/%ld; "
		    "[ -d $d ] && find $d -depth -type d -exec rmdir {} +; done; true",
		    uid_base_n);
	return 0;
}

/* A server record for it_cli / it_restart on data directory dir (not made). */
static void at(struct it_server *s, const char *dir)
{
	memset(s, 0, sizeof *s);
	snprintf(s->dir, sizeof s->dir, "%s", dir);
	snprintf(s->log, sizeof s->log, "%s.log", dir);
	snprintf(s->uid_base, sizeof s->uid_base, "%s", base);
}

/* `sandboxd doctor [--format json] <args>` on s's data directory, with the
 * suite's uid range and no disk quota unless args say otherwise. */
static char *doctor(struct it_server *s, bool json, const char *args, int *status)
{
	char *cmd = xasprintf("doctor %s--set %s --set disk-quota=none %s", json ? "--format json " : "",
			      base, args ? args : "");
	char *out = it_cli(s, status, cmd);
	free(cmd);
	assert_non_null(out);
	return out;
}

static json_t *doctor_json(struct it_server *s, const char *args, int *status)
{
	char *out = doctor(s, true, args, status);
	json_error_t e;
	json_t *j = json_loads(out, 0, &e);
	if (!j)
		fprintf(stderr, "doctor --format json is not JSON (%s):\n%s\n", e.text, out);
	assert_non_null(j);
	free(out);
	return j;
}

/* The check called name in doctor's JSON (borrowed). */
static json_t *item(json_t *doc, const char *name)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(doc, "checks"), i, c) {
		if (strcmp(jstr(c, "name"), name) == 0)
			return c;
	}
	fprintf(stderr, "doctor has no check %s\n", name);
	fail();
	return NULL;
}

static void expect_item(json_t *doc, const char *name, const char *status, const char *in_detail,
			const char *in_fix)
{
	json_t *c = item(doc, name);
	char *dump = json_dumps(c, 0);
	bool ok = strcmp(jstr(c, "status"), status) == 0 &&
		  (!in_detail || strstr(jstr(c, "detail"), in_detail)) &&
		  (!in_fix || strstr(jstr(c, "fix"), in_fix));
	if (!ok)
		fprintf(stderr, "want %s %s (detail with \"%s\", fix with \"%s\"), got %s\n", name, status,
			in_detail ? in_detail : "", in_fix ? in_fix : "", dump);
	free(dump);
	assert_true(ok);
}

/* serve on s's data directory (with extra) must not start, and its
 * stderr must name the item and hold want. */
static void serve_refuses(struct it_server *s, const char *const *extra, const char *name, const char *want)
{
	unlink(s->log);
	assert_int_equal(it_restart(s, extra), -1);
	char *log = it_read_file(s->log, NULL);
	assert_non_null(log);
	char head[96];
	snprintf(head, sizeof head, "refusing to start: %s: ", name);
	if (!strstr(log, head) || (want && !strstr(log, want)))
		fprintf(stderr, "serve's log lacks \"%s\" or \"%s\":\n%s\n", head, want ? want : "", log);
	assert_non_null(strstr(log, head));
	if (want)
		assert_non_null(strstr(log, want));
	free(log);
	unlink(s->log);
}

/* How many "refusing to start" lines serve on s (with extra) printed
 * (it must not start). */
static int refusals(struct it_server *s, const char *const *extra)
{
	unlink(s->log);
	assert_int_equal(it_restart(s, extra), -1);
	char *log = it_read_file(s->log, NULL);
	assert_non_null(log);
	int n = 0;
	for (const char *p = log; (p = strstr(p, "refusing to start: ")); p++)
		n++;
	if (n != 1)
		fprintf(stderr, "serve refused %d times:\n%s\n", n, log);
	free(log);
	unlink(s->log);
	return n;
}

/* The text and the JSON say the same, line for line; the exit status is
 * 1 exactly when an item is missing; a fresh data directory is made by
 * nobody (doctor looks only). */
static void test_json_matches_text(void **state)
{
	(void)state;
	struct it_server s;
	char dir[128];
	snprintf(dir, sizeof dir, "%s/fresh", top);
	at(&s, dir);
	int st_text = -1, st_json = -1;
	char *text = doctor(&s, false, NULL, &st_text);
	json_t *doc = doctor_json(&s, NULL, &st_json);
	assert_int_equal(st_text, st_json);
	json_t *checks = json_object_get(doc, "checks");
	assert_true(json_array_size(checks) >= 15);
	bool any_missing = false;
	size_t i, lines = 0;
	json_t *c;
	for (const char *p = text; *p; p++)
		lines += *p == '\n';
	assert_int_equal(lines, json_array_size(checks));
	const char *line = text;
	json_array_foreach(checks, i, c) {
		const char *status = jstr(c, "status"), *name = jstr(c, "name");
		any_missing |= strcmp(status, "missing") == 0;
		assert_true(strcmp(status, "ok") == 0 || strcmp(status, "missing") == 0 ||
			    strcmp(status, "not needed") == 0);
		/* "STATUS  NAME  DETAIL[; fix: FIX]" */
		char want[256];
		snprintf(want, sizeof want, "%-10s  %-15s  ", status, name);
		if (strncmp(line, want, strlen(want)) != 0)
			fprintf(stderr, "line %zu \"%.*s\" is not \"%s...\"\n", i, (int)strcspn(line, "\n"),
				line, want);
		assert_memory_equal(line, want, strlen(want));
		/* (the clock's detail is the time of each run) */
		if (strcmp(name, "clock") != 0 &&
		    strncmp(line + strlen(want), jstr(c, "detail"), strlen(jstr(c, "detail"))) != 0)
			fprintf(stderr, "line %zu \"%.*s\" lacks the detail \"%s\"\n", i,
				(int)strcspn(line, "\n"), line, jstr(c, "detail"));
		if (strcmp(name, "clock") != 0)
			assert_memory_equal(line + strlen(want), jstr(c, "detail"),
					    strlen(jstr(c, "detail")));
		if (strcmp(status, "missing") == 0)
			assert_true(strlen(jstr(c, "fix")) > 0);
		line = strchr(line, '\n') + 1;
	}
	assert_string_equal(jstr(doc, "status"), any_missing ? "missing" : "ok");
	assert_int_equal(st_json, any_missing ? 1 : 0);
	/* Items named by the configuration, and the checks of this host. */
	expect_item(doc, "tls", "not needed", "plain HTTP", NULL);
	expect_item(doc, "network", "not needed", "network=none", NULL);
	expect_item(doc, "disk-quota", "not needed", "disk-quota=none", NULL);
	expect_item(doc, "loop-devices", "not needed", NULL, NULL);
	expect_item(doc, "store", "ok", "does not exist yet", NULL);
	expect_item(doc, "clock", "ok", NULL, NULL);
	if (geteuid() == 0 && it_cgroups_here()) {
		expect_item(doc, "bwrap", "ok", "bwrap", NULL);
		expect_item(doc, "user-namespaces", "ok", NULL, NULL);
		expect_item(doc, "seccomp", "ok", "loads", NULL);
		expect_item(doc, "cgroups", "ok", "cgroup v1", NULL);
		expect_item(doc, "uid-range", "ok", NULL, NULL);
	}
	struct stat st;
	assert_int_equal(stat(dir, &st), -1); /* nothing made */
	json_decref(doc);
	free(text);
}

/* A data directory whose parent is 0700: the tenants' uids cannot reach
 * it. Missing with the chmod that fixes it, exit 1; serve refuses with
 * the same item and fix; after the chmod both are content. */
static void test_locked_parent(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip(); /* tenants share the server's uid: nothing to reach */
	char locked[128], dir[160];
	snprintf(locked, sizeof locked, "%s/locked", top);
	assert_int_equal(mkdir(locked, 0700), 0);
	snprintf(dir, sizeof dir, "%s/data", locked);
	struct it_server s;
	at(&s, dir);
	char fix[200];
	snprintf(fix, sizeof fix, "chmod o+x %s", locked);
	int st = -1;
	json_t *doc = doctor_json(&s, NULL, &st);
	assert_int_equal(st, 1);
	expect_item(doc, "data-dir", "missing", locked, fix);
	assert_true(json_is_true(json_object_get(item(doc, "data-dir"), "refuses_start")));
	json_decref(doc);
	char *text = doctor(&s, false, NULL, &st);
	assert_int_equal(st, 1);
	assert_non_null(strstr(text, "missing     data-dir"));
	assert_non_null(strstr(text, fix));
	free(text);

	serve_refuses(&s, NULL, "data-dir", fix);

	assert_int_equal(chmod(locked, 0711), 0);
	doc = doctor_json(&s, NULL, &st);
	expect_item(doc, "data-dir", "ok", NULL, NULL);
	json_decref(doc);
}

/* TLS files that are not there, and a key that is not the certificate's:
 * missing and refused; the pair that matches: ok. */
static void test_tls_files(void **state)
{
	(void)state;
	char dir[128];
	snprintf(dir, sizeof dir, "%s/tls", top);
	struct it_server s;
	at(&s, dir);
	int st = -1;
	char *args = xasprintf("--tls-cert %s/none/cert.pem --tls-key %s/none/key.pem", top, top);
	json_t *doc = doctor_json(&s, args, &st);
	assert_int_equal(st, 1);
	expect_item(doc, "tls", "missing", "/none/cert.pem: No such file or directory", "--tls-cert");
	json_decref(doc);
	free(args);
	char *cert = xasprintf("%s/none/cert.pem", top), *key = xasprintf("%s/none/key.pem", top);
	const char *const missing_files[] = {"--tls-cert", cert, "--tls-key", key, NULL};
	serve_refuses(&s, missing_files, "tls", "No such file or directory");
	free(cert);
	free(key);

	for (int i = 0; i < 2; i++)
		assert_int_equal(it_sh_quiet("openssl req -x509 -newkey rsa:2048 -nodes -keyout %s/k%d.pem "
					     "-out %s/c%d.pem -days 30 -subj /CN=127.0.0.1",
					     top, i, top, i),
				 0);
	args = xasprintf("--tls-cert %s/c0.pem --tls-key %s/k1.pem", top, top);
	doc = doctor_json(&s, args, &st);
	assert_int_equal(st, 1);
	expect_item(doc, "tls", "missing", "is not the key of", NULL);
	json_decref(doc);
	free(args);
	cert = xasprintf("%s/c0.pem", top);
	key = xasprintf("%s/k1.pem", top);
	const char *const mismatch[] = {"--tls-cert", cert, "--tls-key", key, NULL};
	serve_refuses(&s, mismatch, "tls", "is not the key of");
	free(cert);
	free(key);

	args = xasprintf("--tls-cert %s/c0.pem --tls-key %s/k0.pem", top, top);
	doc = doctor_json(&s, args, &st);
	expect_item(doc, "tls", "ok", "key matches", NULL);
	json_decref(doc);
	free(args);
}

/* Network on request: not needed with network=none and no tenant's
 * policy giving it; needed (checked: ok, or missing with a fix) when the
 * configured default or a tenant's stored policy gives it. */
static void test_network_on_request(void **state)
{
	(void)state;
	char dir[128];
	snprintf(dir, sizeof dir, "%s/net", top);
	struct it_server s;
	at(&s, dir);
	int st = -1;
	free(it_cli(&s, &st, "tenant add acme"));
	assert_int_equal(st, 0);
	json_t *doc = doctor_json(&s, NULL, &st);
	expect_item(doc, "network", "not needed", "no tenant's policy gives network", NULL);
	json_decref(doc);

	doc = doctor_json(&s, "--set network=127.0.0.1:9", &st);
	/* as root: a probe namespace is made as the gateway makes them, and
	 * this host has a route out */
	if (geteuid() == 0)
		expect_item(doc, "network", "ok", "egress gateway ready", NULL);
	else
		assert_string_not_equal(jstr(item(doc, "network"), "status"), "not needed");
	json_decref(doc);

	free(it_cli(&s, &st, "tenant set acme network=127.0.0.1:9"));
	assert_int_equal(st, 0);
	doc = doctor_json(&s, NULL, &st);
	assert_string_not_equal(jstr(item(doc, "network"), "status"), "not needed");
	json_decref(doc);
}

/* The clock before the binary's build: a copy of the binary dated 2099.
 * Missing (tokens' times are judged by the clock); serve refuses. */
static void test_clock_before_build(void **state)
{
	(void)state;
	char bin[128], dir[128];
	snprintf(bin, sizeof bin, "%s/sandboxd-2099", top);
	snprintf(dir, sizeof dir, "%s/clock", top);
	assert_int_equal(it_sh("cp '%s' '%s' && touch -d 2099-01-01 '%s'", it_bin(), bin, bin), 0);
	char *saved = xstrdup(it_bin());
	setenv("SANDBOXD_BIN", bin, 1);
	struct it_server s;
	at(&s, dir);
	int st = -1;
	json_t *doc = doctor_json(&s, NULL, &st);
	assert_int_equal(st, 1);
	expect_item(doc, "clock", "missing", "before this binary was built (2099-01-01)", "set the clock");
	json_decref(doc);
	serve_refuses(&s, NULL, "clock", "before this binary was built");
	setenv("SANDBOXD_BIN", saved, 1);
	free(saved);
}

/* A store a newer sandboxd migrated: missing, serve refuses. An older one
 * (pending migrations) is serve's to migrate: ok, said. */
static void test_store_schema(void **state)
{
	(void)state;
	char dir[128];
	snprintf(dir, sizeof dir, "%s/store", top);
	struct it_server s;
	at(&s, dir);
	int st = -1;
	free(it_cli(&s, &st, "migrate"));
	assert_int_equal(st, 0);
	json_t *doc = doctor_json(&s, NULL, &st);
	expect_item(doc, "store", "ok", "(this binary's)", NULL);
	json_decref(doc);
	assert_int_equal(it_sh("sqlite3 '%s/sandboxd.db' 'PRAGMA user_version=999'", dir), 0);
	doc = doctor_json(&s, NULL, &st);
	assert_int_equal(st, 1);
	expect_item(doc, "store", "missing", "newer than this binary", "at least as new");
	json_decref(doc);
	serve_refuses(&s, NULL, "store", "newer than this binary");
	assert_int_equal(it_sh("sqlite3 '%s/sandboxd.db' 'PRAGMA user_version=1'", dir), 0);
	doc = doctor_json(&s, NULL, &st);
	expect_item(doc, "store", "ok", "serve applies the pending migrations", NULL);
	json_decref(doc);
}

/* A running server holds its uid range: doctor with that uid-base names
 * the server's pid (root: a uid per tenant). */
static void test_uid_range_held(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	struct it_server *srv = &held;
	const char *const extra[] = {"--set", base, NULL};
	assert_int_equal(it_start(srv, extra), 0);
	struct it_server s;
	char dir[128];
	snprintf(dir, sizeof dir, "%s/range", top);
	at(&s, dir);
	int st = -1;
	char pid[48];
	snprintf(pid, sizeof pid, "that server is pid %ld", (long)srv->pid);
	/* Again and again (an operator's doctor, a unit restarting a second
	 * server): each asks the claim who holds it, and the server's backlog
	 * (4) never fills into a connect that waits for ever. */
	for (int i = 0; i < 8; i++) {
		st = it_sh("timeout 30 '%s' doctor --format json --set %s --set disk-quota=none "
			   "--data-dir '%s' >'%s.json' 2>/dev/null",
			   it_bin(), base, dir, dir);
		if (st != 1)
			fprintf(stderr, "doctor run %d with the range held exited %d\n", i + 1, st);
		assert_int_equal(st, 1);
	}
	json_t *doc = doctor_json(&s, NULL, &st);
	assert_int_equal(st, 1);
	expect_item(doc, "uid-range", "missing", "another sandboxd on this host runs with uid-base", pid);
	json_decref(doc);
	/* serve refuses on the uid range alone: after that refusal nothing of
	 * the phase claims (the cgroup root the running server holds) */
	serve_refuses(&s, NULL, "uid-range", pid);
	assert_int_equal(refusals(&s, NULL), 1);
	assert_int_equal(it_stop(srv, SIGTERM), 0);
	it_cleanup(srv);
}

/* --format json is JSON whatever happens: a bad configuration (exit 2,
 * nothing checked) says so as JSON; a data directory whose name is not
 * UTF-8 keeps every check in the list. */
static void test_json_always(void **state)
{
	(void)state;
	struct it_server s;
	char dir[128];
	snprintf(dir, sizeof dir, "%s/json", top);
	at(&s, dir);
	int st = -1;
	json_t *doc = doctor_json(&s, "--set no-such-key=1", &st);
	assert_int_equal(st, 2);
	assert_string_equal(jstr(doc, "status"), "error");
	assert_non_null(strstr(jstr(doc, "error"), "no-such-key"));
	assert_int_equal(json_array_size(json_object_get(doc, "checks")), 0);
	json_decref(doc);
	doc = doctor_json(&s, "--limit x", &st);
	assert_int_equal(st, 2);
	assert_string_equal(jstr(doc, "status"), "error");
	json_decref(doc);

	doc = doctor_json(&s, NULL, &st);
	size_t want = json_array_size(json_object_get(doc, "checks"));
	json_decref(doc);
	snprintf(dir, sizeof dir, "%s/json-\xff\xfe", top);
	at(&s, dir);
	doc = doctor_json(&s, NULL, &st);
	assert_int_equal(json_array_size(json_object_get(doc, "checks")), want);
	expect_item(doc, "data-dir", "ok", "json-", NULL);
	expect_item(doc, "store", "ok", "does not exist yet", NULL);
	json_decref(doc);
}

/* An encrypted key: missing, said at once; never a passphrase prompt on
 * the terminal (OpenSSL's default asks /dev/tty and waits). */
static void test_encrypted_key(void **state)
{
	(void)state;
	if (it_sh_quiet("command -v script && command -v openssl") != 0)
		skip();
	assert_int_equal(it_sh_quiet("openssl req -x509 -newkey rsa:2048 -passout pass:secret "
				     "-keyout %s/ek.pem -out %s/ec.pem -days 30 -subj /CN=127.0.0.1",
				     top, top),
			 0);
	/* under a terminal (script), bounded: a prompt would wait for ever */
	int st = it_sh("timeout 60 script -qec \"'%s' doctor --format json --set %s --set "
		       "disk-quota=none --data-dir %s/ek --tls-cert %s/ec.pem --tls-key %s/ek.pem "
		       ">%s/ek.json 2>/dev/null\" /dev/null >/dev/null 2>&1",
		       it_bin(), base, top, top, top, top);
	assert_int_not_equal(st, 124);
	char path[128];
	snprintf(path, sizeof path, "%s/ek.json", top);
	char *out = it_read_file(path, NULL);
	assert_non_null(out);
	json_error_t e;
	json_t *doc = json_loads(out, 0, &e);
	if (!doc)
		fprintf(stderr, "not JSON (%s): %s\n", e.text, out);
	assert_non_null(doc);
	expect_item(doc, "tls", "missing", "no unencrypted PEM private key", "without a passphrase");
	json_decref(doc);
	free(out);
}

/* A start refused in the store's phase leaves the store as it was: a
 * store one schema behind is not migrated (the binary before stays able
 * to open it), as before the table. */
static void test_refusal_keeps_store(void **state)
{
	(void)state;
	char dir[128];
	snprintf(dir, sizeof dir, "%s/behind", top);
	assert_int_equal(mkdir(dir, 0711), 0);
	assert_int_equal(it_sh("for f in '%s'/migrations/000[1-7]_*.sql; do sqlite3 '%s/sandboxd.db' "
			       "<\"$f\" || exit 1; done && sqlite3 '%s/sandboxd.db' 'PRAGMA "
			       "user_version=7; PRAGMA journal_mode=WAL' >/dev/null",
			       SBX_SOURCE_DIR, dir, dir),
			 0);
	struct it_server s;
	at(&s, dir);
	const char *const bad[] = {"--set", "disk-quota=bogus", NULL};
	serve_refuses(&s, bad, "disk-quota", "bogus");
	assert_int_equal(it_sh("test \"$(sqlite3 '%s/sandboxd.db' 'PRAGMA user_version')\" = 7", dir), 0);
}

/* A data directory of the server's own with a narrow mode (0700): serve
 * sets it to 0711 and starts, as it always did; doctor says ok, not a
 * chmod for the operator (root: the tenants' uids are others). */
static void test_own_data_dir_0700(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	char dir[128];
	snprintf(dir, sizeof dir, "%s/own700", top);
	assert_int_equal(mkdir(dir, 0700), 0);
	struct it_server s;
	at(&s, dir);
	int st = -1;
	json_t *doc = doctor_json(&s, NULL, &st);
	expect_item(doc, "data-dir", "ok", "serve sets its mode 0700 to 0711", NULL);
	json_decref(doc);
	const char *const extra[] = {"--set", base, "--set", "disk-quota=none", NULL};
	if (it_restart(&s, extra) != 0) {
		char *log = it_read_file(s.log, NULL);
		fprintf(stderr, "serve did not start on a 0700 data directory of its own:\n%s\n",
			log ? log : "");
		free(log);
		fail();
	}
	assert_int_equal(it_stop(&s, SIGTERM), 0);
	struct stat sb;
	assert_int_equal(stat(dir, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0711);
}

/* Doctor and serve as a user that is not root (nobody): a data directory
 * under a 0700 directory of root's is named as what it is (not "does not
 * exist yet"); two tenants that would share that user's uid are refused
 * by serve, and doctor says so (refuses_start). */
static void test_not_root(void **state)
{
	(void)state;
	char why[8192];
	if (geteuid() != 0 || it_runnable_as(it_bin(), 65534, 65534, why, sizeof why) < 0)
		skip();
	char priv[128], dir[160];
	snprintf(priv, sizeof priv, "%s/rootonly", top);
	assert_int_equal(mkdir(priv, 0700), 0);
	snprintf(dir, sizeof dir, "%s/data", priv);
	struct it_server s;
	at(&s, dir);
	int st = -1;
	free(it_cli(&s, &st, "migrate"));
	assert_int_equal(st, 0);
	s.as_user = true;
	s.as_uid = s.as_gid = 65534;
	json_t *doc = doctor_json(&s, NULL, &st);
	assert_int_equal(st, 1);
	char fix[200];
	snprintf(fix, sizeof fix, "chmod o+x %s", priv);
	expect_item(doc, "data-dir", "missing", "cannot look at the data directory", fix);
	expect_item(doc, "store", "missing", "Permission denied", NULL);
	assert_null(strstr(jstr(item(doc, "network"), "detail"), "no tenants yet"));
	json_decref(doc);

	char home[128];
	snprintf(home, sizeof home, "%s/nobody", top);
	assert_int_equal(mkdir(home, 0711), 0);
	assert_int_equal(chown(home, 65534, 65534), 0);
	snprintf(dir, sizeof dir, "%s/data", home);
	at(&s, dir);
	s.as_user = true;
	s.as_uid = s.as_gid = 65534;
	free(it_cli(&s, &st, "tenant add one --set allow-shared-uid=true"));
	assert_int_equal(st, 0);
	free(it_cli(&s, &st, "tenant add two --set allow-shared-uid=true"));
	assert_int_equal(st, 0);
	doc = doctor_json(&s, "--set use-cgroups=false", &st);
	if (strncmp(jstr(item(doc, "uids"), "detail"), "shared", 6) != 0) {
		json_decref(doc);
		skip(); /* nobody has a subordinate range here */
	}
	expect_item(doc, "tenants", "missing", "2 tenants would share uid 65534", "allow-shared-uid=true");
	assert_true(json_is_true(json_object_get(item(doc, "tenants"), "refuses_start")));
	json_decref(doc);
	const char *const nocg[] = {"--set", "use-cgroups=false", NULL};
	serve_refuses(&s, nocg, "tenants", "2 tenants would share uid 65534");
}

/* bwrap listed but unusable (a file that is not executable bound over
 * it, in a mount namespace of the test's own): bwrap is missing and
 * refuses; the checks that need no bwrap still say what they find
 * (seccomp), and those that need it say "not checked", never "not
 * needed". */
static void test_bwrap_unusable(void **state)
{
	(void)state;
	if (geteuid() != 0 || it_sh_quiet("command -v unshare") != 0)
		skip();
	char stub[128], out[128];
	snprintf(stub, sizeof stub, "%s/not-bwrap", top);
	snprintf(out, sizeof out, "%s/nobwrap.json", top);
	assert_int_equal(it_write_file(stub, "", 0), 0);
	assert_int_equal(chmod(stub, 0644), 0);
	int st = it_sh("unshare -m sh -c \"mount --bind '%s' /usr/bin/bwrap && '%s' doctor --format json "
		       "--set %s --set disk-quota=none --set network=127.0.0.1:9 --data-dir %s/nobwrap "
		       ">'%s' 2>/dev/null\"",
		       stub, it_bin(), base, top, out);
	assert_int_equal(st, 1);
	char *text = it_read_file(out, NULL);
	assert_non_null(text);
	json_t *doc = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(doc);
	expect_item(doc, "bwrap", "missing", "backend bwrap unavailable", NULL);
	assert_true(json_is_true(json_object_get(item(doc, "bwrap"), "refuses_start")));
	expect_item(doc, "seccomp", "ok", "loads", NULL);
	expect_item(doc, "network", "missing", "not checked", "see bwrap");
	json_decref(doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_json_matches_text),  cmocka_unit_test(test_locked_parent),
	    cmocka_unit_test(test_tls_files),	       cmocka_unit_test(test_network_on_request),
	    cmocka_unit_test(test_clock_before_build), cmocka_unit_test(test_store_schema),
	    cmocka_unit_test(test_uid_range_held),     cmocka_unit_test(test_json_always),
	    cmocka_unit_test(test_encrypted_key),      cmocka_unit_test(test_refusal_keeps_store),
	    cmocka_unit_test(test_own_data_dir_0700),  cmocka_unit_test(test_not_root),
	    cmocka_unit_test(test_bwrap_unusable),
	};
	return cmocka_run_group_tests_name("doctor", tests, setup, teardown);
}
