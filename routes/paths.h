#pragma once
/* A request's session and paths (routes/paths.c). */
#include <stddef.h>

struct http_req;

/* Resolve the request's session: find or create its row and directory
 * (once), and set r->session_rel. 0 or -errno (with http_fail). */
int route_session(struct http_req *r);
/* Normalise a wire path against the request's session (created on first
 * use) into a workspace-relative path in out; the audit target is set
 * (as asked for when refused). 0, or -EINVAL / -EXDEV with http_fail. */
int route_path(struct http_req *r, const char *wire, size_t len, char *out, size_t outsz);
/* The ?path= parameter (a decoded %00 stays in it and is refused),
 * resolved like route_path. */
int route_query_path(struct http_req *r, char *rel, size_t relsz);
/* http_fail for a file operation's error: the one errno -> message table of
 * the file and transfer routes ("no such file or directory: /workspace/x").
 * what: the verb ("read", "write", ...); rel: the workspace-relative path. */
int route_fail_path(struct http_req *r, int rc, const char *what, const char *rel);
