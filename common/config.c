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
};

#define S(n, f, d)                                                                                           \
	{                                                                                                    \
		n, K_STR, offsetof(struct sbx_config, f), d, 0, 0, NULL                                      \
	}
#define I(n, f, d, lo, hi)                                                                                   \
	{                                                                                                    \
		n, K_INT, offsetof(struct sbx_config, f), d, lo, hi, NULL                                    \
	}
#define B(n, f, d)                                                                                           \
	{                                                                                                    \
		n, K_BOOL, offsetof(struct sbx_config, f), d, 0, 0, NULL                                     \
	}

#define M(n, f, d)                                                                                           \
	{                                                                                                    \
		n, K_MILLICORES, offsetof(struct sbx_config, f), d, 0, 1000000, NULL                         \
	}

#define SC(n, f, d, check)                                                                                   \
	{                                                                                                    \
		n, K_STR, offsetof(struct sbx_config, f), d, 0, 0, check                                     \
	}
#define J(n, f, check)                                                                                       \
	{                                                                                                    \
		n, K_JSON, offsetof(struct sbx_config, f), NULL, 0, 0, check                                 \
	}

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

/* The one table of defaults. */
static const struct option_spec specs[] = {
    S("listen", listen, "127.0.0.1:8080"),
    S("data-dir", data_dir, "./sandboxd-data"),
    S("db-path", db_path, NULL),
    S("backend", backend, "bwrap"),
    S("backends", backends, NULL),
    S("network", network, "none"),
    S("approval", approval, "never"),
    I("approval-timeout-s", approval_timeout_s, "300", 1, 604800),
    B("allow-unsafe-local", allow_unsafe_local, "false"),
    B("allow-uncontained", allow_uncontained, "false"),
    S("tls-cert", tls_cert, NULL),
    S("tls-key", tls_key, NULL),
    S("audience", audience, NULL),
    I("leeway-s", leeway_s, "30", 0, 3600),
    I("threads", threads, "0", 0, 256),
    I("fs-threads", fs_threads, "0", 0, 1024),
    I("runner-threads", runner_threads, "0", 0, 64),
    I("network-setup-threads", network_setup_threads, "4", 1, 64),
    I("network-setups-per-tenant", network_setups_per_tenant, "2", 1, 64),
    I("network-tenant-commands", network_tenant_commands, "8", 1, 1024),
    I("network-conn-max", network_conn_max, "64", 1, 65536),
    I("network-conn-per-s", network_conn_per_s, "10", 1, 10000),
    I("network-resolve-ms", network_resolve_ms, "2000", 100, 60000),
    I("fs-threads-per-tenant", fs_threads_per_tenant, "0", 0, 1024),
    I("fs-queue-per-tenant", fs_queue_per_tenant, "256", 1, 1000000),
    I("connection-timeout-s", connection_timeout_s, "60", 1, 86400),
    I("max-connections", max_connections, "4096", 16, 1000000),
    I("max-connections-per-ip", max_connections_per_ip, "1024", 1, 1000000),
    I("connection-memory-bytes", connection_memory_bytes, "16384", 16384, 16777216),
    I("max-buffered-bytes", max_buffered_bytes, "16777216", 1024, 1073741824),
    I("max-upload-bytes", max_upload_bytes, "1099511627776", 0, INT64_MAX),
    I("uid-base", uid_base, "100000", 1000, 2000000000),
    B("allow-shared-uid", allow_shared_uid, "false"),
    I("heartbeat-ms", heartbeat_ms, "2000", 50, 600000),
    I("exec-timeout-default-s", exec_timeout_default_s, "300", 1, 604800),
    I("exec-timeout-max-s", exec_timeout_max_s, "3600", 1, 604800),
    I("exec-kill-grace-ms", exec_kill_grace_ms, "2000", 0, 60000),
    I("max-output-bytes-default", max_output_bytes_default, "64000", 256, 1073741824),
    I("max-output-bytes-cap", max_output_bytes_cap, "8388608", 256, 1073741824),
    I("spill-cap-bytes", spill_cap_bytes, "1073741824", 0, INT64_MAX),
    I("tenant-max-execs", tenant_max_execs, "32", 1, 100000),
    I("tenant-exec-queue", tenant_exec_queue, "32", 0, 100000),
    I("exec-queue-wait-ms", exec_queue_wait_ms, "5000", 1, 3600000),
    I("wait-stdin-bytes-per-tenant", wait_stdin_bytes_per_tenant, "33554432", 0, INT64_MAX),
    I("wait-stdin-bytes", wait_stdin_bytes, "134217728", 0, INT64_MAX),
    I("tenant-max-transfers", tenant_max_transfers, "16", 1, 100000),
    I("transfer-ttl-default-s", transfer_ttl_default_s, "60", 1, 86400),
    I("transfer-ttl-max-s", transfer_ttl_max_s, "3600", 1, 604800),
    I("mem-limit-bytes", mem_limit_bytes, "2147483648", 0, INT64_MAX),
    I("nproc-limit", nproc_limit, "256", 0, 1000000),
    I("tenant-mem-budget-bytes", tenant_mem_budget_bytes, "4294967296", 0, INT64_MAX),
    I("tenant-nproc-budget", tenant_nproc_budget, "512", 0, 1000000),
    M("tenant-cpu-budget-millicores", tenant_cpu_budget_millicores, "auto"),
    I("tenant-io-read-bps", tenant_io_read_bps, "0", 0, SBX_IO_BPS_MAX),
    I("tenant-io-write-bps", tenant_io_write_bps, "0", 0, SBX_IO_BPS_MAX),
    I("tenant-io-read-iops", tenant_io_read_iops, "0", 0, SBX_IO_IOPS_MAX),
    I("tenant-io-write-iops", tenant_io_write_iops, "0", 0, SBX_IO_IOPS_MAX),
    I("tenant-disk-quota-bytes", tenant_disk_quota_bytes, "10737418240", 0, INT64_MAX),
    I("tenant-disk-quota-inodes", tenant_disk_quota_inodes, "1000000", 0, UINT32_MAX),
    S("disk-quota", disk_quota, "auto"),
    I("store-reserve-bytes", store_reserve_bytes, "268435456", 0, INT64_MAX),
    I("image-import-max-bytes", image_import_max_bytes, "17179869184", 0, INT64_MAX),
    I("image-import-max-entries", image_import_max_entries, "2000000", 0, INT64_MAX),
    I("image-import-max-ratio", image_import_max_ratio, "100", 0, 1000000),
    I("tenant-store-max-bytes", tenant_store_max_bytes, "1073741824", 0, INT64_MAX),
    I("tenant-store-max-rows", tenant_store_max_rows, "1000000", 0, INT64_MAX),
    I("fsize-limit-bytes", fsize_limit_bytes, "8589934592", 0, INT64_MAX),
    I("nofile-limit", nofile_limit, "1024", 0, 1048576),
    I("tmp-size-bytes", tmp_size_bytes, "268435456", 0, INT64_MAX),
    B("use-cgroups", use_cgroups, "true"),
    I("events-replay", events_replay, "256", 1, 100000),
    B("metrics-public", metrics_public, "false"),
    I("shutdown-grace-s", shutdown_grace_s, "10", 0, 3600),
    I("retention-max-age-s", retention_max_age_s, "2592000", 0, INT64_MAX),
    I("retention-max-rows", retention_max_rows, "0", 0, INT64_MAX),
    I("retention-interval-s", retention_interval_s, "60", 1, 86400),
    I("audit-unauthenticated-per-s", audit_unauth_per_s, "10", 0, 1000000),
    I("audit-unauthenticated-burst", audit_unauth_burst, "20", 1, 1000000),
    B("log-requests", log_requests, "true"),
    SC("node-id", node_id, NULL, check_node_id),
    J("nodes", nodes, check_nodes),
    I("nodes-timeout-ms", nodes_timeout_ms, "5000", 100, 600000),
    S("code-languages", code_languages, "python,node,bash,sh"),
    I("changes-max-files", changes_max_files, "10000", 1, 10000000),
    I("changes-max-listed", changes_max_listed, "1000", 1, 1000000),
    I("changes-hash-bytes", changes_hash_bytes, "67108864", 0, INT64_MAX),
    I("stdin-buffer-bytes", stdin_buffer_bytes, "65536", 1, 67108864),
};

static const struct option_spec *find(const char *name)
{
	char norm[64];
	size_t n = strlen(name);
	if (n >= sizeof norm)
		return NULL;
	for (size_t i = 0; i <= n; i++)
		norm[i] = name[i] == '_' ? '-' : name[i];
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
		if (strcmp(specs[i].name, norm) == 0)
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
