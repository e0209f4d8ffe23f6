#pragma once
/* Internal to store/: the batched writer (writer.c), one thread that
 * writes the queued audit and egress records in groups. */
#include <stddef.h>
#include <stdint.h>

struct store;

/* Start and stop the writer thread (store.c); stop drains the queues. */
int store_audit_start(struct store *s);
void store_audit_stop(struct store *s);
/* With alock held and a record just queued on a queue now qn long, open
 * the writer's batch window or cut it short. */
void store_writer_queued_locked(struct store *s, size_t qn);
/* Wait until every record (audit and egress) queued before the call is
 * handled; -SBX_E_STORE when one after *fail_seq's value at the start
 * failed (fail_seq: &s->fail_seq or &s->efail_seq). */
int store_writer_flush(struct store *s, const uint64_t *fail_seq);
