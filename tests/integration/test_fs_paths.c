/* Escapes from the workspace against the real binary: by path and by
 * symlinks a tenant's command could plant, links that stay inside, and
 * FIFOs. Whatever a test attacks, it checks the outcome from the host: the
 * directory outside the workspace is watched with inotify (no open, read,
 * write, create, delete, attribute change) and compared with a snapshot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "it_fs.h"

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
		post_err("mkdir", k, json_pack("{s:s, s:b}", "path", dec[i], "recursive", 1), 403,
			 "outside_workspace");
		fs_post("rm", k, json_pack("{s:s, s:b, s:b}", "path", dec[i], "recursive", 1, "force", 1),
			&r);
		it_expect_error(&r, 403, "outside_workspace");
		it_resp_free(&r);
		post_err("move", k, json_pack("{s:s, s:s}", "from", dec[i], "to", "stolen"), 403,
			 "outside_workspace");
		post_err("move", k, json_pack("{s:s, s:s}", "from", ".", "to", dec[i]), 403,
			 "outside_workspace");
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
		session_symlink(k, links[i].target, links[i].name);
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
		get_err("stat", below[i], k, NULL, 403, "outside_workspace");
		get_err("exists", below[i], k, NULL, 403, "outside_workspace");
	}
	/* A link that leaves is described as itself, never followed. */
	static const char *self[] = {"esc", "escf", "escd", "up", "inner/l", "inner/rel"};
	for (size_t i = 0; i < sizeof self / sizeof self[0]; i++) {
		assert_stat_symlink(k, self[i]);
		fs_get("exists", self[i], k, NULL, &r);
		it_expect_status(&r, 200);
		json_t *j = body_json(&r);
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
	post_err("move", k, json_pack("{s:s, s:s}", "from", "esc/secret", "to", "stolen"), 403,
		 "outside_workspace");
	post_err("move", k, json_pack("{s:s, s:s}", "from", "up/beside.txt", "to", "stolen"), 403,
		 "outside_workspace");
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
	session_symlink(k, "d", "ld");
	/* A link to the workspace root, from inside a session: still inside. */
	session_symlink(k, "../..", "root");
	fs_get("read", "ld/f.txt", k, NULL, &r);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, 6);
	it_resp_free(&r);
	fs_get("readdir", "ld", k, NULL, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	put_ok("ld/g.txt", k, "via link", 8);
	assert_session_content(k, "d/g.txt", "via link", 8);
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
	assert_true(session_exists(k, "d/f.txt"));
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_escape_by_path),
	    cmocka_unit_test(test_escape_by_symlink),
	    cmocka_unit_test(test_in_workspace_links),
	    cmocka_unit_test(test_fifo),
	};
	return cmocka_run_group_tests_name("fs_paths", tests, fs_setup, fs_teardown);
}
