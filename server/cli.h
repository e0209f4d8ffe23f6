#pragma once
/* Subcommands. Each gets the parsed configuration and its own arguments
 * (positional words and command-specific options) and returns the exit
 * status. */
#include "common/config.h"

struct cli_args {
	char **words; /* positional words after the subcommand */
	int nwords;
	const char *secret_file, *public_key, *alg, *tenant, *scope, *since, *until, *format;
	const char *route, *outcome, *session, *sub;
	const char *token_file; /* audit --all-nodes: the token for nodes without a token-file */
	long long ttl, limit;
	bool operator_tenant;
	bool reuse_leftovers, fresh; /* tenant add: what to do with a removed tenant's directory */
	bool purge;		     /* tenant remove: delete its directory instead of moving it aside */
	bool all_nodes;		     /* audit: every node of `nodes` */
	bool dry_run;		     /* migrate: say what would run, change nothing */
	/* image build/import */
	const char *packages, *variant, *oci, *rootfs;
};

struct store;
/* The store of cfg (the data directory prepared first); says why on stderr. */
int cli_open_store(struct sbx_config *cfg, bool migrate, struct store **s);

int cli_serve(struct sbx_config *cfg, const struct cli_args *a);
int cli_tenant(struct sbx_config *cfg, const struct cli_args *a);
int cli_token(struct sbx_config *cfg, const struct cli_args *a);
int cli_migrate(struct sbx_config *cfg, const struct cli_args *a);
int cli_audit(struct sbx_config *cfg, const struct cli_args *a);
/* image build|import|list|rm (server/images_cli.c) */
int cli_image(struct sbx_config *cfg, const struct cli_args *a);
/* doctor [--format text|json]: the host checks (server/doctor.c); 0 all ok or
 * not needed, 1 something missing */
int cli_doctor(struct sbx_config *cfg, const struct cli_args *a);
/* doctor's command line or configuration is bad (why): with --format json
 * among argv, the JSON that says so on stdout (nothing was checked) */
void cli_doctor_refused(int argc, char **argv, const char *why);
/* config reference|show (server/config_cli.c) */
int cli_config(struct sbx_config *cfg, const struct cli_args *a);
/* debug bwrap-argv, for benchmarks; not in the usage (server/debug_cli.c) */
int cli_debug(struct sbx_config *cfg, const struct cli_args *a);
