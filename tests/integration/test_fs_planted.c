/* What a tenant can put at a path the read routes open (security.md item
 * 7, issue 15's read path): FIFOs with and without a writer, a UNIX
 * socket, the device nodes a command can or cannot make, a directory,
 * links out, to a FIFO, dangling and looping, and a path swapped between
 * a file, a FIFO and a link out while it is read. Everything is planted
 * by commands in the real bwrap sandbox (devices a command cannot make
 * are planted from the host, as root or a command of the local backend
 * could). For each, GET /fs/read and /fs/read_buffer answer at once with
 * the documented error, never block a server thread (other requests are
 * still answered, also while many such reads run at once), never consume
 * a FIFO's data, and never serve anything but the regular file's bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_agent.h"

/* A read of a planted object answers within this (it never waits for it). */
#define ANSWER_MS 5000

static struct it_server srv;
static long uid_base;
static char *tok, *tok_globex;
static const struct it_tok toks[] = {{&tok, "acme", NULL}, {&tok_globex, "globex", NULL}};
static char sess[600]; /* the default session's directory on the host */

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", it_uid_base_arg(&uid_base), NULL};
	if (it_start_minted(&srv, extra, toks, IT_NTOKS(toks)) < 0)
		return -1;
	char seg[80];
	it_session_segment("default", seg, sizeof seg);
	snprintf(sess, sizeof sess, "%s/tenants/acme/workspace/sessions/%s", srv.dir, seg);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* Run cmd in acme's default session; its stdout (caller frees). */
static char *sh(const char *cmd)
{
	json_t *r = ex_run(&srv, tok, cmd);
	char *out = xstrdup(ex_stdout_ok(r));
	json_decref(r);
	return out;
}

/* GET /fs/<route>?path=rel as acme, answered within ANSWER_MS. */
static void get(const char *route, const char *rel, struct it_resp *r)
{
	char *path = xasprintf("/fs/%s?path=%s", route, rel);
	long t0 = it_now_ms();
	assert_int_equal(it_http(&srv, "GET", path, tok, NULL, NULL, 0, r), 0);
	long ms = it_now_ms() - t0;
	if (ms >= ANSWER_MS)
		fprintf(stderr, "GET %s took %ld ms\n", path, ms);
	assert_true(ms < ANSWER_MS);
	free(path);
}

/* Both read routes answer rel with this wire error. */
static void reads_refused(const char *rel, long status, const char *code)
{
	static const char *const routes[] = {"read", "read_buffer"};
	for (size_t i = 0; i < 2; i++) {
		struct it_resp r;
		get(routes[i], rel, &r);
		it_expect_error(&r, status, code);
		it_resp_free(&r);
	}
}

/* GET /fs/read?path=rel answers 200 with exactly want. */
static void read_is(const char *rel, const char *want)
{
	struct it_resp r;
	get("read", rel, &r);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, strlen(want));
	assert_memory_equal(r.body ? r.body : "", want, r.len);
	it_resp_free(&r);
}

/* The server still serves: another tenant's read and a fresh file of acme. */
static void still_served(void)
{
	struct it_resp r;
	assert_int_equal(it_http(&srv, "PUT", "/fs/write?path=probe.txt", tok_globex, NULL, "ok", 2, &r), 0);
	it_expect_status(&r, 200);
	it_resp_free(&r);
	assert_int_equal(it_http(&srv, "GET", "/fs/read?path=probe.txt", tok_globex, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, 2);
	assert_memory_equal(r.body, "ok", 2);
	it_resp_free(&r);
}

static void host_lstat(const char *rel, struct stat *st)
{
	char *p = xasprintf("%s/%s", sess, rel);
	assert_int_equal(lstat(p, st), 0);
	free(p);
}

/* A background command (its id), running. */
static void start_bg(const char *id, const char *cmd)
{
	json_t *v = ag_expect(
	    &srv, tok, NULL, "/exec",
	    json_pack("{s:s, s:s, s:b, s:i}", "command", cmd, "id", id, "background", 1, "timeout_s", 120),
	    202);
	json_decref(v);
}

static void stop_bg(const char *id)
{
	char *path = xasprintf("/exec/%s/cancel", id);
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", path, tok, NULL, NULL, 0, &r), 0);
	assert_true(r.status == 202 || r.status == 409); /* 409: it had ended already */
	it_resp_free(&r);
	free(path);
	json_t *v = ex_wait_state(&srv, tok, id, "cancelled|exited|timed_out", 30000);
	assert_non_null(v);
	json_decref(v);
}

/* Wait until rel can be read (a background command made it). */
static void wait_file(const char *rel)
{
	long until = it_now_ms() + 30000;
	for (;;) {
		struct it_resp r;
		get("read", rel, &r);
		long st = r.status;
		it_resp_free(&r);
		if (st == 200)
			return;
		assert_true(it_now_ms() < until);
		usleep(20000);
	}
}

static void test_fifo_without_writer(void **state)
{
	(void)state;
	free(sh("mkfifo p1"));
	reads_refused("p1", 403, "forbidden");
	struct stat st;
	host_lstat("p1", &st);
	assert_true(S_ISFIFO(st.st_mode));
	struct it_resp r;
	get("stat", "p1", &r);
	it_expect_status(&r, 200);
	json_t *j = it_json(&r);
	assert_string_equal(jstr(j, "type"), "other");
	json_decref(j);
	it_resp_free(&r);
	still_served();
}

/* A FIFO a command holds open with bytes in it: refused, and the bytes
 * are still there for the command's next reader. */
static void test_fifo_with_data(void **state)
{
	(void)state;
	start_bg("fifo-holder", "mkfifo p2 && exec 3<>p2 && printf data >&3 && echo up > p2.ready && "
				"sleep 100");
	wait_file("p2.ready");
	reads_refused("p2", 403, "forbidden");
	char *out = sh("timeout 10 head -c 4 p2");
	assert_string_equal(out, "data");
	free(out);
	stop_bg("fifo-holder");
	still_served();
}

/* A writer blocked in open(2) until some reader comes: the routes answer
 * at once all the same, and never with the writer's bytes. */
static void test_fifo_writer_waiting(void **state)
{
	(void)state;
	free(sh("mkfifo p3"));
	start_bg("fifo-writer", "echo up > p3.ready; echo secret-bytes > p3; sleep 100");
	wait_file("p3.ready");
	for (int i = 0; i < 3; i++) {
		struct it_resp r;
		get(i % 2 ? "read_buffer" : "read", "p3", &r);
		it_expect_error(&r, 403, "forbidden");
		assert_null(r.body ? memmem(r.body, r.len, "secret-bytes", 12) : NULL);
		it_resp_free(&r);
	}
	stop_bg("fifo-writer");
	still_served();
}

struct fifo_reader {
	pthread_t th;
	int refused, other;
};

static void *fifo_reader_main(void *arg)
{
	struct fifo_reader *f = arg;
	for (int i = 0; i < 5; i++) {
		struct it_resp r;
		if (it_http(&srv, "GET", "/fs/read?path=p4", tok, NULL, NULL, 0, &r) != 0) {
			f->other++;
			continue;
		}
		if (r.status == 403)
			f->refused++;
		else
			f->other++;
		it_resp_free(&r);
	}
	return NULL;
}

/* Many reads of a FIFO at once (more than the server has event and pool
 * threads): a regular read is answered meanwhile. */
static void test_fifo_many_readers(void **state)
{
	(void)state;
	free(sh("mkfifo p4 && printf regular > r4"));
	enum { N = 24 };
	struct fifo_reader rd[N];
	memset(rd, 0, sizeof rd);
	for (int i = 0; i < N; i++)
		pthread_create(&rd[i].th, NULL, fifo_reader_main, &rd[i]);
	read_is("r4", "regular");
	for (int i = 0; i < N; i++) {
		pthread_join(rd[i].th, NULL);
		assert_int_equal(rd[i].refused, 5);
		assert_int_equal(rd[i].other, 0);
	}
	still_served();
}

static void test_unix_socket(void **state)
{
	(void)state;
	free(sh("python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")'"));
	struct stat st;
	host_lstat("sock", &st);
	assert_true(S_ISSOCK(st.st_mode));
	reads_refused("sock", 403, "forbidden");
	still_served();
}

/* A command cannot make a device but the whiteout (0:0, which no driver
 * opens), nor link or bind one into the workspace; whatever it made is
 * refused or is the plain file it was. */
static void test_devices_from_a_command(void **state)
{
	(void)state;
	free(sh("touch bound; mknod w c 0 0; mknod n c 1 3; mknod b b 7 0; ln /dev/null l; "
		"mount --bind /dev/null bound; cp -a /dev/null c; true"));
	struct stat st;
	static const char *const tried[] = {"n", "b", "l", "c"};
	for (size_t i = 0; i < sizeof tried / sizeof tried[0]; i++) {
		char *p = xasprintf("%s/%s", sess, tried[i]);
		if (lstat(p, &st) == 0) {
			/* cp -a falls back to an empty file, or nothing was made */
			if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
				assert_int_equal(st.st_rdev, makedev(0, 0));
			reads_refused(tried[i], 403, "forbidden");
		}
		free(p);
	}
	/* The bind, had it been allowed, would be in the command's mount
	 * namespace: the server sees the empty file. */
	host_lstat("bound", &st);
	assert_true(S_ISREG(st.st_mode));
	read_is("bound", "");
	char *w = xasprintf("%s/w", sess);
	if (lstat(w, &st) == 0) {
		assert_true(S_ISCHR(st.st_mode));
		assert_int_equal(st.st_rdev, makedev(0, 0));
		reads_refused("w", 403, "forbidden");
	}
	free(w);
	still_served();
}

/* Devices only root on the host (or a command of the unisolated local
 * backend) can make: refused, whichever driver is behind them. */
static void test_devices_from_the_host(void **state)
{
	(void)state;
	free(sh("true")); /* the session directory exists */
	static const struct {
		const char *name;
		mode_t type;
		unsigned maj, min;
	} devs[] = {{"hnull", S_IFCHR, 1, 3},
		    {"hzero", S_IFCHR, 1, 5},
		    {"hnone", S_IFCHR, 0, 0},
		    {"hblk", S_IFBLK, 0, 0},
		    {"htty", S_IFCHR, 5, 0}};
	for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
		char *p = xasprintf("%s/%s", sess, devs[i].name);
		assert_int_equal(mknod(p, devs[i].type | 0666, makedev(devs[i].maj, devs[i].min)), 0);
		reads_refused(devs[i].name, 403, "forbidden");
		unlink(p);
		free(p);
	}
	still_served();
}

static void test_directory(void **state)
{
	(void)state;
	free(sh("mkdir -p d/sub && ln -s d ld"));
	reads_refused("d", 409, "is_a_directory");
	reads_refused("ld", 409, "is_a_directory");
}

static void test_links(void **state)
{
	(void)state;
	free(sh("mkfifo p5 && ln -s /etc/passwd out && ln -s ../../../../../../etc/passwd up && "
		"ln -s p5 lp && ln -s nowhere dangling && ln -s loop loop && printf inside > t && "
		"ln -s t lt && ln -s lt llt"));
	reads_refused("out", 403, "outside_workspace");
	reads_refused("up", 403, "outside_workspace");
	reads_refused("lp", 403, "forbidden");
	reads_refused("dangling", 404, "not_found");
	reads_refused("loop", 400, "bad_request");
	read_is("llt", "inside");
	still_served();
}

/* One name swapped, by rename, between a regular file, a FIFO and a link
 * out, while it is read: every answer is the file's bytes whole, or
 * refused; never the FIFO waited on, never the outside read. */
static void test_swapped_while_read(void **state)
{
	(void)state;
	start_bg("swapper", "while :; do printf AAAA > s.f; mv -fT s.f s; mkfifo s.p; mv -fT s.p s; "
			    "ln -s /etc/passwd s.l; mv -fT s.l s; done");
	wait_file("s");
	bool file = false, fifo = false, out = false;
	long until = it_now_ms() + 60000;
	for (int i = 0; !(file && fifo && out && i >= 60); i++) {
		assert_true(it_now_ms() < until);
		struct it_resp r;
		get(i % 2 ? "read_buffer" : "read", "s", &r);
		if (r.status == 200) {
			assert_int_equal(r.len, 4);
			assert_memory_equal(r.body, "AAAA", 4);
			file = true;
		} else if (r.status == 403 && strcmp(it_error_code(&r), "forbidden") == 0) {
			fifo = true;
		} else if (r.status == 403 && strcmp(it_error_code(&r), "outside_workspace") == 0) {
			out = true;
		} else {
			it_show(&r);
			fail_msg("unexpected answer %ld", r.status);
		}
		it_resp_free(&r);
	}
	stop_bg("swapper");
	still_served();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fifo_without_writer),
	    cmocka_unit_test(test_fifo_with_data),
	    cmocka_unit_test(test_fifo_writer_waiting),
	    cmocka_unit_test(test_fifo_many_readers),
	    cmocka_unit_test(test_unix_socket),
	    cmocka_unit_test(test_devices_from_a_command),
	    cmocka_unit_test(test_devices_from_the_host),
	    cmocka_unit_test(test_directory),
	    cmocka_unit_test(test_links),
	    cmocka_unit_test(test_swapped_while_read),
	};
	return cmocka_run_group_tests_name("fs_planted", tests, setup, teardown);
}
