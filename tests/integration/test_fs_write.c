/* The buffered file routes that change the workspace, against the real
 * binary: atomic replace on write, mkdir, rm and move, their success shapes
 * and what they leave on the host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "it_fs.h"

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
	assert_false(session_exists(k, "x"));

	fs_post("mkdir", k, json_pack("{s:s, s:b}", "path", "x/y/z", "recursive", 1), &r);
	it_expect_status(&r, 201);
	assert_echoed_path(&r, k, "x/y/z");
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
	post_err("mkdir", k, json_pack("{s:s, s:b}", "path", "f/sub", "recursive", 1), 409,
		 "not_a_directory");
	post_err("mkdir", k, json_pack("{s:s}", "path", "f/sub"), 409, "not_a_directory");

	/* Bodies: missing path, wrong type, unknown field, not JSON. */
	post_err("mkdir", k, json_pack("{s:b}", "recursive", 1), 400, "bad_request");
	post_err("mkdir", k, json_pack("{s:s, s:s}", "path", "q", "recursive", "yes"), 400, "bad_request");
	post_err("mkdir", k, json_pack("{s:s, s:b}", "path", "q", "recursve", 1), 400, "bad_request");
	post_err("mkdir", k, json_pack("{s:i}", "path", 5), 400, "bad_request");
	assert_false(session_exists(k, "q"));
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
	assert_false(session_exists(k, "f.txt"));

	fs_post("mkdir", k, json_pack("{s:s}", "path", "empty"), &r);
	it_expect_status(&r, 201);
	it_resp_free(&r);
	fs_post("rm", k, json_pack("{s:s}", "path", "empty"), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	assert_false(session_exists(k, "empty"));

	put_ok("full/a/b.txt", k, "x", 1);
	put_ok("full/c.txt", k, "x", 1);
	post_err("rm", k, json_pack("{s:s}", "path", "full"), 409, "not_empty");
	assert_true(session_exists(k, "full/a/b.txt"));
	fs_post("rm", k, json_pack("{s:s, s:b}", "path", "full", "recursive", 1), &r);
	it_expect_status(&r, 200);
	j = body_json(&r);
	assert_true(json_is_true(json_object_get(j, "removed")));
	json_decref(j);
	it_resp_free(&r);
	assert_false(session_exists(k, "full"));

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
	char *hp = host_in(k, "to-keep");
	assert_int_equal(symlink("keep", hp), 0);
	fs_post("rm", k, json_pack("{s:s, s:b}", "path", "to-keep", "recursive", 1), &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	assert_false(host_exists(hp));
	free(hp);
	assert_session_content(k, "keep/inner.txt", "keep", 4);

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
	assert_true(session_exists(k, "keep/inner.txt"));
	assert_true(session_exists("t-rm-other", ""));
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
	post_err("move", k, json_pack("{s:s, s:s}", "from", "b.txt", "to", "no/dir/x"), 404,
		 "parent_missing");
	assert_host_content(hb, "AAA", 3);

	/* Directories move whole; a file does not replace a directory. */
	put_ok("dir/in.txt", k, "in", 2);
	post_err("move", k, json_pack("{s:s, s:s, s:b}", "from", "b.txt", "to", "dir", "overwrite", 1), 409,
		 "is_a_directory");
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
	post_err("move", k, json_pack("{s:s, s:s}", "from", ".", "to", "/workspace/elsewhere"), 403,
		 "forbidden");
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_write_atomic_replace),
	    cmocka_unit_test(test_mkdir),
	    cmocka_unit_test(test_rm),
	    cmocka_unit_test(test_move),
	};
	return cmocka_run_group_tests_name("fs_write", tests, fs_setup, fs_teardown);
}
