#include "common/errors.h"

#include <string.h>

static const char *const project_text[] = {
    [SBX_E_PARENT_MISSING - SBX_E_BASE] = "parent directory missing",
    [SBX_E_NOT_TEXT - SBX_E_BASE] = "not UTF-8 text",
    [SBX_E_SPECIAL - SBX_E_BASE] = "not a regular file or directory",
    [SBX_E_ROOT - SBX_E_BASE] = "a workspace or session root",
    [SBX_E_TOKEN_USED - SBX_E_BASE] = "token already used",
    [SBX_E_TOKEN_EXPIRED - SBX_E_BASE] = "token expired",
    [SBX_E_CONFLICT - SBX_E_BASE] = "conflict",
    [SBX_E_BACKEND - SBX_E_BASE] = "backend unavailable",
    [SBX_E_STORE - SBX_E_BASE] = "store unavailable",
    [SBX_E_TOO_MANY - SBX_E_BASE] = "too many requests",
    [SBX_E_UNAUTHORIZED - SBX_E_BASE] = "unauthorized",
    [SBX_E_SCOPE - SBX_E_BASE] = "insufficient scope",
    [SBX_E_FORBIDDEN - SBX_E_BASE] = "forbidden",
    [SBX_E_METHOD - SBX_E_BASE] = "method not allowed",
    [SBX_E_QUOTA - SBX_E_BASE] = "disk quota exceeded",
    [SBX_E_RESERVE - SBX_E_BASE] = "the disk is nearly full (the store's reserve)",
    [SBX_E_LANGUAGE - SBX_E_BASE] = "language not available",
    [SBX_E_REJECTED - SBX_E_BASE] = "rejected",
    [SBX_E_NO_IMAGE - SBX_E_BASE] = "no such image",
    [SBX_E_STORE_BUDGET - SBX_E_BASE] = "the tenant's store budget is used up",
};

const char *sbx_strerror(int rc)
{
	int e = rc < 0 ? -rc : rc;

	if (e > SBX_E_BASE && (size_t)(e - SBX_E_BASE) < sizeof(project_text) / sizeof(project_text[0]) &&
	    project_text[e - SBX_E_BASE])
		return project_text[e - SBX_E_BASE];
	if (e >= SBX_E_BASE)
		return "error";
	return strerror(e);
}
