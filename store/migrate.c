/* Migrations: the embedded migrations/NNNN_name.sql applied in one
 * transaction above PRAGMA user_version, which then names the highest. */
#include "store/store_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/embedded.h"
#include "common/errors.h"

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

void store_newer_msg(char *err, size_t errsz, int have, int known)
{
	if (err && errsz)
		snprintf(err, errsz,
			 "database schema version %d is newer than this binary (%d); upgrade sandboxd", have,
			 known);
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
