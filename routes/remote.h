#pragma once
/* Backend `remote`: a tenant's files and commands on another sandboxd, a
 * provider of routes/provider.h.
 *
 * The remote provider speaks the wire contract to the back server through
 * libsandboxd (client/sandboxd.h): paths are resolved here first (the same
 * normalisation and audit target) and sent as absolute wire paths with the
 * request's session key; answers are rendered exactly as the local routes
 * render theirs. Errors of the back are passed on with their code,
 * message and Retry-After; a back that cannot be reached (refused, reset,
 * or past the deadline) is 503 backend_unavailable with Retry-After 5.
 * Nothing here retries: the client gets the back's 429/503 and its hint.
 *
 * A command runs sbxc_exec (streamed) on a job thread (routes/jobs.c);
 * the back's result becomes the result. A cancel closes the streamed
 * request, asks the back to cancel (POST /exec/{id}/cancel) and reports
 * the back's final record (cancelled).
 *
 * Threads: libsandboxd handles are thread-safe; the provider is immutable
 * after route_remote_new. */
#include <stddef.h>

struct app;
struct route_policy;
struct route_provider;

/* The provider for a tenant whose policy names backend remote (never
 * fails: settings that cannot work, such as an unreadable token file or a
 * server that does not offer `remote`, make every request of the tenant
 * 503 backend_unavailable saying why). The token file is read now. */
struct route_provider *route_remote_new(const struct app *a, const char *tenant,
					const struct route_policy *p);
