/* The route table: every route sandboxd serves, one line each. RF_POOL:
 * the handler does blocking file work and runs on the worker pool, fairly
 * between tenants (http/pool.h); uploads' begin hooks and body writes, and
 * downloads' block reads, stay on the event threads (routes/transfers.c). Only the
 * dispatcher (http/router.c) answers 404/405, authenticates, checks the
 * scopes (any one of those listed suffices), parses JSON bodies and
 * renders errors; the handlers, one file per family, do the work. Order
 * matters only for patterns that could both match; none here do. */
#include "routes/routes.h"

#define FS_READ AUTH_SCOPE_FS_READ
#define FS_WRITE AUTH_SCOPE_FS_WRITE
#define EXEC AUTH_SCOPE_EXEC
#define AUDIT AUTH_SCOPE_AUDIT_READ
#define ADMIN AUTH_SCOPE_ADMIN
#define APPROVE AUTH_SCOPE_APPROVE

const struct http_route route_table[] = {
    /* ops.c */
    {.method = "GET", .pattern = "/healthz", .flags = RF_PUBLIC | RF_PROBE, .handler = route_healthz},
    {.method = "GET", .pattern = "/readyz", .flags = RF_PUBLIC | RF_PROBE, .handler = route_readyz},
    {.method = "GET",
     .pattern = "/metrics",
     .scope = AUDIT | ADMIN,
     .flags = RF_METRICS,
     .handler = route_metrics},
    {.method = "GET", .pattern = "/openapi.yaml", .flags = RF_PUBLIC, .handler = route_openapi},
    {.method = "GET", .pattern = "/dashboard", .flags = RF_PUBLIC, .handler = route_dashboard},
    /* docs.c: /docs redirects to /docs/; the tail is a path beneath docs-dir ("": the index) */
    {.method = "GET", .pattern = "/docs", .flags = RF_PUBLIC, .handler = route_docs},
    {.method = "GET",
     .pattern = "/docs/{path}",
     .flags = RF_PUBLIC | RF_POOL | RF_TAIL,
     .handler = route_docs},
    /* fs.c */
    {.method = "GET",
     .pattern = "/fs/read",
     .scope = FS_READ,
     .flags = RF_POOL | RF_NOWAIT,
     .handler = route_fs_read},
    {.method = "GET",
     .pattern = "/fs/read_buffer",
     .scope = FS_READ,
     .flags = RF_POOL,
     .handler = route_fs_read_buffer},
    {.method = "PUT",
     .pattern = "/fs/write",
     .scope = FS_WRITE,
     .flags = RF_RAW | RF_POOL,
     .handler = route_fs_write},
    {.method = "GET",
     .pattern = "/fs/stat",
     .scope = FS_READ,
     .flags = RF_POOL | RF_NOWAIT,
     .handler = route_fs_stat},
    {.method = "GET",
     .pattern = "/fs/readdir",
     .scope = FS_READ,
     .flags = RF_POOL,
     .handler = route_fs_readdir},
    {.method = "GET",
     .pattern = "/fs/exists",
     .scope = FS_READ,
     .flags = RF_POOL | RF_NOWAIT,
     .handler = route_fs_exists},
    {.method = "POST",
     .pattern = "/fs/mkdir",
     .scope = FS_WRITE,
     .flags = RF_JSON | RF_POOL,
     .handler = route_fs_mkdir},
    {.method = "POST",
     .pattern = "/fs/rm",
     .scope = FS_WRITE,
     .flags = RF_JSON | RF_POOL,
     .handler = route_fs_rm},
    {.method = "POST",
     .pattern = "/fs/move",
     .scope = FS_WRITE,
     .flags = RF_JSON | RF_POOL,
     .handler = route_fs_move},
    /* sessions.c: listing is observing (audit:read), and a gateway lists
     * its own sessions with its ordinary token (fs:read or exec, which see
     * the same directories anyway); deleting removes files (fs:write). */
    {.method = "GET",
     .pattern = "/sessions",
     .scope = AUDIT | FS_READ | EXEC,
     .flags = RF_WORKSPACE,
     .handler = route_sessions_list},
    {.method = "DELETE",
     .pattern = "/session",
     .scope = FS_WRITE,
     .flags = RF_POOL | RF_WORKSPACE,
     .handler = route_session_delete},
    /* exec.c */
    {.method = "POST", .pattern = "/exec", .scope = EXEC, .flags = RF_JSON, .handler = route_exec_post},
    /* On the pool: a window past the row's is read from the spill file (routes/exec_row.h). */
    {.method = "GET",
     .pattern = "/exec/{id}",
     .scope = EXEC | AUDIT,
     .flags = RF_POOL,
     .handler = route_exec_get},
    {.method = "POST", .pattern = "/exec/{id}/cancel", .scope = EXEC, .handler = route_exec_cancel},
    {.method = "GET", .pattern = "/execs", .scope = EXEC | AUDIT, .handler = route_exec_list},
    /* egress.c: the exec's egress ledger, scoped as GET /exec/{id} */
    {.method = "GET",
     .pattern = "/exec/{id}/egress",
     .scope = EXEC | AUDIT,
     .flags = RF_POOL,
     .handler = route_exec_egress},
    /* exec_io.c, code.c */
    {.method = "POST",
     .pattern = "/exec/{id}/stdin",
     .scope = EXEC,
     .flags = RF_JSON,
     .handler = route_exec_stdin},
    {.method = "POST",
     .pattern = "/exec/{id}/resize",
     .scope = EXEC,
     .flags = RF_JSON,
     .handler = route_exec_resize},
    {.method = "POST",
     .pattern = "/code",
     .scope = EXEC,
     .flags = RF_JSON | RF_WORKSPACE,
     .handler = route_code_post},
    /* exec.c: a person decides on a command that waits for approval */
    {.method = "POST", .pattern = "/exec/{id}/approve", .scope = APPROVE, .handler = route_exec_approve},
    {.method = "POST",
     .pattern = "/exec/{id}/reject",
     .scope = APPROVE,
     .flags = RF_JSON_OPT,
     .handler = route_exec_reject},
    /* transfers.c: the token is the capability of /fs/stream/{token}
     * (public); POST /fs/transfers checks the direction's scope itself.
     * Uploads open their temp file in a begin hook, before the body. */
    {.method = "POST",
     .pattern = "/fs/transfers",
     .scope = FS_READ | FS_WRITE,
     .flags = RF_JSON | RF_POOL | RF_WORKSPACE,
     .handler = route_transfers_post},
    {.method = "GET",
     .pattern = "/fs/stream/{token}",
     .flags = RF_PUBLIC | RF_POOL,
     .handler = route_transfer_get,
     .begin = route_transfer_get_begin},
    {.method = "PUT",
     .pattern = "/fs/stream/{token}",
     .flags = RF_PUBLIC | RF_STREAM_IN | RF_POOL,
     .handler = route_transfer_put,
     .begin = route_transfer_put_begin},
    {.method = "GET",
     .pattern = "/fs/read_stream",
     .scope = FS_READ,
     .flags = RF_POOL | RF_WORKSPACE,
     .handler = route_fs_read_stream},
    {.method = "PUT",
     .pattern = "/fs/write_stream",
     .scope = FS_WRITE,
     .flags = RF_STREAM_IN | RF_POOL | RF_WORKSPACE,
     .handler = route_transfer_put,
     .begin = route_fs_write_stream_begin},
    /* events.c */
    {.method = "GET",
     .pattern = "/exec/{id}/events",
     .scope = EXEC | AUDIT,
     .flags = RF_SSE,
     .handler = route_exec_events},
    {.method = "GET", .pattern = "/events", .scope = EXEC | AUDIT, .flags = RF_SSE, .handler = route_events},
    /* mcp.c: the tools need their own scopes (each checks; any one lets
     * a client in to initialize and list them). RAW: the body is one
     * JSON-RPC message, parsed there (a batch or a parse error is
     * JSON-RPC's to answer). The metadata tells a client how to sign in. */
    {.method = "POST",
     .pattern = "/mcp",
     .scope = EXEC | FS_READ | FS_WRITE,
     .flags = RF_RAW | RF_RESOURCE_META,
     .handler = route_mcp_post},
    {.method = "GET",
     .pattern = "/.well-known/oauth-protected-resource",
     .flags = RF_PUBLIC,
     .handler = route_mcp_resource_metadata},
    {.method = "GET",
     .pattern = "/.well-known/oauth-protected-resource/mcp",
     .flags = RF_PUBLIC,
     .handler = route_mcp_resource_metadata},
    /* audit.c */
    {.method = "GET", .pattern = "/audit", .scope = AUDIT | ADMIN, .handler = route_audit},
    /* tenants.c: operators only */
    {.method = "GET",
     .pattern = "/tenants/{name}/policy",
     .scope = ADMIN,
     .flags = RF_ADMIN_ONLY,
     .handler = route_tenant_policy_get},
    {.method = "PUT",
     .pattern = "/tenants/{name}/policy",
     .scope = ADMIN,
     .flags = RF_ADMIN_ONLY | RF_JSON,
     .handler = route_tenant_policy_put},
};
const size_t route_count = sizeof route_table / sizeof route_table[0];
