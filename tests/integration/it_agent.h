#pragma once
/* Helpers of the agent-run suites (test_code, test_background, test_pty):
 * JSON requests to any route, SHA-256 of expected bytes, and following an
 * exec's output live through GET /exec/{id}/events?output=true, decoded.
 * Include after it_exec.h. */
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>

#include "common/buf.h"

/* POST path with body req (stolen); *out (optional) the parsed answer. */
static inline long ag_post(struct it_server *s, const char *tok, const char *const *hdrs, const char *path,
			   json_t *req, json_t **out, struct it_resp *raw)
{
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	struct it_resp r;
	int rc = it_http(s, "POST", path, tok, hdrs, body, strlen(body), &r);
	free(body);
	if (out)
		*out = rc == 0 ? it_json(&r) : NULL;
	long st = rc == 0 ? r.status : -1;
	if (raw)
		*raw = r;
	else
		it_resp_free(&r);
	return st;
}

/* POST path expecting status; returns the parsed body (new reference). */
static inline json_t *ag_expect(struct it_server *s, const char *tok, const char *const *hdrs,
				const char *path, json_t *req, long status)
{
	struct it_resp raw;
	json_t *out = NULL;
	long st = ag_post(s, tok, hdrs, path, req, &out, &raw);
	if (st != status)
		fprintf(stderr, "POST %s: expected %ld, got %ld: %.*s\n", path, status, st, (int)raw.len,
			raw.body ? raw.body : "");
	it_resp_free(&raw);
	assert_int_equal(st, status);
	assert_non_null(out);
	return out;
}

static inline void ag_sha256(const void *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned int len = 0;
	EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
	for (size_t i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* One exec's events, followed on a raw connection; output decoded. */
struct ag_follow {
	int fd;
	struct buf raw; /* SSE text received */
	size_t parsed;	/* of raw, complete lines consumed */
	struct buf out; /* the data of every output event, in order */
	bool started, exited;
	char event[32]; /* the current block's event name */
};

/* Read what arrives within wait_ms and decode complete lines. */
static inline void ag_pump(struct ag_follow *f, int wait_ms)
{
	struct pollfd p = {.fd = f->fd, .events = POLLIN};
	if (poll(&p, 1, wait_ms) > 0) {
		char tmp[8192];
		ssize_t r = recv(f->fd, tmp, sizeof tmp, 0);
		if (r > 0)
			buf_append(&f->raw, tmp, (size_t)r);
	}
	for (;;) {
		char *line = f->raw.ptr ? f->raw.ptr + f->parsed : NULL;
		char *nl = line ? memchr(line, '\n', f->raw.len - f->parsed) : NULL;
		if (!nl)
			return;
		*nl = '\0';
		if (strncmp(line, "event: ", 7) == 0) {
			snprintf(f->event, sizeof f->event, "%s", line + 7);
			f->started |= strcmp(f->event, "start") == 0;
			f->exited |= strcmp(f->event, "exit") == 0;
		} else if (strncmp(line, "data: ", 6) == 0 && strcmp(f->event, "output") == 0) {
			json_t *d = json_loads(line + 6, 0, NULL);
			json_t *v = json_object_get(d, "data");
			if (json_is_string(v))
				buf_append(&f->out, json_string_value(v), json_string_length(v));
			json_decref(d);
		}
		*nl = '\n';
		f->parsed = (size_t)(nl - f->raw.ptr) + 1;
	}
}

/* Follow exec id; returns once its start event has arrived (subscribed). */
static inline void ag_follow_open(struct ag_follow *f, struct it_server *s, const char *tok, const char *id)
{
	memset(f, 0, sizeof *f);
	buf_init(&f->raw, 16u << 20);
	buf_init(&f->out, 16u << 20);
	f->fd = it_connect(s);
	assert_true(f->fd >= 0);
	char *req = xasprintf("GET /exec/%s/events?output=true HTTP/1.0\r\nHost: 127.0.0.1\r\n"
			      "Authorization: Bearer %s\r\n\r\n",
			      id, tok);
	assert_int_equal(send(f->fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	free(req);
	for (long until = it_now_ms() + 30000; !f->started && it_now_ms() < until;)
		ag_pump(f, 100);
	assert_true(f->started);
}

/* Wait until the output after byte `from` holds needle; true if it did. */
static inline bool ag_follow_wait(struct ag_follow *f, size_t from, const char *needle, long timeout_ms)
{
	for (long until = it_now_ms() + timeout_ms;;) {
		if (f->out.len > from) {
			char *copy = xmalloc(f->out.len - from + 1);
			memcpy(copy, f->out.ptr + from, f->out.len - from);
			copy[f->out.len - from] = '\0';
			bool hit = strstr(copy, needle) != NULL;
			free(copy);
			if (hit)
				return true;
		}
		if (it_now_ms() >= until || f->exited)
			return false;
		ag_pump(f, 100);
	}
}

/* Wait for the exit event. */
static inline bool ag_follow_exit(struct ag_follow *f, long timeout_ms)
{
	for (long until = it_now_ms() + timeout_ms; !f->exited && it_now_ms() < until;)
		ag_pump(f, 100);
	return f->exited;
}

static inline void ag_follow_close(struct ag_follow *f)
{
	if (f->fd >= 0)
		close(f->fd);
	buf_free(&f->raw);
	buf_free(&f->out);
	f->fd = -1;
}

/* POST /exec/{id}/stdin with text; returns the status. */
static inline long ag_stdin(struct it_server *s, const char *tok, const char *id, const char *text, bool eof,
			    struct it_resp *raw)
{
	char path[128];
	snprintf(path, sizeof path, "/exec/%s/stdin", id);
	return ag_post(s, tok, NULL, path, json_pack("{s:s, s:b}", "data", text, "eof", eof), NULL, raw);
}

/* The audit row of route (pattern) whose target is want (waited for:
 * rows are group-committed); new reference or NULL. */
static inline json_t *ag_audit_row(struct it_server *s, const char *route, const char *want)
{
	char *ta = it_token(s, "acme", "audit:read");
	char *path = xasprintf("/audit?route=%s&limit=1000", route);
	json_t *hit = NULL;
	for (long until = it_now_ms() + 30000; !hit && it_now_ms() < until;) {
		json_t *v = NULL;
		assert_int_equal(it_get_json(s, ta, path, &v), 200);
		json_t *rec;
		size_t i;
		json_array_foreach(json_object_get(v, "records"), i, rec)
			if (!hit && json_is_string(json_object_get(rec, "target")) &&
			    strcmp(jstr(rec, "target"), want) == 0)
				hit = json_incref(rec);
		json_decref(v);
		if (!hit)
			usleep(50000);
	}
	free(path);
	free(ta);
	return hit;
}
