#pragma once
/* The handlers of every route family (one file each) and the route table
 * that names them (routes/table.c). */
#include "http/route.h"

extern const struct route route_table[];
extern const size_t route_count;

/* routes/ops.c */
int route_healthz(struct req *r);
int route_readyz(struct req *r);
int route_metrics(struct req *r);
int route_openapi(struct req *r);
int route_dashboard(struct req *r);

/* routes/fs.c */
int route_fs_read(struct req *r);
int route_fs_read_buffer(struct req *r);
int route_fs_write(struct req *r);
int route_fs_stat(struct req *r);
int route_fs_readdir(struct req *r);
int route_fs_exists(struct req *r);
int route_fs_mkdir(struct req *r);
int route_fs_rm(struct req *r);
int route_fs_move(struct req *r);

/* routes/sessions.c */
/* Resolve the request's session: find or create its row and directory
 * (once), and set r->session_rel. 0 or -errno (with req_fail). */
int route_session(struct req *r);
int route_sessions_list(struct req *r);
int route_session_delete(struct req *r);

/* routes/exec.c */
int route_exec_post(struct req *r);
int route_exec_get(struct req *r);
int route_exec_cancel(struct req *r);
int route_exec_list(struct req *r);

/* routes/transfers.c */
int route_transfers_post(struct req *r);
int route_transfer_get(struct req *r);
int route_transfer_put_begin(struct req *r);
int route_transfer_put(struct req *r);
int route_fs_read_stream(struct req *r);
int route_fs_write_stream_begin(struct req *r);

/* routes/events.c */
int route_exec_events(struct req *r);
int route_events(struct req *r);

/* routes/audit.c */
int route_audit(struct req *r);
