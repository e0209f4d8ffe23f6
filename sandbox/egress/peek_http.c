/* An HTTP/1.x request's name, read by libhttp-parser (sandbox/egress/peek.h):
 * the first request's head for the peek, and every request of a plain
 * HTTP connection for the stream check. Both stop the parser at the end
 * of each head (http_parser_pause) and judge the head there; the parser
 * itself skips bodies (Content-Length, chunked), so nothing in a body is
 * ever read as a header. */
#include <errno.h>
#include <http_parser.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <stdlib.h>

#include "common/xmalloc.h"
#include "sandbox/egress/peek_int.h"

/* What is kept of a head: the request target up to URL_KEEP bytes (an
 * absolute-form's scheme and authority fit), Host and Upgrade values up
 * to what a valid one can be. Longer ones are counted, not kept. */
#define URL_KEEP 1024
#define FIELD_KEEP 16
#define HOST_KEEP (SBX_EGRESS_NAME_MAX + 8)
#define UPGRADE_KEEP 32

static const char h2_preface[] = "PRI * HTTP/2.0\r\n";

/* One request's head, reset at each message's start. */
struct req {
	char url[URL_KEEP];
	size_t url_len;
	char field[FIELD_KEEP];
	size_t field_len;
	char host[HOST_KEEP];
	size_t host_len;
	char upgrade[UPGRADE_KEEP];
	size_t upgrade_len;
	enum { V_OTHER, V_HOST, V_UPGRADE } value; /* whose value is being read */
	bool in_value;
	unsigned hosts;
	bool has_upgrade;
	bool started, complete;
};

struct head {
	http_parser p;
	struct req r;
};

struct sbx_egress_http {
	struct head h;
	char name[SBX_EGRESS_NAME_MAX + 1];
	int rc; /* sticky: the first refusal */
	char why[SBX_EGRESS_WHY_MAX];
	bool upgraded; /* websocket: nothing more is parsed */
};

static pthread_once_t http_once = PTHREAD_ONCE_INIT;

/* The parser's own bound on a head (80 KiB by default), process-wide: ours. */
static void http_init(void)
{
	http_parser_set_max_header_size(SBX_EGRESS_PEEK_MAX);
}

static void keep(char *dst, size_t cap, size_t *len, const char *p, size_t n)
{
	if (*len < cap)
		memcpy(dst + *len, p, n < cap - *len ? n : cap - *len);
	*len += n;
}

static int on_message_begin(http_parser *p)
{
	struct head *h = p->data;

	memset(&h->r, 0, sizeof h->r);
	h->r.started = true;
	return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
	struct req *r = &((struct head *)p->data)->r;

	keep(r->url, sizeof r->url, &r->url_len, at, n);
	return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
	struct req *r = &((struct head *)p->data)->r;

	if (r->in_value) {
		r->in_value = false;
		r->field_len = 0;
	}
	keep(r->field, sizeof r->field, &r->field_len, at, n);
	return 0;
}

static bool field_is(const struct req *r, const char *name)
{
	return r->field_len == strlen(name) && strncasecmp(r->field, name, r->field_len) == 0;
}

/* The field's name is whole once its value begins. */
static void value_begin(struct req *r)
{
	r->in_value = true;
	r->value = V_OTHER;
	if (field_is(r, "host")) {
		r->value = V_HOST;
		r->hosts++;
		r->host_len = 0;
	} else if (field_is(r, "upgrade")) {
		r->value = V_UPGRADE;
		r->has_upgrade = true;
		r->upgrade_len = 0;
	}
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
	struct req *r = &((struct head *)p->data)->r;

	if (!r->in_value)
		value_begin(r);
	if (r->value == V_HOST)
		keep(r->host, sizeof r->host, &r->host_len, at, n);
	else if (r->value == V_UPGRADE)
		keep(r->upgrade, sizeof r->upgrade, &r->upgrade_len, at, n);
	return 0;
}

static int on_headers_complete(http_parser *p)
{
	struct head *h = p->data;

	h->r.complete = true;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
};

static void head_init(struct head *h)
{
	pthread_once(&http_once, http_init);
	memset(h, 0, sizeof *h);
	http_parser_init(&h->p, HTTP_REQUEST);
	h->p.data = h;
}

static void trim(const char **s, size_t *n)
{
	while (*n && (**s == ' ' || **s == '\t')) {
		(*s)++;
		(*n)--;
	}
	while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
		(*n)--;
}

/* Nothing, or ":" and digits. */
static bool port_ok(const char *s, size_t n)
{
	if (n == 0)
		return true;
	if (s[0] != ':')
		return false;
	for (size_t i = 1; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* Host = uri-host [ ":" port ] (RFC 9110 7.2); empty: no name. */
static enum peek_name host_check(const char *s, size_t n, char out[SBX_EGRESS_NAME_MAX + 1])
{
	const char *end;
	enum peek_name k;

	out[0] = '\0';
	trim(&s, &n);
	if (n == 0)
		return PEEK_NAME_NONE;
	if (s[0] == '[') {
		end = memchr(s, ']', n);
		if (!end || !memchr(s, ':', (size_t)(end - s)))
			return PEEK_NAME_BAD;
		k = peek_name_check(s + 1, (size_t)(end - s - 1), out);
		end++;
	} else {
		end = memchr(s, ':', n);
		end = end ? end : s + n;
		k = peek_name_check(s, (size_t)(end - s), out);
	}
	if (k == PEEK_NAME_BAD || !port_ok(end, (size_t)(s + n - end))) {
		out[0] = '\0';
		return PEEK_NAME_BAD;
	}
	return k;
}

static bool absolute_form(const struct req *r)
{
	return r->url_len && r->url[0] != '/' && r->url[0] != '*';
}

/* The host of an absolute-form target (RFC 9112 3.2.2), which a server
 * takes instead of Host: http or https, an authority without userinfo
 * (RFC 9110 4.2.4), wholly within what was kept. */
static enum peek_name target_check(const struct req *r, char out[SBX_EGRESS_NAME_MAX + 1])
{
	struct http_parser_url u;
	size_t kept = r->url_len < URL_KEEP ? r->url_len : URL_KEEP, end, scheme;
	const char *auth = memmem(r->url, kept, "://", 3);

	out[0] = '\0';
	if (!auth)
		return PEEK_NAME_BAD;
	for (end = (size_t)(auth - r->url) + 3; end < kept && !memchr("/?#", r->url[end], 3); end++)
		;
	if (end == kept && r->url_len > kept)
		return PEEK_NAME_BAD;
	http_parser_url_init(&u);
	if (http_parser_parse_url(r->url, end, 0, &u) != 0 || !(u.field_set & (1 << UF_HOST)) ||
	    (u.field_set & (1 << UF_USERINFO)))
		return PEEK_NAME_BAD;
	scheme = u.field_data[UF_SCHEMA].len;
	if (!(scheme == 4 && strncasecmp(r->url, "http", 4) == 0) &&
	    !(scheme == 5 && strncasecmp(r->url, "https", 5) == 0))
		return PEEK_NAME_BAD;
	return peek_name_check(r->url + u.field_data[UF_HOST].off, u.field_data[UF_HOST].len, out);
}

static int refused(int rc, char *why, size_t whysz, const char *msg)
{
	snprintf(why, whysz, "%s", msg);
	return rc;
}

/* The name a request head asks for: 0 and name ("" for none), or -EPERM /
 * -EPROTO and why. */
static int request_name(const struct head *h, char name[SBX_EGRESS_NAME_MAX + 1], char *why, size_t whysz)
{
	const struct req *r = &h->r;
	char host[SBX_EGRESS_NAME_MAX + 1] = "", target[SBX_EGRESS_NAME_MAX + 1];
	enum peek_name k = PEEK_NAME_NONE;

	name[0] = '\0';
	if (h->p.method == HTTP_CONNECT)
		return refused(-EPERM, why, whysz, "CONNECT refused");
	if (h->p.http_major != 1)
		return refused(-EPROTO, why, whysz, "not HTTP/1.x");
	if (r->hosts > 1)
		return refused(-EPERM, why, whysz, "two Host headers");
	if (r->hosts == 1)
		k = r->host_len > sizeof r->host ? PEEK_NAME_BAD : host_check(r->host, r->host_len, host);
	if (k == PEEK_NAME_BAD)
		return refused(-EPERM, why, whysz, "Host is not a name");
	if (absolute_form(r)) {
		k = target_check(r, target);
		if (k == PEEK_NAME_BAD)
			return refused(-EPERM, why, whysz, "request target is not a URL with a name");
		if (r->hosts == 1 && strcmp(host, target) != 0)
			return refused(-EPERM, why, whysz, "Host disagrees with the request target");
		memcpy(host, target, sizeof host);
	}
	if (k == PEEK_NAME_OK)
		memcpy(name, host, sizeof host);
	return 0;
}

void peek_http(const uint8_t *buf, size_t len, struct sbx_egress_peek *out)
{
	const size_t pre = strlen("PRI * HTTP/2.0");
	struct head h;
	enum http_errno e;

	if (memcmp(buf, h2_preface, len < pre ? len : pre) == 0) {
		if (len >= pre)
			peek_refuse(out, "HTTP/2 without TLS refused");
		return;
	}
	head_init(&h);
	http_parser_execute(&h.p, &settings, (const char *)buf, len);
	e = HTTP_PARSER_ERRNO(&h.p);
	if (h.r.complete) {
		if (request_name(&h, out->name, out->why, sizeof out->why) != 0)
			out->proto = SBX_EGRESS_REFUSE;
		else
			out->proto = SBX_EGRESS_HTTP;
	} else if (e == HPE_INVALID_METHOD || (e == HPE_OK && !h.r.started && len >= SBX_EGRESS_PEEK_MAX)) {
		out->proto = SBX_EGRESS_OTHER;
	} else if (e != HPE_OK) {
		peek_refuse(out, "malformed HTTP request");
	} else if (len >= SBX_EGRESS_PEEK_MAX) {
		peek_refuse(out, "request head too long");
	}
}

struct sbx_egress_http *sbx_egress_http_new(const char *name)
{
	struct sbx_egress_http *h = xcalloc(1, sizeof *h);

	head_init(&h->h);
	snprintf(h->name, sizeof h->name, "%s", name);
	return h;
}

void sbx_egress_http_free(struct sbx_egress_http **h)
{
	free(*h);
	*h = NULL;
}

/* A whole head on the connection: it must name the connection's name. */
static int request_check(struct sbx_egress_http *h)
{
	const struct req *r = &h->h.r;
	char name[SBX_EGRESS_NAME_MAX + 1];
	const char *up = r->upgrade;
	size_t upn = r->upgrade_len < sizeof r->upgrade ? r->upgrade_len : sizeof r->upgrade;
	int rc = request_name(&h->h, name, h->why, sizeof h->why);

	if (rc)
		return rc;
	trim(&up, &upn);
	if (r->has_upgrade &&
	    !(upn == 9 && r->upgrade_len <= sizeof r->upgrade && strncasecmp(up, "websocket", 9) == 0)) {
		snprintf(h->why, sizeof h->why, "Upgrade to %.*s refused", (int)upn, up);
		return -EPROTO;
	}
	/* HTTP/1.0 may name no host; anything else names this one */
	if (!r->hosts && !absolute_form(r) && h->h.p.http_minor == 0)
		return 0;
	if (strcmp(name, h->name) == 0)
		return 0;
	snprintf(h->why, sizeof h->why, "request for %.60s on a connection to %.60s",
		 name[0] ? name : "no name", h->name[0] ? h->name : "an address");
	return -EPERM;
}

int sbx_egress_http_feed(struct sbx_egress_http *h, const uint8_t *p, size_t n, char *why, size_t whysz)
{
	while (!h->rc && !h->upgraded && n > 0) {
		size_t k = http_parser_execute(&h->h.p, &settings, (const char *)p, n);
		enum http_errno e = HTTP_PARSER_ERRNO(&h->h.p);

		p += k;
		n -= k;
		if (e == HPE_PAUSED) {
			http_parser_pause(&h->h.p, 0);
			h->rc = request_check(h);
		} else if (e != HPE_OK) {
			h->rc = -EPROTO;
			snprintf(h->why, sizeof h->why, "not HTTP/1.x: %s", http_errno_description(e));
		} else if (h->h.p.upgrade) {
			h->upgraded = true;
		}
	}
	if (h->rc)
		snprintf(why, whysz, "%s", h->why);
	return h->rc;
}
