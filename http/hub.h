#pragma once
/* Live events: per-exec channels and tenant feeds fanned out to
 * server-sent-event subscribers. An event is formatted once and shared by
 * every subscriber's queue (a thousand watchers of one exec cost one
 * heartbeat computation and one formatted event). A subscriber is a
 * libmicrohttpd response whose content reader suspends the connection
 * when its queue is empty; publishing resumes it. Queues are bounded: a
 * subscriber too slow to keep up is dropped with a final comment. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct req;
struct route_hub;
struct route_metrics;
struct route_watch;
struct hub_channel;

/* metrics and watch must outlive the hub. cancel(cancel_ctx, job) is
 * called (from a request or watcher thread) when the client that owns a
 * streamed command (hub_set_cancel) goes away before its end. */
void hub_new(struct route_hub **out, struct route_metrics *metrics, struct route_watch *watch,
	     void (*cancel)(void *ctx, uint64_t job), void *cancel_ctx);
/* End every stream (shutdown) and resume their connections. */
void hub_close_all(struct route_hub *h);
void hub_free(struct route_hub **h);

/* Exec lifecycle (exec.c; any thread). The channel keeps a bounded replay
 * buffer for Last-Event-ID and for late joiners. start: the `start`
 * event's data (stolen). */
struct hub_channel *hub_channel_open(struct route_hub *h, const char *tenant, const char *id, json_t *start);
/* Publish `start` (when the process is running). */
void hub_channel_started(struct route_hub *h, struct hub_channel *c);
/* `heartbeat` data (stolen). */
void hub_channel_heartbeat(struct route_hub *h, struct hub_channel *c, json_t *data);
/* `output` chunk: only to the subscribers that asked for output. */
void hub_channel_output(struct route_hub *h, struct hub_channel *c, int stream, const char *p, size_t n);
/* `exit` with the ShellResult (borrowed), or an `error` event with a wire
 * error when the command never started (result NULL); then every stream
 * of the channel ends and the channel is released. */
void hub_channel_exit(struct route_hub *h, struct hub_channel *c, json_t *result, json_t *error);

/* Subscribers (HTTP threads). Each answers r with a text/event-stream
 * response and returns 0, or returns -ENOENT when there is no live
 * channel (the caller then looks in the store). last_id: Last-Event-ID or
 * 0. */
int hub_subscribe_exec(struct route_hub *h, struct req *r, const char *tenant, const char *id, int64_t last_id,
		       bool output);
/* The tenant's feed (tenant NULL: every tenant, for admin). */
int hub_subscribe_feed(struct route_hub *h, struct req *r, const char *tenant, int64_t last_id);
/* An exec that has ended: `start` (from start data) and `exit` at once,
 * then the stream ends. */
int hub_reply_ended(struct route_hub *h, struct req *r, json_t *start, json_t *result);

/* The subscriber of r (after hub_subscribe_exec) cancels runner job `job`
 * when its client hangs up (POST /exec with stream: true). */
void hub_set_cancel(struct route_hub *h, struct req *r, uint64_t job);
