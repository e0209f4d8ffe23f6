#pragma once
/* Warm sandboxes: bwrap sandboxes made ahead, each waiting for exactly
 * one command (architecture.md, "threads"; README, "Warm sandboxes").
 *
 * A warm sandbox is what a cold spawn makes (sandbox/backend_bwrap.c: the
 * same namespaces, mounts, /etc, seccomp filter, uid, rlimits and cgroup
 * limits), started ahead by the pool's own long-lived thread with a small
 * static launcher (sandbox/warm/launcher.c) as its command, blocked on a
 * control socket. A command of the same shape takes one: the server
 * sends it the command's std fds, program, argv, cwd and environment, the
 * launcher execs, and the pool makes another off the hot path.
 *
 * The shape: what the sandbox is made of and the command cannot choose,
 * namely the tenant's uid and gid, its workspace (path and inode), the
 * root image (path and inode, or the host's /usr) and every limit. One
 * shape per tenant: a command of another shape (its policy's limits or
 * its image changed, its workspace was replaced) flushes the tenant's
 * waiting sandboxes and starts cold; so does one whose workspace or image
 * is no longer the inode its sandboxes were made on. Commands with
 * network have a shape of their own: their sandboxes wait in a namespace
 * of the egress gateway's pool, bound to the command when it takes one
 * (sbx_warm_claim, in place of the setup of sandbox/netpool.h).
 *
 * Bounds: at most per_tenant waiting (or being made) per tenant and
 * kind (with network, without), each in a cgroup of its own below the
 * tenant's (its memory and processes
 * count against the tenant's budgets, as a command's do); one made at a
 * time, tenants in turn; a tenant's sandboxes idle for idle_ms are
 * ended, and the tenant forgotten. Every sandbox dies with the pool's
 * thread (PR_SET_PDEATHSIG, bwrap --die-with-parent): a killed server
 * leaves none behind.
 *
 * Threads: sbx_warm_take, _claim, _unclaim and _group from any thread. */
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/backend.h"

struct sbx_backend;
struct sbx_spawn_req;
struct sbx_warm;

/* A pool for backend b (bwrap), and its thread. -errno (the launcher
 * cannot be made: no memfd, no thread). */
int sbx_warm_new(struct sbx_warm **out, struct sbx_backend *b, unsigned per_tenant, unsigned idle_ms);
/* Ends every waiting sandbox and the thread; after every command taken
 * from the pool was reaped (their parent is the pool's thread). */
void sbx_warm_free(struct sbx_warm **w);

/* Start req in a warm sandbox of its shape: 1 with *pid and *pidfd set
 * (as sbx_backend_spawn's), 0 when none fits (then spawn it cold; the
 * pool learns the shape and makes some), -errno for a request the cold
 * path would refuse too (-EINVAL environment, a cwd that is not a
 * directory of the workspace). A networked req starts in req->warm_box
 * (claimed for it), never in another. */
int sbx_warm_take(struct sbx_warm *w, const struct sbx_spawn_req *req, pid_t *pid, int *pidfd);

/* Commands with network: a waiting sandbox of req's shape in its own
 * egress namespace, out of the pool for req (never blocks), or NULL
 * (none waits; the pool learns the shape). The caller sets it as
 * req->warm_box for sbx_warm_take (which binds the namespace's session to
 * the command: its exec id, its rules of now), or ends it unused with
 * sbx_warm_unclaim (accepts NULL; sets *bx NULL). */
struct sbx_warm_box;
struct sbx_warm_box *sbx_warm_claim(struct sbx_warm *w, const struct sbx_spawn_req *req);
void sbx_warm_unclaim(struct sbx_warm *w, struct sbx_warm_box **bx);

/* The cgroup seq of command seq: its warm sandbox's when it took one
 * (forgotten with this call), else seq itself. */
uint64_t sbx_warm_group(struct sbx_warm *w, uint64_t seq);

/* End the waiting sandboxes of uid (its tenant was removed). */
void sbx_warm_flush(struct sbx_warm *w, uid_t uid);

void sbx_warm_stats(struct sbx_warm *w, struct sbx_warm_stats *out);
