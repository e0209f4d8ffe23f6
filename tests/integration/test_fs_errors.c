/* The file routes' error codes against the real binary: wrong file types,
 * malformed requests, and the buffered size limit (the default one and a
 * server started with a small one). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "it_fs.h"

static void test_type_errors(void **state)
{
	(void)state;
	const char *k = "t-types";
	struct it_resp r;
	put_ok("file", k, "x", 1);
	fs_post("mkdir", k, json_pack("{s:s}", "path", "dir"), &r);
	it_expect_status(&r, 201);
	it_resp_free(&r);

	get_err("read", "dir", k, NULL, 409, "is_a_directory");
	get_err("read_buffer", "dir", k, NULL, 409, "is_a_directory");
	fs_put("dir", k, "x", 1, &r);
	it_expect_error(&r, 409, "is_a_directory");
	it_resp_free(&r);
	fs_put("/workspace", k, "x", 1, &r);
	it_expect_error(&r, 409, "is_a_directory");
	it_resp_free(&r);
	get_err("read", "file/x", k, NULL, 409, "not_a_directory");
	fs_put("file/x", k, "x", 1, &r);
	it_expect_error(&r, 409, "not_a_directory");
	it_resp_free(&r);
	post_err("rm", k, json_pack("{s:s}", "path", "file/x"), 409, "not_a_directory");
	get_err("read", "nothing", k, NULL, 404, "not_found");
	assert_session_content(k, "file", "x", 1);
}

static void test_bad_request(void **state)
{
	(void)state;
	const char *k = "t-bad";
	struct it_resp r;
	touch_session(k);
	/* A NUL in the path, however it is spelled, never cuts the path short. */
	static const char *nul[] = {"/fs/read?path=a%00b", "/fs/write?path=evil.txt%00.png",
				    "/fs/stat?path=%00", "/fs/exists?path=x%00"};
	put_ok("a", k, "a", 1);
	put_ok("evil.txt", k, "e", 1);
	put_ok("x", k, "x", 1);
	for (size_t i = 0; i < sizeof nul / sizeof nul[0]; i++) {
		bool put = strncmp(nul[i], "/fs/write", 9) == 0;
		call(put ? "PUT" : "GET", nul[i], tok_rw, k, NULL, NULL, put ? "zz" : NULL, put ? 2 : 0, &r);
		if (r.status != 400)
			fprintf(stderr, "  %s\n", nul[i]);
		it_expect_error(&r, 400, "bad_request");
		it_resp_free(&r);
	}
	assert_session_content(k, "evil.txt", "e", 1);
	post_err("mkdir", k, json_pack("{s:s%}", "path", "nul\0dir", (size_t)7), 400, "bad_request");
	assert_false(session_exists(k, "nul"));

	/* Too long: the whole path, one component. */
	char *longp = xmalloc(4098);
	memset(longp, 'a', 4097);
	for (size_t i = 100; i < 4097; i += 100)
		longp[i] = '/';
	longp[4097] = '\0';
	memcpy(longp, "/workspace/", 11); /* absolute, so the session prefix does not count */
	get_err("read", longp, k, NULL, 400, "bad_request");
	fs_put(longp, k, "x", 1, &r);
	it_expect_error(&r, 400, "bad_request");
	it_resp_free(&r);
	free(longp);
	char comp[257];
	memset(comp, 'c', 256);
	comp[256] = '\0';
	fs_put(comp, k, "x", 1, &r);
	it_expect_error(&r, 400, "bad_request");
	it_resp_free(&r);
	post_err("mkdir", k, json_pack("{s:s}", "path", comp), 400, "bad_request");
	comp[255] = '\0'; /* 255 is fine */
	put_ok(comp, k, "x", 1);

	/* Missing or empty path. */
	static const char *missing[] = {"/fs/read",   "/fs/read_buffer", "/fs/stat",	  "/fs/readdir",
					"/fs/exists", "/fs/read?path=",	 "/fs/stat?path", "/fs/read?file=a"};
	for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
		call_err("GET", missing[i], tok_rw, k, 400, "bad_request");
	}
	call("PUT", "/fs/write", tok_rw, k, NULL, NULL, "x", 1, &r);
	it_expect_error(&r, 400, "bad_request");
	it_resp_free(&r);

	/* Bodies that are not a JSON object. */
	static const char *bodies[] = {
	    "{", "not json", "[\"path\"]", "\"path\"", "{\"path\": \"a\", \"path\": \"b\"}", ""};
	static const char *routes[] = {"/fs/mkdir", "/fs/rm", "/fs/move"};
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
		for (size_t b = 0; b < sizeof bodies / sizeof bodies[0]; b++) {
			call("POST", routes[i], tok_rw, k, NULL, NULL, bodies[b], strlen(bodies[b]), &r);
			it_expect_error(&r, 400, "bad_request");
			it_resp_free(&r);
		}

	/* A session key that is not 1 to 512 printable bytes. */
	char *longkey = xmalloc(514);
	memset(longkey, 'k', 513);
	longkey[513] = '\0';
	get_err("exists", ".", longkey, NULL, 400, "bad_request");
	free(longkey);
	assert_true(it_alive(&srv));
}

static void make_sparse(const char *path, off_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, size), 0);
	close(fd);
}

static void test_too_large_default(void **state)
{
	(void)state;
	const char *k = "t-large";
	struct it_resp r;
	touch_session(k);
	size_t n = 16 * MIB + 1;
	char *big = xmalloc(n);
	memset(big, 'z', n);
	fs_put("big.txt", k, big, n, &r);
	it_expect_error(&r, 413, "too_large");
	assert_retry_hint(&r, "stream");
	it_resp_free(&r);
	assert_false(session_exists(k, "big.txt"));
	/* Exactly the limit is fine. */
	put_ok("limit.txt", k, big, n - 1);
	free(big);
	char *sd = host_in(k, "");
	assert_int_equal(count_temps(sd), 0);
	free(sd);

	char *hp = host_in(k, "huge.bin");
	make_sparse(hp, (off_t)(16 * MIB + 1));
	free(hp);
	get_err("read", "huge.bin", k, NULL, 413, "too_large");
	get_err("read_buffer", "huge.bin", k, NULL, 413, "too_large");
	/* A part of it within the limit may be read. */
	fs_get("read_buffer", "huge.bin", k, "Range: bytes=100-199", &r);
	it_expect_status(&r, 206);
	assert_int_equal(r.len, 100);
	it_resp_free(&r);
	assert_true(it_alive(&srv));
}

static void test_too_large_small_limit(void **state)
{
	(void)state;
	const char *extra[] = {"--set", "max-buffered-bytes=1048576", NULL};
	assert_int_equal(it_start(&s2, extra), 0);
	char *t = it_token(&s2, "acme", NULL);
	assert_non_null(t);
	size_t n = MIB + 1;
	char *big = xmalloc(n);
	memset(big, 'q', n);
	struct it_resp r;
	const char *h[] = {"X-Session-Key: small", NULL};
	assert_int_equal(it_http(&s2, "PUT", "/fs/write?path=over.txt", t, h, big, n, &r), 0);
	it_expect_error(&r, 413, "too_large");
	it_resp_free(&r);
	assert_int_equal(it_http(&s2, "PUT", "/fs/write?path=at.txt", t, h, big, n - 1, &r), 0);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	assert_int_equal(it_http(&s2, "GET", "/fs/read_buffer?path=at.txt", t, h, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, MIB);
	it_resp_free(&r);
	char seg[80];
	it_session_segment("small", seg, sizeof seg);
	char *over = xasprintf("%s/tenants/acme/workspace/sessions/%s/over.txt", s2.dir, seg);
	assert_false(host_exists(over));
	free(over);
	char *hp = xasprintf("%s/tenants/acme/workspace/sessions/%s/file.txt", s2.dir, seg);
	assert_int_equal(it_write_file(hp, big, n), 0);
	free(hp);
	static const char *routes[] = {"/fs/read?path=file.txt", "/fs/read_buffer?path=file.txt"};
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(it_http(&s2, "GET", routes[i], t, h, NULL, 0, &r), 0);
		it_expect_error(&r, 413, "too_large");
		it_resp_free(&r);
	}
	/* A JSON body over the limit is refused the same way. */
	char *jb = xmalloc(n + 32);
	int off = snprintf(jb, n + 32, "{\"path\": \"");
	memset(jb + off, 'p', n);
	memcpy(jb + off + n, "\"}", 3);
	assert_int_equal(it_http(&s2, "POST", "/fs/mkdir", t, h, jb, strlen(jb), &r), 0);
	it_expect_error(&r, 413, "too_large");
	it_resp_free(&r);
	free(jb);
	assert_true(it_alive(&s2));
	assert_int_equal(it_stop(&s2, SIGTERM), 0);
	assert_int_equal(log_clean(s2.log), 0);
	it_cleanup(&s2);
	*s2.dir = '\0';
	free(big);
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_type_errors),
	    cmocka_unit_test(test_bad_request),
	    cmocka_unit_test(test_too_large_default),
	    cmocka_unit_test(test_too_large_small_limit),
	};
	return cmocka_run_group_tests_name("fs_errors", tests, fs_setup, fs_teardown);
}
