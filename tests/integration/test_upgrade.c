/* Upgrades in place (docs/upgrades.md): a store of an earlier schema,
 * holding what that schema's server wrote (tenants and their keys, a
 * policy, sessions, finished and background commands, audit records, a
 * transfer), is upgraded by the real binary and loses nothing: the old
 * tokens work, the policy holds, the old records read back over HTTP and
 * are the same rows in the file.
 *
 * - v0.1.0, the previous release: exactly the migrations
 *   migrations/RELEASED lists for it, its data written in its schema;
 *   `migrate --dry-run` names exactly the migrations since (none while
 *   main is that release) and changes nothing, `migrate` applies them,
 *   `serve` then starts on it.
 * - 0005, a store of a build between releases (schema up to
 *   0005_approver_key.sql): the dry run names 0006 and every later one,
 *   `serve` applies them at start (tenant lives, store usage and exec
 *   outcomes filled in for the old rows).
 * - a store newer than the binary: `migrate`, its dry run and `serve`
 *   refuse it, naming both versions, and leave the file as it was.
 *
 * The data is SQL of the old schema, which never changes (released
 * migrations are immutable): it stays valid whatever migrations come
 * later. Each release gets a scenario here: one RELEASED names without
 * one fails the suite. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <glob.h>
#include <signal.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth/auth.h"
#include "common/xmalloc.h"
#include "harness.h"

#define MIGRATIONS SBX_SOURCE_DIR "/migrations"
#define ACME_SECRET "acme-upgrade-secret-0123456789abcdef-0123456789"
#define APPROVER_SECRET "acme-approver-upgrade-secret-0123456789abcdef-01"
#define OPS_SECRET "ops-upgrade-secret-0123456789abcdef-0123456789ab"

/* The releases this suite has data for (last: the previous release). */
static const char *const scenario_releases[] = {"v0.1.0"};

struct mig {
	char name[128];
	int num;
};

/* The source tree's migrations, in the order they run. */
static size_t source_migrations(struct mig *out, size_t max)
{
	glob_t g;
	size_t n = 0;

	assert_int_equal(glob(MIGRATIONS "/[0-9]*_*.sql", 0, NULL, &g), 0);
	for (size_t i = 0; i < g.gl_pathc && n < max; i++) {
		const char *base = strrchr(g.gl_pathv[i], '/') + 1;
		char *end = NULL;

		snprintf(out[n].name, sizeof out[n].name, "%s", base);
		out[n].num = (int)strtol(base, &end, 10);
		assert_true(end && *end == '_');
		n++;
	}
	globfree(&g);
	return n;
}

/* How many migrations release tag shipped (every line of RELEASED up to
 * its last), checking that they are the first ones of the source tree;
 * *last_tag gets the latest release RELEASED names. */
static size_t released_count(const char *tag, char *last_tag, size_t last_tagsz)
{
	struct mig m[256];
	size_t nm = source_migrations(m, 256), n = 0, upto = 0;
	char *text = it_read_file(MIGRATIONS "/RELEASED", NULL), *next;

	assert_non_null(text);
	for (char *l = text; *l; l = next) {
		char t[32], file[128];

		next = l + strcspn(l, "\n");
		if (*next)
			*next++ = '\0';
		if (l[0] == '#' || sscanf(l, "%31s %127s", t, file) != 2)
			continue;
		assert_true(n < nm);
		if (strcmp(m[n].name, file) != 0)
			fail_msg(
			    "migrations/RELEASED line %zu names %s, the source tree's migration %zu is %s",
			    n + 1, file, n + 1, m[n].name);
		n++;
		if (strcmp(t, tag) == 0)
			upto = n;
		snprintf(last_tag, last_tagsz, "%s", t);
	}
	free(text);
	return upto;
}

/* The whole file (caller frees); fails the test when missing. */
static char *slurp(const char *path, size_t *len)
{
	char *p = it_read_file(path, len);

	if (!p)
		fail_msg("cannot read %s", path);
	return p;
}

static void exec_sql(sqlite3 *db, const char *sql, const char *what)
{
	char *msg = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
		fail_msg("%s: %s", what, msg ? msg : "?");
	sqlite3_free(msg);
}

/* A data directory whose store has the first nmig source migrations (and
 * user_version the last one's number, as migrate sets it) and then
 * data_sql, written the way a server of that schema left it (WAL). */
static void make_store(struct it_server *s, size_t nmig, const char *data_sql)
{
	struct mig m[256];
	size_t nm = source_migrations(m, 256);
	sqlite3 *db = NULL;
	char path[320], pragma[64];

	memset(s, 0, sizeof *s);
	snprintf(s->dir, sizeof s->dir, "/tmp/sandboxd-it-XXXXXX");
	assert_non_null(mkdtemp(s->dir));
	chmod(s->dir, 0755);
	snprintf(s->log, sizeof s->log, "/tmp/%s.log", strrchr(s->dir, '/') + 1);
	snprintf(path, sizeof path, "%s/sandboxd.db", s->dir);
	assert_true(nmig <= nm);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	exec_sql(db, "PRAGMA journal_mode = WAL", "WAL");
	exec_sql(db, "BEGIN", "begin");
	for (size_t i = 0; i < nmig; i++) {
		char *f = xasprintf("%s/%s", MIGRATIONS, m[i].name);
		char *sql = slurp(f, NULL);

		exec_sql(db, sql, m[i].name);
		free(sql);
		free(f);
	}
	snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", nmig ? m[nmig - 1].num : 0);
	exec_sql(db, pragma, "user_version");
	exec_sql(db, "COMMIT", "commit");
	if (data_sql)
		exec_sql(db, data_sql, "the old schema's data");
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
	chmod(path, 0600);
}

static char *db_path(const struct it_server *s)
{
	return xasprintf("%s/sandboxd.db", s->dir);
}

/* The first column of the first row of sql on the store, as text (""
 * for no row or NULL); caller frees. */
static char *db_text(const struct it_server *s, const char *sql)
{
	char *path = db_path(s);
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	char *out = NULL;

	/* Read-write: a read-only connection would leave a -wal and -shm. */
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(db));
	if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
		out = xstrdup((const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	sqlite3_close(db);
	free(path);
	return out ? out : xstrdup("");
}

static long db_int(const struct it_server *s, const char *sql)
{
	char *t = db_text(s, sql);
	long v = strtol(t, NULL, 10);

	free(t);
	return v;
}

/* ---- what the old server wrote ---- */

/* Old rows' columns that every later schema keeps as they were: read
 * before the upgrade and after, they must be equal. Only the finished
 * command: the first start marks those that were running or waiting
 * lost, as after any restart. */
static const char *const kept[] = {
    "SELECT group_concat(quote(name) || quote(alg) || quote(key) || operator || ',' || slot || ',' || "
    "created_at || quote(approver_alg) || quote(approver_key), ';') FROM (SELECT * FROM tenants ORDER BY "
    "name)",
    /* last_used_at: the new command in s1 moves it. */
    "SELECT group_concat(quote(tenant) || quote(key) || segment || created_at, ';') "
    "FROM (SELECT * FROM sessions ORDER BY tenant, key)",
    "SELECT group_concat(id || quote(session) || quote(command) || quote(cwd) || request_hash || state || "
    "quote(exit_code) || quote(result) || started_at || quote(finished_at) || quote(exit_event_id) || "
    "quote(policy) || quote(requested_by), ';') FROM (SELECT * FROM execs WHERE id = 'old-1')",
    "SELECT group_concat(id || ',' || at || quote(tenant) || quote(session) || request_id || method || route "
    "|| "
    "quote(target) || status || outcome || quote(exit_code) || ',' || bytes_in || ',' || bytes_out || ',' || "
    "duration_ms || quote(client) || quote(sub), ';') FROM (SELECT * FROM audit WHERE id <= 5 ORDER BY id)",
    "SELECT group_concat(tenant || policy || updated_at, ';') FROM policies",
    "SELECT group_concat(hex(token_hash) || tenant || quote(session) || path || direction || state || bytes "
    "|| "
    "quote(sha256) || created_at, ';') FROM transfers",
};
#define NKEPT (sizeof kept / sizeof kept[0])

/* The data of a store at schema 0005 (lives false) or at v0.1.0 (0008:
 * tenant lives, incarnations, exec outcomes), a day old. */
static char *old_data(bool lives)
{
	long long t = (long long)time(NULL) * 1000 - 86400000LL;
	const char *inc = lives ? ", incarnation" : "";
	const char *why_cols = lives ? ", incarnation, oom_killed, pids_limited, uncontained" : "";
	const char *why1 = lives ? ", 1, 0, 0, 0" : "";
	const char *why_json =
	    lives ? "\"oom_killed\":false,\"pids_limited\":false,\"uncontained\":false," : "";
	const char *policy =
	    "{\"backend\":\"bwrap\",\"timeout_max_s\":30,\"network\":\"none\",\"approval\":\"always\"}";
	char *lives_sql = lives ? xasprintf("INSERT INTO tenant_lives (id, name, slot, created_at) VALUES"
					    " (1, 'acme', 0, %lld), (2, 'ops', 1, %lld);",
					    t, t)
				: xstrdup("");
	char *sql = xasprintf(
	    "BEGIN;"
	    "%s"
	    "INSERT INTO tenants (name, alg, key, operator, slot, created_at, approver_alg, approver_key%s) "
	    "VALUES"
	    " ('acme', 'HS256', CAST('" ACME_SECRET "' AS BLOB), 0, 0, %lld, 'HS256',"
	    "  CAST('" APPROVER_SECRET "' AS BLOB)%s),"
	    " ('ops', 'HS256', CAST('" OPS_SECRET "' AS BLOB), 1, 1, %lld, NULL, NULL%s);"
	    "INSERT INTO policies VALUES ('acme', '{\"approval\":\"always\",\"timeout_max_s\":30}', %lld);"
	    "INSERT INTO sessions VALUES ('acme', CAST('s1' AS BLOB), 's1-3hoi1', %lld, %lld),"
	    " ('acme', CAST('bg' AS BLOB), 'bg-3ho3y', %lld, %lld);"
	    "INSERT INTO execs (tenant, id, session, command, cwd, request_hash, state, exit_code, result,"
	    " started_at, finished_at, exit_event_id, policy, requested_by%s) VALUES"
	    " ('acme', 'old-1', CAST('s1' AS BLOB), 'echo hi; echo err >&2; exit 3', "
	    "'/workspace/sessions/s1-3hoi1',"
	    "  '59bda81e0fd36d7796638a669b5177b15b71430499455ad860da13ad344a161c', 'exited', 3,"
	    "  "
	    "'{\"id\":\"old-1\",\"exit_code\":3,\"stdout\":\"hi\\n\",\"stderr\":\"err\\n\",\"timed_out\":"
	    "false,"
	    "\"idle\":false,\"cancelled\":false,\"truncated\":false,%s\"stdout_bytes\":3,\"stderr_bytes\":4,"
	    "\"stdout_spill\":null,\"stderr_spill\":null,\"started_at\":\"2026-01-01T00:00:00.100Z\","
	    "\"finished_at\":\"2026-01-01T00:00:00.184Z\",\"duration_ms\":84}',"
	    "  %lld, %lld, 2, '%s', NULL%s),"
	    " ('acme', 'bg-1', CAST('bg' AS BLOB), 'sleep 100', '/workspace/sessions/bg-3ho3y',"
	    "  '1111111111111111111111111111111111111111111111111111111111111111', 'running', NULL, NULL,"
	    "  %lld, NULL, NULL, '%s', 'gateway'%s),"
	    " ('acme', 'ap-1', CAST('s1' AS BLOB), 'echo need', '/workspace/sessions/s1-3hoi1',"
	    "  '2222222222222222222222222222222222222222222222222222222222222222', 'pending_approval', NULL, "
	    "NULL,"
	    "  %lld, NULL, NULL, '%s', 'gateway'%s);"
	    "INSERT INTO audit (id, at, tenant, session, request_id, method, route, target, status, outcome,"
	    " exit_code, bytes_in, bytes_out, duration_ms, client, sub%s) VALUES"
	    " (1, %lld, 'acme', CAST('s1' AS BLOB), 'old00000000000000000001', 'POST', '/exec',"
	    "  'echo hi; echo err >&2; exit 3', 200, 'ok', 3, 56, 360, 194.5, '127.0.0.1', NULL%s),"
	    " (2, %lld, 'acme', CAST('s1' AS BLOB), 'old00000000000000000002', 'GET', '/exec/{id}', NULL, "
	    "200, 'ok',"
	    "  NULL, 0, 1096, 2.5, '127.0.0.1', NULL%s),"
	    " (3, %lld, 'acme', CAST('bg' AS BLOB), 'old00000000000000000003', 'POST', '/exec', 'sleep 100', "
	    "202,"
	    "  'ok', NULL, 60, 170, 3.25, '127.0.0.1', 'gateway'%s),"
	    " (4, %lld, 'ops', NULL, 'old00000000000000000004', 'PUT', '/tenants/{name}/policy', 'acme', "
	    "200, 'ok',"
	    "  NULL, 40, 900, 1.5, '127.0.0.1', NULL%s),"
	    " (5, %lld, '', NULL, 'old00000000000000000005', 'GET', '/audit', NULL, 401, 'denied', NULL, 0, "
	    "120,"
	    "  0.25, '127.0.0.1', NULL%s);"
	    "INSERT INTO transfers VALUES "
	    "(X'00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff',"
	    " 'acme', CAST('s1' AS BLOB), '/workspace/sessions/s1-3hoi1/out.txt', 'read', 'done', 12,"
	    " 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', NULL, %lld, %lld, %lld, "
	    "%lld);"
	    "INSERT INTO store_probe VALUES (1, %lld);"
	    "COMMIT;",
	    lives_sql, inc, t, lives ? ", 1" : "", t, lives ? ", 2" : "", t + 250, t + 90, t + 190, t + 200,
	    t + 200, why_cols, why_json, t + 100, t + 184, policy, why1, t + 200, policy, why1, t + 300,
	    policy, why1, inc, t + 100, lives ? ", 1" : "", t + 190, lives ? ", 1" : "", t + 200,
	    lives ? ", 1" : "", t + 250, lives ? ", 2" : "", t + 260, lives ? ", NULL" : "", t + 270, t + 870,
	    t + 271, t + 272, t + 300);

	free(lives_sql);
	return sql;
}

static char **snapshot(const struct it_server *s)
{
	char **v = xcalloc(NKEPT, sizeof *v);

	for (size_t i = 0; i < NKEPT; i++)
		v[i] = db_text(s, kept[i]);
	return v;
}

static void expect_kept(const struct it_server *s, char **before)
{
	for (size_t i = 0; i < NKEPT; i++) {
		char *now = db_text(s, kept[i]);

		if (strcmp(now, before[i]) != 0)
			fail_msg("the upgrade changed old rows:\n%s\nbefore: %s\nafter:  %s", kept[i],
				 before[i], now);
		assert_true(before[i][0] != '\0');
		free(now);
		free(before[i]);
	}
	free(before);
}

/* ---- the binary ---- */

/* `sandboxd ARGS --data-dir DIR`: its stdout (caller frees), *st its status. */
static char *cli(struct it_server *s, int *st, const char *args)
{
	char *out = it_cli(s, st, args);

	assert_non_null(out);
	return out;
}

static void sha256_file(const char *path, char out[65])
{
	size_t len = 0;
	char *data = slurp(path, &len);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	assert_int_equal(EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL), 1);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	free(data);
}

static bool beside(const struct it_server *s, const char *suffix)
{
	char p[320];

	snprintf(p, sizeof p, "%s/sandboxd.db%s", s->dir, suffix);
	return access(p, F_OK) == 0;
}

/* `migrate --dry-run` on a store at version `at`: exactly the source
 * tree's migrations numbered above it, in order, exit 10 (0 with none);
 * the file byte for byte as it was, nothing created beside it. */
static void expect_dry_run(struct it_server *s, int at)
{
	struct mig m[256];
	size_t nm = source_migrations(m, 256), pending = 0;
	char sha0[65], sha1[65], head[128], *path = db_path(s);
	int st = -1;
	char *out;

	/* No server holds it: the dry run reads the file alone. */
	assert_false(beside(s, "-wal"));
	sha256_file(path, sha0);
	out = cli(s, &st, "migrate --dry-run");
	snprintf(head, sizeof head, ": schema version %d, this binary's %d\n", at, m[nm - 1].num);
	if (!strstr(out, head))
		fail_msg("dry run: want \"%s\" in:\n%s", head, out);
	for (size_t i = 0; i < nm; i++) {
		char *line = xasprintf("\n  %s\n", m[i].name);
		bool want = m[i].num > at;

		if (want != (strstr(out, line) != NULL))
			fail_msg("dry run at %d: %s should%s be listed:\n%s", at, m[i].name,
				 want ? "" : " not", out);
		free(line);
		pending += want;
	}
	assert_int_equal(st, pending ? 10 : 0);
	if (!pending)
		assert_non_null(strstr(out, "no migration pending"));
	sha256_file(path, sha1);
	assert_string_equal(sha0, sha1);
	assert_false(beside(s, "-wal"));
	assert_false(beside(s, "-shm"));
	assert_false(beside(s, "-journal"));
	free(out);
	free(path);
}

/* ---- after the upgrade ---- */

static json_t *get_ok(struct it_server *s, const char *path, const char *token)
{
	struct it_resp r;
	json_t *j;

	assert_int_equal(it_http(s, "GET", path, token, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	j = it_json(&r);
	assert_non_null(j);
	it_resp_free(&r);
	return j;
}

static const char *jstr(json_t *o, const char *key)
{
	const char *v = json_string_value(json_object_get(o, key));

	return v ? v : "";
}

/* The old tenants' keys sign tokens it accepts, the old policy holds,
 * and the old records read back. */
static void expect_served(struct it_server *s)
{
	char *acme = it_token_hs256(ACME_SECRET, NULL, "acme", "exec fs:read audit:read", "gateway");
	char *ops = it_token_hs256(OPS_SECRET, NULL, "ops", "admin", NULL);
	char *appr =
	    it_token_hs256(APPROVER_SECRET, AUTH_KID_APPROVER, "acme", "approve audit:read", "alice");
	struct it_resp r;
	json_t *j, *recs, *res;

	/* The finished command, its result whole. */
	j = get_ok(s, "/exec/old-1", acme);
	assert_string_equal(jstr(j, "state"), "exited");
	assert_string_equal(jstr(j, "command"), "echo hi; echo err >&2; exit 3");
	assert_string_equal(jstr(j, "session"), "s1");
	res = json_object_get(j, "result");
	assert_int_equal(json_integer_value(json_object_get(res, "exit_code")), 3);
	assert_string_equal(jstr(res, "stdout"), "hi\n");
	assert_string_equal(jstr(res, "stderr"), "err\n");
	assert_true(json_is_false(json_object_get(res, "oom_killed")));
	json_decref(j);
	/* The background command and the one waiting for approval outlived
	 * their server: lost, as after any restart. */
	j = get_ok(s, "/exec/bg-1", acme);
	assert_string_equal(jstr(j, "state"), "lost");
	json_decref(j);
	j = get_ok(s, "/exec/ap-1", appr);
	assert_string_equal(jstr(j, "state"), "lost");
	json_decref(j);

	/* The sessions. */
	j = get_ok(s, "/sessions", acme);
	recs = json_object_get(j, "sessions");
	assert_int_equal(json_array_size(recs), 2);
	for (size_t i = 0; i < 2; i++) {
		json_t *x = json_array_get(recs, i);
		char seg[48], dir[96];

		it_session_segment(jstr(x, "key"), seg, sizeof seg);
		snprintf(dir, sizeof dir, "/workspace/sessions/%s", seg);
		assert_string_equal(jstr(x, "dir"), dir);
	}
	json_decref(j);

	/* The audit records, in order, with their ids; the tenant reads only
	 * its own. */
	j = get_ok(s, "/audit?limit=3", acme);
	recs = json_object_get(j, "records");
	assert_int_equal(json_array_size(recs), 3);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(json_integer_value(json_object_get(json_array_get(recs, i), "id")),
				 (json_int_t)i + 1);
	assert_string_equal(jstr(json_array_get(recs, 0), "target"), "echo hi; echo err >&2; exit 3");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(recs, 0), "exit_code")), 3);
	assert_string_equal(jstr(json_array_get(recs, 0), "session"), "s1");
	json_decref(j);
	j = get_ok(s, "/audit?tenant=ops&limit=1", ops);
	recs = json_object_get(j, "records");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(recs, 0), "id")), 4);
	assert_string_equal(jstr(json_array_get(recs, 0), "route"), "/tenants/{name}/policy");
	json_decref(j);

	/* The policy: as set, and in force (a command waits for approval). */
	j = get_ok(s, "/tenants/acme/policy", ops);
	assert_string_equal(jstr(json_object_get(j, "overrides"), "approval"), "always");
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(j, "overrides"), "timeout_max_s")), 30);
	json_decref(j);
	static const char body[] = "{\"command\":\"echo after\",\"id\":\"new-1\",\"background\":true}";
	static const char *const hdr[] = {"Content-Type: application/json", "X-Session-Key: s1", NULL};
	assert_int_equal(it_http(s, "POST", "/exec", acme, hdr, body, strlen(body), &r), 0);
	it_expect_status(&r, 202);
	j = it_json(&r);
	assert_string_equal(jstr(j, "state"), "pending_approval");
	json_decref(j);
	it_resp_free(&r);
	/* A wrong key is still refused. */
	char *bad = it_token_hs256("not-acme-secret-0123456789abcdef-0123456789", NULL, "acme", NULL, NULL);
	it_expect_error_at(s, "GET", "/sessions", bad, 401, "unauthorized");
	free(bad);
	free(acme);
	free(ops);
	free(appr);
}

/* The file after the server stopped: whole, at this binary's version,
 * and the later migrations' columns filled in for the old rows. */
static void expect_upgraded_file(struct it_server *s, int known)
{
	char *t = db_text(s, "PRAGMA integrity_check");

	assert_string_equal(t, "ok");
	free(t);
	t = db_text(s, "SELECT count(*) FROM pragma_foreign_key_check");
	assert_string_equal(t, "0");
	free(t);
	assert_int_equal(db_int(s, "PRAGMA user_version"), known);
	/* Each living tenant is its own life, and its rows carry it. */
	assert_int_equal(db_int(s, "SELECT count(*) FROM tenant_lives WHERE removed_at IS NULL"), 2);
	assert_int_equal(
	    db_int(s, "SELECT count(*) FROM tenants t JOIN tenant_lives l ON l.id = t.incarnation AND "
		      "l.name = t.name AND l.slot = t.slot"),
	    2);
	assert_int_equal(
	    db_int(s, "SELECT count(*) FROM audit a JOIN tenants t ON t.name = a.tenant WHERE a.id <= 5 "
		      "AND a.incarnation IS NOT t.incarnation"),
	    0);
	assert_int_equal(db_int(s, "SELECT count(*) FROM execs e JOIN tenants t ON t.name = e.tenant WHERE "
				   "e.incarnation != t.incarnation"),
			 0);
	/* What the store holds for acme, counted as it holds it. */
	assert_int_equal(
	    db_int(s, "SELECT u.rows - (SELECT count(*) FROM execs WHERE tenant = 'acme') - (SELECT "
		      "count(*) FROM audit WHERE tenant = 'acme') FROM store_usage u JOIN tenants t ON "
		      "t.name = u.tenant AND t.incarnation = u.life WHERE u.tenant = 'acme'"),
	    0);
	assert_int_equal(
	    db_int(s, "SELECT count(*) FROM execs WHERE oom_killed OR pids_limited OR uncontained"), 0);
}

static int known_version(void)
{
	struct mig m[256];
	size_t n = source_migrations(m, 256);

	return m[n - 1].num;
}

/* ---- the scenarios ---- */

static void test_every_release_has_a_scenario(void **state)
{
	(void)state;
	char last[32] = "";
	size_t n = sizeof scenario_releases / sizeof scenario_releases[0];

	released_count(scenario_releases[n - 1], last, sizeof last);
	if (strcmp(last, scenario_releases[n - 1]) != 0)
		fail_msg("migrations/RELEASED names release %s, which this suite has no scenario for: add "
			 "one (its "
			 "data written in its schema) to test_upgrade.c",
			 last);
}

/* A store of the first nmig source migrations holding old_data(lives),
 * upgraded in place by `migrate` (with_migrate) and then `serve`, or by
 * `serve`'s start alone; served, stopped, and the file read. */
static void upgrade(size_t nmig, bool lives, bool with_migrate)
{
	struct it_server s;
	struct mig m[256];
	int known = known_version(), at;
	char *data = old_data(lives), **before;

	source_migrations(m, 256);
	at = m[nmig - 1].num;
	make_store(&s, nmig, data);
	free(data);
	before = snapshot(&s);
	expect_dry_run(&s, at);
	if (with_migrate) {
		int st = -1;
		char *out = cli(&s, &st, "migrate");

		assert_int_equal(st, 0);
		assert_non_null(strstr(out, at == known ? "(current)" : "migrated from schema version"));
		free(out);
		expect_dry_run(&s, known);
	}
	assert_int_equal(it_restart(&s, NULL), 0);
	expect_served(&s);
	assert_int_equal(it_stop(&s, SIGTERM), 0);
	expect_kept(&s, before);
	expect_upgraded_file(&s, known);
	it_cleanup(&s);
}

static void test_from_previous_release(void **state)
{
	(void)state;
	char last[32];
	size_t n = released_count("v0.1.0", last, sizeof last);

	assert_int_equal(n, 8);
	upgrade(n, true, true);
}

/* A build between releases, before tenant lives (0006): serve migrates. */
static void test_from_0005(void **state)
{
	(void)state;
	struct mig m[256];

	source_migrations(m, 256);
	assert_string_equal(m[4].name, "0005_approver_key.sql");
	upgrade(5, false, false);
}

static void test_newer_refused(void **state)
{
	(void)state;
	struct it_server s;
	struct mig m[256];
	size_t nm = source_migrations(m, 256);
	int known = m[nm - 1].num, st = -1;
	char *sql = xasprintf("CREATE TABLE from_the_future (x); PRAGMA user_version = %d", known + 1);
	char sha0[65], sha1[65], want[128], *path, *log;

	make_store(&s, nm, sql);
	free(sql);
	path = db_path(&s);
	sha256_file(path, sha0);
	snprintf(want, sizeof want, "database schema version %d is newer than this binary (%d)", known + 1,
		 known);
	free(cli(&s, &st, "migrate --dry-run"));
	assert_int_equal(st, 11);
	free(cli(&s, &st, "migrate"));
	assert_int_equal(st, 11);
	assert_int_equal(it_restart(&s, NULL), -1);
	log = slurp(s.log, NULL);
	/* Said three times: dry run, migrate, serve. */
	char *p = log;
	for (int i = 0; i < 3; i++) {
		p = strstr(p, want);
		if (!p)
			fail_msg("want %d times \"%s\" in:\n%s", 3, want, log);
		p++;
	}
	free(log);
	sha256_file(path, sha1);
	assert_string_equal(sha0, sha1);
	assert_false(beside(&s, "-wal"));
	assert_false(beside(&s, "-journal"));
	assert_int_equal(db_int(&s, "PRAGMA user_version"), known + 1);
	free(path);
	it_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_release_has_a_scenario),
	    cmocka_unit_test(test_from_previous_release),
	    cmocka_unit_test(test_from_0005),
	    cmocka_unit_test(test_newer_refused),
	};
	return cmocka_run_group_tests_name("upgrade", tests, NULL, NULL);
}
