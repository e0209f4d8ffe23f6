#include "http/errors.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "common/errors.h"

static const struct {
	int err; /* positive errno or SBX_E_* */
	struct http_wire_error w;
} table[] = {
    {EINVAL, {400, "bad_request", NULL}},
    {EBADMSG, {400, "bad_request", NULL}},
    {ENAMETOOLONG, {400, "bad_request", NULL}},
    {ELOOP, {400, "bad_request", NULL}},
    {SBX_E_UNAUTHORIZED, {401, "unauthorized", NULL}},
    {SBX_E_SCOPE, {403, "insufficient_scope", NULL}},
    {SBX_E_FORBIDDEN, {403, "forbidden", NULL}},
    {SBX_E_REJECTED, {403, "rejected", NULL}},
    {EACCES, {403, "forbidden", NULL}},
    {EPERM, {403, "forbidden", NULL}},
    {EROFS, {403, "forbidden", NULL}},
    {EXDEV, {403, "outside_workspace", NULL}},
    {SBX_E_SPECIAL, {403, "forbidden", NULL}},
    {SBX_E_ROOT, {403, "forbidden", NULL}},
    {ENOENT, {404, "not_found", NULL}},
    {ESRCH, {404, "not_found", NULL}},
    {SBX_E_PARENT_MISSING, {404, "parent_missing", NULL}},
    {SBX_E_METHOD, {405, "method_not_allowed", NULL}},
    {EEXIST, {409, "exists", NULL}},
    {ENOTEMPTY, {409, "not_empty", NULL}},
    {ENOTDIR, {409, "not_a_directory", NULL}},
    {EISDIR, {409, "is_a_directory", NULL}},
    {SBX_E_CONFLICT, {409, "conflict", NULL}},
    {EBUSY, {409, "conflict", NULL}},
    {SBX_E_TOKEN_USED, {410, "token_used", "mint a new transfer token with POST /fs/transfers"}},
    {SBX_E_TOKEN_EXPIRED, {410, "token_expired", "mint a new transfer token with POST /fs/transfers"}},
    {EFBIG,
     {413, "too_large",
      "use the streaming routes: POST /fs/transfers, GET /fs/read_stream, PUT /fs/write_stream"}},
    {E2BIG,
     {413, "too_large",
      "use the streaming routes: POST /fs/transfers, GET /fs/read_stream, PUT /fs/write_stream"}},
    {ERANGE, {416, "range_not_satisfiable", NULL}},
    {SBX_E_NOT_TEXT, {422, "not_text", "read bytes with GET /fs/read_buffer"}},
    {SBX_E_LANGUAGE, {422, "unsupported_language", "GET /readyz lists the languages this server runs"}},
    {SBX_E_NO_IMAGE, {422, "unknown_image", "name one of error.details.available, or none for the default"}},
    {SBX_E_TOO_MANY, {429, "too_many_requests", "retry after the interval in Retry-After"}},
    {EAGAIN, {503, "backend_unavailable", "a transient state; retry after Retry-After"}},
    {SBX_E_BACKEND,
     {503, "backend_unavailable",
      "the isolation backend cannot start commands now; retry after Retry-After"}},
    {ENOSYS,
     {503, "backend_unavailable", "the kernel lacks openat2 (Linux 5.6+); the operator must fix the host"}},
    {SBX_E_STORE,
     {503, "store_unavailable", "the state store cannot record this now; retry after Retry-After"}},
    {ENOSPC, {507, "insufficient_storage", "free space in the workspace, or ask the operator for quota"}},
    {EDQUOT, {507, "insufficient_storage", "free space in the workspace, or ask the operator for quota"}},
    {SBX_E_QUOTA,
     {507, "quota_exceeded",
      "delete files in the workspace (error.details has the usage), or ask the operator for quota"}},
    {SBX_E_RESERVE,
     {507, "insufficient_storage",
      "the server's disk is nearly full and keeps its last space for its records; retry later"}},
    {SBX_E_STORE_BUDGET,
     {507, "store_budget_exceeded",
      "the server's records of this tenant are at its budget (error.details): they are freed as retention "
      "deletes old rows, or ask the operator for a larger budget"}},
};

struct http_wire_error http_wire_error(int code)
{
	int e = code < 0 ? -code : code;
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (table[i].err == e)
			return table[i].w;
	return (struct http_wire_error){500, "internal", NULL};
}

int http_errno_of_wire(const char *code)
{
	/* The first row of a code is its canonical errno (EAGAIN before
	 * ENOSYS for backend_unavailable, EACCES for forbidden). */
	for (size_t i = 0; code && i < sizeof table / sizeof table[0]; i++)
		if (strcmp(table[i].w.code, code) == 0)
			return -table[i].err;
	return -EIO;
}
