#pragma once
/* No-wait mode: the calling thread asks the file layer to do only what it
 * can do without waiting for a disk, and to say when it could not.
 *
 * An event thread of the HTTP server may run a read-only file route
 * itself when everything it needs is already in memory (the path in the
 * dentry cache: openat2 RESOLVE_CACHED; the bytes in the page cache:
 * preadv2 RWF_NOWAIT). When a step would have to wait, the file layer
 * fails it with -EAGAIN and marks the thread; the route is then run
 * again on the worker pool from the start. So a hot 4 KiB read costs no
 * hand-off between threads, and a cold one still never holds an event
 * thread on a disk (issue 13's fair server time, issue 15's read path).
 *
 * Per thread (thread-local); only the thread that began it ends it. */
#include <stdbool.h>

/* Enter no-wait mode on this thread and clear the mark. */
void nowait_begin(void);
/* Leave it; true when a step was refused because it would have waited
 * (the work must be done again where waiting is allowed). */
bool nowait_end(void);
/* For the file layer: is this thread in no-wait mode? */
bool nowait_on(void);
/* For the file layer: a step was refused because it would have waited. */
void nowait_blocked(void);

/* Mark the calling thread an HTTP event thread, for good (http/daemon.c
 * calls it at the top of its request callback: libmicrohttpd has no
 * thread-start hook, and every callback of a connection runs on the pool
 * thread that took it, after that request callback). Cheap to call again:
 * only the first call on a thread writes. A thread so marked, or one in
 * no-wait mode, must never wait on the network. */
void nowait_event_thread(void);
/* For network layers (sandbox/ssh.c): true when this thread may not wait
 * on the network (then the step is refused with -EAGAIN, loudly: it is a
 * bug of the caller; in no-wait mode the route is run again on the pool). */
bool nowait_network_refused(void);
