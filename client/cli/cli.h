#pragma once
/* sbx, the command-line client: what its subcommands share. Each
 * subcommand is one function over the connected handle and its own
 * arguments (argv[0] is the subcommand's name); it returns the process's
 * exit status. */
#include <jansson.h>
#include <stdbool.h>

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
