/* Terminals (issue 17), through the real bwrap backend: a command on a
 * pseudo-terminal sees one on stdin, stdout and stderr (merged into one
 * stream, as terminals do), with the size asked for; a resize reaches it
 * (SIGWINCH, the new size); input goes through the stdin route (^C
 * interrupts the foreground job, eof is ^D); TIOCSTI stays denied; and
 * resizes are audited. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_agent.h"

static struct it_server srv;
static char *tok;
static const struct it_tok toks[] = {{&tok, "acme", NULL}};

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), NULL};
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

static json_t *start_tty(const char *id, const char *command, int cols, int rows)
{
	return ag_expect(&srv, tok, NULL, "/exec",
			 json_pack("{s:s, s:s, s:b, s:b, s:i, s:i, s:i}", "id", id, "command", command, "tty",
				   1, "background", 1, "cols", cols, "rows", rows, "timeout_s", 120),
			 202);
}

static const char probe[] = "python3 -u -c '\n"
			    "import errno, fcntl, os, signal, sys, termios\n"
			    "signal.signal(signal.SIGWINCH, lambda *a: print(\"winch\", flush=True))\n"
			    "print(\"isatty\", os.isatty(0), os.isatty(1), os.isatty(2))\n"
			    "try:\n"
			    "    fcntl.ioctl(0, termios.TIOCSTI, b\"x\"); print(\"tiocsti allowed\")\n"
			    "except OSError as e:\n"
			    "    print(\"tiocsti\", errno.errorcode[e.errno])\n"
			    "print(\"to-stderr\", file=sys.stderr, flush=True)\n"
			    "c, r = os.get_terminal_size(0)\n"
			    "print(f\"size {c}x{r}\")\n"
			    "line = sys.stdin.readline().strip()\n"
			    "c, r = os.get_terminal_size(0)\n"
			    "print(f\"size {c}x{r} after {line}\")\n"
			    "'";

static void test_terminal_size_and_resize(void **state)
{
	(void)state;
	json_decref(start_tty("pty1", probe, 100, 30));
	struct ag_follow f;
	ag_follow_open(&f, &srv, tok, "pty1");
	assert_true(ag_follow_wait(&f, 0, "size 100x30", 30000));
	char *head = xstrndup(f.out.ptr, f.out.len);
	assert_non_null(strstr(head, "isatty True True True\r\n")); /* the terminal's own line endings */
	assert_non_null(strstr(head, "tiocsti EPERM"));
	assert_non_null(strstr(head, "to-stderr")); /* merged */
	free(head);
	size_t from = f.out.len;
	json_t *v = ag_expect(&srv, tok, NULL, "/exec/pty1/resize",
			      json_pack("{s:i, s:i}", "cols", 120, "rows", 40), 200);
	assert_int_equal(jint(v, "cols"), 120);
	json_decref(v);
	assert_true(ag_follow_wait(&f, from, "winch", 20000));
	assert_int_equal(ag_stdin(&srv, tok, "pty1", "go\r", false, NULL), 200);
	assert_true(ag_follow_wait(&f, from, "size 120x40 after go", 20000));
	assert_true(ag_follow_exit(&f, 20000));
	ag_follow_close(&f);
	v = ex_wait_state(&srv, tok, "pty1", "exited", 20000);
	assert_non_null(v);
	json_t *res = json_object_get(v, "result");
	assert_int_equal(jint(res, "exit_code"), 0);
	assert_int_equal(jint(res, "stderr_bytes"), 0);
	assert_non_null(strstr(jstr(res, "stdout"), "to-stderr"));
	json_decref(v);
	json_t *row = ag_audit_row(&srv, "/exec/{id}/resize", "pty1 resize 120x40");
	assert_non_null(row);
	json_decref(row);
}

/* ^C reaches the foreground job as SIGINT, as in a terminal. */
static void test_interrupt(void **state)
{
	(void)state;
	/* The handler is in place before "ready": a ^C that a shell gets
	 * between two commands is the shell's, not this test's. */
	json_decref(start_tty("pty2",
			      "exec python3 -c '\n"
			      "import os, signal, time\n"
			      "def stop(*a):\n"
			      "    os.write(1, b\"got SIGINT\\n\"); os._exit(130)\n"
			      "signal.signal(signal.SIGINT, stop)\n"
			      "print(\"ready\", flush=True)\n"
			      "time.sleep(600)\n"
			      "'",
			      80, 24));
	struct ag_follow f;
	ag_follow_open(&f, &srv, tok, "pty2");
	assert_true(ag_follow_wait(&f, 0, "ready", 20000));
	assert_int_equal(ag_stdin(&srv, tok, "pty2", "\003", false, NULL), 200);
	assert_true(ag_follow_wait(&f, 0, "got SIGINT", 20000));
	assert_true(ag_follow_exit(&f, 20000));
	ag_follow_close(&f);
	json_t *v = ex_wait_state(&srv, tok, "pty2", "exited", 20000);
	assert_non_null(v);
	assert_int_equal(jint(json_object_get(v, "result"), "exit_code"), 130);
	assert_false(jtrue(json_object_get(v, "result"), "cancelled"));
	json_decref(v);
}

/* eof on a terminal is ^D: a reader at the start of a line sees the end. */
static void test_eof_is_ctrl_d(void **state)
{
	(void)state;
	json_decref(start_tty("pty3", "stty -echo; echo ready; cat; echo cat-ended", 80, 24));
	struct ag_follow f;
	ag_follow_open(&f, &srv, tok, "pty3");
	assert_true(ag_follow_wait(&f, 0, "ready", 20000));
	assert_int_equal(ag_stdin(&srv, tok, "pty3", "line one\n", true, NULL), 200);
	assert_true(ag_follow_wait(&f, 0, "cat-ended", 20000));
	assert_true(ag_follow_exit(&f, 20000));
	char *all = xstrndup(f.out.ptr, f.out.len);
	assert_non_null(strstr(all, "line one\r\n"));
	free(all);
	ag_follow_close(&f);
	json_t *v = ex_wait_state(&srv, tok, "pty3", "exited", 20000);
	assert_non_null(v);
	assert_int_equal(jint(json_object_get(v, "result"), "exit_code"), 0);
	json_decref(v);
}

static void test_refusals(void **state)
{
	(void)state;
	struct it_resp r;
	/* cols and rows without tty */
	assert_int_equal(ag_post(&srv, tok, NULL, "/exec",
				 json_pack("{s:s, s:i}", "command", "true", "cols", 80), NULL, &r),
			 400);
	it_resp_free(&r);
	/* a resize of an exec without a terminal */
	json_decref(ag_expect(&srv, tok, NULL, "/exec",
			      json_pack("{s:s, s:s, s:b, s:b}", "id", "notty", "command", "sleep 600",
					"background", 1, "stdin_pipe", 1),
			      202));
	assert_int_equal(ag_post(&srv, tok, NULL, "/exec/notty/resize",
				 json_pack("{s:i, s:i}", "cols", 80, "rows", 24), NULL, &r),
			 409);
	it_expect_error(&r, 409, "conflict");
	it_resp_free(&r);
	assert_int_equal(ag_post(&srv, tok, NULL, "/exec/notty/resize",
				 json_pack("{s:i, s:i}", "cols", 0, "rows", 24), NULL, &r),
			 400);
	it_resp_free(&r);
	assert_int_equal(it_http(&srv, "POST", "/exec/notty/cancel", tok, NULL, NULL, 0, &r), 0);
	it_resp_free(&r);
	json_decref(ex_wait_state(&srv, tok, "notty", "cancelled", 20000));
	/* a resize of an unknown exec: 404 */
	assert_int_equal(ag_post(&srv, tok, NULL, "/exec/nope/resize",
				 json_pack("{s:i, s:i}", "cols", 80, "rows", 24), NULL, &r),
			 404);
	it_resp_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_terminal_size_and_resize),
	    cmocka_unit_test(test_interrupt),
	    cmocka_unit_test(test_eof_is_ctrl_d),
	    cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests_name("pty", tests, setup, teardown);
}
