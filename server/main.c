/* sandboxd: defaults, then the config file, then the command line, then
 * the subcommand from a table. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/xmalloc.h"
#include "server/cli.h"

static const char usage[] =
	"usage:\n"
	"  sandboxd serve [--config FILE] [--listen HOST:PORT] [--data-dir DIR]\n"
	"                 [--backend bwrap|local] [--allow-unsafe-local]\n"
	"                 [--tls-cert FILE --tls-key FILE] [--set KEY=VALUE ...]\n"
	"  sandboxd tenant add NAME [--secret-file F | --public-key F --alg RS256|ES256] [--operator]\n"
	"  sandboxd tenant list | remove NAME\n"
	"  sandboxd token --tenant NAME [--scope \"...\"] [--ttl SECONDS]\n"
	"  sandboxd migrate [--data-dir DIR]\n"
	"  sandboxd audit [--tenant NAME] [--since T] [--until T] [--route R] [--outcome O]\n"
	"                 [--session K] [--limit N] [--format table|json|ndjson]\n"
	"  sandboxd --help | --version\n"
	"\n"
	"Every subcommand takes --data-dir and --config. --set KEY=VALUE sets any\n"
	"configuration key (see the README's configuration reference).\n";

static const struct {
	const char *name;
	int (*fn)(struct sbx_config *, const struct cli_args *);
} commands[] = {
	{ "serve", cli_serve }, { "tenant", cli_tenant }, { "token", cli_token },
	{ "migrate", cli_migrate }, { "audit", cli_audit },
};

enum {
	O_CONFIG = 256, O_LISTEN, O_DATA_DIR, O_BACKEND, O_UNSAFE, O_TLS_CERT, O_TLS_KEY, O_SET,
	O_SECRET_FILE, O_PUBLIC_KEY, O_ALG, O_OPERATOR, O_TENANT, O_SCOPE, O_TTL, O_SINCE, O_UNTIL,
	O_LIMIT, O_FORMAT, O_ROUTE, O_OUTCOME, O_SESSION, O_HELP, O_VERSION,
};

static const struct option options[] = {
	{ "config", required_argument, NULL, O_CONFIG },
	{ "listen", required_argument, NULL, O_LISTEN },
	{ "data-dir", required_argument, NULL, O_DATA_DIR },
	{ "backend", required_argument, NULL, O_BACKEND },
	{ "allow-unsafe-local", no_argument, NULL, O_UNSAFE },
	{ "tls-cert", required_argument, NULL, O_TLS_CERT },
	{ "tls-key", required_argument, NULL, O_TLS_KEY },
	{ "set", required_argument, NULL, O_SET },
	{ "secret-file", required_argument, NULL, O_SECRET_FILE },
	{ "public-key", required_argument, NULL, O_PUBLIC_KEY },
	{ "alg", required_argument, NULL, O_ALG },
	{ "operator", no_argument, NULL, O_OPERATOR },
	{ "tenant", required_argument, NULL, O_TENANT },
	{ "scope", required_argument, NULL, O_SCOPE },
	{ "ttl", required_argument, NULL, O_TTL },
	{ "since", required_argument, NULL, O_SINCE },
	{ "until", required_argument, NULL, O_UNTIL },
	{ "limit", required_argument, NULL, O_LIMIT },
	{ "format", required_argument, NULL, O_FORMAT },
	{ "route", required_argument, NULL, O_ROUTE },
	{ "outcome", required_argument, NULL, O_OUTCOME },
	{ "session", required_argument, NULL, O_SESSION },
	{ "help", no_argument, NULL, O_HELP },
	{ "version", no_argument, NULL, O_VERSION },
	{ NULL, 0, NULL, 0 },
};

/* Options that set configuration keys are applied after the config file,
 * so the command line wins. */
struct pending {
	const char *name;
	char *value;
};

static int parse_ll(const char *opt, const char *v, long long *out)
{
	char *end = NULL;
	errno = 0;
	long long x = strtoll(v, &end, 10);
	if (!*v || *end || errno || x < 0) {
		fprintf(stderr, "sandboxd: %s: expected a non-negative integer, got '%s'\n", opt, v);
		return -1;
	}
	*out = x;
	return 0;
}

int main(int argc, char **argv)
{
	struct sbx_config cfg;
	struct cli_args a = { .ttl = 3600, .limit = 100 };
	struct pending pend[64];
	size_t npend = 0;
	const char *config_file = NULL;
	int status = 2;
	char err[512];

	json_set_alloc_funcs(xmalloc, free);
	cfg_defaults(&cfg);
	if (argc < 2) {
		fputs(usage, stderr);
		goto out;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
		fputs(usage, stdout);
		status = 0;
		goto out;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("sandboxd %s\n", SANDBOXD_VERSION);
		status = 0;
		goto out;
	}
	size_t ci = 0;
	while (ci < sizeof commands / sizeof commands[0] && strcmp(commands[ci].name, argv[1]) != 0)
		ci++;
	if (ci == sizeof commands / sizeof commands[0]) {
		fprintf(stderr, "sandboxd: unknown command '%s'\n%s", argv[1], usage);
		goto out;
	}

	int c;
	optind = 2;
	while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
		const char *key = NULL;
		switch (c) {
		case O_CONFIG: config_file = optarg; break;
		case O_LISTEN: key = "listen"; break;
		case O_DATA_DIR: key = "data-dir"; break;
		case O_BACKEND: key = "backend"; break;
		case O_UNSAFE: key = "allow-unsafe-local"; optarg = "true"; break;
		case O_TLS_CERT: key = "tls-cert"; break;
		case O_TLS_KEY: key = "tls-key"; break;
		case O_SET: {
			char *eq = strchr(optarg, '=');
			if (!eq) {
				fprintf(stderr, "sandboxd: --set wants KEY=VALUE\n");
				goto out;
			}
			*eq = '\0';
			key = optarg;
			optarg = eq + 1;
			break;
		}
		case O_SECRET_FILE: a.secret_file = optarg; break;
		case O_PUBLIC_KEY: a.public_key = optarg; break;
		case O_ALG: a.alg = optarg; break;
		case O_OPERATOR: a.operator_tenant = true; break;
		case O_TENANT: a.tenant = optarg; break;
		case O_SCOPE: a.scope = optarg; break;
		case O_TTL:
			if (parse_ll("--ttl", optarg, &a.ttl) < 0)
				goto out;
			break;
		case O_SINCE: a.since = optarg; break;
		case O_UNTIL: a.until = optarg; break;
		case O_LIMIT:
			if (parse_ll("--limit", optarg, &a.limit) < 0)
				goto out;
			break;
		case O_FORMAT: a.format = optarg; break;
		case O_ROUTE: a.route = optarg; break;
		case O_OUTCOME: a.outcome = optarg; break;
		case O_SESSION: a.session = optarg; break;
		case O_HELP:
			fputs(usage, stdout);
			status = 0;
			goto out;
		case O_VERSION:
			printf("sandboxd %s\n", SANDBOXD_VERSION);
			status = 0;
			goto out;
		default:
			fputs(usage, stderr);
			goto out;
		}
		if (key) {
			if (npend == sizeof pend / sizeof pend[0]) {
				fprintf(stderr, "sandboxd: too many options\n");
				goto out;
			}
			pend[npend].name = key;
			pend[npend].value = optarg;
			npend++;
		}
	}
	a.words = argv + optind;
	a.nwords = argc - optind;

	if (config_file && cfg_load_file(&cfg, config_file, err, sizeof err) < 0) {
		fprintf(stderr, "sandboxd: %s\n", err);
		goto out;
	}
	for (size_t i = 0; i < npend; i++)
		if (cfg_set(&cfg, pend[i].name, pend[i].value, err, sizeof err) < 0) {
			fprintf(stderr, "sandboxd: %s\n", err);
			goto out;
		}
	cfg_finish(&cfg);
	status = commands[ci].fn(&cfg, &a);
out:
	cfg_free(&cfg);
	return status;
}
