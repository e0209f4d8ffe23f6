#pragma once
/* Isolation backends behind one small interface: spawn a command with a
 * cwd, an environment and limits; report health. "bwrap" (bubblewrap,
 * namespaces, seccomp, rlimits, cgroups where allowed) is the default;
 * "local" runs /bin/sh -c on the host and exists for development only. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sbx_limits {
	uint64_t mem_bytes;   /* RLIMIT_AS and cgroup memory.limit (0: none) */
	uint64_t nproc;	      /* cgroup pids.max; RLIMIT_NPROC without cgroups (0: none) */
	uint64_t fsize_bytes; /* RLIMIT_FSIZE (0: none) */
	uint64_t nofile;      /* RLIMIT_NOFILE (0: keep) */
	uint64_t tmp_bytes;   /* size of the private /tmp (bwrap) */
	/* The tenant's budget: all its commands together (its cgroup parent
	 * u<uid>); 0: none. Where cgroups are in force only (the CPU budget
	 * where the v1 cpu hierarchy is too). */
	uint64_t tenant_mem_bytes;
	uint64_t tenant_nproc;
	uint64_t tenant_cpu_millicores; /* CFS quota: 1000 = one core's time */
	/* The tenant's I/O budget on its own disk (io_dev, the loop device of
	 * its disk image; 0: none, then these are ignored): bytes and
	 * operations per second, read and write; 0: none. cgroup v2 io.max
	 * (v1 blkio.throttle where the host has it); a budget that cannot be
	 * applied refuses the command. */
	uint64_t tenant_io_read_bps, tenant_io_write_bps;
	uint64_t tenant_io_read_iops, tenant_io_write_iops;
	dev_t io_dev;
};

struct sbx_warm_box; /* sandbox/warm.h */

struct sbx_spawn_req {
	const char *command;		/* one argv element: /bin/sh -c <command> */
	const char *workspace_host_dir; /* bound read-write at /workspace */
	const char *cwd_rel;		/* workspace-relative cwd, "" = /workspace */
	const char *const *env; /* NULL-terminated "NAME=value", validated, added to the clean base env */
	/* NULL: no network at all (as always); else the tenant's egress
	 * rules (sandbox/egress/rules.h) as the command starts: its
	 * connections go through the backend's egress gateway
	 * (sbx_backend_set_egress), which decides each on the tenant's rules
	 * of that moment (sbx_egress_gateway_set_rules). net_tenant names
	 * the tenant (rules and records), net_exec_id and net_sub the
	 * records' exec and token subject (may be NULL). */
	const char *net_allow;
	const char *net_tenant, *net_exec_id, *net_sub;
	/* With net_allow: the command's egress session already opened for
	 * it off the runner thread (sandbox/netpool.h), or NULL (then the
	 * spawn opens it itself, blocking). The spawn takes it whatever it
	 * returns. */
	struct sbx_egress_session *net_ready;
	/* With net_allow: a warm sandbox claimed for the command, with its
	 * own egress session (sbx_backend_warm_claim), or NULL. The spawn
	 * takes it whatever it returns. */
	struct sbx_warm_box *warm_box;
	/* NULL: the host's /usr; else the host path of a root image's root
	 * filesystem (sandbox/rootimg.h, held open by the caller until the
	 * command ends), whose /usr, /bin... and /etc pieces are bound instead.
	 * bwrap only; the local backend refuses it (-EINVAL). */
	const char *rootfs;
	uid_t uid; /* drop to uid:gid before exec when drop_privs */
	gid_t gid;
	bool drop_privs;
	struct sbx_limits limits;
	uint64_t seq; /* server-made command number (the runner's job id): names its cgroup and
			 network namespace; unique among running commands */
	int stdin_fd, stdout_fd,
	    stderr_fd; /* the child's ends (-1: /dev/null); the caller closes its copies */
	/* The std fds are one pseudo-terminal's slave: the command runs under
	 * `setsid --ctty --wait` (util-linux) inside the sandbox, which makes
	 * that terminal the controlling one of the command's own session. */
	bool tty;
};

struct sbx_backend_config {
	const char *name; /* "bwrap" or "local" */
	bool use_cgroups; /* cgroup limits and budgets (v2 or v1 driver) where the host allows them */
	const char
	    *cgroup_root; /* the server's own group, e.g. "sandboxd/<uid-base>" (NULL: "sandboxd/default") */
	const char *bwrap_path; /* NULL: /usr/bin/bwrap */
	uid_t probe_uid; /* the unprivileged uid (and gid) the start probe drops to as root (0: 65534) */
	/* Another backend of this process already claimed (and swept)
	 * cgroup_root: share it, claim nothing. Commands of every backend of
	 * one server are numbered by one runner, so their groups never clash. */
	bool cgroup_shared;
	/* Warm sandboxes (sandbox/warm.h): at most this many made ahead per
	 * tenant (0: none, every command starts cold), ended after
	 * warm_idle_ms unused. bwrap only. */
	unsigned warm_per_tenant, warm_idle_ms;
};

struct sbx_backend;

/* Errors: -EINVAL (unknown name), -ENOENT (bwrap not installed), -EBUSY
 * (another live server holds cfg->cgroup_root), ... */
int sbx_backend_new(struct sbx_backend **out, const struct sbx_backend_config *cfg);
void sbx_backend_free(struct sbx_backend **b);
const char *sbx_backend_name(const struct sbx_backend *b);
/* Debugging and benchmarks (sandboxd debug bwrap-argv): what b would
 * start for req (its prepare step only: no cgroup, rlimit or uid of the
 * dispatch), written into the directory dir, which it creates (0700;
 * -EEXIST if anything, a symlink included, is there) and opens without
 * following a link, as new files:
 * "path" (the program), "argv" (NUL-separated) and "fd-N" for every fd
 * the program gets (its contents from offset 0; N its number there).
 * Starts nothing. Errors: -errno (-EEXIST: dir exists). */
int sbx_backend_dump(struct sbx_backend *b, const struct sbx_spawn_req *req, const char *dir);

/* A runner thread's spawn resources: a block of low fd numbers (reserved
 * on /dev/null placeholders, O_CLOEXEC) and the child's stack. With one
 * bound, the thread's spawns no longer copy the server's fd table, so
 * their cost does not grow with its open connections (sandbox/backend.c
 * explains how). Make one per runner thread while the server holds few
 * fds (at start, before it listens): the slots are the lowest fds free
 * then, and a spawn costs in proportion to the highest.
 * sbx_spawner_new: -errno (EMFILE, ENOMEM). sbx_spawner_bind: the calling
 * thread's spawns use sp from now on (thread-local; one thread per
 * spawner; sp outlives the binding). sbx_spawner_free: after the thread
 * that bound it stopped spawning; NULL-safe. */
struct sbx_spawner;
int sbx_spawner_new(struct sbx_spawner **out);
void sbx_spawner_bind(struct sbx_spawner *sp);
void sbx_spawner_free(struct sbx_spawner **sp);

/* Start the command in a new process group (or session) without fork()
 * (posix_spawn, vfork or clone(CLONE_VM|CLONE_VFORK)). Must be called from
 * a long-lived runner thread that outlives the command (bwrap's
 * --die-with-parent and PR_SET_PDEATHSIG follow the spawning thread);
 * several runner threads may call it at once (sandbox/runner.h).
 * Every fd above 2 is closed in the child except what bwrap must read.
 * *pid is the process (group leader); *pidfd a pidfd for it (O_CLOEXEC).
 * When cgroups are in force and the command's group cannot be made or
 * joined, the command does not run (fail closed): -SBX_E_BACKEND, and
 * sbx_backend_refused_limits counts it. With req->net_allow the command
 * runs in a network namespace of its own whose only way out is the
 * egress gateway (sandbox/egress/gateway.h); a backend that cannot
 * enforce it (local), or bwrap when sbx_backend_net_health fails, refuses
 * with -SBX_E_BACKEND; bad rules are -EINVAL.
 * Errors: -SBX_E_BACKEND when the backend cannot start anything, else
 * -errno. */
int sbx_backend_spawn(struct sbx_backend *b, const struct sbx_spawn_req *req, pid_t *pid, int *pidfd);

/* Clean up after a command ended (remove its cgroup; close its egress
 * session, which ends its connections and frees its namespace). Call
 * once per successful spawn. out (optional) gets why it ended as its
 * cgroup saw it (sandbox/cgroup.h: OOM-killed, a fork refused by a pids
 * limit; all false without cgroups); egress (optional) what its network
 * refused (zero without network). */
struct sbx_cgroup_outcome;
struct sbx_egress_summary;
void sbx_backend_reap(struct sbx_backend *b, const struct sbx_spawn_req *req, struct sbx_cgroup_outcome *out,
		      struct sbx_egress_summary *egress);

/* At start: remove the cgroups (and kill the processes) an earlier run of
 * this server left behind, e.g. after a kill -9. Returns how many groups
 * were removed. */
int sbx_backend_sweep(struct sbx_backend *b);

/* What a tenant's commands use together now (its cgroup parent): memory
 * in bytes and processes. -ENOENT when none has run yet, -ENOTSUP
 * without cgroups. */
int sbx_backend_tenant_usage(struct sbx_backend *b, uid_t uid, uint64_t *mem_bytes, uint64_t *nproc);

/* The CPU time of a tenant's commands together (its cgroup parent), in
 * ns since its group was made, and how long its budget held them back.
 * -ENOENT when none has run yet, -ENOTSUP without cgroups or cpuacct. */
int sbx_backend_tenant_cpu(struct sbx_backend *b, uid_t uid, uint64_t *usage_ns, uint64_t *throttled_ns);

/* A tenant's pressure stall information (sandbox/cgroup.h: memory, cpu
 * and io of its cgroup parent). -ENOENT when none has run yet, -ENOTSUP
 * without cgroups, on v1, or on a kernel without PSI. */
struct sbx_cgroup_pressure;
int sbx_backend_tenant_pressure(struct sbx_backend *b, uid_t uid, struct sbx_cgroup_pressure *out);

/* Whether tenants' CPU budgets are in force (cgroups and the v1 cpu
 * hierarchy); *usage (optional) whether their usage can be read. */
bool sbx_backend_cpu(const struct sbx_backend *b, bool *usage);

/* The command cgroups kept for reuse (sandbox/cgroup.h): busy holding a
 * command, idle waiting for the tenant's next one; 0 and 0 without cgroups. */
void sbx_backend_kept_groups(const struct sbx_backend *b, unsigned *busy, unsigned *idle);

/* Whether b's commands run inside cgroups (the layer's driver in use);
 * false: rlimits only (use-cgroups off, not root, or a host without a
 * usable hierarchy), which the server then reports as uncontained. */
bool sbx_backend_contained(const struct sbx_backend *b);

/* Why b's commands run without cgroups ("" when they run inside them):
 * "use-cgroups=false", not root, or what the layer's probe found missing
 * and the fix (sbx_cgroup_caps's why). For the start's refusal and
 * /readyz. */
const char *sbx_backend_uncontained_why(const struct sbx_backend *b);

/* Commands refused because their limits could not be applied. */
uint64_t sbx_backend_refused_limits(const struct sbx_backend *b);

/* What the backend isolates, in one line (static), for /readyz. */
const char *sbx_backend_isolation(const struct sbx_backend *b);

/* 0 when usable; fills msg with a one-line status either way, e.g.
 * "bwrap 0.8.0; cgroup memory+pids: v1; seccomp: on". */
int sbx_backend_health(struct sbx_backend *b, char *msg, size_t msgsz);

/* The egress gateway commands with net_allow go through (the server's,
 * one for every backend; NULL: none, then such commands are refused).
 * Set before the first command; not owned. */
struct sbx_egress_gateway;
void sbx_backend_set_egress(struct sbx_backend *b, struct sbx_egress_gateway *g);

/* Whether this backend can run a command with net_allow here: 0, or
 * -SBX_E_BACKEND; msg gets the gateway's health line, or why the backend
 * cannot (local cannot filter, no gateway). For /readyz. */
int sbx_backend_net_health(struct sbx_backend *b, char *msg, size_t msgsz);

/* The warm pool's figures (sandbox/warm.h; all 0 without one), and an end
 * to a tenant's waiting sandboxes (its tenant or workspace was removed). */
struct sbx_warm_stats {
	uint64_t taken;	 /* commands that started in a warm sandbox */
	uint64_t cold;	 /* commands that could have, but found none waiting */
	uint64_t made;	 /* sandboxes made ready */
	uint64_t failed; /* sandboxes that never became ready */
	uint64_t ended;	 /* waiting ones ended unused: idle, flushed, stopped */
	unsigned waiting;
	unsigned per_tenant;
};

void sbx_backend_warm_stats(struct sbx_backend *b, struct sbx_warm_stats *out);
/* A command with net_allow: a warm sandbox of its shape waiting with its
 * egress namespace, taken out of the pool for it (then no network setup
 * is needed: set it as req->warm_box and spawn), or NULL (none waits;
 * the pool learns the shape). Never blocks. unclaim ends one that was
 * not spawned (accepts NULL; sets *bx NULL). */
struct sbx_warm_box *sbx_backend_warm_claim(struct sbx_backend *b, const struct sbx_spawn_req *req);
void sbx_backend_warm_unclaim(struct sbx_backend *b, struct sbx_warm_box **bx);
void sbx_backend_warm_flush(struct sbx_backend *b, uid_t uid);
