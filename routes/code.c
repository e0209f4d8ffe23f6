/* POST /code and the agent-run fields of POST /exec (see code.h).
 *
 * POST /code writes its input files and the snippet into the session
 * (through the same confined, atomic writes as PUT /fs/write), then hands
 * the request to POST /exec as the command "exec <interpreter> <snippet>
 * <args...>" with track_changes, so a snippet gets every exec field
 * (timeout, env, stdin, background, stream, id, ...) with their meaning.
 * The snippet is stored as .sandboxd-code-<sha256 prefix>.<ext> in the
 * session directory: named by its content, so concurrent runs of one
 * session never overwrite each other's, and written before the first
 * snapshot, so it is not listed in files_changed. The inputs, the snippet
 * and that snapshot are file work (a thousand files written and fsync'ed):
 * they run on the file pool, fairly between tenants like every file route,
 * and only POST /exec's start comes back to the event thread. */
#include "routes/code.h"
#include "routes/exec_extras.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/xmalloc.h"
#include "http/errors.h"
#include "http/pool.h"
#include "routes/app.h"
#include "routes/paths.h"
#include "routes/provider.h"
#include "routes/exec_registry.h"
#include "routes/fs.h"
#include "routes/routes.h"
#include "sandbox/changes.h"
#include "sandbox/fsops.h"
#include "sandbox/runner.h"
#include "sandbox/workspace.h"
#include "store/store.h"

#define CODE_FILES_MAX 1000
#define CODE_ARGS_MAX 1000

struct language {
	const char *name, *program, *ext;
};

static const struct language languages[] = {
    {"python", "python3", "py"},
    {"node", "node", "js"},
    {"bash", "bash", "sh"},
    {"sh", "sh", "sh"},
};
#define N_LANGUAGES (sizeof languages / sizeof languages[0])

/* Configured: name is an entry of the comma-separated list. */
static bool configured(const struct app *a, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = a->cfg->code_languages; p && *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		while (len && *p == ' ')
			p++, len--;
		while (len && p[len - 1] == ' ')
			len--;
		if (len == n && memcmp(p, name, n) == 0)
			return true;
		p = end ? end + 1 : p + len;
	}
	return false;
}

/* Installed where a command looks for it: the sandbox sees the host's
 * /usr read-only (and /bin through it), with PATH /usr/local/bin:/usr/bin:/bin. */
static bool installed(const char *program)
{
	static const char *const dirs[] = {"/usr/local/bin", "/usr/bin", "/bin"};
	for (size_t i = 0; i < 3; i++) {
		char path[64];
		snprintf(path, sizeof path, "%s/%s", dirs[i], program);
		if (access(path, X_OK) == 0)
			return true;
	}
	return false;
}

static bool available(const struct app *a, const struct language *l)
{
	return configured(a, l->name) && installed(l->program);
}

json_t *route_code_languages(const struct app *a)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < N_LANGUAGES; i++)
		if (available(a, &languages[i]))
			json_array_append_new(arr, json_string(languages[i].name));
	return arr;
}

/* ---- POST /code ---- */

/* One input file {path, content, encoding}, written into the session. */
static int write_input(struct http_req *r, size_t i, json_t *f)
{
	json_t *path = json_object_get(f, "path"), *content = json_object_get(f, "content");
	json_t *enc = json_object_get(f, "encoding");
	const char *e = enc ? json_string_value(enc) : "utf-8";
	if (!json_is_object(f) || !json_is_string(path) || !json_is_string(content) || !e ||
	    json_object_size(f) != 2u + (enc != NULL))
		return http_fail(r, -EINVAL, "files[%zu] must be {path, content, encoding} (strings)", i);
	if (strcmp(e, "utf-8") != 0 && strcmp(e, "base64") != 0)
		return http_fail(r, -EINVAL, "files[%zu].encoding must be utf-8 or base64", i);
	char rel[SBX_PATH_MAX];
	int rc = route_path(r, json_string_value(path), json_string_length(path), rel, sizeof rel);
	if (rc < 0)
		return rc;
	unsigned char *bytes = NULL;
	size_t len = json_string_length(content);
	if (e[0] == 'b' && route_base64_decode(json_string_value(content), len, &bytes, &len) < 0)
		return http_fail(r, -EINVAL, "files[%zu].content is not base64", i);
	rc = sbx_fs_write(r->tenant->ws, rel, bytes ? (const void *)bytes : json_string_value(content), len,
			  true);
	free(bytes);
	return rc < 0 ? route_fail_path(r, rc, "write", rel) : 0;
}

/* The snippet, as .sandboxd-code-<sha256 prefix>.<ext>; its wire path in out. */
static int write_snippet(struct http_req *r, const struct language *l, json_t *code, char *out, size_t outsz)
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	char rel[SBX_PATH_MAX];
	EVP_Digest(json_string_value(code), json_string_length(code), md, &mdlen, EVP_sha256(), NULL);
	int n = snprintf(rel, sizeof rel, "%s/.sandboxd-code-", r->session_rel);
	for (size_t i = 0; i < 8; i++)
		n += snprintf(rel + n, sizeof rel - (size_t)n, "%02x", md[i]);
	snprintf(rel + n, sizeof rel - (size_t)n, ".%s", l->ext);
	int rc = sbx_fs_write(r->tenant->ws, rel, json_string_value(code), json_string_length(code), true);
	if (rc < 0)
		return route_fail_path(r, rc, "write", rel);
	sbx_path_wire(rel, out, outsz);
	return 0;
}

/* 'text' for /bin/sh, any bytes but NUL. */
static void shell_quote(struct buf *b, const char *s)
{
	buf_append(b, "'", 1);
	for (const char *p = s; *p; p++)
		buf_append(b, *p == '\'' ? "'\\''" : p, *p == '\'' ? 4 : 1);
	buf_append(b, "'", 1);
}

static int build_command(struct http_req *r, const struct language *l, const char *snippet, json_t *args)
{
	struct buf b;
	buf_init(&b, (size_t)r->app->cfg->max_buffered_bytes * 4 + 4096);
	buf_appendf(&b, "exec %s ", l->program);
	shell_quote(&b, snippet);
	size_t i;
	json_t *v;
	json_array_foreach(args, i, v) {
		if (!json_is_string(v) || memchr(json_string_value(v), '\0', json_string_length(v))) {
			buf_free(&b);
			return http_fail(r, -EINVAL, "args[%zu] must be a string without NUL bytes", i);
		}
		buf_append(&b, " ", 1);
		shell_quote(&b, json_string_value(v));
	}
	size_t n = 0;
	char *cmd = buf_steal(&b, &n);
	json_object_set_new(r->json, "command", json_stringn(cmd, n));
	free(cmd);
	return 0;
}

static const struct language *find_language(const char *name)
{
	for (size_t i = 0; name && i < N_LANGUAGES; i++)
		if (strcmp(languages[i].name, name) == 0)
			return &languages[i];
	return NULL;
}

/* The /code fields out of the body (the rest are POST /exec's). */
static int take_fields(struct http_req *r, const struct language **l, json_t **code, json_t **files,
		       json_t **args)
{
	json_t *lang = json_object_get(r->json, "language");
	*code = json_incref(json_object_get(r->json, "code"));
	*files = json_incref(json_object_get(r->json, "files"));
	*args = json_incref(json_object_get(r->json, "args"));
	json_object_del(r->json, "code");
	json_object_del(r->json, "files");
	json_object_del(r->json, "args");
	if (json_object_get(r->json, "command") || json_object_get(r->json, "track_changes"))
		return http_fail(r, -EINVAL,
				 "POST /code takes code (and always tracks changes): "
				 "command and track_changes are POST /exec's");
	if (!json_is_string(lang) || !json_is_string(*code))
		return http_fail(r, -EINVAL, "language and code are required strings");
	if (memchr(json_string_value(*code), '\0', json_string_length(*code)))
		return http_fail(r, -EINVAL, "code must not contain NUL bytes");
	if ((*files && (!json_is_array(*files) || json_array_size(*files) > CODE_FILES_MAX)) ||
	    (*args && (!json_is_array(*args) || json_array_size(*args) > CODE_ARGS_MAX)))
		return http_fail(r, -EINVAL, "files and args must be arrays of at most %d entries",
				 CODE_FILES_MAX);
	*l = find_language(json_string_value(lang));
	if (!*l || !available(r->app, *l)) {
		json_t *list = route_code_languages(r->app);
		char *avail = json_dumps(list, JSON_COMPACT);
		json_decref(list);
		int rc = http_fail(r, -SBX_E_LANGUAGE, "language %s is not available here; available: %s",
				   json_string_value(lang), avail);
		free(avail);
		return rc;
	}
	json_object_del(r->json, "language");
	return 0;
}

/* An id already used: the first request wrote the inputs; this one is
 * answered from that exec (POST /exec's idempotency) and writes nothing. */
static bool id_used(struct http_req *r)
{
	json_t *id = json_object_get(r->json, "id");
	struct store_exec ex;
	if (!json_is_string(id) ||
	    store_exec_get(r->app->store, r->tenant->name, json_string_value(id), &ex) < 0)
		return false;
	store_exec_clear(&ex);
	return true;
}

/* Pool: the fields, the inputs, the snippet, the command, the snapshot. */
static int code_work(struct http_req *r)
{
	const struct language *l = NULL;
	json_t *code = NULL, *files = NULL, *args = NULL;
	char snippet[SBX_PATH_MAX + 16];
	int rc = take_fields(r, &l, &code, &files, &args);
	/* Input files are writes: the scope that allows writes, as PUT
	 * /fs/write asks (exec alone does not grant them). */
	if (rc == 0 && json_array_size(files) > 0 && !(r->claims.scopes & AUTH_SCOPE_FS_WRITE))
		rc = http_fail(r, -SBX_E_SCOPE, "input files need the scope fs:write");
	if (rc == 0)
		rc = route_session(r);
	bool inputs = rc == 0 && !id_used(r);
	for (size_t i = 0; inputs && rc == 0 && i < json_array_size(files); i++)
		rc = write_input(r, i, json_array_get(files, i));
	if (rc == 0)
		rc = write_snippet(r, l, code, snippet, sizeof snippet);
	if (rc == 0)
		rc = build_command(r, l, snippet, args);
	json_decref(code);
	json_decref(files);
	json_decref(args);
	if (rc < 0)
		return rc;
	json_object_set_new(r->json, "track_changes", json_true());
	return route_exec_snapshot_work(r);
}

int route_code_post(struct http_req *r)
{
	return http_pool_then(r->env->pool, r, code_work, route_exec_post);
}
