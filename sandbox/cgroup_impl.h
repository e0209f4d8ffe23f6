#pragma once
/* The cgroup layer's drivers (sandbox/cgroup.h): cgroup.c dispatches to
 * the one sbx_cgroup_probe chose. Only cgroup*.c include this. */
#include "sandbox/cgroup.h"

struct sbx_cgroup_driver {
	const char *name; /* "v2", "v1" */
	/* 0 when usable for root (caps filled, the driver set up: v2 moved
	 * the server into its leaf), -errno with caps->why otherwise. */
	int (*probe)(const char *root, struct sbx_cgroup_caps *caps);
	int (*prepare)(const char *root, uid_t uid, uint64_t seq, const struct sbx_limits *lim,
		       int fds[SBX_CGROUP_MAX]);
	void (*remove)(const char *root, uid_t uid, uint64_t seq, struct sbx_cgroup_outcome *out);
	int (*tenant_usage)(const char *root, uid_t uid, uint64_t *mem_bytes, uint64_t *nproc);
	int (*tenant_cpu)(const char *root, uid_t uid, uint64_t *usage_ns, uint64_t *throttled_ns);
	int (*tenant_pressure)(const char *root, uid_t uid,
			       struct sbx_cgroup_pressure *out);	/* NULL: -ENOTSUP */
	void (*kept)(const char *root, unsigned *busy, unsigned *idle); /* NULL: 0, 0 */
	int (*claim)(const char *root);
	int (*sweep)(const char *root);
	void (*release)(const char *root, int lock_fd);
};

extern const struct sbx_cgroup_driver sbx_cgroup_v1;
extern const struct sbx_cgroup_driver sbx_cgroup_v2;

/* Shared by the drivers (cgroup.c). */
bool sbx_cgroup_name_ok(const char *name);
int sbx_cgroup_write_file(const char *path, const char *s);
int sbx_cgroup_read_text(const char *path, char *buf, size_t bufsz);
int sbx_cgroup_read_u64(const char *path, uint64_t *out);
/* SIGKILL to every process listed in dir's cgroup.procs (a fresh open:
 * v1 caches the list per open file); how many were listed, or -errno. */
int sbx_cgroup_kill_listed(const char *dir);
/* An exclusive, non-blocking flock on the directory dir: the fd
 * (O_CLOEXEC, the caller's), -EBUSY when another process holds it, other
 * -errno. The drivers' claim of their root. */
int sbx_cgroup_lock_dir(const char *dir);
/* Every group below dir removed deepest first by remove (0: gone), the
 * one named keep directly below dir excepted (NULL: none), before (NULL:
 * nothing) called on each group before the groups below it; depth 0 at
 * the top, at most 4 levels. How many were removed. */
int sbx_cgroup_sweep_below(const char *dir, int depth, const char *keep, void (*before)(const char *group),
			   int (*remove)(const char *group));
