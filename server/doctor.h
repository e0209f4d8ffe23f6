#pragma once
/* The host checks (docs/doctor.md): one table of what a configuration
 * needs from the host, each check testing the actual thing (bwrap builds
 * a sandbox, /dev/net/tun opens, /dev/loop-control gives a loop device,
 * the store opens) and saying ok, missing (with the command or setting
 * that fixes it) or not needed by this configuration.
 *
 * Two callers, one table: `sandboxd doctor` runs every check and prints
 * them; `serve` runs them at start, phase by phase between its own steps,
 * refuses to start on every missing item the table marks as refusing
 * (all of a phase's at once) and logs the other missing items as
 * warnings. The checks make what they test (the uid setup, the backends,
 * the disk probes, the store) into struct srv_host, which serve then
 * serves with; doctor claims nothing another server holds and creates
 * no file. */
#include <stdbool.h>
#include <stddef.h>

#include "common/config.h"
#include "routes/app.h"
#include "sandbox/uids.h"

#define SRV_BACKENDS_MAX 4

enum srv_check_status { SRV_CHECK_OK, SRV_CHECK_MISSING, SRV_CHECK_NOT_NEEDED };

/* Serve's steps, in order; a check runs in one of them. */
enum srv_phase {
	SRV_PHASE_CONFIG, /* nothing made yet: the clock, the configuration, the TLS files */
	SRV_PHASE_UIDS,	  /* single-threaded: the tenants' uids (subuid: a user namespace), the data dir */
	SRV_PHASE_STORE,  /* disk quotas (image mode: the server's own mount namespace), the store, its
			     tenants' uids */
	SRV_PHASE_HOST,	  /* the uid range's claim, the backends, cgroups, network, seccomp */
	SRV_PHASES,
};

struct srv_check {
	const char *name; /* static: "bwrap", "tun", ... */
	enum srv_check_status status;
	bool refuse;	   /* missing, and serve does not start */
	char detail[1200]; /* what was found */
	char fix[800];	   /* missing: the command or setting that fixes it ("" otherwise) */
};

/* What the checks look at and make. */
struct srv_host {
	struct sbx_config *cfg;
	bool serving; /* serve: create what is missing, keep the claims; doctor: look only */
	struct sbx_uids uids;
	bool uids_ready;
	int uids_lock; /* root: the uid range's claim, @sandboxd/uid-base/<N> (-1: none) */
	struct sbx_quota *quota;
	struct sbx_diskimg *diskimg;
	enum disk_mode disk_mode;
	int images_lock; /* image mode, serving: <data>/images.lock (-1: none) */
	struct store *store;
	struct sbx_backend *backends[SRV_BACKENDS_MAX]; /* each of `backends` that starts commands here */
	size_t nbackends;
	struct sbx_backend *backend; /* the default: one of backends */
	int backends_rc;	     /* 0, or why a backend could not be made */
	/* serve: the egress gateway every backend's commands with network
	 * go through (server/serve.c makes it); freed after the backends
	 * (their last sessions' records) and before the store. */
	struct sbx_egress_gateway *egress;
};

/* h for cfg, nothing made yet. */
void srv_host_init(struct srv_host *h, struct sbx_config *cfg, bool serving);
/* Release what the checks made, in order: backends, the egress gateway,
 * store, disk images, claims, quota probe. */
void srv_host_fini(struct srv_host *h);

/* Run the checks of phase into out (at most max), in table order: how
 * many. Checks of a phase may use what the earlier phases made; after a
 * refusal the rest of the phase only looks, as doctor's do (serving: no
 * store migrated, nothing claimed, since serve stops there). */
size_t srv_checks_run(struct srv_host *h, enum srv_phase phase, struct srv_check *out, size_t max);

/* serve: run phase, say every missing item on stderr (refusals, with
 * their fix) or in the log (warnings). 0 to go on; else the exit status:
 * 2 when the configuration itself is wrong, 1 otherwise. */
int srv_checks_start(struct srv_host *h, enum srv_phase phase);

/* Whether uid:gid can reach dir (sbx_workspace_reachable) as a check:
 * missing and refusing, with the chmod that fixes it, when a directory on
 * the way is not searchable; who names the uid ("tenant acme (uid 100001)").
 * Forks: before any thread. */
void srv_check_reach(const char *dir, uid_t uid, gid_t gid, const char *who, struct srv_check *c);
