#pragma once
/* Each family of routes (one file each) contributes its rows to the route
 * table in routes/router.c through one macro here, next to the
 * declarations of its handlers. */
#include "http/route.h"

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
#define ROUTES_FS \
	{ "GET", "/fs/read", AUTH_SCOPE_FS_READ, 0, route_fs_read }, \
	{ "GET", "/fs/read_buffer", AUTH_SCOPE_FS_READ, 0, route_fs_read_buffer }, \
	{ "PUT", "/fs/write", AUTH_SCOPE_FS_WRITE, RF_RAW, route_fs_write }, \
	{ "GET", "/fs/stat", AUTH_SCOPE_FS_READ, 0, route_fs_stat }, \
	{ "GET", "/fs/readdir", AUTH_SCOPE_FS_READ, 0, route_fs_readdir }, \
	{ "GET", "/fs/exists", AUTH_SCOPE_FS_READ, 0, route_fs_exists }, \
	{ "POST", "/fs/mkdir", AUTH_SCOPE_FS_WRITE, RF_JSON, route_fs_mkdir }, \
	{ "POST", "/fs/rm", AUTH_SCOPE_FS_WRITE, RF_JSON, route_fs_rm }, \
	{ "POST", "/fs/move", AUTH_SCOPE_FS_WRITE, RF_JSON, route_fs_move },

/* routes/sessions.c */
int route_sessions_list(struct req *r);
int route_session_delete(struct req *r);
/* Listing is observing (audit:read), and a gateway lists its own sessions
 * with its ordinary token (fs:read or exec, which see the same directories
 * anyway); deleting removes files, so it needs fs:write. */
#define ROUTES_SESSIONS \
	{ "GET", "/sessions", AUTH_SCOPE_AUDIT_READ | AUTH_SCOPE_FS_READ | AUTH_SCOPE_EXEC, 0, route_sessions_list }, \
	{ "DELETE", "/session", AUTH_SCOPE_FS_WRITE, 0, route_session_delete },

/* routes/exec.c */
int route_exec_post(struct req *r);
int route_exec_get(struct req *r);
int route_exec_cancel(struct req *r);
int route_exec_list(struct req *r);
#define ROUTES_EXEC \
	{ "POST", "/exec", AUTH_SCOPE_EXEC, RF_JSON, route_exec_post }, \
	{ "GET", "/exec/{id}", AUTH_SCOPE_EXEC | AUTH_SCOPE_AUDIT_READ, 0, route_exec_get }, \
	{ "POST", "/exec/{id}/cancel", AUTH_SCOPE_EXEC, 0, route_exec_cancel }, \
	{ "GET", "/execs", AUTH_SCOPE_EXEC | AUTH_SCOPE_AUDIT_READ, 0, route_exec_list },

/* routes/transfers.c. The token is the capability of /fs/stream/{token}
 * (public); POST /fs/transfers checks the direction's scope itself. The
 * upload routes open their temp file in a begin hook, before the body. */
int route_transfers_post(struct req *r);
int route_transfer_get(struct req *r);
int route_transfer_put_begin(struct req *r);
int route_transfer_put(struct req *r);
int route_fs_read_stream(struct req *r);
int route_fs_write_stream_begin(struct req *r);
#define ROUTES_TRANSFERS \
	{ "POST", "/fs/transfers", AUTH_SCOPE_FS_READ | AUTH_SCOPE_FS_WRITE, RF_JSON, route_transfers_post, NULL }, \
	{ "GET", "/fs/stream/{token}", 0, RF_PUBLIC, route_transfer_get, NULL }, \
	{ "PUT", "/fs/stream/{token}", 0, RF_PUBLIC | RF_STREAM_IN, route_transfer_put, route_transfer_put_begin }, \
	{ "GET", "/fs/read_stream", AUTH_SCOPE_FS_READ, 0, route_fs_read_stream, NULL }, \
	{ "PUT", "/fs/write_stream", AUTH_SCOPE_FS_WRITE, RF_STREAM_IN, route_transfer_put, route_fs_write_stream_begin },

/* routes/events.c */
int route_exec_events(struct req *r);
int route_events(struct req *r);
#define ROUTES_EVENTS \
	{ "GET", "/exec/{id}/events", AUTH_SCOPE_EXEC | AUTH_SCOPE_AUDIT_READ, RF_SSE, route_exec_events }, \
	{ "GET", "/events", AUTH_SCOPE_EXEC | AUTH_SCOPE_AUDIT_READ, RF_SSE, route_events },

/* routes/audit.c */
int route_audit(struct req *r);
#define ROUTES_AUDIT { "GET", "/audit", AUTH_SCOPE_AUDIT_READ | AUTH_SCOPE_ADMIN, 0, route_audit },
