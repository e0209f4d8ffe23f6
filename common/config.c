#include "common/config.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/nodes.h"
#include "common/xmalloc.h"

/* K_JSON: a JSON value in the file, its text on the command line; kept as
 * compact JSON text. K_MILLICORES: a CPU share in thousandths of a core,
 * 0 (none) or at least 10 (the kernel's 1 ms of quota per 100 ms
 * period), or "auto" (cfg_cpu_auto). */
enum kind { K_STR, K_INT, K_BOOL, K_JSON, K_MILLICORES };

struct option_spec {
	const char *name; /* long option name, '-' separated */
	enum kind kind;
	size_t off;
	const char *def;  /* default as text; NULL string default */
	int64_t min, max; /* K_INT bounds */
	/* K_STR and K_JSON: refuse a bad value (0 or -EINVAL with err); NULL: any. */
	int (*check)(const char *v, char *err, size_t errsz);
	const char *help;  /* what the key means: one Markdown line */
	const char *shown; /* the default as the reference shows it; NULL: def */
	bool flag;	   /* server/main.c has --NAME for it */
};

/* Each entry is {KIND(...), .help = ...}: the macros give the fields a
 * kind needs, the entry adds its meaning. */
#define S(n, f, d) .name = n, .kind = K_STR, .off = offsetof(struct sbx_config, f), .def = d
#define I(n, f, d, lo, hi)                                                                                   \
	.name = n, .kind = K_INT, .off = offsetof(struct sbx_config, f), .def = d, .min = lo, .max = hi
#define B(n, f, d) .name = n, .kind = K_BOOL, .off = offsetof(struct sbx_config, f), .def = d
#define M(n, f, d)                                                                                           \
	.name = n, .kind = K_MILLICORES, .off = offsetof(struct sbx_config, f), .def = d, .min = 0,          \
	.max = 1000000
#define SC(n, f, d, chk) S(n, f, d), .check = chk
#define J(n, f, chk) .name = n, .kind = K_JSON, .off = offsetof(struct sbx_config, f), .check = chk

static int check_node_id(const char *v, char *err, size_t errsz)
{
	if (!v || sbx_node_id_ok(v))
		return 0;
	snprintf(err, errsz, "node-id: expected [a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?, got '%s'", v);
	return -EINVAL;
}

static int check_nodes(const char *v, char *err, size_t errsz)
{
	struct sbx_nodes n;
	int rc = sbx_nodes_parse(v, &n, err, errsz);
	if (rc == 0)
		sbx_nodes_free(&n);
	return rc;
}

/* The one table of defaults, with each key's meaning (printed by
 * `sandboxd config reference`, which docs/reference/configuration.md and
 * sandboxd.conf(5) are generated from). .flag: the key has a flag of its
 * own, --NAME (server/main.c); .shown: the default as a reader should see
 * it where the value alone would mislead (derived or unset). */
static const struct option_spec specs[] = {
    {S("listen", listen, "127.0.0.1:8080"), .flag = true,
     .help = "address and port to listen on (`[::1]:8080` for IPv6)"},
    {S("data-dir", data_dir, "./sandboxd-data"), .flag = true,
     .help = "holds `sandboxd.db` and `tenants/<name>/workspace`"},
    {S("db-path", db_path, NULL), .shown = "`<data-dir>/sandboxd.db`",
     .help = "the database file: keep it on another disk than the workspaces"},
    {S("backend", backend, "bwrap"), .flag = true,
     .help = "the default backend of tenant policies: `bwrap`, or `local` (no isolation; needs "
	     "`allow-unsafe-local`)"},
    {S("backends", backends, NULL), .shown = "the value of `backend`",
     .help = "the backends this server starts and offers to tenant policies, e.g. `bwrap,local,remote,ssh` "
	     "(`local` needs `allow-unsafe-local`; `remote` and `ssh` start nothing and cannot be `backend`, "
	     "since they need a tenant's own settings)"},
    {S("network", network, "none"),
     .help = "default policy `network`: `none` or an egress allowlist (see Tenant policies)"},
    {S("approval", approval, "never"),
     .help = "default policy `approval`: `never`, `always`, or a JSON array of command patterns"},
    {I("approval-timeout-s", approval_timeout_s, "300", 1, 604800),
     .help = "how long a command waits for a decision before it is rejected"},
    {B("allow-unsafe-local", allow_unsafe_local, "false"), .flag = true,
     .help = "allow the `local` backend, which isolates nothing (every exec logs a warning)"},
    {B("allow-uncontained", allow_uncontained, "false"), .flag = true,
     .help =
	 "start although the configured limits and budgets cannot all be enforced with cgroups (no "
	 "usable driver, or a controller a nonzero `mem-limit-bytes`, `nproc-limit`, "
	 "`tenant-mem-budget-bytes`, `tenant-nproc-budget` or `tenant-cpu-budget-millicores` needs is "
	 "missing); without it `serve` refuses to start and names what is missing and the fix. With it the "
	 "server runs *degraded*: `/readyz` answers 200 `degraded`, `/metrics` has `sandboxd_uncontained 1` "
	 "(Security model, \"Fail closed\")"},
    {S("tls-cert", tls_cert, NULL), .flag = true, .shown = "none",
     .help = "PEM certificate file; with `tls-key` (both or neither); TLS 1.2 and 1.3 only"},
    {S("tls-key", tls_key, NULL), .flag = true, .shown = "none",
     .help = "PEM private key file of `tls-cert`"},
    {S("audience", audience, NULL), .shown = "none", .help = "when set, tokens must carry this `aud`"},
    {I("leeway-s", leeway_s, "30", 0, 3600), .help = "clock leeway for `exp` and `nbf`"},
    {I("threads", threads, "0", 0, 256), .help = "HTTP worker threads (0: one per core)"},
    {I("fs-threads", fs_threads, "0", 0, 1024),
     .help = "workers of the file-work pool (0: two per core, at least 4); see Fair server time"},
    {I("runner-threads", runner_threads, "0", 0, 64),
     .help = "threads that start and own commands (0: one per core); see \"The runner is watched\""},
    {I("network-setup-threads", network_setup_threads, "4", 1, 64),
     .help = "threads that take the network namespaces of commands with `network: true` from the egress "
	     "gateway's pool (never a runner thread)"},
    {I("network-setups-per-tenant", network_setups_per_tenant, "2", 1, 64),
     .help = "of them, at most this many work for one tenant at once (its other setups wait; other "
	     "tenants' take the free threads)"},
    {I("network-tenant-commands", network_tenant_commands, "8", 1, 1024),
     .help = "commands with network of one tenant at once, from the request until the command is reaped "
	     "(each holds a network namespace); one more answers 429 "
	     "`too_many_requests` with `Retry-After`"},
    {I("network-conn-max", network_conn_max, "64", 1, 65536),
     .help = "TCP connections one command with network may have open at once through the egress gateway "
	     "(beyond: reset and recorded)"},
    {I("network-conn-per-s", network_conn_per_s, "10", 1, 10000),
     .help = "new TCP connections per second of one command with network, burst twice that (beyond: "
	     "reset and recorded); bounds the host's sockets the gateway leaves in TIME_WAIT"},
    {I("network-resolve-ms", network_resolve_ms, "2000", 100, 60000),
     .help = "the longest the egress gateway resolves a connection's name; a name not resolved by then is "
	     "refused (recorded)"},
    {I("egress-threads", egress_threads, "2", 1, 64),
     .help = "event-loop threads of the egress gateway, which decides and relays every connection of "
	     "commands with network (see docs/network.md)"},
    {I("egress-pool", egress_pool, "4", 0, 256),
     .help = "network namespaces made ahead for commands with network (0: each made when asked)"},
    {I("warm-pool", warm_pool, "2", 0, 16),
     .help = "bwrap sandboxes made ahead per tenant, each waiting for exactly one command of that tenant "
	     "(0: every command starts cold), as many again for its commands with network (each in an "
	     "egress namespace of its own); they count against the tenant's budgets (see Warm sandboxes)"},
    {I("warm-idle-s", warm_idle_s, "60", 1, 86400),
     .help = "a tenant's warm sandboxes unused this long are ended"},
    {I("egress-tenant-conns", egress_tenant_conns, "256", 1, 1000000),
     .help = "connections through the egress gateway one tenant's commands may have open at once "
	     "(beyond: refused and recorded)"},
    {I("egress-tenant-pending", egress_tenant_pending, "64", 1, 100000),
     .help = "of them, connections not yet decided (ClientHello or request head still coming)"},
    {I("egress-hello-ms", egress_hello_ms, "5000", 100, 600000),
     .help = "the longest a connection may take to send what decides it (a ClientHello, an HTTP "
	     "request head); beyond: refused"},
    {I("egress-first-byte-ms", egress_first_byte_ms, "300", 0, 60000),
     .help = "a client that sends nothing for this long is decided on its destination alone (protocols "
	     "where the server speaks first, such as SSH)"},
    {I("egress-connect-ms", egress_connect_ms, "5000", 100, 600000),
     .help = "the longest the gateway tries to connect to a destination (each address in turn, within it)"},
    {I("fs-threads-per-tenant", fs_threads_per_tenant, "0", 0, 1024),
     .help = "of the `fs-threads`, at most this many run one tenant's file requests at once (0: all but a "
	     "quarter, at least one left for the others); fewer while that tenant's requests keep CPUs busy: "
	     "together at most every core but one (see Fair server time)"},
    {I("fs-queue-per-tenant", fs_queue_per_tenant, "256", 1, 1000000),
     .help = "one tenant's file requests waiting for a worker; beyond, 429 `too_many_requests` with "
	     "`Retry-After`"},
    {I("connection-timeout-s", connection_timeout_s, "60", 1, 86400), .help = "idle connection timeout"},
    {I("max-connections", max_connections, "4096", 16, 1000000), .help = "connections of all clients"},
    {I("max-connections-per-ip", max_connections_per_ip, "1024", 1, 1000000),
     .help = "connections of one client address"},
    {I("connection-memory-bytes", connection_memory_bytes, "16384", 16384, 16777216),
     .help =
	 "per-connection memory of libmicrohttpd: the request's header block must fit in it (431 "
	 "beyond; the default reads about 15 KiB of headers, an 8 KiB bearer token with room to spare; "
	 "known gap: a header block within about 2 KiB of the limit fits but leaves libmicrohttpd no room "
	 "for the response's headers, and the connection is closed without an answer), and a streamed "
	 "upload's body is received in pieces of half of it. libmicrohttpd 0.9.75 zeroes about one and a "
	 "half times this per keep-alive request, so more costs every request CPU (bench/NOTES.md, \"Read "
	 "path, second pass\")"},
    {I("max-buffered-bytes", max_buffered_bytes, "16777216", 1024, 1073741824),
     .help = "buffered reads, writes and JSON bodies (413 beyond)"},
    {I("max-upload-bytes", max_upload_bytes, "1099511627776", 0, INT64_MAX), .help = "one streamed upload"},
    {I("uid-base", uid_base, "100000", 1000, 2000000000),
     .help = "a tenant's commands run as `uid-base + slot` (root or subuid mode; in subuid mode it must lie "
	     "in the server user's subordinate range)"},
    {B("allow-shared-uid", allow_shared_uid, "false"),
     .help = "not root and no subordinate range: serve several tenants anyway, all as the server's uid "
	     "(see Security model)"},
    {I("heartbeat-ms", heartbeat_ms, "2000", 50, 600000),
     .help = "at most one heartbeat per exec per interval"},
    {I("exec-timeout-default-s", exec_timeout_default_s, "300", 1, 604800),
     .help = "a command's `timeout_s` when the request names none"},
    {I("exec-timeout-max-s", exec_timeout_max_s, "3600", 1, 604800),
     .help = "a larger `timeout_s` is clamped to this"},
    {I("exec-kill-grace-ms", exec_kill_grace_ms, "2000", 0, 60000),
     .help = "SIGTERM to SIGKILL on timeout and cancel"},
    {I("max-output-bytes-default", max_output_bytes_default, "64000", 256, 1073741824),
     .help = "per stream window of a result when the request names no `max_output_bytes`"},
    {I("max-output-bytes-cap", max_output_bytes_cap, "8388608", 256, 1073741824),
     .help = "the largest `max_output_bytes` a request may ask for"},
    {I("spill-cap-bytes", spill_cap_bytes, "1073741824", 0, INT64_MAX),
     .help = "at most this much of a stream goes to its spill file"},
    {I("tenant-max-execs", tenant_max_execs, "32", 1, 100000),
     .help = "concurrent commands per tenant (beyond, a request waits for a slot: `tenant-exec-queue`, "
	     "`exec-queue-wait-ms`)"},
    {I("tenant-exec-queue", tenant_exec_queue, "32", 0, 100000),
     .help = "`POST /exec` requests of a tenant that wait for one of its `tenant-max-execs` slots, oldest "
	     "first; beyond, 429 `too_many_requests` with `Retry-After` (`0`: 429 at once, never wait)"},
    {I("exec-queue-wait-ms", exec_queue_wait_ms, "5000", 1, 3600000),
     .help = "the longest such a request waits; then 429 with `Retry-After`"},
    {I("wait-stdin-bytes-per-tenant", wait_stdin_bytes_per_tenant, "33554432", 0, INT64_MAX),
     .help = "inline `stdin` that a tenant's requests waiting for approval or in the admission queue may "
	     "keep in the server; beyond, 429 with `Retry-After` (413 for one `stdin` over this bound)"},
    {I("wait-stdin-bytes", wait_stdin_bytes, "134217728", 0, INT64_MAX),
     .help = "the same for all tenants' waiting requests together"},
    {I("tenant-max-transfers", tenant_max_transfers, "16", 1, 100000),
     .help = "concurrent streaming transfers per tenant (429 beyond)"},
    {I("transfer-ttl-default-s", transfer_ttl_default_s, "60", 1, 86400),
     .help = "transfer token lifetime when the request names none"},
    {I("transfer-ttl-max-s", transfer_ttl_max_s, "3600", 1, 604800),
     .help = "the longest transfer token lifetime a request may ask for"},
    {I("mem-limit-bytes", mem_limit_bytes, "2147483648", 0, INT64_MAX),
     .help = "RLIMIT_AS and the cgroup memory limit of a command"},
    {I("nproc-limit", nproc_limit, "256", 0, 1000000),
     .help = "the cgroup pids limit of a command; without cgroups RLIMIT_NPROC (per tenant uid). With "
	     "cgroups RLIMIT_NPROC is only a backstop at twice the larger of this and `tenant-nproc-budget` "
	     "(the kernel checks it before the pids controller: at the same value it would refuse forks the "
	     "controller never counts, and the result could not say `pids_limited`)"},
    {I("tenant-mem-budget-bytes", tenant_mem_budget_bytes, "4294967296", 0, INT64_MAX),
     .help = "memory of all of a tenant's commands together (its cgroup parent; `0`: none)"},
    {I("tenant-nproc-budget", tenant_nproc_budget, "512", 0, 1000000),
     .help = "processes of all of a tenant's commands together (`0`: none)"},
    {M("tenant-cpu-budget-millicores", tenant_cpu_budget_millicores, "auto"),
     .help =
	 "CPU time of all of a tenant's commands together, in thousandths of a core (`1500`: one and a "
	 "half cores; `0`: none; else at least `10`, the kernel's least quota). `auto`: every core the "
	 "server may run on but one, at least one core (one core on a 2-core machine), so one tenant's "
	 "busy loops or fork bomb always leave CPU for the server and the other tenants. Millicores rather "
	 "than a decimal so that the policy's JSON stays an exact integer"},
    {I("tenant-io-read-bps", tenant_io_read_bps, "0", 0, SBX_IO_BPS_MAX),
     .help = "bytes per second all of a tenant's commands together may read on its disk image (cgroup v2 "
	     "`io.max` `rbps` on the image's loop device; `0`: none). Needs disk images (`disk-quota=image`, "
	     "or `auto` choosing images): without them a nonzero budget is refused at `PUT "
	     "/tenants/{name}/policy` (409) and the tenant's commands are refused (503), never run "
	     "unthrottled; see Security model, **Disk I/O**"},
    {I("tenant-io-write-bps", tenant_io_write_bps, "0", 0, SBX_IO_BPS_MAX),
     .help = "the same for writing (`wbps`)"},
    {I("tenant-io-read-iops", tenant_io_read_iops, "0", 0, SBX_IO_IOPS_MAX),
     .help = "the same for reading in operations per second (`riops`)"},
    {I("tenant-io-write-iops", tenant_io_write_iops, "0", 0, SBX_IO_IOPS_MAX),
     .help = "the same for writing in operations per second (`wiops`)"},
    {I("tenant-disk-quota-bytes", tenant_disk_quota_bytes, "10737418240", 0, INT64_MAX),
     .help = "a tenant's disk quota: everything in its workspace together (`0`: none; image mode needs it)"},
    {I("tenant-disk-quota-inodes", tenant_disk_quota_inodes, "1000000", 0, UINT32_MAX),
     .help = "files and directories of a tenant together (`0`: none)"},
    {S("disk-quota", disk_quota, "auto"),
     .help = "how disk quotas are enforced: `project` (the filesystem's project quotas), `image` (an ext4 "
	     "image per tenant on a loop device), `none`, or `auto`: project quotas where the filesystem "
	     "enforces them, else images when sandboxd is root and loop devices work, else none. An explicit "
	     "mode that cannot work stops the start. See *Disk quotas*"},
    {I("store-reserve-bytes", store_reserve_bytes, "268435456", 0, INT64_MAX),
     .help = "free space kept on the store's filesystem: below it new tenant work (exec, writes, uploads, "
	     "mkdir) is refused with 507 and `/readyz` is 503; `sandboxd image import` stops before the data "
	     "directory's filesystem has less than this free"},
    {I("image-import-max-bytes", image_import_max_bytes, "17179869184", 0, INT64_MAX),
     .help = "file data one `sandboxd image import` may write, all layers together; beyond, the import is "
	     "refused and nothing of it is kept (`0`: none)"},
    {I("image-import-max-entries", image_import_max_entries, "2000000", 0, INT64_MAX),
     .help = "files, directories and links one import may make (`0`: none)"},
    {I("image-import-max-ratio", image_import_max_ratio, "100", 0, 1000000),
     .help =
	 "file data an import may write per byte of archive (the tarball, or the layers read so far), "
	 "once past its first 64 MiB: an archive that inflates to far more than a root filesystem does (a "
	 "few MiB of gzip becoming gigabytes) is refused early (`0`: none)"},
    {I("tenant-store-max-bytes", tenant_store_max_bytes, "1073741824", 0, INT64_MAX),
     .help = "a tenant's store budget: the bytes of its exec and audit rows together (`0`: no limit). At "
	     "it, its new work (exec, writes, uploads, mkdir) is refused with 507 `store_budget_exceeded` "
	     "(usage and limits in `error.details`) while other tenants go on; retention "
	     "(`retention-max-age-s`, `retention-max-rows`) and removing rows free it"},
    {I("tenant-store-max-rows", tenant_store_max_rows, "1000000", 0, INT64_MAX),
     .help = "the same budget in rows (`0`: no limit)"},
    {I("fsize-limit-bytes", fsize_limit_bytes, "8589934592", 0, INT64_MAX), .help = "RLIMIT_FSIZE"},
    {I("nofile-limit", nofile_limit, "1024", 0, 1048576), .help = "RLIMIT_NOFILE"},
    {I("tmp-size-bytes", tmp_size_bytes, "268435456", 0, INT64_MAX),
     .help = "size of a command's private `/tmp`"},
    {B("use-cgroups", use_cgroups, "true"),
     .help =
	 "per-command limits and per-tenant budgets in cgroups: the v2 driver on the unified "
	 "hierarchy (`memory.max`, `pids.max`, `cpu.max`, `io.max`), the v1 driver on hybrid hosts "
	 "(`memory`, `pids`, `cpu` hierarchies); when they cannot be enforced the start fails closed "
	 "unless `allow-uncontained`. `false` is the operator's own opt-out: rlimits only, and the server "
	 "runs degraded (`/readyz` `degraded`, never `ready`)"},
    {I("events-replay", events_replay, "256", 1, 100000),
     .help = "feed events kept per tenant for `Last-Event-ID` (also bounded to 8 MiB per tenant); older "
	     "ids get a `gap` event"},
    {B("metrics-public", metrics_public, "false"), .help = "serve `/metrics` without a token"},
    {I("shutdown-grace-s", shutdown_grace_s, "10", 0, 3600),
     .help = "how long SIGTERM waits for cancelled commands"},
    {I("retention-max-age-s", retention_max_age_s, "2592000", 0, INT64_MAX),
     .help = "audit, exec and transfer rows older than this are pruned (0: keep forever, and the table "
	     "grows without bound)"},
    {I("retention-max-rows", retention_max_rows, "0", 0, INT64_MAX),
     .help = "keep at most this many rows per table (0: no bound)"},
    {I("retention-interval-s", retention_interval_s, "60", 1, 86400), .help = "how often the pruner runs"},
    {I("audit-unauthenticated-per-s", audit_unauth_per_s, "10", 0, 1000000),
     .help = "audit rows per second (token bucket) per client address for requests that name no tenant; "
	     "the rest are counted as `sandboxd_audit_suppressed_total`"},
    {I("audit-unauthenticated-burst", audit_unauth_burst, "20", 1, 1000000),
     .help = "the size of that bucket"},
    {B("log-requests", log_requests, "true"),
     .help = "one JSON line per request on stderr, written with the server's other lines by one writer "
	     "thread in batches (a line reaches stderr within 20 ms; an error line at once)"},
    {SC("node-id", node_id, NULL, check_node_id), .shown = "the host name's first label",
     .help = "this node's id among several (`[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?`); see Running many nodes"},
    {J("nodes", nodes, check_nodes), .shown = "none",
     .help =
	 "the cluster's nodes, a JSON array of `{\"id\", \"url\", \"token-file\"?, \"ca-file\"?}` (on the "
	 "command line: the JSON text)"},
    {I("nodes-timeout-ms", nodes_timeout_ms, "5000", 100, 600000),
     .help = "a request to another node (merged audit) gives up after this"},
    {S("code-languages", code_languages, "python,node,bash,sh"),
     .help = "the languages `POST /code` offers (each also needs its interpreter installed: `python3`, "
	     "`node`, `bash`, `sh`)"},
    {I("changes-max-files", changes_max_files, "10000", 1, 10000000),
     .help = "files recorded per `files_changed` snapshot (`files_changed_truncated` beyond)"},
    {I("changes-max-listed", changes_max_listed, "1000", 1, 1000000),
     .help = "`files_changed` entries at most"},
    {I("changes-hash-bytes", changes_hash_bytes, "67108864", 0, INT64_MAX),
     .help = "bytes hashed for one `files_changed` in all (later files get `sha256: null`)"},
    {I("stdin-buffer-bytes", stdin_buffer_bytes, "65536", 1, 67108864),
     .help = "stdin queued per exec for `POST /exec/{id}/stdin` beyond its pipe (429 beyond)"},
    {S("docs-dir", docs_dir, "/usr/share/sandboxd/docs"),
     .help = "the built documentation site served at `/docs/` (the Debian package installs it here); "
	     "empty, or a directory that is not there or has no `index.html`: `/docs/` answers 404 "
	     "`docs_not_installed`; to anyone, so only files everyone may read are served"},
};

bool sbx_key_same(const char *key, const char *name)
{
	for (;; key++, name++) {
		char a = *key == '_' ? '-' : *key, b = *name == '_' ? '-' : *name;
		if (a != b)
			return false;
		if (!a)
			return true;
	}
}

static const struct option_spec *find(const char *name)
{
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
		if (sbx_key_same(specs[i].name, name))
			return &specs[i];
	return NULL;
}

static int set_text(struct sbx_config *c, const struct option_spec *s, const char *v, char *err, size_t errsz)
{
	char *base = (char *)c;
	switch (s->kind) {
	case K_STR:
	case K_JSON: {
		int rc = v && s->check ? s->check(v, err, errsz) : 0;
		if (rc < 0)
			return rc;
		char **p = (char **)(base + s->off);
		free(*p);
		*p = v ? xstrdup(v) : NULL;
		return 0;
	}
	case K_INT:
	case K_MILLICORES: {
		char *end = NULL;
		errno = 0;
		bool mc = s->kind == K_MILLICORES, automatic = mc && strcmp(v, "auto") == 0;
		long long x = automatic ? cfg_cpu_auto() : strtoll(v, &end, 10);
		if (!automatic &&
		    (errno || end == v || *end || x < s->min || x > s->max || (mc && x > 0 && x < 10))) {
			snprintf(err, errsz, "%s: expected %s in [%lld, %lld], got '%s'", s->name,
				 mc ? "\"auto\", 0 (none) or millicores" : "an integer",
				 mc ? 10LL : (long long)s->min, (long long)s->max, v);
			return -EINVAL;
		}
		*(int64_t *)(base + s->off) = x;
		return 0;
	}
	case K_BOOL:
		if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
			*(bool *)(base + s->off) = true;
		else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
			*(bool *)(base + s->off) = false;
		else {
			snprintf(err, errsz, "%s: expected true or false, got '%s'", s->name, v);
			return -EINVAL;
		}
		return 0;
	}
	return -EINVAL;
}

int64_t cfg_cpu_auto(void)
{
	cpu_set_t set;
	long n =
	    sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
	return n > 2 ? (int64_t)(n - 1) * 1000 : 1000;
}

void cfg_defaults(struct sbx_config *c)
{
	char err[256];
	memset(c, 0, sizeof *c);
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
		if (specs[i].def || specs[i].kind == K_STR)
			set_text(c, &specs[i], specs[i].def, err, sizeof err);
}

int cfg_set(struct sbx_config *c, const char *name, const char *value, char *err, size_t errsz)
{
	const struct option_spec *s = find(name);
	if (!s) {
		snprintf(err, errsz, "unknown option '%s'", name);
		return -ENOENT;
	}
	return set_text(c, s, value, err, errsz);
}

int cfg_load_file(struct sbx_config *c, const char *path, char *err, size_t errsz)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		snprintf(err, errsz, "%s:%d: %s", path, jerr.line, jerr.text);
		return -EINVAL;
	}
	int rc = 0;
	if (!json_is_object(root)) {
		snprintf(err, errsz, "%s: expected a JSON object", path);
		rc = -EINVAL;
		goto out;
	}
	const char *key;
	json_t *v;
	json_object_foreach(root, key, v) {
		const struct option_spec *s = find(key);
		char num[32];
		const char *text = NULL;
		if (!s) {
			snprintf(err, errsz, "%s: unknown key '%s'", path, key);
			rc = -EINVAL;
			goto out;
		}
		char *dumped = NULL;
		if (s->kind == K_STR && (json_is_string(v) || json_is_null(v)))
			text = json_string_value(v);
		else if (s->kind == K_JSON)
			text = dumped =
			    json_is_null(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		else if (s->kind == K_MILLICORES && json_is_string(v) &&
			 strcmp(json_string_value(v), "auto") == 0)
			text = "auto";
		else if ((s->kind == K_INT || s->kind == K_MILLICORES) && json_is_integer(v)) {
			snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
			text = num;
		} else if (s->kind == K_BOOL && json_is_boolean(v))
			text = json_is_true(v) ? "true" : "false";
		else {
			snprintf(err, errsz, "%s: key '%s' has the wrong type", path, key);
			rc = -EINVAL;
			goto out;
		}
		rc = set_text(c, s, text, err, errsz);
		free(dumped);
		if (rc < 0)
			goto out;
	}
out:
	json_decref(root);
	return rc;
}

void cfg_finish(struct sbx_config *c)
{
	if (!c->node_id) {
		char host[256] = "", id[SBX_NODE_ID_MAX + 1];
		if (gethostname(host, sizeof host - 1) < 0)
			host[0] = '\0';
		sbx_node_id_from_host(host, id, sizeof id);
		c->node_id = xstrdup(id);
	}
	if (!c->backends)
		c->backends = xstrdup(c->backend);
	if (!c->db_path) {
		size_t n = strlen(c->data_dir);
		c->db_path =
		    xasprintf("%s%ssandboxd.db", c->data_dir, n && c->data_dir[n - 1] == '/' ? "" : "/");
	}
}

void cfg_free(struct sbx_config *c)
{
	char *base = (char *)c;
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
		if (specs[i].kind != K_STR && specs[i].kind != K_JSON)
			continue;
		char **p = (char **)(base + specs[i].off);
		free(*p);
		*p = NULL;
	}
}

void cfg_dump(const struct sbx_config *c, FILE *f)
{
	const char *base = (const char *)c;
	fputs("{\n", f);
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
		const struct option_spec *s = &specs[i];
		fprintf(f, "  \"%s\": ", s->name);
		if (s->kind == K_STR || s->kind == K_JSON) {
			const char *v = *(char *const *)(base + s->off);
			json_t *j = !v			? json_null()
				    : s->kind == K_JSON ? json_loads(v, 0, NULL)
							: json_string(v);
			char *t = json_dumps(j, JSON_ENCODE_ANY);
			fputs(t, f);
			free(t);
			json_decref(j);
		} else if (s->kind == K_INT || s->kind == K_MILLICORES)
			fprintf(f, "%lld", (long long)*(const int64_t *)(base + s->off));
		else
			fputs(*(const bool *)(base + s->off) ? "true" : "false", f);
		fputs(i + 1 < sizeof specs / sizeof specs[0] ? ",\n" : "\n", f);
	}
	fputs("}\n", f);
}

size_t cfg_key_count(void)
{
	return sizeof specs / sizeof specs[0];
}

void cfg_key_get(size_t i, struct cfg_key *out)
{
	static const char *const types[] = {[K_STR] = "string",
					    [K_INT] = "integer",
					    [K_BOOL] = "boolean",
					    [K_JSON] = "json",
					    [K_MILLICORES] = "millicores"};
	const struct option_spec *s = &specs[i];
	*out = (struct cfg_key){.name = s->name,
				.type = types[s->kind],
				.def = s->def,
				.shown = s->shown,
				.help = s->help,
				.min = s->min,
				.max = s->max,
				.flag = s->flag};
}
