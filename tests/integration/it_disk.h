#pragma once
/* What the disk-quota suites (test_quota.c: project quotas;
 * test_disk_image.c: an image per tenant) share: one server `srv` with
 * the harness's tenants and their tokens (tok_a: acme, tok_b: globex,
 * tok_ops: ops, admin and audit:read), and the checks both make of it.
 * Include once, in a suite's only file. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

static struct it_server srv;
static char *tok_a, *tok_b, *tok_ops;

/* Whether the server's log has a sanitizer report (printed). */
static inline bool srv_log_unclean(void)
{
	char *log = it_read_file(srv.log, NULL);
	bool bad = log && (strstr(log, "ERROR: AddressSanitizer") || strstr(log, "runtime error:"));
	if (bad)
		fprintf(stderr, "sanitizer report in the server log:\n%s\n", log);
	free(log);
	return bad;
}

static inline void free_tokens(void)
{
	free(tok_a);
	free(tok_b);
	free(tok_ops);
	tok_a = tok_b = tok_ops = NULL;
}

static json_t *readyz(long *status)
{
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/readyz", NULL, NULL, NULL, 0, &r), 0);
	*status = r.status;
	json_t *j = it_json(&r);
	it_resp_free(&r);
	assert_non_null(j);
	return j;
}

static const char *sub(json_t *o, const char *k1, const char *k2)
{
	const char *v = json_string_value(json_object_get(json_object_get(o, k1), k2));
	return v ? v : "";
}

/* Wait (bounded) until /readyz answers want; its last body. */
static inline json_t *readyz_until(long want)
{
	long st = 0, until = it_now_ms() + 15000;
	json_t *j = NULL;
	for (;;) {
		json_decref(j);
		j = readyz(&st);
		if (st == want || it_now_ms() > until)
			break;
		usleep(100000);
	}
	if (st != want) {
		char *t = json_dumps(j, JSON_INDENT(1));
		fprintf(stderr, "/readyz stayed %ld (wanted %ld): %s\n", st, want, t);
		free(t);
	}
	assert_int_equal(st, want);
	return j;
}

static long put(const char *tok, const char *path, size_t n, struct it_resp *out)
{
	char *data = xmalloc(n + 1);
	memset(data, 'q', n);
	char *url = xasprintf("/fs/write?path=%s", path);
	assert_int_equal(it_http(&srv, "PUT", url, tok, NULL, data, n, out), 0);
	free(url);
	free(data);
	return out->status;
}

/* PUT path with n bytes; expect 200. */
static void put_ok(const char *tok, const char *path, size_t n)
{
	struct it_resp r;
	if (put(tok, path, n, &r) != 200)
		it_show(&r);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
}

/* The other tenant writes, runs and is audited as if nothing happened. */
static void globex_unaffected(void)
{
	put_ok(tok_b, "b.bin", 1u << 20);
	json_t *r = ex_run(&srv, tok_b, "echo served");
	assert_string_equal(ex_stdout_ok(r), "served\n");
	json_decref(r);
}

/* acme's audit rows with this status on route (audit:read of an
 * operator, tenant=acme), waiting for the batch writer. */
static int audit_rows(const char *route, int status, int want)
{
	long until = it_now_ms() + 10000;
	int n = 0;
	do {
		char *url = xasprintf("/audit?tenant=acme&route=%s&limit=1000", route);
		json_t *j = NULL;
		long st = it_get_json(&srv, tok_ops, url, &j);
		free(url);
		n = 0;
		json_t *rec;
		size_t i;
		if (st == 200)
			json_array_foreach(json_object_get(j, "records"), i, rec)
				n += json_integer_value(json_object_get(rec, "status")) == status;
		json_decref(j);
		if (n >= want)
			break;
		usleep(100000);
	} while (it_now_ms() < until);
	return n;
}
