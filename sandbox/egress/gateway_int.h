#pragma once
/* The egress gateway's inside (sandbox/egress/gateway.h is the contract).
 *
 * Ownership and threads:
 *   - a session belongs to one event loop (round-robin at open); its
 *     listeners, connections and DNS state are touched only by that loop's
 *     thread. Other threads talk to a loop through its message queue
 *     (an eventfd wakes it): a session to add, a session to end, a
 *     resolver answer. Messages are handled after each epoll batch, so no
 *     event of the batch can point at something a message freed;
 *   - ended connections wait on the loop's graveyard until the batch is
 *     over, for the same reason;
 *   - the worker pool runs getaddrinfo and the loopback-set changes of
 *     live sessions, never on a loop;
 *   - tenants live until the gateway is freed; their rules are replaced
 *     under g->mu, their counters are atomics.
 *
 * Floors: a file calls only the files on floors below its own, so that
 * each can be read without those above it. What has to go back up (an
 * event loop's events and messages) goes through callbacks that the top
 * fills in (struct gw_loop_ops).
 *   5  gateway_start.c: starts the rest; its gw_loop_ops say what the
 *      loops' events mean
 *   4  gateway_conn.c, gateway_dns.c: a session's TCP connections, its
 *      DNS questions and dropped datagrams
 *   3  gateway_session.c, gateway_resolve.c: a session and its ledger;
 *      names resolved on the pool
 *   2  gateway_loop.c: epoll, the message queue, deadlines, the graveyard
 *   1  gateway.c, gateway_relay.c, gateway_health.c: the shared core,
 *      the relaying of bytes, the health check */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sandbox/egress/dns.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/egress/nsprep.h"
#include "sandbox/egress/peek.h"

#define GW_ADDRS_MAX 16	    /* resolved addresses tried per connection */
#define GW_POOL_THREADS 8   /* getaddrinfo at once (each may block for resolve_ms) */
#define GW_TENANT_WORKERS 3 /* of them for one tenant's names */
#define GW_ADDR_TXT 64	    /* "[ipv6]:port" */

struct gw_tenant {
	struct gw_tenant *next;
	char *name;
	struct sbx_egress_rules *rules; /* under g->mu; NULL: everything refused */
	atomic_uint_fast64_t allowed, denied, dns_refused, udp_dropped, bytes_up, bytes_down;
	atomic_uint open, pending;
	unsigned resolving; /* on the worker pool, under g->wq_mu */
};

/* What an epoll registration points at. */
enum gw_kind { GW_H_WAKE, GW_H_TCP, GW_H_DNS, GW_H_NFLOG, GW_H_CLIENT, GW_H_UPSTREAM };
struct gw_handle {
	enum gw_kind kind;
	void *obj; /* the loop, session or connection */
	int fd;
	uint32_t events; /* registered interest; 0: not registered */
};

/* A token bucket: rate per second, burst tokens at most (gateway.c). */
struct gw_bucket {
	double tokens;
	int64_t last_ms;
};
bool gw_bucket_take(struct gw_bucket *b, double rate, double burst, int64_t now_mono_ms);

struct gw_msg {
	struct gw_msg *next;
	enum { GW_M_ADD, GW_M_CLOSE, GW_M_RESOLVED } kind;
	void *obj;
};

struct gw_job;
struct gw_relay;
struct gw_conn {
	struct gw_conn *next, *prev;   /* the session's */
	struct gw_conn *tnext, *tprev; /* the loop's timed list */
	struct gw_conn *gnext;	       /* the graveyard */
	struct sbx_egress_session *s;
	struct gw_handle hc, hu; /* client, upstream */
	enum { GW_C_PEEK, GW_C_RESOLVE, GW_C_CONNECT, GW_C_FLUSH, GW_C_RELAY, GW_C_DEAD } st;
	bool timed, pending, counted, allowed;	/* allowed: the rules said yes */
	int64_t started_ms, accepted_mono, due; /* due: mono ms (timed) */
	struct sockaddr_storage dialled;
	char dialled_txt[GW_ADDR_TXT], addr_txt[GW_ADDR_TXT];
	uint16_t port;
	const char *proto, *name_source;
	char name[SBX_EGRESS_NAME_MAX + 1];
	uint8_t *buf; /* the client's first bytes (SBX_EGRESS_PEEK_MAX) until relaying */
	size_t len, off;
	struct sbx_egress_rules *rules; /* the decision's, until connected */
	struct sbx_egress_http *http;
	struct gw_job *job;
	struct sockaddr_storage addrs[GW_ADDRS_MAX];
	size_t n_addrs, next_addr;
	char first_why[SBX_EGRESS_WHY_MAX]; /* the first refused address's reason */
	struct gw_relay *relay;
	uint64_t bytes_up, bytes_down;
};

/* What a loop's events and messages mean, filled in by gateway_start.c:
 * the loop (floor 2) calls nothing above it but these. */
struct gw_loop_ops {
	/* Messages (gw_loop_post), after the batch: GW_M_ADD, GW_M_CLOSE and
	 * GW_M_RESOLVED (a gw_job). */
	void (*session_add)(struct sbx_egress_session *s);
	void (*session_close)(struct sbx_egress_session *s);
	void (*resolved)(void *job);
	/* Events: GW_H_TCP, GW_H_DNS, GW_H_NFLOG, GW_H_CLIENT and GW_H_UPSTREAM. */
	void (*accept)(struct sbx_egress_session *s, int lfd);
	void (*dns_read)(struct sbx_egress_session *s, int fd, int family);
	void (*nflog_read)(struct sbx_egress_session *s, int fd);
	void (*conn_event)(struct gw_conn *c, struct gw_handle *h, uint32_t events);
	/* A timed connection's due time came (it may end c); a buried one is
	 * freed after the batch. */
	void (*deadline)(struct gw_conn *c);
	void (*conn_free)(struct gw_conn *c);
};

struct gw_loop {
	struct sbx_egress_gateway *g;
	const struct gw_loop_ops *ops;
	pthread_t thr;
	int ep;
	struct gw_handle wake; /* an eventfd */
	int spare_fd;	       /* kept for EMFILE (gateway_conn.c) */
	pthread_mutex_t mu;    /* the queue and stop */
	struct gw_msg *head, *tail;
	bool stop;
	struct gw_conn *timed;	   /* connections with a deadline (not yet relaying) */
	struct gw_conn *graveyard; /* ended this batch, freed after it */
	int64_t next_due;	   /* mono ms of the earliest deadline, INT64_MAX: none */
};

/* A piece of work for the pool. */
struct gw_work {
	struct gw_work *next;
	struct gw_tenant *t; /* whose name it resolves (the per-tenant share); NULL: none */
	void (*run)(struct gw_work *w);
	void (*drop)(struct gw_work *w); /* the pool stops before running it */
};

struct gw_denied_list {
	struct sbx_egress_denied denied[SBX_EGRESS_DENIED_MAX];
	size_t n;
	uint64_t denied_total, allowed_total;
};

struct sbx_egress_session {
	struct sbx_egress_gateway *g;
	struct gw_loop *loop;
	struct gw_tenant *t;
	char *exec_id, *sub;
	uint64_t seq;
	struct sbx_egress_ns ns;
	struct gw_handle h_tcp4, h_tcp6, h_dns4, h_dns6, h_nflog;
	struct sbx_egress_names *names;
	/* Loop thread only. */
	struct gw_conn *conns;
	unsigned open;
	struct gw_bucket conn_rate, dns_rate, udp_rate;
	uint64_t dns_dropped, udp_unrecorded; /* since the last record of them */
	int64_t dns_dropped_since, udp_unrecorded_since;
	uint8_t *dns_seen; /* bitmap of 198.18.0.0/15 answered (recorded) once */
	/* Any thread, under mu. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct gw_denied_list sum;
	bool ended; /* the loop let go of it (close handshake) */
	/* The namespace's loopback sets, changed from the pool. */
	pthread_mutex_t ns_mu;
	bool ns_closed;
	atomic_int refs; /* the owner, and each pending loopback change */
};

struct sbx_egress_gateway {
	struct sbx_egress_config c; /* defaults filled in */
	struct gw_loop *loops;
	unsigned n_loops, next_loop;
	struct sbx_egress_nspool *nspool;
	/* The worker pool (its queue under wq_mu, taken after mu). */
	pthread_t workers[GW_POOL_THREADS];
	unsigned n_workers;
	struct gw_work *wq_head, *wq_tail;
	bool wq_stop;
	pthread_mutex_t wq_mu;
	pthread_cond_t wq_cv;
	/* Tenants, rules, sessions. */
	pthread_mutex_t mu;
	struct gw_tenant *tenants;
	struct sbx_egress_session **sessions;
	size_t n_sessions, cap_sessions;
	pthread_mutex_t health_mu; /* the first check makes a namespace: not under mu */
	bool health_done;
	int health_rc;
	char health_msg[256];
};

/* gateway.c */
struct gw_tenant *gw_tenant_find(struct sbx_egress_gateway *g, const char *name); /* under g->mu */
struct gw_tenant *gw_tenant_get(struct sbx_egress_gateway *g, const char *name);
void gw_tenants_free(struct sbx_egress_gateway *g);
/* The tenant's rules now (a reference; NULL: none). */
struct sbx_egress_rules *gw_rules_now(struct sbx_egress_gateway *g, struct gw_tenant *t);
void gw_work_post(struct sbx_egress_gateway *g, struct gw_work *w);
int gw_thread_start(pthread_t *t, void *(*fn)(void *), void *arg); /* with every signal blocked */
int gw_pool_start(struct sbx_egress_gateway *g);
void gw_pool_stop(struct sbx_egress_gateway *g);

/* gateway_loop.c */
/* ops: static, outlives the loop. */
int gw_loop_start(struct gw_loop *l, struct sbx_egress_gateway *g, const struct gw_loop_ops *ops);
void gw_loop_stop(struct gw_loop *l);
void gw_loop_post(struct gw_loop *l, int kind, void *obj);
/* Register, change or drop h's interest (0: drop). */
void gw_loop_watch(struct gw_loop *l, struct gw_handle *h, uint32_t events);
void gw_loop_timed_add(struct gw_loop *l, struct gw_conn *c);
void gw_loop_timed_del(struct gw_loop *l, struct gw_conn *c);
void gw_loop_bury(struct gw_loop *l, struct gw_conn *c);

/* gateway_session.c */
void gw_session_attach(struct sbx_egress_session *s); /* on its loop */
/* On its loop, once its connections have ended (gw_conn_end_all): the
 * listeners go and the closing thread may go on. */
void gw_session_detach(struct sbx_egress_session *s);
void gw_session_unref(struct sbx_egress_session *s);
/* A record for the ledger, standing for n events in the session's
 * summary and the tenant's counters. dest: the summary's destination
 * (refusals; NULL: counted, not listed). */
void gw_session_note(struct sbx_egress_session *s, const struct sbx_egress_record *r, const char *dest,
		     uint64_t n);
void gw_session_base(const struct sbx_egress_session *s, struct sbx_egress_record *r);
void gw_session_loopback_later(struct sbx_egress_session *s);

/* gateway_conn.c: accept, bounds, peek, decide, connect. */
void gw_conn_accept(struct sbx_egress_session *s, int lfd);
void gw_conn_event(struct gw_conn *c, struct gw_handle *h, uint32_t events);
void gw_conn_deadline(struct gw_conn *c);
void gw_conn_resolved(void *job);
/* End c: the record is written; reason NULL: healthy. */
void gw_conn_end(struct gw_conn *c, const char *reason);
/* End every connection of s (its session ends): a relaying one healthily. */
void gw_conn_end_all(struct sbx_egress_session *s);
void gw_conn_free(struct gw_conn *c);

/* gateway_resolve.c */
struct gw_resolved {
	int err; /* 0, or the EAI_ code's text in why */
	size_t n;
	struct sockaddr_storage a[GW_ADDRS_MAX];
};
struct gw_job;
/* Ask the pool; the answer comes to l as GW_M_RESOLVED with the job.
 * The connection holds a weak pointer it clears when it ends first. */
struct gw_job *gw_resolve_start(struct sbx_egress_gateway *g, struct gw_loop *l, struct gw_conn *c,
				const char *name);
void gw_resolve_forget(struct gw_job *j);	     /* the connection ended first */
struct gw_conn *gw_job_conn(const struct gw_job *j); /* NULL: forgotten */
const struct gw_resolved *gw_job_result(const struct gw_job *j);
void gw_job_free(struct gw_job *j);

/* gateway_relay.c */
struct gw_relay;
/* From connected upstream on: both directions until both end. http:
 * the client's requests are checked by it (owned by the relay). */
struct gw_relay *gw_relay_new(int cfd, int ufd, struct sbx_egress_http *http);
void gw_relay_free(struct gw_relay **r);
/* Move what can move. fd, events: what epoll reported (fd -1: nothing
 * yet, every side is tried); a side is tried again only after an event
 * of its own. 1: both directions done; 0: go on (wanted events in *cev,
 * *uev); -1: ended by error (why). */
int gw_relay_pump(struct gw_relay *r, int fd, uint32_t events, uint32_t *cev, uint32_t *uev, char *why,
		  size_t whysz);
void gw_relay_bytes(const struct gw_relay *r, uint64_t *up, uint64_t *down);

/* gateway_dns.c: DNS questions and NFLOG datagrams of a session. */
void gw_dns_read(struct sbx_egress_session *s, int fd, int family);
void gw_nflog_read(struct sbx_egress_session *s, int fd);

/* Text of an address ("1.2.3.4:80", "[::1]:80"). */
void gw_addr_txt(const struct sockaddr_storage *ss, char *out, size_t outsz);
void gw_rst_close(int *fd);
