#pragma once
/* The HTTP daemon: libmicrohttpd with an internal epoll thread pool,
 * suspend/resume, limits, TLS; hands each request to the dispatcher. */
#include <stddef.h>
#include <stdint.h>

struct http_env;
struct http_daemon;

/* Start listening on env->cfg->listen; env must outlive the daemon.
 * Errors: -errno with err filled. */
int http_daemon_start(struct http_daemon **out, struct http_env *env, char *err, size_t errsz);
/* The port actually bound (useful with port 0). */
uint16_t http_daemon_port(const struct http_daemon *h);
/* Stop accepting new connections: each is closed at once (the listening
 * socket stays open until http_daemon_stop). Thread-safe. */
void http_daemon_quiesce(struct http_daemon *h);
/* Stop the daemon (every suspended connection must have been resumed). */
void http_daemon_stop(struct http_daemon **h);
