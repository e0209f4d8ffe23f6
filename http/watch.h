#pragma once
/* Notices clients that go away while their request is suspended
 * (libmicrohttpd does not: security.md). One thread, one epoll set,
 * EPOLLRDHUP on the connection sockets of suspended requests. */
#include <stdint.h>

struct route_watch;
typedef void (*watch_cb)(void *ctx);

int watch_new(struct route_watch **out);
void watch_free(struct route_watch **w);
/* Call cb(ctx) once, on the watch thread, when fd's peer hangs up. Returns
 * a handle (> 0) or a negative errno. */
int64_t watch_add(struct route_watch *w, int fd, watch_cb cb, void *ctx);
/* Stop watching; after it returns, cb is not running and will not run. */
void watch_remove(struct route_watch *w, int64_t handle);
