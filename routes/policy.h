#pragma once
/* Tenant policies (issue 16): which backend runs a tenant's commands, with
 * which limits, whether they may reach the network, and whether a person
 * must approve them first. A tenant's stored policy holds only the keys
 * an operator set (sandboxd tenant set, PUT /tenants/{name}/policy); every
 * other key follows the configuration. No HTTP and no SQL here: the row
 * is store/policies.c's; the routes and the command line both use this.
 *
 * Keys (JSON name; the command line also takes '-' for '_'):
 *   backend                   "bwrap", "local", "remote" or "ssh" (only those the server offers: `backends`)
 *   mem_limit_bytes           per command (RLIMIT_AS and cgroup); 0: none
 *   nproc_limit               per command (RLIMIT_NPROC and cgroup pids); 0: none
 *   fsize_limit_bytes         per file written (RLIMIT_FSIZE); 0: none
 *   timeout_max_s             cap of timeout_s (and of its default)
 *   max_output_bytes_cap      cap of max_output_bytes (and of its default)
 *   tenant_mem_budget_bytes   all the tenant's commands together; 0: none
 *   tenant_nproc_budget       all the tenant's commands together; 0: none
 *   tenant_cpu_budget_millicores  their CPU time together (1000: one core); 0: none, else >= 10
 *   tenant_io_read_bps, tenant_io_write_bps, tenant_io_read_iops, tenant_io_write_iops
 *                             their I/O together on the tenant's disk image (cgroup io.max),
 *                             bytes or operations per second; 0: none. Only where disk images
 *                             are in use (disk-quota=image): refused elsewhere (route_policy_io_set)
 *   max_execs, max_transfers  concurrent commands / streaming transfers
 *   store_max_bytes, store_max_rows  what the store may hold for the tenant (its exec and
 *                             audit rows); 0: no limit. Past it: 507 store_budget_exceeded
 *   exec_queue                POST /exec requests that wait for one of max_execs (then 429);
 *                             0: 429 at once
 *   network                   "none", or an egress allowlist (sandbox/backend.h's grammar)
 *   approval                  "never", "always", or an array of fnmatch(3) patterns matched
 *                             against the whole command string (no FNM_PATHNAME: * matches /)
 *   image                     the root image its commands run on (sandbox/rootimg.h), or
 *                             "none" (the host's /usr; the default, no configuration key)
 *   images                    the other images an exec's `image` may name: comma-separated
 *                             names, or "none" (the default)
 *   remote_url                with backend remote: the back sandboxd ("https://host:port")
 *   remote_token_file         with backend remote: absolute path of a file holding the bearer
 *                             token for the back (read by sandboxd; the token is never stored)
 *   remote_tenant             with backend remote: the tenant there (null: the token's claim)
 *   ssh_host, ssh_port, ssh_user  with backend ssh: where and as whom (routes/ssh.h; port 0: 22)
 *   ssh_root                  with backend ssh: absolute directory on the host, the tenant's files
 *   ssh_key_file              with backend ssh: absolute path of the private key (as remote_token_file)
 *   ssh_host_key              with backend ssh: the pinned host key, "TYPE BASE64" or "SHA256:..."
 *
 * Threads: the functions keep no state; a struct route_policy belongs to
 * its caller. Errors: 0 or a negative errno; -EINVAL with a message in
 * err for a bad key or value. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbx_config;
struct store;
struct sbx_backend_kind;

enum route_approval { ROUTE_APPROVAL_NEVER, ROUTE_APPROVAL_ALWAYS, ROUTE_APPROVAL_PATTERNS };

struct route_policy {
	char backend[16];
	int64_t mem_limit_bytes, nproc_limit, fsize_limit_bytes;
	int64_t timeout_max_s, max_output_bytes_cap;
	int64_t tenant_mem_budget_bytes, tenant_nproc_budget, tenant_cpu_budget_millicores;
	int64_t tenant_io_read_bps, tenant_io_write_bps, tenant_io_read_iops, tenant_io_write_iops;
	int64_t max_execs, max_transfers;
	int64_t exec_queue;
	int64_t store_max_bytes, store_max_rows;
	char *network;	/* owned; NULL: no network */
	char image[64]; /* "": the host's /usr */
	char *images;	/* owned; NULL: none (comma-separated names) */
	enum route_approval approval;
	char **patterns; /* owned, with ROUTE_APPROVAL_PATTERNS */
	size_t npatterns;
	char *remote_url, *remote_token_file, *remote_tenant;		    /* owned, or NULL */
	char *ssh_host, *ssh_user, *ssh_root, *ssh_key_file, *ssh_host_key; /* owned, or NULL */
	int64_t ssh_port;
};

/* The configuration's policy (what a tenant without overrides gets).
 * -EINVAL when the configured network or approval is malformed. */
int route_policy_defaults(const struct sbx_config *cfg, struct route_policy *p, char *err, size_t errsz);
void route_policy_clear(struct route_policy *p);
/* The effective policy as JSON (a new object). */
json_t *route_policy_json(const struct route_policy *p);
/* The first of p's I/O budgets that is set (nonzero), by name, or NULL. */
const char *route_policy_io_budget(const struct route_policy *p);
/* The first I/O budget key that changes (as for route_policy_update)
 * sets to a positive integer (a budget), by name, or NULL: a server
 * without disk images refuses it, as it could not apply it. */
const char *route_policy_io_set(json_t *changes);
/* Whether command must wait for a person's decision. */
bool route_policy_needs_approval(const struct route_policy *p, const char *command);

/* Tenant's effective policy, read from the store now (so a change made by
 * another process applies to the next command). *overrides (optional)
 * gets the stored keys (a new object), *updated_at (optional) when they
 * last changed (0: never). -ENOENT: no such tenant. Stored keys this
 * binary does not know are skipped (logged); a known key whose stored
 * value cannot be applied is -SBX_E_BACKEND (logged with the reason),
 * never the default in its place. */
int route_policy_load(struct store *s, const struct sbx_config *cfg, const char *tenant,
		      struct route_policy *out, json_t **overrides, int64_t *updated_at);

/* Apply changes (an object of key -> value; null resets the key to the
 * configuration's default) to tenant's stored policy, atomically against
 * other writers. *change (optional) gets {"old": {...}, "new": {...}} of
 * the effective values of the keys changed (a new object), for the
 * audit. -ENOENT: no such tenant; -EINVAL with err. */
int route_policy_update(struct store *s, const struct sbx_config *cfg, const char *tenant, json_t *changes,
			json_t **change, char *err, size_t errsz);

/* One command-line KEY=VALUE into changes, typed as the key needs
 * (VALUE "default" resets the key; approval takes never, always or a JSON
 * array). -EINVAL with err. */
int route_policy_kv(const char *kv, json_t *changes, char *err, size_t errsz);

/* Whether the configuration's `backends` list names backend. */
bool route_policy_backend_offered(const struct sbx_config *cfg, const char *backend);
/* What the policy's backend is (sandbox/registry.h): never NULL, as every
 * policy's backend was checked against the registry when it was set. */
const struct sbx_backend_kind *route_policy_kind(const struct route_policy *p);

/* {"tenant", "policy" (effective), "overrides" (the stored keys),
 * "updated_at" (RFC 3339 or null)}: what `tenant show` prints and
 * GET /tenants/{name}/policy answers. -ENOENT: no such tenant. */
int route_policy_view(struct store *s, const struct sbx_config *cfg, const char *tenant, json_t **out);
