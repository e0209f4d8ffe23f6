#pragma once
/* The event hub's insides (see hub.h), shared by its three files, each
 * calling only those below it: http/hub_msg.c (formatted messages and a
 * subscriber's queue of them), http/hub.c (replay rings, the hub's life,
 * exec channels and tenant feeds, publishing) and http/hub_sub.c
 * (subscribers: the libmicrohttpd stream that drains a queue, hang-ups,
 * subscribing). Only they include this. "Locked": the caller holds the
 * hub lock. */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/keytab.h"
#include "http/hub.h"

struct MHD_Connection;

#define CHANNEL_RING 64 /* replayable events per exec */
/* Feed replay: the count is the server's setting (per tenant); the bytes
 * bound it too: an exit event carries the whole ShellResult (up to two
 * max-output-bytes-cap streams, JSON-escaped), so a count alone would let
 * one tenant's execs pin gigabytes. The newest event always stays. */
#define FEED_TENANT_BYTES (8u << 20)
#define FEED_ALL_BYTES (32u << 20) /* the every-tenant view of admin feeds */
#define QUEUE_MAX (256 * 1024)	   /* a watcher's backlog before it is dropped */
#define QUEUE_MAX_OUTPUT (4 << 20) /* the owner of a streamed exec */
/* wire.md promises a comment at least every 15 s; the keepalive tick is 1 s,
 * so idle streams get one after 12 s, leaving room for a busy scheduler. */
#define KEEPALIVE_MS 12000

/* One formatted event, shared by every queue it is in. */
enum msg_kind {
	MSG_OTHER,  /* start, comments */
	MSG_OUTPUT, /* output chunks: only to the owner of a streamed exec */
	MSG_HEARTBEAT,
	MSG_FINAL, /* exit or error: the last event of an exec's stream */
};

struct msg {
	atomic_int refs;
	enum msg_kind kind;
	int64_t id; /* the event's id: (0: none) */
	size_t len;
	char data[]; /* len bytes, NUL-terminated */
};

struct qitem {
	struct msg *m;
	struct qitem *next;
};

struct sub {
	struct http_hub *h;
	struct http_hub_channel *chan; /* exec stream; NULL for a feed */
	bool feed;		       /* a tenant feed */
	char tenant[64];	       /* feed filter; "" = every tenant */
	bool output;
	struct MHD_Connection *conn;
	struct http_req *r; /* until req_gone: bytes_out for the audit */
	struct qitem *head, *tail;
	size_t off, qbytes, qmax;
	bool suspended, closing, dead, req_gone, output_noted, heartbeat_noted;
	int refs; /* the request and the response */
	int64_t last_write_ms;
	int64_t watch;
	uint64_t cancel_handle; /* a runner job to cancel when the client hangs up */
	struct sub *next;	/* every subscriber (hub->subs) */
	struct sub *gnext;	/* its group: its channel's (chan->subs) or the feeds' (hub->feed_subs) */
};

/* A bounded replay buffer of formatted events, oldest first, ids rising. */
struct ring {
	struct msg **m;
	size_t n, cap, bytes, max_bytes;
};

struct http_hub_channel {
	char tenant[64];
	char id[72];
	json_t *start;
	int64_t seq;
	struct ring ring;
	struct msg *start_msg; /* kept for late joiners even when the ring has moved on */
	bool started, ended;
	int refs;
	/* Subscribers that asked for output (changed under the hub lock; read
	 * without it by the runner, which formats no chunk while it is 0). */
	atomic_int output_subs;
	/* Its subscribers: an event of this exec visits them only, not every
	 * stream of the server (a thousand watchers of other execs must not
	 * cost each exec's start and exit a walk of a thousand). */
	struct sub *subs;
	struct http_hub_channel *next;
};

/* One tenant's feed: its own ids, which never go backwards (they start
 * at the server's start time in microseconds: a restart begins above any
 * id a previous run gave, unless it published a million events a second
 * on average), and its own replay buffer. */
struct tenant_feed {
	struct keytab_node node; /* first: the tenant, in the hub's feeds */
	int64_t next_id;
	struct ring ring;
};

struct http_hub {
	struct http_metrics *metrics;
	struct http_watch *watch;
	void (*cancel)(void *ctx, uint64_t job); /* cancels a streamed command whose owner left */
	void *cancel_ctx;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct http_hub_channel *channels;
	struct sub *subs;      /* all, for keepalives and shutdown */
	struct sub *feed_subs; /* the tenant feeds' (GET /events) */
	struct keytab feeds;   /* of struct tenant_feed, by tenant */
	size_t feed_replay;    /* events kept per tenant */
	int64_t id_base;       /* first id of every feed in this run */
	int64_t all_next_id;   /* the every-tenant view (admin) has ids of its own */
	struct ring all;
	pthread_t ka;
	bool stop;
	bool closed; /* http_hub_close_all ran: new streams end after their replay */
};

/* ---- http/hub_msg.c ---- */

/* Messages, refcounted: each made with one reference, which put drops. */
struct msg *hub_msg_alloc(const char *text, size_t len, enum msg_kind kind);
struct msg *hub_msg_event(int64_t id, const char *event, json_t *data, enum msg_kind kind);
struct msg *hub_msg_comment(const char *text);
struct msg *hub_msg_gap(int64_t first_id);
struct msg *hub_msg_ref(struct msg *m);
void hub_msg_put(struct msg *m);
/* A subscriber's queue (all locked). Resume s's connection if it waits. */
void hub_wake(struct sub *s);
/* Append m (a reference taken), whatever the bound. */
void hub_push(struct sub *s, struct msg *m);
/* What came after last_id in r, a `gap` first when some of it is gone. */
void hub_replay(struct sub *s, const struct ring *r, int64_t last_id, int64_t next_id);
/* A comment for s once (*noted then set). */
void hub_note(struct sub *s, bool *noted, const char *text);
/* Queue m for s and wake it. Over s's bound, an output chunk (and an
 * owner's heartbeat) is skipped with a note, anything else ends s with a
 * last comment; the final event always goes in. */
void hub_enqueue(struct sub *s, struct msg *m);
/* s ends once its queue is sent. */
void hub_end_stream(struct sub *s);

/* ---- http/hub.c (locked) ---- */

/* Drop a reference to c (the last frees it). */
void hub_channel_put_locked(struct http_hub *h, struct http_hub_channel *c);
/* The tenant's feed, or NULL before its first event. */
struct tenant_feed *hub_feed_find(struct http_hub *h, const char *tenant);
