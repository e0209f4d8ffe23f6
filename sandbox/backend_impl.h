#pragma once
/* Internal to the backends: the vtable each backend fills in, and the one
 * child launcher they share (clone(CLONE_VM|CLONE_VFORK|CLONE_PIDFD) with a
 * small async-signal-safe child on its own stack; no fork()). */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/backend.h"
#include "sandbox/egress/gateway.h"

struct sbx_egress_session;

/* A growable NULL-terminated array of owned strings (argv, envp). */
struct sbx_strv {
	char **v;
	size_t n, cap;
};
void sbx_strv_add(struct sbx_strv *sv, const char *s);
void sbx_strv_addf(struct sbx_strv *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbx_strv_free(struct sbx_strv *sv);

#define SBX_LAUNCH_MAX_RLIMITS 5
#define SBX_LAUNCH_MAX_CGROUPS 4 /* SBX_CGROUP_MAX (sandbox/cgroup.h) */
#define SBX_LAUNCH_MAX_KEEP 24	 /* bwrap: 8 of its own and up to 9 of an image (sandbox/rootimg.h) */

/* Everything the child does between clone and execve, decided in the
 * parent so the child only makes system calls. */
struct sbx_launch {
	/* filled by the backend's prepare() */
	const char *path; /* absolute path to execve */
	struct sbx_strv argv;
	struct sbx_strv envp;
	char *cwd;			   /* chdir before exec, or NULL */
	int keep_fds[SBX_LAUNCH_MAX_KEEP]; /* keep_fds[i] becomes fd 3 + i in the child; owned */
	int n_keep;
	bool exec_fail_is_backend; /* execve failing means the backend is unusable */

	/* filled by the dispatch */
	int std_fds[3]; /* become 0, 1, 2 */
	struct {
		int resource;
		uint64_t value;
	} rlimits[SBX_LAUNCH_MAX_RLIMITS];
	int n_rlimits;
	bool drop_privs;
	uid_t uid;
	gid_t gid;
	int cgroup_fds[SBX_LAUNCH_MAX_CGROUPS]; /* cgroup.procs; the child writes "0\n" */
	int n_cgroup_fds;
	bool pdeathsig; /* PR_SET_PDEATHSIG SIGKILL after dropping privileges */
	int netns_fd;	/* setns(CLONE_NEWNET) into it while still privileged (-1: stay); not owned */
	bool net;	/* the command has network (net_allow): netns_fd is its egress namespace */

	/* filled by the warm pool (sandbox/warm.h); -1 for a command: a warm
	 * sandbox, whose command is the launcher (warm_exe, a sealed memfd)
	 * waiting on its control socket (warm_ctl); not owned */
	int warm_ctl, warm_exe;

	/* written by the child on failure (shared memory, CLONE_VM) */
	volatile int child_err;
	volatile int child_step;
};

void sbx_launch_init(struct sbx_launch *l);
/* Hand fd (owned from now on) to the child as fd 3 + n_keep; returns that
 * number, or -EMFILE (the fd is closed) when there is no room. */
int sbx_launch_keep(struct sbx_launch *l, int fd);
/* Frees argv, envp, cwd and closes the keep_fds. */
void sbx_launch_release(struct sbx_launch *l);
/* Start l in a new session. On success *pid and *pidfd (O_CLOEXEC) are
 * set. Errors: -errno of the failing step in the child (execve, chdir,
 * setresuid, ...) or of clone. */
int sbx_launch_start(struct sbx_launch *l, pid_t *pid, int *pidfd);

/* Wait for pid (retrying EINTR); returns the wait status or -errno. */
int sbx_wait_status(pid_t pid);

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

struct sbx_backend_net; /* running commands' network namespaces, by seq */

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

/* Base environment shared by the backends. */
#define SBX_ENV_PATH "/usr/local/bin:/usr/bin:/bin"
#define SBX_ENV_LANG "C.UTF-8"

/* The command's argv: "/bin/sh -c <command>", behind "setsid --ctty
 * --wait" for a terminal (req->tty). Returns the program to execve. */
#define SBX_SETSID_PATH "/usr/bin/setsid"
const char *sbx_command_argv(struct sbx_strv *argv, const struct sbx_spawn_req *req);

/* cwd_rel is "" or a relative path without "." / ".." components. */
bool sbx_cwd_rel_ok(const char *cwd_rel);

/* The workspace-relative cwd names a directory beneath the workspace
 * (resolved with RESOLVE_BENEATH: a symlink cannot reach the host).
 * Errors: -ENOENT, -ENOTDIR, -EXDEV (escape attempt), -errno. */
int sbx_cwd_check(const char *workspace_host_dir, const char *cwd_rel);
