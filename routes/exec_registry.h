#pragma once
/* The registry of running execs (routes/exec_registry.c). */
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct app;
struct req;
struct sbx_event;
struct hub_channel;
struct tenant;

struct waiter {
	struct req *r;
	struct waiter *next;
};

struct exec_job {
	struct app *app;
	struct tenant *tenant;  /* referenced until the exit */
	char id[72];
	uint64_t handle;        /* the runner's */
	int64_t watch;          /* disconnect watch of the first request */
	struct hub_channel *chan; /* live events */
	int refs;               /* under registry lock */
	bool finished;
	struct waiter *waiters; /* under registry lock */
	struct exec_job *next;
};

struct route_execs {
	pthread_mutex_t mu;
	struct exec_job *jobs;
};

/* A suspended request's view of its exec. */
struct exec_wait {
	struct exec_job *job;
	json_t *result;        /* set before the resume */
	int error;             /* or this */
};

struct exec_job *find_locked(struct route_execs *e, const char *tenant, const char *id);
void on_event(void *ctx, const struct sbx_event *ev, int spawn_error);
void on_hangup(void *ctx);
void wait_on_locked(struct req *r, struct exec_job *j);
json_t *start_json(const char *id, const char *command, const char *session, size_t session_len,
			  const char *cwd, int64_t started_at);
int answer_existing(struct req *r, const char *id, const char *hash, bool stream);
