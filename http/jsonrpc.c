/* JSON-RPC 2.0 messages: parse, classify, answer (see jsonrpc.h). */
#include "http/jsonrpc.h"

#include <string.h>

/* An id a client may choose: a string or an integer (JSON-RPC allows
 * null and fractions, and discourages both; MCP forbids null). */
static bool id_ok(const json_t *id)
{
	return json_is_string(id) || json_is_integer(id);
}

static int invalid(struct http_jsonrpc_msg *m, const char **why, const char *what)
{
	*why = what;
	http_jsonrpc_clear(m);
	return HTTP_JSONRPC_INVALID_REQUEST;
}

int http_jsonrpc_parse(const char *body, size_t len, struct http_jsonrpc_msg *m, const char **why)
{
	memset(m, 0, sizeof *m);
	*why = NULL;
	if (len == 0) {
		*why = "the body is empty: it must be one JSON-RPC 2.0 message";
		return HTTP_JSONRPC_PARSE;
	}
	/* jansson bounds nesting (2048 levels) and refuses invalid UTF-8. */
	m->root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
	if (!m->root) {
		*why = "the body is not JSON (or repeats a key, or is not UTF-8)";
		return HTTP_JSONRPC_PARSE;
	}
	if (json_is_array(m->root))
		return invalid(
		    m, why,
		    "batches are not supported (MCP 2025-06-18 removed them): one message per request");
	if (!json_is_object(m->root))
		return invalid(m, why, "a JSON-RPC message is an object");
	const char *v = json_string_value(json_object_get(m->root, "jsonrpc"));
	if (!v || strcmp(v, "2.0") != 0)
		return invalid(m, why, "\"jsonrpc\" must be \"2.0\"");
	json_t *id = json_object_get(m->root, "id");
	json_t *method = json_object_get(m->root, "method");
	json_t *params = json_object_get(m->root, "params");
	bool has_result = json_object_get(m->root, "result") != NULL;
	bool has_error = json_object_get(m->root, "error") != NULL;
	if (id && !id_ok(id))
		return invalid(m, why, "\"id\" must be a string or an integer");
	if (!method) {
		if (!id || has_result == has_error)
			return invalid(m, why,
				       "a message has a method (request, notification) or one of result and "
				       "error (response)");
		m->id = id;
		m->kind = HTTP_JSONRPC_RESPONSE;
		return 0;
	}
	if (!json_is_string(method) || json_string_length(method) == 0 ||
	    json_string_length(method) > HTTP_JSONRPC_METHOD_MAX ||
	    strlen(json_string_value(method)) != json_string_length(method))
		return invalid(m, why,
			       "\"method\" must be a non-empty string of at most 128 bytes without NUL");
	if (has_result || has_error)
		return invalid(m, why, "a request has no result or error");
	if (params && !json_is_object(params))
		return invalid(m, why, "\"params\" must be an object (MCP names its parameters)");
	m->id = id;
	m->method = json_string_value(method);
	m->params = params;
	m->kind = id ? HTTP_JSONRPC_REQUEST : HTTP_JSONRPC_NOTIFICATION;
	return 0;
}

void http_jsonrpc_clear(struct http_jsonrpc_msg *m)
{
	json_decref(m->root);
	memset(m, 0, sizeof *m);
}

json_t *http_jsonrpc_result(json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O?, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

json_t *http_jsonrpc_error(json_t *id, int code, const char *message, json_t *data)
{
	json_t *e = json_pack("{s:i, s:s}", "code", code, "message", message);
	if (data)
		json_object_set_new(e, "data", data);
	return json_pack("{s:s, s:O?, s:o}", "jsonrpc", "2.0", "id", id, "error", e);
}
