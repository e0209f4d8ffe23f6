/* The memo of verified tokens (auth/cache.h). Verifying a token costs two
 * base64url decodes, two JSON parses and an HMAC (HS256), or a public-key
 * signature check (RS256/ES256: tens of microseconds); a gateway sends the
 * same token with every request, so each distinct token is verified once
 * per key and answered from here afterwards (issue 15, P5).
 *
 * Direct-mapped slots chosen by a seeded hash of the token's end (its
 * signature); a hit needs the whole token equal, compared in constant time
 * (a token is a bearer secret: timing must not tell how much of one a
 * guess matched). Only accepted tokens enter, so a stranger cannot fill
 * the cache; two tokens sharing a slot only cost re-verifications. */
#include "auth/cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "common/xmalloc.h"

#define SLOTS 512
#define STRIPES 16
#define TOKEN_MAX 4096 /* longer tokens are verified every time */
#define KEY_MAX 8192
#define HASHED_TAIL 64 /* the signature's characters: random enough to spread */

struct slot {
	uint64_t gen; /* 0: empty; changes whenever the slot does */
	uint64_t hash;
	size_t len;
	char *token;
	struct auth_verified v;
	enum auth_alg alg;
	unsigned char *key;
	size_t key_len;
};

struct auth_cache {
	pthread_mutex_t mu[STRIPES];
	uint64_t seed;
	char *audience;
	struct slot slots[SLOTS];
};

void auth_cache_new(struct auth_cache **out, const char *audience)
{
	struct auth_cache *c = xcalloc(1, sizeof *c);
	for (size_t i = 0; i < STRIPES; i++)
		pthread_mutex_init(&c->mu[i], NULL);
	/* Only slots depend on it: a failed getrandom leaves a fixed seed. */
	(void)auth_random(&c->seed, sizeof c->seed);
	c->audience = audience ? xstrdup(audience) : NULL;
	*out = c;
}

static void slot_clear(struct slot *s)
{
	if (s->token)
		OPENSSL_cleanse(s->token, s->len);
	if (s->key)
		OPENSSL_cleanse(s->key, s->key_len);
	free(s->token);
	free(s->key);
	uint64_t gen = s->gen;
	memset(s, 0, sizeof *s);
	s->gen = gen + 1; /* a reference to what was here no longer matches */
}

void auth_cache_free(struct auth_cache **cp)
{
	struct auth_cache *c = *cp;
	if (!c)
		return;
	for (size_t i = 0; i < SLOTS; i++)
		slot_clear(&c->slots[i]);
	for (size_t i = 0; i < STRIPES; i++)
		pthread_mutex_destroy(&c->mu[i]);
	free(c->audience);
	free(c);
	*cp = NULL;
}

bool auth_cache_serves(const struct auth_cache *c, const char *audience)
{
	if (!c->audience || !audience)
		return !c->audience && !audience;
	return strcmp(c->audience, audience) == 0;
}

/* FNV-1a over the seed and the token's last HASHED_TAIL bytes. */
static uint64_t token_hash(const struct auth_cache *c, const char *t, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ c->seed;
	size_t from = len > HASHED_TAIL ? len - HASHED_TAIL : 0;
	for (size_t i = from; i < len; i++) {
		h ^= (unsigned char)t[i];
		h *= 0x100000001b3ULL;
	}
	h ^= len;
	return h | 1; /* never 0 */
}

static pthread_mutex_t *stripe(struct auth_cache *c, size_t slot)
{
	return &c->mu[slot % STRIPES];
}

bool auth_cache_get(struct auth_cache *c, const char *token, size_t len, struct auth_verified *v,
		    struct auth_cache_ref *ref)
{
	if (len > TOKEN_MAX)
		return false;
	uint64_t h = token_hash(c, token, len);
	size_t i = (size_t)(h % SLOTS);
	struct slot *s = &c->slots[i];
	bool hit = false;
	pthread_mutex_lock(stripe(c, i));
	if (s->token && s->hash == h && s->len == len && CRYPTO_memcmp(s->token, token, len) == 0) {
		*v = s->v;
		ref->slot = i;
		ref->gen = s->gen;
		hit = true;
	}
	pthread_mutex_unlock(stripe(c, i));
	return hit;
}

bool auth_cache_key_is(struct auth_cache *c, const struct auth_cache_ref *ref, const struct auth_key *key)
{
	struct slot *s = &c->slots[ref->slot];
	bool same = false;
	pthread_mutex_lock(stripe(c, ref->slot));
	if (s->gen == ref->gen && s->token) {
		same = s->alg == key->alg && s->key_len == key->key_len &&
		       memcmp(s->key, key->key, key->key_len) == 0;
		if (!same) /* the tenant's key changed: this token needs it again */
			slot_clear(s);
	}
	pthread_mutex_unlock(stripe(c, ref->slot));
	return same;
}

void auth_cache_put(struct auth_cache *c, const char *token, size_t len, const struct auth_verified *v,
		    const struct auth_key *key)
{
	if (len > TOKEN_MAX || !key->key || key->key_len == 0 || key->key_len > KEY_MAX)
		return;
	uint64_t h = token_hash(c, token, len);
	size_t i = (size_t)(h % SLOTS);
	/* Copies made outside the lock. */
	char *t = xmalloc(len);
	memcpy(t, token, len);
	unsigned char *k = xmalloc(key->key_len);
	memcpy(k, key->key, key->key_len);
	struct slot *s = &c->slots[i];
	pthread_mutex_lock(stripe(c, i));
	slot_clear(s);
	s->hash = h;
	s->len = len;
	s->token = t;
	s->v = *v;
	s->alg = key->alg;
	s->key = k;
	s->key_len = key->key_len;
	pthread_mutex_unlock(stripe(c, i));
}
