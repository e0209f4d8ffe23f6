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
#include "routes/tenant_cache.h"
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
#include "sandbox/egress/gateway.h"
#include "sandbox/netpool.h"
#include "sandbox/runner.h"
#include "sandbox/uids.h"
#include "sandbox/reaper.h"
#include "sandbox/registry.h"
#include "sandbox/workspace.h"
#include "server/cli.h"
#include "server/doctor.h"
#include "server/leftovers.h"
#include "http/daemon.h"
#include "server/retention.h"
#include "store/store.h"

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
		struct srv_check c = {.name = "data-dir"};
		char who[128];
		snprintf(who, sizeof who, "tenant %s (uid %u)", t->name, (unsigned)t->uid);
		if (a->drop_privs)
			srv_check_reach(dir, t->uid, t->gid, who, &c);
		if (c.status == SRV_CHECK_MISSING && c.refuse) {
			fprintf(stderr, "sandboxd: refusing to start: %s: %s.\nFix: %s\n", c.name, c.detail,
				c.fix);
			rc = -1;
		} else if (c.status == SRV_CHECK_MISSING) {
			log_msg("warn", "%s", c.detail);
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
	struct srv_host host; /* what the start's checks made: uids, disk, store, backends */
	struct sbx_runner *runner;
	struct http_daemon *http;
	struct srv_retention *retention;
	struct app app;
	bool app_ready;
};

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

/* Disk quotas as the start's check chose them (server/doctor.c), said
 * plainly either way, with what stands in for them. */
static void log_disk_mode(struct server *s)
{
	const struct srv_host *h = &s->host;
	if (h->disk_mode != DISK_NONE)
		log_msg("info", "disk quotas: %s; each tenant %lld bytes and %lld inodes",
			h->disk_mode == DISK_PROJECT ? sbx_quota_detail(h->quota)
						     : sbx_diskimg_detail(h->diskimg),
			(long long)s->cfg->tenant_disk_quota_bytes,
			(long long)s->cfg->tenant_disk_quota_inodes);
	else
		log_msg("warn",
			"disk quotas: unavailable (disk-quota=%s; project quotas %s; %s). Enforced instead: "
			"fsize-limit-bytes per file a command writes, max-upload-bytes per upload, and new "
			"tenant work refused below store-reserve-bytes (%lld) free for the store",
			s->cfg->disk_quota, sbx_quota_detail(h->quota), sbx_diskimg_detail(h->diskimg),
			(long long)s->cfg->store_reserve_bytes);
}

/* After the store's check opened it: what a crash left running or
 * active is marked so. */
static void recover_store(struct server *s)
{
	int lost = 0, failed = 0;
	store_recover(s->host.store, &lost, &failed);
	if (lost || failed)
		log_msg("info", "recovered: %d execs marked lost, %d transfers marked failed", lost, failed);
}

/* After the claim (the first backend's): what an earlier run left
 * running as a tenant's uid is killed before this one serves, also where
 * no cgroup holds it (rlimit-only hosts). Only the tenants' own uids
 * (uid-base + slot), never the server's (shared uids: nothing). */
static void sweep_tenant_uids(struct server *s)
{
	struct store_tenant *v = NULL;
	size_t n = 0;
	if (s->host.uids.mode == SBX_UIDS_SHARED || store_tenant_list(s->host.store, &v, &n) < 0)
		return;
	int64_t slots = 0;
	for (size_t i = 0; i < n; i++)
		slots = v[i].slot >= slots ? v[i].slot + 1 : slots;
	store_tenants_free(v, n);
	uid_t first = (uid_t)s->cfg->uid_base;
	if (slots == 0 || (s->host.uids.outer_uid >= first && s->host.uids.outer_uid < first + (uid_t)slots))
		return;
	int left = 0, killed = srv_uid_sweep(first, (uint32_t)slots, 5000, &left);
	if (killed > 0)
		log_msg(left ? "error" : "info",
			"killed %d processes of tenant uids %u..%u an earlier run left%s", killed,
			(unsigned)first, (unsigned)(first + (uid_t)slots - 1),
			left ? " (some still alive after 5 s)" : "");
}

/* A connection or refusal of the egress gateway, into the ledger (on a
 * gateway thread: the store's writer queues it). */
static void egress_record(void *ctx, const struct sbx_egress_record *r)
{
	struct store *st = ctx;
	struct store_egress e = {.tenant = r->tenant,
				 .exec_id = r->exec_id,
				 .sub = r->sub,
				 .proto = r->proto,
				 .name = r->name,
				 .name_source = r->name_source,
				 .dialled = r->dialled,
				 .addr = r->addr,
				 .port = r->port,
				 .allowed = r->allowed,
				 .reason = r->reason,
				 .bytes_up = r->bytes_up,
				 .bytes_down = r->bytes_down,
				 .started_at = r->started_ms,
				 .ended_at = r->ended_ms};

	store_egress_append(st, &e);
}

/* The egress gateway (sandbox/egress/gateway.h), its threads started now
 * whether or not a command will ask for network: they wait on epoll. */
static int start_egress(struct server *s)
{
	const struct sbx_config *cfg = s->cfg;
	struct srv_host *h = &s->host;
	struct sbx_egress_config ec = {.threads = (unsigned)cfg->egress_threads,
				       .pool = (unsigned)cfg->egress_pool,
				       .tenant_conns = (unsigned)cfg->egress_tenant_conns,
				       .tenant_pending = (unsigned)cfg->egress_tenant_pending,
				       .command_conns = (unsigned)cfg->network_conn_max,
				       .command_conn_per_s = (unsigned)cfg->network_conn_per_s,
				       .hello_ms = (unsigned)cfg->egress_hello_ms,
				       .first_byte_ms = (unsigned)cfg->egress_first_byte_ms,
				       .connect_ms = (unsigned)cfg->egress_connect_ms,
				       .resolve_ms = (unsigned)cfg->network_resolve_ms,
				       .record = egress_record,
				       .record_ctx = h->store};
	int rc = sbx_egress_gateway_new(&ec, &h->egress);

	if (rc < 0) {
		fprintf(stderr, "sandboxd: cannot start the egress gateway: %s\n", sbx_strerror(rc));
		return rc;
	}
	for (size_t i = 0; i < h->nbackends; i++)
		sbx_backend_set_egress(h->backends[i], h->egress);
	return 0;
}

/* The backends the start's checks made (server/doctor.c; the first of
 * them claimed the server's cgroup root for all): what an earlier run
 * left goes first; then the runner. */
static int start_backend(struct server *s)
{
	struct srv_host *h = &s->host;
	if (h->nbackends > 0) {
		int swept = sbx_backend_sweep(h->backends[0]);
		if (swept > 0)
			log_msg("info", "removed %d cgroups left by an earlier run", swept);
		sweep_tenant_uids(s);
	}
	for (size_t i = 0; i < h->nbackends; i++)
		if (!sbx_backend_kind_named(sbx_backend_name(h->backends[i]))->isolated)
			log_msg(
			    "warn",
			    "backend local: commands of the tenants whose policy names it run on the host "
			    "WITHOUT isolation (development only)");
	char why[1024];
	if (!route_containment_describe(s->cfg, h->backends, h->nbackends, h->disk_mode == DISK_IMAGE, why,
					sizeof why))
		log_msg("warn", "running DEGRADED (%s): %s; /readyz says degraded",
			s->cfg->use_cgroups ? "allow-uncontained=true" : "use-cgroups=false", why);
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
					.commands_per_tenant = (unsigned)s->cfg->network_tenant_commands};
	sbx_runner_net_config(s->runner, &nc);
	return start_egress(s);
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
	struct srv_host *h = &s->host;
	route_app_init(a, s->cfg, h->store, err, sizeof err);
	s->app_ready = true;
	a->backend = h->backend;
	a->backends = h->backends;
	a->nbackends = h->nbackends;
	a->runner = s->runner;
	a->egress = h->egress;
	a->quota = h->quota;
	a->uids = &h->uids;
	if (route_uids_check_start(a, err, sizeof err) < 0) {
		fprintf(stderr, "sandboxd: %s\n", err);
		return -EPERM;
	}
	a->diskimg = h->diskimg;
	a->disk_mode = h->disk_mode;
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
	sbx_backend_health(s->host.backend, health, sizeof health);
	route_uids_describe(&s->app, uids, sizeof uids);
	log_msg("info",
		"listening on %s (port %u, %s), data %s, backend %s: %s (backends offered: %s); uids: %s",
		s->cfg->listen, http_daemon_port(s->http), s->cfg->tls_cert ? "https" : "http",
		s->cfg->data_dir, s->cfg->backend, health, s->cfg->backends, uids);
	return 0;
}

/* Until SIGTERM or SIGINT; meanwhile reap the orphans handed to the
 * server (reaper_fd >= 0: sandbox/reaper.h; this is the main thread), and
 * let go of each connection to the uid range's claim (claim_fd >= 0): a
 * doctor or a second server asking who holds it, whose connection would
 * otherwise stay in the backlog until it is full. */
static void wait_for_signal(int reaper_fd, int claim_fd)
{
	for (;;) {
		struct pollfd pfd[3] = {{.fd = signal_pipe[0], .events = POLLIN},
					{.fd = reaper_fd, .events = POLLIN},
					{.fd = claim_fd, .events = POLLIN}};
		if (poll(pfd, 3, -1) <= 0)
			continue;
		if (pfd[0].revents)
			break;
		if (pfd[1].revents)
			sbx_reaper_reap(reaper_fd);
		int fd = pfd[2].revents ? accept4(claim_fd, NULL, NULL, SOCK_CLOEXEC) : -1;
		if (fd >= 0)
			close(fd);
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
		log_flush();
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
	srv_host_fini(&s->host);
}

/* The uid mode, said where it is not plain root (the checks set it up). */
static void log_uids(const struct sbx_uids *u)
{
	if (u->mode == SBX_UIDS_SUBUID && u->nproc_all)
		log_msg("info",
			"uids: %s; the server is uid 0 of a user namespace of its own, and all tenants "
			"together may have %llu processes (its RLIMIT_NPROC)",
			u->detail, (unsigned long long)u->nproc_all);
	else if (u->mode == SBX_UIDS_SUBUID)
		log_msg("info", "uids: %s; the server is uid 0 of a user namespace of its own", u->detail);
}

/* The host checks of the phases up to the store (server/doctor.h), with
 * what must happen before any thread in between: the uids (subuid: a
 * user namespace) and data directory checks fork; the disk checks move
 * into a mount namespace of the server's own (image mode); the store
 * starts its audit thread. 0, or the exit status. */
static int check_and_prepare(struct server *s, int *reaper_fd)
{
	int rc = srv_checks_start(&s->host, SRV_PHASE_CONFIG);
	if (rc == 0 && (rc = srv_checks_start(&s->host, SRV_PHASE_UIDS)) == 0)
		log_uids(&s->host.uids);
	if (rc != 0)
		return rc;
	bound_malloc_arenas();
	if (install_signals() < 0)
		return 1;
	/* Before any thread, like the capabilities below (sandbox/reaper.h). */
	*reaper_fd = sbx_reaper_init();
	if (*reaper_fd < 0)
		log_msg("warn",
			"cannot reap what commands leave behind (%s): their orphans go to PID 1, and a "
			"command's group is reused only once PID 1 has reaped them",
			sbx_strerror(*reaper_fd));
	/* Before any thread: capabilities are per thread. Without it a root
	 * server's writes for a tenant would pass its quota. */
	rc = sbx_quota_drop_override();
	if (rc < 0) {
		fprintf(stderr, "sandboxd: cannot drop CAP_SYS_RESOURCE: %s\n", sbx_strerror(rc));
		return 1;
	}
	if ((rc = srv_checks_start(&s->host, SRV_PHASE_STORE)) != 0)
		return rc;
	log_disk_mode(s);
	recover_store(s);
	return srv_checks_start(&s->host, SRV_PHASE_HOST);
}

int cli_serve(struct sbx_config *cfg, const struct cli_args *args)
{
	(void)args;
	struct server s = {.cfg = cfg};
	int reaper_fd = -1;
	srv_host_init(&s.host, cfg, true);
	int status = check_and_prepare(&s, &reaper_fd);
	/* After the checks that must run before any thread (common/log.h) */
	if (status == 0)
		log_writer_start();
	if (status == 0 && start_backend(&s) == 0 && start_app(&s) == 0 && start_http(&s) == 0) {
		wait_for_signal(reaper_fd, s.host.uids_lock);
		shut_down(&s);
	} else if (status == 0) {
		status = 1;
	}
	server_free(&s);
	if (status == 0)
		log_msg("info", "stopped");
	log_writer_stop();
	if (signal_pipe[0] >= 0) {
		close(signal_pipe[0]);
		close(signal_pipe[1]);
	}
	if (reaper_fd >= 0)
		close(reaper_fd);
	return status;
}
