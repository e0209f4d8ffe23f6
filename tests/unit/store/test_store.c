/* Unit tests of store/: a real SQLite file in a temporary directory. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "common/buf.h"
#include "common/embedded.h"
#include "common/errors.h"
#include "store/store.h"
#include "store/db.h"
#include "store/store.h"
#include "unit.h"

struct fx {
	char dir[64];
	char path[128];
	struct store *s;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);

	if (unit_tmpdir(f->dir, sizeof f->dir, "store")) {
		free(f);
		return -1;
	}
	snprintf(f->path, sizeof f->path, "%s/sandboxd.db", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char p[160];

	store_close(&f->s);
	unlink(f->path);
	snprintf(p, sizeof p, "%s-wal", f->path);
	unlink(p);
	snprintf(p, sizeof p, "%s-shm", f->path);
	unlink(p);
	rmdir(f->dir);
	free(f);
	return 0;
}

static struct store *open_ok(struct fx *f)
{
	char err[256];
	int r = store_open(&f->s, f->path, true, err, sizeof err);

	if (r)
		fail_msg("store_open: %d %s", r, err);
	return f->s;
}

static void reopen(struct fx *f)
{
	store_close(&f->s);
	assert_null(f->s);
	open_ok(f);
}

/* Run one SQL statement on a private connection; returns the first column
 * of the first row as an int64 (or -1). */
static int64_t raw_int(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int64_t v = -1;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

static void raw_exec(const char *path, const char *sql)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

static void add_tenant(struct store *s, const char *name, int64_t *slot)
{
	struct store_tenant t = {.alg = "HS256", .key = (unsigned char *)"secret", .key_len = 6};

	snprintf(t.name, sizeof t.name, "%s", name);
	assert_int_equal(store_tenant_add(s, &t, -1), 0);
	if (slot)
		*slot = t.slot;
}

/* ---- open and migrations ---- */

static void test_fresh_migrate(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;

	assert_true(store_known_version() >= 1);
	assert_int_equal(store_schema_version(s), store_known_version());
	assert_int_equal(raw_int(f->path, "PRAGMA user_version"), store_known_version());
	assert_int_equal(store_check_writable(s, NULL, 0), 0);

	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
	sqlite3_finalize(st);
	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
	sqlite3_finalize(st);
	sqlite3_close(db);
}

static void test_migrate_rerun_noop(void **state)
{
	struct fx *f = *state;
	char err[256] = "";
	int from = -1, to = -1;

	open_ok(f);
	add_tenant(f->s, "alice", NULL);
	store_close(&f->s);
	/* Up to date: opening without migrate is fine. */
	assert_int_equal(store_open(&f->s, f->path, false, err, sizeof err), 0);
	assert_int_equal(store_migrate(f->s, &from, &to), 0);
	assert_int_equal(from, store_known_version());
	assert_int_equal(to, store_known_version());
	store_close(&f->s);
	open_ok(f);
	assert_int_equal(store_schema_version(f->s), store_known_version());
	/* Data survived: nothing was re-created. */
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM tenants"), 1);
}

static void test_newer_refused(void **state)
{
	struct fx *f = *state;
	struct store *sentinel = (struct store *)0x1;
	char err[512] = "";
	char want[256];

	open_ok(f);
	store_close(&f->s);
	raw_exec(f->path, "PRAGMA user_version = 999");
	f->s = sentinel;
	assert_int_equal(store_open(&f->s, f->path, true, err, sizeof err), -EPROTO);
	assert_ptr_equal(f->s, sentinel);
	snprintf(want, sizeof want,
		 "database schema version 999 is newer than this binary (%d): a newer sandboxd wrote it, "
		 "and downgrades are refused; run that sandboxd, or restore the backup taken before its "
		 "upgrade",
		 store_known_version());
	assert_string_equal(err, want);
	assert_int_equal(store_open(&f->s, f->path, false, err, sizeof err), -EPROTO);
	assert_ptr_equal(f->s, sentinel);
	f->s = NULL;
	/* Refusing must not have touched the version. */
	assert_int_equal(raw_int(f->path, "PRAGMA user_version"), 999);
}

static int put_file(const char *path, const char *data, size_t len)
{
	FILE *fp = fopen(path, "w");
	size_t n = fp ? fwrite(data, 1, len, fp) : 0;

	if (!fp || fclose(fp) != 0 || n != len)
		return -1;
	return 0;
}

/* The whole file at path (caller frees), NULL when missing. */
static char *slurp(const char *path, size_t *len)
{
	struct buf b;

	buf_init(&b, 1u << 26);
	if (buf_read_file(&b, path) < 0) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b, len);
}

static bool exists_beside(const char *path, const char *suffix)
{
	char p[300];

	snprintf(p, sizeof p, "%s%s", path, suffix);
	return access(p, F_OK) == 0;
}

/* A newer store is refused before anything writes to it: one in rollback
 * journal mode (a mode a later release might choose) stays byte for byte
 * what it was, where setting WAL first rewrote its header. */
static void test_newer_untouched(void **state)
{
	struct fx *f = *state;
	char err[512] = "";
	size_t n0 = 0, n1 = 0;
	char *before, *after;

	open_ok(f);
	store_close(&f->s);
	raw_exec(f->path, "PRAGMA journal_mode = DELETE; CREATE TABLE future (x); PRAGMA user_version = 999");
	before = slurp(f->path, &n0);
	assert_non_null(before);
	assert_int_equal(store_open(&f->s, f->path, true, err, sizeof err), -EPROTO);
	assert_null(f->s);
	after = slurp(f->path, &n1);
	assert_non_null(after);
	assert_int_equal(n0, n1);
	assert_memory_equal(before, after, n0);
	assert_false(exists_beside(f->path, "-wal"));
	assert_false(exists_beside(f->path, "-journal"));
	free(before);
	free(after);
}

/* store_peek_version on path: its return, and the file unchanged, with
 * no -wal, -shm or -journal made beside it. */
static int peek_untouched(const char *path, int *v, char *err, size_t errsz)
{
	size_t n0 = 0, n1 = 0;
	char *before = slurp(path, &n0);
	bool wal = exists_beside(path, "-wal"), shm = exists_beside(path, "-shm");
	int r = store_peek_version(path, v, err, errsz);
	char *after = slurp(path, &n1);

	assert_int_equal(!before, !after);
	if (before) {
		assert_int_equal(n0, n1);
		assert_memory_equal(before, after, n0);
	}
	assert_int_equal(exists_beside(path, "-wal"), wal);
	assert_int_equal(exists_beside(path, "-shm"), shm);
	assert_false(exists_beside(path, "-journal"));
	free(before);
	free(after);
	return r;
}

static void test_peek_version(void **state)
{
	struct fx *f = *state;
	char err[512] = "", odd[200], want[64];
	int v = -1;

	assert_int_equal(peek_untouched(f->path, &v, err, sizeof err), -ENOENT);
	/* What srv_prepare_data_dir leaves before SQLite writes: version 0. */
	assert_int_equal(put_file(f->path, "", 0), 0);
	assert_int_equal(peek_untouched(f->path, &v, err, sizeof err), 0);
	assert_int_equal(v, 0);
	assert_int_equal(put_file(f->path, "not a database, but long enough to look for a header", 52), 0);
	assert_int_equal(peek_untouched(f->path, &v, err, sizeof err), -SBX_E_STORE);
	assert_non_null(strstr(err, "schema version"));
	unlink(f->path);

	open_ok(f);
	store_close(&f->s);
	assert_int_equal(peek_untouched(f->path, &v, err, sizeof err), 0);
	assert_int_equal(v, store_known_version());
	raw_exec(f->path, "PRAGMA user_version = 5");
	assert_int_equal(peek_untouched(f->path, &v, err, sizeof err), 0);
	assert_int_equal(v, 5);
	raw_exec(f->path, "PRAGMA user_version = 999");
	v = -1;
	assert_int_equal(peek_untouched(f->path, &v, err, sizeof err), -EPROTO);
	assert_int_equal(v, 999);
	snprintf(want, sizeof want, "version 999 is newer than this binary (%d)", store_known_version());
	assert_non_null(strstr(err, want));

	/* A store a server holds: the latest commit is in its WAL, not yet in
	 * the file (whose header says the known version), and is what counts. */
	unlink(f->path);
	open_ok(f);
	raw_exec(f->path, "PRAGMA user_version = 999");
	assert_true(exists_beside(f->path, "-wal"));
	v = -1;
	assert_int_equal(store_peek_version(f->path, &v, err, sizeof err), -EPROTO);
	assert_int_equal(v, 999);
	store_close(&f->s);

	/* A file name that a URI would misread. */
	snprintf(odd, sizeof odd, "%s/a?b#c%%41.db", f->dir);
	raw_exec(odd, "PRAGMA user_version = 3");
	assert_int_equal(peek_untouched(odd, &v, err, sizeof err), 0);
	assert_int_equal(v, 3);
	unlink(odd);
}

/* store_opened_version: what the file was before the migrations of this
 * open (migrate names them). */
static void test_opened_version(void **state)
{
	struct fx *f = *state;

	sqlite3 *db = NULL;

	open_ok(f);
	assert_int_equal(store_opened_version(f->s), 0);
	store_close(&f->s);
	unlink(f->path);
	/* A store of the schema up to migration 5, as an older release left it. */
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(sqlite3_exec(db, embedded_migrations[i].data, NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 5", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	open_ok(f);
	assert_int_equal(store_opened_version(f->s), 5);
	assert_int_equal(store_schema_version(f->s), store_known_version());
	reopen(f);
	assert_int_equal(store_opened_version(f->s), store_known_version());
}

static void test_fresh_without_migrate(void **state)
{
	struct fx *f = *state;
	char err[256] = "";

	assert_int_equal(store_open(&f->s, f->path, false, err, sizeof err), -ESTALE);
	assert_null(f->s);
	assert_non_null(strstr(err, "sandboxd migrate"));
}

static void test_behind_without_migrate(void **state)
{
	struct fx *f = *state;
	char err[256] = "";

	open_ok(f);
	store_close(&f->s);
	raw_exec(f->path, "PRAGMA user_version = 0");
	assert_int_equal(store_open(&f->s, f->path, false, err, sizeof err), -ESTALE);
	assert_null(f->s);
	assert_non_null(strstr(err, "sandboxd migrate"));
}

static void test_close_null(void **state)
{
	struct store *s = NULL;

	store_close(NULL);
	store_close(&s);
	assert_null(s);
}

/* ---- tenants ---- */

static void test_tenants(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_tenant t = {.name = "bob", .alg = "ES256", .operator_tenant = true};
	struct store_tenant g, *list = NULL;
	static const unsigned char pem[] = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n";
	int64_t slot;
	size_t n = 0;

	t.key = (unsigned char *)pem;
	t.key_len = sizeof pem - 1;
	assert_int_equal(store_tenant_add(s, &t, -1), 0);
	assert_int_equal(t.slot, 0);
	assert_true(t.created_at > 0);
	add_tenant(s, "alice", &slot);
	assert_int_equal(slot, 1);
	add_tenant(s, "carol", &slot);
	assert_int_equal(slot, 2);

	/* Duplicate name. */
	t.key = (unsigned char *)"x";
	t.key_len = 1;
	assert_int_equal(store_tenant_add(s, &t, -1), -EEXIST);
	/* An algorithm outside the schema. */
	snprintf(t.name, sizeof t.name, "dave");
	snprintf(t.alg, sizeof t.alg, "none");
	assert_int_equal(store_tenant_add(s, &t, -1), -EINVAL);

	assert_int_equal(store_tenant_get(s, "bob", &g), 0);
	assert_string_equal(g.name, "bob");
	assert_string_equal(g.alg, "ES256");
	assert_true(g.operator_tenant);
	assert_int_equal(g.slot, 0);
	assert_int_equal(g.key_len, sizeof pem - 1);
	assert_memory_equal(g.key, pem, sizeof pem - 1);
	store_tenant_clear(&g);
	assert_null(g.key);
	assert_int_equal(store_tenant_get(s, "nobody", &g), -ENOENT);

	assert_int_equal(store_tenant_list(s, &list, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(list[0].name, "alice");
	assert_string_equal(list[1].name, "bob");
	assert_string_equal(list[2].name, "carol");
	assert_false(list[0].operator_tenant);
	store_tenants_free(list, n);

	/* A removed tenant's slot is not given again (its files and
	 * processes were that uid's): the next tenant takes the lowest slot
	 * no life ever held. */
	int64_t life = 0, last_slot = -1, last_life = 0;
	assert_int_equal(store_tenant_remove(s, "alice", &life), 0);
	assert_true(life > 0);
	assert_int_equal(store_tenant_remove(s, "alice", NULL), -ENOENT);
	add_tenant(s, "erin", &slot);
	assert_int_equal(slot, 3);
	add_tenant(s, "frank", &slot);
	assert_int_equal(slot, 4);
	assert_int_equal(store_tenant_remove(s, "bob", NULL), 0);
	add_tenant(s, "gina", &slot);
	assert_int_equal(slot, 5);
	/* alice again is another life; asked to, it takes its old slot back. */
	assert_int_equal(store_tenant_last_life(s, "alice", &last_slot, &last_life), 0);
	assert_int_equal(last_slot, 1);
	assert_int_equal(last_life, life);
	struct store_tenant again = {
	    .name = "alice", .alg = "HS256", .key = (unsigned char *)"k", .key_len = 1};
	assert_int_equal(store_tenant_add(s, &again, last_slot), 0);
	assert_int_equal(again.slot, 1);
	assert_true(again.incarnation > life);
	struct store_tenant other = {
	    .name = "hal", .alg = "HS256", .key = (unsigned char *)"k", .key_len = 1};
	assert_int_equal(store_tenant_add(s, &other, 1), -EBUSY);
}

static void fake_seg(const char *key, size_t len, unsigned salt, char *out);

/* A transfer of alice's to mint; token_hash is left zero. */
static struct store_transfer mk_transfer(const char *session, const char *path, const char *direction,
					 int64_t created_at, int64_t expires_at)
{
	struct store_transfer t = {.tenant = "alice",
				   .session = (char *)session,
				   .session_len = strlen(session),
				   .path = (char *)path,
				   .created_at = created_at,
				   .expires_at = expires_at};

	snprintf(t.direction, sizeof t.direction, "%s", direction);
	return t;
}

static void test_tenant_remove_cascades(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_exec e = {.tenant = "alice",
			       .id = "x1",
			       .session = "k",
			       .session_len = 1,
			       .command = "true",
			       .cwd = "/",
			       .request_hash = "h",
			       .started_at = 1};
	struct store_transfer t = mk_transfer("k", "a", "read", 1, 100);
	char seg[64];

	add_tenant(s, "alice", NULL);
	assert_int_equal(store_session_get_or_create(s, "alice", "k", 1, fake_seg, 1, seg, NULL), 0);
	assert_int_equal(store_exec_begin(s, &e), 0);
	memset(t.token_hash, 7, 32);
	assert_int_equal(store_transfer_mint(s, &t), 0);
	assert_int_equal(store_tenant_remove(s, "alice", NULL), 0);
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM sessions"), 0);
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM execs"), 0);
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM transfers"), 0);
	/* Unknown tenant: the foreign key refuses. */
	assert_int_equal(store_exec_begin(s, &e), -ENOENT);
}

/* ---- sessions ---- */

/* Collides on salt 0 for every key; distinct after that. */
static void fake_seg(const char *key, size_t len, unsigned salt, char *out)
{
	if (salt == 0)
		snprintf(out, 64, "same");
	else
		snprintf(out, 64, "same-%u", salt);
}

static void hex_seg(const char *key, size_t len, unsigned salt, char *out)
{
	unsigned h = 2166136261u ^ salt;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)key[i]) * 16777619u;
	snprintf(out, 64, "s%08x", h);
}

static void test_sessions(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_session *v = NULL;
	char seg1[64], seg2[64], seg3[64], segx[64];
	bool created = false;
	size_t n = 0;

	add_tenant(s, "alice", NULL);
	add_tenant(s, "bob", NULL);
	assert_int_equal(store_session_get_or_create(s, "alice", "k1", 2, fake_seg, 1000, seg1, &created), 0);
	assert_true(created);
	assert_string_equal(seg1, "same");
	assert_int_equal(store_session_get_or_create(s, "alice", "k1", 2, fake_seg, 2000, segx, &created), 0);
	assert_false(created);
	assert_string_equal(segx, seg1);

	/* Two more keys whose first segment collides: salts 1 then 2. */
	assert_int_equal(store_session_get_or_create(s, "alice", "k2", 2, fake_seg, 3000, seg2, &created), 0);
	assert_true(created);
	assert_string_equal(seg2, "same-1");
	assert_int_equal(store_session_get_or_create(s, "alice", "k3", 2, fake_seg, 4000, seg3, &created), 0);
	assert_string_equal(seg3, "same-2");
	/* Another tenant's segments do not collide with alice's. */
	assert_int_equal(store_session_get_or_create(s, "bob", "k2", 2, fake_seg, 3000, segx, &created), 0);
	assert_string_equal(segx, "same");

	/* Keys are blobs: embedded NUL and prefixes are distinct keys. */
	assert_int_equal(store_session_get_or_create(s, "alice", "k1\0z", 4, hex_seg, 5000, segx, &created),
			 0);
	assert_true(created);
	assert_int_equal(store_session_get_or_create(s, "alice", "k", 1, hex_seg, 6000, segx, &created), 0);
	assert_true(created);
	/* Unknown tenant. */
	assert_int_equal(store_session_get_or_create(s, "nobody", "k", 1, hex_seg, 6000, segx, &created),
			 -ENOENT);

	/* last_used_at moves only when a minute old. */
	assert_int_equal(store_session_get_or_create(s, "alice", "k1", 2, fake_seg, 1000 + 59999, segx, NULL),
			 0);
	assert_int_equal(
	    raw_int(f->path, "SELECT last_used_at FROM sessions WHERE tenant='alice' AND key=X'6B31'"), 1000);
	assert_int_equal(store_session_get_or_create(s, "alice", "k1", 2, fake_seg, 1000 + 60000, segx, NULL),
			 0);
	assert_int_equal(
	    raw_int(f->path, "SELECT last_used_at FROM sessions WHERE tenant='alice' AND key=X'6B31'"),
	    61000);
	assert_int_equal(
	    raw_int(f->path, "SELECT created_at FROM sessions WHERE tenant='alice' AND key=X'6B31'"), 1000);

	/* Most recently used first. */
	assert_int_equal(store_session_list(s, "alice", 0, &v, &n), 0);
	assert_int_equal(n, 5);
	assert_int_equal(v[0].key_len, 2);
	assert_memory_equal(v[0].key, "k1", 2);
	assert_int_equal(v[0].last_used_at, 61000);
	assert_int_equal(v[1].key_len, 1);
	assert_int_equal(v[2].key_len, 4);
	assert_memory_equal(v[2].key, "k1\0z", 4);
	assert_string_equal(v[3].segment, "same-2");
	assert_string_equal(v[4].segment, "same-1");
	store_sessions_free(v, n);
	assert_int_equal(store_session_list(s, "alice", 2, &v, &n), 0);
	assert_int_equal(n, 2);
	store_sessions_free(v, n);

	assert_int_equal(store_session_delete(s, "alice", "k2", 2, segx), 0);
	assert_string_equal(segx, "same-1");
	assert_int_equal(store_session_delete(s, "alice", "k2", 2, segx), -ENOENT);
	/* The freed segment is available again. */
	assert_int_equal(store_session_get_or_create(s, "alice", "k4", 2, fake_seg, 7000, segx, &created), 0);
	assert_string_equal(segx, "same-1");
	assert_int_equal(store_session_list(s, "bob", 0, &v, &n), 0);
	assert_int_equal(n, 1);
	store_sessions_free(v, n);
}

struct sess_race {
	struct store *s;
	pthread_barrier_t *bar;
	char seg[64];
	int created;
	int rc;
};

static void *sess_race_main(void *arg)
{
	struct sess_race *r = arg;
	bool created = false;

	pthread_barrier_wait(r->bar);
	r->rc = store_session_get_or_create(r->s, "alice", "racy", 4, hex_seg, 1000, r->seg, &created);
	r->created = created;
	return NULL;
}

static void test_session_race(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct sess_race rs[8];
	pthread_t th[8];
	pthread_barrier_t bar;
	int created = 0;

	add_tenant(s, "alice", NULL);
	pthread_barrier_init(&bar, NULL, 8);
	for (int i = 0; i < 8; i++) {
		rs[i] = (struct sess_race){.s = s, .bar = &bar};
		pthread_create(&th[i], NULL, sess_race_main, &rs[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(rs[i].rc, 0);
		assert_string_equal(rs[i].seg, rs[0].seg);
		created += rs[i].created;
	}
	pthread_barrier_destroy(&bar);
	assert_int_equal(created, 1);
}

/* ---- execs ---- */

static struct store_exec mk_exec(const char *tenant, const char *id, const char *session, int64_t at)
{
	struct store_exec e = {
	    .command = "echo hi", .cwd = "/work", .request_hash = "abc123", .started_at = at};

	snprintf(e.tenant, sizeof e.tenant, "%s", tenant);
	snprintf(e.id, sizeof e.id, "%s", id);
	e.session = (char *)session;
	e.session_len = strlen(session);
	return e;
}

static void test_execs(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_exec e, g, *v = NULL;
	size_t n = 0;

	add_tenant(s, "alice", NULL);
	add_tenant(s, "bob", NULL);
	e = mk_exec("alice", "e1", "s1", 100);
	assert_int_equal(store_exec_begin(s, &e), 0);
	assert_int_equal(store_exec_begin(s, &e), -EEXIST);
	e = mk_exec("alice", "e2", "s2", 200);
	assert_int_equal(store_exec_begin(s, &e), 0);
	e = mk_exec("alice", "e3", "s1", 300);
	assert_int_equal(store_exec_begin(s, &e), 0);
	/* The same id under another tenant is another exec. */
	e = mk_exec("bob", "e1", "s1", 400);
	assert_int_equal(store_exec_begin(s, &e), 0);

	assert_int_equal(store_exec_get(s, "alice", "e1", &g), 0);
	assert_int_equal(g.state, EXEC_RUNNING);
	assert_false(g.has_exit_code);
	assert_null(g.result);
	assert_int_equal(g.finished_at, 0);
	assert_int_equal(g.session_len, 2);
	assert_memory_equal(g.session, "s1", 2);
	assert_string_equal(g.command, "echo hi");
	assert_string_equal(g.cwd, "/work");
	assert_string_equal(g.request_hash, "abc123");
	assert_int_equal(g.started_at, 100);
	store_exec_clear(&g);
	assert_int_equal(store_exec_get(s, "alice", "nope", &g), -ENOENT);

	assert_int_equal(
	    store_exec_finish(s, "alice", "e1", EXEC_EXITED, 3, "{\"exit_code\":3}", 150, 9, NULL), 0);
	assert_int_equal(store_exec_finish(s, "alice", "nope", EXEC_EXITED, 0, NULL, 150, 0, NULL), -ENOENT);
	const struct store_exec_why oom = {.oom_killed = true, .uncontained = true}; /* e2 */
	assert_int_equal(store_exec_finish(s, "alice", "e2", EXEC_CANCELLED, -1, NULL, 250, 0, &oom), 0);
	assert_int_equal(store_exec_get(s, "alice", "e1", &g), 0);
	/* Why each ended: its own columns, none for a NULL why. */
	assert_false(g.why.oom_killed || g.why.pids_limited || g.why.uncontained);
	assert_int_equal(g.state, EXEC_EXITED);
	assert_true(g.has_exit_code);
	assert_int_equal(g.exit_code, 3);
	assert_string_equal(g.result, "{\"exit_code\":3}");
	assert_int_equal(g.finished_at, 150);
	assert_int_equal(g.exit_event_id, 9);
	store_exec_clear(&g);
	assert_int_equal(store_exec_get(s, "alice", "e2", &g), 0);
	assert_false(g.has_exit_code);
	assert_true(g.why.oom_killed && g.why.uncontained && !g.why.pids_limited);
	store_exec_clear(&g);

	/* Newest first, no filter. */
	assert_int_equal(store_exec_list(s, "alice", NULL, NULL, 0, 0, true, &v, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(v[0].id, "e3");
	assert_true(v[1].why.oom_killed && v[1].why.uncontained && !v[1].why.pids_limited); /* the list too */
	assert_string_equal(v[1].id, "e2");
	assert_string_equal(v[2].id, "e1");
	assert_string_equal(v[2].result, "{\"exit_code\":3}");
	store_execs_free(v, n);
	/* Without results. */
	assert_int_equal(store_exec_list(s, "alice", NULL, NULL, 0, 0, false, &v, &n), 0);
	assert_int_equal(n, 3);
	assert_null(v[2].result);
	store_execs_free(v, n);
	/* By state. */
	assert_int_equal(
	    store_exec_list(s, "alice", &(enum store_exec_state){EXEC_RUNNING}, NULL, 0, 0, false, &v, &n),
	    0);
	assert_int_equal(n, 1);
	assert_string_equal(v[0].id, "e3");
	store_execs_free(v, n);
	/* By session, with a limit. */
	assert_int_equal(store_exec_list(s, "alice", NULL, "s1", 2, 0, false, &v, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(v[0].id, "e3");
	assert_string_equal(v[1].id, "e1");
	store_execs_free(v, n);
	assert_int_equal(store_exec_list(s, "alice", NULL, "s1", 2, 1, false, &v, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(v[0].id, "e3");
	store_execs_free(v, n);
	assert_int_equal(
	    store_exec_list(s, "alice", &(enum store_exec_state){EXEC_EXITED}, "s2", 2, 0, false, &v, &n), 0);
	assert_int_equal(n, 0);
	store_execs_free(v, n);
	assert_int_equal(store_exec_list(s, "bob", NULL, NULL, 0, 0, false, &v, &n), 0);
	assert_int_equal(n, 1);
	store_execs_free(v, n);
}

/* The state names, both ways, are the wire's. */
static void test_exec_state_names(void **state)
{
	(void)state;
	static const char *const names[] = {"running",	 "pending_approval", "exited", "timed_out",
					    "cancelled", "rejected",	     "lost"};
	enum store_exec_state st;
	for (int i = 0; i < EXEC_STATES; i++) {
		assert_string_equal(store_exec_state_name((enum store_exec_state)i), names[i]);
		assert_int_equal(store_exec_state_parse(names[i], &st), 0);
		assert_int_equal(st, i);
	}
	assert_int_equal(store_exec_state_parse("Running", &st), -EINVAL);
	assert_int_equal(store_exec_state_parse("", &st), -EINVAL);
	assert_int_equal(store_exec_state_parse(NULL, &st), -EINVAL);
	assert_string_equal(store_exec_state_name((enum store_exec_state)99), "lost");
	assert_true(store_exec_state_live(EXEC_RUNNING) && store_exec_state_live(EXEC_PENDING_APPROVAL));
	assert_false(store_exec_state_live(EXEC_EXITED) || store_exec_state_live(EXEC_LOST));
}

/* One statement per read: a tenant without overrides reads as none (no
 * second look-up), a missing tenant as -ENOENT. */
static void test_policies(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	char *text = NULL;
	int64_t at = -1;

	add_tenant(s, "alice", NULL);
	assert_int_equal(store_policy_get(s, "nobody", &text, &at), -ENOENT);
	assert_null(text);
	assert_int_equal(store_policy_get(s, "alice", &text, &at), 0);
	assert_null(text);
	assert_int_equal(at, 0);
	assert_int_equal(store_policy_replace(s, "alice", NULL, "{\"max_execs\":3}", 42), 0);
	assert_int_equal(store_policy_replace(s, "alice", NULL, "{}", 43), -EAGAIN);
	assert_int_equal(store_policy_get(s, "alice", &text, &at), 0);
	assert_string_equal(text, "{\"max_execs\":3}");
	assert_int_equal(at, 42);
	free(text);
	text = NULL;
	assert_int_equal(store_policy_replace(s, "nobody", NULL, "{}", 44), -ENOENT);
	assert_int_equal(store_policy_get(s, "nobody", &text, &at), -ENOENT);
}

static void test_recover(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_exec e, g;
	struct store_transfer t = mk_transfer("s", "f", "write", 1, 0);
	struct store_transfer got;
	int lost = -1, failed = -1;
	int64_t far = INT64_C(1) << 50;

	add_tenant(s, "alice", NULL);
	e = mk_exec("alice", "run", "s", 1);
	assert_int_equal(store_exec_begin(s, &e), 0);
	e = mk_exec("alice", "done", "s", 2);
	assert_int_equal(store_exec_begin(s, &e), 0);
	assert_int_equal(store_exec_finish(s, "alice", "done", EXEC_EXITED, 0, "{}", 3, 2, NULL), 0);
	/* One active, one minted and expired, one minted and valid. */
	t.expires_at = far;
	memset(t.token_hash, 1, 32);
	assert_int_equal(store_transfer_mint(s, &t), 0);
	assert_int_equal(store_transfer_claim(s, t.token_hash, 10, NULL), 0);
	memset(t.token_hash, 2, 32);
	t.expires_at = 5;
	assert_int_equal(store_transfer_mint(s, &t), 0);
	memset(t.token_hash, 3, 32);
	t.expires_at = far;
	assert_int_equal(store_transfer_mint(s, &t), 0);

	reopen(f);
	s = f->s;
	assert_int_equal(store_recover(s, &lost, &failed), 0);
	assert_int_equal(lost, 1);
	assert_int_equal(failed, 1);
	assert_int_equal(store_exec_get(s, "alice", "run", &g), 0);
	assert_int_equal(g.state, EXEC_LOST);
	assert_true(g.finished_at > 0);
	store_exec_clear(&g);
	assert_int_equal(store_exec_get(s, "alice", "done", &g), 0);
	assert_int_equal(g.state, EXEC_EXITED);
	store_exec_clear(&g);
	memset(t.token_hash, 1, 32);
	assert_int_equal(store_transfer_get(s, t.token_hash, &got), 0);
	assert_string_equal(got.state, "failed");
	assert_non_null(got.error);
	store_transfer_clear(&got);
	memset(t.token_hash, 2, 32);
	assert_int_equal(store_transfer_get(s, t.token_hash, &got), 0);
	assert_string_equal(got.state, "expired");
	store_transfer_clear(&got);
	memset(t.token_hash, 3, 32);
	assert_int_equal(store_transfer_get(s, t.token_hash, &got), 0);
	assert_string_equal(got.state, "minted");
	store_transfer_clear(&got);
	/* A second run finds nothing to do. */
	assert_int_equal(store_recover(s, &lost, &failed), 0);
	assert_int_equal(lost, 0);
	assert_int_equal(failed, 0);
}

/* ---- transfers ---- */

static void test_transfers(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_transfer t = mk_transfer("sess", "dir/a.txt", "read", 1000, 2000);
	struct store_transfer c, g;
	unsigned char unknown[32];

	add_tenant(s, "alice", NULL);
	memset(t.token_hash, 0xab, 32);
	assert_int_equal(store_transfer_mint(s, &t), 0);
	assert_int_equal(store_transfer_mint(s, &t), -EEXIST);

	assert_int_equal(store_transfer_claim(s, t.token_hash, 1500, &c), 0);
	assert_string_equal(c.state, "active");
	assert_string_equal(c.tenant, "alice");
	assert_string_equal(c.path, "dir/a.txt");
	assert_string_equal(c.direction, "read");
	assert_int_equal(c.session_len, 4);
	assert_memory_equal(c.session, "sess", 4);
	assert_memory_equal(c.token_hash, t.token_hash, 32);
	assert_int_equal(c.started_at, 1500);
	assert_int_equal(c.expires_at, 2000);
	assert_string_equal(c.sha256, "");
	store_transfer_clear(&c);
	assert_int_equal(store_transfer_claim(s, t.token_hash, 1600, &c), -SBX_E_TOKEN_USED);
	/* Used beats expired: the token was spent before it ran out. */
	assert_int_equal(store_transfer_claim(s, t.token_hash, 5000, &c), -SBX_E_TOKEN_USED);

	assert_int_equal(store_transfer_finish(
			     s, t.token_hash, "done", 42,
			     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", NULL, 1700),
			 0);
	assert_int_equal(store_transfer_get(s, t.token_hash, &g), 0);
	assert_string_equal(g.state, "done");
	assert_int_equal(g.bytes, 42);
	assert_string_equal(g.sha256, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	assert_null(g.error);
	assert_int_equal(g.finished_at, 1700);
	store_transfer_clear(&g);
	assert_int_equal(store_transfer_claim(s, t.token_hash, 1800, &c), -SBX_E_TOKEN_USED);

	/* Expired: refused, and recorded as such. */
	memset(t.token_hash, 0xcd, 32);
	assert_int_equal(store_transfer_mint(s, &t), 0);
	assert_int_equal(store_transfer_claim(s, t.token_hash, 2000, &c), -SBX_E_TOKEN_EXPIRED);
	assert_int_equal(store_transfer_get(s, t.token_hash, &g), 0);
	assert_string_equal(g.state, "expired");
	store_transfer_clear(&g);
	assert_int_equal(store_transfer_claim(s, t.token_hash, 1500, &c), -SBX_E_TOKEN_EXPIRED);

	/* Failed with an error. */
	memset(t.token_hash, 0xef, 32);
	assert_int_equal(store_transfer_mint(s, &t), 0);
	assert_int_equal(store_transfer_claim(s, t.token_hash, 1000, NULL), 0);
	assert_int_equal(store_transfer_finish(s, t.token_hash, "failed", 7, NULL, "disk full", 1100), 0);
	assert_int_equal(store_transfer_get(s, t.token_hash, &g), 0);
	assert_string_equal(g.state, "failed");
	assert_string_equal(g.error, "disk full");
	assert_string_equal(g.sha256, "");
	store_transfer_clear(&g);

	memset(unknown, 0x11, 32);
	assert_int_equal(store_transfer_claim(s, unknown, 1000, &c), -ENOENT);
	assert_int_equal(store_transfer_get(s, unknown, &g), -ENOENT);
	assert_int_equal(store_transfer_finish(s, unknown, "done", 0, NULL, NULL, 1), -ENOENT);
}

struct claim_race {
	struct store *s;
	pthread_barrier_t *bar;
	const unsigned char *hash;
	int rc;
};

static void *claim_main(void *arg)
{
	struct claim_race *c = arg;
	struct store_transfer t;

	pthread_barrier_wait(c->bar);
	c->rc = store_transfer_claim(c->s, c->hash, 1000, &t);
	if (c->rc == 0)
		store_transfer_clear(&t);
	return NULL;
}

static void test_transfer_claim_race(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store *s2 = NULL;
	struct store_transfer t = mk_transfer("s", "p", "write", 1, 100000);
	char err[256];

	add_tenant(s, "alice", NULL);
	/* Half the threads on a second store: two write connections. */
	assert_int_equal(store_open(&s2, f->path, false, err, sizeof err), 0);
	for (int round = 0; round < 20; round++) {
		struct claim_race cr[8];
		pthread_t th[8];
		pthread_barrier_t bar;
		int winners = 0, used = 0;

		memset(t.token_hash, 0, 32);
		t.token_hash[0] = (unsigned char)round;
		assert_int_equal(store_transfer_mint(s, &t), 0);
		pthread_barrier_init(&bar, NULL, 8);
		for (int i = 0; i < 8; i++) {
			cr[i] = (struct claim_race){.s = i % 2 ? s2 : s, .bar = &bar, .hash = t.token_hash};
			pthread_create(&th[i], NULL, claim_main, &cr[i]);
		}
		for (int i = 0; i < 8; i++) {
			pthread_join(th[i], NULL);
			winners += cr[i].rc == 0;
			used += cr[i].rc == -SBX_E_TOKEN_USED;
		}
		pthread_barrier_destroy(&bar);
		assert_int_equal(winners, 1);
		assert_int_equal(used, 7);
	}
	store_close(&s2);
}

/* ---- audit ---- */

static struct store_audit mk_audit(int64_t at, const char *tenant, const char *route, const char *outcome)
{
	struct store_audit a = {
	    .at = at,
	    .tenant = tenant,
	    .request_id = "req",
	    .method = "POST",
	    .route = route,
	    .status = 200,
	    .outcome = outcome,
	    .bytes_in = 10,
	    .bytes_out = 20,
	    .duration_ms = 1.5,
	    .client = "127.0.0.1",
	};
	return a;
}

struct collect {
	size_t n;
	int64_t last;
	bool ordered;
	unsigned char *seen; /* by id */
	size_t seen_n;
	int stop_after;
	struct store_audit first;
	char first_tenant[64], first_target[64], first_session[64];
};

static int collect_cb(void *ctx, const struct store_audit *a)
{
	struct collect *c = ctx;

	if (c->n == 0) {
		c->first = *a;
		snprintf(c->first_tenant, sizeof c->first_tenant, "%s", a->tenant);
		snprintf(c->first_target, sizeof c->first_target, "%s", a->target ? a->target : "(null)");
		snprintf(c->first_session, sizeof c->first_session, "%.*s", (int)a->session_len,
			 a->session ? a->session : "");
		c->first.tenant = c->first.target = c->first.session = NULL;
		c->first.request_id = c->first.method = c->first.route = c->first.outcome = c->first.client =
		    NULL;
	}
	if (a->id <= c->last)
		c->ordered = false;
	c->last = a->id;
	if (c->seen && a->id >= 0 && (size_t)a->id < c->seen_n)
		c->seen[a->id]++;
	c->n++;
	if (c->stop_after && (int)c->n >= c->stop_after)
		return 1;
	return 0;
}

static size_t count_audit(struct store *s, const struct store_audit_filter *flt)
{
	struct collect c = {.ordered = true};
	int64_t last = -1;

	assert_int_equal(store_audit_query(s, flt, collect_cb, &c, &last), 0);
	assert_true(c.ordered);
	assert_int_equal(last, c.n ? c.last : 0);
	return c.n;
}

static void test_audit_basic(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_audit_filter all = {0};
	struct collect c = {.ordered = true};
	struct store_audit a;
	char tgt[32];

	for (int i = 0; i < 1000; i++) {
		snprintf(tgt, sizeof tgt, "/f/%d", i);
		a = mk_audit(1000 + i, i % 2 ? "alice" : "bob", "/v1/fs/read", "ok");
		a.target = tgt;
		assert_int_equal(store_audit_append(s, &a), 0);
	}
	/* Strings were copied: overwrite the buffer before the flush. */
	snprintf(tgt, sizeof tgt, "clobbered");
	assert_int_equal(store_audit_flush(s), 0);
	assert_int_equal(count_audit(s, &all), 1000);
	assert_int_equal(store_audit_failures(s), 0);

	all.limit = 1;
	assert_int_equal(store_audit_query(s, &all, collect_cb, &c, NULL), 0);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.first.at, 1000);
	assert_string_equal(c.first_tenant, "bob");
	assert_string_equal(c.first_target, "/f/0");
	assert_int_equal(c.first.status, 200);
	assert_int_equal(c.first.bytes_in, 10);
	assert_int_equal(c.first.bytes_out, 20);
	assert_false(c.first.has_exit_code);
	assert_true(c.first.duration_ms > 1.4 && c.first.duration_ms < 1.6);

	/* An exit code, a session blob, an unauthenticated caller. */
	a = mk_audit(5000, NULL, "/v1/exec", "error");
	a.has_exit_code = true;
	a.exit_code = 137;
	a.why = (struct store_exec_why){.oom_killed = true, .uncontained = true};
	a.session = "se\0s";
	a.session_len = 4;
	assert_int_equal(store_audit_append(s, &a), 0);
	assert_int_equal(store_audit_flush(s), 0);
	memset(&c, 0, sizeof c);
	c.ordered = true;
	all = (struct store_audit_filter){.since = 5000};
	assert_int_equal(store_audit_query(s, &all, collect_cb, &c, NULL), 0);
	assert_int_equal(c.n, 1);
	assert_true(c.first.has_exit_code);
	assert_int_equal(c.first.exit_code, 137);
	assert_true(c.first.why.oom_killed && c.first.why.uncontained && !c.first.why.pids_limited);
	assert_int_equal(c.first.session_len, 4);
	assert_string_equal(c.first_tenant, "");
	assert_string_equal(c.first_target, "(null)");
	all = (struct store_audit_filter){.tenant = ""};
	assert_int_equal(count_audit(s, &all), 1);
	all = (struct store_audit_filter){.session = "se\0s", .session_len = 4};
	assert_int_equal(count_audit(s, &all), 1);
	all = (struct store_audit_filter){.session = "se", .session_len = 2};
	assert_int_equal(count_audit(s, &all), 0);

	/* Stamps need not follow ids (threads append out of order). */
	a = mk_audit(9000, "zed", "/v1/exec", "ok");
	assert_int_equal(store_audit_append(s, &a), 0);
	a.at = 8000;
	assert_int_equal(store_audit_append(s, &a), 0);
	a.at = 9500;
	assert_int_equal(store_audit_append(s, &a), 0);
	assert_int_equal(store_audit_flush(s), 0);
	all = (struct store_audit_filter){.tenant = "zed", .since = 8500};
	assert_int_equal(count_audit(s, &all), 2);
	all = (struct store_audit_filter){.since = 8500};
	assert_int_equal(count_audit(s, &all), 2);
	all = (struct store_audit_filter){.since = 7000, .until = 8999};
	assert_int_equal(count_audit(s, &all), 1);
	all = (struct store_audit_filter){.since = 99999};
	assert_int_equal(count_audit(s, &all), 0);

	/* cb stops the walk. */
	memset(&c, 0, sizeof c);
	c.ordered = true;
	c.stop_after = 5;
	all = (struct store_audit_filter){0};
	assert_int_equal(store_audit_query(s, &all, collect_cb, &c, NULL), 0);
	assert_int_equal(c.n, 5);
}

static void test_audit_filters_and_pages(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	static const char *const routes[] = {"/v1/fs/read", "/v1/exec", "/v1/fs/write"};
	static const char *const outcomes[] = {"ok", "denied", "error"};
	struct store_audit_filter flt;
	struct store_audit a;
	size_t per_route[3] = {0}, per_outcome[3] = {0}, alice = 0;

	for (int i = 0; i < 600; i++) {
		const char *tenant = i % 3 == 0 ? "alice" : "bob";

		a = mk_audit(10000 + i, tenant,
			     routes[i % 3 == 0	 ? 0
				    : i % 5 == 0 ? 1
						 : 2],
			     outcomes[i % 7 == 0    ? 1
				      : i % 11 == 0 ? 2
						    : 0]);
		assert_int_equal(store_audit_append(s, &a), 0);
		per_route[i % 3 == 0 ? 0 : i % 5 == 0 ? 1 : 2]++;
		per_outcome[i % 7 == 0 ? 1 : i % 11 == 0 ? 2 : 0]++;
		alice += i % 3 == 0;
	}
	assert_int_equal(store_audit_flush(s), 0);

	flt = (struct store_audit_filter){.tenant = "alice"};
	assert_int_equal(count_audit(s, &flt), alice);
	flt = (struct store_audit_filter){.tenant = "bob"};
	assert_int_equal(count_audit(s, &flt), 600 - alice);
	flt = (struct store_audit_filter){.tenant = "carol"};
	assert_int_equal(count_audit(s, &flt), 0);
	for (int k = 0; k < 3; k++) {
		flt = (struct store_audit_filter){.route = routes[k]};
		assert_int_equal(count_audit(s, &flt), per_route[k]);
		flt = (struct store_audit_filter){.outcome = outcomes[k]};
		assert_int_equal(count_audit(s, &flt), per_outcome[k]);
	}
	/* Alice's records are all on route 0. */
	flt = (struct store_audit_filter){.tenant = "alice", .route = routes[0]};
	assert_int_equal(count_audit(s, &flt), alice);
	flt = (struct store_audit_filter){.tenant = "alice", .route = routes[1]};
	assert_int_equal(count_audit(s, &flt), 0);
	/* since and until are inclusive. */
	flt = (struct store_audit_filter){.since = 10100, .until = 10199};
	assert_int_equal(count_audit(s, &flt), 100);
	flt = (struct store_audit_filter){.since = 10590};
	assert_int_equal(count_audit(s, &flt), 10);
	flt = (struct store_audit_filter){.until = 10009};
	assert_int_equal(count_audit(s, &flt), 10);
	flt = (struct store_audit_filter){.tenant = "alice", .since = 10000, .until = 10008};
	assert_int_equal(count_audit(s, &flt), 3);

	/* Pagination: every record exactly once, in id order, pages of 7. */
	for (int pass = 0; pass < 3; pass++) {
		unsigned char seen[700] = {0};
		int64_t cursor = 0, prev_last = 0;
		size_t total = 0, pages = 0;

		for (;;) {
			struct collect c = {.ordered = true, .seen = seen, .seen_n = sizeof seen};
			int64_t last = -1;

			c.last = prev_last;
			flt = (struct store_audit_filter){.after = cursor, .limit = 7};
			if (pass == 1)
				flt.tenant = "bob";
			if (pass == 2)
				flt.since = 10100;
			assert_int_equal(store_audit_query(s, &flt, collect_cb, &c, &last), 0);
			assert_true(c.ordered);
			assert_true(c.n <= 7);
			if (c.n == 0) {
				assert_int_equal(last, 0);
				break;
			}
			assert_int_equal(last, c.last);
			cursor = prev_last = last;
			total += c.n;
			pages++;
		}
		assert_int_equal(total, pass == 0 ? 600 : pass == 1 ? 600 - alice : 500);
		assert_true(pages >= total / 7);
		for (size_t id = 0; id < sizeof seen; id++)
			assert_true(seen[id] <= 1);
	}
}

static void test_audit_query_plan(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_audit_filter flt = {.tenant = "alice", .after = 10, .limit = 50};
	char plan[1024] = "";

	assert_int_equal(store_audit_query_plan(s, &flt, plan, sizeof plan), 0);
	print_message("plan (tenant): %s", plan);
	assert_non_null(strstr(plan, "audit"));
	assert_true(strstr(plan, "USING INDEX") || strstr(plan, "USING COVERING INDEX") ||
		    strstr(plan, "USING INTEGER PRIMARY KEY"));
	assert_null(strstr(plan, "USE TEMP B-TREE"));
	flt =
	    (struct store_audit_filter){.tenant = "alice", .route = "/v1/exec", .outcome = "ok", .limit = 50};
	assert_int_equal(store_audit_query_plan(s, &flt, plan, sizeof plan), 0);
	print_message("plan (tenant, route, outcome): %s", plan);
	assert_non_null(strstr(plan, "audit_tenant_id"));
	/* A first page by time starts from audit(at), not the oldest row. */
	flt = (struct store_audit_filter){.since = 5, .limit = 50};
	assert_int_equal(store_audit_query_plan(s, &flt, plan, sizeof plan), 0);
	print_message("plan (since): %s", plan);
	assert_non_null(strstr(plan, "audit_at"));
	assert_non_null(strstr(plan, "USING INTEGER PRIMARY KEY"));
	flt = (struct store_audit_filter){.since = 5, .until = 10, .limit = 50};
	assert_int_equal(store_audit_query_plan(s, &flt, plan, sizeof plan), 0);
	print_message("plan (since, until): %s", plan);
	assert_true(strstr(plan, "USING INDEX") || strstr(plan, "USING INTEGER PRIMARY KEY"));
	/* A later page resumes at the cursor. */
	flt = (struct store_audit_filter){.after = 100, .limit = 50};
	assert_int_equal(store_audit_query_plan(s, &flt, plan, sizeof plan), 0);
	assert_non_null(strstr(plan, "USING INTEGER PRIMARY KEY"));
}

static void test_audit_close_flushes(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_audit_filter all = {0};
	struct store_audit a = mk_audit(1, "alice", "/v1/exec", "ok");

	for (int i = 0; i < 5000; i++)
		assert_int_equal(store_audit_append(s, &a), 0);
	/* No flush: close must write them. */
	reopen(f);
	assert_int_equal(count_audit(f->s, &all), 5000);
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM audit"), 5000);
}

static void test_audit_bad_record(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_audit_filter all = {0};
	struct store_audit a = mk_audit(1, "alice", "/v1/exec", "ok");

	assert_int_equal(store_audit_append(s, &a), 0);
	a.outcome = "weird";
	assert_int_equal(store_audit_append(s, &a), 0);
	a.outcome = "denied";
	assert_int_equal(store_audit_append(s, &a), 0);
	/* The bad one fails alone; its neighbours are written. */
	assert_int_equal(store_audit_flush(s), -SBX_E_STORE);
	assert_int_equal(store_audit_failures(s), 1);
	assert_int_equal(count_audit(s, &all), 2);
	assert_int_equal(store_audit_flush(s), 0);
}

/* Records are written sixteen to a statement: every field lands in its
 * own row (an exit code or session of one row is never another's), and a
 * bad record inside a group fails alone. */
static int check_group_row(void *ctx, const struct store_audit *a)
{
	int *n = ctx;
	char want[32];
	snprintf(want, sizeof want, "req-%d", *n);
	assert_string_equal(a->request_id, want);
	assert_int_equal(a->at, 100 + *n);
	assert_int_equal(a->bytes_out, 1000 + *n);
	assert_int_equal(a->has_exit_code, *n % 3 == 0);
	if (*n % 3 == 0)
		assert_int_equal(a->exit_code, *n);
	assert_int_equal(a->session != NULL, *n % 2 == 0);
	if (a->session)
		assert_int_equal(a->session_len, *n % 4 == 0 ? 0 : 3);
	assert_string_equal(a->target ? a->target : "(none)", *n % 5 == 0 ? "(none)" : "/workspace/t");
	(*n)++;
	if (*n == 21)
		(*n)++; /* the bad one */
	return 0;
}

static void test_audit_groups(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_audit_filter all = {0};
	char rid[45][32];

	for (int i = 0; i < 45; i++) {
		struct store_audit a = mk_audit(100 + i, "alice", "/v1/exec", i == 21 ? "weird" : "ok");
		snprintf(rid[i], sizeof rid[i], "req-%d", i);
		a.request_id = rid[i];
		a.bytes_out = 1000 + i;
		a.has_exit_code = i % 3 == 0;
		a.exit_code = i;
		a.session = i % 2 == 0 ? "s\0s" : NULL;
		a.session_len = i % 4 == 0 ? 0 : 3;
		a.target = i % 5 == 0 ? NULL : "/workspace/t";
		assert_int_equal(store_audit_append(s, &a), 0);
	}
	assert_int_equal(store_audit_flush(s), -SBX_E_STORE);
	assert_int_equal(store_audit_failures(s), 1);
	int n = 0;
	assert_int_equal(store_audit_query(s, &all, check_group_row, &n, NULL), 0);
	assert_int_equal(n, 45);
	assert_int_equal(count_audit(s, &all), 44);
}

struct audit_writer {
	struct store *s;
	int n;
	int errors; /* no cmocka asserts off the main thread */
};

static void *audit_writer_main(void *arg)
{
	struct audit_writer *w = arg;
	struct store_audit a = mk_audit(7, "bob", "/v1/fs/read", "ok");

	for (int i = 0; i < w->n; i++) {
		w->errors += store_audit_append(w->s, &a) != 0;
		if (i % 500 == 0)
			w->errors += store_audit_flush(w->s) != 0;
	}
	return NULL;
}

static void test_audit_threads(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	struct store_audit_filter all = {.tenant = "bob"};
	struct audit_writer w[8];
	pthread_t th[8];

	for (int i = 0; i < 8; i++) {
		w[i] = (struct audit_writer){.s = s, .n = 2000};
		pthread_create(&th[i], NULL, audit_writer_main, &w[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].errors, 0);
	}
	assert_int_equal(store_audit_flush(s), 0);
	assert_int_equal(count_audit(s, &all), 16000);
	assert_int_equal(store_audit_failures(s), 0);
}

static void no_spill(void *ctx, const char *tenant, const char *id)
{
	(void)ctx;
	(void)tenant;
	(void)id;
}

/* What the store holds per tenant follows its rows: inserts and results
 * add, retention and tenant removal take away, to the byte; and an audit
 * target is capped with its full length said. */
static void test_usage(void **state)
{
	struct fx *f = *state;
	struct store *s = open_ok(f);
	int64_t rows = -1, bytes = -1, deleted = 0;

	add_tenant(s, "alice", NULL);
	add_tenant(s, "bob", NULL);
	assert_int_equal(store_usage_get(s, "alice", 0, &rows, &bytes), 0);
	assert_int_equal(rows, 0);
	assert_int_equal(bytes, 0);
	struct store_exec e = mk_exec("alice", "e1", "s1", 100);
	assert_int_equal(store_exec_begin(s, &e), 0);
	assert_int_equal(store_usage_get(s, "alice", 0, &rows, &bytes), 0);
	assert_int_equal(rows, 1);
	int64_t one = bytes;
	assert_true(one > 0);
	char *big = malloc(100001);
	assert_non_null(big);
	memset(big, 'r', 100000);
	big[100000] = '\0';
	assert_int_equal(store_exec_finish(s, "alice", "e1", EXEC_EXITED, 0, big, 200, 2, NULL), 0);
	assert_int_equal(store_usage_get(s, "alice", 0, &rows, &bytes), 0);
	assert_int_equal(bytes, one + 100000);

	/* a 100 kB target is kept as at most STORE_AUDIT_TARGET_MAX bytes */
	struct store_audit a = mk_audit(150, "alice", "/exec", "error");
	a.target = big;
	assert_int_equal(store_audit_append(s, &a), 0);
	assert_int_equal(store_audit_flush(s), 0);
	assert_int_equal(store_usage_get(s, "alice", 0, &rows, &bytes), 0);
	assert_int_equal(rows, 2);
	assert_true(bytes < one + 100000 + STORE_AUDIT_TARGET_MAX + 1024);
	assert_true(raw_int(f->path, "SELECT length(target) FROM audit") <= STORE_AUDIT_TARGET_MAX);
	assert_int_equal(
	    raw_int(f->path, "SELECT count(*) FROM audit WHERE target LIKE '%of 100000 bytes kept%'"), 1);
	assert_int_equal(store_usage_get(s, "bob", 0, &rows, &bytes), 0);
	assert_int_equal(rows, 0);

	/* retention frees it all */
	assert_int_equal(store_prune(s, 1000, 0, 100, no_spill, NULL, &deleted), 0);
	assert_int_equal(deleted, 2);
	assert_int_equal(store_usage_get(s, "alice", 0, &rows, &bytes), 0);
	assert_int_equal(rows, 0);
	assert_int_equal(bytes, 0);

	/* so does removing the tenant (its execs go by cascade) */
	struct store_tenant old;
	assert_int_equal(store_tenant_get(s, "alice", &old), 0);
	e = mk_exec("alice", "e2", "s1", 2000);
	assert_int_equal(store_exec_begin(s, &e), 0);
	a = mk_audit(2100, "alice", "/exec", "ok");
	a.incarnation = old.incarnation;
	assert_int_equal(store_audit_append(s, &a), 0);
	assert_int_equal(store_audit_flush(s), 0);
	assert_int_equal(store_tenant_remove(s, "alice", NULL), 0);
	assert_int_equal(store_usage_get(s, "alice", old.incarnation, &rows, &bytes), 0);
	assert_int_equal(rows, 1); /* the old life's audit row, kept until retention */

	/* and a tenant added again under the name owes nothing of the old
	 * life's rows: its budget counts its own */
	add_tenant(s, "alice", NULL);
	struct store_tenant now;
	assert_int_equal(store_tenant_get(s, "alice", &now), 0);
	assert_true(now.incarnation != old.incarnation);
	int64_t life = now.incarnation;
	store_tenant_clear(&old);
	store_tenant_clear(&now);
	assert_int_equal(store_usage_get(s, "alice", life, &rows, &bytes), 0);
	assert_int_equal(rows, 0);
	assert_int_equal(bytes, 0);
	assert_int_equal(store_prune(s, 3000, 0, 100, no_spill, NULL, &deleted), 0);
	assert_int_equal(store_usage_get(s, "alice", 0, &rows, &bytes), 0);
	assert_int_equal(rows, 0);
	assert_int_equal(bytes, 0);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    UNIT_TEST_FX(test_fresh_migrate),
	    UNIT_TEST_FX(test_migrate_rerun_noop),
	    UNIT_TEST_FX(test_newer_refused),
	    UNIT_TEST_FX(test_newer_untouched),
	    UNIT_TEST_FX(test_peek_version),
	    UNIT_TEST_FX(test_opened_version),
	    UNIT_TEST_FX(test_fresh_without_migrate),
	    UNIT_TEST_FX(test_behind_without_migrate),
	    cmocka_unit_test(test_close_null),
	    UNIT_TEST_FX(test_tenants),
	    UNIT_TEST_FX(test_tenant_remove_cascades),
	    UNIT_TEST_FX(test_sessions),
	    UNIT_TEST_FX(test_session_race),
	    UNIT_TEST_FX(test_execs),
	    cmocka_unit_test(test_exec_state_names),
	    UNIT_TEST_FX(test_policies),
	    UNIT_TEST_FX(test_recover),
	    UNIT_TEST_FX(test_transfers),
	    UNIT_TEST_FX(test_transfer_claim_race),
	    UNIT_TEST_FX(test_audit_basic),
	    UNIT_TEST_FX(test_audit_filters_and_pages),
	    UNIT_TEST_FX(test_audit_query_plan),
	    UNIT_TEST_FX(test_audit_close_flushes),
	    UNIT_TEST_FX(test_audit_bad_record),
	    UNIT_TEST_FX(test_audit_groups),
	    UNIT_TEST_FX(test_audit_threads),
	    UNIT_TEST_FX(test_usage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
