/* libFuzzer: POST /mcp's bodies through the JSON-RPC 2.0 classifier
 * (http/jsonrpc.h), and the answers built for what it returns. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/jsonrpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_jsonrpc_msg m;
	const char *why = NULL;
	int rc = http_jsonrpc_parse((const char *)data, size, &m, &why);
	if (rc != 0) {
		if (m.root || m.id || m.method || !why ||
		    (rc != HTTP_JSONRPC_PARSE && rc != HTTP_JSONRPC_INVALID_REQUEST))
			abort();
		json_decref(http_jsonrpc_error(NULL, rc, why, NULL));
		return 0;
	}
	bool ok = m.root && json_is_object(m.root);
	switch (m.kind) {
	case HTTP_JSONRPC_REQUEST:
		ok = ok && m.id && m.method;
		break;
	case HTTP_JSONRPC_NOTIFICATION:
		ok = ok && !m.id && m.method;
		break;
	case HTTP_JSONRPC_RESPONSE:
		ok = ok && m.id && !m.method && !m.params;
		break;
	}
	if (m.id)
		ok = ok && (json_is_string(m.id) || json_is_integer(m.id));
	if (m.method)
		ok = ok && *m.method && strlen(m.method) <= HTTP_JSONRPC_METHOD_MAX;
	if (m.params)
		ok = ok && json_is_object(m.params);
	if (!ok)
		abort();
	json_t *ans = http_jsonrpc_result(m.id, json_incref(m.params ? m.params : m.root));
	char *t = json_dumps(ans, JSON_COMPACT);
	if (!t)
		abort();
	free(t);
	json_decref(ans);
	http_jsonrpc_clear(&m);
	return 0;
}
