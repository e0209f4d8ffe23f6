#pragma once
/* Internal to the backends: the vtable each backend fills in, and what
 * they share above the child launcher (sandbox/spawn.h). */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/backend.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/spawn.h"

struct sbx_egress_session;

struct sbx_backend_ops {
	const char *name;
	const char *isolation; /* what it isolates, one line, for /readyz */
	int (*init)(struct sbx_backend *b, const struct sbx_backend_config *cfg);
	void (*fini)(struct sbx_backend *b);
	/* Fill l->path, argv, envp, cwd, keep_fds for req. */
	int (*prepare)(struct sbx_backend *b, const struct sbx_spawn_req *req, struct sbx_launch *l);
	/* Backend-specific part of the health line; 0 or -SBX_E_BACKEND. */
	int (*health)(struct sbx_backend *b, char *msg, size_t msgsz);
	bool net;  /* enforces sbx_spawn_req.net_allow: joins l->netns_fd's namespace */
	bool warm; /* prepare() makes warm sandboxes (l->warm_ctl) */
};

/* Running commands' network namespaces, by seq. */
struct sbx_backend_net {
	uint64_t seq;
	struct sbx_egress_session *ns;
	struct sbx_backend_net *next;
};

/* The egress session of req (with net_allow) on backend b: the backend's
 * network health, the rules parsed, sbx_egress_session_open; failures are
 * logged with the command's seq. 0, -EINVAL, -SBX_E_BACKEND. Blocks when
 * the gateway's pool is empty: a setup thread's (sandbox/netpool.h). */
struct sbx_egress_session;
struct sbx_spawn_req;
int sbx_backend_net_prepare(struct sbx_backend *b, const struct sbx_spawn_req *req,
			    struct sbx_egress_session **out);
/* The session's binding to req's command (tenant, exec, subject, seq). */
struct sbx_egress_bind sbx_backend_net_bind(const struct sbx_spawn_req *req, struct sbx_egress_rules *rules);
/* Command seq's session from now until sbx_backend_reap (which closes it). */
void sbx_backend_net_keep(struct sbx_backend *b, uint64_t seq, struct sbx_egress_session *ns);
/* Close command seq's session (its summary into sum, optional), if it has one. */
struct sbx_egress_summary;
void sbx_backend_net_down(struct sbx_backend *b, uint64_t seq, struct sbx_egress_summary *sum);

struct sbx_backend {
	const struct sbx_backend_ops *ops;
	pthread_mutex_t net_mu;
	struct sbx_backend_net *nets;
	struct sbx_egress_gateway *egress; /* sbx_backend_set_egress; not owned */
	bool cgroups;			   /* use_cgroups asked for and the host allows it */
	char uncontained_why[512];	   /* without cgroups: why ("" with them) */
	char *cgroup_root;
	int cgroup_lock; /* flock on the root: this server's alone (-1: no cgroups) */
	_Atomic uint64_t refused_limits;
	struct sbx_warm *warm; /* the warm pool (NULL: none) */
	void *priv;
};

/* sbx_backend_spawn without the warm pool; with warm_ctl >= 0 the
 * sandbox of a warm pool (struct sbx_launch's warm_ctl and warm_exe). */
int sbx_backend_launch(struct sbx_backend *b, const struct sbx_spawn_req *req, int warm_ctl, int warm_exe,
		       pid_t *pid, int *pidfd);

extern const struct sbx_backend_ops sbx_backend_local_ops;
extern const struct sbx_backend_ops sbx_backend_bwrap_ops;

/* cwd_rel is "" or a relative path without "." / ".." components. */
bool sbx_cwd_rel_ok(const char *cwd_rel);

/* The workspace-relative cwd names a directory beneath the workspace
 * (resolved with RESOLVE_BENEATH: a symlink cannot reach the host).
 * Errors: -ENOENT, -ENOTDIR, -EXDEV (escape attempt), -errno. */
int sbx_cwd_check(const char *workspace_host_dir, const char *cwd_rel);
