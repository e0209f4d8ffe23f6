#pragma once
/* Functions return 0 or a negative errno. Where no errno says what the wire
 * contract needs to tell apart, these project codes (above any errno) do;
 * they are returned negated, like errnos. routes/errors.c maps both to
 * wire.md's HTTP status and error code in one table. */
enum sbx_error {
	SBX_E_BASE = 4096,
	SBX_E_PARENT_MISSING, /* 404 parent_missing */
	SBX_E_NOT_TEXT,	      /* 422 not_text */
	SBX_E_SPECIAL,	      /* 403 forbidden: FIFO, socket or device */
	SBX_E_ROOT,	      /* 403 forbidden: the workspace or a session root */
	SBX_E_TOKEN_USED,     /* 410 token_used */
	SBX_E_TOKEN_EXPIRED,  /* 410 token_expired */
	SBX_E_CONFLICT,	      /* 409 conflict */
	SBX_E_BACKEND,	      /* 503 backend_unavailable */
	SBX_E_STORE,	      /* 503 store_unavailable */
	SBX_E_TOO_MANY,	      /* 429 too_many_requests */
	SBX_E_UNAUTHORIZED,   /* 401 unauthorized */
	SBX_E_SCOPE,	      /* 403 insufficient_scope */
	SBX_E_FORBIDDEN,      /* 403 forbidden */
	SBX_E_METHOD,	      /* 405 method_not_allowed */
	SBX_E_QUOTA,	      /* 507 quota_exceeded: the tenant's disk quota */
	SBX_E_RESERVE,	      /* 507 insufficient_storage: the store's reserve would be used */
	SBX_E_LANGUAGE,	      /* 422 unsupported_language */
	SBX_E_REJECTED,	      /* 403 rejected: a person (or the approval timeout) said no */
	SBX_E_NO_IMAGE,	      /* 422 unknown_image: an exec names a root image that does not exist */
	SBX_E_STORE_BUDGET, /* 507 store_budget_exceeded: what the store holds for the tenant is at its budget
			     */
};

/* What a negative return means, for logs and messages: strerror for an
 * errno, a short text for the project codes above. Never NULL; the string
 * is static (or strerror's). */
const char *sbx_strerror(int rc);
