#pragma once
/* JSON-RPC 2.0 messages (https://www.jsonrpc.org/specification), as POST
 * /mcp receives and answers them (routes/mcp.c): one message per request
 * body (MCP 2025-06-18 has no batches), classified here without any
 * request or server state, so that it can be unit-tested and fuzzed. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The error codes of JSON-RPC 2.0. */
enum http_jsonrpc_code {
	HTTP_JSONRPC_PARSE = -32700,
	HTTP_JSONRPC_INVALID_REQUEST = -32600,
	HTTP_JSONRPC_NO_METHOD = -32601,
	HTTP_JSONRPC_INVALID_PARAMS = -32602,
	HTTP_JSONRPC_INTERNAL = -32603,
};

enum http_jsonrpc_kind {
	HTTP_JSONRPC_REQUEST,	   /* method and id: answered */
	HTTP_JSONRPC_NOTIFICATION, /* method without id: never answered */
	HTTP_JSONRPC_RESPONSE,	   /* result or error with an id: a client's answer */
};

/* The longest method name taken (MCP's are far shorter). */
#define HTTP_JSONRPC_METHOD_MAX 128

struct http_jsonrpc_msg {
	json_t *root;	    /* the whole message, owned */
	json_t *id;	    /* borrowed from root: a string or an integer; NULL for a notification */
	const char *method; /* borrowed from root; NULL for a response */
	json_t *params;	    /* borrowed: an object, or NULL when absent */
	enum http_jsonrpc_kind kind;
};

/* Parse and classify one message of len bytes (need not end in NUL).
 * 0 with *m filled (free with http_jsonrpc_clear), or a JSON-RPC error
 * code: HTTP_JSONRPC_PARSE (not JSON), HTTP_JSONRPC_INVALID_REQUEST (JSON,
 * but no valid single message: a batch, a wrong "jsonrpc", an id that is
 * neither a string nor an integer, params that are not an object, ...),
 * with why (static text) saying what; *m is then cleared, except m->id,
 * which is left NULL (the error is answered with id null). */
int http_jsonrpc_parse(const char *body, size_t len, struct http_jsonrpc_msg *m, const char **why);
void http_jsonrpc_clear(struct http_jsonrpc_msg *m);

/* {"jsonrpc": "2.0", "id": id, "result": result}; takes result, copies
 * id (NULL: null). */
json_t *http_jsonrpc_result(json_t *id, json_t *result);
/* {"jsonrpc": "2.0", "id": id, "error": {"code", "message"[, "data"]}};
 * takes data (NULL: none), copies id (NULL: null). */
json_t *http_jsonrpc_error(json_t *id, int code, const char *message, json_t *data);
