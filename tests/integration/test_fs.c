/* The buffered file routes and the session routes, against the real binary:
 * every route's success shape, every error code, escapes by path and by
 * symlinks a tenant's command could plant, FIFOs, sessions and tenants kept
 * apart, scopes, audit targets, and the buffered size limit. Whatever a
 * test attacks, it checks the outcome from the host: the directory outside
 * the workspace is watched with inotify (no open, read, write, create,
 * delete, attribute change) and compared with a snapshot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "it_fs.h"

/* ---- success shapes ---- */

static void test_write_read(void **state)
{
	(void)state;
	const char *k = "t-write";
	struct it_resp r;
	fs_put("notes.txt", k, "hello\n", 6, &r);
	it_expect_status(&r, 200);
	expect_header(&r, "Content-Type", "application/json");
	json_t *j = body_json(&r);
	char *want = wire_in(k, "notes.txt");
	assert_string_equal(jstr(j, "path"), want);
	assert_int_equal(json_integer_value(json_object_get(j, "size")), 6);
	assert_int_equal(json_object_size(j), 2);
	free(want);
	json_decref(j);
	it_resp_free(&r);
	char *hp = host_in(k, "notes.txt");
	assert_host_content(hp, "hello\n", 6);
	free(hp);

	fs_get("read", "notes.txt", k, NULL, &r);
	it_expect_status(&r, 200);
	expect_header(&r, "Content-Type", "text/plain; charset=utf-8");
	assert_int_equal(r.len, 6);
	assert_memory_equal(r.body, "hello\n", 6);
	it_resp_free(&r);

	/* Parents are created; the echoed path is absolute and normalised. */
	fs_put("a/./b//../c.txt", k, "abc", 3, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	want = wire_in(k, "a/c.txt");
	assert_string_equal(jstr(j, "path"), want);
	free(want);
	json_decref(j);
	it_resp_free(&r);
	hp = host_in(k, "a/c.txt");
	assert_host_content(hp, "abc", 3);
	free(hp);

	/* An absolute path lands at the workspace root. */
	fs_put("/workspace/abs-write.txt", k, "root", 4, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_string_equal(jstr(j, "path"), "/workspace/abs-write.txt");
	json_decref(j);
	it_resp_free(&r);
	hp = xasprintf("%s/abs-write.txt", ws);
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
	expect_header(&r, "Content-Length", "0");
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
	char *hp = host_in(k, "bin.dat");
	assert_host_content(hp, bin, sizeof bin);
	free(hp);

	fs_get("read_buffer", "bin.dat", k, NULL, &r);
	it_expect_status(&r, 200);
	expect_header(&r, "Content-Type", "application/octet-stream");
	expect_header(&r, "Accept-Ranges", "bytes");
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
		expect_header(&r, "Content-Range", cr);
		assert_int_equal(r.len, (size_t)(ok[i].end - ok[i].start + 1));
		assert_memory_equal(r.body, bin + ok[i].start, r.len);
		it_resp_free(&r);
	}
	/* Past the end: 416 with the size. */
	static const char *past[] = {"Range: bytes=256-", "Range: bytes=1000-2000", "Range: bytes=-0"};
	for (size_t i = 0; i < sizeof past / sizeof past[0]; i++) {
		fs_get("read_buffer", "bin.dat", k, past[i], &r);
		it_expect_status(&r, 416);
		expect_header(&r, "Content-Range", "bytes */256");
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
	json_t *j = body_json(&r);
	const char *hint = json_string_value(json_object_get(json_object_get(j, "error"), "retry_hint"));
	assert_non_null(hint);
	assert_non_null(strstr(hint, "/fs/read_buffer"));
	json_decref(j);
	it_resp_free(&r);
	/* One bad byte in otherwise plain text is enough; so is a truncated sequence. */
	put_ok("almost.txt", k, "caf\xc3\x28 ok", 8);
	get_err("read", "almost.txt", k, NULL, 422, "not_text");
	put_ok("cut.txt", k, "abc\xe2\x9c", 5);
	get_err("read", "cut.txt", k, NULL, 422, "not_text");
}

static void test_write_atomic_replace(void **state)
{
	(void)state;
	const char *k = "t-atomic";
	struct it_resp r;
	put_ok("f.txt", k, "old content", 11);
	char *hp = host_in(k, "f.txt");
	struct stat a, b;
	assert_int_equal(stat(hp, &a), 0);
	/* Someone holding the old file keeps the old bytes: the new file is a
	 * new inode renamed into place, not the old one rewritten. */
	int fd = open(hp, O_RDONLY);
	assert_true(fd >= 0);
	put_ok("f.txt", k, "new", 3);
	assert_int_equal(stat(hp, &b), 0);
	assert_true(a.st_ino != b.st_ino);
	char old[32] = {0};
	assert_int_equal(pread(fd, old, sizeof old - 1, 0), 11);
	assert_string_equal(old, "old content");
	close(fd);
	assert_host_content(hp, "new", 3);
	assert_int_equal(b.st_mode & 07777, 0644);
	free(hp);

	/* No temp file is left, nor shown. */
	fs_get("readdir", ".", k, NULL, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	json_t *e = json_object_get(j, "entries");
	assert_int_equal(json_array_size(e), 1);
	assert_string_equal(json_string_value(json_array_get(e, 0)), "f.txt");
	json_decref(j);
	it_resp_free(&r);
	/* Refused writes leave none either. */
	fs_put(".", k, "x", 1, &r);
	it_expect_error(&r, 409, "is_a_directory");
	it_resp_free(&r);
	hp = host_in(k, "");
	assert_int_equal(count_temps(hp), 0);
	free(hp);
	assert_int_equal(count_temps(ws), 0);
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
	hp = host_in(k, "lnk");
	assert_int_equal(symlink("s.txt", hp), 0);
	free(hp);
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
	hp = host_in(k, "dangle");
	assert_int_equal(symlink("nothere", hp), 0);
	free(hp);
	fs_get("stat", "dangle", k, NULL, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_string_equal(jstr(j, "type"), "symlink");
	assert_true(json_is_true(json_object_get(j, "is_symlink")));
	assert_null(json_object_get(j, "size"));
	assert_null(json_object_get(j, "mtime"));
	assert_null(json_object_get(j, "mode"));
	json_decref(j);
	it_resp_free(&r);

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
	char *hp = host_in(k, "ln");
	assert_int_equal(symlink("a", hp), 0);
	free(hp);
	/* A name that is not UTF-8, made by a command. */
	hp = host_in(k, "\xff.bin");
	host_put(hp, "x");
	free(hp);

	/* Bytewise: "0" < "B" < "_x" < "a" < "a.txt" < "b" < "d" < "ln" < "~t" < "\xff.bin". */
	static const char *sorted[] = {"0", "B", "_x", "a",  "a.txt",
				       "b", "d", "ln", "~t", "\xef\xbf\xbd.bin"};
	size_t ns = sizeof sorted / sizeof sorted[0];
	fs_get("readdir", ".", k, NULL, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	assert_int_equal(json_object_size(j), 1);
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
	char *hp = host_in(k, "dangle");
	assert_int_equal(symlink("nothere", hp), 0);
	free(hp);
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

static void test_mkdir(void **state)
{
	(void)state;
	const char *k = "t-mkdir";
	struct it_resp r;
	fs_post("mkdir", k, json_pack("{s:s}", "path", "d1"), &r);
	it_expect_status(&r, 201);
	json_t *j = body_json(&r);
	char *want = wire_in(k, "d1");
	assert_string_equal(jstr(j, "path"), want);
	assert_int_equal(json_object_size(j), 1);
	free(want);
	json_decref(j);
	it_resp_free(&r);
	char *hp = host_in(k, "d1");
	struct stat st;
	assert_int_equal(stat(hp, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	free(hp);

	post_err("mkdir", k, json_pack("{s:s, s:b}", "path", "d1", "recursive", 0), 409, "exists");
	post_err("mkdir", k, json_pack("{s:s}", "path", "x/y"), 404, "parent_missing");
	hp = host_in(k, "x");
	assert_false(host_exists(hp));
	free(hp);

	fs_post("mkdir", k, json_pack("{s:s, s:b}", "path", "x/y/z", "recursive", 1), &r);
	it_expect_status(&r, 201);
	j = body_json(&r);
	want = wire_in(k, "x/y/z");
	assert_string_equal(jstr(j, "path"), want);
	free(want);
	json_decref(j);
	it_resp_free(&r);
	hp = host_in(k, "x/y/z");
	assert_int_equal(stat(hp, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	free(hp);
	/* Recursive on what exists is fine. */
	fs_post("mkdir", k, json_pack("{s:s, s:b}", "path", "x/y", "recursive", 1), &r);
	it_expect_status(&r, 201);
	it_resp_free(&r);

	put_ok("f", k, "x", 1);
	post_err("mkdir", k, json_pack("{s:s, s:b}", "path", "f", "recursive", 1), 409, "exists");
	post_err("mkdir", k, json_pack("{s:s, s:b}", "path", "f/sub", "recursive", 1), 409, "not_a_directory");
	post_err("mkdir", k, json_pack("{s:s}", "path", "f/sub"), 409, "not_a_directory");

	/* Bodies: missing path, wrong type, unknown field, not JSON. */
	post_err("mkdir", k, json_pack("{s:b}", "recursive", 1), 400, "bad_request");
	post_err("mkdir", k, json_pack("{s:s, s:s}", "path", "q", "recursive", "yes"), 400, "bad_request");
	post_err("mkdir", k, json_pack("{s:s, s:b}", "path", "q", "recursve", 1), 400, "bad_request");
	post_err("mkdir", k, json_pack("{s:i}", "path", 5), 400, "bad_request");
	hp = host_in(k, "q");
	assert_false(host_exists(hp));
	free(hp);
}

static void test_rm(void **state)
{
	(void)state;
	const char *k = "t-rm";
	struct it_resp r;
	put_ok("f.txt", k, "x", 1);
	fs_post("rm", k, json_pack("{s:s}", "path", "f.txt"), &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	char *want = wire_in(k, "f.txt");
	assert_string_equal(jstr(j, "path"), want);
	assert_true(json_is_true(json_object_get(j, "removed")));
	free(want);
	json_decref(j);
	it_resp_free(&r);
	char *hp = host_in(k, "f.txt");
	assert_false(host_exists(hp));
	free(hp);

	fs_post("mkdir", k, json_pack("{s:s}", "path", "empty"), &r);
	it_expect_status(&r, 201);
	it_resp_free(&r);
	fs_post("rm", k, json_pack("{s:s}", "path", "empty"), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	hp = host_in(k, "empty");
	assert_false(host_exists(hp));
	free(hp);

	put_ok("full/a/b.txt", k, "x", 1);
	put_ok("full/c.txt", k, "x", 1);
	post_err("rm", k, json_pack("{s:s}", "path", "full"), 409, "not_empty");
	hp = host_in(k, "full/a/b.txt");
	assert_true(host_exists(hp));
	free(hp);
	fs_post("rm", k, json_pack("{s:s, s:b}", "path", "full", "recursive", 1), &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_true(json_is_true(json_object_get(j, "removed")));
	json_decref(j);
	it_resp_free(&r);
	hp = host_in(k, "full");
	assert_false(host_exists(hp));
	free(hp);

	post_err("rm", k, json_pack("{s:s}", "path", "gone"), 404, "not_found");
	fs_post("rm", k, json_pack("{s:s, s:b}", "path", "gone", "force", 1), &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_true(json_is_false(json_object_get(j, "removed")));
	json_decref(j);
	it_resp_free(&r);
	fs_post("rm", k, json_pack("{s:s, s:b}", "path", "no/such/parent", "force", 1), &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_true(json_is_false(json_object_get(j, "removed")));
	json_decref(j);
	it_resp_free(&r);

	/* A link is removed as a link; what it points at stays. */
	put_ok("keep/inner.txt", k, "keep", 4);
	hp = host_in(k, "to-keep");
	assert_int_equal(symlink("keep", hp), 0);
	fs_post("rm", k, json_pack("{s:s, s:b}", "path", "to-keep", "recursive", 1), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	assert_false(host_exists(hp));
	free(hp);
	hp = host_in(k, "keep/inner.txt");
	assert_host_content(hp, "keep", 4);
	free(hp);

	/* Roots are refused however they are named. */
	char seg[80];
	it_session_segment(k, seg, sizeof seg);
	char *own_abs = xasprintf("/workspace/sessions/%s", seg);
	char other[80];
	it_session_segment("t-rm-other", other, sizeof other);
	touch_session("t-rm-other");
	char *other_abs = xasprintf("/workspace/sessions/%s", other);
	const char *roots[] = {"/workspace", "/workspace/", "/workspace/sessions",
			       ".",	     "..",	    "../..",
			       own_abs,	     other_abs,	    "/workspace/sessions/../sessions/./"};
	for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
		fs_post("rm", k, json_pack("{s:s, s:b, s:b}", "path", roots[i], "recursive", 1, "force", 1),
			&r);
		if (r.status != 403)
			fprintf(stderr, "  rm %s\n", roots[i]);
		it_expect_error(&r, 403, "forbidden");
		it_resp_free(&r);
	}
	hp = host_in(k, "keep/inner.txt");
	assert_true(host_exists(hp));
	free(hp);
	hp = host_in("t-rm-other", "");
	assert_true(host_exists(hp));
	free(hp);
	free(own_abs);
	free(other_abs);
}

static void test_move(void **state)
{
	(void)state;
	const char *k = "t-move";
	struct it_resp r;
	put_ok("a.txt", k, "AAA", 3);
	put_ok("b.txt", k, "BBB", 3);

	fs_post("move", k, json_pack("{s:s, s:s}", "from", "a.txt", "to", "c.txt"), &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	char *want = wire_in(k, "c.txt");
	assert_string_equal(jstr(j, "path"), want);
	assert_int_equal(json_object_size(j), 1);
	free(want);
	json_decref(j);
	it_resp_free(&r);
	char *ha = host_in(k, "a.txt"), *hb = host_in(k, "b.txt"), *hc = host_in(k, "c.txt");
	assert_false(host_exists(ha));
	assert_host_content(hc, "AAA", 3);

	post_err("move", k, json_pack("{s:s, s:s}", "from", "c.txt", "to", "b.txt"), 409, "exists");
	assert_host_content(hb, "BBB", 3);
	assert_host_content(hc, "AAA", 3);
	fs_post("move", k, json_pack("{s:s, s:s, s:b}", "from", "c.txt", "to", "b.txt", "overwrite", 1), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	assert_host_content(hb, "AAA", 3);
	assert_false(host_exists(hc));

	post_err("move", k, json_pack("{s:s, s:s}", "from", "nope", "to", "x"), 404, "not_found");
	post_err("move", k, json_pack("{s:s, s:s}", "from", "b.txt", "to", "no/dir/x"), 404, "parent_missing");
	assert_host_content(hb, "AAA", 3);

	/* Directories move whole; a file does not replace a directory. */
	put_ok("dir/in.txt", k, "in", 2);
	post_err("move", k, json_pack("{s:s, s:s, s:b}", "from", "b.txt", "to", "dir", "overwrite", 1), 409, "is_a_directory");
	fs_post("move", k, json_pack("{s:s, s:s}", "from", "dir", "to", "dir2"), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	char *hin = host_in(k, "dir2/in.txt");
	assert_host_content(hin, "in", 2);
	free(hin);

	/* Across sessions by absolute path. */
	touch_session("t-move-2");
	char *dst = wire_in("t-move-2", "moved.txt");
	fs_post("move", k, json_pack("{s:s, s:s}", "from", "b.txt", "to", dst), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	free(dst);
	char *hm = host_in("t-move-2", "moved.txt");
	assert_host_content(hm, "AAA", 3);
	free(hm);

	/* Roots neither move nor are replaced. */
	post_err("move", k, json_pack("{s:s, s:s}", "from", ".", "to", "/workspace/elsewhere"), 403, "forbidden");
	fs_post("move", k,
		json_pack("{s:s, s:s, s:b}", "from", "dir2", "to", "/workspace/sessions", "overwrite", 1),
		&r);
	it_expect_error(&r, 403, "forbidden");
	it_resp_free(&r);
	post_err("move", k, json_pack("{s:s}", "from", "dir2"), 400, "bad_request");
	free(ha);
	free(hb);
	free(hc);
}

/* ---- error codes ---- */

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
	char *hp = host_in(k, "file");
	assert_host_content(hp, "x", 1);
	free(hp);
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
	char *hp = host_in(k, "evil.txt");
	assert_host_content(hp, "e", 1);
	free(hp);
	post_err("mkdir", k, json_pack("{s:s%}", "path", "nul\0dir", (size_t)7), 400, "bad_request");
	hp = host_in(k, "nul");
	assert_false(host_exists(hp));
	free(hp);

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
		call("GET", missing[i], tok_rw, k, NULL, NULL, NULL, 0, &r);
		it_expect_error(&r, 400, "bad_request");
		it_resp_free(&r);
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

/* ---- escapes ---- */

static void test_escape_by_path(void **state)
{
	(void)state;
	const char *k = "t-escape";
	struct it_resp r;
	touch_session(k);
	/* Raw query strings, so %2e%2e reaches the server as such. */
	static const char *raw[] = {
	    "../../../escape-probe",
	    "%2e%2e/%2e%2e/%2e%2e/escape-probe",
	    "%2E%2E%2F%2E%2E%2F%2E%2E%2Fescape-probe",
	    "/workspace/../escape-probe",
	    "/workspace/%2e%2e/escape-probe",
	    "/workspace/sessions/../../escape-probe",
	    "/etc/passwd",
	    "%2Fetc%2Fpasswd",
	    "/workspacex",
	    "/workspacex/escape-probe",
	    "/",
	    "/tmp",
	    "sub/../../../../escape-probe",
	};
	char *probe = xasprintf("%s/tenants/acme/escape-probe", srv.dir);
	char *probe2 = xasprintf("%s/tenants/escape-probe", srv.dir);
	char *probe3 = xasprintf("%s/tenants/acme/workspacex", srv.dir);
	for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
		static const char *get_routes[] = {"read", "read_buffer", "stat", "readdir", "exists"};
		for (size_t g = 0; g < sizeof get_routes / sizeof get_routes[0]; g++) {
			char *url = xasprintf("/fs/%s?path=%s", get_routes[g], raw[i]);
			call("GET", url, tok_rw, k, NULL, NULL, NULL, 0, &r);
			if (r.status != 403)
				fprintf(stderr, "  %s\n", url);
			it_expect_error(&r, 403, "outside_workspace");
			it_resp_free(&r);
			free(url);
		}
		char *url = xasprintf("/fs/write?path=%s", raw[i]);
		call("PUT", url, tok_rw, k, NULL, NULL, "pwned", 5, &r);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
		free(url);
	}
	/* The same through JSON bodies (decoded paths). */
	static const char *dec[] = {"../../../escape-probe",
				    "/workspace/../escape-probe",
				    "/etc/passwd",
				    "/workspacex",
				    "/",
				    "/workspace/sessions/../../escape-probe"};
	for (size_t i = 0; i < sizeof dec / sizeof dec[0]; i++) {
		fs_post("mkdir", k, json_pack("{s:s, s:b}", "path", dec[i], "recursive", 1), &r);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
		fs_post("rm", k, json_pack("{s:s, s:b, s:b}", "path", dec[i], "recursive", 1, "force", 1),
			&r);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
		fs_post("move", k, json_pack("{s:s, s:s}", "from", dec[i], "to", "stolen"), &r);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
		fs_post("move", k, json_pack("{s:s, s:s}", "from", ".", "to", dec[i]), &r);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
	}
	assert_false(host_exists(probe));
	assert_false(host_exists(probe2));
	assert_false(host_exists(probe3));
	free(probe);
	free(probe2);
	free(probe3);
	char *stolen = host_in(k, "stolen");
	assert_false(host_exists(stolen));
	free(stolen);
	/* The host's /etc/passwd was not replaced (the server runs as root here). */
	struct stat st;
	assert_int_equal(stat("/etc/passwd", &st), 0);
	assert_true(st.st_size > 5);
	/* "..", from a session, is still inside: the sessions directory. */
	fs_get("readdir", "..", k, NULL, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	assert_outside_untouched();
}

static void test_escape_by_symlink(void **state)
{
	(void)state;
	const char *k = "t-symlink";
	struct it_resp r;
	touch_session(k);
	put_ok("inner/real.txt", k, "real", 4);
	char *secret = xasprintf("%s/secret", outside);
	char *missing = xasprintf("%s/nothere", outside);
	struct {
		const char *name, *target;
	} links[] = {
	    {"esc", outside},	  /* absolute, to a directory outside */
	    {"escf", secret},	  /* absolute, to a file outside */
	    {"escd", missing},	  /* absolute, dangling outside */
	    {"up", "../../.."},	  /* relative, to the workspace's parent */
	    {"inner/l", outside}, /* deeper */
	    {"inner/rel", "../../../../../../../../../../../../../../../../../../../../.."},
	};
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
		char *hp = host_in(k, links[i].name);
		assert_int_equal(symlink(links[i].target, hp), 0);
		free(hp);
	}
	/* A file just outside the workspace, reachable by "up". */
	char *beside = xasprintf("%s/tenants/acme/beside.txt", srv.dir);
	host_put(beside, "beside");
	drain_events();

	static const char *through[] = {"esc/secret",
					"esc/sub/inner.txt",
					"esc",
					"escf",
					"escd",
					"up/beside.txt",
					"inner/l/secret",
					"inner/l/sub",
					"inner/rel/etc/passwd",
					"esc/emptydir",
					"up/workspace",
					"inner/l"};
	for (size_t i = 0; i < sizeof through / sizeof through[0]; i++) {
		static const char *reads[] = {"read", "read_buffer", "readdir"};
		for (size_t g = 0; g < sizeof reads / sizeof reads[0]; g++) {
			fs_get(reads[g], through[i], k, NULL, &r);
			if (r.status != 403)
				fprintf(stderr, "  %s %s\n", reads[g], through[i]);
			it_expect_error(&r, 403, "outside_workspace");
			it_resp_free(&r);
		}
	}
	/* Below a link that leaves: stat and exists refuse too. */
	static const char *below[] = {"esc/secret", "esc/sub", "up/beside.txt", "inner/l/secret",
				      "esc/nothere"};
	for (size_t i = 0; i < sizeof below / sizeof below[0]; i++) {
		fs_get("stat", below[i], k, NULL, &r);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
		fs_get("exists", below[i], k, NULL, &r);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
	}
	/* A link that leaves is described as itself, never followed. */
	static const char *self[] = {"esc", "escf", "escd", "up", "inner/l", "inner/rel"};
	for (size_t i = 0; i < sizeof self / sizeof self[0]; i++) {
		fs_get("stat", self[i], k, NULL, &r);
		it_expect_status(&r, 200);
		json_t *j = body_json(&r);
		assert_string_equal(jstr(j, "type"), "symlink");
		assert_true(json_is_true(json_object_get(j, "is_symlink")));
		assert_null(json_object_get(j, "size"));
		assert_null(json_object_get(j, "mtime"));
		assert_null(json_object_get(j, "mode"));
		json_decref(j);
		it_resp_free(&r);
		fs_get("exists", self[i], k, NULL, &r);
		it_expect_status(&r, 200);
		j = body_json(&r);
		assert_true(json_is_true(json_object_get(j, "exists")));
		json_decref(j);
		it_resp_free(&r);
	}
	assert_outside_untouched();

	/* Writes: through a link, or onto a link that leaves. */
	static const char *writes[] = {"esc/new.txt",	"esc/secret",	     "escf",
				       "escd",		"esc/sub/inner.txt", "esc/deep/er/new.txt",
				       "up/beside.txt", "up/new.txt",	     "inner/l/new.txt"};
	for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
		fs_put(writes[i], k, "pwned", 5, &r);
		if (r.status != 403)
			fprintf(stderr, "  write %s\n", writes[i]);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
	}
	/* mkdir, plain and recursive. */
	static const char *dirs[] = {"esc/newdir", "esc/a/b/c", "esc", "up/newdir", "inner/l/x/y", "escd"};
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		fs_post("mkdir", k, json_pack("{s:s, s:b}", "path", dirs[i], "recursive", 1), &r);
		if (r.status != 403)
			fprintf(stderr, "  mkdir -p %s\n", dirs[i]);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
	}
	post_err("mkdir", k, json_pack("{s:s}", "path", "esc/newdir"), 403, "outside_workspace");
	/* rm below a link that leaves. */
	static const char *rms[] = {"esc/secret", "esc/sub", "esc/emptydir", "up/beside.txt", "inner/l/sub"};
	for (size_t i = 0; i < sizeof rms / sizeof rms[0]; i++) {
		fs_post("rm", k, json_pack("{s:s, s:b, s:b}", "path", rms[i], "recursive", 1, "force", 1),
			&r);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
	}
	/* move out of, or into, a link that leaves. */
	post_err("move", k, json_pack("{s:s, s:s}", "from", "esc/secret", "to", "stolen"), 403, "outside_workspace");
	post_err("move", k, json_pack("{s:s, s:s}", "from", "up/beside.txt", "to", "stolen"), 403, "outside_workspace");
	fs_post("move", k,
		json_pack("{s:s, s:s, s:b}", "from", "inner/real.txt", "to", "esc/planted", "overwrite", 1),
		&r);
	it_expect_error(&r, 403, "outside_workspace");
	it_resp_free(&r);
	fs_post("move", k,
		json_pack("{s:s, s:s, s:b}", "from", "inner/real.txt", "to", "esc/secret", "overwrite", 1),
		&r);
	it_expect_error(&r, 403, "outside_workspace");
	it_resp_free(&r);
	assert_outside_untouched();
	assert_host_content(beside, "beside", 6);
	char *p = xasprintf("%s/tenants/acme/new.txt", srv.dir);
	assert_false(host_exists(p));
	free(p);
	p = xasprintf("%s/tenants/acme/newdir", srv.dir);
	assert_false(host_exists(p));
	free(p);
	p = host_in(k, "inner/real.txt");
	assert_host_content(p, "real", 4);
	free(p);
	p = host_in(k, "stolen");
	assert_false(host_exists(p));
	free(p);

	/* Links themselves may be moved and removed, as links. */
	fs_post("move", k, json_pack("{s:s, s:s}", "from", "escf", "to", "escf2"), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	char lt[256] = {0};
	p = host_in(k, "escf2");
	assert_true(readlink(p, lt, sizeof lt - 1) > 0);
	assert_string_equal(lt, secret);
	free(p);
	/* Recursive removal of a tree holding links that leave removes the links. */
	fs_post("rm", k, json_pack("{s:s, s:b}", "path", "inner", "recursive", 1), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	p = host_in(k, "inner");
	assert_false(host_exists(p));
	free(p);
	static const char *gone[] = {"esc", "escf2", "escd", "up"};
	for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) {
		fs_post("rm", k, json_pack("{s:s, s:b}", "path", gone[i], "recursive", 1), &r);
		it_expect_status(&r, 200);
		it_resp_free(&r);
		p = host_in(k, gone[i]);
		assert_false(host_exists(p));
		free(p);
	}
	assert_outside_untouched();
	assert_host_content(beside, "beside", 6);
	unlink(beside);
	free(beside);
	free(secret);
	free(missing);
}

static void test_in_workspace_links(void **state)
{
	(void)state;
	const char *k = "t-inlinks";
	struct it_resp r;
	put_ok("d/f.txt", k, "inside", 6);
	char *hp = host_in(k, "ld");
	assert_int_equal(symlink("d", hp), 0);
	free(hp);
	/* A link to the workspace root, from inside a session: still inside. */
	hp = host_in(k, "root");
	assert_int_equal(symlink("../..", hp), 0);
	free(hp);
	fs_get("read", "ld/f.txt", k, NULL, &r);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, 6);
	it_resp_free(&r);
	fs_get("readdir", "ld", k, NULL, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	put_ok("ld/g.txt", k, "via link", 8);
	hp = host_in(k, "d/g.txt");
	assert_host_content(hp, "via link", 8);
	free(hp);
	fs_get("stat", "ld", k, NULL, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	assert_string_equal(jstr(j, "type"), "directory");
	assert_true(json_is_true(json_object_get(j, "is_symlink")));
	json_decref(j);
	it_resp_free(&r);
	/* Roots reached through a link are still roots. */
	post_err("rm", k, json_pack("{s:s, s:b}", "path", "root/sessions", "recursive", 1), 403, "forbidden");
	char seg[80];
	it_session_segment(k, seg, sizeof seg);
	char *via = xasprintf("root/sessions/%s", seg);
	post_err("rm", k, json_pack("{s:s, s:b}", "path", via, "recursive", 1), 403, "forbidden");
	free(via);
	hp = host_in(k, "d/f.txt");
	assert_true(host_exists(hp));
	free(hp);
}

static void test_fifo(void **state)
{
	(void)state;
	const char *k = "t-fifo";
	struct it_resp r;
	touch_session(k);
	char *hp = host_in(k, "pipe");
	assert_int_equal(mkfifo(hp, 0644), 0);
	static const char *routes[] = {"read", "read_buffer"};
	for (size_t i = 0; i < 2; i++) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		fs_get(routes[i], "pipe", k, NULL, &r);
		clock_gettime(CLOCK_MONOTONIC, &b);
		it_expect_error(&r, 403, "forbidden");
		it_resp_free(&r);
		assert_true(b.tv_sec - a.tv_sec < 3);
	}
	/* Through a link too. */
	char *lp = host_in(k, "to-pipe");
	assert_int_equal(symlink("pipe", lp), 0);
	free(lp);
	get_err("read", "to-pipe", k, NULL, 403, "forbidden");
	fs_get("stat", "pipe", k, NULL, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	assert_string_equal(jstr(j, "type"), "other");
	json_decref(j);
	it_resp_free(&r);
	struct stat st;
	assert_int_equal(lstat(hp, &st), 0);
	assert_true(S_ISFIFO(st.st_mode));
	free(hp);
	assert_true(it_alive(&srv));
}

/* ---- sessions, tenants, scopes, audit ---- */

static void test_session_isolation(void **state)
{
	(void)state;
	struct it_resp r;
	/* wire.md's example, to keep it_session_segment honest. */
	char seg[80];
	it_session_segment("chat:42", seg, sizeof seg);
	assert_string_equal(seg, "chat_42-29c5c2leqt");
	fs_put("same.txt", "chat:42", "alpha", 5, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	assert_string_equal(jstr(j, "path"), "/workspace/sessions/chat_42-29c5c2leqt/same.txt");
	json_decref(j);
	it_resp_free(&r);
	put_ok("same.txt", "chat:43", "beta", 4);
	fs_get("read", "same.txt", "chat:42", NULL, &r);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, 5);
	assert_memory_equal(r.body, "alpha", 5);
	it_resp_free(&r);
	fs_get("read", "same.txt", "chat:43", NULL, &r);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, 4);
	assert_memory_equal(r.body, "beta", 4);
	it_resp_free(&r);
	char *h1 = host_in("chat:42", "same.txt"), *h2 = host_in("chat:43", "same.txt");
	assert_host_content(h1, "alpha", 5);
	assert_host_content(h2, "beta", 4);
	free(h1);
	free(h2);
	/* Keys longer than the readable prefix, equal in it, stay apart. */
	char ka[80], kb[80];
	memset(ka, 'k', 40);
	memcpy(kb, ka, 40);
	ka[40] = 'A';
	kb[40] = 'B';
	ka[41] = kb[41] = '\0';
	put_ok("who", ka, "A", 1);
	put_ok("who", kb, "B", 1);
	fs_get("read", "who", ka, NULL, &r);
	it_expect_status(&r, 200);
	assert_memory_equal(r.body, "A", 1);
	it_resp_free(&r);
	/* No header: the session "default". */
	fs_put("d.txt", NULL, "d", 1, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	char *want = wire_in("default", "d.txt");
	assert_string_equal(jstr(j, "path"), want);
	free(want);
	json_decref(j);
	it_resp_free(&r);
}

static void test_tenant_isolation(void **state)
{
	(void)state;
	const char *k = "t-tenant";
	struct it_resp r;
	put_ok("secret.txt", k, "acme only", 9);
	char *abs = wire_in(k, "secret.txt");
	char *missing = wire_in(k, "never-was.txt");
	char *e = enc(abs, strlen(abs)), *em = enc(missing, strlen(missing));

	/* globex asks for acme's absolute path: its own workspace, not found. */
	char *u1 = xasprintf("/fs/read?path=%s", e), *u2 = xasprintf("/fs/read?path=%s", em);
	struct it_resp r2;
	call("GET", u1, tok_globex, "t-globex-own", NULL, NULL, NULL, 0, &r);
	call("GET", u2, tok_globex, "t-globex-own", NULL, NULL, NULL, 0, &r2);
	it_expect_error(&r, 404, "not_found");
	it_expect_error(&r2, 404, "not_found");
	/* The same answer as a missing file, but for the path it names. */
	json_t *j1 = body_json(&r), *j2 = body_json(&r2);
	const char *m1 = json_string_value(json_object_get(json_object_get(j1, "error"), "message"));
	const char *m2 = json_string_value(json_object_get(json_object_get(j2, "error"), "message"));
	char *m1x = xstrndup(m1, (size_t)(strstr(m1, abs) - m1)),
	     *m2x = xstrndup(m2, (size_t)(strstr(m2, missing) - m2));
	assert_string_equal(m1x, m2x);
	free(m1x);
	free(m2x);
	json_decref(j1);
	json_decref(j2);
	it_resp_free(&r);
	it_resp_free(&r2);
	free(u1);
	free(u2);
	static const char *routes[] = {"read_buffer", "stat", "readdir"};
	for (size_t i = 0; i < 3; i++) {
		char *u = xasprintf("/fs/%s?path=%s", routes[i], e);
		call("GET", u, tok_globex, "t-globex-own", NULL, NULL, NULL, 0, &r);
		it_expect_error(&r, 404, "not_found");
		it_resp_free(&r);
		free(u);
	}
	u1 = xasprintf("/fs/exists?path=%s", e);
	call("GET", u1, tok_globex, "t-globex-own", NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	assert_non_null(strstr(r.body, "false"));
	it_resp_free(&r);
	free(u1);

	/* globex's listing of /workspace/sessions never shows acme's. */
	call("GET", "/fs/readdir?path=/workspace/sessions", tok_globex, "t-globex-own", NULL, NULL, NULL, 0,
	     &r);
	it_expect_status(&r, 200);
	assert_non_null(strstr(r.body, "t-globex-own-"));
	assert_null(strstr(r.body, "t-tenant-"));
	it_resp_free(&r);

	/* globex's write and rm of the same path touch only globex's workspace. */
	u1 = xasprintf("/fs/write?path=%s", e);
	call("PUT", u1, tok_globex, "t-globex-own", NULL, NULL, "globex", 6, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	free(u1);
	char *mine = host_in(k, "secret.txt");
	assert_host_content(mine, "acme only", 9);
	char seg[80];
	it_session_segment(k, seg, sizeof seg);
	char *theirs = xasprintf("%s/tenants/globex/workspace/sessions/%s/secret.txt", srv.dir, seg);
	assert_host_content(theirs, "globex", 6);
	char *body = xasprintf("{\"path\": \"%s\"}", abs);
	call("POST", "/fs/rm", tok_globex, "t-globex-own", NULL, NULL, body, strlen(body), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	free(body);
	assert_false(host_exists(theirs));
	assert_host_content(mine, "acme only", 9);
	free(theirs);
	free(mine);
	free(abs);
	free(missing);
	free(e);
	free(em);
}

static void test_scopes(void **state)
{
	(void)state;
	const char *k = "t-scopes";
	struct it_resp r;
	put_ok("r.txt", k, "readable", 8);
	/* fs:read reads and cannot change anything. */
	call("GET", "/fs/read?path=r.txt", tok_ro, k, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	call("PUT", "/fs/write?path=ro.txt", tok_ro, k, NULL, NULL, "x", 1, &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	call("PUT", "/fs/write?path=r.txt", tok_ro, k, NULL, NULL, "x", 1, &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	const char *mk = "{\"path\": \"ro-dir\"}", *rm = "{\"path\": \"r.txt\"}",
		   *mv = "{\"from\": \"r.txt\", \"to\": \"moved.txt\"}";
	call("POST", "/fs/mkdir", tok_ro, k, NULL, NULL, mk, strlen(mk), &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	call("POST", "/fs/rm", tok_ro, k, NULL, NULL, rm, strlen(rm), &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	call("POST", "/fs/move", tok_ro, k, NULL, NULL, mv, strlen(mv), &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	char *p = host_in(k, "ro.txt");
	assert_false(host_exists(p));
	free(p);
	p = host_in(k, "ro-dir");
	assert_false(host_exists(p));
	free(p);
	p = host_in(k, "r.txt");
	assert_host_content(p, "readable", 8);
	free(p);
	/* fs:write alone, and audit:read, cannot read. */
	static const char *reads[] = {"read", "read_buffer", "stat", "readdir", "exists"};
	for (size_t i = 0; i < 5; i++) {
		char *u = xasprintf("/fs/%s?path=r.txt", reads[i]);
		call("GET", u, tok_wo, k, NULL, NULL, NULL, 0, &r);
		it_expect_error(&r, 403, "insufficient_scope");
		it_resp_free(&r);
		call("GET", u, tok_audit, k, NULL, NULL, NULL, 0, &r);
		it_expect_error(&r, 403, "insufficient_scope");
		it_resp_free(&r);
		call("GET", u, NULL, k, NULL, NULL, NULL, 0, &r);
		it_expect_error(&r, 401, "unauthorized");
		it_resp_free(&r);
		free(u);
	}
	call("PUT", "/fs/write?path=wo.txt", tok_audit, k, NULL, NULL, "x", 1, &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	call("PUT", "/fs/write?path=wo.txt", tok_wo, k, NULL, NULL, "x", 1, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
}

/* The audit record with this request id, polled for up to 2 s. */
static json_t *find_audit(const char *request_id)
{
	for (int i = 0; i < 40; i++) {
		struct it_resp r;
		char *u = NULL;
		call("GET", "/audit?limit=1000", tok_audit, NULL, NULL, NULL, NULL, 0, &r);
		json_t *j = r.status == 200 ? it_json(&r) : NULL;
		it_resp_free(&r);
		json_t *found = NULL;
		for (;;) {
			size_t k;
			json_t *rec;
			json_array_foreach(json_object_get(j, "records"), k, rec)
			{
				const char *rid = json_string_value(json_object_get(rec, "request_id"));
				if (rid && strcmp(rid, request_id) == 0) {
					found = json_incref(rec);
					break;
				}
			}
			json_t *next = json_object_get(j, "next");
			if (found || !json_is_string(next))
				break;
			u = xasprintf("/audit?limit=1000&after=%s", json_string_value(next));
			call("GET", u, tok_audit, NULL, NULL, NULL, NULL, 0, &r);
			free(u);
			json_decref(j);
			j = r.status == 200 ? it_json(&r) : NULL;
			it_resp_free(&r);
			if (!j)
				break;
		}
		json_decref(j);
		if (found)
			return found;
		usleep(50000);
	}
	return NULL;
}

static void test_audit_target(void **state)
{
	(void)state;
	const char *k = "t-audit";
	struct it_resp r;
	call("PUT", "/fs/write?path=x/../aud.txt", tok_rw, k, "fs-audit-write", NULL, "audited", 7, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	call("GET", "/fs/read?path=./sub/../aud.txt", tok_rw, k, "fs-audit-read", NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	const char *mv = "{\"from\": \"aud.txt\", \"to\": \"/workspace/sessions/../aud2.txt\"}";
	call("POST", "/fs/move", tok_rw, k, "fs-audit-move", NULL, mv, strlen(mv), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	call("GET", "/fs/read?path=/workspace/../etc/passwd", tok_rw, k, "fs-audit-escape", NULL, NULL, 0,
	     &r);
	it_expect_error(&r, 403, "outside_workspace");
	it_resp_free(&r);
	call("PUT", "/fs/write?path=nope.txt", tok_ro, k, "fs-audit-scope", NULL, "x", 1, &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);

	json_t *a = find_audit("fs-audit-write");
	assert_non_null(a);
	char *want = wire_in(k, "aud.txt");
	assert_string_equal(jstr(a, "target"), want);
	assert_string_equal(jstr(a, "route"), "/fs/write");
	assert_string_equal(jstr(a, "method"), "PUT");
	assert_string_equal(jstr(a, "session"), k);
	assert_string_equal(jstr(a, "outcome"), "ok");
	assert_int_equal(json_integer_value(json_object_get(a, "status")), 200);
	assert_int_equal(json_integer_value(json_object_get(a, "bytes_in")), 7);
	json_decref(a);

	a = find_audit("fs-audit-read");
	assert_non_null(a);
	assert_string_equal(jstr(a, "target"), want);
	assert_int_equal(json_integer_value(json_object_get(a, "bytes_out")), 7);
	json_decref(a);
	free(want);

	a = find_audit("fs-audit-move");
	assert_non_null(a);
	char *from = wire_in(k, "aud.txt");
	char *t = xasprintf("%s -> /workspace/aud2.txt", from);
	assert_string_equal(jstr(a, "target"), t);
	free(t);
	free(from);
	json_decref(a);

	/* A refused escape is recorded with the path that was asked for. */
	a = find_audit("fs-audit-escape");
	assert_non_null(a);
	assert_string_equal(jstr(a, "outcome"), "denied");
	assert_int_equal(json_integer_value(json_object_get(a, "status")), 403);
	assert_string_equal(jstr(a, "target"), "/workspace/../etc/passwd");
	json_decref(a);
	a = find_audit("fs-audit-scope");
	assert_non_null(a);
	assert_string_equal(jstr(a, "outcome"), "denied");
	json_decref(a);
}

static void test_sessions_routes(void **state)
{
	(void)state;
	struct it_resp r;
	const char *k = "gw:del \"me\" \\ {}";
	put_ok("a/b/c.txt", k, "bye", 3);
	/* Links that leave, inside the session, are removed as links. */
	char *hp = host_in(k, "a/esc");
	assert_int_equal(symlink(outside, hp), 0);
	free(hp);
	hp = host_in(k, "escf");
	char *secret = xasprintf("%s/secret", outside);
	assert_int_equal(symlink(secret, hp), 0);
	free(secret);
	free(hp);
	drain_events();

	/* Listed with any of audit:read, fs:read, exec. */
	const char *listers[] = {tok_audit, tok_ro, tok_rw};
	for (size_t i = 0; i < 3; i++) {
		call("GET", "/sessions", listers[i], NULL, NULL, NULL, NULL, 0, &r);
		it_expect_status(&r, 200);
		expect_header(&r, "Content-Type", "application/json");
		json_t *j = body_json(&r);
		assert_int_equal(json_object_size(j), 1);
		json_t *v = json_object_get(j, "sessions");
		assert_true(json_is_array(v));
		json_t *mine = NULL, *s;
		size_t x;
		json_array_foreach(v, x, s)
		{
			assert_int_equal(json_object_size(s), 4);
			assert_true(is_rfc3339(jstr(s, "created_at")));
			assert_true(is_rfc3339(jstr(s, "last_used_at")));
			assert_true(strcmp(jstr(s, "created_at"), jstr(s, "last_used_at")) <= 0);
			assert_true(strncmp(jstr(s, "dir"), "/workspace/sessions/", 20) == 0);
			if (strcmp(jstr(s, "key"), k) == 0)
				mine = s;
		}
		assert_non_null(mine);
		char *dir = wire_in(k, "");
		assert_string_equal(jstr(mine, "dir"), dir);
		free(dir);
		json_decref(j);
		it_resp_free(&r);
	}
	call("GET", "/sessions", tok_wo, NULL, NULL, NULL, NULL, 0, &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	call("GET", "/sessions?limit=0", tok_audit, NULL, NULL, NULL, NULL, 0, &r);
	it_expect_error(&r, 400, "bad_request");
	it_resp_free(&r);
	call("GET", "/sessions?limit=1", tok_audit, NULL, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	assert_int_equal(json_array_size(json_object_get(j, "sessions")), 1);
	json_decref(j);
	it_resp_free(&r);
	/* Listing is not using: it creates no session (ops has none). */
	for (int i = 0; i < 2; i++) {
		call("GET", "/sessions", tok_ops, NULL, NULL, NULL, NULL, 0, &r);
		it_expect_status(&r, 200);
		j = body_json(&r);
		assert_int_equal(json_array_size(json_object_get(j, "sessions")), 0);
		json_decref(j);
		it_resp_free(&r);
	}
	/* Another tenant's list never shows acme's. */
	call("GET", "/sessions", tok_globex, NULL, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	assert_null(strstr(r.body, "gw:del"));
	it_resp_free(&r);

	/* Deleting needs fs:write; globex cannot delete acme's. */
	call("DELETE", "/session", tok_ro, k, NULL, NULL, NULL, 0, &r);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	call("DELETE", "/session", tok_globex, k, NULL, NULL, NULL, 0, &r);
	it_expect_error(&r, 404, "not_found");
	it_resp_free(&r);
	char *dirp = host_in(k, "");
	assert_true(host_exists(dirp));

	call("DELETE", "/session", tok_rw, k, "fs-session-delete", NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_string_equal(jstr(j, "key"), k);
	assert_true(json_is_true(json_object_get(j, "removed")));
	assert_int_equal(json_object_size(j), 2);
	json_decref(j);
	it_resp_free(&r);
	assert_false(host_exists(dirp));
	assert_outside_untouched();
	call("GET", "/sessions", tok_audit, NULL, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	assert_null(strstr(r.body, "gw:del"));
	it_resp_free(&r);
	call("DELETE", "/session", tok_rw, k, NULL, NULL, NULL, 0, &r);
	it_expect_error(&r, 404, "not_found");
	it_resp_free(&r);
	call("DELETE", "/session", tok_rw, "never-used", NULL, NULL, NULL, 0, &r);
	it_expect_error(&r, 404, "not_found");
	it_resp_free(&r);
	json_t *a = find_audit("fs-session-delete");
	assert_non_null(a);
	char *dw = wire_in(k, "");
	assert_string_equal(jstr(a, "target"), dw);
	free(dw);
	json_decref(a);

	/* Used again, the session comes back with a fresh directory. */
	fs_post("mkdir", k, json_pack("{s:s}", "path", "again"), &r);
	it_expect_status(&r, 201);
	it_resp_free(&r);
	assert_true(host_exists(dirp));
	fs_get("readdir", ".", k, NULL, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_int_equal(json_array_size(json_object_get(j, "entries")), 1);
	json_decref(j);
	it_resp_free(&r);

	/* A session directory that a command replaced by a link to the
	 * outside: the link goes, the outside stays. */
	rm_rf(dirp);
	assert_int_equal(symlink(outside, dirp), 0);
	drain_events();
	call("DELETE", "/session", tok_rw, k, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	assert_false(host_exists(dirp));
	assert_outside_untouched();
	free(dirp);

	/* The default session, by no header. */
	touch_session(NULL);
	hp = host_in("default", "");
	assert_true(host_exists(hp));
	call("DELETE", "/session", tok_rw, NULL, NULL, NULL, NULL, 0, &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_string_equal(jstr(j, "key"), "default");
	json_decref(j);
	it_resp_free(&r);
	assert_false(host_exists(hp));
	free(hp);
	/* The workspace and other sessions are left alone. */
	hp = host_in("chat:42", "same.txt");
	assert_host_content(hp, "alpha", 5);
	free(hp);
}

/* ---- the buffered limit ---- */

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
	json_t *j = body_json(&r);
	const char *hint = json_string_value(json_object_get(json_object_get(j, "error"), "retry_hint"));
	assert_non_null(hint);
	assert_non_null(strstr(hint, "stream"));
	json_decref(j);
	it_resp_free(&r);
	char *hp = host_in(k, "big.txt");
	assert_false(host_exists(hp));
	free(hp);
	/* Exactly the limit is fine. */
	put_ok("limit.txt", k, big, n - 1);
	free(big);
	char *sd = host_in(k, "");
	assert_int_equal(count_temps(sd), 0);
	free(sd);

	hp = host_in(k, "huge.bin");
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
	    cmocka_unit_test(test_write_read),
	    cmocka_unit_test(test_empty_file),
	    cmocka_unit_test(test_binary_and_ranges),
	    cmocka_unit_test(test_write_atomic_replace),
	    cmocka_unit_test(test_stat),
	    cmocka_unit_test(test_readdir),
	    cmocka_unit_test(test_exists),
	    cmocka_unit_test(test_mkdir),
	    cmocka_unit_test(test_rm),
	    cmocka_unit_test(test_move),
	    cmocka_unit_test(test_type_errors),
	    cmocka_unit_test(test_bad_request),
	    cmocka_unit_test(test_escape_by_path),
	    cmocka_unit_test(test_escape_by_symlink),
	    cmocka_unit_test(test_in_workspace_links),
	    cmocka_unit_test(test_fifo),
	    cmocka_unit_test(test_session_isolation),
	    cmocka_unit_test(test_tenant_isolation),
	    cmocka_unit_test(test_scopes),
	    cmocka_unit_test(test_audit_target),
	    cmocka_unit_test(test_sessions_routes),
	    cmocka_unit_test(test_too_large_default),
	    cmocka_unit_test(test_too_large_small_limit),
	};
	return cmocka_run_group_tests_name("fs", tests, fs_setup, fs_teardown);
}
