/* The buffered file routes that read, against the real binary: the success
 * shape of write-then-read, empty files, binary content and byte ranges,
 * stat, readdir and exists. The fixture (it_fs.h) also checks after each
 * suite that the server's log is clean. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "it_fs.h"

static void test_write_read(void **state)
{
	(void)state;
	const char *k = "t-write";
	struct it_resp r;
	fs_put("notes.txt", k, "hello\n", 6, &r);
	it_expect_status(&r, 200);
	it_expect_header(&r, "Content-Type", "application/json");
	json_t *j = body_json(&r);
	char *want = wire_in(k, "notes.txt");
	assert_string_equal(jstr(j, "path"), want);
	assert_int_equal(json_integer_value(json_object_get(j, "size")), 6);
	assert_int_equal(json_object_size(j), 2);
	free(want);
	json_decref(j);
	it_resp_free(&r);
	assert_session_content(k, "notes.txt", "hello\n", 6);

	fs_get("read", "notes.txt", k, NULL, &r);
	it_expect_status(&r, 200);
	it_expect_header(&r, "Content-Type", "text/plain; charset=utf-8");
	assert_int_equal(r.len, 6);
	assert_memory_equal(r.body, "hello\n", 6);
	it_resp_free(&r);

	/* Parents are created; the echoed path is absolute and normalised. */
	fs_put("a/./b//../c.txt", k, "abc", 3, &r);
	it_expect_status(&r, 200);
	assert_echoed_path(&r, k, "a/c.txt");
	it_resp_free(&r);
	assert_session_content(k, "a/c.txt", "abc", 3);

	/* An absolute path lands at the workspace root. */
	fs_put("/workspace/abs-write.txt", k, "root", 4, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_string_equal(jstr(j, "path"), "/workspace/abs-write.txt");
	json_decref(j);
	it_resp_free(&r);
	char *hp = xasprintf("%s/abs-write.txt", ws);
	assert_host_content(hp, "root", 4);
	free(hp);

	/* UTF-8 text, multi-byte included, reads as text. */
	const char *utf = "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80\n";
	put_ok("utf.txt", k, utf, strlen(utf));
	fs_get("read", "utf.txt", k, NULL, &r);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, strlen(utf));
	assert_memory_equal(r.body, utf, strlen(utf));
	it_resp_free(&r);
}

static void test_empty_file(void **state)
{
	(void)state;
	const char *k = "t-empty";
	struct it_resp r;
	fs_put("empty", k, NULL, 0, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	assert_int_equal(json_integer_value(json_object_get(j, "size")), 0);
	json_decref(j);
	it_resp_free(&r);
	char *hp = host_in(k, "empty");
	struct stat st;
	assert_int_equal(stat(hp, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_size, 0);
	free(hp);

	fs_get("read", "empty", k, NULL, &r);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, 0);
	it_resp_free(&r);
	fs_get("read_buffer", "empty", k, NULL, &r);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, 0);
	it_expect_header(&r, "Content-Length", "0");
	it_resp_free(&r);
	/* Nothing of an empty file can be asked for. */
	fs_get("read_buffer", "empty", k, "Range: bytes=0-", &r);
	it_expect_status(&r, 416);
	it_resp_free(&r);
	fs_get("stat", "empty", k, NULL, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_int_equal(json_integer_value(json_object_get(j, "size")), 0);
	assert_string_equal(jstr(j, "type"), "file");
	json_decref(j);
	it_resp_free(&r);
}

static void test_binary_and_ranges(void **state)
{
	(void)state;
	const char *k = "t-binary";
	struct it_resp r;
	char bin[256];
	for (int i = 0; i < 256; i++)
		bin[i] = (char)i;
	put_ok("bin.dat", k, bin, sizeof bin);
	assert_session_content(k, "bin.dat", bin, sizeof bin);

	fs_get("read_buffer", "bin.dat", k, NULL, &r);
	it_expect_status(&r, 200);
	it_expect_header(&r, "Content-Type", "application/octet-stream");
	it_expect_header(&r, "Accept-Ranges", "bytes");
	assert_int_equal(r.len, 256);
	assert_memory_equal(r.body, bin, 256);
	it_resp_free(&r);

	static const struct {
		const char *range;
		long start, end;
	} ok[] = {
	    {"bytes=10-19", 10, 19},	 {"bytes=250-", 250, 255}, {"bytes=-6", 250, 255},
	    {"bytes=200-999", 200, 255}, {"bytes=0-0", 0, 0},	   {"bytes=255-255", 255, 255},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		char h[64], cr[64];
		snprintf(h, sizeof h, "Range: %s", ok[i].range);
		fs_get("read_buffer", "bin.dat", k, h, &r);
		it_expect_status(&r, 206);
		snprintf(cr, sizeof cr, "bytes %ld-%ld/256", ok[i].start, ok[i].end);
		it_expect_header(&r, "Content-Range", cr);
		assert_int_equal(r.len, (size_t)(ok[i].end - ok[i].start + 1));
		assert_memory_equal(r.body, bin + ok[i].start, r.len);
		it_resp_free(&r);
	}
	/* Past the end: 416 with the size. */
	static const char *past[] = {"Range: bytes=256-", "Range: bytes=1000-2000", "Range: bytes=-0"};
	for (size_t i = 0; i < sizeof past / sizeof past[0]; i++) {
		fs_get("read_buffer", "bin.dat", k, past[i], &r);
		it_expect_status(&r, 416);
		it_expect_header(&r, "Content-Range", "bytes */256");
		it_resp_free(&r);
	}
	/* A malformed range is ignored: the whole file. */
	static const char *junk[] = {"Range: bytes=5-2",  "Range: items=0-5",  "Range: bytes=0-1,4-5",
				     "Range: bytes=x-",	  "Range: bytes= 1-2", "Range: bytes=1--5",
				     "Range: bytes=+1-2", "Range: bytes=--5"};
	for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
		fs_get("read_buffer", "bin.dat", k, junk[i], &r);
		if (r.status != 200)
			fprintf(stderr, "  %s\n", junk[i]);
		it_expect_status(&r, 200);
		assert_int_equal(r.len, 256);
		it_resp_free(&r);
	}

	/* /fs/read of bytes that are not UTF-8: 422, the hint names read_buffer. */
	fs_get("read", "bin.dat", k, NULL, &r);
	it_expect_error(&r, 422, "not_text");
	assert_retry_hint(&r, "/fs/read_buffer");
	it_resp_free(&r);
	/* One bad byte in otherwise plain text is enough; so is a truncated sequence. */
	put_ok("almost.txt", k, "caf\xc3\x28 ok", 8);
	get_err("read", "almost.txt", k, NULL, 422, "not_text");
	put_ok("cut.txt", k, "abc\xe2\x9c", 5);
	get_err("read", "cut.txt", k, NULL, 422, "not_text");
}

static void test_stat(void **state)
{
	(void)state;
	const char *k = "t-stat";
	struct it_resp r;
	put_ok("s.txt", k, "12345", 5);
	char *hp = host_in(k, "s.txt");
	struct stat st;
	assert_int_equal(stat(hp, &st), 0);

	fs_get("stat", "s.txt", k, NULL, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	char *want = wire_in(k, "s.txt");
	assert_string_equal(jstr(j, "path"), want);
	free(want);
	assert_string_equal(jstr(j, "type"), "file");
	assert_int_equal(json_integer_value(json_object_get(j, "size")), 5);
	assert_string_equal(jstr(j, "mode"), "0644");
	assert_true(json_is_false(json_object_get(j, "is_symlink")));
	const char *mt = jstr(j, "mtime");
	assert_true(is_rfc3339(mt));
	char sec[32];
	struct tm tm;
	gmtime_r(&st.st_mtim.tv_sec, &tm);
	strftime(sec, sizeof sec, "%Y-%m-%dT%H:%M:%S", &tm);
	assert_memory_equal(mt, sec, strlen(sec));
	json_decref(j);
	it_resp_free(&r);

	assert_int_equal(chmod(hp, 0600), 0);
	fs_get("stat", "s.txt", k, NULL, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_string_equal(jstr(j, "mode"), "0600");
	json_decref(j);
	it_resp_free(&r);
	free(hp);

	fs_post("mkdir", k, json_pack("{s:s}", "path", "dir"), &r);
	it_expect_status(&r, 201);
	it_resp_free(&r);
	fs_get("stat", "dir", k, NULL, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_string_equal(jstr(j, "type"), "directory");
	assert_string_equal(jstr(j, "mode"), "0755");
	json_decref(j);
	it_resp_free(&r);

	/* A link inside the workspace is followed: the target's fields. */
	session_symlink(k, "s.txt", "lnk");
	fs_get("stat", "lnk", k, NULL, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_string_equal(jstr(j, "type"), "file");
	assert_true(json_is_true(json_object_get(j, "is_symlink")));
	assert_int_equal(json_integer_value(json_object_get(j, "size")), 5);
	assert_string_equal(jstr(j, "mode"), "0600");
	want = wire_in(k, "lnk");
	assert_string_equal(jstr(j, "path"), want);
	free(want);
	json_decref(j);
	it_resp_free(&r);

	/* A dangling one is described as itself, nothing invented. */
	session_symlink(k, "nothere", "dangle");
	assert_stat_symlink(k, "dangle");

	get_err("stat", "missing", k, NULL, 404, "not_found");
	get_err("stat", "s.txt/below", k, NULL, 409, "not_a_directory");
	fs_get("stat", "/workspace", k, NULL, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_string_equal(jstr(j, "path"), "/workspace");
	assert_string_equal(jstr(j, "type"), "directory");
	json_decref(j);
	it_resp_free(&r);
}

static void test_readdir(void **state)
{
	(void)state;
	const char *k = "t-readdir";
	struct it_resp r;
	static const char *names[] = {"b", "a.txt", "B", "_x", "a", "~t", "0"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		fs_put(names[i], k, "1234", 4, &r);
		it_expect_status(&r, 200);
		it_resp_free(&r);
	}
	fs_post("mkdir", k, json_pack("{s:s}", "path", "d"), &r);
	it_expect_status(&r, 201);
	it_resp_free(&r);
	session_symlink(k, "a", "ln");
	/* A name that is not UTF-8, made by a command. */
	char *hp = host_in(k, "\xff.bin");
	host_put(hp, "x");
	free(hp);

	/* Bytewise: "0" < "B" < "_x" < "a" < "a.txt" < "b" < "d" < "ln" < "~t" < "\xff.bin". */
	static const char *sorted[] = {"0", "B", "_x", "a",  "a.txt",
				       "b", "d", "ln", "~t", "\xef\xbf\xbd.bin"};
	size_t ns = sizeof sorted / sizeof sorted[0];
	fs_get("readdir", ".", k, NULL, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	/* A directory within one page: the whole listing, sorted, and nothing more. */
	assert_int_equal(json_object_size(j), 3);
	assert_true(json_is_false(json_object_get(j, "more")));
	assert_true(json_is_null(json_object_get(j, "next")));
	json_t *e = json_object_get(j, "entries");
	assert_int_equal(json_array_size(e), ns);
	for (size_t i = 0; i < ns; i++)
		assert_string_equal(json_string_value(json_array_get(e, i)), sorted[i]);
	json_decref(j);
	it_resp_free(&r);

	fs_get("readdir", ".", k, NULL, &r);
	it_resp_free(&r);
	char *url = xasprintf("/fs/readdir?path=.&detail=true");
	call("GET", url, tok_rw, k, NULL, NULL, NULL, 0, &r);
	free(url);
	it_expect_status(&r, 200);
	j = body_json(&r);
	e = json_object_get(j, "entries");
	assert_int_equal(json_array_size(e), ns);
	for (size_t i = 0; i < ns; i++) {
		json_t *o = json_array_get(e, i);
		assert_string_equal(jstr(o, "name"), sorted[i]);
		assert_true(is_rfc3339(jstr(o, "mtime")));
		assert_true(json_is_integer(json_object_get(o, "size")));
		const char *t = jstr(o, "type");
		if (strcmp(sorted[i], "d") == 0)
			assert_string_equal(t, "directory");
		else if (strcmp(sorted[i], "ln") == 0)
			assert_string_equal(t, "symlink");
		else {
			assert_string_equal(t, "file");
			if (sorted[i][0] != '\xef')
				assert_int_equal(json_integer_value(json_object_get(o, "size")), 4);
		}
	}
	json_decref(j);
	it_resp_free(&r);

	/* An empty directory; a file; nothing. */
	fs_get("readdir", "d", k, NULL, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_int_equal(json_array_size(json_object_get(j, "entries")), 0);
	json_decref(j);
	it_resp_free(&r);
	get_err("readdir", "a", k, NULL, 409, "not_a_directory");
	get_err("readdir", "nope", k, NULL, 404, "not_found");
}

static void test_exists(void **state)
{
	(void)state;
	const char *k = "t-exists";
	struct it_resp r;
	put_ok("here.txt", k, "x", 1);
	session_symlink(k, "nothere", "dangle");
	static const struct {
		const char *path;
		bool want;
	} cases[] = {
	    {"here.txt", true},	       {".", true},	{"/workspace", true},
	    {"dangle", true},	       {"nope", false}, {"no/such/dir", false},
	    {"here.txt/below", false},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		fs_get("exists", cases[i].path, k, NULL, &r);
		it_expect_status(&r, 200);
		json_t *j = body_json(&r);
		if (json_is_true(json_object_get(j, "exists")) != cases[i].want)
			fprintf(stderr, "  exists %s\n", cases[i].path);
		assert_true(json_is_boolean(json_object_get(j, "exists")));
		assert_true(json_is_true(json_object_get(j, "exists")) == cases[i].want);
		assert_int_equal(json_object_size(j), 1);
		json_decref(j);
		it_resp_free(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_write_read),	      cmocka_unit_test(test_empty_file),
	    cmocka_unit_test(test_binary_and_ranges), cmocka_unit_test(test_stat),
	    cmocka_unit_test(test_readdir),	      cmocka_unit_test(test_exists),
	};
	return cmocka_run_group_tests_name("fs_read", tests, fs_setup, fs_teardown);
}
