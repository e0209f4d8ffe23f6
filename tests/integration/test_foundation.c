/* The front door: authentication, routing, errors, audit, operations,
 * TLS, signals and malformed HTTP, against the real binary. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"

static struct it_server srv;

IT_DEFAULT_SERVER_FIXTURE(srv)

static void test_health_public(void **state)
{
	(void)state;
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/healthz", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
	assert_int_equal(it_http(&srv, "GET", "/readyz", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	json_t *j = it_json(&r);
	assert_string_equal(json_string_value(json_object_get(j, "status")), "ready");
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "store"), "status")), "ok");
	json_decref(j);
	it_resp_free(&r);
	assert_int_equal(it_http(&srv, "GET", "/openapi.yaml", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "openapi: 3.1"));
	it_resp_free(&r);
}

static void test_401_variants(void **state)
{
	(void)state;
	struct it_resp r;
	/* no token */
	assert_int_equal(it_http(&srv, "GET", "/audit", NULL, NULL, NULL, 0, &r), 0);
	it_expect_error(&r, 401, "unauthorized");
	it_expect_header(&r, "WWW-Authenticate", "Bearer error=\"invalid_token\"");
	it_resp_free(&r);
	/* garbage token */
	it_expect_error_at(&srv, "GET", "/audit", "not.a.jwt", 401, "unauthorized");
	/* alg none with the tenant claim */
	const char *none = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0."
			   "eyJ0ZW5hbnQiOiJhY21lIiwiZXhwIjo0MTAyNDQ0ODAwLCJzY29wZSI6ImF1ZGl0OnJlYWQifQ.";
	it_expect_error_at(&srv, "GET", "/audit", none, 401, "unauthorized");
	/* a token of acme with its tenant claim rewritten to globex (signature no longer matches) */
	char *t = it_token(&srv, "acme", "audit:read");
	assert_non_null(t);
	char *dot1 = strchr(t, '.');
	char *dot2 = strchr(dot1 + 1, '.');
	char *forged = xasprintf(
	    "%.*s.%s.%s", (int)(dot1 - t), t,
	    "eyJ0ZW5hbnQiOiJnbG9iZXgiLCJleHAiOjQxMDI0NDQ4MDAsInNjb3BlIjoiYXVkaXQ6cmVhZCJ9", dot2 + 1);
	it_expect_error_at(&srv, "GET", "/audit", forged, 401, "unauthorized");
	free(forged);
	/* the token is only accepted in the header on non-SSE routes */
	char *path = xasprintf("/audit?access_token=%s", t);
	it_expect_error_at(&srv, "GET", path, NULL, 401, "unauthorized");
	free(path);
	/* the same token in the header works */
	assert_int_equal(it_http(&srv, "GET", "/audit", t, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
	free(t);
}

static void test_403_scope_and_tenant_header(void **state)
{
	(void)state;
	struct it_resp r;
	char *t = it_token(&srv, "acme", NULL); /* default scopes: no audit:read */
	it_expect_error_at(&srv, "GET", "/audit", t, 403, "insufficient_scope");
	free(t);

	t = it_token(&srv, "acme", "audit:read");
	const char *h1[] = {"X-Tenant-Id: globex", NULL};
	assert_int_equal(it_http(&srv, "GET", "/audit", t, h1, NULL, 0, &r), 0);
	it_expect_error(&r, 403, "forbidden");
	it_resp_free(&r);
	const char *h2[] = {"X-Tenant-Id: acme", NULL};
	assert_int_equal(it_http(&srv, "GET", "/audit", t, h2, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
	/* audit:read may not look at another tenant */
	it_expect_error_at(&srv, "GET", "/audit?tenant=globex", t, 403, "insufficient_scope");
	free(t);

	/* admin asked for by a non-operator tenant is not honoured */
	t = it_token(&srv, "acme", "admin");
	it_expect_error_at(&srv, "GET", "/audit?tenant=globex", t, 403, "insufficient_scope");
	free(t);
}

static void test_404_405(void **state)
{
	(void)state;
	struct it_resp r;
	it_expect_error_at(&srv, "GET", "/no/such/route", NULL, 404, "not_found");
	assert_int_equal(it_http(&srv, "DELETE", "/healthz", NULL, NULL, NULL, 0, &r), 0);
	it_expect_error(&r, 405, "method_not_allowed");
	it_expect_header(&r, "Allow", "GET");
	it_resp_free(&r);
	/* The path arrives percent-decoded and the message quotes it: bytes
	 * that are not UTF-8 still get a JSON 404 (they used to kill the
	 * server: jansson refused the message and strlen(NULL) followed). */
	it_expect_error_at(&srv, "GET", "/%ff%fe", NULL, 404, "not_found");
	assert_true(it_alive(&srv));
}

static void test_413_body(void **state)
{
	(void)state;
	struct it_resp r;
	size_t n = 200 * 1024;
	char *big = xmalloc(n);
	memset(big, 'x', n);
	assert_int_equal(it_http(&srv, "POST", "/healthz", NULL, NULL, big, n, &r), 0);
	/* /healthz has no POST: 405 wins before the body matters */
	assert_int_equal(r.status, 405);
	it_resp_free(&r);
	const char *h[] = {"Content-Type: text/plain", NULL};
	assert_int_equal(it_http(&srv, "GET", "/healthz", NULL, h, big, n, &r), 0);
	it_expect_error(&r, 413, "too_large");
	assert_non_null(strstr(r.body, "stream"));
	it_resp_free(&r);
	free(big);
	assert_true(it_alive(&srv));
}

static void test_request_id(void **state)
{
	(void)state;
	struct it_resp r;
	const char *h[] = {"X-Request-Id: my-request-42", NULL};
	assert_int_equal(it_http(&srv, "GET", "/healthz", NULL, h, NULL, 0, &r), 0);
	it_expect_header(&r, "X-Request-Id", "my-request-42");
	it_resp_free(&r);
	assert_int_equal(it_http(&srv, "GET", "/nope", NULL, NULL, NULL, 0, &r), 0);
	char *id = it_header(&r, "X-Request-Id");
	assert_non_null(id);
	it_resp_free(&r);
	/* A generated id: 24 lowercase hex digits, a new one each request. */
	assert_int_equal(strlen(id), 24);
	assert_int_equal(strspn(id, "0123456789abcdef"), 24);
	assert_int_equal(it_http(&srv, "GET", "/nope", NULL, NULL, NULL, 0, &r), 0);
	char *id2 = it_header(&r, "X-Request-Id");
	assert_non_null(id2);
	assert_string_not_equal(id, id2);
	free(id2);
	free(id);
	it_resp_free(&r);
}

/* The default connection memory (connection-memory-bytes, docs/configuration.md) reads
 * a header block of 13 KiB: the largest bearer token the server verifies
 * (8 KiB) with room to spare. The request reaches authentication (401 for
 * this made-up token), not a 431; a block far larger still gets a 431. */
static void test_header_room(void **state)
{
	(void)state;
	size_t tok = 8192 - 7, pad = 5000, n = tok + pad + 256;
	char *req = xmalloc(n);
	int off = snprintf(req, n, "GET /audit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ");
	memset(req + off, 'a', tok);
	off += (int)tok;
	off += snprintf(req + off, n - (size_t)off, "\r\nX-Pad: ");
	memset(req + off, 'p', pad);
	off += (int)pad;
	off += snprintf(req + off, n - (size_t)off, "\r\nConnection: close\r\n\r\n");
	char *resp = it_raw(&srv, req, (size_t)off, 5000);
	assert_non_null(resp);
	assert_non_null(strstr(resp, "HTTP/1.1 401 "));
	free(resp);
	free(req);

	n = 40 * 1024;
	req = xmalloc(n + 64);
	off = snprintf(req, n, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(req + off, 'b', n - (size_t)off);
	off = (int)n;
	off += snprintf(req + off, 64, "\r\nConnection: close\r\n\r\n");
	resp = it_raw(&srv, req, (size_t)off, 5000);
	assert_non_null(resp);
	assert_non_null(strstr(resp, "HTTP/1.1 431 "));
	free(resp);
	free(req);
	assert_true(it_alive(&srv));
}

/* Find a record with this request id in the admin's view of the audit. */
static json_t *find_audit(const char *token, const char *request_id)
{
	for (int i = 0; i < 200; i++) {
		struct it_resp r;
		char *path = xasprintf("/audit?limit=1000");
		int rc = it_http(&srv, "GET", path, token, NULL, NULL, 0, &r);
		free(path);
		if (rc == 0 && r.status == 200) {
			json_t *j = it_json(&r);
			size_t k;
			json_t *rec;
			json_array_foreach(json_object_get(j, "records"), k, rec) {
				const char *rid = json_string_value(json_object_get(rec, "request_id"));
				if (rid && strcmp(rid, request_id) == 0) {
					json_incref(rec);
					json_decref(j);
					it_resp_free(&r);
					return rec;
				}
			}
			json_decref(j);
		}
		it_resp_free(&r);
		usleep(20000);
	}
	return NULL;
}

static void test_audit_rows(void **state)
{
	(void)state;
	struct it_resp r;
	char *admin = it_token(&srv, "ops", "admin audit:read");
	const char *h1[] = {"X-Request-Id: audit-refused-1", NULL};
	assert_int_equal(it_http(&srv, "GET", "/audit", "bogus", h1, NULL, 0, &r), 0);
	assert_int_equal(r.status, 401);
	it_resp_free(&r);
	char *acme = it_token(&srv, "acme", "audit:read");
	const char *h2[] = {"X-Request-Id: audit-ok-1", "X-Session-Key: chat:42", NULL};
	assert_int_equal(it_http(&srv, "GET", "/audit?limit=1", acme, h2, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);

	json_t *refused = find_audit(admin, "audit-refused-1");
	assert_non_null(refused);
	assert_string_equal(json_string_value(json_object_get(refused, "tenant")), "");
	assert_string_equal(json_string_value(json_object_get(refused, "outcome")), "denied");
	assert_int_equal(json_integer_value(json_object_get(refused, "status")), 401);
	assert_string_equal(json_string_value(json_object_get(refused, "method")), "GET");
	assert_string_equal(json_string_value(json_object_get(refused, "client")), "127.0.0.1");
	json_decref(refused);

	json_t *ok = find_audit(admin, "audit-ok-1");
	assert_non_null(ok);
	assert_string_equal(json_string_value(json_object_get(ok, "tenant")), "acme");
	assert_string_equal(json_string_value(json_object_get(ok, "session")), "chat:42");
	assert_string_equal(json_string_value(json_object_get(ok, "outcome")), "ok");
	assert_string_equal(json_string_value(json_object_get(ok, "route")), "/audit");
	json_decref(ok);

	/* acme's own view never shows the unauthenticated row or other tenants */
	assert_int_equal(it_http(&srv, "GET", "/audit?limit=1000", acme, NULL, NULL, 0, &r), 0);
	it_expect_audit_tenant(&r, "acme");
	it_resp_free(&r);

	/* the CLI reads the same table */
	int st = 0;
	char *out = it_cli(&srv, &st, "audit --format ndjson --limit 1000");
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "audit-refused-1"));
	free(out);
	free(admin);
	free(acme);
}

static void test_metrics(void **state)
{
	(void)state;
	struct it_resp r;
	it_expect_error_at(&srv, "GET", "/metrics", NULL, 401, "unauthorized");
	char *t = it_token(&srv, "acme", "audit:read");
	assert_int_equal(it_http(&srv, "GET", "/metrics", t, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "# TYPE sandboxd_http_requests_total counter"));
	assert_non_null(
	    strstr(r.body, "sandboxd_http_requests_total{route=\"GET /healthz\",status=\"200\"}"));
	assert_non_null(strstr(r.body, "sandboxd_http_request_duration_seconds_bucket"));
	it_resp_free(&r);
	free(t);
}

static void test_malformed_http(void **state)
{
	(void)state;
	const char *bad[] = {
	    "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
	    "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
	    "\x16\x03\x01\x02\x00garbage-not-http\r\n\r\n",
	    "POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	    "GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		free(it_raw(&srv, bad[i], strlen(bad[i]), 500));
	/* a header block far over the connection memory limit */
	size_t n = 256 * 1024;
	char *huge = xmalloc(n + 64);
	int off = snprintf(huge, n, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(huge + off, 'a', n - (size_t)off - 8);
	memcpy(huge + n - 8, "\r\n\r\n", 5);
	char *resp = it_raw(&srv, huge, n - 4, 1000);
	if (resp && *resp)
		assert_non_null(strstr(resp, " 431 ")	? resp
				: strstr(resp, " 413 ") ? resp
							: strstr(resp, "HTTP/1.1 4"));
	free(resp);
	free(huge);
	assert_true(it_alive(&srv));
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/healthz", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
}

/* Each request would succeed if its ambiguity were resolved one way (as
 * libmicrohttpd 0.9.75 does: first header wins, chunked beats a length),
 * and each carries a pipelined second request a proxy might see as body.
 * The server must answer 400 bad_request once, say Connection: close and
 * close, never answer the smuggled request, and write nothing. */
/* form with "$T" replaced by the token. */
static char *with_token(const char *form, const char *t)
{
	const char *p = strstr(form, "$T");
	if (!p)
		return xstrdup(form);
	return xasprintf("%.*s%s%s", (int)(p - form), form, t, p + 2);
}

static void test_ambiguous_http_refused(void **state)
{
	(void)state;
	char *t = it_token(&srv, "acme", NULL);
	const char *next = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: smuggled\r\n\r\n";
	const char *forms[] = {
	    /* duplicate Content-Length, equal and different */
	    "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
	    "PUT /fs/write?path=amb1.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $T\r\n"
	    "Content-Length: 3\r\ncontent-length: 10\r\n\r\nabc",
	    /* Content-Length and Transfer-Encoding together */
	    "PUT /fs/write?path=amb2.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $T\r\n"
	    "Content-Length: 8\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	    /* duplicate Transfer-Encoding, and a coding without a length */
	    "PUT /fs/write?path=amb3.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $T\r\n"
	    "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	    "PUT /fs/write?path=amb4.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $T\r\n"
	    "Transfer-Encoding: gzip\r\n\r\nabc",
	    /* duplicate credentials, tenant and session headers */
	    "GET /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $T\r\nauthorization: Bearer "
	    "bogus\r\n\r\n",
	    "GET /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $T\r\nX-Tenant-Id: acme\r\n"
	    "X-TENANT-ID: globex\r\n\r\n",
	    "GET /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $T\r\nX-Session-Key: a\r\n"
	    "X-Session-Key: b\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
		char *head = with_token(forms[i], t);
		char *req = xasprintf("%s%s", head, next);
		bool closed = false;
		/* The deadline only bounds a failure: a fixed server closes at once. */
		char *resp = it_raw_closed(&srv, req, strlen(req), 10000, &closed);
		assert_non_null(resp);
		if (strncmp(resp, "HTTP/1.1 400 ", 13) != 0 || !closed)
			fprintf(stderr, "form %zu: closed=%d, got:\n%s\n", i, closed, resp);
		assert_true(strncmp(resp, "HTTP/1.1 400 ", 13) == 0);
		assert_non_null(strstr(resp, "\"code\":\"bad_request\""));
		assert_non_null(strstr(resp, "\r\nConnection: close\r\n"));
		assert_null(strstr(resp + 1, "HTTP/1.1 ")); /* one answer, the smuggled one never */
		assert_true(closed);
		free(resp);
		free(req);
		free(head);
	}
	/* nothing was written by any of them */
	for (int k = 1; k <= 4; k++) {
		struct it_resp r;
		char *path = xasprintf("/fs/exists?path=amb%d.txt", k);
		assert_int_equal(it_http(&srv, "GET", path, t, NULL, NULL, 0, &r), 0);
		assert_int_equal(r.status, 200);
		json_t *j = it_json(&r);
		assert_true(json_is_false(json_object_get(j, "exists")));
		json_decref(j);
		it_resp_free(&r);
		free(path);
	}
	/* single headers of the same kind still work */
	struct it_resp r;
	const char *h[] = {"X-Tenant-Id: acme", "X-Session-Key: a", NULL};
	assert_int_equal(it_http(&srv, "PUT", "/fs/write?path=amb-ok.txt", t, h, "abc", 3, &r), 0);
	assert_true(r.status == 200 || r.status == 201);
	it_resp_free(&r);
	assert_true(it_alive(&srv));
	free(t);
}

static void test_cli(void **state)
{
	(void)state;
	int st = 0;
	char *out = it_cli(&srv, &st, "tenant list");
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "acme"));
	assert_non_null(strstr(out, "ops"));
	/* secrets are never printed again */
	assert_null(strstr(out, "secret"));
	free(out);
	free(it_cli(&srv, &st, "tenant add acme"));
	assert_int_equal(st, 1);
	free(it_cli(&srv, &st, "tenant add Bad.Name"));
	assert_int_equal(st, 2);
	free(it_cli(&srv, &st, "token --tenant nobody"));
	assert_int_equal(st, 1);
	out = it_cli(&srv, &st, "migrate");
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "schema version"));
	free(out);
	char secret[300];
	snprintf(secret, sizeof secret, "%s/short.secret", srv.dir);
	it_write_file(secret, "tooshort", 8);
	char *args = xasprintf("tenant add shorty --secret-file %s", secret);
	free(it_cli(&srv, &st, args));
	free(args);
	assert_int_equal(st, 1);
	out = it_cli(&srv, &st, "--version");
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "sandboxd "));
	free(out);
	/* local backend refuses to start without the explicit opt-in */
	out = it_cli(&srv, &st, "serve --backend local --listen 127.0.0.1:1");
	assert_int_equal(st, 2);
	free(out);
}

static void test_tls_roundtrip(void **state)
{
	(void)state;
	struct it_server tls;
	char dir[] = "/tmp/sandboxd-tls-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char *cmd = xasprintf("openssl req -x509 -newkey rsa:2048 -nodes -keyout %s/key.pem -out %s/cert.pem "
			      "-days 1 -subj /CN=127.0.0.1 >/dev/null 2>&1",
			      dir, dir);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	char *cert = xasprintf("%s/cert.pem", dir), *key = xasprintf("%s/key.pem", dir);
	const char *extra[] = {"--tls-cert", cert, "--tls-key", key, NULL};
	assert_int_equal(it_start(&tls, extra), 0);
	assert_true(strncmp(tls.base, "https://", 8) == 0);
	struct it_resp r;
	char *t = it_token(&tls, "acme", "audit:read");
	assert_int_equal(it_http(&tls, "GET", "/audit", t, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
	/* plain HTTP on the TLS port gets no HTTP answer */
	char *raw = it_raw(&tls, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 34, 500);
	assert_true(raw == NULL || strstr(raw, "200 OK") == NULL);
	free(raw);
	assert_int_equal(it_stop(&tls, SIGTERM), 0);
	it_cleanup(&tls);
	free(t);
	free(cert);
	free(key);
	cmd = xasprintf("rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
	free(cmd);
}

static void test_sigterm_exits_zero(void **state)
{
	(void)state;
	struct it_server s2;
	assert_int_equal(it_start(&s2, NULL), 0);
	assert_int_equal(it_stop(&s2, SIGTERM), 0);
	assert_int_equal(it_restart(&s2, NULL), 0);
	assert_int_equal(it_stop(&s2, SIGINT), 0);
	/* the database is consistent after the stops */
	char *cmd = xasprintf("sqlite3 %s/sandboxd.db 'PRAGMA integrity_check' | grep -qx ok", s2.dir);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	it_cleanup(&s2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_health_public),
	    cmocka_unit_test(test_401_variants),
	    cmocka_unit_test(test_403_scope_and_tenant_header),
	    cmocka_unit_test(test_404_405),
	    cmocka_unit_test(test_413_body),
	    cmocka_unit_test(test_request_id),
	    cmocka_unit_test(test_header_room),
	    cmocka_unit_test(test_audit_rows),
	    cmocka_unit_test(test_metrics),
	    cmocka_unit_test(test_malformed_http),
	    cmocka_unit_test(test_ambiguous_http_refused),
	    cmocka_unit_test(test_cli),
	    cmocka_unit_test(test_tls_roundtrip),
	    cmocka_unit_test(test_sigterm_exits_zero),
	};
	return cmocka_run_group_tests_name("foundation", tests, setup, teardown);
}
