#pragma once
/* The exec registry: commands running now, by (tenant, id), with the
 * requests waiting for their results. routes/events.c subscribes to it. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct app;
struct exec_job;

void route_exec_init(struct app *a);
void route_exec_fini(struct app *a);
