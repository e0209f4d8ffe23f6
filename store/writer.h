#pragma once
/* Internal to store/: the batched writer (writer.c), one thread that
 * writes the queued records of every kind (db.h's store_wkind) in groups,
 * each kind through the write function store.c gives it at start. It
 * calls db.c and those functions only, never a kind's file by name. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/db.h"

/* Start and stop the writer thread (store.c); stop drains the queues. */
int store_writer_start(struct store *s, const store_wwrite_fn write[STORE_WK__COUNT]);
void store_writer_stop(struct store *s);
/* Queue rec (its seq is set here) on kind k's queue, which holds at most
 * max records. Never blocks on the disk. -SBX_E_STORE when the queue is
 * full or the store is closing: rec is freed and counted. */
int store_writer_append(struct store *s, enum store_wkind k, struct store_wrec *rec, size_t max);
/* Wait until every record (of any kind) queued before the call is
 * handled; -SBX_E_STORE when one of kind k failed meanwhile. */
int store_writer_flush(struct store *s, enum store_wkind k);
/* Records of kind k that could not be written. */
uint64_t store_writer_failures(struct store *s, enum store_wkind k);

/* A queued record keeps its strings in one block after it, packed:
 * store_wrec_size is the room string p takes there (its NUL with it; 0
 * for NULL), store_wrec_pack copies the n bytes at p to *cur (then a NUL
 * when nul) and moves *cur past them, store_wrec_put copies string p with
 * its NUL. Both return where the copy is; NULL stays NULL. */
size_t store_wrec_size(const char *p);
const char *store_wrec_pack(char **cur, const void *p, size_t n, bool nul);
const char *store_wrec_put(char **cur, const char *p);
