/* sbx: a command-line client of sandboxd on libsandboxd, in the manner of
 * kubectl exec / docker cp: global flags (or SANDBOXD_* variables) say
 * where and who, a subcommand says what. */
#include <curl/curl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/cli/cli.h"
#include "common/buf.h"

static const struct {
	const char *name;
	int (*fn)(struct cli *, int, char **);
	const char *help;
} commands[] = {
    {"exec", cmd_exec,
     "exec [-e NAME=VALUE]... [-w DIR] [-t SECONDS] [--idle-timeout S] [-i] [--max-output N] [--id ID] "
     "[--raw] "
     "[--network] -- COMMAND..."},
    {"cancel", cmd_cancel, "cancel EXEC_ID"},
    {"cp", cmd_cp, "cp [--no-verify] SRC DST        (one of them sandbox:PATH or :PATH; - is stdin/stdout)"},
    {"cat", cmd_cat, "cat PATH..."},
    {"ls", cmd_ls, "ls [-l] [PATH]"},
    {"stat", cmd_stat, "stat PATH..."},
    {"rm", cmd_rm, "rm [-r] [-f] PATH..."},
    {"mkdir", cmd_mkdir, "mkdir [-p] PATH..."},
    {"mv", cmd_mv, "mv [-f] FROM TO"},
    {"watch", cmd_watch, "watch [--exec ID [--output]] [--tenant T] [--last-event-id ID]"},
    {"audit", cmd_audit,
     "audit [--since T] [--until T] [--route R] [--outcome O] [--for-session K] "
     "[--tenant T] [--limit N] [--all]"},
};

static void help(FILE *f)
{
	fprintf(
	    f, "usage: sbx [--url URL] [--token TOKEN] [--tenant T] [-s SESSION] [--ca-file F] [--insecure]\n"
	       "           [--timeout SECONDS] [--json] [--quiet] COMMAND [ARGS]\n\n"
	       "Environment: SANDBOXD_URL, SANDBOXD_TOKEN, SANDBOXD_TENANT, SANDBOXD_SESSION, "
	       "SANDBOXD_CA_FILE.\n\nCommands:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  sbx %s\n", commands[i].help);
	fprintf(f, "\nexec prints the command's output with its control characters made visible (ESC as ^[,\n"
		   "C1 and bidi controls as <U+XXXX>, bytes that are not UTF-8 as \\xHH), so that it cannot\n"
		   "drive your terminal; --raw prints the bytes as they came.\n");
}

int cli_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sbx: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (sbx --help)\n", stderr);
	return CLI_USAGE;
}

int cli_fail(struct cli *c, const char *what, int rc, const struct sbxc_err *err)
{
	char msg[1024];
	sbxc_err_text(err, rc, msg, sizeof msg);
	if (c->json) {
		cli_print_json(json_pack("{s:{s:s, s:s, s:s, s:s?, s:I}}", "error", "code",
					 err && err->code[0] ? err->code : "client", "message", msg, "what",
					 what, "retry_hint",
					 err && err->retry_hint[0] ? err->retry_hint : NULL, "status",
					 (json_int_t)(err ? err->status : 0)));
	}
	/* Messages quote paths and names (some a command chose). */
	fputs("sbx: ", stderr);
	cli_term_puts(stderr, what, strlen(what));
	fputs(": ", stderr);
	cli_term_line(stderr, msg);
	return CLI_FAIL;
}

/* JSON text with DEL and the C1 controls (U+0080-U+009F) escaped, which
 * jansson leaves raw: a terminal may obey U+009B as CSI. Both occur only
 * inside strings, where \u00XX means the same character. */
static void json_escape_c1(struct buf *b, const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == 0x7f)
			buf_appendf(b, "\\u007f");
		else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
			buf_appendf(b, "\\u00%02x", *++p);
		else
			buf_append(b, (const char *)p, 1);
	}
}

void cli_print_json(json_t *o)
{
	if (!o)
		return;
	char *s = json_dumps(o, JSON_COMPACT | JSON_ENCODE_ANY);
	if (s) {
		struct buf b;
		buf_init(&b, 6 * strlen(s) + 1);
		json_escape_c1(&b, s);
		puts(buf_cstr(&b));
		buf_free(&b);
	}
	free(s);
	json_decref(o);
	fflush(stdout);
}

const char *cli_remote(const char *arg)
{
	if (strncmp(arg, "sandbox:", 8) == 0)
		return arg + 8;
	return arg[0] == ':' ? arg + 1 : NULL;
}

struct globals {
	struct sbxc_opts o;
	const char *session;
	long timeout_s;
};

static int parse_globals(int argc, char **argv, struct globals *g, struct cli *c)
{
	enum { O_URL = 256, O_TOKEN, O_TENANT, O_CA, O_INSECURE, O_TIMEOUT, O_JSON, O_HELP, O_VERSION };
	static const struct option opts[] = {{"url", required_argument, NULL, O_URL},
					     {"token", required_argument, NULL, O_TOKEN},
					     {"tenant", required_argument, NULL, O_TENANT},
					     {"session", required_argument, NULL, 's'},
					     {"ca-file", required_argument, NULL, O_CA},
					     {"insecure", no_argument, NULL, O_INSECURE},
					     {"timeout", required_argument, NULL, O_TIMEOUT},
					     {"json", no_argument, NULL, O_JSON},
					     {"quiet", no_argument, NULL, 'q'},
					     {"help", no_argument, NULL, O_HELP},
					     {"version", no_argument, NULL, O_VERSION},
					     {NULL, 0, NULL, 0}};
	int ch;
	char *end;
	while ((ch = getopt_long(argc, argv, "+s:qh", opts, NULL)) != -1) {
		switch (ch) {
		case O_URL:
			g->o.base_url = optarg;
			break;
		case O_TOKEN:
			g->o.token = optarg;
			break;
		case O_TENANT:
			g->o.tenant = optarg;
			break;
		case 's':
			g->session = optarg;
			break;
		case O_CA:
			g->o.ca_file = optarg;
			break;
		case O_INSECURE:
			g->o.insecure = true;
			break;
		case O_TIMEOUT:
			g->timeout_s = strtol(optarg, &end, 10);
			if (*end || end == optarg || g->timeout_s < 0)
				return cli_usage("--timeout takes whole seconds");
			break;
		case O_JSON:
			c->json = true;
			break;
		case 'q':
			c->quiet = true;
			break;
		case 'h':
		case O_HELP:
			help(stdout);
			exit(0);
		case O_VERSION:
			printf("sbx %s\n", SANDBOXD_VERSION);
			exit(0);
		default:
			return CLI_USAGE;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct globals g = {.o = {.base_url = getenv("SANDBOXD_URL"),
				  .token = getenv("SANDBOXD_TOKEN"),
				  .tenant = getenv("SANDBOXD_TENANT"),
				  .ca_file = getenv("SANDBOXD_CA_FILE")},
			    .session = getenv("SANDBOXD_SESSION")};
	struct cli c = {0};
	int rc = parse_globals(argc, argv, &g, &c);
	if (rc)
		return rc;
	if (optind >= argc)
		return cli_usage("no command");
	const char *name = argv[optind];
	size_t i = 0;
	while (i < sizeof commands / sizeof commands[0] && strcmp(commands[i].name, name) != 0)
		i++;
	if (i == sizeof commands / sizeof commands[0])
		return cli_usage("unknown command %s", name);
	if (!g.o.base_url || !g.o.token)
		return cli_usage(
		    "the server's URL and a token are needed: --url and --token, or SANDBOXD_URL "
		    "and SANDBOXD_TOKEN");
	curl_global_init(CURL_GLOBAL_ALL);
	if (sbxc_new(&c.h, &g.o) < 0) {
		fprintf(stderr,
			"sbx: the URL must start with http:// or https:// and the token be one line\n");
		return CLI_USAGE;
	}
	c.call.session = g.session;
	c.call.timeout_ms = g.timeout_s > 0 ? g.timeout_s * 1000 : 0;
	int sub = optind;
	optind = 0; /* each subcommand parses its own options (0: a fresh getopt) */
	rc = commands[i].fn(&c, argc - sub, argv + sub);
	sbxc_free(&c.h);
	curl_global_cleanup();
	return rc;
}
