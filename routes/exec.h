#pragma once
/* The exec routes' start and stop, and the data of an exec's `start`
 * event (routes/events.c uses it). The registry of the commands running
 * now is routes/exec_registry.h. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct app;
struct http_req;
struct store_exec;

/* The longest command POST /exec takes: it is one argument of sh -c,
 * and the kernel refuses an argument over MAX_ARG_STRLEN (32 pages,
 * 131072 bytes, its NUL included) at execve. Longer: 400 bad_request,
 * before anything is stored. */
#define ROUTE_EXEC_COMMAND_MAX 131071

/* Start the registry (and its completion thread) with the limits every
 * command runs under, computed here once from a->cfg; a->backend and
 * a->drop_privs must be set. */
void route_exec_init(struct app *a);
/* Wait until every finished exec has been recorded and its requests
 * resumed: call after the runner has stopped, before the HTTP daemon
 * stops. Accepts an app without a registry. */
void route_exec_drain(struct app *a);
/* Drain and free the registry: after the runner and route_exec_drain;
 * before the store. Accepts an app without a registry. */
void route_exec_fini(struct app *a);
/* {"id", "command", "session", "cwd", "started_at"}: the data of the
 * `start` event and the common part of GET /exec/{id}. */
json_t *route_exec_start_json(const struct store_exec *ex);
/* The record of exec id of r's tenant into *ex (store_exec_clear it): 0,
 * or the failure recorded for the reply (404 naming the node an id of
 * another node belongs to, or the store's error): return that. */
int route_exec_load(struct http_req *r, const char *id, struct store_exec *ex);
/* POST /exec/{id}/cancel's work for exec id of r's tenant (any string:
 * one that is no exec id is 404): 202 {"id", "state": "cancelling"},
 * 404, or 409 when it has finished. */
int route_exec_cancel_id(struct http_req *r, const char *id);
