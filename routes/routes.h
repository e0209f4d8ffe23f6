#pragma once
/* The handlers of every route family (one file each) and the route table
 * that names them (routes/table.c). */
#include "http/route.h"

extern const struct http_route route_table[];
extern const size_t route_count;

/* routes/ops.c */
int route_healthz(struct http_req *r);
int route_readyz(struct http_req *r);
int route_metrics(struct http_req *r);
int route_openapi(struct http_req *r);
int route_dashboard(struct http_req *r);
struct app;
struct buf;
/* /metrics' egress series: the gateway's counters per tenant
 * (sbx_egress_gateway_counts) and the ledger's lost records; nothing
 * when a->egress is NULL. */
void route_egress_metrics(struct app *a, struct buf *out);

/* routes/docs.c: the documentation site from docs-dir */
int route_docs(struct http_req *r);

/* routes/fs.c */
int route_fs_read(struct http_req *r);
int route_fs_read_buffer(struct http_req *r);
int route_fs_write(struct http_req *r);
int route_fs_stat(struct http_req *r);
int route_fs_readdir(struct http_req *r);
int route_fs_exists(struct http_req *r);
int route_fs_mkdir(struct http_req *r);
int route_fs_rm(struct http_req *r);
int route_fs_move(struct http_req *r);

/* routes/sessions.c */
int route_sessions_list(struct http_req *r);
int route_session_delete(struct http_req *r);

/* routes/exec.c */
int route_exec_post(struct http_req *r);
int route_exec_get(struct http_req *r);
int route_exec_cancel(struct http_req *r);
int route_exec_list(struct http_req *r);
/* exec_io.c: a running exec's stdin and terminal size */
int route_exec_stdin(struct http_req *r);
int route_exec_resize(struct http_req *r);
/* exec.c: a person's decision on a command that waits for approval */
int route_exec_approve(struct http_req *r);
int route_exec_reject(struct http_req *r);
/* code.c */
int route_code_post(struct http_req *r);

/* routes/egress.c: GET /exec/{id}/egress */
int route_exec_egress(struct http_req *r);

/* routes/transfers.c */
int route_transfers_post(struct http_req *r);
int route_transfer_get_begin(struct http_req *r);
int route_transfer_get(struct http_req *r);
int route_transfer_put_begin(struct http_req *r);
int route_transfer_put(struct http_req *r);
int route_fs_read_stream(struct http_req *r);
int route_fs_write_stream_begin(struct http_req *r);

/* routes/events.c */
int route_exec_events(struct http_req *r);
int route_events(struct http_req *r);

/* routes/audit.c */
int route_audit(struct http_req *r);

/* tenants.c */
int route_tenant_policy_get(struct http_req *r);
int route_tenant_policy_put(struct http_req *r);

/* routes/mcp.c: POST /mcp (MCP over streamable HTTP) and its RFC 9728
 * protected-resource metadata */
int route_mcp_post(struct http_req *r);
int route_mcp_resource_metadata(struct http_req *r);
