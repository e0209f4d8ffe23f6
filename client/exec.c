/* Exec (wire.md "Exec"): POST /exec buffered or as an event stream,
 * cancel, an exec's record and the list. Every exec carries an id, the
 * caller's or one made here, so that the server's idempotency makes a
 * retried POST /exec (after 429, 503 or a refused connection) answer with
 * the one command rather than run a second. */
#include "client/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/xmalloc.h"

/* An exec waits this long past its own timeout before the call gives up
 * (when the call sets no deadline): the kill grace and the answer. */
#define EXEC_MARGIN_MS 60000L
#define EXEC_TIMEOUT_MAX_S 3600L /* the server's default exec-timeout-max-s */

static void make_id(char out[40])
{
	unsigned char r[16];
	size_t got = 0;
	while (got < sizeof r) {
		ssize_t n = getrandom(r + got, sizeof r - got, 0);
		if (n > 0)
			got += (size_t)n;
		else if (errno != EINTR)
			abort(); /* getrandom on Linux >= 3.17 does not fail otherwise */
	}
	out[0] = 'c';
	for (size_t i = 0; i < sizeof r; i++)
		snprintf(out + 1 + 2 * i, 3, "%02x", r[i]);
}

static json_t *exec_body(const struct sbxc_exec_req *q, const char *id, bool stream, struct sbxc_err *err)
{
	if (!q || !q->command)
		return NULL;
	json_t *o = json_pack("{s:s, s:s, s:b}", "command", q->command, "id", id, "stream", stream);
	if (!o)
		return NULL; /* not UTF-8 */
	if (q->cwd)
		json_object_set_new(o, "cwd", json_string(q->cwd));
	if (q->nenv) {
		json_t *env = json_object();
		for (size_t i = 0; i < q->nenv; i++)
			json_object_set_new(env, q->env[i].name,
					    json_string(q->env[i].value ? q->env[i].value : ""));
		json_object_set_new(o, "env", env);
	}
	if (q->timeout_s > 0)
		json_object_set_new(o, "timeout_s", json_integer(q->timeout_s));
	if (q->idle_timeout_s > 0)
		json_object_set_new(o, "idle_timeout_s", json_integer(q->idle_timeout_s));
	if (q->max_output_bytes > 0)
		json_object_set_new(o, "max_output_bytes", json_integer(q->max_output_bytes));
	if (q->network)
		json_object_set_new(o, "network", json_true());
	if (q->stdin_data) {
		json_t *in = json_stringn(q->stdin_data, q->stdin_len);
		if (!in) {
			json_decref(o);
			sbxc__fail(err, -EINVAL, "stdin must be UTF-8 text");
			return NULL;
		}
		json_object_set_new(o, "stdin", in);
	}
	return o;
}

/* What a streamed exec's events do. */
struct exec_stream {
	sbxc_output_fn on_output;
	sbxc_started_fn on_started;
	void *arg;
	struct sbxc_result *res;
	bool done, failed, started;
	char code[40], failure[512], hint[256];
};

static int on_exec_event(void *arg, const struct sbxc_event *ev)
{
	struct exec_stream *x = arg;
	json_t *o = json_loadb(ev->data, ev->data_len, 0, NULL);
	int stop = 0;
	if (strcmp(ev->name, "start") == 0 && !x->started) {
		x->started = true;
		if (x->on_started)
			x->on_started(x->arg, json_string_value(json_object_get(o, "id")));
	} else if (strcmp(ev->name, "output") == 0) {
		const char *s = json_string_value(json_object_get(o, "stream"));
		json_t *d = json_object_get(o, "data");
		if (json_is_string(d))
			stop = x->on_output(x->arg, s && strcmp(s, "stderr") == 0 ? 2 : 1,
					    json_string_value(d), json_string_length(d));
	} else if (strcmp(ev->name, "exit") == 0) {
		sbxc__result_from(o, x->res);
		x->done = true;
	} else if (strcmp(ev->name, "exec_error") == 0) {
		/* a wire error: the command never started */
		json_t *e = json_object_get(o, "error");
		sbxc__jcopy(e, "code", x->code, sizeof x->code);
		sbxc__jcopy(e, "message", x->failure, sizeof x->failure);
		sbxc__jcopy(e, "retry_hint", x->hint, sizeof x->hint);
		x->failed = x->done = true;
	}
	json_decref(o);
	return stop;
}

static int exec_streamed(struct sbxc *h, const struct sbxc_call *c, const struct creq *post,
			 struct exec_stream *x, struct sbxc_err *err)
{
	struct sse s;
	sse_init(&s, on_exec_event, x, 64u << 20);
	struct creq rq = *post;
	rq.sink = sse_feed;
	rq.sink_arg = &s;
	rq.open_ended = true;
	rq.idle_ms = 45000; /* heartbeats come every few seconds */
	struct cresp r;
	int rc = sbxc__do(h, c, &rq, &r, err);
	cresp_free(&r);
	sse_free(&s);
	if (rc == 0 && x->failed) {
		rc = x->code[0] ? sbxc_errno_of_code(x->code) : -EIO;
		if (err) {
			snprintf(err->code, sizeof err->code, "%s", x->code);
			snprintf(err->retry_hint, sizeof err->retry_hint, "%s", x->hint);
		}
		sbxc__fail(err, rc, "%s", x->failure[0] ? x->failure : "the command did not start");
	} else if (rc == 0 && !x->done)
		rc = sbxc__fail(err, -EIO, "the event stream ended before the exit event");
	return rc;
}

/* A streamed exec whose command could not start (an exec_error event
 * with a 503 code: the server forgot the id) is tried again like a 503
 * answer, with the same id, within the call's deadline. */
static int exec_streamed_retried(struct sbxc *h, const struct sbxc_call *c, const struct creq *rq,
				 sbxc_output_fn on_output, sbxc_started_fn on_started, void *arg,
				 struct sbxc_result *res, struct sbxc_err *err)
{
	int64_t deadline = sbxc__deadline(h, c, true);
	int retries = c->max_retries ? (c->max_retries < 0 ? 0 : c->max_retries) : sbxc__max_retries(h);
	for (int n = 0;; n++) {
		struct exec_stream x = {
		    .on_output = on_output, .on_started = on_started, .arg = arg, .res = res};
		int rc = exec_streamed(h, c, rq, &x, err);
		long wait = 1000L << (n < 5 ? n : 5);
		if (rc != -EHOSTDOWN || !x.failed || n >= retries || sbxc__now_ms() + wait >= deadline)
			return rc;
		if (sbxc__sleep(c, wait) < 0)
			return sbxc__fail(err, -ECANCELED, "cancelled");
	}
}

int sbxc_exec(struct sbxc *h, const struct sbxc_call *c, const struct sbxc_exec_req *req,
	      sbxc_output_fn on_output, sbxc_started_fn on_started, void *arg, struct sbxc_result *res,
	      struct sbxc_err *err)
{
	char idbuf[40];
	const char *id = req && req->id ? req->id : (make_id(idbuf), idbuf);
	json_t *body = exec_body(req, id, on_output != NULL, err);
	if (!body)
		return sbxc__fail(err, -EINVAL, "%s",
				  req && req->command ? "stdin or the command is not UTF-8" : "no command");
	char *text = sbxc__dump(body);
	json_decref(body);
	struct sbxc_call call = c ? *c : (struct sbxc_call){0};
	if (!call.timeout_ms)
		call.timeout_ms =
		    (req->timeout_s > 0 ? req->timeout_s : EXEC_TIMEOUT_MAX_S) * 1000L + EXEC_MARGIN_MS;
	/* Not idempotent at the transport level: a connection broken while the
	 * command runs cancels it on the server. */
	struct creq rq = {.method = "POST",
			  .path = "/exec",
			  .body = text,
			  .body_len = strlen(text),
			  .content_type = "application/json",
			  .retry = true};
	*res = (struct sbxc_result){0};
	int rc;
	if (on_output) {
		rc = exec_streamed_retried(h, &call, &rq, on_output, on_started, arg, res, err);
	} else {
		if (on_started)
			on_started(arg, id);
		json_t *o = NULL;
		rc = sbxc__json(h, &call, &rq, &o, err);
		if (rc == 0)
			sbxc__result_from(o, res);
		json_decref(o);
	}
	free(text);
	return rc;
}

int sbxc_exec_cancel(struct sbxc *h, const struct sbxc_call *c, const char *id, struct sbxc_err *err)
{
	if (!sbxc__id_ok(id))
		return sbxc__fail(err, -EINVAL, "an exec id matches [A-Za-z0-9_-]{1,64}");
	char *path = xasprintf("/exec/%s/cancel", id);
	/* Cancelling twice is cancelling once: safe to repeat. */
	struct creq rq = {.method = "POST", .path = path, .idempotent = true, .retry = true};
	struct cresp r;
	int rc = sbxc__do(h, c, &rq, &r, err);
	cresp_free(&r);
	free(path);
	return rc;
}

static void info_from(json_t *o, struct sbxc_exec_info *x)
{
	*x = (struct sbxc_exec_info){0};
	sbxc__jcopy(o, "id", x->id, sizeof x->id);
	sbxc__jcopy(o, "state", x->state, sizeof x->state);
	x->command = sbxc__jstrdup(o, "command");
	x->session = sbxc__jstrdup(o, "session");
	x->cwd = sbxc__jstrdup(o, "cwd");
	sbxc__jcopy(o, "started_at", x->started_at, sizeof x->started_at);
	json_t *res = json_object_get(o, "result");
	x->has_result = json_is_object(res);
	if (x->has_result)
		sbxc__result_from(res, &x->result);
}

int sbxc_exec_get(struct sbxc *h, const struct sbxc_call *c, const char *id, struct sbxc_exec_info *out,
		  struct sbxc_err *err)
{
	if (!sbxc__id_ok(id))
		return sbxc__fail(err, -EINVAL, "an exec id matches [A-Za-z0-9_-]{1,64}");
	char *path = xasprintf("/exec/%s", id);
	json_t *o = NULL;
	int rc = sbxc__get_json(h, c, path, NULL, &o, err);
	free(path);
	if (rc == 0)
		info_from(o, out);
	json_decref(o);
	return rc;
}

void sbxc_exec_info_clear(struct sbxc_exec_info *x)
{
	if (!x)
		return;
	free(x->command);
	free(x->session);
	free(x->cwd);
	sbxc_result_clear(&x->result);
	*x = (struct sbxc_exec_info){0};
}

int sbxc_exec_list(struct sbxc *h, const struct sbxc_call *c, const char *state, const char *session,
		   int limit, struct sbxc_exec_info **out, size_t *n, struct sbxc_err *err)
{
	struct buf q;
	buf_init(&q, 8192);
	sbxc__q(&q, "state", state);
	sbxc__q(&q, "session", session);
	if (limit > 0)
		sbxc__qi(&q, "limit", limit);
	json_t *o = NULL;
	int rc = sbxc__get_json(h, c, "/execs", &q, &o, err);
	buf_free(&q);
	if (rc < 0)
		return rc;
	json_t *arr = json_object_get(o, "execs");
	size_t k = json_array_size(arr);
	struct sbxc_exec_info *v = xcalloc(k ? k : 1, sizeof *v);
	for (size_t i = 0; i < k; i++)
		info_from(json_array_get(arr, i), &v[i]);
	json_decref(o);
	*out = v;
	*n = k;
	return 0;
}

void sbxc_exec_infos_free(struct sbxc_exec_info *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		sbxc_exec_info_clear(&v[i]);
	free(v);
}
