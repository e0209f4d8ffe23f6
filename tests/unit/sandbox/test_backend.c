#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/errors.h"
#include "common/xmalloc.h"
#include "sandbox/backend.h"

#define TENANT_UID 100000
#define BOMB_UID 100077

struct fixture {
	char base[64]; /* 0755, root's */
	char ws[96];   /* the workspace, owned by TENANT_UID when root */
	struct sbx_backend *local;
	struct sbx_backend *bwrap;
	bool root;
};

struct run {
	int status;
	char out[65536];
	size_t out_len;
	char err[65536];
	size_t err_len;
};

static struct run the_run;

static struct run *new_run(void)
{
	memset(&the_run, 0, sizeof(the_run));
	return &the_run;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

static void remove_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (d) {
		while ((de = readdir(d))) {
			struct stat st;
			char *p;

			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			p = xasprintf("%s/%s", dir, de->d_name);
			if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
				remove_tree(p);
			else
				unlink(p);
			free(p);
		}
		closedir(d);
	}
	rmdir(dir);
}

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	struct sbx_backend_config lc = {.name = "local"};
	static char cg_root[64];
	struct sbx_backend_config bc = {.name = "bwrap", .use_cgroups = true, .cgroup_root = cg_root};

	snprintf(cg_root, sizeof(cg_root), "sandboxd/unit-%d", (int)getpid());
	signal(SIGPIPE, SIG_IGN);
	/* A secret of the "server": must never reach a command. */
	setenv("SBX_CANARY", "canary-secret-value", 1);
	f->root = geteuid() == 0;
	snprintf(f->base, sizeof(f->base), "/tmp/sbx-be-XXXXXX");
	if (!mkdtemp(f->base) || chmod(f->base, 0755) < 0)
		return -1;
	snprintf(f->ws, sizeof(f->ws), "%s/ws", f->base);
	if (mkdir(f->ws, 0755) < 0)
		return -1;
	if (f->root && chown(f->ws, TENANT_UID, TENANT_UID) < 0)
		return -1;
	if (sbx_backend_new(&f->local, &lc) < 0)
		return -1;
	if (sbx_backend_new(&f->bwrap, &bc) < 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sbx_backend_free(&f->local);
	sbx_backend_free(&f->bwrap);
	remove_tree(f->base);
	free(f);
	return 0;
}

static struct sbx_spawn_req base_req(struct fixture *f, const char *cmd, bool drop)
{
	struct sbx_spawn_req r = {
	    .command = cmd,
	    .workspace_host_dir = f->ws,
	    .cwd_rel = "",
	    .uid = TENANT_UID,
	    .gid = TENANT_UID,
	    .drop_privs = drop && f->root,
	    .limits = {.mem_bytes = 1ULL << 30,
		       .nproc = 256,
		       .fsize_bytes = 64ULL << 20,
		       .nofile = 256,
		       .tmp_bytes = 16ULL << 20},
	    .stdin_fd = -1,
	    .stdout_fd = -1,
	    .stderr_fd = -1,
	};
	return r;
}

static void drain(int fd, char *buf, size_t cap, size_t *len, bool *open_)
{
	ssize_t n = read(fd, buf + *len, cap - 1 - *len);

	if (n > 0) {
		*len += (size_t)n;
		if (*len == cap - 1)
			*open_ = false;
	} else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
		*open_ = false;
	}
	buf[*len] = '\0';
}

/* Spawn, collect stdout/stderr until EOF (or kill the group after
 * timeout_ms), wait. Returns the spawn result. */
static int run_timeout(struct sbx_backend *b, struct sbx_spawn_req *req, struct run *r, long timeout_ms)
{
	int outp[2], errp[2];
	bool out_open = true, err_open = true, killed = false;
	int64_t deadline = now_ms() + timeout_ms;
	pid_t pid;
	int pidfd, rc;

	memset(r, 0, sizeof(*r));
	assert_int_equal(pipe2(outp, O_CLOEXEC), 0);
	assert_int_equal(pipe2(errp, O_CLOEXEC), 0);
	req->stdout_fd = outp[1];
	req->stderr_fd = errp[1];
	rc = sbx_backend_spawn(b, req, &pid, &pidfd);
	close(outp[1]);
	close(errp[1]);
	if (rc < 0) {
		close(outp[0]);
		close(errp[0]);
		return rc;
	}
	while (out_open || err_open) {
		struct pollfd p[2] = {{out_open ? outp[0] : -1, POLLIN, 0},
				      {err_open ? errp[0] : -1, POLLIN, 0}};
		int64_t left = deadline - now_ms();

		if (left <= 0 && !killed) {
			kill(-pid, SIGKILL);
			killed = true;
			deadline = now_ms() + 5000;
			continue;
		}
		if (left <= 0)
			break;
		if (poll(p, 2, (int)left) <= 0)
			continue;
		if (p[0].revents)
			drain(outp[0], r->out, sizeof(r->out), &r->out_len, &out_open);
		if (p[1].revents)
			drain(errp[0], r->err, sizeof(r->err), &r->err_len, &err_open);
	}
	close(outp[0]);
	close(errp[0]);
	assert_int_equal(waitpid(pid, &r->status, 0), pid);
	close(pidfd);
	assert_false(killed);
	return 0;
}

static int run(struct sbx_backend *b, struct sbx_spawn_req *req, struct run *r)
{
	return run_timeout(b, req, r, 20000);
}

static int exit_code(const struct run *r)
{
	if (WIFEXITED(r->status))
		return WEXITSTATUS(r->status);
	return 128 + WTERMSIG(r->status);
}

/* Run req on b to its end: it must run and exit with want (128 + signal
 * when killed). */
static void expect_exit(struct sbx_backend *b, struct sbx_spawn_req *req, struct run *r, int want)
{
	assert_int_equal(run(b, req, r), 0);
	assert_int_equal(exit_code(r), want);
}

/* ---- local ---- */

/* The server's own fds may all lie above a command's RLIMIT_NOFILE (a
 * thousand open connections): the std fds must still reach the child. */
static void test_std_fds_above_nofile(void **state)
{
	struct fixture *f = *state;
	int fill[400];
	int n = 0;
	while (n < 400) {
		fill[n] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fill[n] < 0)
			break;
		n++;
	}
	assert_true(n >= 100 && fill[n - 1] > 100);
	struct sbx_spawn_req req = base_req(f, "echo through", true);
	req.limits.nofile = 32;
	struct run *r = new_run();
	int rc = run(f->bwrap, &req, r);
	struct sbx_spawn_req lreq = base_req(f, "echo local", false);
	lreq.limits.nofile = 32;
	struct run *lr = xcalloc(1, sizeof *lr);
	int lrc = run(f->local, &lreq, lr);
	for (int i = 0; i < n; i++)
		close(fill[i]);
	assert_int_equal(rc, 0);
	assert_int_equal(exit_code(r), 0);
	assert_string_equal(r->out, "through\n");
	assert_int_equal(lrc, 0);
	assert_string_equal(lr->out, "local\n");
	free(lr);
}

static void test_local_runs(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req req = base_req(f, "echo hello; echo oops >&2; exit 7", false);
	struct run *r = new_run();

	assert_string_equal(sbx_backend_name(f->local), "local");
	expect_exit(f->local, &req, r, 7);
	assert_string_equal(r->out, "hello\n");
	assert_string_equal(r->err, "oops\n");
}

static void test_local_cwd_env(void **state)
{
	struct fixture *f = *state;
	const char *env[] = {"FOO=bar baz", "LANG=C", NULL};
	struct sbx_spawn_req req = base_req(f,
					    "pwd; echo \"$FOO\"; echo $HOME; echo $LANG; "
					    "echo ${SBX_CANARY-unset}; echo $PATH",
					    false);
	struct run *r = new_run();
	char *sub = xasprintf("%s/sub", f->ws);
	char *want;

	mkdir(sub, 0755);
	req.cwd_rel = "sub";
	req.env = env;
	expect_exit(f->local, &req, r, 0);
	want = xasprintf("%s\nbar baz\n%s\nC\nunset\n/usr/local/bin:/usr/bin:/bin\n", sub, f->ws);
	assert_string_equal(r->out, want);
	free(want);
	free(sub);
}

static void test_local_fds_and_signals(void **state)
{
	struct fixture *f = *state;
	/* A leaked fd of the server (no O_CLOEXEC) must not reach the child;
	 * the server's ignored SIGPIPE must not either. */
	int leak = open("/dev/null", O_RDONLY);
	struct sbx_spawn_req req = base_req(f, "ls /proc/$$/fd; grep SigIgn /proc/self/status", false);
	struct run *r = new_run();

	assert_true(leak > 2);
	expect_exit(f->local, &req, r, 0);
	assert_string_equal(r->out, "0\n1\n2\nSigIgn:\t0000000000000000\n");
	close(leak);
}

static void test_local_drop_privs(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req req = base_req(f, "id -u; id -g; id -G; ulimit -n", true);
	struct run *r = new_run();

	if (!f->root) {
		skip();
	}
	expect_exit(f->local, &req, r, 0);
	assert_string_equal(r->out, "100000\n100000\n100000\n256\n");
}

static void test_spawn_errors(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req req = base_req(f, "true", false);
	struct sbx_backend_config bad = {.name = "chroot"};
	struct sbx_backend_config nobw = {.name = "bwrap", .bwrap_path = "/nonexistent/bwrap"};
	struct sbx_backend *b = NULL;
	struct run *r = new_run();
	char *link = xasprintf("%s/escape", f->ws);
	char *file = xasprintf("%s/plain", f->ws);
	int fd;

	assert_int_equal(sbx_backend_new(&b, &bad), -EINVAL);
	assert_null(b);
	assert_int_equal(sbx_backend_new(&b, &nobw), -ENOENT);
	assert_null(b);

	req.cwd_rel = "../..";
	assert_int_equal(run(f->local, &req, r), -EINVAL);
	assert_int_equal(run(f->bwrap, &req, r), -EINVAL);
	req.cwd_rel = "/etc";
	assert_int_equal(run(f->bwrap, &req, r), -EINVAL);
	req.cwd_rel = "missing";
	assert_int_equal(run(f->local, &req, r), -ENOENT);
	assert_int_equal(run(f->bwrap, &req, r), -ENOENT);
	assert_int_equal(symlink("/etc", link), 0);
	req.cwd_rel = "escape";
	assert_int_equal(run(f->local, &req, r), -EXDEV);
	assert_int_equal(run(f->bwrap, &req, r), -EXDEV);
	fd = open(file, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	close(fd);
	req.cwd_rel = "plain";
	assert_int_equal(run(f->bwrap, &req, r), -ENOTDIR);
	unlink(link);
	unlink(file);
	free(link);
	free(file);
}

/* ---- bwrap ---- */

static void test_health(void **state)
{
	struct fixture *f = *state;
	char msg[256];

	assert_string_equal(sbx_backend_name(f->bwrap), "bwrap");
	assert_int_equal(sbx_backend_health(f->bwrap, msg, sizeof(msg)), 0);
	assert_non_null(strstr(msg, "bwrap 0."));
	assert_non_null(strstr(msg, "seccomp on"));
	assert_non_null(strstr(msg, "rlimits on"));
	/* The driver the host has: v2 where /sys/fs/cgroup is the unified
	 * hierarchy (a cgroup-v2 guest), v1 where the pids hierarchy is. */
	struct statfs sf;
	bool v2 = statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == 0x63677270;
	if (f->root && v2)
		assert_non_null(strstr(msg, "cgroup memory+pids v2"));
	else if (f->root && access("/sys/fs/cgroup/pids/cgroup.procs", W_OK) == 0)
		assert_non_null(strstr(msg, "cgroup memory+pids v1"));
	assert_int_equal(sbx_backend_health(f->local, msg, sizeof(msg)), 0);
	assert_non_null(strstr(msg, "local"));
}

static void test_bwrap_identity(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req req = base_req(f,
					    "id -u; id -un; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' "
					    "/proc/self/status",
					    true);
	struct run *r = new_run();
	char *want;

	expect_exit(f->bwrap, &req, r, 0);
	want = xasprintf("%u\nsandbox\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n"
			 "NoNewPrivs:\t1\nSeccomp:\t2\n",
			 f->root ? TENANT_UID : (unsigned)getuid());
	assert_string_equal(r->out, want);
	free(want);
}

static void test_bwrap_no_userns_no_net(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req req = base_req(f,
					    "unshare -Ur true 2>/dev/null && echo userns;"
					    "unshare -n true 2>/dev/null && echo netns;"
					    "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ';"
					    "getent hosts example.com >/dev/null && echo resolved;"
					    "ls /proc | grep -c '^[0-9]'",
					    true);
	struct run *r = new_run();

	expect_exit(f->bwrap, &req, r, 0);
	/* Only loopback; a private pid namespace (bwrap's init, sh, and the
	 * pipeline's ls/grep: a handful of processes, none of the host's). */
	assert_int_equal(strncmp(r->out, "lo\n", 3), 0);
	assert_true(atol(r->out + 3) > 0 && atol(r->out + 3) < 8);
}

static void test_bwrap_filesystem(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req req =
	    base_req(f,
		     "touch /usr/x 2>/dev/null && echo usr-writable;"
		     "touch /etc/x 2>/dev/null && echo etc-writable;"
		     "test -e /etc/shadow && echo shadow;"
		     "test -e /home && echo home; test -e /root && echo rootdir;"
		     "test -e /sys && echo sys; test -e /var && echo var;"
		     "echo hi > /tmp/small && cat /tmp/small;"
		     "head -c 20000000 /dev/zero > /tmp/big 2>/dev/null && echo tmp-unbounded;"
		     "rm -f /tmp/big;"
		     "grep -c . /etc/passwd; grep '^sandbox:' /etc/passwd | cut -d: -f6;"
		     "cat /etc/hosts | head -1",
		     true);
	struct run *r = new_run();
	char *want;

	assert_int_equal(run(f->bwrap, &req, r), 0);
	want = xasprintf("hi\n3\n/workspace\n127.0.0.1\tlocalhost\n");
	assert_string_equal(r->out, want);
	free(want);
}

static void test_bwrap_env_fds(void **state)
{
	struct fixture *f = *state;
	const char *env[] = {"FOO=bar baz", "EMPTY=", NULL};
	int leak = open("/dev/null", O_RDONLY); /* no O_CLOEXEC on purpose */
	struct sbx_spawn_req req = base_req(f,
					    "env | sort; echo --; tr '\\0' '\\n' < /proc/1/environ; "
					    "echo --; ls /proc/$$/fd; grep SigIgn /proc/self/status",
					    true);
	struct run *r = new_run();

	assert_true(leak > 2);
	req.env = env;
	expect_exit(f->bwrap, &req, r, 0);
	assert_null(strstr(r->out, "canary"));
	assert_string_equal(r->out, "EMPTY=\nFOO=bar baz\nHOME=/workspace\nLANG=C.UTF-8\n"
				    "PATH=/usr/local/bin:/usr/bin:/bin\nPWD=/workspace\nUSER=sandbox\n"
				    "--\n--\n0\n1\n2\nSigIgn:\t0000000000000000\n");
	close(leak);
}

static void test_bwrap_workspace_ownership(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req req = base_req(f,
					    "echo data > made; cp /bin/true su; chmod 4755 su; "
					    "chmod u+s made; ls -n su | cut -d' ' -f3",
					    true);
	struct run *r = new_run();
	char *made = xasprintf("%s/made", f->ws);
	char *su = xasprintf("%s/su", f->ws);
	struct stat st;

	if (!f->root) {
		free(made);
		free(su);
		skip();
	}
	expect_exit(f->bwrap, &req, r, 0);
	assert_int_equal(stat(made, &st), 0);
	assert_int_equal(st.st_uid, TENANT_UID);
	assert_int_equal(st.st_gid, TENANT_UID);
	assert_int_equal(stat(su, &st), 0);
	assert_int_equal(st.st_uid, TENANT_UID);
	/* Whatever the mode, no root-owned setuid file. */
	assert_false(st.st_uid == 0 && (st.st_mode & S_ISUID));
	unlink(made);
	unlink(su);
	free(made);
	free(su);
}

static void test_bwrap_cwd_exit(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req req = base_req(f, "pwd; exit 42", true);
	struct run *r = new_run();
	char *dir = xasprintf("%s/a", f->ws);
	char *dir2 = xasprintf("%s/a/b c", f->ws);

	assert_int_equal(mkdir(dir, 0755), 0);
	assert_int_equal(mkdir(dir2, 0755), 0);
	req.cwd_rel = "a/b c";
	expect_exit(f->bwrap, &req, r, 42);
	assert_string_equal(r->out, "/workspace/a/b c\n");

	req.cwd_rel = "";
	req.command = "kill -TERM $$";
	expect_exit(f->bwrap, &req, r, 128 + SIGTERM);

	/* The command is one argv element: quotes and ; are the shell's. */
	req.command = "echo 'a;b' \"$(echo c)\"";
	assert_int_equal(run(f->bwrap, &req, r), 0);
	assert_string_equal(r->out, "a;b c\n");
	rmdir(dir2);
	rmdir(dir);
	free(dir);
	free(dir2);
}

static void test_bwrap_limits(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req req = base_req(f,
					    "ulimit -n; ulimit -v; ulimit -c; ulimit -p;"
					    "head -c 100000 /dev/zero > big; echo rc=$?",
					    true);
	struct run *r = new_run();
	char *big = xasprintf("%s/big", f->ws);
	struct stat st;

	req.limits.nofile = 64;
	req.limits.fsize_bytes = 4096;
	req.limits.mem_bytes = 512ULL << 20;
	req.limits.nproc = 100;
	assert_int_equal(run(f->bwrap, &req, r), 0);
	/* Contained, RLIMIT_NPROC is a backstop at twice the limit: pids.max
	 * is the command's limit (sandbox/backend.c set_rlimits). */
	const char *want =
	    sbx_backend_contained(f->bwrap) ? "64\n524288\n0\n200\nrc=" : "64\n524288\n0\n100\nrc=";
	assert_int_equal(strncmp(r->out, want, 19), 0);
	assert_string_not_equal(r->out + 19, "0\n");
	assert_int_equal(stat(big, &st), 0);
	assert_true(st.st_size <= 4096);
	unlink(big);
	free(big);
}

/* Processes whose real uid is uid, from the host's /proc. */
static int count_uid(uid_t uid)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d))) {
		char path[300];
		struct stat st;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s", de->d_name);
		if (stat(path, &st) == 0 && st.st_uid == uid)
			n++;
	}
	closedir(d);
	return n;
}

static void spawn_bg(struct sbx_backend *b, struct sbx_spawn_req *req, pid_t *pid, int *pidfd)
{
	int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);

	req->stdout_fd = devnull;
	req->stderr_fd = devnull;
	assert_int_equal(sbx_backend_spawn(b, req, pid, pidfd), 0);
	close(devnull);
}

static void test_kill_group(void **state)
{
	struct fixture *f = *state;
	struct sbx_backend *backends[2] = {f->local, f->bwrap};
	char *late = xasprintf("%s/late", f->ws);
	char *late2 = xasprintf("%s/late2", f->ws);
	pid_t pid[2];
	int pidfd[2], i, status;

	for (i = 0; i < 2; i++) {
		struct sbx_spawn_req req = base_req(
		    f,
		    i == 0 ? "(sleep 1; touch late) & sleep 30"
			   : "(sleep 1; touch late) & setsid sh -c 'sleep 1; touch late2' & sleep 30",
		    true);

		spawn_bg(backends[i], &req, &pid[i], &pidfd[i]);
	}
	sleep_ms(300);
	for (i = 0; i < 2; i++) {
		assert_int_equal(getpgid(pid[i]), pid[i]);
		assert_int_equal(kill(-pid[i], SIGKILL), 0);
		assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
		assert_true(WIFSIGNALED(status));
		close(pidfd[i]);
	}
	sleep_ms(1500);
	assert_int_equal(access(late, F_OK), -1);
	assert_int_equal(access(late2, F_OK), -1);
	free(late);
	free(late2);
}

static void test_bwrap_fork_bomb(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req req = base_req(f, "for i in $(seq 1 2000); do sleep 5 & done; echo done", true);
	int max = 0, n, i, status;
	pid_t pid;
	int pidfd;

	if (!f->root)
		skip();
	/* A uid of its own: RLIMIT_NPROC counts per uid. No cgroup here:
	 * the rlimit alone must hold. */
	req.uid = req.gid = BOMB_UID;
	req.limits.nproc = 40;
	assert_int_equal(count_uid(BOMB_UID), 0);
	spawn_bg(f->bwrap, &req, &pid, &pidfd);
	/* Outcomes, not speeds (security.md, bubblewrap traps): the limit is
	 * never exceeded while it runs, the bomb ends by itself (dash gives
	 * up at the first failed fork), and nothing of that uid is left. */
	for (i = 0; waitpid(pid, &status, WNOHANG) == 0; i++) {
		n = count_uid(BOMB_UID);
		if (n > max)
			max = n;
		assert_true(i < 3000); /* 60 s: a bomb that never ends */
		sleep_ms(20);
	}
	close(pidfd);
	assert_true(max <= 40);
	assert_true(WIFEXITED(status));
	assert_int_not_equal(WEXITSTATUS(status), 0); /* stopped by the limit, not "done" */
	for (i = 0; i < 500 && count_uid(BOMB_UID) > 0; i++)
		sleep_ms(20);
	assert_int_equal(count_uid(BOMB_UID), 0);
}

static int mkdir_p(const char *path)
{
	char buf[512];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return mkdir(buf, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

static bool read_line(const char *path, char *buf, size_t n)
{
	FILE *fp = fopen(path, "r");
	bool ok;

	if (!fp)
		return false;
	ok = fgets(buf, (int)n, fp) != NULL;
	fclose(fp);
	return ok;
}

/* The group (below /sys/fs/cgroup/hier) exists and no process is in it. */
static bool group_empty(const char *hier, const char *name)
{
	char path[512], line[64];
	FILE *fp;
	bool empty;

	int n = snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/%s/cgroup.procs", hier, name);
	assert_true(n > 0 && (size_t)n < sizeof(path));
	fp = fopen(path, "r");
	if (!fp)
		return false;
	empty = fgets(line, sizeof(line), fp) == NULL;
	fclose(fp);
	return empty;
}

static void test_cgroups(void **state)
{
	struct fixture *f = *state;
	char name[64], path[512], line[4096];
	struct sbx_spawn_req req;
	pid_t pid, detached;
	int pidfd, status, i;
	struct run *r;
	FILE *fp;
	bool in_mem = false, in_pids = false;

	if (!f->root || access("/sys/fs/cgroup/pids/cgroup.procs", W_OK) < 0)
		skip();
	/* The server's names: <root>/u<uid>/j<seq>. */
	req = base_req(f, "true", true);
	snprintf(name, sizeof(name), "sandboxd/unit-%d/u%u/j1", (int)getpid(), (unsigned)req.uid);

	/* bwrap: the command is in both groups with the limits set. */
	req = base_req(f, "sleep 30", true);
	req.seq = 1;
	req.limits.mem_bytes = 256ULL << 20;
	req.limits.nproc = 64;
	spawn_bg(f->bwrap, &req, &pid, &pidfd);
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	fp = fopen(path, "r");
	assert_non_null(fp);
	while (fgets(line, sizeof(line), fp)) {
		if (strstr(line, ":memory:/") && strstr(line, name))
			in_mem = true;
		if (strstr(line, ":pids:/") && strstr(line, name))
			in_pids = true;
	}
	fclose(fp);
	assert_true(in_mem);
	assert_true(in_pids);
	snprintf(path, sizeof(path), "/sys/fs/cgroup/memory/%s/memory.limit_in_bytes", name);
	assert_true(read_line(path, line, sizeof(line)));
	assert_string_equal(line, "268435456\n");
	snprintf(path, sizeof(path), "/sys/fs/cgroup/pids/%s/pids.max", name);
	assert_true(read_line(path, line, sizeof(line)));
	assert_string_equal(line, "64\n");
	kill(-pid, SIGKILL);
	waitpid(pid, &status, 0);
	close(pidfd);
	sbx_backend_reap(f->bwrap, &req, NULL, NULL);
	/* Emptied (zombies orphaned to PID 1 aside), the group is kept for
	 * the tenant's next command. */
	assert_true(group_empty("pids", name));
	assert_true(group_empty("memory", name));

	/* The tenant's parent groups removed behind the backend's memo of
	 * them (and the group kept in them): the next command makes them
	 * again and runs. A uid of its own, so that its parents hold nothing
	 * else. */
	for (int round = 0; round < 2; round++) {
		const char *const hier[] = {"pids", "memory"};
		req = base_req(f, "true", true);
		req.uid = req.gid = req.uid + 4000;
		req.seq = 2 + (uint64_t)round;
		r = new_run();
		assert_int_equal(run(f->bwrap, &req, r), 0);
		assert_int_equal(exit_code(r), 0);
		sbx_backend_reap(f->bwrap, &req, NULL, NULL);
		for (i = 0; i < 2; i++) {
			snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/sandboxd/unit-%d/u%u/j%u", hier[i],
				 (int)getpid(), (unsigned)req.uid, (unsigned)req.seq);
			if (rmdir(path) < 0)
				fprintf(stderr, "rmdir %s: %s\n", path, strerror(errno));
			assert_int_equal(access(path, F_OK), -1);
			snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/sandboxd/unit-%d/u%u", hier[i],
				 (int)getpid(), (unsigned)req.uid);
			if (rmdir(path) < 0)
				fprintf(stderr, "rmdir %s: %s\n", path, strerror(errno));
			assert_int_equal(access(path, F_OK), -1);
		}
	}

	/* local: a child that detached with setsid outlives the group kill
	 * but not the reap. */
	{
		char root[64];
		struct sbx_backend_config lc = {.name = "local", .use_cgroups = true, .cgroup_root = root};
		struct sbx_backend *lb = NULL;

		/* A root of its own: the bwrap backend holds the fixture's. */
		snprintf(root, sizeof(root), "sandboxd/unit-%d-local", (int)getpid());
		assert_int_equal(sbx_backend_new(&lb, &lc), 0);
		r = new_run();
		req = base_req(f, "setsid sleep 30 >/dev/null 2>&1 </dev/null & echo $!", true);
		req.seq = 1;
		assert_int_equal(run(lb, &req, r), 0);
		detached = (pid_t)atol(r->out);
		assert_true(detached > 1);
		assert_int_equal(kill(detached, 0), 0);
		sbx_backend_reap(lb, &req, NULL, NULL);
		for (i = 0; i < 100 && kill(detached, 0) == 0; i++)
			sleep_ms(20);
		assert_int_equal(kill(detached, 0), -1);
		/* Killed, not merely left: the group is empty (and kept). */
		snprintf(path, sizeof(path), "%s/u%u/j1", root, (unsigned)req.uid);
		assert_true(group_empty("pids", path));
		sbx_backend_free(&lb);
		assert_null(lb);
		/* The claiming backend's end removes every group, kept ones too. */
		snprintf(path, sizeof(path), "/sys/fs/cgroup/pids/%s", root);
		assert_int_equal(access(path, F_OK), -1);
		snprintf(path, sizeof(path), "/sys/fs/cgroup/memory/%s", root);
		assert_int_equal(access(path, F_OK), -1);
		/* One root, one live server: a second backend on the fixture's
		 * root is refused while the first holds it. */
		snprintf(root, sizeof(root), "sandboxd/unit-%d", (int)getpid());
		assert_int_equal(sbx_backend_new(&lb, &lc), -EBUSY);
		assert_null(lb);
		snprintf(path, sizeof(path), "/sys/fs/cgroup/pids/sandboxd/unit-%d-local/u%u", (int)getpid(),
			 (unsigned)req.uid);
		rmdir(path);
		snprintf(path, sizeof(path), "/sys/fs/cgroup/memory/sandboxd/unit-%d-local/u%u",
			 (int)getpid(), (unsigned)req.uid);
		rmdir(path);
		snprintf(path, sizeof(path), "/sys/fs/cgroup/pids/sandboxd/unit-%d-local", (int)getpid());
		rmdir(path);
		snprintf(path, sizeof(path), "/sys/fs/cgroup/memory/sandboxd/unit-%d-local", (int)getpid());
		rmdir(path);
	}
	/* A leftover of an earlier run (a process still in it) is swept. */
	snprintf(path, sizeof(path), "/sys/fs/cgroup/pids/sandboxd/unit-%d/u7/j9", (int)getpid());
	assert_int_equal(mkdir_p(path), 0);
	assert_true(sbx_backend_sweep(f->bwrap) >= 2); /* j9 and u7, and the empty u<uid> groups */
	assert_int_equal(access(path, F_OK), -1);
	snprintf(path, sizeof(path), "/sys/fs/cgroup/pids/sandboxd/unit-%d/u%u", (int)getpid(),
		 (unsigned)req.uid);
	rmdir(path);
	snprintf(path, sizeof(path), "/sys/fs/cgroup/memory/sandboxd/unit-%d/u%u", (int)getpid(),
		 (unsigned)req.uid);
	rmdir(path);
	snprintf(path, sizeof(path), "/sys/fs/cgroup/pids/sandboxd/unit-%d", (int)getpid());
	rmdir(path);
	snprintf(path, sizeof(path), "/sys/fs/cgroup/memory/sandboxd/unit-%d", (int)getpid());
	rmdir(path);
}

/* The cgroup of pid in hier (the path below /sys/fs/cgroup/hier). */
static void group_of(pid_t pid, const char *hier, char *out, size_t outsz)
{
	char path[64], line[4096], want[32];
	FILE *fp;

	out[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	snprintf(want, sizeof(want), ":%s:/", hier);
	fp = fopen(path, "r");
	assert_non_null(fp);
	while (fgets(line, sizeof(line), fp)) {
		char *at = strstr(line, want);
		if (at) {
			snprintf(out, outsz, "%s", at + strlen(want));
			out[strcspn(out, "\n")] = '\0';
		}
	}
	fclose(fp);
}

static uint64_t group_u64(const char *hier, const char *name, const char *file)
{
	char path[512], line[64];

	snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/%s/%s", hier, name, file);
	assert_true(read_line(path, line, sizeof(line)));
	return strtoull(line, NULL, 10);
}

/* Reap what the sandboxes orphaned to us (the subreaper) until the
 * group's pids.current says every task of it is gone. */
static void reap_orphans(const char *name)
{
	int64_t deadline = now_ms() + 20000;

	while (group_u64("pids", name, "pids.current") != 0 && now_ms() < deadline) {
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		sleep_ms(5);
	}
	assert_int_equal(group_u64("pids", name, "pids.current"), 0);
}

/* A command's emptied group serves the tenant's next one: the next
 * command's limits apply, the limit hits and the peak of an OOM-killed
 * predecessor are gone, a group left with a large residue is not kept,
 * and the sweep removes what is kept. */
static void test_cgroups_reuse(void **state)
{
	struct fixture *f = *state;
	char name[256], other[256], dir[512], marker[600];
	struct sbx_spawn_req req;
	pid_t pid;
	int pidfd, status;
	struct run *r;

	if (!f->root || access("/sys/fs/cgroup/pids/cgroup.procs", W_OK) < 0)
		skip();
	/* Orphans of the sandboxes come to this process, which reaps them:
	 * PID 1 here may take seconds to. */
	assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	req = base_req(f, "sleep 30", true);
	req.uid = req.gid = TENANT_UID + 5000;
	req.seq = 101;
	req.limits.mem_bytes = 256ULL << 20;
	req.limits.nproc = 64;
	spawn_bg(f->bwrap, &req, &pid, &pidfd);
	group_of(pid, "memory", name, sizeof(name));
	snprintf(other, sizeof(other), "/u%u/j101", (unsigned)req.uid);
	assert_non_null(strstr(name, other));
	kill(-pid, SIGKILL);
	waitpid(pid, &status, 0);
	close(pidfd);
	sbx_backend_reap(f->bwrap, &req, NULL, NULL);
	assert_true(group_empty("memory", name));
	reap_orphans(name);

	/* OOM-killed in the kept group, under its own lower limit: 400 MB
	 * into the sandbox's /tmp, charged to the group's 128 MiB. */
	req = base_req(f, "head -c 419430400 /dev/zero > /tmp/fill && echo filled", true);
	req.uid = req.gid = TENANT_UID + 5000;
	req.seq = 102;
	req.limits.mem_bytes = 128ULL << 20;
	req.limits.tmp_bytes = 512ULL << 20;
	req.limits.fsize_bytes = 0;
	r = new_run();
	assert_int_equal(run(f->bwrap, &req, r), 0);
	assert_null(strstr(r->out, "filled"));
	assert_int_not_equal(exit_code(r), 0);
	assert_true(group_u64("memory", name, "memory.failcnt") > 0);
	assert_int_equal(group_u64("memory", name, "memory.limit_in_bytes"), 128ULL << 20);
	/* Its /tmp goes with the sandbox's last task. */
	for (int64_t t = now_ms() + 10000;
	     group_u64("memory", name, "memory.usage_in_bytes") > (1 << 20) && now_ms() < t;)
		sleep_ms(10);
	sbx_backend_reap(f->bwrap, &req, NULL, NULL);
	reap_orphans(name);

	/* The next command: the same group, its own limits, clean counters. */
	req = base_req(f, "sleep 30", true);
	req.uid = req.gid = TENANT_UID + 5000;
	req.seq = 103;
	req.limits.mem_bytes = 0;
	req.limits.nproc = 32;
	spawn_bg(f->bwrap, &req, &pid, &pidfd);
	group_of(pid, "memory", other, sizeof(other));
	assert_string_equal(other, name);
	assert_int_equal(group_u64("memory", name, "memory.failcnt"), 0);
	assert_true(group_u64("memory", name, "memory.max_usage_in_bytes") < (32ULL << 20));
	assert_true(group_u64("memory", name, "memory.limit_in_bytes") > (1ULL << 60)); /* none */
	assert_int_equal(group_u64("pids", name, "pids.max"), 32);
	kill(-pid, SIGKILL);
	waitpid(pid, &status, 0);
	close(pidfd);
	sbx_backend_reap(f->bwrap, &req, NULL, NULL);
	reap_orphans(name);

	/* 8 MiB of page cache stay charged to the group: not kept. */
	snprintf(marker, sizeof(marker), "%s/reuse", f->ws);
	assert_int_equal(mkdir(marker, 0755), 0);
	assert_int_equal(chown(marker, TENANT_UID + 5000, TENANT_UID + 5000), 0);
	req = base_req(f, "dd if=/dev/zero of=reuse/big bs=1M count=8 status=none", true);
	req.uid = req.gid = TENANT_UID + 5000;
	req.seq = 104;
	expect_exit(f->bwrap, &req, new_run(), 0);
	sbx_backend_reap(f->bwrap, &req, NULL, NULL);
	snprintf(dir, sizeof(dir), "/sys/fs/cgroup/memory/%s", name);
	assert_int_equal(access(dir, F_OK), -1);
	snprintf(dir, sizeof(dir), "/sys/fs/cgroup/pids/%s", name);
	assert_int_equal(access(dir, F_OK), -1);
	snprintf(marker, sizeof(marker), "%s/reuse/big", f->ws);
	unlink(marker);
	snprintf(marker, sizeof(marker), "%s/reuse", f->ws);
	rmdir(marker);

	/* The next one gets a new group; kept, it is swept like any other. */
	req = base_req(f, "true", true);
	req.uid = req.gid = TENANT_UID + 5000;
	req.seq = 105;
	expect_exit(f->bwrap, &req, new_run(), 0);
	sbx_backend_reap(f->bwrap, &req, NULL, NULL);
	snprintf(dir, sizeof(dir), "/sys/fs/cgroup/pids/sandboxd/unit-%d/u%u/j105", (int)getpid(),
		 (unsigned)req.uid);
	assert_int_equal(access(dir, F_OK), 0);
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
	assert_true(sbx_backend_sweep(f->bwrap) >= 2);
	assert_int_equal(access(dir, F_OK), -1);
}

/* Limits that cannot be applied: the command does not run (fail closed),
 * the refusal is counted, and nothing of its group is left. */
static void test_cgroups_fail_closed(void **state)
{
	struct fixture *f = *state;
	char marker[600], path[512];
	struct sbx_spawn_req req;
	pid_t pid = -1;
	int pidfd = -1;

	if (!f->root || access("/sys/fs/cgroup/pids/cgroup.procs", W_OK) < 0)
		skip();
	snprintf(marker, sizeof(marker), "%s/ran", f->ws);
	unlink(marker);
	req = base_req(f, "touch /workspace/ran", true);
	req.seq = 77;
	/* pids.max takes at most PID_MAX_LIMIT: this budget cannot be set */
	req.limits.tenant_nproc = UINT64_MAX;
	uint64_t before = sbx_backend_refused_limits(f->bwrap);
	assert_int_equal(sbx_backend_spawn(f->bwrap, &req, &pid, &pidfd), -SBX_E_BACKEND);
	assert_int_equal(sbx_backend_refused_limits(f->bwrap), before + 1);
	assert_int_equal(access(marker, F_OK), -1);
	snprintf(path, sizeof(path), "/sys/fs/cgroup/pids/sandboxd/unit-%d/u%u/j77", (int)getpid(),
		 (unsigned)req.uid);
	assert_int_equal(access(path, F_OK), -1);
}

static void test_bwrap_seccomp(void **state)
{
	struct fixture *f = *state;
	/* Straight system calls, so that only the filter can answer: with
	 * nonsense arguments the kernel itself would say EFAULT/EINVAL/EBADF. */
	struct sbx_spawn_req req =
	    base_req(f,
		     "python3 -c '\n"
		     "import ctypes, os\n"
		     "libc = ctypes.CDLL(None, use_errno=True)\n"
		     "def sc(nr, *a):\n"
		     "    libc.syscall(nr, *a)\n"
		     "    return ctypes.get_errno()\n"
		     "print(sc(425, 1, 0))\n"		  /* io_uring_setup: EPERM */
		     "print(sc(435, 0, 0))\n"		  /* clone3: ENOSYS */
		     "print(sc(101, 16, 1, 0, 0))\n"	  /* ptrace(PTRACE_ATTACH, 1): EPERM */
		     "print(sc(16, 0, 0x100005412, 0))\n" /* ioctl(0, TIOCSTI | 1<<32) */
		     "print(sc(250, 0, 0, 0))\n"	  /* keyctl: EPERM */
		     "print(sc(321, 0, 0, 0))\n"	  /* bpf: EPERM */
		     "print(sc(16, 0, 0x5401, 0))\n"	  /* ioctl(0, TCGETS) on /dev/null: ENOTTY */
		     "'",
		     true);
	struct run *r = new_run();

#if !defined(__x86_64__)
	skip();
#endif
	if (access("/usr/bin/python3", X_OK) < 0) {
		skip();
	}
	expect_exit(f->bwrap, &req, r, 0);
	assert_string_equal(r->out, "1\n38\n1\n1\n1\n1\n25\n");
}

/* The contents of dir/name (caller frees), *len its size. */
static char *slurp(const char *dir, const char *name, size_t *len)
{
	char path[PATH_MAX];
	int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_true(n > 0 && (size_t)n < sizeof(path));
	FILE *fp = fopen(path, "rb");
	assert_non_null(fp);
	char *buf = xmalloc(1u << 20);
	*len = fread(buf, 1, 1u << 20, fp);
	fclose(fp);
	return buf;
}

/* The fd number holding the bwrap backend's sealed seccomp memfd, or -1. */
static int seccomp_memfd(void)
{
	char path[64], target[PATH_MAX];
	for (int fd = 3; fd < 1024; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n > 0 && (target[n] = '\0', strncmp(target, "/memfd:sbx-seccomp", 18) == 0))
			return fd;
	}
	return -1;
}

/* Should the number of a blob's sealed memfd come to hold another file
 * (closed and reused by a stray close elsewhere), the spawn gets a fresh
 * copy of the blob's own bytes, never the other file's. */
static void test_blob_reopen_checked(void **state)
{
	struct fixture *f = *state;
	struct sbx_spawn_req req = base_req(f, "true", false);
	char before[PATH_MAX], after[PATH_MAX];
	size_t blen, alen;
	int num = seccomp_memfd();
	if (num < 0)
		skip(); /* no sealing here: every spawn gets a fresh copy anyway */
	snprintf(before, sizeof(before), "%s/dump-before", f->base);
	snprintf(after, sizeof(after), "%s/dump-after", f->base);
	assert_int_equal(sbx_backend_dump(f->bwrap, &req, before), 0);
	char *want = slurp(before, "fd-3", &blen);
	assert_true(blen > 0);
	int other = memfd_create("other", MFD_CLOEXEC);
	assert_true(other >= 0);
	assert_int_equal(write(other, "not the filter", 14), 14);
	assert_int_equal(dup2(other, num), num); /* the sealed memfd is gone */
	close(other);
	assert_int_equal(sbx_backend_dump(f->bwrap, &req, after), 0);
	char *got = slurp(after, "fd-3", &alen);
	assert_int_equal(alen, blen);
	assert_memory_equal(got, want, blen);
	free(want);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_std_fds_above_nofile),
	    cmocka_unit_test(test_local_runs),
	    cmocka_unit_test(test_local_cwd_env),
	    cmocka_unit_test(test_local_fds_and_signals),
	    cmocka_unit_test(test_local_drop_privs),
	    cmocka_unit_test(test_spawn_errors),
	    cmocka_unit_test(test_health),
	    cmocka_unit_test(test_bwrap_identity),
	    cmocka_unit_test(test_bwrap_no_userns_no_net),
	    cmocka_unit_test(test_bwrap_filesystem),
	    cmocka_unit_test(test_bwrap_env_fds),
	    cmocka_unit_test(test_bwrap_workspace_ownership),
	    cmocka_unit_test(test_bwrap_cwd_exit),
	    cmocka_unit_test(test_bwrap_limits),
	    cmocka_unit_test(test_kill_group),
	    cmocka_unit_test(test_bwrap_fork_bomb),
	    cmocka_unit_test(test_cgroups),
	    cmocka_unit_test(test_cgroups_reuse),
	    cmocka_unit_test(test_cgroups_fail_closed),
	    cmocka_unit_test(test_bwrap_seccomp),
	    cmocka_unit_test(test_blob_reopen_checked),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
