#pragma once
/* The process-wide state every route reaches: configuration, store,
 * runner, backends, the tenant cache and metrics; and struct tenant. Types
 * only (and init/fini, routes/init.c): the tenant cache is
 * routes/tenant_cache.h, the tenants' slots routes/admit.h. Built by
 * server/ at start-up and handed to every request. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "auth/auth.h"
#include "common/config.h"
#include "common/nodes.h"
#include "http/route.h"

struct store;
struct sbx_runner;
struct sbx_backend;
struct sbx_workspace;
struct http_metrics;
struct http_hub;
struct http_watch;
struct route_execs;
struct route_admit;
struct http_audit_gate;
struct sbx_quota;
struct sbx_uids;
struct sbx_diskimg;
struct sbx_egress_gateway;

/* How tenants' disk use is bounded (disk-quota, chosen at start). */
enum disk_mode { DISK_NONE, DISK_PROJECT, DISK_IMAGE };

/* A tenant as the routes use it: its key, its workspace and its limits.
 * Reference-counted: a request holds one reference for its lifetime, so
 * a tenant removed meanwhile stays valid until its last request ends. */
struct tenant {
	char name[64];
	struct auth_key key; /* key.key points into keybuf, key.approver_key into approver_keybuf */
	unsigned char *keybuf, *approver_keybuf;
	struct sbx_workspace *ws;
	uid_t uid;
	gid_t gid;
	int64_t loaded_at_ms;
	int64_t incarnation;		 /* this life of the name (store_tenant.incarnation) */
	int refs;			 /* under app->tenants_lock */
	struct tenant_load *load;	 /* shared by every cached generation of this tenant */
	int quota_rc;			 /* its disk quota could not be applied: -errno (routes/storage.c) */
	char unserved[192];		 /* why it is not served here: uid mode, policy ("": served) */
	char quota_why[256];		 /* why quota_rc (image mode) */
	struct route_provider *provider; /* remote, ssh: files and commands elsewhere (routes/provider.h) */
	int64_t store_max_bytes, store_max_rows; /* its store budget, from its policy at load (0: none) */
	/* Image mode: its image's loop device, what its I/O budget binds
	 * (routes/storage.c; 0: none). */
	dev_t io_dev;
};

/* Work a tenant has running now; lives as long as the app, so that a
 * reloaded tenant entry and the requests still holding the old one count
 * the same slots. */
struct tenant_load {
	char name[64];
	int execs;   /* under app->tenants_lock */
	int pending; /* commands waiting for approval */
	int transfers;
	/* POST /exec requests waiting for one of its exec slots, oldest
	 * first (routes/admit.h), under app->tenants_lock. */
	struct route_admit *qhead, *qtail;
	int queued;
	int64_t held_stdin; /* inline stdin its waiting requests keep (route_tenant_hold_locked) */
};

/* What the exec admission queue did (routes/admit.c), under
 * app->tenants_lock; for /metrics (the waits: http_metrics). */
struct admit_stats {
	int64_t queued;			       /* waiting now, every tenant */
	uint64_t full, expired, left, stopped; /* refused; left: the client went away */
	uint64_t cancelled;		       /* POST /exec/{id}/cancel while waiting */
};

struct app {
	struct sbx_config *cfg;
	struct store *store;
	struct sbx_runner *runner;
	struct sbx_backend *backend;	     /* the default (configuration `backend`) */
	struct sbx_backend *const *backends; /* every backend offered (`backends`), started once */
	size_t nbackends;
	struct http_metrics *metrics;
	struct http_hub *hub;	   /* live events */
	struct http_watch *watch;  /* disconnect watcher for suspended requests */
	struct route_execs *execs; /* commands running now (routes/exec.c) */
	int64_t
	    store_seen; /* PRAGMA data_version last seen (routes/tenant_cache.c), under the store's lock */
	struct route_jobs *jobs;	    /* commands of provider tenants (routes/provider.h) */
	struct http_audit_gate *audit_gate; /* audit rows of requests naming no tenant, per address */
	struct http_env http;		    /* what the HTTP layer reaches: cfg, table, metrics, hooks */
	struct sbx_nodes nodes;		    /* cfg->nodes parsed: the cluster's other nodes */
	bool drop_privs;		    /* server runs as root: commands and files get tenant uids */
	struct sbx_quota *quota;	    /* project quotas of the workspaces' filesystem (server/) */
	char *store_dir;		    /* the directory of db-path: its free space is the store's */
	const struct sbx_uids *uids;	    /* how tenants get uids (sandbox/uids.h); NULL: as root */
	struct sbx_diskimg *diskimg;	    /* filesystem images per tenant (server/) */
	struct sbx_egress_gateway *egress;  /* every command with network goes through it (NULL: none) */
	enum disk_mode disk_mode;
	char *images_dir; /* <data-dir>/images: root images (routes/images.c) */
	int64_t started_at_ms;
	volatile bool stopping;

	pthread_mutex_t tenants_lock;
	struct tenant **tenants; /* cache, small: linear search */
	size_t ntenants;
	struct tenant_load **loads;
	size_t nloads;
	struct admit_stats admit;
	int64_t held_stdin; /* every tenant's load->held_stdin, under tenants_lock */
	/* A life of tenant name ended (removed, or removed and added again):
	 * what must not serve the next life is stopped (routes/init.c; called
	 * by the tenant cache, without its lock). */
	void (*life_ended)(struct app *a, const char *name, uid_t uid, int64_t incarnation, bool removed,
			   bool forget_storage);
};

/* Build a's state and wire the HTTP layer's hooks (routes/init.c); fini
 * frees what init made and the tenant cache. */
int route_app_init(struct app *a, struct sbx_config *cfg, struct store *store, char *err, size_t errsz);
void route_app_fini(struct app *a);

/* Containment (security.md item 10): whether every backend of bs (those
 * that start commands here) runs them inside cgroups, and the cgroup
 * layer has a controller for every nonzero default limit and budget of
 * cfg (mem-limit-bytes, tenant-mem-budget-bytes: memory; nproc-limit,
 * tenant-nproc-budget: pids; tenant-cpu-budget-millicores: cpu). false
 * with what is not enforced, and why, in out ("" when true); images:
 * tenants have disk images (the only devices an I/O budget applies to). The start
 * refuses on false unless use-cgroups=false or allow-uncontained; /readyz
 * then says degraded. */
bool route_containment_describe(const struct sbx_config *cfg, struct sbx_backend *const *bs, size_t n,
				bool images, char *out, size_t outsz);
