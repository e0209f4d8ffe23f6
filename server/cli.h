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
	bool all_nodes; /* audit: every node of `nodes` */
};

int cli_serve(struct sbx_config *cfg, const struct cli_args *a);
int cli_tenant(struct sbx_config *cfg, const struct cli_args *a);
int cli_token(struct sbx_config *cfg, const struct cli_args *a);
int cli_migrate(struct sbx_config *cfg, const struct cli_args *a);
int cli_audit(struct sbx_config *cfg, const struct cli_args *a);
