#pragma once
/* Notices clients that go away while their request is suspended
 * (libmicrohttpd does not: security.md). One thread, one epoll set,
 * EPOLLRDHUP on the connection sockets of suspended requests. */
#include <stdint.h>

struct http_watch;
typedef void (*http_watch_cb)(void *ctx);

int http_watch_new(struct http_watch **out);
void http_watch_free(struct http_watch **w);
/* Call cb(ctx) once, on the watch thread, when fd's peer hangs up. Returns
 * a handle (> 0) or a negative errno. */
int64_t http_watch_add(struct http_watch *w, int fd, http_watch_cb cb, void *ctx);
/* Stop watching; after it returns, cb is not running and will not run. */
void http_watch_remove(struct http_watch *w, int64_t handle);
