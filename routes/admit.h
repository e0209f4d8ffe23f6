#pragma once
/* The admission queue of POST /exec: a request of a tenant that runs its
 * max_execs commands waits, suspended, for one of them to end rather than
 * being answered 429 at once. Per tenant, oldest first; bounded by the
 * policy's exec_queue (how many wait) and exec-queue-wait-ms (how long
 * each waits); beyond either, 429 too_many_requests with Retry-After.
 *
 * A waiting request holds nothing but its place: no exec row, no runner
 * job, no id but the one its client chose (by which a cancel finds it:
 * route_admit_cancel). When a slot frees (route_tenant_release_exec), it passes to
 * the oldest waiting request, which is resumed and runs the exec handler
 * again from the start (r->json is still there): its policy,
 * cwd and image are checked anew and its row is written then, at
 * admission, so timeout_s counts from its start, and a policy change
 * made while it waited applies to it. The handler takes the slot over
 * with route_admit_take.
 *
 * Threads: the slots and the queues are under app->tenants_lock (each
 * tenant's queue lives in its struct tenant_load). A request is queued by
 * its HTTP thread, admitted by whoever frees a slot (the completion
 * thread, a request thread), refused by the approvals thread (its wait
 * bound) or at shutdown, dropped by the watch thread (its client hung
 * up). Whoever takes it out of the queue resumes it, once; what it
 * answers is decided on its HTTP thread. */
#include <stdbool.h>
#include <stdint.h>

struct app;
struct buf;
struct http_req;
struct tenant;
struct tenant_load;

/* Take one of the exec slots of r's tenant (at most limit), or queue r
 * for one when queue_max > 0 (then r is suspended, and answered once it
 * leaves the queue: by rerun(r) on its HTTP thread when admitted, 429
 * when its wait ran out, 503 at shutdown; a client that hung up is not
 * answered). Returns 0 (a slot taken), 1 (queued) or -SBX_E_TOO_MANY
 * (no slot and no place in the queue), or -E2BIG/-ENOBUFS when its
 * inline stdin does not fit what waiting requests may keep
 * (route_tenant_hold_locked). */
int route_admit_exec(struct http_req *r, int64_t limit, int64_t queue_max, int (*rerun)(struct http_req *r));

/* In the handler of a request the queue admitted, with the tenant's
 * max_execs as its policy says now: 1 when r holds the slot it was given,
 * which is the caller's from now on (released with
 * route_tenant_release_exec); -1 when the limit was lowered while it
 * waited and its slot is over it: r waits again, first in the queue,
 * suspended (the handler returns 0); 2 when r was cancelled while it
 * waited (route_admit_cancel): it holds no slot, and its command is
 * recorded as cancelled without running; 0 for any other request. A slot
 * given and never taken is released when r ends. The newest limit read
 * (here or by route_admit_exec) applies to every waiting request. */
int route_admit_take(struct http_req *r, int64_t limit);

/* Under app->tenants_lock: a slot of l was freed; admit the oldest
 * waiting requests while l is under their limit, counting their slots.
 * Returns them, chained, for route_admit_resume after the unlock. */
struct route_admit *route_admit_next_locked(struct app *a, struct tenant_load *l);
/* Resume the requests route_admit_next_locked returned (no lock held). */
void route_admit_resume(struct route_admit *list);

/* POST /exec/{id}/cancel: every request of l's tenant waiting with the
 * client-chosen id leaves the queue (its place to the next) and is
 * resumed; its handler runs again and ends it cancelled without running
 * (route_admit_take returns 2). Returns how many there were. */
int route_admit_cancel(struct app *a, struct tenant_load *l, const char *id);

/* The approvals thread: refuse (429) every request that waited longer
 * than exec-queue-wait-ms. Returns the monotonic ms of the next such
 * deadline (INT64_MAX: nobody waits). */
int64_t route_admit_expire(struct app *a);

/* Shutdown (app->stopping set): answer every waiting request 503. */
void route_admit_stop(struct app *a);

/* The queue's series for /metrics: sandboxd_exec_queued{tenant} and
 * sandboxd_exec_queue_refused_total{reason} (the waits are
 * http_metrics's sandboxd_exec_queue_wait_seconds). */
void route_admit_render(struct app *a, struct buf *out);

/* ---- the tenants' slots (the admission queue hands them on) ---- */

/* Per-tenant concurrency slots: 0, or -SBX_E_TOO_MANY at the limit (the
 * tenant policy's max_execs, max_transfers). */
int route_tenant_acquire_exec(struct app *a, struct tenant *t, int64_t limit);
/* Frees one exec slot; when requests wait for one (routes/admit.h), it
 * passes to the oldest instead. */
void route_tenant_release_exec(struct app *a, struct tenant *t);
/* Commands waiting for approval (bounded by max_execs too). */
/* A pending slot (of limit) for a command that waits for approval and
 * keeps stdin_bytes of inline stdin meanwhile: 0, -SBX_E_TOO_MANY
 * (slots), or route_tenant_hold_locked's refusal. */
int route_tenant_acquire_pending(struct app *a, struct tenant *t, int64_t limit, int64_t stdin_bytes);
void route_tenant_release_pending(struct app *a, struct tenant *t, int64_t stdin_bytes);
/* Under tenants_lock: count n bytes of inline stdin a waiting request
 * keeps, within wait-stdin-bytes-per-tenant and wait-stdin-bytes (in
 * all): 0, -E2BIG (n alone exceeds the tenant's bound) or -ENOBUFS
 * (other waiting requests hold the rest). route_tenant_unhold_locked
 * gives them back. */
int route_tenant_hold_locked(struct app *a, struct tenant_load *l, int64_t n);
void route_tenant_unhold_locked(struct app *a, struct tenant_load *l, int64_t n);
/* The answer of a hold refused with rc (-E2BIG or -ENOBUFS). */
int route_tenant_hold_fail(struct http_req *r, int rc, int64_t n);
int route_tenant_acquire_transfer(struct app *a, struct tenant *t);
void route_tenant_release_transfer(struct app *a, struct tenant *t);
