#pragma once
/* What a removed tenant leaves on disk: tenants/<name> (its workspace
 * with the spill files of its commands, or its disk.img). `tenant remove`
 * moves it to removed/<name>.<UTC time>.<life> (0700, the server's: no
 * tenant's uid reaches it) or, with --purge, deletes it; `tenant add`
 * refuses a name whose directory is still there unless told what to do. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sbx_config;

/* Whether tenants/<name> exists. */
bool srv_leftovers_present(const struct sbx_config *cfg, const char *name);
/* Move tenants/<name> aside (nothing there: 0, *dest ""); dest gets
 * where it went. -errno. */
int srv_leftovers_move_aside(const struct sbx_config *cfg, const char *name, int64_t life, char *dest,
			     size_t destsz);
/* Move aside, then delete what was moved: 0, or -errno with dest naming
 * what is left. */
int srv_leftovers_purge(const struct sbx_config *cfg, const char *name, int64_t life, char *dest,
			size_t destsz);
/* How many processes have real uid uid now (from /proc). */
int srv_uid_processes(uid_t uid);
/* At start, before serving: SIGKILL every process whose real uid is in
 * first .. first + count - 1 (the tenants' uids: what an earlier run left
 * where no cgroup holds it), again until none is alive (zombies do not
 * count) or timeout_ms passed. Returns how many were killed first; *left
 * how many were still alive at the end. */
int srv_uid_sweep(uid_t first, uint32_t count, int64_t timeout_ms, int *left);
