/* POST /mcp's tools (see mcp.h): their schemas and annotations, and how
 * each hands its arguments to the routes' own code.
 *
 * exec and run_code become the body of a POST /exec or POST /code on
 * this very request (r->json) and run through route_exec_post or
 * route_code_post: the same policy, approval, budgets, admission queue,
 * idempotent ids, bounded output, audit and cancellation on hang-up.
 * They never wait for a person's approval (wait: false): a command that
 * needs it is answered at once with its exec id. The file tools resolve
 * their path as every file route does (route_path) and run the routes'
 * work on the file pool (route_fs_*_at); cancel is POST
 * /exec/{id}/cancel's. Only the arguments listed per tool are taken (the
 * REST fields that would change how the request is answered, stream,
 * background, tty, stdin_pipe, wait, are not tools' arguments). */
#include "routes/mcp.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/auth.h"
#include "common/errors.h"
#include "http/route.h"
#include "http/fields.h"
#include "http/pool.h"
#include "http/req.h"
#include "routes/code.h"
#include "routes/exec_extras.h"
#include "routes/exec.h"
#include "routes/fs.h"
#include "routes/paths.h"
#include "routes/routes.h"
#include "sandbox/workspace.h"

/* ---- exec and run_code ---- */

/* Copy the arguments named in keys into body; another is invalid params. */
static int take_args(struct http_req *r, json_t *args, const char *const *keys, size_t nkeys, json_t *body)
{
	const char *k;
	json_t *v;
	json_object_foreach(args, k, v) {
		bool known = false;
		for (size_t i = 0; i < nkeys && !known; i++)
			known = strcmp(k, keys[i]) == 0;
		if (!known)
			return http_fail(r, -EINVAL,
					 "unknown argument \"%.64s\" (the tool's inputSchema lists them)", k);
		json_object_set(body, k, v);
	}
	return 0;
}

bool route_mcp_exec_id(struct http_req *r, const json_t *id, char *out, size_t outsz)
{
	const char *sid = http_header(r, "Mcp-Session-Id");
	out[0] = '\0';
	size_t n = sid ? strlen(sid) : 0;
	if (n == 0 || n > 128 || outsz < 37)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)sid[i] < 0x21 || (unsigned char)sid[i] > 0x7e)
			return false;
	char *idtext = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!idtext)
		return false;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned char h[32];
	unsigned int hl = 0;
	bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 && EVP_DigestUpdate(md, sid, n) == 1 &&
		  EVP_DigestUpdate(md, "\n", 1) == 1 &&
		  EVP_DigestUpdate(md, r->session_key, r->session_key_len) == 1 &&
		  EVP_DigestUpdate(md, "\n", 1) == 1 && EVP_DigestUpdate(md, idtext, strlen(idtext)) == 1 &&
		  EVP_DigestFinal_ex(md, h, &hl) == 1;
	EVP_MD_CTX_free(md);
	free(idtext);
	if (!ok)
		return false;
	memcpy(out, "mcp-", 4);
	for (size_t i = 0; i < 16; i++)
		snprintf(out + 4 + 2 * i, 3, "%02x", h[i]);
	return true;
}

/* The body of the POST /exec (or /code) the tool call is. */
static int command_body(struct http_req *r, const char *const *keys, size_t nkeys)
{
	struct route_mcp_call *c = r->envelope_ctx;
	json_t *body = json_object();
	int rc = take_args(r, c->args, keys, nkeys, body);
	if (rc < 0) {
		json_decref(body);
		return rc;
	}
	json_object_set_new(body, "wait", json_false());
	if (!json_object_get(body, "id") && route_mcp_exec_id(r, c->id, c->exec_id, sizeof c->exec_id))
		json_object_set_new(body, "id", json_string(c->exec_id));
	json_decref(r->json);
	r->json = body;
	return 0;
}

static const char *const exec_keys[] = {"command",	    "cwd",   "env", "timeout_s", "idle_timeout_s",
					"max_output_bytes", "stdin", "id",  "network"};
static const char *const code_keys[] = {
    "language",		"code", "files",  "args", "cwd", "env", "timeout_s", "idle_timeout_s", "stdin",
    "max_output_bytes", "id",	"network"};

static int exec_run(struct http_req *r)
{
	int rc = command_body(r, exec_keys, sizeof exec_keys / sizeof exec_keys[0]);
	return rc < 0 ? rc : route_exec_post(r);
}

static int code_run(struct http_req *r)
{
	int rc = command_body(r, code_keys, sizeof code_keys / sizeof code_keys[0]);
	return rc < 0 ? rc : route_code_post(r);
}

/* A ShellResult as the one JSON text block {stdout, stderr, exit_code}
 * (the shape sandbox tools share), the whole of it as structured
 * content; a command awaiting approval (202, state pending_approval) as
 * a message naming its exec id. A command's exit status, timeout or
 * cancellation is a result, never isError. */
static json_t *command_render(struct route_mcp_call *c, int status, json_t *body)
{
	(void)c;
	json_t *res;
	if (status == 202) {
		const char *id = json_string_value(json_object_get(body, "id"));
		const char *state = json_string_value(json_object_get(body, "state"));
		char text[400];
		snprintf(text, sizeof text,
			 "exec %s is %s: it has not run yet. A person approves or rejects it (POST "
			 "/exec/%s/approve); call exec again with the same arguments and \"id\": \"%s\" to "
			 "wait for its result, or the cancel tool with that id to withdraw it.",
			 id ? id : "?", state ? state : "waiting", id ? id : "{id}", id ? id : "?");
		res =
		    json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text, "isError", 0);
		json_object_set(res, "structuredContent", body);
		json_decref(body);
		return res;
	}
	json_t *brief =
	    json_pack("{s:O, s:O, s:O}", "stdout", json_object_get(body, "stdout"), "stderr",
		      json_object_get(body, "stderr"), "exit_code", json_object_get(body, "exit_code"));
	/* How it ended, when not by itself: a reader of the text alone must
	 * not take a killed command's 124 or 143 for its own. */
	static const char *const flags[] = {"timed_out", "cancelled", "truncated"};
	for (size_t i = 0; brief && i < sizeof flags / sizeof flags[0]; i++)
		if (json_is_true(json_object_get(body, flags[i])))
			json_object_set_new(brief, flags[i], json_true());
	char *text = brief ? json_dumps(brief, JSON_COMPACT) : NULL;
	json_decref(brief);
	res = json_pack("{s:[{s:s}], s:b}", "content", "type", "text", "isError", 0);
	json_object_set_new(json_array_get(json_object_get(res, "content"), 0), "text",
			    json_string(text ? text : "{}"));
	free(text);
	json_object_set(res, "structuredContent", body);
	json_decref(body);
	return res;
}

/* ---- the file tools, on the pool ---- */

static int never(struct http_req *r)
{
	return http_fail(r, -EIO, "the tool gave no answer");
}

static int on_pool(struct http_req *r, int (*work)(struct http_req *r))
{
	return http_pool_then(r->env->pool, r, work, never);
}

/* The one "path" argument, resolved. */
static int path_only(struct http_req *r, char *rel, size_t relsz)
{
	struct route_mcp_call *c = r->envelope_ctx;
	const char *path = NULL;
	size_t len = 0;
	const struct http_field f[] = {{"path", F_STRING, true, &path, &len, 0, 0, NULL}};
	int rc = http_fields_read(r, c->args, f, 1);
	return rc < 0 ? rc : route_path(r, path, len, rel, relsz);
}

static int read_work(struct http_req *r)
{
	char rel[SBX_PATH_MAX];
	int rc = path_only(r, rel, sizeof rel);
	return rc < 0 ? rc : route_fs_read_at(r, rel);
}

static int stat_work(struct http_req *r)
{
	char rel[SBX_PATH_MAX];
	int rc = path_only(r, rel, sizeof rel);
	return rc < 0 ? rc : route_fs_stat_at(r, rel);
}

/* The file becomes the request's body, as PUT /fs/write's is: the
 * decoded content is never longer than the JSON it came in, which the
 * body's bound admitted. */
static int write_work(struct http_req *r)
{
	struct route_mcp_call *c = r->envelope_ctx;
	const char *path = NULL, *content = NULL, *enc = NULL;
	size_t plen = 0, clen = 0, elen = 0;
	const struct http_field f[] = {
	    {"path", F_STRING, true, &path, &plen, 0, 0, NULL},
	    {"content", F_STRING, true, &content, &clen, 0, 0, NULL},
	    {"encoding", F_STRING, false, &enc, &elen, 0, 0, NULL},
	};
	char rel[SBX_PATH_MAX];
	int rc = http_fields_read(r, c->args, f, 3);
	if (rc < 0)
		return rc;
	bool b64 = enc && strcmp(enc, "base64") == 0;
	if (enc && !b64 && strcmp(enc, "utf-8") != 0)
		return http_fail(r, -EINVAL, "encoding must be utf-8 or base64");
	if ((rc = route_path(r, path, plen, rel, sizeof rel)) < 0)
		return rc;
	unsigned char *bytes = NULL;
	size_t n = clen;
	if (b64 && route_base64_decode(content, clen, &bytes, &n) < 0)
		return http_fail(r, -EINVAL, "content is not base64");
	buf_reset(&r->body);
	rc = buf_append(&r->body, bytes ? (const char *)bytes : content, n);
	free(bytes);
	if (rc < 0)
		return http_fail(r, -E2BIG, "the file is over the buffered limit of %zu bytes", r->body.max);
	return route_fs_write_at(r, rel);
}

static int list_work(struct http_req *r)
{
	struct route_mcp_call *c = r->envelope_ctx;
	const char *path = ".", *after = NULL;
	size_t plen = 1, alen = 0;
	bool detail = false;
	int64_t limit = 1000;
	const struct http_field f[] = {
	    {"path", F_STRING, false, &path, &plen, 0, 0, NULL},
	    {"detail", F_BOOL, false, &detail, NULL, 0, 0, NULL},
	    {"after", F_STRING, false, &after, &alen, 0, 0, NULL},
	    {"limit", F_INT, false, &limit, NULL, 1, ROUTE_FS_READDIR_LIMIT_MAX, NULL},
	};
	char rel[SBX_PATH_MAX];
	int rc = http_fields_read(r, c->args, f, 4);
	if (rc == 0 && after && strlen(after) != alen)
		rc = http_fail(r, -EINVAL, "after must not contain NUL");
	if (rc == 0)
		rc = route_path(r, path, plen, rel, sizeof rel);
	return rc < 0 ? rc : route_fs_readdir_at(r, rel, after, limit, detail);
}

static int read_run(struct http_req *r)
{
	return on_pool(r, read_work);
}
static int write_run(struct http_req *r)
{
	return on_pool(r, write_work);
}
static int list_run(struct http_req *r)
{
	return on_pool(r, list_work);
}
static int stat_run(struct http_req *r)
{
	return on_pool(r, stat_work);
}

/* read_file's text is the tool's text. */
static json_t *read_render(struct route_mcp_call *c, int status, json_t *body)
{
	(void)c;
	(void)status;
	json_t *res = json_pack("{s:[{s:s, s:O}], s:b}", "content", "type", "text", "text",
				json_object_get(body, "text"), "isError", 0);
	json_decref(body);
	return res;
}

/* ---- cancel ---- */

static int cancel_run(struct http_req *r)
{
	struct route_mcp_call *c = r->envelope_ctx;
	const char *id = NULL;
	size_t len = 0;
	const struct http_field f[] = {{"id", F_STRING, true, &id, &len, 0, 0, NULL}};
	int rc = http_fields_read(r, c->args, f, 1);
	if (rc < 0)
		return rc;
	if (strlen(id) != len)
		return http_fail(r, -EINVAL, "id must not contain NUL");
	return route_exec_cancel_id(r, id);
}

/* ---- the table ---- */

#define EXEC_PROPS                                                                                           \
	"\"cwd\": {\"type\": \"string\", \"description\": \"working directory (default: the session "        \
	"directory); relative to it, or absolute under /workspace\"},"                                       \
	"\"env\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}, "                 \
	"\"description\": \"environment variables added to a clean environment\"},"                          \
	"\"timeout_s\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"wall-clock limit; at "    \
	"it the command is killed and the result says timed_out, exit_code 124 (capped by the "              \
	"tenant's policy)\"},"                                                                               \
	"\"idle_timeout_s\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"stop it when it "    \
	"prints nothing for this long\"},"                                                                   \
	"\"stdin\": {\"type\": \"string\", \"description\": \"standard input\"},"                            \
	"\"max_output_bytes\": {\"type\": \"integer\", \"minimum\": 256, \"description\": \"bound of "       \
	"each of stdout and stderr (first 40 %, last 60 %; capped by the server)\"},"                        \
	"\"id\": {\"type\": \"string\", \"pattern\": \"^[A-Za-z0-9_-]{1,64}$\", \"description\": "           \
	"\"exec id, an idempotency key: the same id and arguments again answer with that exec "              \
	"(waiting for it); used to collect a command that awaited approval\"},"                              \
	"\"network\": {\"type\": \"boolean\", \"description\": \"reach what the tenant's egress "            \
	"allowlist names (refused without one)\"}"

static const char exec_schema[] =
    "{\"type\": \"object\", \"properties\": {\"command\": {\"type\": \"string\", \"description\": \"run "
    "by /bin/sh -c (POSIX sh)\"}," EXEC_PROPS
    "}, \"required\": [\"command\"], \"additionalProperties\": false}";

static const char code_schema[] =
    "{\"type\": \"object\", \"properties\": {\"language\": {\"type\": \"string\", \"description\": "
    "\"python, node, bash or sh, as the server offers (GET /readyz lists them)\"},"
    "\"code\": {\"type\": \"string\", \"description\": \"the program text\"},"
    "\"files\": {\"type\": \"array\", \"maxItems\": 1000, \"description\": \"input files written into the "
    "session first (needs fs:write)\", \"items\": {\"type\": \"object\", \"properties\": {\"path\": "
    "{\"type\": \"string\"}, \"content\": {\"type\": \"string\"}, \"encoding\": {\"enum\": [\"utf-8\", "
    "\"base64\"]}}, \"required\": [\"path\", \"content\"], \"additionalProperties\": false}},"
    "\"args\": {\"type\": \"array\", \"maxItems\": 1000, \"items\": {\"type\": \"string\"}},"
    "" EXEC_PROPS "}, \"required\": [\"language\", \"code\"], \"additionalProperties\": false}";

/* One line of JSON Schema per property reads better than a reflow. */
/* clang-format off */
#define PATH_PROP(what) \
	"\"path\": {\"type\": \"string\", \"description\": \"" what \
	": relative to the session directory, or absolute under /workspace\"}"

static const char read_schema[] =
    "{\"type\": \"object\", \"properties\": {"
    PATH_PROP("the file (UTF-8 text, at most the server's buffered limit)")
    "}, \"required\": [\"path\"], \"additionalProperties\": false}";
static const char stat_schema[] =
    "{\"type\": \"object\", \"properties\": {"
    PATH_PROP("what to describe")
    "}, \"required\": [\"path\"], \"additionalProperties\": false}";
static const char write_schema[] =
    "{\"type\": \"object\", \"properties\": {"
    PATH_PROP("the file (its missing parents are created; replaced atomically)") ","
    "\"content\": {\"type\": \"string\"},"
    "\"encoding\": {\"enum\": [\"utf-8\", \"base64\"], \"default\": \"utf-8\"}"
    "}, \"required\": [\"path\", \"content\"], \"additionalProperties\": false}";
static const char list_schema[] =
    "{\"type\": \"object\", \"properties\": {"
    PATH_PROP("the directory (default: the session directory)") ","
    "\"detail\": {\"type\": \"boolean\", \"description\": \"entries as {name, type, size, mtime}\"},"
    "\"limit\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 10000, \"default\": 1000},"
    "\"after\": {\"type\": \"string\", \"description\": \"the next of the page before\"}"
    "}, \"additionalProperties\": false}";
static const char cancel_schema[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"id\": {\"type\": \"string\", \"description\": \"the exec id (structuredContent.id of an exec or run_code result)\"}"
    "}, \"required\": [\"id\"], \"additionalProperties\": false}";
/* clang-format on */

const struct route_mcp_tool route_mcp_tools[] = {
    {.name = "exec",
     .title = "Run a shell command",
     .description = "Run a shell command in the sandbox. The text is JSON {stdout, stderr, exit_code}; "
		    "structuredContent is the whole ShellResult (id, timed_out, cancelled, truncated, "
		    "durations). A non-zero exit, a timeout or a cancel is a result, not an error.",
     .input_schema = exec_schema,
     .destructive = true,
     .open_world = true,
     .scope = AUTH_SCOPE_EXEC,
     .run = exec_run,
     .render = command_render},
    {.name = "read_file",
     .title = "Read a text file",
     .description = "The content of a UTF-8 text file of the workspace.",
     .input_schema = read_schema,
     .read_only = true,
     .idempotent = true,
     .scope = AUTH_SCOPE_FS_READ,
     .run = read_run,
     .render = read_render},
    {.name = "write_file",
     .title = "Write a file",
     .description = "Create or replace a file (atomically; missing parent directories are created). "
		    "Answers {path, size}.",
     .input_schema = write_schema,
     .destructive = true,
     .idempotent = true,
     .scope = AUTH_SCOPE_FS_WRITE,
     .run = write_run},
    {.name = "list_dir",
     .title = "List a directory",
     .description = "The names in a directory, sorted bytewise, a page at a time: {entries, more, next}.",
     .input_schema = list_schema,
     .read_only = true,
     .idempotent = true,
     .scope = AUTH_SCOPE_FS_READ,
     .run = list_run},
    {.name = "stat",
     .title = "Describe a path",
     .description = "{path, type, size, mtime, mode, is_symlink} of a path (fields that cannot be "
		    "known are left out).",
     .input_schema = stat_schema,
     .read_only = true,
     .idempotent = true,
     .scope = AUTH_SCOPE_FS_READ,
     .run = stat_run},
    {.name = "run_code",
     .title = "Run a program",
     .description = "Run code in a language with its input files; answered as exec, with "
		    "files_changed in structuredContent.",
     .input_schema = code_schema,
     .destructive = true,
     .open_world = true,
     .scope = AUTH_SCOPE_EXEC,
     .flags = RF_WORKSPACE, /* POST /code's */
     .run = code_run,
     .render = command_render},
    {.name = "cancel",
     .title = "Cancel a command",
     .description = "Stop a running command, or withdraw one awaiting approval, by its exec id "
		    "(as its timeout would: the result says cancelled).",
     .input_schema = cancel_schema,
     .destructive = true,
     .idempotent = true,
     .scope = AUTH_SCOPE_EXEC,
     .run = cancel_run},
};
const size_t route_mcp_ntools = sizeof route_mcp_tools / sizeof route_mcp_tools[0];

const struct route_mcp_tool *route_mcp_tool_find(const char *name)
{
	for (size_t i = 0; name && i < route_mcp_ntools; i++)
		if (strcmp(route_mcp_tools[i].name, name) == 0)
			return &route_mcp_tools[i];
	return NULL;
}
