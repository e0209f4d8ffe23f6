/* POST /code and track_changes (issue 17), through the real bwrap backend:
 * a snippet in python, node and bash with input files, answered with the
 * ShellResult and files_changed exact to the byte (sizes and SHA-256
 * computed here), a language that is not available (422 naming what is),
 * the bounds of the list, and the same list for POST /exec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_agent.h"

static struct it_server srv, s2;
static char *tok;
static const struct it_tok toks[] = {{&tok, "acme", NULL}};

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), NULL};
	if (it_start_minted(&srv, extra, toks, IT_NTOKS(toks)) < 0)
		return -1;
	/* node switched off by configuration; at most 3 changes listed */
	char base[48];
	long b = 0;
	it_uid_base_arg(&b);
	snprintf(base, sizeof base, "uid-base=%ld", b + 8);
	const char *const extra2[] = {
	    "--set", base, "--set", "code-languages=python, sh", "--set", "changes-max-listed=3", NULL};
	return it_start(&s2, extra2);
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish(&srv);
	if (s2.pid > 0 && it_finish(&s2) != 0)
		rc = -1;
	it_free_all(toks, IT_NTOKS(toks));
	return rc;
}

/* One expected entry of files_changed. */
struct want {
	const char *path; /* relative to the session directory */
	const char *kind;
	const void *data; /* content now (NULL: deleted) */
	size_t size;
};

static void expect_changes(json_t *res, const char *session_key, const struct want *w, size_t n)
{
	char seg[80];
	it_session_segment(session_key, seg, sizeof seg);
	json_t *arr = json_object_get(res, "files_changed");
	if (json_array_size(arr) != n) {
		char *t = json_dumps(arr, JSON_INDENT(1));
		fprintf(stderr, "files_changed: %s\n", t ? t : "(none)");
		free(t);
	}
	assert_true(json_is_array(arr));
	assert_int_equal(json_array_size(arr), n);
	assert_true(json_is_false(json_object_get(res, "files_changed_truncated")));
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(arr, i);
		char path[512], sha[65];
		snprintf(path, sizeof path, "/workspace/sessions/%s/%s", seg, w[i].path);
		assert_string_equal(jstr(e, "path"), path);
		assert_string_equal(jstr(e, "kind"), w[i].kind);
		assert_int_equal(jint(e, "size"), (long long)w[i].size);
		if (w[i].data) {
			ag_sha256(w[i].data, w[i].size, sha);
			assert_string_equal(jstr(e, "sha256"), sha);
		} else {
			assert_true(json_is_null(json_object_get(e, "sha256")));
		}
		assert_int_equal(json_object_size(e), 4);
	}
}

/* The inputs every language gets: a CSV and a binary. */
static json_t *inputs(void)
{
	return json_pack("[{s:s, s:s}, {s:s, s:s, s:s}]", "path", "in.csv", "content", "a,b\n1,2\n", "path",
			 "data/blob.bin", "content", "AQID", "encoding", "base64");
}

/* Run code in lang in session key; the snippet writes out.csv (in.csv
 * upper-cased), plots/out.png (png, png_len bytes), deletes in.csv and
 * appends 00 ff to data/blob.bin; args echoed as a|b on stdout. */
static void run_language(const char *lang, const char *code, const char *key, const unsigned char *png,
			 size_t png_len)
{
	char *h = xasprintf("X-Session-Key: %s", key);
	const char *const hdrs[] = {h, NULL};
	json_t *res = ag_expect(&srv, tok, hdrs, "/code",
				json_pack("{s:s, s:s, s:o, s:[s, s], s:i}", "language", lang, "code", code,
					  "files", inputs(), "args", "it's", "two words", "timeout_s", 60),
				200);
	if (jint(res, "exit_code") != 0)
		fprintf(stderr, "%s: %s\n", lang, jstr(res, "stderr"));
	assert_int_equal(jint(res, "exit_code"), 0);
	assert_string_equal(jstr(res, "stdout"), "it's|two words\n");
	assert_false(jtrue(res, "timed_out"));
	static const unsigned char blob[] = {1, 2, 3, 0, 0xff};
	const struct want w[] = {
	    {"data/blob.bin", "modified", blob, sizeof blob},
	    {"in.csv", "deleted", NULL, 8},
	    {"out.csv", "created", "A,B\n1,2\n", 8},
	    {"plots/out.png", "created", png, png_len},
	};
	expect_changes(res, key, w, 4);
	json_decref(res);
	free(h);
}

#define PNG_SIG "\x89PNG\r\n\x1a\n"

static void test_python(void **state)
{
	(void)state;
	unsigned char png[20008];
	memcpy(png, PNG_SIG, 8);
	for (size_t i = 0; i < 20000; i++)
		png[8 + i] = (unsigned char)(i % 251);
	/* a symlink is neither listed nor followed */
	run_language("python",
		     "import os, sys\n"
		     "rows = open('in.csv').read().splitlines()\n"
		     "open('out.csv', 'w').write(''.join(r.upper() + '\\n' for r in rows))\n"
		     "os.makedirs('plots')\n"
		     "png = b'\\x89PNG\\r\\n\\x1a\\n' + bytes(i % 251 for i in range(20000))\n"
		     "open('plots/out.png', 'wb').write(png)\n"
		     "os.remove('in.csv')\n"
		     "open('data/blob.bin', 'ab').write(b'\\x00\\xff')\n"
		     "os.symlink('/etc', 'etc-link')\n"
		     "print('|'.join(sys.argv[1:]))\n",
		     "code-python", png, sizeof png);
}

static void test_node(void **state)
{
	(void)state;
	unsigned char png[20008];
	memcpy(png, PNG_SIG, 8);
	for (size_t i = 0; i < 20000; i++)
		png[8 + i] = (unsigned char)((i * 7) & 0xff);
	run_language("node",
		     "const fs = require('fs');\n"
		     "const rows = fs.readFileSync('in.csv', 'utf8').split('\\n').filter(Boolean);\n"
		     "fs.writeFileSync('out.csv', rows.map(r => r.toUpperCase() + '\\n').join(''));\n"
		     "const png = Buffer.alloc(20008);\n"
		     "png.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);\n"
		     "for (let i = 0; i < 20000; i++) png[8 + i] = (i * 7) & 0xff;\n"
		     "fs.mkdirSync('plots');\n"
		     "fs.writeFileSync('plots/out.png', png);\n"
		     "fs.unlinkSync('in.csv');\n"
		     "fs.appendFileSync('data/blob.bin', Buffer.from([0, 255]));\n"
		     "console.log(process.argv.slice(2).join('|'));\n",
		     "code-node", png, sizeof png);
}

static void test_bash(void **state)
{
	(void)state;
	unsigned char png[20008] = {0};
	memcpy(png, PNG_SIG, 8);
	run_language("bash",
		     "set -euo pipefail\n"
		     "tr a-z A-Z < in.csv > out.csv\n"
		     "mkdir plots\n"
		     "{ printf '\\x89PNG\\r\\n\\x1a\\n'; head -c 20000 /dev/zero; } > plots/out.png\n"
		     "rm in.csv\n"
		     "printf '\\x00\\xff' >> data/blob.bin\n"
		     "IFS='|'; echo \"$*\"\n",
		     "code-bash", png, sizeof png);
}

/* A language switched off (or unknown) answers 422 naming what is
 * available; /readyz lists the same. */
static void test_language_unavailable(void **state)
{
	(void)state;
	char *t2 = it_token(&s2, "acme", NULL);
	static const char *const langs[] = {"node", "bash", "cobol"};
	for (size_t i = 0; i < 3; i++) {
		struct it_resp r;
		assert_int_equal(ag_post(&s2, t2, NULL, "/code",
					 json_pack("{s:s, s:s}", "language", langs[i], "code", "1"), NULL,
					 &r),
				 422);
		it_expect_error(&r, 422, "unsupported_language");
		assert_non_null(strstr(r.body, "[\\\"python\\\",\\\"sh\\\"]"));
		it_resp_free(&r);
	}
	json_t *ready = NULL;
	assert_int_equal(it_get_json(&s2, NULL, "/readyz", &ready), 200);
	json_t *want = json_pack("[s, s]", "python", "sh");
	assert_true(json_equal(json_object_get(ready, "languages"), want));
	json_decref(want);
	json_decref(ready);
	/* and the full list where nothing is switched off */
	assert_int_equal(it_get_json(&srv, NULL, "/readyz", &ready), 200);
	want = json_pack("[s, s, s, s]", "python", "node", "bash", "sh");
	assert_true(json_equal(json_object_get(ready, "languages"), want));
	json_decref(want);
	json_decref(ready);
	/* an available one runs there */
	json_t *res = ag_expect(&s2, t2, NULL, "/code",
				json_pack("{s:s, s:s}", "language", "sh", "code", "echo ok"), 200);
	assert_string_equal(jstr(res, "stdout"), "ok\n");
	json_decref(res);
	free(t2);
}

/* At most changes-max-listed entries, and truncated says so. */
static void test_list_bounded(void **state)
{
	(void)state;
	char *t2 = it_token(&s2, "acme", NULL);
	json_t *res = ag_expect(
	    &s2, t2, NULL, "/code",
	    json_pack("{s:s, s:s}", "language", "sh", "code", "for i in 1 2 3 4 5; do echo $i > f$i; done"),
	    200);
	assert_int_equal(json_array_size(json_object_get(res, "files_changed")), 3);
	assert_true(jtrue(res, "files_changed_truncated"));
	json_decref(res);
	free(t2);
}

/* POST /exec with track_changes: the same list; without it, none. */
static void test_track_changes_on_exec(void **state)
{
	(void)state;
	const char *const hdrs[] = {"X-Session-Key: track", NULL};
	json_t *res =
	    ag_expect(&srv, tok, hdrs, "/exec",
		      json_pack("{s:s}", "command", "printf old > old.txt; printf keep > keep.txt"), 200);
	assert_null(json_object_get(res, "files_changed"));
	json_decref(res);
	res = ag_expect(&srv, tok, hdrs, "/exec",
			json_pack("{s:s, s:b}", "command",
				  "rm old.txt; printf 12345 > new.txt; mkdir -p a/b; "
				  "printf x > a/b/deep",
				  "track_changes", 1),
			200);
	const struct want w[] = {
	    {"a/b/deep", "created", "x", 1},
	    {"new.txt", "created", "12345", 5},
	    {"old.txt", "deleted", NULL, 3},
	};
	expect_changes(res, "track", w, 3);
	json_decref(res);
	/* nothing changed: an empty list */
	res = ag_expect(&srv, tok, hdrs, "/exec",
			json_pack("{s:s, s:b}", "command", "cat keep.txt", "track_changes", 1), 200);
	expect_changes(res, "track", NULL, 0);
	json_decref(res);
}

/* Inputs are confined and checked like every other write. */
static void test_bad_requests(void **state)
{
	(void)state;
	struct it_resp r;
	/* Input files are writes: exec alone does not grant them. */
	char *exec_only = it_token(&srv, "acme", "exec");
	assert_non_null(exec_only);
	assert_int_equal(ag_post(&srv, exec_only, NULL, "/code",
				 json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "language", "sh", "code", "true",
					   "files", "path", "Makefile", "content", "x"),
				 NULL, &r),
			 403);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	free(exec_only);
	assert_int_equal(ag_post(&srv, tok, NULL, "/code",
				 json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "language", "sh", "code", "true",
					   "files", "path", "../../../../etc/evil", "content", "x"),
				 NULL, &r),
			 403);
	it_expect_error(&r, 403, "outside_workspace");
	it_resp_free(&r);
	assert_int_equal(
	    ag_post(&srv, tok, NULL, "/code",
		    json_pack("{s:s, s:s, s:[{s:s, s:s, s:s}]}", "language", "sh", "code", "true", "files",
			      "path", "x.bin", "content", "not base64!", "encoding", "base64"),
		    NULL, &r),
	    400);
	it_resp_free(&r);
	assert_int_equal(
	    ag_post(&srv, tok, NULL, "/code",
		    json_pack("{s:s, s:s, s:s}", "language", "sh", "code", "true", "command", "id"), NULL,
		    &r),
	    400);
	it_resp_free(&r);
	assert_int_equal(ag_post(&srv, tok, NULL, "/code",
				 json_pack("{s:s, s:s, s:b}", "language", "sh", "cod", "true", "x", 1), NULL,
				 &r),
			 400);
	it_resp_free(&r);
	/* an exec field misspelt is refused as on POST /exec */
	assert_int_equal(ag_post(&srv, tok, NULL, "/code",
				 json_pack("{s:s, s:s, s:i}", "language", "sh", "code", "true", "timeout", 3),
				 NULL, &r),
			 400);
	it_resp_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_python),	 cmocka_unit_test(test_node),
	    cmocka_unit_test(test_bash),	 cmocka_unit_test(test_language_unavailable),
	    cmocka_unit_test(test_list_bounded), cmocka_unit_test(test_track_changes_on_exec),
	    cmocka_unit_test(test_bad_requests),
	};
	return cmocka_run_group_tests_name("code", tests, setup, teardown);
}
