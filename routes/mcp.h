#pragma once
/* POST /mcp's tools (routes/mcp_tools.c), as the protocol side
 * (routes/mcp.c) lists and calls them. A tool is a request like any
 * other: it runs the routes' own code for its work (POST /exec's, POST
 * /code's, the file routes', POST /exec/{id}/cancel's) on the same
 * request, inside an envelope (http/req.h) that turns their answer into
 * the tool's result. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct http_req;

/* One tools/call being answered: the envelope's state (r->envelope_ctx). */
struct route_mcp_call {
	json_t *id;   /* the JSON-RPC request's id (owned) */
	json_t *args; /* the tool's arguments, an object (owned) */
	const struct route_mcp_tool *tool;
	char exec_id[72]; /* exec and run_code: the exec id the server derived ("" none) */
};

struct route_mcp_tool {
	const char *name, *title, *description;
	const char *input_schema;			     /* JSON Schema of the arguments, JSON text */
	bool read_only, destructive, idempotent, open_world; /* MCP's annotations (hints) */
	unsigned scope;					     /* AUTH_SCOPE_*: the token needs it */
	unsigned flags; /* RF_WORKSPACE when its route has it (routes/table.c): refused alike */
	/* Run the tool on r (r->envelope set, r->envelope_ctx the call): as
	 * a route handler, 0 once answered or suspended, or an error after
	 * http_fail. */
	int (*run)(struct http_req *r);
	/* The result of a 2xx answer of the tool's route code (body taken),
	 * MCP's CallToolResult. NULL: the generic one (body as JSON text and
	 * structuredContent). */
	json_t *(*render)(struct route_mcp_call *c, int status, json_t *body);
};

extern const struct route_mcp_tool route_mcp_tools[];
extern const size_t route_mcp_ntools;

/* The tool named name, or NULL. */
const struct route_mcp_tool *route_mcp_tool_find(const char *name);
/* A CallToolResult of body: its JSON as the one text block, the object as
 * structuredContent; is_error marks a tool-level failure. Takes body. */
json_t *route_mcp_result(json_t *body, bool is_error);
/* The exec id a tool call of r with JSON-RPC id `id` gets when its
 * arguments name none: derived from the client's Mcp-Session-Id, the
 * session key and the request id ("mcp-" and 32 hex digits), so that a
 * notifications/cancelled naming that request finds the exec again
 * without server state. false (out "") without an Mcp-Session-Id. */
bool route_mcp_exec_id(struct http_req *r, const json_t *id, char *out, size_t outsz);
