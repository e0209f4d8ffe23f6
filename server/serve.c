/* sandboxd serve: open the store, recover, start the backend, the runner
 * and the HTTP daemon, then wait for SIGTERM/SIGINT and shut down in
 * order: stop accepting, cancel commands, let in-flight requests finish
 * (bounded), stop the daemon, close the store. */
#include <errno.h>
#include <fcntl.h>
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
#include "routes/app.h"
#include "routes/exec.h"
#include "http/hub.h"
#include "http/metrics.h"
#include "http/watch.h"
#include "sandbox/backend.h"
#include "sandbox/fsops.h"
#include "sandbox/runner.h"
#include "sandbox/workspace.h"
#include "server/cli.h"
#include "server/datadir.h"
#include "http/daemon.h"
#include "server/retention.h"
#include "store/store.h"

static int signal_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;
	ssize_t n = write(signal_pipe[1], &c, 1);
	(void)n;
	errno = saved;
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
		if (app_tenant_get(a, v[i].name, &t) < 0)
			continue;
		const char *dir = sbx_workspace_host_dir(t->ws);
		char blocked[4096] = "";
		int r = a->drop_privs ? sbx_workspace_reachable(dir, t->uid, t->gid, blocked, sizeof blocked) : 0;
		if (r == -EACCES) {
			fprintf(stderr,
				"sandboxd: tenant %s (uid %u) cannot reach its workspace %s: %s is not searchable "
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
				log_msg("info", "removed %d temporary files of interrupted writes in tenant %s",
					removed, t->name);
		}
		app_tenant_put(a, &t);
	}
	store_tenants_free(v, n);
	return rc;
}

/* The hub cancels a streamed command whose client left. */
static void cancel_job(void *ctx, uint64_t job)
{
	sbx_runner_cancel(ctx, job);
}

int cli_serve(struct sbx_config *cfg, const struct cli_args *args)
{
	(void)args;
	int status = 1;
	char err[512] = "";
	struct store *store = NULL;
	struct sbx_backend *backend = NULL;
	struct sbx_runner *runner = NULL;
	struct http_daemon *http = NULL;
	struct srv_retention *retention = NULL;
	struct app app;
	bool app_ready = false;

	if (strcmp(cfg->backend, "local") == 0 && !cfg->allow_unsafe_local) {
		fprintf(stderr, "sandboxd: --backend local isolates nothing; it needs --allow-unsafe-local "
				"(development only)\n");
		return 2;
	}
	if (strcmp(cfg->backend, "local") != 0 && strcmp(cfg->backend, "bwrap") != 0) {
		fprintf(stderr, "sandboxd: --backend must be bwrap or local\n");
		return 2;
	}
	/* Commands must get default signal dispositions; the server itself
	 * must survive writes to pipes whose reader is gone. */
	signal(SIGPIPE, SIG_IGN);
	if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return 1;
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	if (srv_prepare_data_dir(cfg) < 0)
		goto out;
	int rc = store_open(&store, cfg->db_path, true, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: %s: %s\n", cfg->db_path, *err ? err : sbx_strerror(rc));
		goto out;
	}
	int lost = 0, failed = 0;
	store_recover(store, &lost, &failed);
	if (lost || failed)
		log_msg("info", "recovered: %d execs marked lost, %d transfers marked failed", lost, failed);

	/* cgroups are host-wide: the uid range (distinct per server on a
	 * host) names this server's own group. */
	char cgroup_root[64];
	snprintf(cgroup_root, sizeof cgroup_root, "sandboxd/%lld", (long long)cfg->uid_base);
	struct sbx_backend_config bc = { .name = cfg->backend, .use_cgroups = cfg->use_cgroups,
					 .cgroup_root = cgroup_root };
	rc = sbx_backend_new(&backend, &bc);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: backend %s unavailable: %s\n", cfg->backend,
			rc == -ENOENT ? "bwrap is not installed (apt-get install bubblewrap)" : sbx_strerror(rc));
		goto out;
	}
	int swept = sbx_backend_sweep(backend);
	if (swept > 0)
		log_msg("info", "removed %d cgroups left by an earlier run", swept);
	if (strcmp(cfg->backend, "local") == 0)
		log_msg("warn", "backend local: commands run on the host WITHOUT isolation (development only)");
	if (!sbx_openat2_supported())
		log_msg("error", "openat2 is unavailable (kernel older than 5.6, or running under a tool that "
				 "does not know it): every file route will answer 503 and /readyz is unavailable");
	rc = sbx_runner_new(&runner);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: cannot start the runner: %s\n", sbx_strerror(rc));
		goto out;
	}

	app_init(&app, cfg, store, err, sizeof err);
	app_ready = true;
	app.backend = backend;
	app.runner = runner;
	rc = http_watch_new(&app.watch);
	if (rc < 0) {
		/* Without it no suspended request notices its client leaving. */
		fprintf(stderr, "sandboxd: cannot start the disconnect watcher: %s\n", sbx_strerror(rc));
		goto out;
	}
	http_hub_new(&app.hub, app.metrics, app.watch, cancel_job, runner);
	route_exec_init(&app);
	if (prepare_workspaces(&app) < 0)
		goto out;
	srv_retention_start(&retention, &app);

	rc = http_daemon_start(&http, &app.http, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: %s\n", err);
		goto out;
	}
	char health[256] = "";
	sbx_backend_health(backend, health, sizeof health);
	log_msg("info", "listening on %s (port %u, %s), data %s, backend %s: %s", cfg->listen,
		http_daemon_port(http), cfg->tls_cert ? "https" : "http", cfg->data_dir, cfg->backend, health);

	for (;;) {
		struct pollfd pfd = { .fd = signal_pipe[0], .events = POLLIN };
		if (poll(&pfd, 1, -1) > 0)
			break;
	}
	log_msg("info", "shutting down: no new connections, cancelling commands");
	app.stopping = true;
	http_daemon_quiesce(http);
	sbx_runner_cancel_all(runner);
	http_hub_close_all(app.hub);
	/* In-flight requests get a bounded time to finish. */
	int64_t deadline = mono_ns() + cfg->shutdown_grace_s * 1000000000LL;
	while (sbx_runner_active(runner) > 0 && mono_ns() < deadline)
		usleep(10000);
	/* The runner reports what is left (resuming their connections) before
	 * the daemon stops: libmicrohttpd must not stop with suspended ones.
	 * It stays allocated until the daemon is gone, so a late cancel or
	 * submit from a request thread finds a stopped runner, not freed
	 * memory. */
	int64_t left_ms = (deadline - mono_ns()) / 1000000;
	if (sbx_runner_stop_within(runner, left_ms > 1000 ? left_ms : 1000) < 0) {
		/* A turn of the runner never ended (a defect: it must not wait on
		 * anything a tenant controls). SIGTERM still ends the server:
		 * without the clean shutdown, which the next start recovers
		 * from like a crash. */
		const char *step = "";
		int64_t busy = sbx_runner_busy_ms(runner, &step);
		log_msg("error", "the runner has been stuck for %lld ms (%s): exiting without a clean shutdown",
			(long long)busy, step);
		_exit(1);
	}
	/* The runner has reported every exit; their records and answers are
	 * made on the registry's completion thread. */
	route_exec_drain(&app);
	usleep(50000);
	status = 0;
out:
	srv_retention_stop(&retention);
	sbx_runner_stop(runner);
	if (app_ready)
		route_exec_drain(&app);
	http_daemon_stop(&http);
	sbx_runner_free(&runner);
	if (app_ready) {
		http_hub_free(&app.hub);
		http_watch_free(&app.watch);
		route_exec_fini(&app);
	}
	if (app_ready)
		app_fini(&app);
	sbx_backend_free(&backend);
	store_close(&store);
	if (status == 0)
		log_msg("info", "stopped");
	close(signal_pipe[0]);
	close(signal_pipe[1]);
	return status;
}
