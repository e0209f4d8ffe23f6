#pragma once
/* The schema migrations (migrate.c), part of store.h's API. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;

/* Apply embedded migrations (migrations/NNNN_name.sql) above PRAGMA
 * user_version, all in one transaction. from and to receive the versions. */
int store_migrate(struct store *s, int *from, int *to);
int store_schema_version(struct store *s);
/* The highest migration number embedded in this binary. */
int store_known_version(void);
/* The i-th embedded migration in the order they run (by name, so by
 * number): its file name ("0006_tenant_incarnation.sql"), its number into
 * *number (may be NULL); NULL past the last. A store at schema version v
 * has to run those numbered above v. */
const char *store_migration_name(size_t i, int *number);
/* The schema version of the database file at path into *version, read
 * without changing anything: no write, no lock, no -wal, -shm or
 * -journal created (a file with no -wal beside it is the whole database
 * and is read immutable; with one, a server holds it, or a crash left
 * transactions there, and it is read read-only through it, which may
 * create its -shm). An empty file is version 0. -ENOENT (or another
 * -errno): no file; -EPROTO: newer than this binary (*version set);
 * -SBX_E_STORE: not a database. err gets a human message. */
int store_peek_version(const char *path, int *version, char *err, size_t errsz);
/* The schema version the file had when store_open opened it, before the
 * migrations it ran (equal to store_schema_version when it ran none). */
int store_opened_version(struct store *s);

/* ---- internal to store/ (store.c calls these) ---- */
struct sqlite3;
/* PRAGMA user_version of db into *v. */
int store_read_user_version(struct sqlite3 *db, int *v);
/* The message of a database newer than this binary into err. */
void store_newer_msg(char *err, size_t errsz, int have, int known);
/* Apply the pending migrations in one transaction; s->lock held. */
int store_migrate_locked(struct store *s, int *from, int *to, char *err, size_t errsz);
