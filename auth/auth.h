#pragma once
/* Bearer-token verification (libjwt 1.10) and scopes. No HTTP here: the
 * dispatcher hands in the token text and a key lookup. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth/cache.h"
#include "auth/keys.h"

/* Scope bits. A token without a scope claim has FS_READ|FS_WRITE|EXEC. */
enum auth_scope {
	AUTH_SCOPE_FS_READ = 1u << 0,
	AUTH_SCOPE_FS_WRITE = 1u << 1,
	AUTH_SCOPE_EXEC = 1u << 2,
	AUTH_SCOPE_AUDIT_READ = 1u << 3,
	AUTH_SCOPE_ADMIN = 1u << 4,
	AUTH_SCOPE_APPROVE = 1u << 5, /* decide on commands that wait for approval */
};
#define AUTH_SCOPE_DEFAULT (AUTH_SCOPE_FS_READ | AUTH_SCOPE_FS_WRITE | AUTH_SCOPE_EXEC)
/* What a token of a tenant's approver key may do, whatever it asks:
 * decide, and read the commands it decides on (the exec, the lists, the
 * feeds). approve comes from that key only: a token of the main key
 * (which a gateway holds) never carries it. */
#define AUTH_SCOPES_APPROVER (AUTH_SCOPE_APPROVE | AUTH_SCOPE_AUDIT_READ)
/* The JWS header kid of a token signed with the approver key. */
#define AUTH_KID_APPROVER "approver"
/* Parse a space-separated scope string. Unknown scope names are ignored
 * (a token for a newer server still works for what this one knows).
 * Returns the bits. */
unsigned auth_scopes_parse(const char *s);
/* "fs:read fs:write ..." for bits, into out. */
void auth_scopes_format(unsigned bits, char *out, size_t outsz);

/* Look up the key of a tenant. Return 0 and fill *key (borrowed until the
 * verify call returns), or -ENOENT for an unknown tenant. */
typedef int (*auth_key_lookup)(void *ctx, const char *tenant, struct auth_key *key);

struct auth_config {
	const char *audience;	  /* required aud when non-NULL */
	int64_t leeway_s;	  /* applies to exp and nbf; default 30 */
	size_t max_token_bytes;	  /* default 8192 */
	struct auth_cache *cache; /* optional: remembered tokens (see above) */
};

struct auth_claims {
	char tenant[AUTH_TENANT_MAX];
	int64_t exp;
	unsigned scopes;	/* admin cleared unless the tenant is an operator */
	bool admin_refused;	/* the token asked for admin but its tenant is no operator */
	char sub[AUTH_SUB_MAX]; /* the holder (sub claim), "" when absent */
	bool approver;		/* signed with the approver key: scopes within AUTH_SCOPES_APPROVER */
	bool approve_refused;	/* the token asked for approve but was signed with the main key */
};

/* Verify a compact JWT: size cap; header alg must be the tenant's
 * registered alg ("none" and any other never); signature (HS256 checked
 * with a constant-time compare, RS256/ES256 through libjwt with the
 * tenant's public key, never with an empty key; ES256 signatures must be
 * 64 bytes in low-S form, s <= n/2, so no token has a second valid
 * spelling); claims read with their
 * JSON types checked: tenant (string, required), exp (integer, required),
 * nbf and iat (integers, optional), aud (string or array of strings;
 * required and must match when cfg->audience is set), scope (string,
 * optional), sub (string of 1..128 bytes without control characters,
 * optional: who holds the token, e.g. the person at a dashboard). A
 * header kid "approver" selects the tenant's approver key (none
 * registered: refused): such a token's scopes are cut to
 * AUTH_SCOPES_APPROVER; any other token loses approve. now is Unix seconds.
 * Errors: -EACCES for every refusal (401), with a short reason for the
 * log in why (never sent to the client in detail). */
int auth_verify(const char *token, size_t len, const struct auth_config *cfg, int64_t now,
		auth_key_lookup lookup, void *lookup_ctx, struct auth_claims *out, const char **why);

/* Mint an HS256 token (for `sandboxd token` and tests). scope and sub may
 * be NULL (no such claim). Returns a fresh string (free()) or NULL on error. */
char *auth_mint_hs256(const unsigned char *secret, size_t secret_len, const char *tenant, const char *scope,
		      const char *sub, int64_t iat, int64_t exp, const char *audience);
/* The same with a header kid (NULL: none; AUTH_KID_APPROVER for a token
 * of the approver key). */
char *auth_mint_hs256_kid(const unsigned char *secret, size_t secret_len, const char *kid, const char *tenant,
			  const char *scope, const char *sub, int64_t iat, int64_t exp, const char *audience);

/* The `tenant` claim of a JWT, read without verifying it (for naming
 * what another server's token is for, never for trusting it). 0 or
 * -EINVAL. */
int auth_token_tenant_claim(const char *token, char *out, size_t outsz);
