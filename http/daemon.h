#pragma once
/* The HTTP daemon: libmicrohttpd with an internal epoll thread pool,
 * suspend/resume, limits, TLS; hands each request to the dispatcher. */
#include <stddef.h>
#include <stdint.h>

struct http_env;
struct srv_http;

/* Start listening on env->cfg->listen; env must outlive the daemon.
 * Errors: -errno with err filled. */
int srv_http_start(struct srv_http **out, struct http_env *env, char *err, size_t errsz);
/* The port actually bound (useful with port 0). */
uint16_t srv_http_port(const struct srv_http *h);
/* Stop accepting new connections (the listening socket is closed). */
void srv_http_quiesce(struct srv_http *h);
/* Stop the daemon (every suspended connection must have been resumed). */
void srv_http_stop(struct srv_http **h);
