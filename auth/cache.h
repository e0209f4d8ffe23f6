#pragma once
/* The memo of verified tokens behind struct auth_cache. Its first part is
 * public (auth.h includes this header); the rest is for auth/ alone. A token is remembered only after
 * auth_verify accepted it, with what verifying it found and the key that verified it; a later request with
 * the same bytes is answered from here once the tenant's current key is found to be that same key and exp/nbf
 * still hold. Thread-safe: the slots are guarded by striped mutexes, held only to copy in or out. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth/keys.h"

/* A memo of accepted tokens (auth/cache.c): a token seen before is not
 * decoded, parsed and signature-checked again while its tenant's key is
 * the same one; exp and nbf are checked at every use, the tenant is looked
 * up as always (an unknown tenant is refused, its operator flag read
 * anew). Made for one audience (NULL: none): auth_verify uses it only
 * under that audience. Thread-safe; bounded (512 tokens of up to 4 KiB).
 * auth_cache_free wipes the tokens and keys it holds and accepts NULL. */
struct auth_cache;
void auth_cache_new(struct auth_cache **out, const char *audience);
void auth_cache_free(struct auth_cache **c);

/* ---- inside auth/ ---- */

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
