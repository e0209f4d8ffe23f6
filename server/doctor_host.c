/* The checks of the host's kernel and tools: the backends (bwrap), user
 * namespaces, the commands' seccomp filter, cgroups, and the network
 * commands may ask for (the egress gateway's namespaces). */
#include "server/doctor_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/xmalloc.h"
#include "routes/policy.h"
#include "sandbox/backend.h"
#include "sandbox/cgroup.h"
#include "sandbox/diskimg.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/quota.h"
#include "sandbox/registry.h"
#include "sandbox/seccomp.h"
#include "sandbox/workspace.h"
#include "server/cli.h"
#include "server/datadir.h"
#include "store/store.h"

/* ---- backends, user namespaces, seccomp, cgroups ---- */

/* Every backend of `backends` that starts commands here, once: the first
 * serving one claims the server's cgroup root for all; doctor claims
 * nothing (another server may hold it) and sweeps nothing. */
static int make_backends(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	/* cgroups are host-wide: the uid range (distinct per server on a
	 * host) names this server's own group. */
	char cgroup_root[64];
	snprintf(cgroup_root, sizeof cgroup_root, "sandboxd/%lld", (long long)cfg->uid_base);
	for (const char *q = cfg->backends; *q;) {
		q += strspn(q, ", ");
		size_t len = strcspn(q, ", ");
		char name[16];
		snprintf(name, sizeof name, "%.*s", (int)len, q);
		const struct sbx_backend_kind *k = sbx_backend_kind_find(q, len);
		q += len;
		/* remote and ssh are tenant-level (routes/provider.h): nothing to start. */
		bool started = !len || (k && !k->on_host);
		for (size_t i = 0; i < h->nbackends; i++)
			started |= strcmp(sbx_backend_name(h->backends[i]), name) == 0;
		if (started || h->nbackends == SRV_BACKENDS_MAX)
			continue;
		struct sbx_backend_config bc = {.name = name,
						.use_cgroups = cfg->use_cgroups,
						.cgroup_root = cgroup_root,
						.cgroup_shared = !h->serving || h->nbackends > 0,
						.warm_per_tenant = h->serving ? (unsigned)cfg->warm_pool : 0,
						.warm_idle_ms = (unsigned)cfg->warm_idle_s * 1000,
						.probe_uid = h->uids_ready ? sbx_uids_probe_id(&h->uids) : 0};
		struct sbx_backend *b = NULL;
		int rc = sbx_backend_new(&b, &bc);
		if (rc < 0) {
			if (rc == -EBUSY) {
				DETAIL(
				    c,
				    "another sandboxd on this host runs with uid-base %lld (its cgroups %s "
				    "and its tenants' uids)",
				    (long long)cfg->uid_base, cgroup_root);
				FIX(c, "give each server its own --set uid-base=N");
			} else if (rc == -ENOENT) {
				DETAIL(c, "backend %s unavailable: bwrap is not installed", name);
				FIX(c, "apt-get install bubblewrap");
			} else {
				DETAIL(c, "backend %s unavailable: %s", name, sbx_strerror(rc));
				FIX(c, "%s",
				    rc == -EACCES ? "let the server's user run /usr/bin/bwrap"
						  : "see the error");
			}
			doctor_missing(c, true);
			return rc;
		}
		h->backends[h->nbackends++] = b;
		if (strcmp(cfg->backend, name) == 0)
			h->backend = b;
	}
	return 0;
}

static struct sbx_backend *find_backend(const struct srv_host *h, const char *name)
{
	for (size_t i = 0; i < h->nbackends; i++)
		if (strcmp(sbx_backend_name(h->backends[i]), name) == 0)
			return h->backends[i];
	return NULL;
}

void check_bwrap(struct srv_host *h, struct srv_check *c)
{
	if (h->nbackends == 0 && h->backends_rc == 0)
		h->backends_rc = make_backends(h, c);
	if (h->backends_rc < 0)
		return;
	if (!doctor_listed(h->cfg->backends, "bwrap")) {
		DETAIL(c, "backends=%s", h->cfg->backends);
		doctor_not_needed(c);
		return;
	}
	char msg[256] = "";
	sbx_backend_health(find_backend(h, "bwrap"), msg, sizeof msg);
	DETAIL(c, "%s", msg);
}

/* A check with nothing to look at: bwrap failed to start (missing, see
 * bwrap; unchecked says so), or no backend of its kind is configured
 * (not needed; absent says so). */
static void without_bwrap(const struct srv_host *h, struct srv_check *c, const char *unchecked,
			  const char *absent)
{
	if (h->backends_rc < 0) {
		DETAIL(c, "%s", unchecked);
		FIX(c, "see bwrap");
		doctor_missing(c, false);
	} else {
		DETAIL(c, "%s", absent);
		doctor_not_needed(c);
	}
}

/* The kernel's knobs that forbid unprivileged user namespaces, as a fix. */
static void userns_fix(struct srv_check *c)
{
	static const struct {
		const char *path, *bad, *fix;
	} knob[] = {
	    {"/proc/sys/kernel/unprivileged_userns_clone", "0",
	     "sysctl -w kernel.unprivileged_userns_clone=1"},
	    {"/proc/sys/user/max_user_namespaces", "0", "sysctl -w user.max_user_namespaces=15000"},
	    {"/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
	     "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile for bwrap)"},
	};
	for (size_t i = 0; i < sizeof knob / sizeof knob[0]; i++) {
		char v[32] = "";
		FILE *f = fopen(knob[i].path, "re");
		if (!f)
			continue;
		if (fgets(v, sizeof v, f) && strncmp(v, knob[i].bad, strlen(knob[i].bad)) == 0 &&
		    (v[strlen(knob[i].bad)] == '\n' || v[strlen(knob[i].bad)] == '\0')) {
			fclose(f);
			FIX(c, "%s (and in /etc/sysctl.d/ to keep it)", knob[i].fix);
			return;
		}
		fclose(f);
	}
	FIX(c, "allow user namespaces: in a container run it with --security-opt seccomp=unconfined "
	       "--security-opt apparmor=unconfined (or --privileged); on a host check "
	       "user.max_user_namespaces and the LSM's policy for bwrap");
}

/* bwrap's start probe: a real sandbox (`--unshare-all --unshare-user`,
 * /bin/true) as an unprivileged uid. */
void check_userns(struct srv_host *h, struct srv_check *c)
{
	struct sbx_backend *b = find_backend(h, "bwrap");
	char msg[256] = "";
	if (!b) {
		without_bwrap(h, c, "not checked: bwrap is unavailable", "no bwrap backend");
		return;
	}
	if (sbx_backend_health(b, msg, sizeof msg) == 0) {
		DETAIL(c, "bwrap made a sandbox with user, pid, network, ipc, uts and mount namespaces");
		return;
	}
	DETAIL(c, "%s: user namespaces are not allowed here", msg);
	userns_fix(c);
	doctor_missing(c, true);
}

/* The filter commands get, loaded for real in a child (no_new_privs,
 * SECCOMP_MODE_FILTER) as bwrap --seccomp loads it. */
/* Whether bwrap is wanted here: made, or listed and failed (the checks
 * that do not need it made still run then, and say what they find). */
static bool bwrap_wanted(const struct srv_host *h)
{
	return find_backend(h, "bwrap") || (h->backends_rc < 0 && doctor_listed(h->cfg->backends, "bwrap"));
}

void check_seccomp(struct srv_host *h, struct srv_check *c)
{
	if (!bwrap_wanted(h)) {
		DETAIL(c, "no bwrap backend");
		doctor_not_needed(c);
		return;
	}
	void *bpf = NULL;
	size_t len = 0;
	int rc = sbx_seccomp_build(&bpf, &len);
	if (rc < 0) {
		DETAIL(c, "cannot build the filter with libseccomp: %s", sbx_strerror(rc));
		FIX(c, "apt-get install libseccomp2");
		doctor_missing(c, true);
		return;
	}
	struct sock_fprog prog = {.len = (unsigned short)(len / sizeof(struct sock_filter)), .filter = bpf};
	pid_t pid = fork();
	if (pid == 0) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
			_exit(errno & 0x7f);
		_exit(0);
	}
	int st = 0;
	while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	free(bpf);
	int err = pid < 0 ? errno : WIFEXITED(st) ? WEXITSTATUS(st) : EINTR;
	if (err) {
		DETAIL(c, "the kernel refuses the filter: %s", strerror(err));
		FIX(c, "a kernel with CONFIG_SECCOMP_FILTER (every Debian kernel has it); in a container, "
		       "do not forbid prctl(PR_SET_SECCOMP)");
		doctor_missing(c, true);
		return;
	}
	DETAIL(c, "the commands' filter (%zu instructions) loads", len / sizeof(struct sock_filter));
}

/* Fail closed (security.md item 10): with use-cgroups=true (the
 * default), a server whose commands would run without cgroups, or
 * without a controller a configured default limit or budget needs, does
 * not start: the operator is told what is missing and the fix, unless
 * they said --allow-uncontained. use-cgroups=false is the operator's own
 * opt-out. Either way it then serves degraded, said in the log, /readyz
 * and /metrics, never `ready`. */
void check_cgroups(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	char why[1024];
	if (h->backends_rc < 0 || h->nbackends == 0) {
		without_bwrap(h, c, "not checked: no backend (see bwrap)", "no backend starts commands here");
		return;
	}
	if (!cfg->use_cgroups) {
		DETAIL(c,
		       "use-cgroups=false: commands run with rlimits only (degraded, the operator's choice)");
		doctor_not_needed(c);
		return;
	}
	if (route_containment_describe(cfg, h->backends, h->nbackends, h->disk_mode == DISK_IMAGE, why,
				       sizeof why)) {
		const struct sbx_cgroup_caps *k = sbx_cgroup_caps();
		DETAIL(c,
		       "cgroup v%d, writable, controllers:%s%s%s%s%s: every configured limit and budget is "
		       "enforced",
		       k->version, k->memory ? " memory" : "", k->pids ? " pids" : "", k->cpu ? " cpu" : "",
		       k->io ? " io" : "", k->psi ? " (PSI)" : "");
		return;
	}
	DETAIL(c, "the configured limits and budgets cannot be enforced here: %s", why);
	FIX(c, "run the server as root where it can write its own cgroup subtree (cgroup v2: a writable "
	       "cgroup2 mount at /sys/fs/cgroup with the memory, pids and cpu controllers delegated to it: "
	       "systemd Delegate=yes, a container with its own cgroup namespace and /sys/fs/cgroup mounted "
	       "read-write; cgroup v1: writable memory, pids and cpu hierarchies), or set the budget that "
	       "needs a missing controller to 0, or start anyway with --allow-uncontained "
	       "(allow-uncontained=true: /readyz then says degraded)");
	doctor_missing(c, !cfg->allow_uncontained);
}

/* ---- network on request ---- */

/* Whether a command may ask for network: the configured default policy
 * gives it, or a tenant's stored policy does (read from the store when
 * it could be opened; else assumed). Policies changed later through the
 * API are not foreseen: doctor says what the configuration and the
 * tenants ask now. */
static bool network_wanted(struct srv_host *h, char *why, size_t whysz)
{
	const struct sbx_config *cfg = h->cfg;
	if (cfg->network && strcmp(cfg->network, "none") != 0) {
		snprintf(why, whysz, "network=%s", cfg->network);
		return true;
	}
	if (!h->store) {
		struct stat st;
		bool none = stat(cfg->db_path, &st) < 0 && errno == ENOENT;
		snprintf(why, whysz, "%s",
			 none ? "network=none and no tenants yet"
			      : "the tenants' policies could not be read (see store)");
		return !none;
	}
	struct store_tenant *v = NULL;
	size_t n = 0;
	bool want = false;
	snprintf(why, whysz, "network=none and no tenant's policy gives network");
	if (store_tenant_list(h->store, &v, &n) < 0)
		return false;
	for (size_t i = 0; i < n && !want; i++) {
		struct route_policy p;
		if (route_policy_load(h->store, cfg, v[i].name, &p, NULL, NULL) < 0)
			continue;
		if (p.network) {
			want = true;
			snprintf(why, whysz, "tenant %s's policy gives network %s", v[i].name, p.network);
		}
		route_policy_clear(&p);
	}
	store_tenants_free(v, n);
	return want;
}

static bool network_check_needed(struct srv_host *h, struct srv_check *c)
{
	char why[400];
	bool want = network_wanted(h, why, sizeof why);
	if (!want || !bwrap_wanted(h)) {
		DETAIL(c, "%s", want ? "no bwrap backend (the only one that gives network)" : why);
		doctor_not_needed(c);
		return false;
	}
	return true;
}

/* The real thing: a probe namespace made the way the egress gateway makes
 * them (netlink, libnftables), and a route out of the server's own. */
void check_network(struct srv_host *h, struct srv_check *c)
{
	if (!network_check_needed(h, c))
		return;
	char msg[256] = "";
	if (!find_backend(h, "bwrap")) {
		DETAIL(c, "not checked: bwrap is unavailable");
		FIX(c, "see bwrap");
		doctor_missing(c, false);
		return;
	}
	if (sbx_backend_net_health(find_backend(h, "bwrap"), msg, sizeof msg) == 0) {
		DETAIL(c, "egress gateway: %s", msg);
		return;
	}
	DETAIL(c, "%s: commands with network are refused (503)", msg);
	FIX(c, "the server must run as root, on a kernel with network namespaces and nf_tables (modprobe "
	       "nf_tables), with a route out of its own namespace");
	doctor_missing(c, false);
}
