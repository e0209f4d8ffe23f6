#pragma once
/* Configuration: one table of defaults, then the JSON config file, then the
 * command line override them (lwan's order). Every key carries its meaning
 * in the table (common/config.c); `sandboxd config reference` prints it,
 * and docs/reference/configuration.md is that output. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The bounds of the tenants' I/O budgets (tenant-io-*, and the policy's
 * tenant_io_*): 100 GB/s, 10M operations per second. */
#define SBX_IO_BPS_MAX 100000000000LL
#define SBX_IO_IOPS_MAX 10000000LL

struct sbx_config {
	char *listen;	/* "HOST:PORT"; "[::1]:PORT" for IPv6 */
	char *data_dir; /* holds sandboxd.db and tenants/<name>/workspace */
	char *db_path;	/* default <data_dir>/sandboxd.db */
	char *backend;	/* "bwrap" or "local": the default of tenant policies */
	char *backends; /* the backends this server offers, "bwrap,local"; NULL: backend alone */
	char *network;	/* default policy: "none" or an egress allowlist */
	char *approval; /* default policy: "never", "always" or a JSON array of command patterns */
	int64_t approval_timeout_s; /* how long a command waits for a decision */
	bool allow_unsafe_local;
	/* Start (degraded) although the configured limits and budgets cannot
	 * all be enforced with cgroups (server/serve.c, the fail-closed rule). */
	bool allow_uncontained;
	char *tls_cert, *tls_key;
	char *audience; /* required aud claim when set */
	int64_t leeway_s;
	int64_t threads; /* HTTP worker threads; 0: one per core */
	/* File-work pool (http/pool.h): workers (0: two per core, at least 4),
	 * of them one tenant's at once (0: all but a quarter, at least one
	 * left), and one tenant's waiting requests (429 beyond). */
	int64_t fs_threads, fs_threads_per_tenant, fs_queue_per_tenant;
	int64_t runner_threads; /* threads that start and own commands (0: one per core) */
	/* network on request: setup threads, one tenant's setups at once and
	 * network commands at once (sandbox/netpool.h); each command's open
	 * and per-second new connections, name resolution (the egress
	 * gateway's, sandbox/egress/gateway.h) */
	int64_t network_setup_threads, network_setups_per_tenant, network_tenant_commands;
	int64_t network_conn_max, network_conn_per_s, network_resolve_ms;
	/* the egress gateway (sandbox/egress/gateway.h) */
	int64_t egress_threads, egress_pool, egress_tenant_conns, egress_tenant_pending;
	int64_t egress_hello_ms, egress_first_byte_ms, egress_connect_ms;
	/* warm sandboxes (sandbox/warm.h): per tenant, and how long unused */
	int64_t warm_pool, warm_idle_s;
	int64_t connection_timeout_s;
	int64_t max_connections;
	int64_t max_connections_per_ip;
	int64_t connection_memory_bytes;
	int64_t max_buffered_bytes; /* buffered read/write and JSON bodies */
	int64_t max_upload_bytes;   /* streaming uploads */
	int64_t uid_base;	    /* sandbox uid = uid_base + tenant slot (server as root) */
	bool allow_shared_uid;	    /* not root, no subordinate range: serve several tenants anyway */
	int64_t heartbeat_ms;
	int64_t exec_timeout_default_s, exec_timeout_max_s;
	int64_t exec_kill_grace_ms;
	int64_t max_output_bytes_default, max_output_bytes_cap;
	int64_t spill_cap_bytes;
	int64_t tenant_max_execs;   /* concurrent execs per tenant */
	int64_t tenant_exec_queue;  /* POST /exec waiting for a slot, per tenant (0: 429 at once) */
	int64_t exec_queue_wait_ms; /* longest such a wait; then 429 */
	/* Inline stdin kept by requests that wait (for approval or in the
	 * admission queue): per tenant and in all; beyond, 429 (413 alone). */
	int64_t wait_stdin_bytes_per_tenant, wait_stdin_bytes;
	int64_t tenant_max_transfers;
	int64_t transfer_ttl_default_s, transfer_ttl_max_s;
	int64_t mem_limit_bytes, nproc_limit, fsize_limit_bytes, nofile_limit, tmp_size_bytes;
	int64_t tenant_mem_budget_bytes, tenant_nproc_budget; /* all of a tenant's commands together */
	int64_t tenant_cpu_budget_millicores; /* ... their CPU time: 1000 = one core (0: none) */
	/* ... their I/O on the tenant's disk image (disk-quota=image): bytes
	 * and operations per second, read and write (0: none) */
	int64_t tenant_io_read_bps, tenant_io_write_bps, tenant_io_read_iops, tenant_io_write_iops;
	int64_t tenant_disk_quota_bytes, tenant_disk_quota_inodes; /* disk quota per tenant (0: none) */
	char *disk_quota;	     /* how it is enforced: "auto", "project", "image" or "none" */
	int64_t store_reserve_bytes; /* free space kept for the store: tenant work refused below it */
	/* one image import: data written, entries made, expansion per archive byte (0: no bound) */
	int64_t image_import_max_bytes, image_import_max_entries, image_import_max_ratio;
	int64_t tenant_store_max_bytes, tenant_store_max_rows; /* what the store holds per tenant (0: none) */
	int64_t events_replay; /* feed events kept per tenant for Last-Event-ID */
	bool use_cgroups;
	bool metrics_public; /* /metrics without a token */
	int64_t shutdown_grace_s;
	int64_t retention_max_age_s;  /* audit, exec and transfer rows; default 30 days; 0: keep forever */
	int64_t retention_max_rows;   /* per table; 0: no bound */
	int64_t retention_interval_s; /* how often the pruner runs */
	int64_t
	    audit_unauth_per_s; /* audit rows per second per client address for requests naming no tenant */
	int64_t audit_unauth_burst; /* ... and the bucket size */
	bool log_requests;
	char *node_id;		  /* this node's id (common/nodes.h); default from the host name */
	char *nodes;		  /* the cluster's node list, JSON text (common/nodes.h); NULL: none */
	int64_t nodes_timeout_ms; /* a request to another node (merged audit) gives up after this */
	/* agent runs (POST /code, files_changed, background execs, stdin) */
	char *code_languages;	    /* comma-separated: which of python, node, bash, sh /code offers */
	int64_t changes_max_files;  /* files recorded per snapshot */
	int64_t changes_max_listed; /* files_changed entries */
	int64_t changes_hash_bytes; /* bytes hashed per exec, in all */
	int64_t stdin_buffer_bytes; /* queued stdin per exec */
	char *docs_dir; /* the built documentation site, served at /docs/ (routes/docs.c); "": none */
};

/* Fill with the defaults (allocations owned by the config). */
void cfg_defaults(struct sbx_config *c);
/* Apply a JSON config file whose keys are the long option names with '-'
 * or '_' (e.g. "listen", "data-dir", "max_buffered_bytes"). Unknown keys
 * and ill-typed values are errors. 0 or -errno, with a message in err. */
int cfg_load_file(struct sbx_config *c, const char *path, char *err, size_t errsz);
/* Set one option by its name from a string (command line). */
int cfg_set(struct sbx_config *c, const char *name, const char *value, char *err, size_t errsz);
/* Derived defaults (db_path from data_dir). */
void cfg_finish(struct sbx_config *c);
void cfg_free(struct sbx_config *c);
/* Whether key and name are the same key, with - and _ the same letter
 * (the command line says warm-pool, a policy mem_limit_bytes; both take
 * either). */
bool sbx_key_same(const char *key, const char *name);
/* The default CPU budget of a tenant ("auto"): every core this process may
 * run on but one, at least one core, in millicores. */
int64_t cfg_cpu_auto(void);
/* Print every key and its current value as JSON to f. */
void cfg_dump(const struct sbx_config *c, FILE *f);

/* One key of the table, as the reference shows it (server/config_cli.c).
 * All strings are static. */
struct cfg_key {
	const char *name;  /* "data-dir" */
	const char *type;  /* "string", "integer", "boolean", "json" or "millicores" */
	const char *def;   /* the default as text; NULL: unset (or derived) */
	const char *shown; /* the default as a reader should see it; NULL: def */
	const char *help;  /* its meaning, one line of Markdown */
	int64_t min, max;  /* integer and millicores bounds */
	bool flag;	   /* it has a command-line flag of its own, --NAME */
};
/* How many keys there are; key i (0 <= i < cfg_key_count()) into *out. */
size_t cfg_key_count(void);
void cfg_key_get(size_t i, struct cfg_key *out);
