#pragma once
/* The setup threads of network on request: a command's egress session
 * (sandbox/egress/gateway.h: a namespace from the gateway's pool, or one
 * made when the pool is empty) is opened here, never on a runner thread,
 * so a tenant whose setups are slow holds up neither the runner threads
 * nor another tenant's commands. The threads are long-lived and started
 * at the first submission.
 *
 * Per tenant (the command's uid): at most setups_per_tenant of its
 * setups run at once (the others wait, oldest first, while other
 * tenants' setups take the free threads), and at most
 * commands_per_tenant of its network commands are held at once, from
 * submission until sbx_netpool_release (after the command is reaped and
 * its session closed): one more is refused with -SBX_E_TOO_MANY. That
 * bounds the namespaces a tenant holds; the gateway bounds their
 * connections. */
#include <stdbool.h>
#include <sys/types.h>

struct sbx_backend;
struct sbx_spawn_req;
struct sbx_egress_session;
struct sbx_netpool;

struct sbx_netpool_config {
	unsigned threads;	      /* 0: SBX_NETPOOL_THREADS */
	unsigned setups_per_tenant;   /* 0: SBX_NETPOOL_SETUPS_PER_TENANT */
	unsigned commands_per_tenant; /* 0: SBX_NETPOOL_COMMANDS_PER_TENANT */
};
#define SBX_NETPOOL_THREADS 4
#define SBX_NETPOOL_SETUPS_PER_TENANT 2
#define SBX_NETPOOL_COMMANDS_PER_TENANT 8

/* done: on a setup thread, with the namespace (the callee's) or NULL and
 * rc (0, -ECANCELED when skip said so, or sbx_backend_net_prepare's
 * error); must not block. skip: asked on the setup thread just before the
 * setup begins (a command cancelled while it waited). */
typedef void (*sbx_netpool_done_fn)(void *ctx, struct sbx_egress_session *ns, int rc);
typedef bool (*sbx_netpool_skip_fn)(void *ctx);

/* Starts no thread. */
void sbx_netpool_new(struct sbx_netpool **out);
/* Before the first submission (later calls are ignored). */
void sbx_netpool_configure(struct sbx_netpool *p, const struct sbx_netpool_config *c);
/* Setups still waiting end with -ECANCELED; running ones are waited for. */
void sbx_netpool_free(struct sbx_netpool **p);
/* Queue req's setup (req and ctx must stay valid until done). 0, or
 * -SBX_E_TOO_MANY (the tenant holds commands_per_tenant: nothing
 * queued, nothing held), -ENOMEM/-EAGAIN (no thread could start). */
int sbx_netpool_submit(struct sbx_netpool *p, struct sbx_backend *b, const struct sbx_spawn_req *req,
		       sbx_netpool_done_fn done, sbx_netpool_skip_fn skip, void *ctx);
/* A command that needs no setup (a warm sandbox's namespace, sandbox/warm.h)
 * held as a submitted one is: 0, or -SBX_E_TOO_MANY (nothing held).
 * Release it the same way. */
int sbx_netpool_hold(struct sbx_netpool *p, uid_t uid);
/* The tenant's command submitted (or held) with success is over (reaped). */
void sbx_netpool_release(struct sbx_netpool *p, uid_t uid);
/* Setups waiting and running now (all tenants). */
void sbx_netpool_counts(struct sbx_netpool *p, unsigned *waiting, unsigned *running);
