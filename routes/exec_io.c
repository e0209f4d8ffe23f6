/* POST /exec/{id}/stdin and POST /exec/{id}/resize: input to a running
 * exec started with stdin_pipe (or tty), and its terminal's size.
 *
 * Back-pressure: each exec queues at most stdin-buffer-bytes (64 KiB by
 * default) besides its pipe (or terminal) buffer. A write that does not
 * fit is refused whole, at once, with 429 too_many_requests and
 * Retry-After: 1 (nothing of it was taken: send the same body again): an
 * HTTP thread never waits on a command that does not read (security.md,
 * item 7), and the server's memory per exec stays bounded whatever a
 * client sends. The audit record names the exec and the size written,
 * never the bytes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "http/fields.h"
#include "routes/app.h"
#include "routes/code.h"
#include "routes/exec_extras.h"
#include "routes/exec.h"
#include "routes/exec_registry.h"
#include "routes/routes.h"
#include "sandbox/runner.h"
#include "store/store.h"

/* The running exec of the request's {id}, or an answer: 404 (unknown) or
 * 409 (finished). */
static int running_handle(struct http_req *r, uint64_t *handle)
{
	const char *id = r->params[0];
	*handle = route_execs_handle(r->app->execs, r->tenant->name, id);
	if (*handle)
		return 0;
	return route_execs_answer_state(r, id, "is not running");
}

static int stdin_refused(struct http_req *r, int rc, size_t n, size_t pending)
{
	const char *id = r->params[0];
	switch (rc) {
	case -ENOTCONN:
		return http_fail(r, -SBX_E_CONFLICT, "exec %s was started without stdin_pipe", id);
	case -EPIPE:
		return http_fail(r, -SBX_E_CONFLICT,
				 "the stdin of exec %s is closed (eof sent, or closed by it)", id);
	case -EAGAIN:
		r->retry_after_s = 1;
		return http_fail(r, -SBX_E_TOO_MANY,
				 "exec %s is not reading its stdin: %zu bytes wait; nothing of these %zu was "
				 "written, send them again later",
				 id, pending, n);
	case -EFBIG:
		return http_fail(r, -EFBIG, "at most %lld bytes per stdin write",
				 (long long)r->app->cfg->stdin_buffer_bytes);
	default:
		return http_fail(r, -SBX_E_CONFLICT, "exec %s is not running", id);
	}
}

int route_exec_stdin(struct http_req *r)
{
	const char *data = "", *enc = "utf-8";
	size_t data_len = 0, enc_len = 5, pending = 0;
	bool eof = false;
	const struct http_field f[] = {
	    {"data", F_STRING, false, &data, &data_len, 0, 0, NULL},
	    {"encoding", F_STRING, false, &enc, &enc_len, 0, 0, NULL},
	    {"eof", F_BOOL, false, &eof, NULL, 0, 0, NULL},
	};
	uint64_t handle = 0;
	int rc = http_fields_read(r, r->json, f, sizeof f / sizeof f[0]);
	if (rc < 0)
		return rc;
	if (strcmp(enc, "utf-8") != 0 && strcmp(enc, "base64") != 0)
		return http_fail(r, -EINVAL, "encoding must be utf-8 or base64");
	unsigned char *bytes = NULL;
	if (enc[0] == 'b' && route_base64_decode(data, data_len, &bytes, &data_len) < 0)
		return http_fail(r, -EINVAL, "data is not base64");
	char target[128];
	snprintf(target, sizeof target, "%s stdin %zu bytes%s", r->params[0], data_len, eof ? " eof" : "");
	http_set_target(r, target);
	if ((rc = running_handle(r, &handle)) == 0) {
		rc = sbx_runner_stdin(r->app->runner, handle, bytes ? (const void *)bytes : data, data_len,
				      eof, &pending);
		rc = rc < 0 ? stdin_refused(r, rc, data_len, pending) : 0;
	}
	free(bytes);
	if (rc < 0)
		return rc;
	return http_reply_json(r, 200,
			       json_pack("{s:s, s:I, s:I, s:b}", "id", r->params[0], "accepted",
					 (json_int_t)data_len, "pending", (json_int_t)pending, "eof", eof));
}

int route_exec_resize(struct http_req *r)
{
	int64_t cols = 0, rows = 0;
	const struct http_field f[] = {
	    {"cols", F_INT, true, &cols, NULL, 1, 1000, NULL},
	    {"rows", F_INT, true, &rows, NULL, 1, 1000, NULL},
	};
	uint64_t handle = 0;
	int rc = http_fields_read(r, r->json, f, sizeof f / sizeof f[0]);
	if (rc < 0)
		return rc;
	char target[128];
	snprintf(target, sizeof target, "%s resize %lldx%lld", r->params[0], (long long)cols,
		 (long long)rows);
	http_set_target(r, target);
	if ((rc = running_handle(r, &handle)) < 0)
		return rc;
	rc = sbx_runner_resize(r->app->runner, handle, (unsigned short)cols, (unsigned short)rows);
	if (rc == -ENOTTY)
		return http_fail(r, -SBX_E_CONFLICT, "exec %s has no terminal (start it with tty: true)",
				 r->params[0]);
	if (rc < 0)
		return http_fail(r, -SBX_E_CONFLICT, "exec %s is not running", r->params[0]);
	return http_reply_json(r, 200,
			       json_pack("{s:s, s:I, s:I}", "id", r->params[0], "cols", (json_int_t)cols,
					 "rows", (json_int_t)rows));
}
