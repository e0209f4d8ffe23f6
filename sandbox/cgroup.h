#pragma once
/* cgroup v1 memory and pids limits for one command (the hierarchies this
 * kind of host gives root; the v2 mount has no controllers). Everything
 * here degrades: a failure means "rlimits only", never a failed spawn. */
#include <stdbool.h>

struct sbx_limits;

/* true when /sys/fs/cgroup/{memory,pids} are v1 hierarchies we can write. */
bool sbx_cgroup_probe(void);

/* name: "a/b/c" of [A-Za-z0-9_.-] components, no "." or "..". */
bool sbx_cgroup_name_ok(const char *name);

/* Create <hier>/<name> in memory and pids, set memory.limit_in_bytes and
 * pids.max from lim (when non-zero) and open each cgroup.procs (O_WRONLY,
 * O_CLOEXEC) into fds[0..1]. Returns the number of fds opened (2), or
 * -errno with nothing left open (groups created are removed). */
int sbx_cgroup_prepare(const char *name, const struct sbx_limits *lim, int fds[2]);

/* Kill whatever is left in the groups and rmdir them. */
void sbx_cgroup_remove(const char *name);
