#pragma once
/* The egress gateway: every TCP connection and DNS question of a command
 * with network comes here (sandbox/egress/nsprep.h says how), is decided
 * by name on the tenant's current rules (sandbox/egress/rules.h), and
 * when allowed is connected from the server's own namespace to an address
 * the gateway resolved itself, never the one the command dialled; bytes
 * are relayed with splice(2). Every connection, DNS refusal and dropped
 * datagram is a record handed to the ledger callback.
 *
 * Threads: its own (config.threads event loops, a resolver pool, the
 * namespace pool's refill thread); never the HTTP threads or the runner's.
 * Per-tenant bounds (config): connections open at once and undecided
 * connections at once; per command: connections open at once and new
 * connections per second. Beyond a bound a connection is refused
 * (recorded, with the bound as the reason). A connection must decide
 * (ClientHello or request head complete) within hello_ms and
 * SBX_EGRESS_PEEK_MAX bytes; a client that sends nothing for
 * first_byte_ms is decided on its destination alone (protocols where the
 * server speaks first). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/egress/rules.h"

/* One ledger record. Strings are borrowed for the callback's duration. */
struct sbx_egress_record {
	const char *tenant, *exec_id, *sub; /* sub may be NULL */
	const char *proto;		    /* "tls", "http", "tcp", "dns", "udp" */
	const char *name;	 /* as seen: SNI, Host, DNS question, DNS name of the address; NULL: none */
	const char *name_source; /* "sni", "host", "dns", NULL */
	const char *dialled;	 /* what the command dialled: "198.18.0.7:443", "[2001:db8::1]:22" */
	const char *addr;	 /* what the gateway connected to (NULL: nothing) */
	uint16_t port;		 /* destination port */
	bool allowed;
	const char
	    *reason; /* denied: why (rules.h, peek.h, a bound); allowed: NULL; ended by error: the error */
	uint64_t bytes_up, bytes_down; /* sandbox -> destination, destination -> sandbox */
	int64_t started_ms, ended_ms;  /* Unix epoch ms */
};
/* Called on a gateway thread; must not block (queue it). */
typedef void (*sbx_egress_record_fn)(void *ctx, const struct sbx_egress_record *r);

struct sbx_egress_config {
	unsigned threads;	     /* event loops; 0: 2 */
	unsigned pool;		     /* namespaces made ahead; 0: 4 */
	unsigned tenant_conns;	     /* open at once per tenant; 0: 256 */
	unsigned tenant_pending;     /* undecided at once per tenant; 0: 64 */
	unsigned command_conns;	     /* open at once per command; 0: 64 */
	unsigned command_conn_per_s; /* new per second per command, burst twice; 0: 10 */
	unsigned hello_ms;	     /* 0: 5000 */
	unsigned first_byte_ms;	     /* 0: 300 */
	unsigned connect_ms;	     /* 0: 5000 */
	unsigned resolve_ms;	     /* 0: 2000 */
	sbx_egress_record_fn record;
	void *record_ctx;
};

struct sbx_egress_gateway;
/* Starts its threads. 0, -ENOMEM, -SBX_E_BACKEND (threads). */
int sbx_egress_gateway_new(const struct sbx_egress_config *c, struct sbx_egress_gateway **out);
/* Ends every session (records written), stops the threads. Accepts NULL. */
void sbx_egress_gateway_free(struct sbx_egress_gateway **g);

/* Whether the gateway works on this host (sbx_egress_ns_probe plus an
 * outgoing side: at least one address family with a route). 0, or
 * -SBX_E_BACKEND; msg one line either way. Cached after the first call.
 * g may be NULL: whether this host could run a gateway (sandboxd doctor). */
int sbx_egress_gateway_health(struct sbx_egress_gateway *g, char *msg, size_t msgsz);

/* The tenant's current rules: every session of that tenant decides its
 * next connection and DNS question with them (live policy changes). The
 * gateway takes a reference. NULL rules: everything refused. */
void sbx_egress_gateway_set_rules(struct sbx_egress_gateway *g, const char *tenant,
				  struct sbx_egress_rules *rules);

/* One command's network: a namespace from the pool, bound to the command. */
struct sbx_egress_session;
struct sbx_egress_bind {
	const char *tenant;		/* rules are looked up by it */
	const char *exec_id;		/* records carry it; may be NULL (then "") */
	const char *sub;		/* may be NULL */
	struct sbx_egress_rules *rules; /* when given: set_rules(tenant, rules) first (the newest policy) */
	uint64_t seq;			/* the command number (logs) */
};
/* Blocks for a namespace when the pool is empty: call from a setup thread.
 * 0, -SBX_E_BACKEND (err says why), -ENOMEM. */
int sbx_egress_session_open(struct sbx_egress_gateway *g, const struct sbx_egress_bind *b,
			    struct sbx_egress_session **out, char *err, size_t errsz);
/* A session opened ahead (a warm sandbox's, sandbox/warm.h, with no
 * exec_id) bound to the command about to start in it: b's exec_id, sub
 * and seq replace the session's, b->rules (when given) become the
 * tenant's, and its loopback grants are the newest rules' on return.
 * Only before any process of the command runs. 0, or -SBX_E_BACKEND. */
int sbx_egress_session_rebind(struct sbx_egress_session *s, const struct sbx_egress_bind *b, char *err,
			      size_t errsz);
/* The namespace the command joins (owned by the session). */
int sbx_egress_session_netns(const struct sbx_egress_session *s);

/* What a model is told: the first SBX_EGRESS_DENIED_MAX refused
 * destinations (distinct by destination), with the reason. */
#define SBX_EGRESS_DENIED_MAX 8
struct sbx_egress_denied {
	char dest[SBX_EGRESS_NAME_MAX + 16]; /* "evil.example:443", "10.0.0.1:22", "udp 203.0.113.5:443" */
	char reason[SBX_EGRESS_WHY_MAX];
};
struct sbx_egress_summary {
	struct sbx_egress_denied denied[SBX_EGRESS_DENIED_MAX];
	size_t n_denied;
	uint64_t denied_total, allowed_total; /* connections and questions */
};
/* The command is over: its listeners close, its connections still open
 * are ended (records written), and *sum (NULL: not wanted) gets what was
 * refused. Accepts NULL; sets *s NULL. */
void sbx_egress_session_close(struct sbx_egress_session **s, struct sbx_egress_summary *sum);
/* The summary so far (a running command). */
void sbx_egress_session_summary(struct sbx_egress_session *s, struct sbx_egress_summary *sum);

/* Counters per tenant for /metrics: cb once per tenant seen. */
struct sbx_egress_counts {
	uint64_t allowed, denied, dns_refused, udp_dropped, bytes_up, bytes_down;
	unsigned open, pending;
};
void sbx_egress_gateway_counts(struct sbx_egress_gateway *g,
			       void (*cb)(void *ctx, const char *tenant, const struct sbx_egress_counts *c),
			       void *ctx);
