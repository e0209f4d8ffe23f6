/* Migrations: the embedded migrations/NNNN_name.sql applied in one
 * transaction above PRAGMA user_version, which then names the highest. */
#include "store/db.h"
#include "store/migrate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/embedded.h"
#include "common/buf.h"
#include "common/errors.h"
#include "common/xmalloc.h"

static int migration_number(const char *name)
{
	char *end = NULL;
	long v;

	errno = 0;
	v = strtol(name, &end, 10);
	if (errno || end == name || *end != '_' || v <= 0 || v > 1000000)
		return -1;
	return (int)v;
}

int store_known_version(void)
{
	int best = 0;

	for (size_t i = 0; i < embedded_migrations_count; i++) {
		int n = migration_number(embedded_migrations[i].name);
		if (n > best)
			best = n;
	}
	return best;
}

int store_read_user_version(sqlite3 *db, int *v)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			*v = sqlite3_column_int(st, 0);
			rc = SQLITE_OK;
		}
	}
	sqlite3_finalize(st);
	return rc == SQLITE_OK ? 0 : store_rc(rc);
}

int store_schema_version(struct store *s)
{
	int v = 0, r;

	pthread_mutex_lock(&s->lock);
	r = store_read_user_version(s->db, &v);
	pthread_mutex_unlock(&s->lock);
	return r ? r : v;
}

int store_opened_version(struct store *s)
{
	return s->opened_version;
}

void store_newer_msg(char *err, size_t errsz, int have, int known)
{
	if (err && errsz)
		snprintf(
		    err, errsz,
		    "database schema version %d is newer than this binary (%d): a newer sandboxd wrote it, "
		    "and downgrades are refused; run that sandboxd, or restore the backup taken before "
		    "its upgrade",
		    have, known);
}

const char *store_migration_name(size_t i, int *number)
{
	if (i >= embedded_migrations_count)
		return NULL;
	if (number)
		*number = migration_number(embedded_migrations[i].name);
	return embedded_migrations[i].name;
}

/* A file: URI for path (RFC 8089; what sqlite3_open_v2 reads with
 * SQLITE_OPEN_URI) with query q: '%', '?' and '#' escaped, an absolute
 * path behind an empty authority so that "//x" stays a path. */
static char *path_uri(const char *path, const char *q)
{
	struct buf b;

	buf_init(&b, 3 * strlen(path) + strlen(q) + 16);
	buf_append(&b, path[0] == '/' ? "file://" : "file:", path[0] == '/' ? 7 : 5);
	for (const char *p = path; *p; p++) {
		char esc[4];

		if (*p == '%' || *p == '?' || *p == '#') {
			snprintf(esc, sizeof esc, "%%%02x", (unsigned char)*p);
			buf_append(&b, esc, 3);
		} else {
			buf_append(&b, p, 1);
		}
	}
	buf_append(&b, "?", 1);
	buf_append(&b, q, strlen(q));
	return buf_steal(&b, NULL);
}

int store_peek_version(const char *path, int *version, char *err, size_t errsz)
{
	char *wal = xasprintf("%s-wal", path);
	struct stat st;
	sqlite3 *db = NULL;
	char *uri = NULL;
	int known = store_known_version();
	int v = 0, r;

	if (err && errsz)
		err[0] = '\0';
	if (stat(path, &st) < 0) {
		r = -errno;
		if (err && errsz)
			snprintf(err, errsz, "cannot read %s: %s", path, strerror(-r));
		goto out;
	}
	/* Without a -wal no connection holds the file (the last to close
	 * removes it) and the file is the whole database: read it immutable,
	 * which takes no lock and creates nothing. With one, a server (or a
	 * crash) left transactions there: read through it, read-only. */
	uri = path_uri(path, access(wal, F_OK) == 0 ? "mode=ro" : "immutable=1");
	if (sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) !=
		SQLITE_OK ||
	    (r = store_read_user_version(db, &v)) < 0) {
		if (err && errsz)
			snprintf(err, errsz, "cannot read the schema version of %s: %s", path,
				 db ? sqlite3_errmsg(db) : "out of memory");
		r = -SBX_E_STORE;
		goto out;
	}
	*version = v;
	r = 0;
	if (v > known) {
		store_newer_msg(err, errsz, v, known);
		r = -EPROTO;
	}
out:
	sqlite3_close(db);
	free(uri);
	free(wal);
	return r;
}

int store_migrate_locked(struct store *s, int *from, int *to, char *err, size_t errsz)
{
	int known = store_known_version();
	int v = 0, r;
	char *msg = NULL;
	char pragma[64];

	r = store_tx_begin(s);
	if (r) {
		if (err && errsz)
			snprintf(err, errsz, "cannot begin the migration transaction: %s",
				 sqlite3_errmsg(s->db));
		return r;
	}
	/* Read inside the write transaction: another process may have just
	 * migrated the same file. */
	r = store_read_user_version(s->db, &v);
	if (r)
		goto out;
	if (v > known) {
		store_newer_msg(err, errsz, v, known);
		r = -EPROTO;
		goto out;
	}
	for (size_t i = 0; i < embedded_migrations_count; i++) {
		const struct embedded_file *m = &embedded_migrations[i];
		int n = migration_number(m->name);

		if (n < 0) {
			if (err && errsz)
				snprintf(err, errsz, "embedded migration %s has no leading number", m->name);
			r = -SBX_E_STORE;
			goto out;
		}
		if (n <= v)
			continue;
		if (sqlite3_exec(s->db, m->data, NULL, NULL, &msg) != SQLITE_OK) {
			r = store_rc(sqlite3_extended_errcode(s->db));
			if (err && errsz)
				snprintf(err, errsz, "migration %s failed: %s", m->name, msg ? msg : "?");
			goto out;
		}
	}
	if (v < known) {
		snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", known);
		if (sqlite3_exec(s->db, pragma, NULL, NULL, &msg) != SQLITE_OK) {
			r = store_rc(sqlite3_extended_errcode(s->db));
			if (err && errsz)
				snprintf(err, errsz, "setting user_version failed: %s", msg ? msg : "?");
			goto out;
		}
	}
	r = store_tx_commit(s);
	if (r && err && errsz)
		snprintf(err, errsz, "committing the migrations failed: %s", sqlite3_errmsg(s->db));
	if (!r) {
		if (from)
			*from = v;
		if (to)
			*to = v < known ? known : v;
	}
out:
	sqlite3_free(msg);
	if (r)
		store_tx_rollback(s);
	return r;
}

int store_migrate(struct store *s, int *from, int *to)
{
	int r;

	pthread_mutex_lock(&s->lock);
	r = store_migrate_locked(s, from, to, NULL, 0);
	pthread_mutex_unlock(&s->lock);
	return r;
}
