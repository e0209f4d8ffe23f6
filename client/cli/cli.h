#pragma once
/* sbx, the command-line client: what its subcommands share. Each
 * subcommand is one function over the connected handle and its own
 * arguments (argv[0] is the subcommand's name); it returns the process's
 * exit status. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "client/sandboxd.h"

/* Exit statuses besides a command's own (exec). */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2, CLI_EXEC_FAIL = 125 };

struct cli {
	struct sbxc *h;
	struct sbxc_call call; /* session and deadline from the global flags */
	bool json;	       /* --json: machine-readable output on stdout */
	bool quiet;	       /* --quiet: no progress or notices on stderr */
};

/* Report a failed call on stderr ("sbx: <what>: <code>: <message>"), or
 * with --json as {"error": {...}} on stdout; returns CLI_FAIL. */
int cli_fail(struct cli *c, const char *what, int rc, const struct sbxc_err *err);
/* Usage error: message and a pointer to --help on stderr; CLI_USAGE. */
int cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print a JSON value (reference taken) on one line of stdout. */
void cli_print_json(json_t *o);
/* A sandbox path argument: "sandbox:PATH" or ":PATH" -> PATH, else NULL. */
const char *cli_remote(const char *arg);

/* A remote command's output on the user's terminal: the command is a
 * tenant's, so its escape sequences must not drive the terminal (retitle
 * it, clear it, rewrite what was shown). Unless raw, control characters
 * but LF and TAB are printed in caret notation (ESC as ^[, DEL as ^?; a
 * CR only before an LF), C1 and bidi controls as <U+XXXX>, bytes that are
 * not UTF-8 as \xHH. One per stream (a sequence cut between chunks is
 * held for the next); flush at the end. */
struct cli_term {
	bool raw;		/* --raw: the bytes as they came */
	bool cr;		/* a CR waits for the next byte */
	unsigned char carry[4]; /* an incomplete UTF-8 character */
	size_t ncarry;
};
void cli_term_write(struct cli_term *t, FILE *f, const char *data, size_t len);
void cli_term_flush(struct cli_term *t, FILE *f);
/* One whole string so (a command, a session key, an audit target). */
void cli_term_puts(FILE *f, const char *s, size_t len);
/* A C string so, then a line feed (a listed name, an error message). */
void cli_term_line(FILE *f, const char *s);

int cmd_exec(struct cli *c, int argc, char **argv);
int cmd_cancel(struct cli *c, int argc, char **argv);
int cmd_cp(struct cli *c, int argc, char **argv);
int cmd_cat(struct cli *c, int argc, char **argv);
int cmd_ls(struct cli *c, int argc, char **argv);
int cmd_stat(struct cli *c, int argc, char **argv);
int cmd_rm(struct cli *c, int argc, char **argv);
int cmd_mkdir(struct cli *c, int argc, char **argv);
int cmd_mv(struct cli *c, int argc, char **argv);
int cmd_watch(struct cli *c, int argc, char **argv);
int cmd_audit(struct cli *c, int argc, char **argv);
