#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "sandbox/backend.h"
#include "sandbox/runner.h"
#include "sandbox/workspace.h"
#include "unit.h"

#define MAX_HB 64

/* Runner threads of the fixture's runner: every fixture test runs with
 * one, then again with three (handles, routing and figures per thread). */
static size_t g_threads = 1;

struct rec {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t job;
	bool started, done;
	int spawn_error;
	int pid;
	int n_events_after_exit;
	struct sbx_exec_result res;
	bool have_res;
	int64_t exit_mono;
	int n_hb;
	int64_t hb_elapsed[MAX_HB];
	int64_t hb_last_output[MAX_HB];
	char hb_tail[MAX_HB][64];
	char *ev_out[3];
	size_t ev_len[3];
};

struct fixture {
	char dir[64];
	struct sbx_workspace *ws;
	struct sbx_backend *backend;
	struct sbx_runner *runner;
};

static void rec_init(struct rec *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
}

static void rec_fini(struct rec *r)
{
	sbx_exec_result_clear(&r->res);
	for (int i = 0; i < 3; i++)
		free(r->ev_out[i]);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
}

static void on_event(void *ctx, const struct sbx_event *ev, int spawn_error)
{
	struct rec *r = ctx;

	pthread_mutex_lock(&r->mu);
	if (r->done)
		r->n_events_after_exit++;
	switch (ev->kind) {
	case SBX_EV_START:
		r->started = true;
		r->pid = ev->pid;
		break;
	case SBX_EV_OUTPUT:
		r->ev_out[ev->stream] = xrealloc(r->ev_out[ev->stream], r->ev_len[ev->stream] + ev->len + 1);
		memcpy(r->ev_out[ev->stream] + r->ev_len[ev->stream], ev->data, ev->len);
		r->ev_len[ev->stream] += ev->len;
		r->ev_out[ev->stream][r->ev_len[ev->stream]] = '\0';
		break;
	case SBX_EV_HEARTBEAT:
		if (r->n_hb < MAX_HB) {
			r->hb_elapsed[r->n_hb] = ev->elapsed_ms;
			r->hb_last_output[r->n_hb] = ev->last_output_at_ms;
			snprintf(r->hb_tail[r->n_hb], sizeof(r->hb_tail[0]), "%s", ev->tail);
		}
		r->n_hb++;
		break;
	case SBX_EV_EXIT:
		r->spawn_error = spawn_error;
		if (ev->result) {
			/* take the strings, as a real caller may */
			r->res = *ev->result;
			ev->result->stdout_text = NULL;
			ev->result->stderr_text = NULL;
			ev->result->stdout_spill = NULL;
			ev->result->stderr_spill = NULL;
			r->have_res = true;
		}
		r->exit_mono = mono_ms();
		r->done = true;
		pthread_cond_broadcast(&r->cv);
		break;
	}
	if (ev->kind == SBX_EV_START)
		pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static bool rec_wait(struct rec *r, bool for_start, int seconds)
{
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += seconds;
	pthread_mutex_lock(&r->mu);
	while (!(for_start ? r->started || r->done : r->done)) {
		if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT)
			break;
	}
	ok = for_start ? r->started || r->done : r->done;
	pthread_mutex_unlock(&r->mu);
	return ok;
}

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	struct sbx_owner owner = {.uid = getuid(), .gid = getgid(), .chown = false};
	struct sbx_backend_config cfg = {.name = "local", .use_cgroups = false};

	if (unit_tmpdir(f->dir, sizeof(f->dir), "runner"))
		return -1;
	if (sbx_workspace_open(&f->ws, f->dir, &owner))
		return -1;
	if (sbx_backend_new(&f->backend, &cfg))
		return -1;
	if (sbx_runner_new(&f->runner, g_threads))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	int rc = 0;

	sbx_runner_free(&f->runner);
	/* every child reaped: none left at all */
	if (waitpid(-1, NULL, WNOHANG) != -1 || errno != ECHILD)
		rc = -1;
	sbx_backend_free(&f->backend);
	sbx_workspace_free(&f->ws);
	if (unit_rm_rf(f->dir) != 0)
		rc = -1;
	free(f);
	return rc;
}

static struct sbx_exec_req base_req(struct fixture *f, const char *command)
{
	struct sbx_exec_req req = {
	    .backend = f->backend,
	    .ws = f->ws,
	    .spawn =
		{
		    .command = command,
		    .workspace_host_dir = f->dir,
		    .cwd_rel = "",
		},
	    .id = "t1",
	    .kill_grace_ms = 500,
	    .max_output_bytes = 64000,
	    .spill_cap = 1 << 30,
	};

	return req;
}

static void submit(struct fixture *f, const struct sbx_exec_req *req, struct rec *r)
{
	assert_int_equal(sbx_runner_submit(f->runner, req, on_event, r, &r->job), 0);
	assert_true(r->job > 0);
}

static void run(struct fixture *f, const struct sbx_exec_req *req, struct rec *r, int seconds)
{
	rec_init(r);
	submit(f, req, r);
	assert_true(rec_wait(r, false, seconds));
}

static void test_echo(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "echo hello; echo err >&2");
	struct rec r;

	run(f, &req, &r, 10);
	assert_int_equal(r.spawn_error, 0);
	assert_true(r.started);
	assert_true(r.pid > 0);
	assert_true(r.have_res);
	assert_int_equal(r.res.exit_code, 0);
	assert_string_equal(r.res.stdout_text, "hello\n");
	assert_int_equal(r.res.stdout_len, 6);
	assert_string_equal(r.res.stderr_text, "err\n");
	assert_int_equal(r.res.stdout_bytes, 6);
	assert_int_equal(r.res.stderr_bytes, 4);
	assert_false(r.res.timed_out);
	assert_false(r.res.cancelled);
	assert_false(r.res.truncated);
	assert_null(r.res.stdout_spill);
	assert_true(r.res.started_at_ms > 1600000000000LL);
	assert_true(r.res.finished_at_ms >= r.res.started_at_ms);
	assert_int_equal(sbx_runner_cancel(f->runner, r.job), -ESRCH);
	assert_int_equal(sbx_runner_active(f->runner), 0);
	/* no spill directory for short output */
	{
		char p[128];
		struct stat st;

		snprintf(p, sizeof(p), "%s/.sandboxd", f->dir);
		assert_int_equal(stat(p, &st), -1);
	}
	rec_fini(&r);
}

static void test_exit_codes(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "exit 3");
	struct rec r;

	run(f, &req, &r, 10);
	assert_int_equal(r.res.exit_code, 3);
	rec_fini(&r);

	req.spawn.command = "kill -9 $$";
	run(f, &req, &r, 10);
	assert_int_equal(r.res.exit_code, 137);
	assert_false(r.res.timed_out);
	rec_fini(&r);
}

/* Run req into a timeout (idle or not): exit 124 with stdout out, and
 * the exit at least min_ms and under max_ms after the submit. */
static void run_timed_out(struct fixture *f, struct sbx_exec_req *req, struct rec *r, bool idle,
			  const char *out, int64_t min_ms, int64_t max_ms)
{
	int64_t t0 = mono_ms();

	run(f, req, r, 10);
	assert_true(r->res.timed_out);
	assert_int_equal(r->res.idle, idle);
	assert_false(r->res.cancelled);
	assert_int_equal(r->res.exit_code, 124);
	assert_string_equal(r->res.stdout_text, out);
	assert_true(r->exit_mono - t0 >= min_ms);
	assert_true(r->exit_mono - t0 < max_ms);
}

static void test_timeout(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "echo before; echo e >&2; sleep 10");
	struct rec r;

	req.timeout_ms = 300;
	run_timed_out(f, &req, &r, false, "before\n", 300, 3000);
	assert_string_equal(r.res.stderr_text, "e\n");
	rec_fini(&r);
}

static void test_timeout_term_ignored(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "trap '' TERM; echo x; sleep 10");
	struct rec r;

	req.timeout_ms = 200;
	req.kill_grace_ms = 300;
	run_timed_out(f, &req, &r, false, "x\n", 500, 3000);
	rec_fini(&r);
}

static void test_idle_timeout(void **state)
{
	struct fixture *f = *state;
	/* output every 200 ms for 1.2 s keeps it alive past a 500 ms idle limit */
	struct sbx_exec_req req = base_req(f, "for i in 1 2 3 4 5 6; do echo $i; sleep 0.2; done; sleep 10");
	struct rec r;

	req.idle_timeout_ms = 500;
	run_timed_out(f, &req, &r, true, "1\n2\n3\n4\n5\n6\n", 1500, 5000);
	rec_fini(&r);
}

struct cancel_arg {
	struct sbx_runner *runner;
	uint64_t job;
	int rc;
};

static void *cancel_thread(void *p)
{
	struct cancel_arg *a = p;

	a->rc = sbx_runner_cancel(a->runner, a->job);
	return NULL;
}

static void test_cancel_other_thread(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "echo x; sleep 10");
	struct rec r;
	struct cancel_arg a = {.runner = f->runner};
	pthread_t th;
	int64_t t0;

	req.timeout_ms = 5000;
	rec_init(&r);
	submit(f, &req, &r);
	assert_true(rec_wait(&r, true, 10));
	assert_true(r.started);
	usleep(100 * 1000);
	a.job = r.job;
	t0 = mono_ms();
	assert_int_equal(pthread_create(&th, NULL, cancel_thread, &a), 0);
	pthread_join(th, NULL);
	assert_int_equal(a.rc, 0);
	assert_true(rec_wait(&r, false, 10));
	assert_true(r.res.cancelled);
	assert_false(r.res.timed_out);
	assert_int_equal(r.res.exit_code, 128 + SIGTERM);
	assert_string_equal(r.res.stdout_text, "x\n");
	assert_true(r.exit_mono - t0 < 2000);
	assert_int_equal(sbx_runner_cancel(f->runner, r.job), -ESRCH);
	assert_int_equal(sbx_runner_cancel(f->runner, 987654), -ESRCH);
	rec_fini(&r);
}

static void test_timeout_then_cancel_keeps_timeout(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "trap '' TERM; sleep 10");
	struct rec r;

	req.timeout_ms = 100;
	req.kill_grace_ms = 600;
	rec_init(&r);
	submit(f, &req, &r);
	usleep(300 * 1000); /* timed out, in its grace */
	assert_int_equal(sbx_runner_cancel(f->runner, r.job), 0);
	assert_true(rec_wait(&r, false, 10));
	assert_true(r.res.timed_out);
	assert_false(r.res.cancelled);
	assert_int_equal(r.res.exit_code, 124);
	rec_fini(&r);
}

static bool process_gone(pid_t pid)
{
	char path[64], buf[256];
	FILE *fp;
	char *p;
	bool gone;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fp = fopen(path, "r");
	if (!fp)
		return true;
	gone = !fgets(buf, sizeof(buf), fp);
	fclose(fp);
	if (gone)
		return true;
	/* killed and waiting for its new parent to reap it counts as gone */
	p = strrchr(buf, ')');
	return p && (p[2] == 'Z' || p[2] == 'X');
}

static bool wait_gone(pid_t pid, int ms)
{
	for (int i = 0; i < ms / 20; i++) {
		if (process_gone(pid))
			return true;
		usleep(20 * 1000);
	}
	return process_gone(pid);
}

static void test_background_child_killed(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "sleep 100 & echo $!");
	struct rec r;
	int64_t t0 = mono_ms();
	long pid;

	run(f, &req, &r, 10);
	assert_int_equal(r.res.exit_code, 0);
	assert_true(r.exit_mono - t0 < 2000);
	pid = strtol(r.res.stdout_text, NULL, 10);
	assert_true(pid > 1);
	assert_true(wait_gone((pid_t)pid, 2000));
	rec_fini(&r);
}

/* local isolates nothing: a child that left the session survives the group
 * kill and keeps the pipe open. The result must arrive promptly anyway
 * (bounded drain); under bwrap the pid namespace would kill it too. */
static void test_setsid_child_does_not_block(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req =
	    base_req(f, "setsid sh -c 'echo $$ > detached.pid; exec sleep 100' & "
			"while [ ! -s detached.pid ]; do sleep 0.02; done; cat detached.pid; echo main");
	struct rec r;
	int64_t t0 = mono_ms();
	long pid;

	run(f, &req, &r, 20);
	assert_int_equal(r.res.exit_code, 0);
	assert_true(r.exit_mono - t0 < 2000);
	assert_non_null(strstr(r.res.stdout_text, "main\n"));
	pid = strtol(r.res.stdout_text, NULL, 10);
	assert_true(pid > 1);
	/* documented local-mode behaviour: it is still there */
	assert_false(process_gone((pid_t)pid));
	kill((pid_t)pid, SIGKILL);
	rec_fini(&r);
}

static void test_heartbeats(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req =
	    base_req(f, "i=0; while [ $i -lt 20 ]; do echo line$i; i=$((i+1)); sleep 0.05; done");
	struct rec r;

	req.heartbeat_ms = 200;
	run(f, &req, &r, 20);
	assert_int_equal(r.res.exit_code, 0);
	assert_true(r.n_hb >= 2);
	assert_true(r.n_hb <= MAX_HB);
	for (int i = 0; i < r.n_hb; i++) {
		assert_true(r.hb_elapsed[i] >= 200);
		if (i > 0)
			assert_true(r.hb_elapsed[i] - r.hb_elapsed[i - 1] >= 200);
		assert_true(strncmp(r.hb_tail[i], "line", 4) == 0);
		assert_true(r.hb_last_output[i] > 0);
	}
	rec_fini(&r);
}

static void test_heartbeats_silent(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "sleep 0.75");
	struct rec r;

	req.heartbeat_ms = 200;
	run(f, &req, &r, 20);
	assert_true(r.n_hb >= 2);
	/* At most one per 200 ms of the command's life, however slow the
	 * machine made it (a loaded host stretches `sleep 0.75`). */
	assert_true(r.n_hb <= MAX_HB);
	assert_true(r.n_hb <= (r.res.finished_at_ms - r.res.started_at_ms) / 200 + 1);
	for (int i = 0; i < r.n_hb; i++) {
		if (i > 0)
			assert_true(r.hb_elapsed[i] - r.hb_elapsed[i - 1] >= 200);
		assert_int_equal(r.hb_last_output[i], 0);
		assert_string_equal(r.hb_tail[i], "");
	}
	rec_fini(&r);

	/* heartbeat_ms 0: none */
	req.heartbeat_ms = 0;
	req.spawn.command = "sleep 0.3";
	run(f, &req, &r, 20);
	assert_int_equal(r.n_hb, 0);
	rec_fini(&r);
}

static void test_stdin(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "cat");
	struct rec r;
	char *big;

	req.stdin_data = "hello stdin\n";
	req.stdin_len = 12;
	run(f, &req, &r, 10);
	assert_string_equal(r.res.stdout_text, "hello stdin\n");
	rec_fini(&r);

	/* no stdin: EOF at once */
	req.stdin_data = NULL;
	req.stdin_len = 0;
	run(f, &req, &r, 10);
	assert_int_equal(r.res.exit_code, 0);
	assert_string_equal(r.res.stdout_text, "");
	rec_fini(&r);

	/* more than a pipe holds: written as the pipe drains */
	big = xmalloc(1 << 20);
	memset(big, 'z', 1 << 20);
	req.spawn.command = "wc -c";
	req.stdin_data = big;
	req.stdin_len = 1 << 20;
	run(f, &req, &r, 20);
	free(big); /* the runner copied it at submit */
	assert_int_equal(strtol(r.res.stdout_text, NULL, 10), 1 << 20);
	rec_fini(&r);

	/* a child that never reads its stdin: no SIGPIPE, no hang */
	req.spawn.command = "exec 0<&-; echo done";
	big = xmalloc(1 << 20);
	memset(big, 'z', 1 << 20);
	req.stdin_data = big;
	run(f, &req, &r, 20);
	free(big);
	assert_string_equal(r.res.stdout_text, "done\n");
	rec_fini(&r);
}

/* stdin kept open: writes in order, eof, the bound, the refusals. */
static void test_stdin_pipe(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "cat");
	struct rec r;
	size_t pending = 0;
	char big[4096];

	req.stdin_pipe = true;
	req.stdin_buffer_max = 8192;
	req.stdin_data = "first ";
	req.stdin_len = 6;
	rec_init(&r);
	submit(f, &req, &r);
	assert_int_equal(sbx_runner_stdin(f->runner, r.job, "second ", 7, false, &pending), 0);
	assert_int_equal(sbx_runner_stdin(f->runner, r.job, "third\n", 6, true, NULL), 0);
	assert_int_equal(sbx_runner_stdin(f->runner, r.job, "late", 4, false, NULL), -EPIPE);
	assert_true(rec_wait(&r, false, 10));
	assert_string_equal(r.res.stdout_text, "first second third\n");
	assert_int_equal(sbx_runner_stdin(f->runner, r.job, "x", 1, false, NULL), -ESRCH);
	rec_fini(&r);

	/* a command that does not read: the queue fills, then -EAGAIN, whole */
	req.spawn.command = "sleep 100";
	req.stdin_data = NULL;
	req.stdin_len = 0;
	rec_init(&r);
	submit(f, &req, &r);
	assert_true(rec_wait(&r, true, 10));
	memset(big, 'q', sizeof big);
	assert_int_equal(sbx_runner_stdin(f->runner, r.job, big, 8193, false, NULL), -EFBIG);
	int rc = 0;
	size_t taken = 0;
	for (int i = 0; i < 1000 && rc == 0; i++) {
		rc = sbx_runner_stdin(f->runner, r.job, big, sizeof big, false, &pending);
		taken += rc == 0 ? sizeof big : 0;
		if (rc == -EAGAIN) {
			/* the runner may still move some into the pipe: ask again later */
			usleep(20000);
			rc = sbx_runner_stdin(f->runner, r.job, big, sizeof big, false, &pending);
			taken += rc == 0 ? sizeof big : 0;
		}
	}
	assert_int_equal(rc, -EAGAIN);
	assert_true(pending + sizeof big > 8192);
	assert_true(taken <= 8192 + (1 << 20)); /* the queue and at most a grown pipe */
	/* killed at once, no grace: cancelled, 137 */
	assert_int_equal(sbx_runner_kill(f->runner, r.job), 0);
	assert_true(rec_wait(&r, false, 10));
	assert_true(r.res.cancelled);
	assert_int_equal(r.res.exit_code, 128 + SIGKILL);
	rec_fini(&r);

	/* without stdin_pipe: -ENOTCONN; no terminal: -ENOTTY */
	req.stdin_pipe = false;
	rec_init(&r);
	submit(f, &req, &r);
	assert_true(rec_wait(&r, true, 10));
	assert_int_equal(sbx_runner_stdin(f->runner, r.job, "x", 1, false, NULL), -ENOTCONN);
	assert_int_equal(sbx_runner_resize(f->runner, r.job, 80, 24), -ENOTTY);
	assert_int_equal(sbx_runner_cancel(f->runner, r.job), 0);
	assert_true(rec_wait(&r, false, 10));
	rec_fini(&r);
}

/* A terminal: its size, a resize, one merged stream, ^D as eof. */
static void test_tty(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "stty size; echo err >&2; read x; stty size; echo got $x; cat");
	struct rec r;

	req.tty = true;
	req.cols = 100;
	req.rows = 30;
	req.want_output_events = true;
	rec_init(&r);
	submit(f, &req, &r);
	assert_true(rec_wait(&r, true, 10));
	for (long until = mono_ms() + 10000; mono_ms() < until; usleep(10000)) {
		pthread_mutex_lock(&r.mu);
		bool seen = r.ev_out[1] && strstr(r.ev_out[1], "30 100");
		pthread_mutex_unlock(&r.mu);
		if (seen)
			break;
	}
	assert_int_equal(sbx_runner_resize(f->runner, r.job, 120, 40), 0);
	assert_int_equal(sbx_runner_stdin(f->runner, r.job, "go\n", 3, false, NULL), 0);
	assert_int_equal(sbx_runner_stdin(f->runner, r.job, "", 0, true, NULL), 0); /* ^D ends cat */
	assert_true(rec_wait(&r, false, 10));
	assert_int_equal(r.res.exit_code, 0);
	assert_non_null(strstr(r.res.stdout_text, "30 100\r\n"));
	assert_non_null(strstr(r.res.stdout_text, "err\r\n"));
	assert_non_null(strstr(r.res.stdout_text, "40 120\r\ngot go\r\n"));
	assert_int_equal(r.res.stderr_bytes, 0);
	rec_fini(&r);
}

static void test_output_events(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "printf abc; printf def >&2; printf ghi");
	struct rec r;

	req.want_output_events = true;
	run(f, &req, &r, 10);
	assert_string_equal(r.ev_out[1], "abcghi");
	assert_string_equal(r.ev_out[2], "def");
	assert_int_equal(r.n_events_after_exit, 0);
	rec_fini(&r);

	req.want_output_events = false;
	run(f, &req, &r, 10);
	assert_null(r.ev_out[1]);
	assert_string_equal(r.res.stdout_text, "abcghi");
	rec_fini(&r);
}

static void test_spill_and_truncation(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "seq 1 100000");
	struct rec r, r2;
	char path[128];
	struct stat st;

	req.id = "bigseq";
	req.max_output_bytes = 1000;
	run(f, &req, &r, 20);
	assert_true(r.res.truncated);
	assert_int_equal(r.res.stdout_bytes, 588895);
	assert_string_equal(r.res.stdout_spill, "/workspace/.sandboxd/spill/bigseq.stdout");
	assert_null(r.res.stderr_spill);
	assert_non_null(strstr(r.res.stdout_text, "bytes omitted; full output in "
						  "/workspace/.sandboxd/spill/bigseq.stdout"));
	assert_true(strncmp(r.res.stdout_text, "1\n2\n3\n", 6) == 0);
	assert_true(r.res.stdout_len > 6);
	assert_string_equal(r.res.stdout_text + r.res.stdout_len - 7, "100000\n");
	snprintf(path, sizeof(path), "%s/.sandboxd/spill/bigseq.stdout", f->dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 588895);
	rec_fini(&r);

	/* large output flows through (not timed here) */
	req.id = "zeros";
	req.spill_cap = 0;
	req.spawn.command = "head -c 200000000 /dev/zero";
	rec_init(&r2);
	submit(f, &req, &r2);
	assert_true(rec_wait(&r2, false, 120));
	assert_int_equal(r2.res.stdout_bytes, 200000000);
	assert_null(r2.res.stdout_spill);
	assert_true(r2.res.stdout_len < 1200);
	rec_fini(&r2);
}

static void test_spawn_failure(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "true");
	struct rec r;

	req.spawn.cwd_rel = "does/not/exist";
	run(f, &req, &r, 10);
	assert_false(r.started);
	assert_false(r.have_res);
	assert_true(r.spawn_error < 0);
	assert_int_equal(sbx_runner_active(f->runner), 0);
	rec_fini(&r);
}

#define N_CONC 50

/* A callback that holds the runner thread (which a callback must never
 * do) until the test lets it go: stands for any turn that does not end. */
struct stall {
	int fds[2];
	_Atomic bool entered;
};

static void on_event_stall(void *ctx, const struct sbx_event *ev, int spawn_error)
{
	struct stall *st = ctx;
	char c;

	(void)spawn_error;
	if (ev->kind != SBX_EV_START)
		return;
	st->entered = true;
	while (read(st->fds[0], &c, 1) < 0 && errno == EINTR)
		;
}

/* A runner of n threads with one of them stuck in a callback (st), the
 * stuck job's handle in *job: the watchdog sees the turn, growing, with
 * the step it is stuck in. */
static struct sbx_runner *stuck_runner(struct fixture *f, size_t n, struct stall *st, uint64_t *job)
{
	struct sbx_runner *r = NULL;
	struct sbx_exec_req req = base_req(f, "true");
	const char *step = NULL;
	int64_t busy = 0;

	assert_int_equal(pipe(st->fds), 0);
	assert_int_equal(sbx_runner_new(&r, n), 0);
	assert_int_equal(sbx_runner_busy_ms(r, &step), 0); /* idle is not stalled */
	assert_int_equal(sbx_runner_submit(r, &req, on_event_stall, st, job), 0);
	for (int i = 0; i < 1000 && busy < 300; i++) {
		usleep(10000);
		busy = sbx_runner_busy_ms(r, &step);
	}
	assert_true(st->entered);
	assert_true(busy >= 300);
	assert_string_equal(step, "starting commands");
	return r;
}

/* Stopping is bounded: the caller learns that a thread is stuck; let it
 * go, and the stop completes. */
static void stop_stuck(struct sbx_runner **r, struct stall *st)
{
	assert_int_equal(sbx_runner_stop_within(*r, 100), -ETIMEDOUT);
	assert_int_equal(write(st->fds[1], "x", 1), 1);
	assert_int_equal(sbx_runner_stop_within(*r, 60000), 0);
	assert_int_equal(sbx_runner_busy_ms(*r, NULL), 0);
	sbx_runner_free(r);
	close(st->fds[0]);
	close(st->fds[1]);
}

static void test_watchdog(void **state)
{
	struct stall st = {.entered = false};
	uint64_t job;
	struct sbx_runner *r = stuck_runner(*state, 1, &st, &job);

	stop_stuck(&r, &st);
}

static void test_concurrent(void **state)
{
	struct fixture *f = *state;
	struct rec *rs = xcalloc(N_CONC, sizeof(*rs));
	char cmds[N_CONC][64];
	uint64_t last = 0;

	for (int i = 0; i < N_CONC; i++) {
		struct sbx_exec_req req = base_req(f, cmds[i]);

		snprintf(cmds[i], sizeof(cmds[i]), "sleep 0.%d; echo job%d", i % 3, i);
		req.id = NULL;
		rec_init(&rs[i]);
		submit(f, &req, &rs[i]);
		assert_true(rs[i].job > last); /* increasing handles */
		last = rs[i].job;
	}
	assert_true(sbx_runner_active(f->runner) > 0);
	for (int i = 0; i < N_CONC; i++) {
		char want[32];

		assert_true(rec_wait(&rs[i], false, 30));
		snprintf(want, sizeof(want), "job%d\n", i);
		assert_int_equal(rs[i].res.exit_code, 0);
		assert_string_equal(rs[i].res.stdout_text, want);
		rec_fini(&rs[i]);
	}
	assert_int_equal(sbx_runner_active(f->runner), 0);
	free(rs);
}

static void test_free_cancels_running(void **state)
{
	struct fixture *f = *state;
	struct sbx_exec_req req = base_req(f, "echo x; sleep 100");
	struct rec r, queued;
	int64_t t0;

	rec_init(&r);
	rec_init(&queued);
	submit(f, &req, &r);
	assert_true(rec_wait(&r, true, 10));
	usleep(200 * 1000); /* let it print */
	req.spawn.command = "sleep 100";
	submit(f, &req, &queued);
	t0 = mono_ms();
	sbx_runner_free(&f->runner);
	assert_null(f->runner);
	/* reported before free returned */
	assert_true(r.done);
	assert_true(r.have_res);
	assert_true(r.res.cancelled);
	assert_int_equal(r.res.exit_code, 128 + SIGTERM);
	assert_string_equal(r.res.stdout_text, "x\n");
	assert_true(queued.done);
	assert_true(mono_ms() - t0 < 3000);
	rec_fini(&r);
	rec_fini(&queued);
}

/* Wait (bounded) until stream 1's output events hold want. */
static bool rec_wait_output(struct rec *r, const char *want, int seconds)
{
	for (int64_t until = mono_ms() + seconds * 1000; mono_ms() < until; usleep(10000)) {
		pthread_mutex_lock(&r->mu);
		bool seen = r->ev_out[1] && strstr(r->ev_out[1], want);
		pthread_mutex_unlock(&r->mu);
		if (seen)
			return true;
	}
	return false;
}

static size_t jobs_on(struct sbx_runner *rn, size_t i)
{
	struct sbx_runner_thread_stats st;

	assert_int_equal(sbx_runner_thread_stats(rn, i, &st), 0);
	return st.jobs;
}

/* Two threads: two commands running at once land on different threads
 * (least loaded), each thread owns its own; stdin, resize and cancel
 * reach each through its handle; the figures add up. */
static void test_threads_own_their_jobs(void **state)
{
	struct fixture *f = *state;
	struct sbx_runner *rn = NULL;
	struct sbx_exec_req req = base_req(f, "read l; echo got-$l; exec sleep 100");
	struct rec a, b;
	struct sbx_runner_thread_stats st;
	uint64_t ov[SBX_RUNNER_MAX_THREADS], spawns = 0, sum = 0;

	assert_int_equal(sbx_runner_new(&rn, 0), -EINVAL);
	assert_int_equal(sbx_runner_new(&rn, SBX_RUNNER_MAX_THREADS + 1), -EINVAL);
	assert_int_equal(sbx_runner_new(&rn, 2), 0);
	assert_int_equal(sbx_runner_threads(rn), 2);
	assert_int_equal(sbx_runner_thread_stats(rn, 2, &st), -EINVAL);
	req.stdin_pipe = true;
	req.want_output_events = true;
	req.id = NULL;
	rec_init(&a);
	rec_init(&b);
	assert_int_equal(sbx_runner_submit(rn, &req, on_event, &a, &a.job), 0);
	assert_int_equal(sbx_runner_submit(rn, &req, on_event, &b, &b.job), 0);
	assert_true(b.job > a.job);
	assert_int_not_equal(a.job % 2, b.job % 2); /* the handle names the thread */
	assert_true(rec_wait(&a, true, 10) && a.started);
	assert_true(rec_wait(&b, true, 10) && b.started);
	assert_int_equal(jobs_on(rn, a.job % 2), 1);
	assert_int_equal(jobs_on(rn, b.job % 2), 1);
	/* each command's stdin reaches it from this (another) thread */
	assert_int_equal(sbx_runner_stdin(rn, b.job, "bee\n", 4, false, NULL), 0);
	assert_int_equal(sbx_runner_stdin(rn, a.job, "ay\n", 3, false, NULL), 0);
	assert_true(rec_wait_output(&a, "got-ay\n", 10));
	assert_true(rec_wait_output(&b, "got-bee\n", 10));
	assert_int_equal(sbx_runner_resize(rn, a.job, 80, 24), -ENOTTY); /* found, on its thread */
	/* a handle no thread made, or of the other thread's numbering */
	assert_int_equal(sbx_runner_cancel(rn, 0), -ESRCH);
	assert_int_equal(sbx_runner_cancel(rn, a.job + 2 * 1000), -ESRCH);
	assert_int_equal(sbx_runner_cancel(rn, b.job), 0);
	assert_int_equal(sbx_runner_cancel(rn, a.job), 0);
	assert_true(rec_wait(&a, false, 10) && rec_wait(&b, false, 10));
	assert_true(a.res.cancelled && b.res.cancelled);
	assert_int_equal(a.res.exit_code, 128 + SIGTERM);
	assert_int_equal(b.res.exit_code, 128 + SIGTERM);
	assert_int_equal(sbx_runner_active(rn), 0);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(sbx_runner_thread_stats(rn, i, &st), 0);
		assert_int_equal(st.jobs, 0);
		assert_int_equal(st.queued, 0);
		assert_int_equal(st.spawns, 1);
		assert_true(st.spawn_ns > 0);
		spawns += st.spawns;
	}
	sbx_runner_spawn_overlap(rn, ov, SBX_RUNNER_MAX_THREADS);
	for (size_t k = 0; k < SBX_RUNNER_MAX_THREADS; k++)
		sum += ov[k];
	assert_int_equal(sum, spawns);
	sbx_runner_free(&rn);
	rec_fini(&a);
	rec_fini(&b);
}

/* Timeouts and idle timeouts fire on every thread, for every command. */
static void test_timeouts_on_every_thread(void **state)
{
	struct fixture *f = *state;
	struct sbx_runner *rn = NULL;
	struct rec rs[6];
	bool on[3] = {false, false, false};

	assert_int_equal(sbx_runner_new(&rn, 3), 0);
	for (int i = 0; i < 6; i++) {
		struct sbx_exec_req req = base_req(f, "exec sleep 100");

		req.id = NULL;
		if (i % 2)
			req.idle_timeout_ms = 300;
		else
			req.timeout_ms = 300;
		rec_init(&rs[i]);
		assert_int_equal(sbx_runner_submit(rn, &req, on_event, &rs[i], &rs[i].job), 0);
		on[rs[i].job % 3] = true;
	}
	assert_true(on[0] && on[1] && on[2]);
	for (int i = 0; i < 6; i++) {
		assert_true(rec_wait(&rs[i], false, 20));
		assert_true(rs[i].res.timed_out);
		assert_int_equal(rs[i].res.idle, i % 2 == 1);
		assert_int_equal(rs[i].res.exit_code, 124);
		rec_fini(&rs[i]);
	}
	sbx_runner_free(&rn);
}

/* One thread stuck: the watchdog names it, the other thread still starts
 * and ends commands, and stopping is bounded. */
static void test_watchdog_one_of_two(void **state)
{
	struct fixture *f = *state;
	struct stall st = {.entered = false};
	struct sbx_exec_req req = base_req(f, "echo other");
	struct sbx_runner_thread_stats ts;
	uint64_t stuck;
	struct rec r;
	struct sbx_runner *rn = stuck_runner(f, 2, &st, &stuck);

	assert_int_equal(sbx_runner_thread_stats(rn, stuck % 2, &ts), 0);
	assert_true(ts.busy_ms >= 300);
	assert_string_equal(ts.step, "starting commands");
	assert_int_equal(sbx_runner_thread_stats(rn, (stuck + 1) % 2, &ts), 0);
	assert_true(ts.busy_ms < 300);
	/* the other thread takes the next command and finishes it */
	rec_init(&r);
	assert_int_equal(sbx_runner_submit(rn, &req, on_event, &r, &r.job), 0);
	assert_int_not_equal(r.job % 2, stuck % 2);
	assert_true(rec_wait(&r, false, 10));
	assert_string_equal(r.res.stdout_text, "other\n");
	rec_fini(&r);
	stop_stuck(&rn, &st);
}

static void on_event_pid(void *ctx, const struct sbx_event *ev, int spawn_error)
{
	int fd = *(int *)ctx;

	(void)spawn_error;
	if (ev->kind == SBX_EV_START && write(fd, &ev->pid, sizeof(ev->pid)) != sizeof(ev->pid))
		abort();
}

/* Whether pid is gone (or a zombie nobody has reaped yet). */
static bool pid_dead(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *fp;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fp = fopen(path, "r");
	if (!fp)
		return true;
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* A process whose runner has two threads, each owning a command, dies:
 * both commands die with it (PR_SET_PDEATHSIG is set per spawning
 * thread, and every thread goes with the process). */
static void test_commands_die_with_process(void **state)
{
	struct fixture *f = *state;
	int fds[2];
	pid_t child, pids[2];

	assert_int_equal(pipe(fds), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		struct sbx_runner *rn = NULL;
		struct sbx_exec_req req = base_req(f, "exec sleep 1000");
		uint64_t job[2];

		close(fds[0]);
		req.id = NULL;
		if (sbx_runner_new(&rn, 2) < 0 ||
		    sbx_runner_submit(rn, &req, on_event_pid, &fds[1], &job[0]) < 0 ||
		    sbx_runner_submit(rn, &req, on_event_pid, &fds[1], &job[1]) < 0 ||
		    job[0] % 2 == job[1] % 2)
			_exit(2);
		for (;;)
			pause(); /* killed by the test */
	}
	close(fds[1]);
	for (int i = 0; i < 2; i++)
		assert_int_equal(read(fds[0], &pids[i], sizeof(pids[i])), sizeof(pids[i]));
	close(fds[0]);
	assert_false(pid_dead(pids[0]));
	assert_false(pid_dead(pids[1]));
	assert_int_equal(kill(child, SIGKILL), 0);
	assert_int_equal(waitpid(child, NULL, 0), child);
	for (int64_t until = mono_ms() + 10000; mono_ms() < until; usleep(20000))
		if (pid_dead(pids[0]) && pid_dead(pids[1]))
			break;
	assert_true(pid_dead(pids[0]));
	assert_true(pid_dead(pids[1]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    UNIT_TEST_FX(test_echo),
	    UNIT_TEST_FX(test_exit_codes),
	    UNIT_TEST_FX(test_timeout),
	    UNIT_TEST_FX(test_timeout_term_ignored),
	    UNIT_TEST_FX(test_idle_timeout),
	    UNIT_TEST_FX(test_cancel_other_thread),
	    UNIT_TEST_FX(test_timeout_then_cancel_keeps_timeout),
	    UNIT_TEST_FX(test_background_child_killed),
	    UNIT_TEST_FX(test_setsid_child_does_not_block),
	    UNIT_TEST_FX(test_heartbeats),
	    UNIT_TEST_FX(test_heartbeats_silent),
	    UNIT_TEST_FX(test_stdin),
	    UNIT_TEST_FX(test_stdin_pipe),
	    UNIT_TEST_FX(test_tty),
	    UNIT_TEST_FX(test_output_events),
	    UNIT_TEST_FX(test_spill_and_truncation),
	    UNIT_TEST_FX(test_spawn_failure),
	    UNIT_TEST_FX(test_concurrent),
	    UNIT_TEST_FX(test_watchdog),
	    UNIT_TEST_FX(test_free_cancels_running),
	};
	const struct CMUnitTest threads[] = {
	    UNIT_TEST_FX(test_threads_own_their_jobs),
	    UNIT_TEST_FX(test_timeouts_on_every_thread),
	    UNIT_TEST_FX(test_watchdog_one_of_two),
	    UNIT_TEST_FX(test_commands_die_with_process),
	};
	int failed = cmocka_run_group_tests_name("runner, one thread", tests, NULL, NULL);

	g_threads = 3;
	failed += cmocka_run_group_tests_name("runner, three threads", tests, NULL, NULL);
	failed += cmocka_run_group_tests_name("runner threads", threads, NULL, NULL);
	return failed;
}
