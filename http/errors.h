#pragma once
/* The one table mapping negative errnos and -SBX_E_* codes to wire.md's
 * HTTP status and error code. */
struct http_wire_error {
	int status;
	const char *code;
	const char *retry_hint; /* NULL: none */
};

/* For any negative code; unknown codes are 500 internal. */
struct http_wire_error http_wire_error(int code);
/* The other way, for answers relayed from another sandboxd: the negative
 * errno (or SBX_E_*) of a wire error code, by the same table; -EIO for a
 * code it does not know (500 internal). */
int http_errno_of_wire(const char *code);
