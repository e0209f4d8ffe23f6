#pragma once
/* Rate limit for audit rows of requests that name no tenant (refused
 * tokens, unknown routes, public pages): a token bucket per client
 * address, so that a flood of unauthenticated traffic cannot grow the
 * audit table without bound, and one address cannot use up another's
 * rows. The table is fixed-size: addresses hash to slots, and a new
 * address takes over the slot it hashes to (with a full bucket). Slots
 * are guarded by a few striped mutexes, each held for a few instructions. */
#include <stdbool.h>
#include <stdint.h>

struct http_audit_gate;

/* rate_per_s rows per second refill a bucket of burst rows (rate 0: the
 * burst, then nothing). Never fails (allocation aborts). */
void http_audit_gate_new(struct http_audit_gate **out, int64_t rate_per_s, int64_t burst);
void http_audit_gate_free(struct http_audit_gate **g);
/* Whether a row for client (a textual IPv4 or IPv6 address, "" when
 * unknown) may be written at now_ms (a monotonic clock); takes one token
 * when it may. IPv6 addresses count per /64, the unit one client
 * usually holds; IPv4-mapped ones as their IPv4 address. */
bool http_audit_gate_take(struct http_audit_gate *g, const char *client, int64_t now_ms);
