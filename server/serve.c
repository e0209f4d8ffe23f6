/* sandboxd serve: open the store, recover, start the backend, the runner
 * and the HTTP daemon, then wait for SIGTERM/SIGINT and shut down in
 * order: stop accepting, cancel commands, let in-flight requests finish
 * (bounded), stop the daemon, close the store. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "routes/admit.h"
#include "routes/app.h"
#include "routes/audit_nodes.h"
#include "routes/exec.h"
#include "routes/exec_registry.h"
#include "routes/policy.h"
#include "routes/provider.h"
#include "http/hub.h"
#include "http/metrics.h"
#include "http/pool.h"
#include "http/watch.h"
#include "sandbox/backend.h"
#include "sandbox/diskimg.h"
#include "sandbox/fsops.h"
#include "sandbox/quota.h"
#include "sandbox/netpool.h"
#include "sandbox/runner.h"
#include "sandbox/uids.h"
#include "sandbox/reaper.h"
#include "sandbox/workspace.h"
#include "server/cli.h"
#include "server/datadir.h"
#include "server/leftovers.h"
#include "http/daemon.h"
#include "server/retention.h"
#include "store/store.h"

#define SRV_BACKENDS_MAX 4

static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;
	ssize_t n = write(signal_pipe[1], &c, 1);
	(void)n;
	errno = saved;
}

/* Quotas whose sum fits the disk (less the store's reserve) mean no
 * tenant can fill it; beyond that only the reserve protects the store. */
static void warn_overcommit(struct app *a, size_t ntenants)
{
	struct sbx_disk_space ds;
	uint64_t q = (uint64_t)a->cfg->tenant_disk_quota_bytes,
		 reserve = (uint64_t)a->cfg->store_reserve_bytes;
	char *dir = xasprintf("%s/tenants", a->cfg->data_dir);
	if (a->disk_mode != DISK_NONE && sbx_disk_space(dir, &ds) == 0 &&
	    (q == 0 || (double)q * (double)ntenants > (double)ds.total_bytes - (double)reserve))
		log_msg(
		    "warn",
		    "disk quotas: %zu tenants x %llu bytes (0: none) can take more than the %llu bytes of "
		    "%s less store-reserve-bytes; only the reserve then keeps room for the store",
		    ntenants, (unsigned long long)q, (unsigned long long)ds.total_bytes, dir);
	free(dir);
}

/* Check every tenant's workspace before serving: its uid must reach it
 * (a data directory under a 0700 parent would make every command fail
 * with a bwrap error while the probes said all is well), and temp files
 * that interrupted writes left are removed. -1 when a tenant cannot reach
 * its workspace. */
static int prepare_workspaces(struct app *a)
{
	struct store_tenant *v = NULL;
	size_t n = 0;
	int rc = 0;
	if (store_tenant_list(a->store, &v, &n) < 0)
		return 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct tenant *t = NULL;
		if (route_tenant_get(a, v[i].name, &t) < 0)
			continue;
		const char *dir = sbx_workspace_host_dir(t->ws);
		char blocked[4096] = "";
		int r =
		    a->drop_privs ? sbx_workspace_reachable(dir, t->uid, t->gid, blocked, sizeof blocked) : 0;
		if (r == -EACCES) {
			fprintf(
			    stderr,
			    "sandboxd: tenant %s (uid %u) cannot reach its workspace %s: %s is not "
			    "searchable "
			    "by that uid. Fix: chmod o+x %s (0711 is enough), or put --data-dir where every "
			    "parent directory is searchable\n",
			    t->name, (unsigned)t->uid, dir, blocked, blocked);
			rc = -1;
		} else if (r < 0) {
			log_msg("warn", "cannot check that tenant %s reaches its workspace: %s", t->name,
				sbx_strerror(r));
		}
		if (rc == 0) {
			int removed = sbx_fs_sweep_temps(t->ws);
			if (removed > 0)
				log_msg("info",
					"removed %d temporary files of interrupted writes in tenant %s",
					removed, t->name);
		}
		route_tenant_put(a, &t);
	}
	warn_overcommit(a, n);
	store_tenants_free(v, n);
	return rc;
}

/* The hub cancels a streamed command whose client left. */
static void cancel_job(void *ctx, uint64_t job)
{
	route_jobs_cancel(ctx, job);
}

/* Everything the server holds, released in reverse order by server_free. */
struct server {
	struct sbx_config *cfg;
	struct store *store;
	struct sbx_backend *backend; /* the default: one of backends */
	struct sbx_backend *backends[SRV_BACKENDS_MAX];
	size_t nbackends;
	struct sbx_runner *runner;
	struct http_daemon *http;
	struct srv_retention *retention;
	struct sbx_quota *quota;
	struct sbx_uids uids;
	struct sbx_diskimg *diskimg;
	int images_lock; /* image mode: <data>/images.lock, held while serving */
	int uids_lock;	 /* the uid range's claim, @sandboxd/uid-base/<N> (-1: none) */
	enum disk_mode disk_mode;
	struct app app;
	bool app_ready;
};

/* `backend` (the default of tenant policies) must be one of `backends`
 * (every backend this server starts), each bwrap, local, remote or ssh
 * (which start nothing: they are per tenant), and local only
 * with allow-unsafe-local; the configured policy must be well formed. */
static int check_backend_option(const struct sbx_config *cfg)
{
	bool local = strcmp(cfg->backend, "local") == 0;
	for (const char *q = cfg->backends; *q;) {
		q += strspn(q, ", ");
		size_t len = strcspn(q, ", ");
		if (len == 5 && strncmp(q, "local", 5) == 0)
			local = true;
		else if (len && !(len == 5 && strncmp(q, "bwrap", 5) == 0) &&
			 !(len == 6 && strncmp(q, "remote", 6) == 0) &&
			 !(len == 3 && strncmp(q, "ssh", 3) == 0)) {
			fprintf(stderr, "sandboxd: backends must list bwrap, local, remote and/or ssh\n");
			return -EINVAL;
		}
		q += len;
	}
	if (local && !cfg->allow_unsafe_local) {
		fprintf(stderr, "sandboxd: --backend local isolates nothing; it needs --allow-unsafe-local "
				"(development only)\n");
		return -EINVAL;
	}
	if (strcmp(cfg->backend, "local") != 0 && strcmp(cfg->backend, "bwrap") != 0) {
		fprintf(stderr, "sandboxd: --backend must be bwrap or local\n");
		return -EINVAL;
	}
	if (!route_policy_backend_offered(cfg, cfg->backend)) {
		fprintf(stderr, "sandboxd: backend %s must be one of backends (%s)\n", cfg->backend,
			cfg->backends);
		return -EINVAL;
	}
	struct route_policy p;
	char err[512] = "";
	if (route_policy_defaults(cfg, &p, err, sizeof err) < 0) {
		fprintf(stderr, "sandboxd: configured policy: %s\n", err);
		return -EINVAL;
	}
	route_policy_clear(&p);
	return 0;
}

/* glibc gives every thread that allocates while the others hold the
 * arenas an arena of its own (up to eight per core): 11 on an idle
 * two-core server, each 64 MiB reserved and 8-280 KiB touched. Two per
 * core (at least four) keep most of that back: idle RSS -370 kB on two
 * cores. One per core would save 520 kB, but under six concurrent
 * readdirs (pool workers and event threads all allocating) threads then
 * slept on an arena's lock 13 times as often as unbounded (two per core:
 * 2.7 times), and a holder preempted mid-malloc delays another tenant's
 * request (bench/NOTES.md, P10). Not when the operator set
 * glibc.malloc.arena_max in GLIBC_TUNABLES. Before any thread. */
static void bound_malloc_arenas(void)
{
	const char *t = getenv("GLIBC_TUNABLES");
	if (t && strstr(t, "arena_max"))
		return;
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	(void)mallopt(M_ARENA_MAX, n > 2 ? 2 * (int)n : 4);
}

/* Commands must get default signal dispositions; the server itself must
 * survive writes to pipes whose reader is gone. SIGTERM and SIGINT wake
 * wait_for_signal through a pipe. */
static int install_signals(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	return 0;
}

/* disk-quota: project quotas where the workspaces' filesystem enforces
 * them, else (auto) a filesystem image per tenant where loop devices
 * work, else none; an explicit mode that cannot work stops the start.
 * Said plainly either way, with what stands in for them. */
static int choose_disk_mode(struct server *s)
{
	const char *want = s->cfg->disk_quota;
	bool is_auto = strcmp(want, "auto") == 0, bytes = s->cfg->tenant_disk_quota_bytes > 0;
	if (!is_auto && strcmp(want, "project") != 0 && strcmp(want, "image") != 0 &&
	    strcmp(want, "none") != 0) {
		fprintf(stderr, "sandboxd: disk-quota must be auto, project, image or none\n");
		return -EINVAL;
	}
	char *tenants = xasprintf("%s/tenants", s->cfg->data_dir);
	int rc = sbx_quota_probe(&s->quota, tenants);
	if (rc < 0)
		log_msg("warn", "disk quotas: cannot look at %s: %s", tenants, sbx_strerror(rc));
	free(tenants);
	if (strcmp(want, "none") != 0 && strcmp(want, "project") != 0)
		sbx_diskimg_probe(&s->diskimg);
	enum disk_mode m = DISK_NONE;
	if ((is_auto || strcmp(want, "project") == 0) && sbx_quota_enforced(s->quota))
		m = DISK_PROJECT;
	else if ((is_auto || strcmp(want, "image") == 0) && sbx_diskimg_usable(s->diskimg) && bytes)
		m = DISK_IMAGE;
	if (m == DISK_NONE && !is_auto && strcmp(want, "none") != 0) {
		fprintf(stderr, "sandboxd: disk-quota=%s cannot work here: %s\n", want,
			strcmp(want, "project") == 0 ? sbx_quota_detail(s->quota)
			: bytes			     ? sbx_diskimg_detail(s->diskimg)
						     : "tenant-disk-quota-bytes is 0");
		return -ENOTSUP;
	}
	s->disk_mode = m;
	if (m != DISK_NONE)
		log_msg("info", "disk quotas: %s; each tenant %lld bytes and %lld inodes",
			m == DISK_PROJECT ? sbx_quota_detail(s->quota) : sbx_diskimg_detail(s->diskimg),
			(long long)s->cfg->tenant_disk_quota_bytes,
			(long long)s->cfg->tenant_disk_quota_inodes);
	else
		log_msg("warn",
			"disk quotas: unavailable (disk-quota=%s; project quotas %s; %s). Enforced instead: "
			"fsize-limit-bytes per file a command writes, max-upload-bytes per upload, and new "
			"tenant work refused below store-reserve-bytes (%lld) free for the store",
			want, sbx_quota_detail(s->quota), sbx_diskimg_detail(s->diskimg),
			(long long)s->cfg->store_reserve_bytes);
	return 0;
}

/* Image mode: the images are mounted in a mount namespace of the
 * server's own, so that a crash (SIGKILL, OOM) releases them with the
 * process instead of leaving loop mounts on the host (sandbox/diskimg.h).
 * What earlier runs of this data directory left on the host goes first.
 * Before any thread: a thread made before would stay in the host's. */
static int own_mount_ns(struct server *s)
{
	char why[512] = "";
	int swept = 0;
	int rc = sbx_diskimg_own_ns(s->cfg->data_dir, &s->images_lock, &swept, why, sizeof why);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: disk-quota=image: %s\n", why);
		return rc;
	}
	if (swept > 0)
		log_msg("info",
			"unmounted %d disk images an earlier run of this data directory left mounted on "
			"the host",
			swept);
	return 0;
}

static int open_store(struct server *s)
{
	char err[512] = "";
	if (srv_prepare_data_dir(s->cfg) < 0)
		return -EIO;
	/* The store starts its audit writer thread. */
	int rc = choose_disk_mode(s);
	if (rc < 0 || (s->disk_mode == DISK_IMAGE && (rc = own_mount_ns(s)) < 0))
		return rc;
	rc = store_open(&s->store, s->cfg->db_path, true, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: %s: %s\n", s->cfg->db_path, *err ? err : sbx_strerror(rc));
		return rc;
	}
	int lost = 0, failed = 0;
	store_recover(s->store, &lost, &failed);
	if (lost || failed)
		log_msg("info", "recovered: %d execs marked lost, %d transfers marked failed", lost, failed);
	return 0;
}

/* After the claim (the first backend's): what an earlier run left
 * running as a tenant's uid is killed before this one serves, also where
 * no cgroup holds it (rlimit-only hosts). Only the tenants' own uids
 * (uid-base + slot), never the server's (shared uids: nothing). */
static void sweep_tenant_uids(struct server *s)
{
	struct store_tenant *v = NULL;
	size_t n = 0;
	if (s->uids.mode == SBX_UIDS_SHARED || store_tenant_list(s->store, &v, &n) < 0)
		return;
	int64_t slots = 0;
	for (size_t i = 0; i < n; i++)
		slots = v[i].slot >= slots ? v[i].slot + 1 : slots;
	store_tenants_free(v, n);
	uid_t first = (uid_t)s->cfg->uid_base;
	if (slots == 0 || (s->uids.outer_uid >= first && s->uids.outer_uid < first + (uid_t)slots))
		return;
	int left = 0, killed = srv_uid_sweep(first, (uint32_t)slots, 5000, &left);
	if (killed > 0)
		log_msg(left ? "error" : "info",
			"killed %d processes of tenant uids %u..%u an earlier run left%s", killed,
			(unsigned)first, (unsigned)(first + (uid_t)slots - 1),
			left ? " (some still alive after 5 s)" : "");
}

static int start_one_backend(struct server *s, const char *name, const char *cgroup_root)
{
	const struct sbx_config *cfg = s->cfg;
	struct sbx_backend_config bc = {.name = name,
					.use_cgroups = cfg->use_cgroups,
					.cgroup_root = cgroup_root,
					.cgroup_shared = s->nbackends > 0,
					.probe_uid = sbx_uids_probe_id(&s->uids)};
	struct sbx_backend *b = NULL;
	int rc = sbx_backend_new(&b, &bc);
	if (rc < 0) {
		if (rc == -EBUSY)
			fprintf(stderr,
				"sandboxd: another sandboxd on this host runs with uid-base %lld (its "
				"cgroups %s and "
				"its tenants' uids): give each server its own --set uid-base=N\n",
				(long long)cfg->uid_base, cgroup_root);
		else
			fprintf(stderr, "sandboxd: backend %s unavailable: %s\n", name,
				rc == -ENOENT ? "bwrap is not installed (apt-get install bubblewrap)"
					      : sbx_strerror(rc));
		return rc;
	}
	if (s->nbackends == 0) {
		int swept = sbx_backend_sweep(b);
		if (swept > 0)
			log_msg("info", "removed %d cgroups left by an earlier run", swept);
		sweep_tenant_uids(s);
	}
	s->backends[s->nbackends++] = b;
	if (strcmp(cfg->backend, name) == 0)
		s->backend = b;
	if (strcmp(name, "local") == 0)
		log_msg("warn",
			"backend local: commands of the tenants whose policy names it run on the host "
			"WITHOUT isolation (development only)");
	return 0;
}

/* Fail closed (security.md item 10): with use-cgroups=true (the
 * default), a server whose commands would run without cgroups, or
 * without a controller a configured default limit or budget needs, does
 * not start: the operator is told what is missing and the fix, unless
 * they said --allow-uncontained. use-cgroups=false is the operator's own
 * opt-out. Either way it then serves degraded, said in the log, /readyz
 * and /metrics, never `ready`. */
static int check_containment(struct server *s)
{
	const struct sbx_config *cfg = s->cfg;
	char why[1024];
	if (route_containment_describe(cfg, s->backends, s->nbackends, s->disk_mode == DISK_IMAGE, why,
				       sizeof why))
		return 0;
	if (cfg->use_cgroups && !cfg->allow_uncontained) {
		fprintf(stderr,
			"sandboxd: refusing to start: the configured limits and budgets cannot be "
			"enforced here: %s.\nFix: run the server as root where it can write its own cgroup "
			"subtree (cgroup v2: a writable cgroup2 mount at /sys/fs/cgroup with the memory, "
			"pids and cpu controllers delegated to it: systemd Delegate=yes, a container with "
			"its own cgroup namespace and /sys/fs/cgroup mounted read-write; cgroup v1: "
			"writable memory, pids and cpu hierarchies), or set the budget that needs a "
			"missing controller to 0, or start anyway with --allow-uncontained "
			"(allow-uncontained=true: /readyz then says degraded)\n",
			why);
		return -ENOTSUP;
	}
	log_msg("warn", "running DEGRADED (%s): %s; /readyz says degraded",
		cfg->use_cgroups ? "allow-uncontained=true" : "use-cgroups=false", why);
	return 0;
}

/* The tenants' uid range is this server's alone: an abstract unix
 * socket named after the uid-base, bound (and listening, so a second
 * server can ask who holds it) before any sweep kills what an earlier
 * run left in the range (server/leftovers.h), and held until the process
 * ends (kill -9 included; no child inherits it: SOCK_CLOEXEC, and a
 * command's child closes every fd not its own first). Two servers with
 * one uid-base would kill each other's commands at start and give their
 * tenants the same uids. Whatever the cgroup driver: on cgroup v2 the
 * driver's own claim is below the server's group, which differs between
 * two units, and without cgroups there is none. An abstract name needs
 * no writable path (units with ProtectSystem=strict, read-only container
 * roots) and spans what the sweep can reach: a network namespace is the
 * host's for units, a container's own for a container, whose /proc shows
 * its own processes. A name held by a process other than a root one is
 * named as such (a local user squatting it). Root with a uid per tenant
 * only: in subuid mode the range is the user's own, shared-uid mode
 * kills nothing. */
static int claim_uid_range(struct server *s)
{
	if (s->uids.mode != SBX_UIDS_ROOT)
		return 0;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int n = snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "sandboxd/uid-base/%lld",
			 (long long)s->cfg->uid_base);
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, len) == 0 && listen(fd, 4) == 0) {
		s->uids_lock = fd;
		return 0;
	}
	int err = errno;
	close(fd);
	if (err != EADDRINUSE) {
		fprintf(stderr, "sandboxd: cannot claim uid-base %lld: %s\n", (long long)s->cfg->uid_base,
			strerror(err));
		return -err;
	}
	/* Who holds it: the listener's credentials, as it listened. */
	struct ucred who = {0};
	socklen_t wl = sizeof who;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool known = fd >= 0 && connect(fd, (struct sockaddr *)&sa, len) == 0 &&
		     getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &who, &wl) == 0;
	if (fd >= 0)
		close(fd);
	if (known && who.uid != 0)
		fprintf(stderr,
			"sandboxd: uid-base %lld's claim (the abstract socket @%s) is held by pid %ld, uid "
			"%u, not a root sandboxd: stop that process, or give this server another --set "
			"uid-base=N\n",
			(long long)s->cfg->uid_base, sa.sun_path + 1, (long)who.pid, (unsigned)who.uid);
	else
		fprintf(stderr,
			"sandboxd: another sandboxd on this host runs with uid-base %lld%s (its tenants' "
			"uids and cgroups): give each server its own --set uid-base=N\n",
			(long long)s->cfg->uid_base, known ? "" : " (its claim is held)");
	if (known && who.uid == 0)
		fprintf(stderr, "sandboxd: that server is pid %ld\n", (long)who.pid);
	return -EBUSY;
}

/* Every backend of `backends`, once, the first of them claiming the
 * server's cgroup root for all. */
static int start_backend(struct server *s)
{
	const struct sbx_config *cfg = s->cfg;
	/* cgroups are host-wide: the uid range (distinct per server on a
	 * host) names this server's own group. */
	char cgroup_root[64];
	snprintf(cgroup_root, sizeof cgroup_root, "sandboxd/%lld", (long long)cfg->uid_base);
	int claimed = claim_uid_range(s);
	if (claimed < 0)
		return claimed;
	for (const char *q = cfg->backends; *q;) {
		q += strspn(q, ", ");
		size_t len = strcspn(q, ", ");
		char name[16];
		snprintf(name, sizeof name, "%.*s", (int)len, q);
		q += len;
		/* remote is tenant-level (routes/provider.h): nothing to start. */
		bool started = !len || strcmp(name, "remote") == 0 || strcmp(name, "ssh") == 0;
		for (size_t i = 0; i < s->nbackends; i++)
			started |= strcmp(sbx_backend_name(s->backends[i]), name) == 0;
		if (started)
			continue;
		if (s->nbackends == SRV_BACKENDS_MAX)
			break;
		int rc = start_one_backend(s, name, cgroup_root);
		if (rc < 0)
			return rc;
	}
	if (check_containment(s) < 0)
		return -ENOTSUP;
	if (!sbx_openat2_supported())
		log_msg("error",
			"openat2 is unavailable (kernel older than 5.6, or running under a tool that "
			"does not know it): every file route will answer 503 and /readyz is unavailable");
	/* Runner threads: one per core by default (a start blocks its thread
	 * until the child's execve, so starts overlap across threads). */
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nrun =
	    s->cfg->runner_threads > 0 ? (size_t)s->cfg->runner_threads : (size_t)(ncpu > 0 ? ncpu : 1);
	int rc = sbx_runner_new(&s->runner, nrun < SBX_RUNNER_MAX_THREADS ? nrun : SBX_RUNNER_MAX_THREADS);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: cannot start the runner: %s\n", sbx_strerror(rc));
		return rc;
	}
	struct sbx_netpool_config nc = {.threads = (unsigned)s->cfg->network_setup_threads,
					.setups_per_tenant = (unsigned)s->cfg->network_setups_per_tenant,
					.commands_per_tenant = (unsigned)s->cfg->network_tenant_commands,
					.limits = {.conn_max = (unsigned)s->cfg->network_conn_max,
						   .conn_per_s = (unsigned)s->cfg->network_conn_per_s,
						   .resolve_ms = (unsigned)s->cfg->network_resolve_ms}};
	sbx_runner_net_config(s->runner, &nc);
	return 0;
}

/* The pool of file work (http/pool.h), sized from the configuration: by
 * default two workers per core (file work mostly waits on the disk), at
 * least 4, of which one tenant may hold all but a quarter, and no more of
 * them than keep every core but one busy (cfg_cpu_auto, the rule of the
 * tenants' CPU budget): a tenant's CPU-bound file work (large readdir
 * pages from the page cache) leaves a core to the others. */
static int start_pool(struct server *s)
{
	const struct sbx_config *cfg = s->cfg;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	size_t n = cfg->fs_threads > 0 ? (size_t)cfg->fs_threads : (size_t)(ncpu > 2 ? 2 * ncpu : 4);
	size_t keep = n / 4 ? n / 4 : 1;
	size_t per =
	    cfg->fs_threads_per_tenant > 0 ? (size_t)cfg->fs_threads_per_tenant : (n > keep ? n - keep : 1);
	struct http_pool_config pc = {.threads = n,
				      .threads_per_tenant = per < n ? per : n,
				      .queue_per_tenant = (size_t)cfg->fs_queue_per_tenant,
				      .cpu_cores_per_tenant = (double)cfg_cpu_auto() / 1000};
	int rc = http_pool_new(&s->app.http.pool, &pc);
	if (rc < 0)
		fprintf(stderr, "sandboxd: cannot start the file-work pool: %s\n", sbx_strerror(rc));
	return rc;
}

/* The routes' state: tenants, the disconnect watcher, the event hub, the
 * exec registry; then the workspaces' start checks and retention. */
static int start_app(struct server *s)
{
	char err[512] = "";
	struct app *a = &s->app;
	route_app_init(a, s->cfg, s->store, err, sizeof err);
	s->app_ready = true;
	a->backend = s->backend;
	a->backends = s->backends;
	a->nbackends = s->nbackends;
	a->runner = s->runner;
	a->quota = s->quota;
	a->uids = &s->uids;
	if (route_uids_check_start(a, err, sizeof err) < 0) {
		fprintf(stderr, "sandboxd: %s\n", err);
		return -EPERM;
	}
	a->diskimg = s->diskimg;
	a->disk_mode = s->disk_mode;
	int rc = http_watch_new(&a->watch);
	if (rc < 0) {
		/* Without it no suspended request notices its client leaving. */
		fprintf(stderr, "sandboxd: cannot start the disconnect watcher: %s\n", sbx_strerror(rc));
		return rc;
	}
	if ((rc = start_pool(s)) < 0)
		return rc;
	http_hub_new(&a->hub, a->metrics, a->watch, (size_t)s->cfg->events_replay, cancel_job, a);
	route_exec_init(a);
	if (prepare_workspaces(a) < 0)
		return -EACCES;
	srv_retention_start(&s->retention, a);
	return 0;
}

static int start_http(struct server *s)
{
	char err[512] = "";
	int rc = http_daemon_start(&s->http, &s->app.http, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: %s\n", err);
		return rc;
	}
	char health[256] = "", uids[512] = "";
	sbx_backend_health(s->backend, health, sizeof health);
	route_uids_describe(&s->app, uids, sizeof uids);
	log_msg("info",
		"listening on %s (port %u, %s), data %s, backend %s: %s (backends offered: %s); uids: %s",
		s->cfg->listen, http_daemon_port(s->http), s->cfg->tls_cert ? "https" : "http",
		s->cfg->data_dir, s->cfg->backend, health, s->cfg->backends, uids);
	return 0;
}

/* Until SIGTERM or SIGINT; meanwhile reap the orphans handed to the
 * server (reaper_fd >= 0: sandbox/reaper.h; this is the main thread). */
static void wait_for_signal(int reaper_fd)
{
	for (;;) {
		struct pollfd pfd[2] = {{.fd = signal_pipe[0], .events = POLLIN},
					{.fd = reaper_fd, .events = POLLIN}};
		if (poll(pfd, reaper_fd >= 0 ? 2 : 1, -1) <= 0)
			continue;
		if (pfd[0].revents)
			break;
		sbx_reaper_reap(reaper_fd);
	}
}

/* Stop accepting, cancel commands, give in-flight requests a bounded time
 * to finish. The runner reports what is left (resuming their connections)
 * before the daemon stops: libmicrohttpd must not stop with suspended
 * ones. It stays allocated until the daemon is gone, so a late cancel or
 * submit from a request thread finds a stopped runner, not freed memory. */
static void shut_down(struct server *s)
{
	log_msg("info", "shutting down: no new connections, cancelling commands");
	s->app.stopping = true;
	http_daemon_quiesce(s->http);
	sbx_runner_cancel_all(s->runner);
	route_jobs_cancel_all(&s->app);
	route_execs_cancel_all_pending(s->app.execs);
	route_admit_stop(&s->app);
	http_hub_close_all(s->app.hub);
	int64_t deadline = mono_ns() + s->cfg->shutdown_grace_s * 1000000000LL;
	while (sbx_runner_active(s->runner) > 0 && mono_ns() < deadline)
		usleep(10000);
	int64_t left_ms = (deadline - mono_ns()) / 1000000;
	if (sbx_runner_stop_within(s->runner, left_ms > 1000 ? left_ms : 1000) < 0) {
		/* A turn of the runner never ended (a defect: it must not wait on
		 * anything a tenant controls). SIGTERM still ends the server:
		 * without the clean shutdown, which the next start recovers
		 * from like a crash. */
		const char *step = "";
		int64_t busy = sbx_runner_busy_ms(s->runner, &step);
		log_msg("error",
			"the runner has been stuck for %lld ms (%s): exiting without a clean shutdown",
			(long long)busy, step);
		_exit(1);
	}
	/* The runner has reported every exit; their records and answers are
	 * made on the registry's completion thread. */
	route_exec_drain(&s->app);
	/* Merged audit pages end within nodes-timeout-ms; their requests must
	 * be resumed before the daemon stops. */
	route_audit_nodes_drain();
	/* File work: what waits is refused, what runs ends, all answered. */
	http_pool_stop(s->app.http.pool);
	usleep(50000);
}

static void server_free(struct server *s)
{
	srv_retention_stop(&s->retention);
	sbx_runner_stop(s->runner);
	if (s->app_ready) {
		route_exec_drain(&s->app);
		http_pool_stop(s->app.http.pool);
	}
	route_audit_nodes_drain();
	http_daemon_stop(&s->http);
	sbx_runner_free(&s->runner);
	if (s->app_ready) {
		http_hub_free(&s->app.hub);
		http_pool_free(&s->app.http.pool);
		http_watch_free(&s->app.watch);
		route_exec_fini(&s->app);
		route_app_fini(&s->app);
	}
	for (size_t i = 0; i < s->nbackends; i++)
		sbx_backend_free(&s->backends[i]);
	s->backend = NULL;
	store_close(&s->store);
	/* After every request and command: the mounts go now (a command of
	 * a cancelled exec still running keeps its image until it ends). */
	sbx_diskimg_detach_all(s->diskimg);
	sbx_diskimg_free(&s->diskimg);
	if (s->images_lock >= 0)
		close(s->images_lock);
	if (s->uids_lock >= 0)
		close(s->uids_lock);
	sbx_quota_free(&s->quota);
}

/* Before any thread: in subuid mode the process moves into a user
 * namespace of its own (sandbox/uids.h), which a threaded one cannot. */
static int setup_uids(struct server *s)
{
	char err[768] = "";
	struct sbx_uids_config uc = {.uid_base = s->cfg->uid_base};
	int rc = sbx_uids_setup(&s->uids, &uc, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: cannot give each tenant a uid of its own: %s\n", err);
		return rc;
	}
	if (s->uids.mode == SBX_UIDS_SUBUID && s->uids.nproc_all)
		log_msg("info",
			"uids: %s; the server is uid 0 of a user namespace of its own, and all tenants "
			"together may have %llu processes (its RLIMIT_NPROC)",
			s->uids.detail, (unsigned long long)s->uids.nproc_all);
	else if (s->uids.mode == SBX_UIDS_SUBUID)
		log_msg("info", "uids: %s; the server is uid 0 of a user namespace of its own",
			s->uids.detail);
	return 0;
}

int cli_serve(struct sbx_config *cfg, const struct cli_args *args)
{
	(void)args;
	struct server s = {.cfg = cfg, .images_lock = -1, .uids_lock = -1};
	int status = 1;

	if (check_backend_option(cfg) < 0)
		return 2;
	if (setup_uids(&s) < 0)
		return 1;
	bound_malloc_arenas();
	if (install_signals() < 0)
		return 1;
	/* Before any thread, like the capabilities below (sandbox/reaper.h). */
	int reaper_fd = sbx_reaper_init();
	if (reaper_fd < 0)
		log_msg("warn",
			"cannot reap what commands leave behind (%s): their orphans go to PID 1, and a "
			"command's group is reused only once PID 1 has reaped them",
			sbx_strerror(reaper_fd));
	/* Before any thread: capabilities are per thread. Without it a root
	 * server's writes for a tenant would pass its quota. */
	int rc = sbx_quota_drop_override();
	if (rc < 0) {
		fprintf(stderr, "sandboxd: cannot drop CAP_SYS_RESOURCE: %s\n", sbx_strerror(rc));
		return 1;
	}
	if (open_store(&s) == 0 && start_backend(&s) == 0 && start_app(&s) == 0 && start_http(&s) == 0) {
		wait_for_signal(reaper_fd);
		shut_down(&s);
		status = 0;
	}
	server_free(&s);
	if (status == 0)
		log_msg("info", "stopped");
	close(signal_pipe[0]);
	close(signal_pipe[1]);
	if (reaper_fd >= 0)
		close(reaper_fd);
	return status;
}
