#pragma once
/* Helpers of routes/fs.c that the other routes share: ranges, answering
 * with a file, the bodies of stat and readdir. (Paths and their errors:
 * routes/paths.h.) */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_req;
struct http_response;
struct sbx_stat;
struct sbx_dir_page;

/* The bodies of stat and readdir (also of the routes that carry a file
 * operation inside their own request). */
/* A workspace-relative path as the wire spells it (/workspace/...). */
json_t *route_fs_path_json(const char *rel);
json_t *route_fs_stat_json(const char *rel, const struct sbx_stat *st);
json_t *route_fs_page_json(const struct sbx_dir_page *page, bool detail);

/* Parse a single "bytes=a-b" / "bytes=a-" / "bytes=-n" range against size
 * into an inclusive [start, end]. -EINVAL malformed (ignored by callers,
 * as RFC 9110 allows), -ERANGE unsatisfiable (416). */
int route_fs_parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *end);
/* The request's Range against a file of size bytes: [start, end] and a
 * status of 200 or 206 (a malformed Range is ignored: the whole file, as
 * RFC 9110 allows). A range past the end closes fd and fails with 416
 * (returns < 0, to be returned as the handler's answer). */
int route_fs_range(struct http_req *r, int fd, uint64_t size, uint64_t *start, uint64_t *end, int *status);
/* The headers of a file's bytes: octet-stream, Accept-Ranges, and
 * Content-Range for a 206. */
void route_fs_range_headers(struct http_response *resp, int status, uint64_t start, uint64_t end,
			    uint64_t size);
/* Answer 200/206 with the bytes of fd (whole, or the request's Range)
 * straight from the file; takes fd. limit: largest body allowed (0: none),
 * over it 413. */
int route_fs_reply_fd(struct http_req *r, int fd, uint64_t size, uint64_t limit);

/* The work of read_file, write_file (r->body is the file), stat and
 * readdir on a path already resolved (route_path) into rel, answered as
 * those routes answer: for the routes that carry a file operation inside
 * their own request (POST /mcp's tools, routes/mcp.c). File work: on the
 * pool. readdir: limit 1..10000, after a cursor or NULL. */
int route_fs_read_at(struct http_req *r, const char *rel);
int route_fs_write_at(struct http_req *r, const char *rel);
int route_fs_stat_at(struct http_req *r, const char *rel);
int route_fs_readdir_at(struct http_req *r, const char *rel, const char *after, int64_t limit, bool detail);
#define ROUTE_FS_READDIR_LIMIT_MAX 10000
