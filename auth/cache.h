#pragma once
/* Inside auth/: the memo of verified tokens behind struct auth_cache
 * (auth.h). A token is remembered only after auth_verify accepted it, with
 * what verifying it found and the key that verified it; a later request
 * with the same bytes is answered from here once the tenant's current key
 * is found to be that same key and exp/nbf still hold. Thread-safe: the
 * slots are guarded by striped mutexes, held only to copy in or out. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth/auth.h"

/* What an accepted token says. scopes: as the token asks, before the
 * tenant's operator flag is applied (that flag is read anew each time). */
struct auth_verified {
	char tenant[AUTH_TENANT_MAX];
	int64_t exp, nbf;
	bool has_nbf;
	unsigned scopes;
	char sub[AUTH_SUB_MAX];
	bool approver; /* verified with the approver key (kid "approver") */
};

/* Where a hit was found, to check its key after the tenant's look-up. */
struct auth_cache_ref {
	size_t slot;
	uint64_t gen;
};

/* Whether the cache serves requests under this audience (NULL: none). */
bool auth_cache_serves(const struct auth_cache *c, const char *audience);
/* Look the token up: true and *v, *ref filled on a hit. */
bool auth_cache_get(struct auth_cache *c, const char *token, size_t len, struct auth_verified *v,
		    struct auth_cache_ref *ref);
/* Whether the hit at ref was verified with exactly key (algorithm and
 * bytes). When not, the entry is dropped. */
bool auth_cache_key_is(struct auth_cache *c, const struct auth_cache_ref *ref, const struct auth_key *key);
/* Remember an accepted token (too long a token or key is not kept). */
void auth_cache_put(struct auth_cache *c, const char *token, size_t len, const struct auth_verified *v,
		    const struct auth_key *key);
