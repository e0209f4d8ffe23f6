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

struct http_req;
struct http_hub;
struct http_metrics;
struct http_watch;
struct http_hub_channel;

/* metrics and watch must outlive the hub. feed_replay: how many feed
 * events are kept per tenant for Last-Event-ID (and bytes bound them). cancel(cancel_ctx, job) is
 * called (from a request or watcher thread) when the client that owns a
 * streamed command (http_hub_set_cancel) goes away before its end. */
void http_hub_new(struct http_hub **out, struct http_metrics *metrics, struct http_watch *watch,
		  size_t feed_replay, void (*cancel)(void *ctx, uint64_t job), void *cancel_ctx);
/* End every stream (shutdown) and resume their connections. */
void http_hub_close_all(struct http_hub *h);
void http_hub_free(struct http_hub **h);

/* Exec lifecycle (exec.c; any thread). The channel keeps a bounded replay
 * buffer for Last-Event-ID and for late joiners. start: the `start`
 * event's data (stolen). */
struct http_hub_channel *http_hub_channel_open(struct http_hub *h, const char *tenant, const char *id,
					       json_t *start);
/* Set a field of the `start` data not yet published (a command approved
 * after it waited: its started_at). value is stolen. */
void http_hub_channel_set_start(struct http_hub *h, struct http_hub_channel *c, const char *key,
				json_t *value);
/* Publish `start` (when the process is running). */
void http_hub_channel_started(struct http_hub *h, struct http_hub_channel *c);
/* `heartbeat` data (stolen). */
void http_hub_channel_heartbeat(struct http_hub *h, struct http_hub_channel *c, json_t *data);
/* `output` chunk: only to the subscribers that asked for output. */
void http_hub_channel_output(struct http_hub *h, struct http_hub_channel *c, int stream, const char *p,
			     size_t n);
/* `exit` with the ShellResult (borrowed), or an `exec_error` event with a
 * wire error when the command never started (result NULL); then every
 * stream of the channel ends and the channel is released. */
void http_hub_channel_exit(struct http_hub *h, struct http_hub_channel *c, json_t *result, json_t *error);

/* A life of the tenant ended (removed, or removed and added again): its
 * feed's replay is emptied, its streams (feed and exec) end, and its
 * exec channels no longer answer to its name, so the next life of the
 * name never reads the earlier one's events. Any thread. */
void http_hub_forget_tenant(struct http_hub *h, const char *tenant);

/* An event of the tenant's feed alone (no exec channel): data (borrowed)
 * gets a `tenant` field. For the approval of commands: `pending_approval`
 * and `decision`. Any thread. */
void http_hub_feed_event(struct http_hub *h, const char *tenant, const char *event, json_t *data);

/* Subscribers (HTTP threads). Each answers r with a text/event-stream
 * response and returns 0, or returns -ENOENT when there is no live
 * channel (the caller then looks in the store). last_id: Last-Event-ID or
 * 0. */
int http_hub_subscribe_exec(struct http_hub *h, struct http_req *r, const char *tenant, const char *id,
			    int64_t last_id, bool output);
/* The tenant's feed (tenant NULL: every tenant, for admin), with its own
 * ids; a `gap` event first when events after last_id are gone. */
int http_hub_subscribe_feed(struct http_hub *h, struct http_req *r, const char *tenant, int64_t last_id);
/* The id `exit` will have (call it when the command has ended, before
 * http_hub_channel_exit, to record it with the result). */
int64_t http_hub_channel_exit_id(struct http_hub *h, struct http_hub_channel *c);
/* An exec that has ended: what comes after last_id of `start` (id 1) and
 * `exit` (id exit_id, as it was sent live), a `gap` before it when
 * heartbeats in between are no longer kept, then the stream ends; 204
 * when last_id is the exit already (EventSource then stops). */
int http_hub_reply_ended(struct http_hub *h, struct http_req *r, json_t *start, json_t *result,
			 int64_t exit_id, int64_t last_id);

/* The subscriber of r (after http_hub_subscribe_exec) cancels runner job `job`
 * when its client hangs up (POST /exec with stream: true). */
void http_hub_set_cancel(struct http_hub *h, struct http_req *r, uint64_t job);
