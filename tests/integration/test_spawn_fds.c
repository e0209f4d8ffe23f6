/* The fds a command inherits while the server holds many connections
 * (issue 15, P9): the spawn no longer copies the server's fd table
 * (sandbox/backend.c, CLONE_FILES and CLOSE_RANGE_UNSHARE below a block of
 * low fds reserved per runner thread), so check what must not change:
 * with 300 idle connections open, commands started at the same time by
 * two runner threads, through bwrap and local, have exactly 0, 1 and 2;
 * no process under the server (bwrap, its children) holds a socket of
 * the server or a file of its data directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#define IDLE_CONNS 300
#define ROUNDS 12

static struct it_server srv;
static char *tok_acme, *tok_globex;
static const struct it_tok toks[] = {
    {&tok_acme, "acme", "exec fs:read fs:write"},
    {&tok_globex, "globex", "exec fs:read fs:write"},
};
static const char *extra[10];
static int idle[IDLE_CONNS];

static int setup(void **state)
{
	(void)state;
	const char *const args[] = {"--set",
				    it_uid_base_arg(NULL),
				    "--set",
				    "runner-threads=2",
				    "--set",
				    "backends=bwrap,local",
				    "--allow-unsafe-local",
				    NULL};
	memcpy(extra, args, sizeof args);
	if (it_start_minted(&srv, extra, toks, IT_NTOKS(toks)) != 0)
		return -1;
	char *out = it_cli(&srv, NULL, "tenant set globex backend=local");
	free(out);
	for (int i = 0; i < IDLE_CONNS; i++)
		idle[i] = -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < IDLE_CONNS; i++)
		if (idle[i] >= 0)
			close(idle[i]);
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* Open the idle connections and wait until the server holds them all. */
static void open_idle(void)
{
	int before = it_fd_count(&srv);
	for (int i = 0; i < IDLE_CONNS; i++) {
		idle[i] = it_connect(&srv);
		assert_true(idle[i] >= 0);
	}
	long until = it_now_ms() + 20000;
	while (it_fd_count(&srv) < before + IDLE_CONNS && it_now_ms() < until)
		usleep(20000);
	assert_true(it_fd_count(&srv) >= before + IDLE_CONNS);
}

/* Commands of both tenants (bwrap and local) at once, ROUNDS times: each
 * lists its own fds. Two runner threads spawn concurrently. */
static void test_exact_fds_under_many_connections(void **state)
{
	(void)state;
	open_idle();
	const char *cmd = "ls /proc/$$/fd; readlink /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2 | "
			  "grep -c -e socket -e sandboxd -e '\\.db' ; true";
	for (int round = 0; round < ROUNDS; round++) {
		struct bg_req b[4];
		pthread_barrier_t bar;
		pthread_barrier_init(&bar, NULL, 4);
		for (int i = 0; i < 4; i++)
			bg_exec(&b[i], &srv, i % 2 ? tok_globex : tok_acme,
				json_pack("{s:s, s:i}", "command", cmd, "timeout_s", 30), &bar);
		for (int i = 0; i < 4; i++) {
			json_t *r = bg_join(&b[i]);
			if (!r || b[i].resp.status != 200)
				fprintf(stderr, "round %d, %d: %ld\n", round, i, b[i].resp.status);
			assert_int_equal(b[i].resp.status, 200);
			const char *out = ex_stdout_ok(r);
			if (strcmp(out, "0\n1\n2\n0\n") != 0)
				fprintf(stderr, "%s: %s\n", i % 2 ? "local" : "bwrap", out);
			assert_string_equal(out, "0\n1\n2\n0\n");
			json_decref(r);
			it_resp_free(&b[i].resp);
		}
		pthread_barrier_destroy(&bar);
	}
}

/* Whether pid descends from the server (ppid chain, bounded). */
static bool under_server(long pid)
{
	for (int depth = 0; depth < 16 && pid > 1; depth++) {
		char path[64];
		snprintf(path, sizeof path, "/proc/%ld/stat", pid);
		char *st = it_read_file(path, NULL);
		if (!st)
			return false;
		const char *rp = strrchr(st, ')');
		long ppid = -1;
		if (rp)
			sscanf(rp + 2, "%*c %ld", &ppid);
		free(st);
		if (ppid == (long)srv.pid)
			return true;
		pid = ppid;
	}
	return false;
}

/* Whether one of the server's own fds links to what. */
static bool server_holds(const char *what)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)srv.pid);
	DIR *d = opendir(path);
	bool hit = false;
	struct dirent *e;
	while (d && !hit && (e = readdir(d))) {
		char p[384], link[256];
		snprintf(p, sizeof p, "%s/%s", path, e->d_name);
		ssize_t n = readlink(p, link, sizeof link - 1);
		if (n > 0) {
			link[n] = '\0';
			hit = strcmp(link, what) == 0;
		}
	}
	if (d)
		closedir(d);
	return hit;
}

/* Every fd of every process under the server: no socket the server holds
 * (its connections, its listener) and no file of its data directory.
 * Returns how many processes were looked at; *bad counts offenders. */
static int scan_descendants(int *bad)
{
	DIR *d = opendir("/proc");
	int seen = 0;
	struct dirent *e;
	*bad = 0;
	while (d && (e = readdir(d))) {
		long pid = strtol(e->d_name, NULL, 10);
		if (pid <= 0 || !under_server(pid))
			continue;
		seen++;
		char path[64];
		snprintf(path, sizeof path, "/proc/%ld/fd", pid);
		DIR *fd = opendir(path);
		struct dirent *f;
		while (fd && (f = readdir(fd))) {
			char p[384], link[512];
			snprintf(p, sizeof p, "%s/%s", path, f->d_name);
			ssize_t n = readlink(p, link, sizeof link - 1);
			if (n <= 0)
				continue;
			link[n] = '\0';
			if (strstr(link, srv.dir) ||
			    (strncmp(link, "socket:", 7) == 0 && server_holds(link))) {
				fprintf(stderr, "pid %ld fd %s -> %s\n", pid, f->d_name, link);
				(*bad)++;
			}
		}
		if (fd)
			closedir(fd);
	}
	if (d)
		closedir(d);
	return seen;
}

/* While commands of both backends run (bwrap's monitor and init, the
 * shells), nothing under the server holds one of its sockets or files. */
static void test_descendants_hold_nothing_of_the_server(void **state)
{
	(void)state;
	if (idle[0] < 0)
		open_idle();
	struct bg_req b[2];
	for (int i = 0; i < 2; i++)
		bg_exec(&b[i], &srv, i ? tok_globex : tok_acme,
			json_pack("{s:s, s:i}", "command", "while [ ! -e stop ]; do sleep 0.05; done",
				  "timeout_s", 30),
			NULL);
	/* Wait until both commands run (bwrap started: its processes exist)
	 * and no process under the server holds anything of it. A child the
	 * warm pool forks meanwhile holds the server's fds for the moment
	 * between its fork and its close_range: that passes; what the
	 * commands and their sandboxes hold stays, and fails at the deadline. */
	long until = it_now_ms() + 20000;
	int bad = 0, seen = 0;
	while (it_now_ms() < until) {
		seen = scan_descendants(&bad);
		if (seen >= 3 && !bad)
			break;
		usleep(30000);
	}
	assert_true(seen >= 3); /* bwrap, its child, and the local shell at least */
	assert_int_equal(bad, 0);
	for (int i = 0; i < 2; i++) {
		struct it_resp w;
		assert_int_equal(it_http(&srv, "PUT", "/fs/write?path=/workspace/stop",
					 i ? tok_globex : tok_acme, NULL, "x", 1, &w),
				 0);
		it_expect_status(&w, 200);
		it_resp_free(&w);
	}
	for (int i = 0; i < 2; i++) {
		json_t *r = bg_join(&b[i]);
		assert_int_equal(b[i].resp.status, 200);
		json_decref(r);
		it_resp_free(&b[i].resp);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exact_fds_under_many_connections),
	    cmocka_unit_test(test_descendants_hold_nothing_of_the_server),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
