/* Operations: liveness, readiness, metrics, the contract and the dashboard. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/embedded.h"
#include "common/errors.h"
#include "common/xmalloc.h"
#include "http/response.h"
#include "routes/admit.h"
#include "routes/app.h"
#include "routes/tenant_cache.h"
#include "routes/provider.h"
#include "routes/policy.h"
#include "routes/images.h"
#include "routes/storage.h"
#include "routes/code.h"
#include "http/metrics.h"
#include "http/pool.h"
#include "http/route.h"
#include "sandbox/backend.h"
#include "sandbox/cgroup.h"
#include "sandbox/diskimg.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/quota.h"
#include "sandbox/runner.h"
#include "sandbox/uids.h"
#include "sandbox/workspace.h"
#include "store/store.h"

int route_healthz(struct http_req *r)
{
	return http_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

#define RUNNER_STALL_MS 5000

/* Disk: the tenants' quotas (configuration: never a reason to be unready,
 * but said plainly) and the store's reserve (below it new tenant work is
 * refused: unready). */
static bool readyz_disk(struct app *a, json_t *body)
{
	static const char *const modes[] = {"none", "project", "image"};
	bool enforced = a->disk_mode != DISK_NONE;
	char *quota =
	    a->disk_mode == DISK_PROJECT
		? xasprintf("%s; per tenant %lld bytes and %lld inodes (project id = tenant uid)",
			    sbx_quota_detail(a->quota), (long long)a->cfg->tenant_disk_quota_bytes,
			    (long long)a->cfg->tenant_disk_quota_inodes)
	    : enforced ? xasprintf("%s; per tenant %lld bytes and %lld inodes",
				   sbx_diskimg_detail(a->diskimg), (long long)a->cfg->tenant_disk_quota_bytes,
				   (long long)a->cfg->tenant_disk_quota_inodes)
		       : xasprintf("%s; %s; enforced instead: fsize-limit-bytes per file a "
				   "command writes, max-upload-bytes per upload, and the store reserve",
				   sbx_quota_detail(a->quota), sbx_diskimg_detail(a->diskimg));
	json_t *dq = json_pack("{s:s, s:s, s:s}", "status", enforced ? "enforced" : "unavailable", "mode",
			       modes[a->disk_mode], "detail", quota);
	free(quota);
	if (a->disk_mode == DISK_IMAGE) {
		int used = 0, total = 0, max = 0;
		sbx_diskimg_loops(&used, &total, &max);
		json_object_set_new(
		    dq, "loop_devices",
		    json_pack("{s:i, s:i, s:i}", "attached", used, "total", total, "max_loop", max));
	}
	json_object_set_new(body, "disk_quota", dq);
	uint64_t avail = 0, total = 0;
	bool low = route_storage_low(a, &avail, &total);
	char *detail =
	    xasprintf("%llu of %llu bytes free on the store's filesystem (%s), %lld kept for the store%s",
		      (unsigned long long)avail, (unsigned long long)total, a->store_dir,
		      (long long)a->cfg->store_reserve_bytes, low ? ": new tenant work is refused" : "");
	json_object_set_new(body, "storage",
			    json_pack("{s:s, s:s, s:I, s:I}", "status", low ? "low" : "ok", "detail", detail,
				      "available_bytes", (json_int_t)avail, "reserve_bytes",
				      (json_int_t)a->cfg->store_reserve_bytes));
	free(detail);
	return !low;
}

/* The watchdog: a runner turn never waits on a tenant, so one that lasts
 * seconds means that thread's commands do not start, end or time out.
 * Every thread is watched; the worst one decides, and each is listed. */
static bool readyz_runner(struct app *a, json_t *body)
{
	size_t n = sbx_runner_threads(a->runner), stalled = 0, worst = 0;
	int64_t worst_ms = -1;
	const char *worst_step = "";
	json_t *threads = json_array();
	for (size_t i = 0; i < n; i++) {
		struct sbx_runner_thread_stats st;
		sbx_runner_thread_stats(a->runner, i, &st);
		bool ok = st.busy_ms < RUNNER_STALL_MS;
		char *detail = ok ? xasprintf("turning")
				  : xasprintf("stalled for %lld ms (%s)", (long long)st.busy_ms, st.step);
		stalled += !ok;
		if (st.busy_ms > worst_ms) {
			worst_ms = st.busy_ms;
			worst = i;
			worst_step = st.step;
		}
		json_array_append_new(threads,
				      json_pack("{s:s, s:s, s:I, s:I}", "status", ok ? "ok" : "unavailable",
						"detail", detail, "commands", (json_int_t)st.jobs, "queued",
						(json_int_t)st.queued));
		free(detail);
	}
	char *msg = stalled ? xasprintf("thread %zu of %zu stalled for %lld ms (%s)", worst, n,
					(long long)worst_ms, worst_step)
			    : xasprintf("turning (%zu thread%s)", n, n == 1 ? "" : "s");
	json_object_set_new(body, "runner",
			    json_pack("{s:s, s:s, s:o}", "status", stalled ? "unavailable" : "ok", "detail",
				      msg, "threads", threads));
	free(msg);
	return !stalled;
}

/* The runner threads' figures: commands owned and waiting to start per
 * thread, the starts and the time they held their thread, and how much
 * starts overlapped across threads (a count, not a time). */
static void runner_metrics(struct app *a, struct buf *out)
{
	size_t n = sbx_runner_threads(a->runner);
	uint64_t ov[SBX_RUNNER_MAX_THREADS];
	struct sbx_runner_thread_stats st[SBX_RUNNER_MAX_THREADS];
	for (size_t i = 0; i < n; i++)
		sbx_runner_thread_stats(a->runner, i, &st[i]);
	buf_appendf(out,
		    "# HELP sandboxd_runner_threads Threads that start and own commands (runner-threads).\n"
		    "# TYPE sandboxd_runner_threads gauge\nsandboxd_runner_threads %zu\n"
		    "# HELP sandboxd_runner_commands Commands a runner thread owns (queued or running).\n"
		    "# TYPE sandboxd_runner_commands gauge\n",
		    n);
	for (size_t i = 0; i < n; i++)
		buf_appendf(out, "sandboxd_runner_commands{thread=\"%zu\"} %zu\n", i, st[i].jobs);
	buf_appendf(out,
		    "# HELP sandboxd_runner_queued Commands handed to a runner thread, not started yet.\n"
		    "# TYPE sandboxd_runner_queued gauge\n");
	for (size_t i = 0; i < n; i++)
		buf_appendf(out, "sandboxd_runner_queued{thread=\"%zu\"} %zu\n", i, st[i].queued);
	buf_appendf(out,
		    "# HELP sandboxd_runner_spawns_total Commands a runner thread started (spawn calls).\n"
		    "# TYPE sandboxd_runner_spawns_total counter\n");
	for (size_t i = 0; i < n; i++)
		buf_appendf(out, "sandboxd_runner_spawns_total{thread=\"%zu\"} %llu\n", i,
			    (unsigned long long)st[i].spawns);
	buf_appendf(out, "# HELP sandboxd_runner_spawn_seconds_total Time spawns held their runner thread.\n"
			 "# TYPE sandboxd_runner_spawn_seconds_total counter\n");
	for (size_t i = 0; i < n; i++)
		buf_appendf(out, "sandboxd_runner_spawn_seconds_total{thread=\"%zu\"} %.6f\n", i,
			    (double)st[i].spawn_ns / 1e9);
	sbx_runner_spawn_overlap(a->runner, ov, n ? n : 1);
	buf_appendf(out, "# HELP sandboxd_runner_spawn_overlap_total Spawns by how many other runner threads "
			 "were inside a spawn when it began.\n"
			 "# TYPE sandboxd_runner_spawn_overlap_total counter\n");
	for (size_t k = 0; k < n; k++)
		buf_appendf(out, "sandboxd_runner_spawn_overlap_total{others=\"%zu\"} %llu\n", k,
			    (unsigned long long)ov[k]);
	unsigned waiting, running;
	sbx_runner_net_counts(a->runner, &waiting, &running);
	buf_appendf(
	    out,
	    "# HELP sandboxd_network_setups Network setups of commands (the namespace taken from the egress "
	    "gateway's pool) by "
	    "state: waiting for a setup thread or for their tenant's turn, or running.\n"
	    "# TYPE sandboxd_network_setups gauge\n"
	    "sandboxd_network_setups{state=\"waiting\"} %u\nsandboxd_network_setups{state=\"running\"} %u\n",
	    waiting, running);
}

/* How tenants get uids; several sharing one without the operator's
 * allow-shared-uid are not served. */
static bool readyz_uids(struct app *a, json_t *body)
{
	char msg[512];
	bool ok = route_uids_describe(a, msg, sizeof msg);
	json_object_set_new(body, "uids",
			    json_pack("{s:s, s:s, s:s}", "status", ok ? "ok" : "unavailable", "mode",
				      sbx_uids_mode_name(a->uids ? a->uids->mode : SBX_UIDS_ROOT), "detail",
				      msg));
	return ok;
}

/* CPU budgets (v2 cpu.max, v1 cpu.cfs_quota_us, over a 100 ms period), in force
 * or not: tenants' budgets are configuration, never a reason to be
 * unready. No tenant is named here (/readyz needs no token): each one's
 * usage and budget are in /metrics. */
static void readyz_cpu(struct app *a, json_t *body)
{
	bool usage = false;
	bool on = a->backend && sbx_backend_cpu(a->backend, &usage);
	long long m = (long long)a->cfg->tenant_cpu_budget_millicores;
	char dflt[64] = "no default budget (0): equal shares only";
	if (m)
		snprintf(dflt, sizeof dflt, "default %lld.%03lld cores", m / 1000, m % 1000);
	bool v2 = sbx_cgroup_caps()->version == 2;
	char *detail =
	    on ? xasprintf("cgroup %s cpu: each tenant's commands together get at most their budget "
			   "(%s per 100 ms period; %s), tenants equal %s under contention; usage %s",
			   v2 ? "v2" : "v1", v2 ? "cpu.max" : "cpu.cfs_quota_us", dflt,
			   v2 ? "cpu.weight" : "cpu.shares",
			   usage ? (v2 ? "from cpu.stat in /metrics" : "from cpuacct in /metrics")
				 : "unavailable")
	       : xasprintf("unavailable (no cgroup cpu controller this server can write, or cgroups "
			   "off): a tenant's CPU time is bounded only by its commands' timeouts");
	json_object_set_new(body, "cpu",
			    json_pack("{s:s, s:s, s:I}", "status", on ? "enforced" : "unavailable", "detail",
				      detail, "default_budget_millicores", (json_int_t)m));
	free(detail);
}

/* The backends that start commands here (bwrap, local): their commands
 * run inside cgroups or not. */
bool route_containment_describe(const struct sbx_config *cfg, struct sbx_backend *const *bs, size_t n,
				bool images, char *out, size_t outsz)
{
	size_t len = 0;
	out[0] = '\0';
#define SAY(...)                                                                                             \
	do {                                                                                                 \
		if (len < outsz)                                                                             \
			len += (size_t)snprintf(out + len, outsz - len, __VA_ARGS__);                        \
	} while (0)
	bool contained = n > 0;
	for (size_t i = 0; i < n; i++) {
		if (sbx_backend_contained(bs[i]))
			continue;
		contained = false;
		SAY("%sbackend %s runs commands without cgroups (rlimits only: no per-command memory or "
		    "process limit on the whole tree, no tenant budget): %s",
		    len ? "; " : "", sbx_backend_name(bs[i]), sbx_backend_uncontained_why(bs[i]));
	}
	if (contained) {
		const struct sbx_cgroup_caps *c = sbx_cgroup_caps();
		bool have[4] = {c->memory, c->pids, c->cpu, c->io && images};
		static const char *const ctrl[4] = {"memory", "pids", "cpu", "io"};
		const struct {
			int64_t value;
			const char *key;
			int ctrl;
		} want[] = {{cfg->mem_limit_bytes, "mem-limit-bytes", 0},
			    {cfg->tenant_mem_budget_bytes, "tenant-mem-budget-bytes", 0},
			    {cfg->nproc_limit, "nproc-limit", 1},
			    {cfg->tenant_nproc_budget, "tenant-nproc-budget", 1},
			    {cfg->tenant_cpu_budget_millicores, "tenant-cpu-budget-millicores", 2},
			    {cfg->tenant_io_read_bps, "tenant-io-read-bps", 3},
			    {cfg->tenant_io_write_bps, "tenant-io-write-bps", 3},
			    {cfg->tenant_io_read_iops, "tenant-io-read-iops", 3},
			    {cfg->tenant_io_write_iops, "tenant-io-write-iops", 3}};
		bool missing = false;
		for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
			if (have[want[k].ctrl] || !want[k].value)
				continue;
			missing = true;
			if (want[k].ctrl == 3 && !images)
				SAY("%sno disk images (disk-quota=image) to apply I/O budgets to: %s=%lld "
				    "not "
				    "enforced",
				    len ? "; " : "", want[k].key, (long long)want[k].value);
			else
				SAY("%sno cgroup %s controller (v%d): %s=%lld not enforced", len ? "; " : "",
				    ctrl[want[k].ctrl], c->version, want[k].key, (long long)want[k].value);
		}
		if (missing)
			SAY(" (%s); a command whose limits or budget need it does not run",
			    c->why[0] ? c->why : "the controller is not enabled for this server");
		contained = !missing;
	}
#undef SAY
	return contained;
}

/* What the configuration promises against what is enforced: "enforced",
 * or "degraded" (the operator's use-cgroups=false or allow-uncontained)
 * with what is not. Never a reason to be unavailable: the server started
 * on the operator's word; it is never `ready` either. */
static bool readyz_containment(struct app *a, json_t *body)
{
	char msg[1024];
	bool ok = route_containment_describe(a->cfg, a->backends, a->nbackends, a->disk_mode == DISK_IMAGE,
					     msg, sizeof msg);
	const struct sbx_cgroup_caps *c = sbx_cgroup_caps();
	int version = a->backend && sbx_backend_contained(a->backend) ? c->version : 0;
	char *detail = ok ? xasprintf("cgroup v%d: every configured limit and budget is enforced", version)
			  : xasprintf("%s; started anyway: %s", msg,
				      a->cfg->use_cgroups ? "allow-uncontained=true" : "use-cgroups=false");
	json_object_set_new(body, "containment",
			    json_pack("{s:s, s:s, s:i, s:b}", "status", ok ? "enforced" : "degraded",
				      "detail", detail, "cgroup_version", version, "allow_uncontained",
				      a->cfg->allow_uncontained));
	free(detail);
	return ok;
}

/* A tenant-level provider's entry (routes/provider.h), when offered: per
 * tenant and elsewhere, so one that is down fails only its own tenants'
 * requests (503 backend_unavailable), never this server's readiness. */
static void provider_row(struct app *a, json_t *list, const char *name, const char *isolation,
			 const char *network)
{
	if (!route_policy_backend_offered(a->cfg, name))
		return;
	char msg[600];
	route_jobs_describe(a, name, msg, sizeof msg);
	json_array_append_new(list,
			      json_pack("{s:s, s:s, s:s, s:s, s:b, s:{s:b, s:s}}", "name", name, "status",
					"ok", "detail", msg, "isolation", isolation, "default", false,
					"network", "available", false, "detail", network));
}

/* Every backend offered, for the tenants whose policy names it: what it
 * isolates, and whether it can start commands now (*ready is cleared when
 * one cannot). */
static json_t *backends_json(struct app *a, bool *ready)
{
	json_t *list = json_array();
	for (size_t i = 0; i < a->nbackends; i++) {
		char msg[256] = "", net[256] = "";
		int rc = sbx_backend_health(a->backends[i], msg, sizeof msg);
		int net_rc = sbx_backend_net_health(a->backends[i], net, sizeof net);
		if (rc != 0)
			*ready = false;
		json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:s, s:b, s:{s:b, s:s}}", "name",
						      sbx_backend_name(a->backends[i]), "status",
						      rc == 0 ? "ok" : "unavailable", "detail", msg,
						      "isolation", sbx_backend_isolation(a->backends[i]),
						      "default", a->backends[i] == a->backend, "network",
						      "available", net_rc == 0, "detail", net));
	}
	provider_row(a, list, "remote",
		     "that of the back sandboxd's backend for the tenant (remote_url in its policy)",
		     "not relayed: a remote tenant's exec with network is refused (403)");
	provider_row(a, list, "ssh",
		     "none added: commands and files have whatever the remote account (ssh_user on "
		     "ssh_host) allows; file paths are confined to ssh_root, commands are not",
		     "not enforced: an ssh tenant's exec with network is refused (403); its commands reach "
		     "what the host reaches");
	return list;
}

int route_readyz(struct http_req *r)
{
	struct app *a = r->app;
	char backend_msg[256] = "no backend", store_msg[200] = "";
	int store_rc = store_check_writable(a->store, store_msg, sizeof store_msg);
	int backend_rc =
	    a->backend ? sbx_backend_health(a->backend, backend_msg, sizeof backend_msg) : -SBX_E_BACKEND;
	bool paths_ok = sbx_openat2_supported();
	bool ready = store_rc == 0 && backend_rc == 0 && paths_ok && !a->stopping;
	json_t *body = json_pack("{s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s}}", "status", "ready", "store",
				 "status", store_rc == 0 ? "ok" : "unavailable", "detail", store_msg,
				 "backend", "name", a->backend ? sbx_backend_name(a->backend) : "none",
				 "status", backend_rc == 0 ? "ok" : "unavailable", "detail", backend_msg);
	json_object_set_new(
	    body, "workspace",
	    json_pack("{s:s, s:s}", "status", paths_ok ? "ok" : "unavailable", "detail",
		      paths_ok ? "openat2 path resolution" : "openat2 unavailable (Linux 5.6+ needed)"));
	ready = readyz_runner(a, body) && ready;
	ready = readyz_disk(a, body) && ready;
	ready = readyz_uids(a, body) && ready;
	readyz_cpu(a, body);
	bool contained = readyz_containment(a, body);
	json_object_set_new(body, "backends", backends_json(a, &ready));
	/* An unusable image fails only the commands that use it. */
	json_object_set_new(body, "images", route_images_health(a));
	if (!ready)
		json_object_set_new(body, "status", json_string("unavailable"));
	else if (!contained) /* serving, but less than the configuration promises */
		json_object_set_new(body, "status", json_string("degraded"));
	if (a->stopping)
		json_object_set_new(body, "stopping", json_true());
	json_object_set_new(body, "languages", route_code_languages(a)); /* what POST /code runs */
	return http_reply_json(r, ready ? 200 : 503, body);
}

/* Each tenant's budgets, from its policy. */
#define NBUDGETS 7
static void tenant_budgets(struct app *a, const struct store_tenant *v, size_t n, struct buf *out)
{
	int64_t(*b)[NBUDGETS] = xcalloc(n + 1, sizeof *b);
	for (size_t i = 0; i < n; i++) {
		struct route_policy p;
		char err[256];
		bool ok = route_policy_load(a->store, a->cfg, v[i].name, &p, NULL, NULL) == 0;
		if (!ok && route_policy_defaults(a->cfg, &p, err, sizeof err) < 0)
			continue;
		const int64_t one[NBUDGETS] = {p.tenant_mem_budget_bytes,      p.tenant_nproc_budget,
					       p.tenant_cpu_budget_millicores, p.tenant_io_read_bps,
					       p.tenant_io_write_bps,	       p.tenant_io_read_iops,
					       p.tenant_io_write_iops};
		memcpy(b[i], one, sizeof one);
		route_policy_clear(&p);
	}
	static const char *const family[NBUDGETS][2] = {
	    {"sandboxd_tenant_memory_budget_bytes", "Each tenant's memory budget (its policy; 0: none)."},
	    {"sandboxd_tenant_processes_budget", "Each tenant's process budget (its policy; 0: none)."},
	    {"sandboxd_tenant_cpu_budget_cores", "Each tenant's CPU budget in cores (its policy; 0: none)."},
	    {"sandboxd_tenant_io_read_bps_budget",
	     "Each tenant's read budget on its disk image, bytes per second (its policy; 0: none)."},
	    {"sandboxd_tenant_io_write_bps_budget",
	     "Each tenant's write budget on its disk image, bytes per second (its policy; 0: none)."},
	    {"sandboxd_tenant_io_read_iops_budget",
	     "Each tenant's read budget on its disk image, operations per second (its policy; 0: none)."},
	    {"sandboxd_tenant_io_write_iops_budget",
	     "Each tenant's write budget on its disk image, operations per second (its policy; 0: none)."},
	};
	for (int k = 0; k < NBUDGETS; k++) {
		buf_appendf(out, "# HELP %s %s\n# TYPE %s gauge\n", family[k][0], family[k][1], family[k][0]);
		for (size_t i = 0; i < n; i++) {
			if (k == 2) /* millicores as cores, exactly */
				buf_appendf(out, "%s{tenant=\"%s\"} %lld.%03lld\n", family[k][0], v[i].name,
					    (long long)b[i][k] / 1000, (long long)b[i][k] % 1000);
			else
				buf_appendf(out, "%s{tenant=\"%s\"} %lld\n", family[k][0], v[i].name,
					    (long long)b[i][k]);
		}
	}
	free(b);
}

/* Each tenant's CPU time (cpuacct.usage of its group) and the time its
 * budget held its commands back (cpu.stat throttled_time), in seconds. */
static void tenant_cpu(struct app *a, const struct store_tenant *v, size_t n, struct buf *out)
{
	uint64_t(*t)[2] = xcalloc(n + 1, sizeof *t);
	bool *have = xcalloc(n + 1, sizeof *have), usage = false;
	sbx_backend_cpu(a->backend, &usage);
	for (size_t i = 0; usage && i < n; i++)
		have[i] = sbx_backend_tenant_cpu(a->backend, (uid_t)(a->cfg->uid_base + v[i].slot), &t[i][0],
						 &t[i][1]) == 0;
	static const char *const family[2][2] = {
	    {"sandboxd_tenant_cpu_seconds_total", "CPU time of a tenant's commands together (cpuacct)."},
	    {"sandboxd_tenant_cpu_throttled_seconds_total",
	     "Time a tenant's commands waited because of its CPU budget."},
	};
	for (int k = 0; usage && k < 2; k++) {
		buf_appendf(out, "# HELP %s %s\n# TYPE %s counter\n", family[k][0], family[k][1],
			    family[k][0]);
		for (size_t i = 0; i < n; i++)
			if (have[i])
				buf_appendf(out, "%s{tenant=\"%s\"} %llu.%09llu\n", family[k][0], v[i].name,
					    (unsigned long long)(t[i][k] / 1000000000u),
					    (unsigned long long)(t[i][k] % 1000000000u));
	}
	free(t);
	free(have);
}

/* Each tenant's pressure stall information (v2 with PSI only: the
 * families are absent on v1): the share of the last 10 s some or all of
 * its tasks stalled on memory, cpu or io, and the stalled time in all. */
static void tenant_pressure(struct app *a, const struct store_tenant *v, size_t n, struct buf *out)
{
	if (!sbx_cgroup_caps()->psi || !sbx_backend_contained(a->backend))
		return;
	struct sbx_cgroup_pressure *p = xcalloc(n + 1, sizeof *p);
	bool *have = xcalloc(n + 1, sizeof *have);
	for (size_t i = 0; i < n; i++)
		have[i] = sbx_backend_tenant_pressure(a->backend, (uid_t)(a->cfg->uid_base + v[i].slot),
						      &p[i]) == 0;
	static const char *const res[3] = {"memory", "cpu", "io"};
	buf_appendf(out, "# HELP sandboxd_tenant_pressure_avg10 Share of the last 10 s (percent) some or all "
			 "(full) of a tenant's tasks stalled on a resource (PSI of its cgroup).\n"
			 "# TYPE sandboxd_tenant_pressure_avg10 gauge\n");
	for (size_t i = 0; i < n; i++) {
		const struct sbx_psi *r[3] = {&p[i].memory, &p[i].cpu, &p[i].io};
		for (int k = 0; have[i] && k < 3; k++)
			buf_appendf(
			    out,
			    "sandboxd_tenant_pressure_avg10{tenant=\"%s\",resource=\"%s\",kind=\"some\"} "
			    "%.2f\nsandboxd_tenant_pressure_avg10{tenant=\"%s\",resource=\"%s\",kind="
			    "\"full\"} %.2f\n",
			    v[i].name, res[k], r[k]->some_avg10, v[i].name, res[k], r[k]->full_avg10);
	}
	buf_appendf(out, "# HELP sandboxd_tenant_pressure_seconds_total Time some or all (full) of a "
			 "tenant's tasks stalled on a resource since its cgroup was made (PSI total).\n"
			 "# TYPE sandboxd_tenant_pressure_seconds_total counter\n");
	for (size_t i = 0; i < n; i++) {
		const struct sbx_psi *r[3] = {&p[i].memory, &p[i].cpu, &p[i].io};
		for (int k = 0; have[i] && k < 3; k++)
			buf_appendf(
			    out,
			    "sandboxd_tenant_pressure_seconds_total{tenant=\"%s\",resource=\"%s\",kind="
			    "\"some\"} %llu.%06llu\n"
			    "sandboxd_tenant_pressure_seconds_total{tenant=\"%s\",resource=\"%s\",kind="
			    "\"full\"} %llu.%06llu\n",
			    v[i].name, res[k], (unsigned long long)(r[k]->some_total_us / 1000000u),
			    (unsigned long long)(r[k]->some_total_us % 1000000u), v[i].name, res[k],
			    (unsigned long long)(r[k]->full_total_us / 1000000u),
			    (unsigned long long)(r[k]->full_total_us % 1000000u));
	}
	free(p);
	free(have);
}

/* Each tenant's commands together against its budget (cgroups only). */
static void tenant_usage(struct app *a, struct buf *out)
{
	struct store_tenant *v = NULL;
	size_t n = 0;
	if (!a->backend || store_tenant_list(a->store, &v, &n) < 0)
		return;
	uint64_t(*use)[2] = xcalloc(n + 1, sizeof *use);
	bool *have = xcalloc(n + 1, sizeof *have);
	for (size_t i = 0; i < n; i++)
		have[i] = sbx_backend_tenant_usage(a->backend, (uid_t)(a->cfg->uid_base + v[i].slot),
						   &use[i][0], &use[i][1]) == 0;
	static const char *const family[2][2] = {
	    {"sandboxd_tenant_memory_bytes", "Memory of a tenant's commands together."},
	    {"sandboxd_tenant_processes", "Processes of a tenant's commands together."},
	};
	for (int k = 0; k < 2; k++) {
		buf_appendf(out, "# HELP %s %s\n# TYPE %s gauge\n", family[k][0], family[k][1], family[k][0]);
		for (size_t i = 0; i < n; i++)
			if (have[i])
				buf_appendf(out, "%s{tenant=\"%s\"} %llu\n", family[k][0], v[i].name,
					    (unsigned long long)use[i][k]);
	}
	tenant_cpu(a, v, n, out);
	tenant_pressure(a, v, n, out);
	tenant_budgets(a, v, n, out);
	free(use);
	free(have);
	store_tenants_free(v, n);
}

/* Each tenant's disk use against its quota (project quotas: the
 * project's charge; images: statfs of the tenant's mounted image). */
static void tenant_disk(struct app *a, struct buf *out)
{
	struct store_tenant *v = NULL;
	size_t n = 0;
	if (a->disk_mode == DISK_NONE || store_tenant_list(a->store, &v, &n) < 0)
		return;
	buf_appendf(out, "# HELP sandboxd_tenant_disk_bytes Bytes charged to a tenant's disk quota.\n"
			 "# TYPE sandboxd_tenant_disk_bytes gauge\n");
	for (size_t i = 0; i < n; i++) {
		struct sbx_quota_usage u;
		char *tdir = xasprintf("%s/tenants/%s", a->cfg->data_dir, v[i].name);
		int rc = a->disk_mode == DISK_IMAGE
			     ? sbx_diskimg_usage(tdir, &u)
			     : sbx_quota_usage(a->quota, (uint32_t)(a->cfg->uid_base + v[i].slot), &u);
		free(tdir);
		if (rc == 0)
			buf_appendf(out, "sandboxd_tenant_disk_bytes{tenant=\"%s\"} %llu\n", v[i].name,
				    (unsigned long long)u.bytes);
	}
	buf_appendf(out,
		    "# HELP sandboxd_tenant_disk_quota_bytes Each tenant's disk quota (0: none).\n"
		    "# TYPE sandboxd_tenant_disk_quota_bytes gauge\nsandboxd_tenant_disk_quota_bytes %lld\n",
		    (long long)a->cfg->tenant_disk_quota_bytes);
	store_tenants_free(v, n);
}

/* Whether a sample line is labelled tenant="X" with X other than own. */
static bool other_tenant(const char *line, size_t len, const char *own)
{
	const char *end = memchr(line, '}', len), *l = memchr(line, '{', len);
	for (; l && end && l < end; l = memchr(l + 1, ',', (size_t)(end - l - 1))) {
		if (strncmp(l + 1, "tenant=\"", 8) != 0)
			continue;
		size_t n = strlen(own);
		return !(strncmp(l + 9, own, n) == 0 && l[9 + n] == '"');
	}
	return false;
}

/* Each tenant's counters in the order of egress_series. */
enum { EG_ALLOWED, EG_DENIED, EG_UP, EG_DOWN, EG_DNS, EG_UDP, EG_OPEN, EG__N };
struct egress_tenant {
	char tenant[64];
	uint64_t v[EG__N];
};
struct egress_seen {
	struct egress_tenant *t;
	size_t n;
};

static void egress_one(void *ctx, const char *tenant, const struct sbx_egress_counts *c)
{
	struct egress_seen *s = ctx;
	s->t = xrealloc(s->t, (s->n + 1) * sizeof *s->t);
	struct egress_tenant *t = &s->t[s->n++];
	snprintf(t->tenant, sizeof t->tenant, "%s", tenant);
	const uint64_t v[EG__N] = {c->allowed,	   c->denied,	   c->bytes_up, c->bytes_down,
				   c->dns_refused, c->udp_dropped, c->open};
	memcpy(t->v, v, sizeof v);
}

/* One line per counter; a family's lines are consecutive, its HELP on the first. */
static const struct {
	const char *name, *type, *help, *label; /* label: the extra label and value, or "" */
} egress_series[EG__N] = {
    {"sandboxd_egress_connections_total", "counter", "Connections of commands with network, by verdict.",
     ",verdict=\"allowed\""},
    {"sandboxd_egress_connections_total", NULL, NULL, ",verdict=\"denied\""},
    {"sandboxd_egress_bytes_total", "counter",
     "Bytes the gateway relayed: up (sandbox to destination), down.", ",direction=\"up\""},
    {"sandboxd_egress_bytes_total", NULL, NULL, ",direction=\"down\""},
    {"sandboxd_egress_dns_refused_total", "counter", "DNS questions the sandbox's resolver refused.", ""},
    {"sandboxd_egress_udp_dropped_total", "counter", "UDP datagrams other than DNS, dropped.", ""},
    {"sandboxd_egress_open", "gauge", "Connections through the gateway open now.", ""},
};

void route_egress_metrics(struct app *a, struct buf *out)
{
	struct egress_seen s = {NULL, 0};
	if (!a->egress)
		return;
	sbx_egress_gateway_counts(a->egress, egress_one, &s);
	for (int k = 0; k < EG__N; k++) {
		if (egress_series[k].help)
			buf_appendf(out, "# HELP %s %s\n# TYPE %s %s\n", egress_series[k].name,
				    egress_series[k].help, egress_series[k].name, egress_series[k].type);
		for (size_t i = 0; i < s.n; i++)
			buf_appendf(out, "%s{tenant=\"%s\"%s} %llu\n", egress_series[k].name, s.t[i].tenant,
				    egress_series[k].label, (unsigned long long)s.t[i].v[k]);
	}
	free(s.t);
	buf_appendf(out,
		    "# HELP sandboxd_egress_ledger_failures_total Egress records not written (queue full or "
		    "store errors).\n# TYPE sandboxd_egress_ledger_failures_total counter\n"
		    "sandboxd_egress_ledger_failures_total %llu\n",
		    (unsigned long long)store_egress_failures(a->store));
}

/* Without the admin scope (an operator's: audit:read is a scope any
 * tenant may give its own tokens), /metrics shows the global series and
 * the caller's own tenant's, never another tenant's: any series labelled
 * tenant= (usage, budgets, pool queues, ...) is kept only for the
 * token's tenant. */
static void keep_own_tenant(struct buf *in, const char *own)
{
	struct buf kept;
	buf_init(&kept, 16u << 20);
	const char *p = in->ptr ? in->ptr : "", *end = p + in->len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
		if (*p == '#' || !other_tenant(p, len, own))
			buf_append(&kept, p, len);
		p += len;
	}
	buf_free(in);
	*in = kept;
}

/* The backend's series: commands refused for their limits, containment,
 * the cgroup driver, the kept command cgroups and the warm sandboxes. */
static void backend_metrics(struct app *a, struct buf *out)
{
	buf_appendf(
	    out,
	    "# HELP sandboxd_exec_refused_limits_total Commands not run because their limits "
	    "(cgroup) could not be applied.\n"
	    "# TYPE sandboxd_exec_refused_limits_total counter\nsandboxd_exec_refused_limits_total %llu\n",
	    (unsigned long long)sbx_backend_refused_limits(a->backend));
	char why[1024];
	bool contained = route_containment_describe(a->cfg, a->backends, a->nbackends,
						    a->disk_mode == DISK_IMAGE, why, sizeof why);
	buf_appendf(
	    out,
	    "# HELP sandboxd_uncontained 1 when the server runs with less containment than its "
	    "configuration promises (no cgroups, or a configured limit's controller missing: "
	    "use-cgroups=false or allow-uncontained; /readyz says what), else 0.\n"
	    "# TYPE sandboxd_uncontained gauge\nsandboxd_uncontained %d\n"
	    "# HELP sandboxd_cgroup_version The cgroup driver commands run under: 2, 1, or 0 (none).\n"
	    "# TYPE sandboxd_cgroup_version gauge\nsandboxd_cgroup_version %d\n",
	    contained ? 0 : 1, sbx_backend_contained(a->backend) ? sbx_cgroup_caps()->version : 0);
	unsigned kept_busy, kept_idle;
	sbx_backend_kept_groups(a->backend, &kept_busy, &kept_idle);
	buf_appendf(out,
		    "# HELP sandboxd_cgroups_kept Command cgroups kept for reuse: holding a command (busy) "
		    "or waiting for the tenant's next one (idle).\n"
		    "# TYPE sandboxd_cgroups_kept gauge\nsandboxd_cgroups_kept{state=\"busy\"} %u\n"
		    "sandboxd_cgroups_kept{state=\"idle\"} %u\n",
		    kept_busy, kept_idle);
	struct sbx_warm_stats ws;
	sbx_backend_warm_stats(a->backend, &ws);
	buf_appendf(out,
		    "# HELP sandboxd_warm_sandboxes Warm sandboxes waiting for a command (warm-pool per "
		    "tenant).\n"
		    "# TYPE sandboxd_warm_sandboxes gauge\nsandboxd_warm_sandboxes %u\n"
		    "# HELP sandboxd_warm_commands_total Commands that could start in a warm sandbox: in one "
		    "(warm), or cold because none of their shape waited.\n"
		    "# TYPE sandboxd_warm_commands_total counter\n"
		    "sandboxd_warm_commands_total{start=\"warm\"} %llu\n"
		    "sandboxd_warm_commands_total{start=\"cold\"} %llu\n"
		    "# HELP sandboxd_warm_made_total Warm sandboxes made: ready, failed to start, or ended "
		    "unused (idle, flushed by a policy, image or workspace change, stopped).\n"
		    "# TYPE sandboxd_warm_made_total counter\n"
		    "sandboxd_warm_made_total{outcome=\"ready\"} %llu\n"
		    "sandboxd_warm_made_total{outcome=\"failed\"} %llu\n"
		    "sandboxd_warm_made_total{outcome=\"ended\"} %llu\n",
		    ws.waiting, (unsigned long long)ws.taken, (unsigned long long)ws.cold,
		    (unsigned long long)ws.made, (unsigned long long)ws.failed, (unsigned long long)ws.ended);
}

/* This node's info series, and under `nodes` its id on every series. */
static void node_series(struct app *a, struct buf *out)
{
	const char *node = a->cfg->node_id;
	buf_appendf(out,
		    "# HELP sandboxd_node_info This node's id and version.\n"
		    "# TYPE sandboxd_node_info gauge\nsandboxd_node_info{node=\"%s\",version=\"%s\"} 1\n",
		    node, SANDBOXD_VERSION);
	/* A node of a cluster (`nodes` configured) labels every series with
	 * its id, so that series of several nodes merged by a federation or a
	 * remote-write stay apart; a lone server keeps its names as they were. */
	if (a->nodes.n > 0) {
		struct buf labelled;
		buf_init(&labelled, 32u << 20);
		http_metrics_label_all(out->ptr ? out->ptr : "", out->len, "node", node, &labelled);
		buf_free(out);
		*out = labelled;
	}
}

int route_metrics(struct http_req *r)
{
	struct buf out;
	buf_init(&out, 16u << 20);
	http_metrics_render(r->app->metrics, &out, store_audit_failures(r->app->store),
			    r->app->runner ? sbx_runner_active(r->app->runner) : 0);
	backend_metrics(r->app, &out);
	if (r->app->runner)
		runner_metrics(r->app, &out);
	route_admit_render(r->app, &out);
	tenant_usage(r->app, &out);
	tenant_disk(r->app, &out);
	route_egress_metrics(r->app, &out);
	if (r->app->http.pool)
		http_pool_render(r->app->http.pool, &out);
	/* metrics-public: the operator published every series to whoever
	 * reaches the port (no token is read), so nothing is held back. */
	if (!r->app->cfg->metrics_public && !(r->claims.scopes & AUTH_SCOPE_ADMIN))
		keep_own_tenant(&out, r->claims.tenant);
	node_series(r->app, &out);
	size_t n = 0;
	char *text = buf_steal(&out, &n);
	struct http_response *resp = http_response_bytes(text, n);
	http_response_header(resp, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	r->bytes_out += (int64_t)n;
	return http_reply_response(r, 200, resp);
}

int route_openapi(struct http_req *r)
{
	return http_reply_static(r, 200, "application/yaml", embedded_openapi.data, embedded_openapi.len);
}

/* The page's own Content-Security-Policy (its <meta>), with what a <meta>
 * cannot say: frame-ancestors 'none', so no other site can frame the
 * approval buttons under a decoy (clickjacking). Found once; a page
 * without one gets default-src 'none' (nothing it needs would load). */
static char dashboard_csp[1024];

static void dashboard_csp_init(void)
{
	static const char mark[] = "http-equiv=\"Content-Security-Policy\" content=\"";
	const char *page = (const char *)embedded_dashboard.data;
	const char *p = memmem(page, embedded_dashboard.len, mark, sizeof mark - 1);
	const char *end = p ? memchr(p + sizeof mark - 1, '"',
				     embedded_dashboard.len - (size_t)(p - page) - (sizeof mark - 1))
			    : NULL;
	int n = end ? (int)(end - (p + sizeof mark - 1)) : 0;
	if (!end || (size_t)n + 32 > sizeof dashboard_csp)
		snprintf(dashboard_csp, sizeof dashboard_csp, "default-src 'none'; frame-ancestors 'none'");
	else
		snprintf(dashboard_csp, sizeof dashboard_csp, "%.*s; frame-ancestors 'none'", n,
			 p + sizeof mark - 1);
}

int route_dashboard(struct http_req *r)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, dashboard_csp_init);
	struct http_response *resp = http_response_static(embedded_dashboard.data, embedded_dashboard.len);
	if (!resp)
		return -ENOMEM;
	http_response_header(resp, "Content-Type", "text/html; charset=utf-8");
	http_response_header(resp, "Content-Security-Policy", dashboard_csp);
	http_response_header(resp, "X-Frame-Options", "DENY");
	r->bytes_out += (int64_t)embedded_dashboard.len;
	return http_reply_response(r, 200, resp);
}
