#pragma once
/* The exec registry: commands running now, by (tenant, id), with the
 * requests waiting for their results. routes/events.c subscribes to it. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct app;
struct exec_job;
struct store_exec;

void route_exec_init(struct app *a);
void route_exec_fini(struct app *a);
/* {"id", "command", "session", "cwd", "started_at"}: the data of the
 * `start` event and the common part of GET /exec/{id}. */
json_t *exec_start_json(const struct store_exec *ex);
