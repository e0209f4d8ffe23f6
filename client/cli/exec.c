/* sbx exec and sbx cancel. exec streams the command's output as it comes
 * and exits with the command's exit code; the first Ctrl-C (or SIGTERM)
 * cancels the remote command (POST /exec/{id}/cancel) and waits for its
 * result, a second one stops waiting (closing the connection, which the
 * server also takes as a cancel). */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/cli/cli.h"
#include "common/buf.h"
#include "common/xmalloc.h"

#define MAX_ENV 256

struct run {
	struct cli *c;
	pthread_mutex_t lock;
	char id[72]; /* known once the server accepted the exec */
	bool cancel_sent;
	struct sbxc_cancel *stop;
	struct cli_term out[2]; /* stdout, stderr (client/cli/term.c) */
};

static int on_output(void *arg, int stream, const char *data, size_t len)
{
	struct run *r = arg;
	cli_term_write(&r->out[stream == 2], stream == 2 ? stderr : stdout, data, len);
	return 0;
}

static void on_started(void *arg, const char *id)
{
	struct run *r = arg;
	pthread_mutex_lock(&r->lock);
	snprintf(r->id, sizeof r->id, "%s", id ? id : "");
	pthread_mutex_unlock(&r->lock);
}

/* The first signal cancels the command, the second stops waiting. */
static void on_signal(struct run *r)
{
	pthread_mutex_lock(&r->lock);
	char id[72];
	snprintf(id, sizeof id, "%s", r->id);
	bool again = r->cancel_sent;
	r->cancel_sent = true;
	pthread_mutex_unlock(&r->lock);
	if (again || !id[0]) {
		sbxc_cancel_fire(r->stop);
		return;
	}
	if (!r->c->quiet)
		fprintf(stderr, "sbx: cancelling %s (Ctrl-C again to stop waiting)\n", id);
	struct sbxc_call call = {.session = r->c->call.session, .timeout_ms = 10000};
	struct sbxc_err err;
	int rc = sbxc_exec_cancel(r->c->h, &call, id, &err);
	if (rc < 0 && rc != -EBUSY) {
		cli_fail(r->c, "cancel", rc, &err);
		sbxc_cancel_fire(r->stop);
	}
}

static void *signal_thread(void *arg)
{
	struct run *r = arg;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR1);
	for (;;) {
		int sig = 0;
		if (sigwait(&set, &sig) != 0 || sig == SIGUSR1)
			return NULL; /* SIGUSR1: the exec is over */
		on_signal(r);
	}
}

static json_t *result_json(const struct sbxc_result *res)
{
	json_t *o = json_pack(
	    "{s:s, s:i, s:s, s:s, s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:I, s:I, s:s?, s:s?, s:s, s:s, s:I}",
	    "id", res->id, "exit_code", res->exit_code, "stdout", res->stdout_text, "stderr",
	    res->stderr_text, "timed_out", res->timed_out, "cancelled", res->cancelled, "truncated",
	    res->truncated, "idle", res->idle, "oom_killed", res->oom_killed, "pids_limited",
	    res->pids_limited, "uncontained", res->uncontained, "stdout_bytes", (json_int_t)res->stdout_bytes,
	    "stderr_bytes", (json_int_t)res->stderr_bytes, "stdout_spill", res->stdout_spill, "stderr_spill",
	    res->stderr_spill, "started_at", res->started_at, "finished_at", res->finished_at, "duration_ms",
	    (json_int_t)res->duration_ms);
	if (o && res->networked) {
		json_t *a = json_array();
		for (size_t i = 0; i < res->n_egress_denied; i++)
			json_array_append_new(a, json_pack("{s:s, s:s}", "dest", res->egress_denied[i].dest,
							   "reason", res->egress_denied[i].reason));
		json_object_set_new(o, "egress_denied", a);
	}
	return o;
}

/* Why the command ended, for a person (stderr, beside its exit status):
 * a 137 alone does not say the OOM killer sent the SIGKILL; and what its
 * network was refused, one line per destination. */
static void print_why(const struct sbxc_result *res)
{
	if (res->timed_out)
		fprintf(stderr, "sbx: the command timed out%s\n", res->idle ? " (idle)" : "");
	if (res->oom_killed)
		fprintf(stderr, "sbx: killed: out of memory (its memory limit or its tenant's budget)\n");
	if (res->pids_limited)
		fprintf(stderr, "sbx: a fork was refused: process limit reached\n");
	if (res->uncontained)
		fprintf(stderr, "sbx: note: the command ran uncontained (no cgroups: rlimits only)\n");
	/* The destination is what the sandbox asked for: neutralised, as its output. */
	for (size_t i = 0; i < res->n_egress_denied; i++) {
		const struct sbxc_egress_denied *d = &res->egress_denied[i];
		fputs("sbx: egress refused: ", stderr);
		cli_term_puts(stderr, d->dest, strlen(d->dest));
		fputs(": ", stderr);
		cli_term_line(stderr, d->reason);
	}
}

static int read_stdin(struct buf *b)
{
	char chunk[65536];
	for (;;) {
		ssize_t n = read(STDIN_FILENO, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		if (buf_append(b, chunk, (size_t)n) < 0)
			return -E2BIG;
	}
}

static long num_arg(const char *s, const char *name, bool *ok)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*end || end == s || v < 0) {
		*ok = false;
		cli_usage("%s takes a whole number", name);
	}
	return v;
}

struct exec_args {
	struct sbxc_exec_req req;
	struct sbxc_env env[MAX_ENV];
	char *command;
	struct buf in;
	bool with_stdin;
	bool raw; /* --raw: the output's bytes as they came */
};

static int parse_exec(int argc, char **argv, struct exec_args *a)
{
	static const struct option opts[] = {
	    {"env", required_argument, NULL, 'e'},     {"cwd", required_argument, NULL, 'w'},
	    {"timeout", required_argument, NULL, 't'}, {"idle-timeout", required_argument, NULL, 'I'},
	    {"stdin", no_argument, NULL, 'i'},	       {"max-output", required_argument, NULL, 'm'},
	    {"id", required_argument, NULL, 'x'},      {"raw", no_argument, NULL, 'R'},
	    {"network", no_argument, NULL, 'N'},       {NULL, 0, NULL, 0}};
	int ch;
	bool ok = true;
	while (ok && (ch = getopt_long(argc, argv, "+e:w:t:i", opts, NULL)) != -1) {
		if (ch == 'e') {
			char *eq = strchr(optarg, '=');
			if (!eq || a->req.nenv == MAX_ENV)
				return cli_usage("-e takes NAME=VALUE (at most %d)", MAX_ENV);
			*eq = '\0';
			a->env[a->req.nenv++] = (struct sbxc_env){optarg, eq + 1};
		} else if (ch == 'w') {
			a->req.cwd = optarg;
		} else if (ch == 't') {
			a->req.timeout_s = num_arg(optarg, "--timeout", &ok);
		} else if (ch == 'I') {
			a->req.idle_timeout_s = num_arg(optarg, "--idle-timeout", &ok);
		} else if (ch == 'm') {
			a->req.max_output_bytes = num_arg(optarg, "--max-output", &ok);
		} else if (ch == 'x') {
			a->req.id = optarg;
		} else if (ch == 'i') {
			a->with_stdin = true;
		} else if (ch == 'R') {
			a->raw = true;
		} else if (ch == 'N') {
			a->req.network = true;
		} else {
			return CLI_USAGE;
		}
	}
	if (!ok)
		return CLI_USAGE;
	if (optind >= argc)
		return cli_usage("exec needs a command");
	struct buf cmd;
	buf_init(&cmd, 1u << 20);
	for (int i = optind; i < argc; i++)
		buf_appendf(&cmd, "%s%s", i > optind ? " " : "", argv[i]);
	a->command = buf_steal(&cmd, NULL);
	a->req.command = a->command;
	a->req.env = a->env;
	return 0;
}

static int run_exec(struct cli *c, struct exec_args *a)
{
	struct run r = {.c = c, .out = {{.raw = a->raw}, {.raw = a->raw}}};
	pthread_mutex_init(&r.lock, NULL);
	sbxc_cancel_new(&r.stop);
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	pthread_t t;
	pthread_create(&t, NULL, signal_thread, &r);
	struct sbxc_call call = c->call;
	call.cancel = r.stop;
	struct sbxc_result res;
	struct sbxc_err err;
	int rc = sbxc_exec(c->h, &call, &a->req, c->json ? NULL : on_output, on_started, &r, &res, &err);
	cli_term_flush(&r.out[0], stdout);
	cli_term_flush(&r.out[1], stderr);
	pthread_kill(t, SIGUSR1);
	pthread_join(t, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	sbxc_cancel_free(&r.stop);
	pthread_mutex_destroy(&r.lock);
	if (rc == -ECANCELED) {
		fprintf(stderr, "sbx: stopped waiting; the command was cancelled\n");
		return 130;
	}
	if (rc < 0) {
		cli_fail(c, "exec", rc, &err);
		return CLI_EXEC_FAIL;
	}
	if (c->json)
		cli_print_json(result_json(&res));
	else if (!c->quiet)
		print_why(&res);
	int code = res.exit_code >= 0 && res.exit_code <= 255 ? res.exit_code : CLI_EXEC_FAIL;
	sbxc_result_clear(&res);
	return code;
}

int cmd_exec(struct cli *c, int argc, char **argv)
{
	struct exec_args a = {0};
	buf_init(&a.in, 16u << 20);
	int rc = parse_exec(argc, argv, &a);
	if (rc == 0 && a.with_stdin) {
		if (read_stdin(&a.in) < 0)
			rc = cli_usage("cannot read stdin (at most 16 MiB)");
		a.req.stdin_data = buf_cstr(&a.in);
		a.req.stdin_len = a.in.len;
	}
	if (rc == 0)
		rc = run_exec(c, &a);
	free(a.command);
	buf_free(&a.in);
	return rc;
}

int cmd_cancel(struct cli *c, int argc, char **argv)
{
	if (argc != 2)
		return cli_usage("cancel takes one exec id");
	struct sbxc_err err;
	int rc = sbxc_exec_cancel(c->h, &c->call, argv[1], &err);
	if (rc < 0)
		return cli_fail(c, "cancel", rc, &err);
	if (c->json)
		cli_print_json(json_pack("{s:s, s:s}", "id", argv[1], "state", "cancelling"));
	return CLI_OK;
}
