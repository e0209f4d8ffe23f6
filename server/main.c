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
    "                 [--allow-uncontained]\n"
    "                 [--tls-cert FILE --tls-key FILE] [--set KEY=VALUE ...]\n"
    "  sandboxd tenant add NAME [--secret-file F | --public-key F --alg RS256|ES256] [--operator]\n"
    "                      [--reuse-leftovers | --fresh]\n"
    "  sandboxd tenant list | remove NAME [--purge]\n"
    "  sandboxd tenant set NAME KEY=VALUE ... | show NAME\n"
    "  sandboxd tenant set-approver NAME [--secret-file F | --public-key F --alg RS256|ES256]\n"
    "  sandboxd tenant clear-approver NAME\n"
    "  sandboxd image build NAME [--packages P1,P2] [--variant essential|apt|...]\n"
    "  sandboxd image import NAME --oci DIR | --rootfs FILE.tar[.gz]\n"
    "  sandboxd image list [--format table|json] | rm NAME\n"
    "  sandboxd token --tenant NAME [--scope \"...\"] [--sub WHO] [--ttl SECONDS]\n"
    "  sandboxd migrate [--dry-run] [--data-dir DIR]\n"
    "  sandboxd doctor [--format text|json]   (exit 0: all ok, 1: something missing)\n"
    "  sandboxd audit [--tenant NAME] [--since T] [--until T] [--route R] [--outcome O]\n"
    "                 [--session K] [--limit N] [--format table|json|ndjson]\n"
    "                 [--all-nodes [--token-file F]]\n"
    "  sandboxd config reference [--format markdown|json] | show\n"
    "  sandboxd --help | --version\n"
    "\n"
    "Every subcommand takes --data-dir and --config. --set KEY=VALUE sets any\n"
    "configuration key (sandboxd config reference lists them).\n";

static const struct {
	const char *name;
	int (*fn)(struct sbx_config *, const struct cli_args *);
} commands[] = {
    {"serve", cli_serve},     {"tenant", cli_tenant}, {"token", cli_token},
    {"migrate", cli_migrate}, {"audit", cli_audit},   {"image", cli_image},
    {"doctor", cli_doctor},   {"config", cli_config}, {"debug", cli_debug},
};

enum {
	O_CONFIG = 256,
	O_LISTEN,
	O_DATA_DIR,
	O_BACKEND,
	O_UNSAFE,
	O_UNCONTAINED,
	O_TLS_CERT,
	O_TLS_KEY,
	O_SET,
	O_SECRET_FILE,
	O_PUBLIC_KEY,
	O_ALG,
	O_OPERATOR,
	O_TENANT,
	O_SCOPE,
	O_TTL,
	O_SINCE,
	O_UNTIL,
	O_LIMIT,
	O_FORMAT,
	O_ROUTE,
	O_OUTCOME,
	O_SESSION,
	O_SUB,
	O_HELP,
	O_VERSION,
	O_ALL_NODES,
	O_TOKEN_FILE,
	O_PACKAGES,
	O_VARIANT,
	O_OCI,
	O_ROOTFS,
	O_REUSE_LEFTOVERS,
	O_FRESH,
	O_PURGE,
	O_DRY_RUN,
};

static const struct option options[] = {
    {"config", required_argument, NULL, O_CONFIG},
    {"listen", required_argument, NULL, O_LISTEN},
    {"data-dir", required_argument, NULL, O_DATA_DIR},
    {"backend", required_argument, NULL, O_BACKEND},
    {"allow-unsafe-local", no_argument, NULL, O_UNSAFE},
    {"allow-uncontained", no_argument, NULL, O_UNCONTAINED},
    {"tls-cert", required_argument, NULL, O_TLS_CERT},
    {"tls-key", required_argument, NULL, O_TLS_KEY},
    {"set", required_argument, NULL, O_SET},
    {"secret-file", required_argument, NULL, O_SECRET_FILE},
    {"public-key", required_argument, NULL, O_PUBLIC_KEY},
    {"alg", required_argument, NULL, O_ALG},
    {"operator", no_argument, NULL, O_OPERATOR},
    {"tenant", required_argument, NULL, O_TENANT},
    {"scope", required_argument, NULL, O_SCOPE},
    {"ttl", required_argument, NULL, O_TTL},
    {"since", required_argument, NULL, O_SINCE},
    {"until", required_argument, NULL, O_UNTIL},
    {"limit", required_argument, NULL, O_LIMIT},
    {"format", required_argument, NULL, O_FORMAT},
    {"route", required_argument, NULL, O_ROUTE},
    {"outcome", required_argument, NULL, O_OUTCOME},
    {"session", required_argument, NULL, O_SESSION},
    {"all-nodes", no_argument, NULL, O_ALL_NODES},
    {"token-file", required_argument, NULL, O_TOKEN_FILE},
    {"sub", required_argument, NULL, O_SUB},
    {"packages", required_argument, NULL, O_PACKAGES},
    {"variant", required_argument, NULL, O_VARIANT},
    {"oci", required_argument, NULL, O_OCI},
    {"rootfs", required_argument, NULL, O_ROOTFS},
    {"reuse-leftovers", no_argument, NULL, O_REUSE_LEFTOVERS},
    {"fresh", no_argument, NULL, O_FRESH},
    {"purge", no_argument, NULL, O_PURGE},
    {"dry-run", no_argument, NULL, O_DRY_RUN},
    {"help", no_argument, NULL, O_HELP},
    {"version", no_argument, NULL, O_VERSION},
    {NULL, 0, NULL, 0},
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

/* The image options (server/images_cli.c): 0 taken, 1 not one of them. */
static int image_option(int c, struct cli_args *a)
{
	const char **slot = c == O_PACKAGES  ? &a->packages
			    : c == O_VARIANT ? &a->variant
			    : c == O_OCI     ? &a->oci
			    : c == O_ROOTFS  ? &a->rootfs
					     : NULL;
	if (!slot)
		return 1;
	*slot = optarg;
	return 0;
}

/* The options that fill struct cli_args: 0 taken, 1 not one of them,
 * -1 a bad value (said on stderr). */
static int arg_option(int c, struct cli_args *a)
{
	switch (c) {
	case O_SECRET_FILE:
		a->secret_file = optarg;
		return 0;
	case O_PUBLIC_KEY:
		a->public_key = optarg;
		return 0;
	case O_ALG:
		a->alg = optarg;
		return 0;
	case O_OPERATOR:
		a->operator_tenant = true;
		return 0;
	case O_REUSE_LEFTOVERS:
		a->reuse_leftovers = true;
		return 0;
	case O_FRESH:
		a->fresh = true;
		return 0;
	case O_PURGE:
		a->purge = true;
		return 0;
	case O_DRY_RUN:
		a->dry_run = true;
		return 0;
	case O_TENANT:
		a->tenant = optarg;
		return 0;
	case O_SCOPE:
		a->scope = optarg;
		return 0;
	case O_TTL:
		return parse_ll("--ttl", optarg, &a->ttl);
	case O_SINCE:
		a->since = optarg;
		return 0;
	case O_UNTIL:
		a->until = optarg;
		return 0;
	case O_LIMIT:
		return parse_ll("--limit", optarg, &a->limit);
	case O_FORMAT:
		a->format = optarg;
		return 0;
	case O_ROUTE:
		a->route = optarg;
		return 0;
	case O_OUTCOME:
		a->outcome = optarg;
		return 0;
	case O_SESSION:
		a->session = optarg;
		return 0;
	case O_ALL_NODES:
		a->all_nodes = true;
		return 0;
	case O_TOKEN_FILE:
		a->token_file = optarg;
		return 0;
	case O_SUB:
		a->sub = optarg;
		return 0;
	default:
		return image_option(c, a);
	}
}

/* The options that set a configuration key: *key and optarg, or 1 when c
 * is not one of them, -1 on a bad --set. */
static int config_option(int c, const char **key)
{
	switch (c) {
	case O_LISTEN:
		*key = "listen";
		return 0;
	case O_DATA_DIR:
		*key = "data-dir";
		return 0;
	case O_BACKEND:
		*key = "backend";
		return 0;
	case O_UNSAFE:
		*key = "allow-unsafe-local";
		optarg = "true";
		return 0;
	case O_UNCONTAINED:
		*key = "allow-uncontained";
		optarg = "true";
		return 0;
	case O_TLS_CERT:
		*key = "tls-cert";
		return 0;
	case O_TLS_KEY:
		*key = "tls-key";
		return 0;
	case O_SET: {
		char *eq = strchr(optarg, '=');
		if (!eq) {
			fprintf(stderr, "sandboxd: --set wants KEY=VALUE\n");
			return -1;
		}
		*eq = '\0';
		*key = optarg;
		optarg = eq + 1;
		return 0;
	}
	default:
		return 1;
	}
}

struct parsed {
	struct cli_args a;
	struct pending pend[64]; /* configuration keys, applied after the file */
	size_t npend;
	const char *config_file;
};

/* getopt_long over the command's options. 0 go on; 1 done (help or
 * version printed); -1 error (said on stderr). */
static int parse_options(int argc, char **argv, struct parsed *p)
{
	int c;
	optind = 2;
	while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
		const char *key = NULL;
		int rc;
		if (c == O_CONFIG) {
			p->config_file = optarg;
			continue;
		}
		if (c == O_HELP || c == O_VERSION) {
			if (c == O_HELP)
				fputs(usage, stdout);
			else
				printf("sandboxd %s\n", SANDBOXD_VERSION);
			return 1;
		}
		if ((rc = arg_option(c, &p->a)) <= 0) {
			if (rc < 0)
				return -1;
			continue;
		}
		if ((rc = config_option(c, &key)) != 0) {
			if (rc > 0)
				fputs(usage, stderr);
			return -1;
		}
		if (p->npend == sizeof p->pend / sizeof p->pend[0]) {
			fprintf(stderr, "sandboxd: too many options\n");
			return -1;
		}
		p->pend[p->npend].name = key;
		p->pend[p->npend].value = optarg;
		p->npend++;
	}
	p->a.words = argv + optind;
	p->a.nwords = argc - optind;
	return 0;
}

/* The configuration: defaults, then the file, then the command line. */
static int configure(struct sbx_config *cfg, const struct parsed *p, char *err, size_t errsz)
{
	if (p->config_file && cfg_load_file(cfg, p->config_file, err, errsz) < 0)
		return -1;
	for (size_t i = 0; i < p->npend; i++)
		if (cfg_set(cfg, p->pend[i].name, p->pend[i].value, err, errsz) < 0)
			return -1;
	cfg_finish(cfg);
	return 0;
}

int main(int argc, char **argv)
{
	struct sbx_config cfg;
	struct parsed p = {.a = {.ttl = 3600, .limit = 100}};
	int status = 2;

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
	int rc = parse_options(argc, argv, &p);
	char err[512] = "";
	if (rc != 0) {
		status = rc > 0 ? 0 : 2;
		if (rc < 0 && commands[ci].fn == cli_doctor)
			cli_doctor_refused(argc, argv, "bad command line (said on stderr)");
		goto out;
	}
	if (configure(&cfg, &p, err, sizeof err) < 0) {
		fprintf(stderr, "sandboxd: %s\n", err);
		if (commands[ci].fn == cli_doctor)
			cli_doctor_refused(argc, argv, err);
		goto out;
	}
	status = commands[ci].fn(&cfg, &p.a);
out:
	cfg_free(&cfg);
	return status;
}
