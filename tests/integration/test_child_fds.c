/* No fd of the server reaches a command's processes (issue 27), not even
 * for the moment between the runner's clone and the exec of bwrap, where
 * the child may block (its cgroup join): the child, held there with
 * ptrace (it_hold.h), and then bwrap's outer process once the command
 * runs, hold none of the server's own files: not its database, not a
 * lock or the cgroup directory it holds its uid-base claim on, not a TCP
 * socket (its listener, its clients), not its epoll, signalfd, eventfd,
 * timerfd or inotify fds. What they may hold: their std fds, bwrap's
 * keep fds (seccomp, info), the cgroup.procs files and the namespace
 * they join. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_agent.h"
#include "it_hold.h"

static struct it_server srv;
static long uid_base;
static char *tok;
static const struct it_tok toks[] = {{&tok, "acme", NULL}};

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", it_uid_base_arg(&uid_base), "--set", "runner-threads=1", NULL};
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* Whether "socket:[ino]" is a TCP socket of this network namespace. */
static bool tcp_socket(const char *link)
{
	unsigned long ino;
	if (sscanf(link, "socket:[%lu]", &ino) != 1)
		return false;
	static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
	char want[32];
	snprintf(want, sizeof want, " %lu ", ino);
	for (size_t i = 0; i < 2; i++) {
		char *t = it_read_file(tables[i], NULL);
		bool hit = t && strstr(t, want);
		free(t);
		if (hit)
			return true;
	}
	return false;
}

/* Whether link (an fd of a command's process) is one of the server's;
 * bwrap makes eventfds and a signalfd of its own, so once it runs (bwrap
 * true) those are not told apart and only files and sockets count. */
static bool server_fd(const char *link, bool bwrap)
{
	if (bwrap && strncmp(link, "anon_inode:", 11) == 0)
		return false;
	static const char *const anon[] = {"anon_inode:[eventpoll]", "anon_inode:[signalfd]",
					   "anon_inode:[eventfd]", "anon_inode:[timerfd]",
					   "anon_inode:inotify"};
	for (size_t i = 0; i < sizeof anon / sizeof anon[0]; i++)
		if (strcmp(link, anon[i]) == 0)
			return true;
	size_t dl = strlen(srv.dir);
	if (strncmp(link, srv.dir, dl) == 0 && (link[dl] == '\0' || link[dl] == '/')) {
		/* a tenant's own files (its workspace, its output) are not the
		 * server's; the database, locks and the rest of the directory are */
		return strncmp(link + dl, "/tenants/", 9) != 0;
	}
	char cg[64];
	int n = snprintf(cg, sizeof cg, "/sandboxd/%ld", uid_base);
	size_t ll = strlen(link);
	if (strncmp(link, "/sys/fs/cgroup/", 15) == 0 && ll >= (size_t)n && strcmp(link + ll - n, cg) == 0)
		return true; /* the directory of the uid-base claim */
	return tcp_socket(link);
}

/* pid's fds that are the server's, each named on stderr. */
static int server_fds_of(pid_t pid, const char *who, bool bwrap)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(dir);
	assert_non_null(d);
	int bad = 0, seen = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char p[384], link[512];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		ssize_t n = readlink(p, link, sizeof link - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		seen++;
		if (server_fd(link, bwrap)) {
			fprintf(stderr, "%s %d holds the server's fd %s -> %s\n", who, (int)pid, e->d_name,
				link);
			bad++;
		}
	}
	closedir(d);
	assert_true(seen >= 3); /* std fds at least: the scan saw the table */
	return bad;
}

/* The server's own table has what server_fd looks for: the check can
 * find it (a database, a TCP listener, an epoll). */
static void test_the_server_holds_what_is_looked_for(void **state)
{
	(void)state;
	char dir[64];
	snprintf(dir, sizeof dir, "/proc/%d/fd", (int)srv.pid);
	DIR *d = opendir(dir);
	assert_non_null(d);
	int hits = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char p[384], link[512];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		ssize_t n = readlink(p, link, sizeof link - 1);
		if (n > 0) {
			link[n] = '\0';
			hits += server_fd(link, false);
		}
	}
	closedir(d);
	assert_true(hits >= 3);
}

/* The child, held at its first call that can block, then bwrap. */
static void test_a_starting_command_holds_no_server_fd(void **state)
{
	(void)state;
	pid_t runner = -1;
	long nr = -1;
	assert_int_equal(it_hold_arm(&srv, &runner), 0);
	json_t *req =
	    json_pack("{s:s, s:b, s:s}", "command", "sleep 120 # child-fds", "background", 1, "id", "fds-1");
	assert_int_equal(ag_post(&srv, tok, NULL, "/exec", req, NULL, NULL), 202);
	pid_t child = it_hold_child(runner, &nr, 20000);
	assert_true(child > 0);
	if (it_cgroups_here())
		assert_int_equal(nr, SYS_write); /* held at its cgroup join */
	int bad = server_fds_of(child, "the child before its exec", false);
	it_hold_release(child);
	assert_int_equal(bad, 0);

	/* bwrap's outer process: the server's child once it exec'ed */
	char exe_path[64], exe[256] = "";
	snprintf(exe_path, sizeof exe_path, "/proc/%d/exe", (int)child);
	for (long until = it_now_ms() + 20000; it_now_ms() < until; usleep(20000)) {
		ssize_t n = readlink(exe_path, exe, sizeof exe - 1);
		exe[n > 0 ? n : 0] = '\0';
		if (strstr(exe, "bwrap"))
			break;
	}
	assert_non_null(strstr(exe, "bwrap"));
	assert_int_equal(server_fds_of(child, "bwrap", true), 0);
	struct it_resp r;
	assert_int_equal(it_http(&srv, "POST", "/exec/fds-1/cancel", tok, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 202);
	it_resp_free(&r);
	json_decref(ex_wait_state(&srv, tok, "fds-1", "cancelled", 20000));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_the_server_holds_what_is_looked_for),
	    cmocka_unit_test(test_a_starting_command_holds_no_server_fd),
	};
	return cmocka_run_group_tests_name("child_fds", tests, setup, teardown);
}
