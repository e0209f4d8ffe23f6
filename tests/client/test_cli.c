/* The sbx binary against the real server: exec's exit codes, output and
 * Ctrl-C (SIGINT cancels the remote command: its final state is read
 * back through the API), cp both ways with checksums, --json outputs
 * parsed, and failures with non-zero statuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client_test.h"
#include "common/xmalloc.h"

static struct it_server srv;
static char *tok, *audit_tok;
static const struct it_tok toks[] = {{&tok, "acme", NULL}, {&audit_tok, "acme", "audit:read"}};
static char tmp[] = "/tmp/sbx-cli-XXXXXX";

static int setup(void **state)
{
	(void)state;
	curl_global_init(CURL_GLOBAL_ALL);
	if (!mkdtemp(tmp))
		return -1;
	return it_start_minted(&srv, NULL, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	it_free_all(toks, IT_NTOKS(toks));
	it_cleanup(&srv);
	char *cmd = xasprintf("rm -rf %s", tmp);
	int rc = system(cmd);
	free(cmd);
	curl_global_cleanup();
	return rc == 0 ? 0 : -1;
}

static const char *sbx_bin(void)
{
	const char *b = getenv("SBX_BIN");
	return b ? b : "sbx";
}

struct run {
	int status;
	char *out, *err;
};

/* Start sbx with SANDBOXD_URL/TOKEN set (token NULL: none); stdin from
 * in_path (NULL: /dev/null); stdout to a pipe when out_fd is given, else
 * to a file read back by finish(). */
static pid_t spawn(const char *token, const char *const *args, const char *in_path, int *out_fd,
		   const char *name)
{
	int p[2] = {-1, -1};
	if (out_fd)
		assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("SANDBOXD_URL", srv.base, 1);
		if (token)
			setenv("SANDBOXD_TOKEN", token, 1);
		else
			unsetenv("SANDBOXD_TOKEN");
		char path[400];
		int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
		dup2(in, 0);
		snprintf(path, sizeof path, "%s/%s.out", tmp, name);
		int out = out_fd ? p[1] : open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		snprintf(path, sizeof path, "%s/%s.err", tmp, name);
		int err = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(out, 1);
		dup2(err, 2);
		const char *argv[64] = {sbx_bin()};
		for (int i = 0; i < 62 && args[i]; i++)
			argv[i + 1] = args[i];
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	if (out_fd) {
		close(p[1]);
		*out_fd = p[0];
	}
	return pid;
}

static int wait_exit(pid_t pid, int timeout_ms)
{
	int status = 0;
	for (int64_t end = ct_now_ms() + timeout_ms;; usleep(10000)) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		if (ct_now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg("sbx did not exit within %d ms", timeout_ms);
		}
	}
}

static struct run sbx(const char *token, const char *in_path, const char *const *args)
{
	static int count;
	char name[32];
	snprintf(name, sizeof name, "run%d", count++);
	pid_t pid = spawn(token, args, in_path, NULL, name);
	struct run r = {.status = wait_exit(pid, 60000)};
	char path[400];
	snprintf(path, sizeof path, "%s/%s.out", tmp, name);
	r.out = it_read_file(path, NULL);
	snprintf(path, sizeof path, "%s/%s.err", tmp, name);
	r.err = it_read_file(path, NULL);
	if (!r.out)
		r.out = xstrdup("");
	if (!r.err)
		r.err = xstrdup("");
	return r;
}

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
}

#define SBX(token, ...) sbx(token, NULL, (const char *const[]){__VA_ARGS__, NULL})

static void test_exec_exit_codes_and_output(void **state)
{
	(void)state;
	struct run r = SBX(tok, "exec", "--", "echo out; echo err >&2; exit 7");
	assert_int_equal(r.status, 7);
	assert_string_equal(r.out, "out\n");
	assert_string_equal(r.err, "err\n");
	run_free(&r);
	r = SBX(tok, "exec", "-e", "A=1", "-e", "B=two", "--", "echo", "$A-$B");
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "1-two\n");
	run_free(&r);
	r = SBX(tok, "exec", "--timeout", "1", "--", "sleep 30");
	assert_int_equal(r.status, 124);
	assert_non_null(strstr(r.err, "timed out"));
	run_free(&r);
	char in[400];
	snprintf(in, sizeof in, "%s/stdin.txt", tmp);
	assert_int_equal(it_write_file(in, "piped\n", 6), 0);
	r = sbx(tok, in, (const char *const[]){"exec", "-i", "--", "tr a-z A-Z", NULL});
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "PIPED\n");
	run_free(&r);
	/* --json: the ShellResult, and still the command's status */
	r = SBX(tok, "--json", "exec", "--id", "cli-json-1", "--", "printf hi; exit 3");
	assert_int_equal(r.status, 3);
	json_t *o = json_loads(r.out, 0, NULL);
	assert_non_null(o);
	assert_string_equal(json_string_value(json_object_get(o, "stdout")), "hi");
	assert_int_equal(json_integer_value(json_object_get(o, "exit_code")), 3);
	assert_string_equal(json_string_value(json_object_get(o, "id")), "cli-json-1");
	json_decref(o);
	run_free(&r);
	/* a command that cannot run: 125, and the wire error */
	r = SBX(tok, "exec", "-w", "no/such/dir", "--", "true");
	assert_int_equal(r.status, 125);
	assert_non_null(strstr(r.err, "not_found"));
	run_free(&r);
}

/* A command's output cannot drive the user's terminal (issue 26): escape
 * sequences (a window title, clear screen), other controls, C1 controls
 * and bidi controls are printed visibly (caret notation, <U+XXXX>), on
 * both streams; line feeds, tabs and CR LF stay; --raw prints the bytes
 * as they came. */
static void test_exec_neutralises_terminal_escapes(void **state)
{
	(void)state;
	const char *cmd = "printf '\\033]0;x\\007\\033[2J|a\\tb\\r\\nc\\rd\\302\\233e\\342\\200\\256f\\n'; "
			  "printf '\\033[31merr\\n' >&2";
	struct run r = SBX(tok, "exec", "--", cmd);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "^[]0;x^G^[[2J|a\tb\r\nc^Md<U+009B>e<U+202E>f\n");
	assert_string_equal(r.err, "^[[31merr\n");
	run_free(&r);
	r = SBX(tok, "exec", "--raw", "--", cmd);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "\033]0;x\007\033[2J|a\tb\r\nc\rd\302\233e\342\200\256f\n");
	assert_string_equal(r.err, "\033[31merr\n");
	run_free(&r);
	/* watch and audit show a command with an ESC in it the same way */
	r = SBX(tok, "exec", "--id", "cli-esc-1", "--", "true # \033]0;t\007");
	assert_int_equal(r.status, 0);
	run_free(&r);
	r = SBX(tok, "watch", "--exec", "cli-esc-1");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, ": true # ^[]0;t^G\n"));
	assert_null(strchr(r.out, '\033'));
	run_free(&r);
	r = SBX(audit_tok, "audit", "--route", "/exec");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "true # ^[]0;t^G\n"));
	assert_null(strchr(r.out, '\033'));
	run_free(&r);
}

/* Ctrl-C: SIGINT to sbx cancels the remote command, which the API then
 * reports as cancelled; sbx exits with the command's status (SIGTERM). */
static void test_exec_ctrl_c_cancels(void **state)
{
	(void)state;
	int out = -1;
	pid_t pid =
	    spawn(tok, (const char *const[]){"exec", "--id", "cli-int-1", "--", "echo ready; sleep 60", NULL},
		  NULL, &out, "ctrlc");
	char buf[256] = {0};
	size_t n = 0;
	for (int64_t end = ct_now_ms() + 20000; !strstr(buf, "ready\n");) {
		struct pollfd p = {.fd = out, .events = POLLIN};
		assert_true(ct_now_ms() < end);
		if (poll(&p, 1, 100) > 0) {
			ssize_t k = read(out, buf + n, sizeof buf - 1 - n);
			assert_true(k > 0);
			n += (size_t)k;
		}
	}
	int64_t t0 = ct_now_ms();
	kill(pid, SIGINT);
	int status = wait_exit(pid, 20000);
	close(out);
	assert_int_equal(status, 128 + 15);
	assert_true(ct_now_ms() - t0 < 15000);
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/exec/cli-int-1", tok, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	json_t *o = it_json(&r);
	assert_string_equal(json_string_value(json_object_get(o, "state")), "cancelled");
	assert_true(json_is_true(json_object_get(json_object_get(o, "result"), "cancelled")));
	json_decref(o);
	it_resp_free(&r);
}

static void sha256_file(const char *path, char out[65])
{
	size_t len = 0;
	char *data = it_read_file(path, &len);
	assert_non_null(data);
	unsigned char d[32];
	EVP_Digest(data, len, d, NULL, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
	free(data);
}

static void test_cp_both_ways(void **state)
{
	(void)state;
	char src[400], back[400], dir[400], sha[65], sha2[65];
	snprintf(src, sizeof src, "%s/src.bin", tmp);
	snprintf(dir, sizeof dir, "%s/down", tmp);
	snprintf(back, sizeof back, "%s/down/src.bin", tmp);
	char *cmd = xasprintf("head -c 5000000 /dev/urandom > %s && mkdir -p %s", src, dir);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	sha256_file(src, sha);
	struct run r = SBX(tok, "mkdir", "-p", "up");
	assert_int_equal(r.status, 0);
	run_free(&r);
	/* up: into a directory keeps the name; the server's digest matches */
	r = SBX(tok, "--json", "cp", src, ":up");
	assert_int_equal(r.status, 0);
	json_t *o = json_loads(r.out, 0, NULL);
	assert_non_null(o);
	assert_string_equal(json_string_value(json_object_get(o, "sha256")), sha);
	assert_int_equal(json_integer_value(json_object_get(o, "bytes")), 5000000);
	assert_non_null(strstr(json_string_value(json_object_get(o, "to")), "/up/src.bin"));
	json_decref(o);
	run_free(&r);
	/* down: verified against sha256sum in the sandbox */
	r = SBX(tok, "--json", "cp", "sandbox:up/src.bin", dir);
	assert_int_equal(r.status, 0);
	o = json_loads(r.out, 0, NULL);
	assert_non_null(o);
	assert_true(json_is_true(json_object_get(o, "verified")));
	assert_string_equal(json_string_value(json_object_get(o, "sha256")), sha);
	json_decref(o);
	run_free(&r);
	sha256_file(back, sha2);
	assert_string_equal(sha, sha2);
	/* no progress bar when stderr is not a terminal */
	r = SBX(tok, "cp", ":up/src.bin", back);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	run_free(&r);
	/* on a terminal (util-linux script gives it one), a progress bar */
	char tty_out[400];
	snprintf(tty_out, sizeof tty_out, "%s/tty.out", tmp);
	cmd = xasprintf(
	    "SANDBOXD_URL=%s SANDBOXD_TOKEN=%s script -qec '%s cp :up/src.bin %s' /dev/null > %s 2>&1",
	    srv.base, tok, sbx_bin(), back, tty_out);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	char *tty = it_read_file(tty_out, NULL);
	assert_non_null(tty);
	assert_non_null(strstr(tty, "100%"));
	assert_non_null(strstr(tty, "MiB/s"));
	free(tty);
	/* both sides local, or a missing source: errors */
	r = SBX(tok, "cp", src, back);
	assert_int_equal(r.status, 2);
	run_free(&r);
	r = SBX(tok, "cp", ":up/missing.bin", back);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "not_found"));
	run_free(&r);
	sha256_file(back, sha2); /* the failed copy left the earlier file alone */
	assert_string_equal(sha, sha2);
}

static json_t *json_of(struct run *r)
{
	json_t *o = json_loads(r->out, 0, NULL);
	if (!o)
		fail_msg("not JSON: %s (stderr: %s)", r->out, r->err);
	return o;
}

static void test_json_outputs(void **state)
{
	(void)state;
	struct run r = SBX(tok, "-s", "js", "mkdir", "-p", "d/e");
	assert_int_equal(r.status, 0);
	run_free(&r);
	r = SBX(tok, "-s", "js", "exec", "--", "echo 12345 > d/f.txt");
	assert_int_equal(r.status, 0);
	run_free(&r);
	r = SBX(tok, "-s", "js", "--json", "ls", "d");
	assert_int_equal(r.status, 0);
	json_t *o = json_of(&r);
	json_t *v = json_object_get(o, "entries");
	assert_int_equal(json_array_size(v), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(v, 0), "name")), "e");
	assert_string_equal(json_string_value(json_object_get(json_array_get(v, 0), "type")), "directory");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(v, 1), "size")), 6);
	json_decref(o);
	run_free(&r);
	r = SBX(tok, "-s", "js", "--json", "stat", "d/f.txt");
	o = json_of(&r);
	assert_string_equal(json_string_value(json_object_get(o, "type")), "file");
	assert_string_equal(json_string_value(json_object_get(o, "mode")), "0644");
	json_decref(o);
	run_free(&r);
	r = SBX(tok, "-s", "js", "mv", "d/f.txt", "d/g.txt");
	assert_int_equal(r.status, 0);
	run_free(&r);
	r = SBX(tok, "-s", "js", "cat", "d/g.txt");
	assert_string_equal(r.out, "12345\n");
	run_free(&r);
	r = SBX(tok, "-s", "js", "--json", "rm", "-r", "d");
	o = json_of(&r);
	assert_true(json_is_true(json_object_get(o, "removed")));
	json_decref(o);
	run_free(&r);
	/* the audit, all pages */
	r = SBX(audit_tok, "--json", "audit", "--limit", "2", "--all", "--for-session", "js");
	assert_int_equal(r.status, 0);
	o = json_of(&r);
	v = json_object_get(o, "records");
	assert_true(json_array_size(v) >= 6);
	assert_true(json_is_null(json_object_get(o, "next")));
	json_decref(o);
	run_free(&r);
	/* an exec's events, one JSON object per line */
	r = SBX(tok, "exec", "--id", "cli-watch-1", "--", "echo w");
	run_free(&r);
	r = SBX(tok, "--json", "watch", "--exec", "cli-watch-1");
	assert_int_equal(r.status, 0);
	char *nl = strchr(r.out, '\n');
	assert_non_null(nl);
	*nl = '\0';
	o = json_of(&r);
	assert_string_equal(json_string_value(json_object_get(o, "event")), "start");
	assert_string_equal(json_string_value(json_object_get(json_object_get(o, "data"), "id")),
			    "cli-watch-1");
	json_decref(o);
	assert_non_null(strstr(nl + 1, "\"event\":\"exit\""));
	run_free(&r);
}

/* r exited with status, and its stdout (or stderr) shows want, with no ESC. */
static void shown_safely(struct run r, int status, bool err, const char *want)
{
	const char *text = err ? r.err : r.out;
	assert_int_equal(r.status, status);
	assert_non_null(strstr(text, want));
	assert_null(strchr(text, '\033'));
	run_free(&r);
}

/* Names a command made, and messages that quote them, cannot drive the
 * user's terminal either: a file named with an escape sequence (the
 * sandbox's code chose it) is listed by ls, ls -l and stat, and quoted by
 * an error, with its controls made visible; --json escapes C1 controls
 * and DEL (JSON leaves them raw), which some terminals obey (U+009B is
 * CSI). */
static void test_names_and_json_neutralised(void **state)
{
	(void)state;
	struct run r =
	    SBX(tok, "-s", "names", "exec", "--", "touch \"$(printf 'n\\033]0;x\\007\\302\\233m\\177')\"");
	assert_int_equal(r.status, 0);
	run_free(&r);
	shown_safely(SBX(tok, "-s", "names", "ls"), 0, false, "n^[]0;x^G<U+009B>m^?\n");
	shown_safely(SBX(tok, "-s", "names", "ls", "-l"), 0, false, " n^[]0;x^G<U+009B>m^?\n");
	shown_safely(SBX(tok, "-s", "names", "stat", "n\033]0;x\007\302\233m\177"), 0, false,
		     "n^[]0;x^G<U+009B>m^?: file");
	shown_safely(SBX(tok, "-s", "names", "cat", "gone\033]0;y\007"), 1, true, "gone^[]0;y^G");
	r = SBX(tok, "-s", "names", "--json", "ls");
	assert_int_equal(r.status, 0);
	assert_null(strstr(r.out, "\302\233"));
	assert_null(strchr(r.out, '\177'));
	json_t *o = json_of(&r);
	json_t *v = json_object_get(o, "entries");
	assert_string_equal(json_string_value(json_object_get(json_array_get(v, 0), "name")),
			    "n\033]0;x\007\302\233m\177");
	json_decref(o);
	run_free(&r);
}

static void test_errors_exit_non_zero(void **state)
{
	(void)state;
	struct run r = SBX(tok, "cat", "missing.txt");
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "not_found"));
	run_free(&r);
	r = SBX(tok, "--json", "cat", "missing.txt");
	assert_int_equal(r.status, 1);
	json_t *o = json_of(&r);
	assert_string_equal(json_string_value(json_object_get(json_object_get(o, "error"), "code")),
			    "not_found");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "error"), "status")), 404);
	json_decref(o);
	run_free(&r);
	r = SBX("not-a-token", "ls");
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "unauthorized"));
	run_free(&r);
	r = SBX(tok, "audit");
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "insufficient_scope"));
	run_free(&r);
	r = SBX(NULL, "ls");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "SANDBOXD_TOKEN"));
	run_free(&r);
	r = SBX(tok, "frobnicate");
	assert_int_equal(r.status, 2);
	run_free(&r);
	/* a flag beats the environment: a dead URL in the flag fails */
	r = SBX(tok, "--url", "http://127.0.0.1:1", "ls");
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "connect"));
	run_free(&r);
}

/* The example of docs/clients.md (client/examples/gateway.c), built with the
 * library, against the server. */
static void test_readme_example_runs(void **state)
{
	(void)state;
	const char *ex = getenv("SBXC_EXAMPLE");
	assert_non_null(ex);
	char out[400];
	snprintf(out, sizeof out, "%s/example.out", tmp);
	char *cmd = xasprintf("SANDBOXD_URL=%s SANDBOXD_TOKEN=%s %s > %s 2>&1", srv.base, tok, ex, out);
	int rc = system(cmd);
	free(cmd);
	char *text = it_read_file(out, NULL);
	assert_non_null(text);
	if (rc != 0)
		fail_msg("example: %s", text);
	assert_non_null(strstr(text, "hello from the sandbox\n"));
	assert_non_null(strstr(text, "exit 0\n"));
	assert_non_null(strstr(text, "out.txt has 23 bytes\n"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exec_exit_codes_and_output),
	    cmocka_unit_test(test_exec_neutralises_terminal_escapes),
	    cmocka_unit_test(test_names_and_json_neutralised),
	    cmocka_unit_test(test_exec_ctrl_c_cancels),
	    cmocka_unit_test(test_cp_both_ways),
	    cmocka_unit_test(test_json_outputs),
	    cmocka_unit_test(test_errors_exit_non_zero),
	    cmocka_unit_test(test_readme_example_runs),
	};
	return cmocka_run_group_tests_name("sbx", tests, setup, teardown);
}
