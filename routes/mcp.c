/* POST /mcp: the Model Context Protocol over streamable HTTP (MCP
 * 2025-06-18, 2025-03-26), stateless, answered with application/json;
 * and the RFC 9728 protected-resource metadata that tells an MCP client
 * how to authenticate (GET /.well-known/oauth-protected-resource[/mcp]).
 *
 * The dispatcher has authenticated the request before this runs (a 401
 * names the metadata: RF_RESOURCE_META), with any one of the tools'
 * scopes; each tool checks its own. One JSON-RPC message per request:
 * initialize, ping, tools/list and tools/call are answered; notifications
 * (notifications/initialized, notifications/cancelled) and a client's
 * responses get 202. A tools/call runs the tool (routes/mcp_tools.c)
 * inside an envelope (http/req.h): the routes' own code does the work and
 * its answer, or its error, becomes the tool's result here.
 *
 * Stateless: initialize issues an Mcp-Session-Id, which the server never
 * stores. It namespaces the exec ids of that client's tool calls
 * (route_mcp_exec_id), so that notifications/cancelled of a request
 * finds its command again. */
#include "routes/mcp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/auth.h"
#include "common/errors.h"
#include "common/xmalloc.h"
#include "http/jsonrpc.h"
#include "http/req.h"
#include "http/response.h"
#include "routes/exec.h"
#include "routes/provider.h"
#include "routes/routes.h"

/* The protocol versions served; the first is offered to a client that
 * asks for another. */
static const char *const versions[] = {"2025-06-18", "2025-03-26"};
#define NVERSIONS (sizeof versions / sizeof versions[0])

static bool version_known(const char *v)
{
	for (size_t i = 0; v && i < NVERSIONS; i++)
		if (strcmp(v, versions[i]) == 0)
			return true;
	return false;
}

static void call_free(void *p)
{
	struct route_mcp_call *c = p;
	if (!c)
		return;
	json_decref(c->id);
	json_decref(c->args);
	free(c);
}

/* Queue msg (taken) as application/json with status; an initialize
 * answer carries the session id it issues. */
static int reply_rpc(struct http_req *r, int status, json_t *msg, const char *session_id)
{
	char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
	json_decref(msg);
	struct http_response *resp = text ? http_json_response(r, text) : NULL;
	if (!resp)
		return -ENOMEM;
	if (session_id)
		http_response_header(resp, "Mcp-Session-Id", session_id);
	return http_reply_response(r, status, resp);
}

/* How many bytes of s (UTF-8) to quote in a message of ours: at most
 * max, never cutting a character (jansson refuses a cut one). */
static int quoted(const char *s, size_t max)
{
	size_t n = strnlen(s, max + 1);
	if (n > max) {
		n = max;
		while (n && ((unsigned char)s[n] & 0xc0) == 0x80)
			n--;
	}
	return (int)n;
}

static int rpc_error(struct http_req *r, int http_status, json_t *id, int code, const char *msg)
{
	return reply_rpc(r, http_status, http_jsonrpc_error(id, code, msg, NULL), NULL);
}

/* ---- initialize, ping, tools/list ---- */

static int initialize(struct http_req *r, const struct http_jsonrpc_msg *m)
{
	const char *asked = json_string_value(json_object_get(m->params, "protocolVersion"));
	if (!asked)
		return rpc_error(r, 200, m->id, HTTP_JSONRPC_INVALID_PARAMS,
				 "initialize needs params.protocolVersion");
	unsigned char rnd[16];
	char sid[40];
	if (auth_random(rnd, sizeof rnd) < 0)
		return rpc_error(r, 500, m->id, HTTP_JSONRPC_INTERNAL, "no randomness for a session id");
	for (size_t i = 0; i < sizeof rnd; i++)
		snprintf(sid + 2 * i, 3, "%02x", rnd[i]);
	json_t *res = json_pack(
	    "{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion",
	    version_known(asked) ? asked : versions[0], "capabilities", "tools", "listChanged", 0,
	    "serverInfo", "name", "sandboxd", "title", "sandboxd", "version", SANDBOXD_VERSION,
	    "instructions",
	    "Tools run in this tenant's sandbox, one session per X-Session-Key header: commands run "
	    "under /bin/sh in the session directory (/workspace/sessions/...), relative paths resolve "
	    "against it, and nothing outside /workspace is reachable. A command that waits for "
	    "approval is answered at once with its exec id: call exec again with that id to collect "
	    "its result, or cancel it.");
	return reply_rpc(r, 200, http_jsonrpc_result(m->id, res), sid);
}

static json_t *tool_json(const struct route_mcp_tool *t)
{
	json_t *schema = json_loads(t->input_schema, 0, NULL);
	if (!schema) /* a literal of mcp_tools.c: the unit test parses each */
		schema = json_pack("{s:s}", "type", "object");
	char need[32];
	auth_scopes_format(t->scope, need, sizeof need);
	return json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:b, s:b, s:b, s:b}, s:{s:s}}", "name", t->name,
			 "title", t->title, "description", t->description, "inputSchema", schema,
			 "annotations", "title", t->title, "readOnlyHint", t->read_only, "destructiveHint",
			 t->destructive, "idempotentHint", t->idempotent, "openWorldHint", t->open_world,
			 "_meta", "sandboxd/scope", need);
}

static int tools_list(struct http_req *r, const struct http_jsonrpc_msg *m)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < route_mcp_ntools; i++)
		json_array_append_new(arr, tool_json(&route_mcp_tools[i]));
	return reply_rpc(r, 200, http_jsonrpc_result(m->id, json_pack("{s:o}", "tools", arr)), NULL);
}

/* ---- tools/call ---- */

json_t *route_mcp_result(json_t *body, bool is_error)
{
	char *text = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
	json_t *res = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text ? text : "",
				"isError", is_error);
	free(text);
	if (json_is_object(body))
		json_object_set(res, "structuredContent", body);
	json_decref(body);
	return res;
}

/* The envelope of a tools/call: the answer of the tool's route code as a
 * JSON-RPC response. A 400 (bad_request: an argument the route refused)
 * is the protocol's invalid params; any other error is a tool-level
 * failure (isError), its wire error the structured content. */
static json_t *tool_answer(struct http_req *r, int status, json_t *body)
{
	struct route_mcp_call *c = r->envelope_ctx;
	if (status == 400) {
		const char *msg =
		    json_string_value(json_object_get(json_object_get(body, "error"), "message"));
		json_t *e =
		    http_jsonrpc_error(c->id, HTTP_JSONRPC_INVALID_PARAMS, msg ? msg : "invalid arguments",
				       json_incref(json_object_get(body, "error")));
		json_decref(body);
		return e;
	}
	json_t *res = status >= 300	? route_mcp_result(body, true)
		      : c->tool->render ? c->tool->render(c, status, body)
					: route_mcp_result(body, false);
	return http_jsonrpc_result(c->id, res);
}

static int tools_call(struct http_req *r, const struct http_jsonrpc_msg *m)
{
	const char *name = json_string_value(json_object_get(m->params, "name"));
	json_t *args = json_object_get(m->params, "arguments");
	if (!name)
		return rpc_error(r, 200, m->id, HTTP_JSONRPC_INVALID_PARAMS, "tools/call needs params.name");
	const struct route_mcp_tool *t = route_mcp_tool_find(name);
	if (!t) {
		char msg[200];
		snprintf(msg, sizeof msg, "unknown tool: %.*s (tools/list names them)", quoted(name, 120),
			 name);
		return rpc_error(r, 200, m->id, HTTP_JSONRPC_INVALID_PARAMS, msg);
	}
	if (args && !json_is_object(args))
		return rpc_error(r, 200, m->id, HTTP_JSONRPC_INVALID_PARAMS, "arguments must be an object");
	struct route_mcp_call *c = xcalloc(1, sizeof *c);
	c->id = json_incref(m->id);
	c->args = args ? json_incref(args) : json_object();
	c->tool = t;
	r->envelope = tool_answer;
	r->envelope_ctx = c;
	r->envelope_free = call_free;
	/* The audit's target: what the call asks for (its command, path or
	 * exec id), as a refused REST request's is, until the tool's route
	 * sets it as resolved. */
	static const char *const asked[] = {"command", "code", "path", "id"};
	json_t *what = NULL;
	for (size_t i = 0; i < sizeof asked / sizeof asked[0] && !json_is_string(what); i++)
		what = json_object_get(c->args, asked[i]);
	if (json_is_string(what))
		http_set_target_raw(r, json_string_value(what), json_string_length(what));
	else
		http_set_target(r, t->name);
	/* The scope of the tool, as its route would ask: a tool-level
	 * failure (isError, audited denied 403), the session goes on. */
	if (!(r->claims.scopes & t->scope)) {
		char need[32];
		auth_scopes_format(t->scope, need, sizeof need);
		return http_fail(r, -SBX_E_SCOPE, "the tool %s needs the scope %s", t->name, need);
	}
	char tool[64], why[384];
	snprintf(tool, sizeof tool, "the tool %s", t->name);
	int rc = route_provider_admit(r->tenant, t->flags, tool, why, sizeof why);
	if (rc < 0)
		return http_fail(r, rc, "%s", why);
	return t->run(r);
}

/* ---- notifications ---- */

static json_t *swallow(struct http_req *r, int status, json_t *body)
{
	(void)r;
	(void)status;
	json_decref(body);
	return NULL;
}

/* notifications/cancelled: the command of that request (of this
 * client's Mcp-Session-Id, with the exec id the server chose) is
 * cancelled as POST /exec/{id}/cancel would; the notification is
 * answered 202 whatever came of it (a request that had finished, or that
 * named its own id, or a token without exec). */
static int cancelled(struct http_req *r, const struct http_jsonrpc_msg *m)
{
	json_t *req = json_object_get(m->params, "requestId");
	char id[72];
	if (!(r->claims.scopes & AUTH_SCOPE_EXEC) || !(json_is_string(req) || json_is_integer(req)) ||
	    !route_mcp_exec_id(r, req, id, sizeof id))
		return http_reply_static(r, 202, NULL, "", 0);
	r->envelope = swallow;
	return route_exec_cancel_id(r, id);
}

static int notification(struct http_req *r, const struct http_jsonrpc_msg *m)
{
	if (strcmp(m->method, "notifications/cancelled") == 0)
		return cancelled(r, m);
	return http_reply_static(r, 202, NULL, "", 0);
}

/* ---- the route ---- */

static int dispatch(struct http_req *r, const struct http_jsonrpc_msg *m)
{
	if (m->kind == HTTP_JSONRPC_RESPONSE)
		return http_reply_static(r, 202, NULL, "", 0); /* we ask nothing: nothing to match */
	http_set_target(r, m->method);
	if (m->kind == HTTP_JSONRPC_NOTIFICATION)
		return notification(r, m);
	if (strcmp(m->method, "initialize") == 0)
		return initialize(r, m);
	if (strcmp(m->method, "ping") == 0)
		return reply_rpc(r, 200, http_jsonrpc_result(m->id, json_object()), NULL);
	if (strcmp(m->method, "tools/list") == 0)
		return tools_list(r, m);
	if (strcmp(m->method, "tools/call") == 0)
		return tools_call(r, m);
	char msg[200];
	snprintf(msg, sizeof msg,
		 "method not found: %.*s (sandboxd serves initialize, ping, tools/list, tools/call)",
		 quoted(m->method, 120), m->method);
	return rpc_error(r, 200, m->id, HTTP_JSONRPC_NO_METHOD, msg);
}

int route_mcp_post(struct http_req *r)
{
	/* A version the client settled on that we do not speak: 400 (MCP
	 * 2025-06-18, "Protocol Version Header"). Absent: 2025-03-26. */
	const char *pv = http_header(r, "MCP-Protocol-Version");
	if (pv && !version_known(pv))
		return rpc_error(
		    r, 400, NULL, HTTP_JSONRPC_INVALID_REQUEST,
		    "unsupported MCP-Protocol-Version: sandboxd speaks 2025-06-18 and 2025-03-26");
	struct http_jsonrpc_msg m;
	const char *why = NULL;
	int code = http_jsonrpc_parse(r->body.ptr ? r->body.ptr : "", r->body.len, &m, &why);
	if (code != 0)
		return rpc_error(r, 400, NULL, code, why);
	int rc = dispatch(r, &m);
	http_jsonrpc_clear(&m);
	return rc;
}

/* GET /.well-known/oauth-protected-resource[/mcp] (RFC 9728): what the
 * resource is and which bearer tokens it takes. Tokens are JWTs signed
 * with the tenant's key (`sandboxd token`, or the gateway that holds the
 * key): there is no authorization server to name. */
int route_mcp_resource_metadata(struct http_req *r)
{
	char base[300];
	if (!http_base_url(r, base, sizeof base))
		return http_fail(r, -EINVAL, "a Host header naming this server is needed");
	bool mcp = strcmp(r->url, "/.well-known/oauth-protected-resource/mcp") == 0;
	char resource[320];
	snprintf(resource, sizeof resource, "%s%s", base, mcp ? "/mcp" : "");
	return http_reply_json(r, 200,
			       json_pack("{s:s, s:[s], s:[s, s, s], s:s}", "resource", resource,
					 "bearer_methods_supported", "header", "scopes_supported", "fs:read",
					 "fs:write", "exec", "resource_name", "sandboxd"));
}
