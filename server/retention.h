#pragma once
/* The pruner: a thread that applies the retention settings every
 * retention-interval-s, in small batches, and removes the spill files of
 * the execs it forgets. */
struct app;
struct srv_retention;

int srv_retention_start(struct srv_retention **out, struct app *a);
void srv_retention_stop(struct srv_retention **r);
