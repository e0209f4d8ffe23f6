/* Bearer-token verification and HS256 minting (wire.md "Authentication",
 * security.md "tokens"). The header and payload are decoded here, with
 * jansson, before any key is touched: the tenant's key decides which
 * algorithm is acceptable, never the token. */
#include "auth/auth.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <jwt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth/cache.h"
#include "common/xmalloc.h"

#define DEFAULT_MAX_TOKEN_BYTES 8192
#define DEFAULT_LEEWAY_S 30
#define HS256_SIG_LEN 32
#define HS256_SIG_B64_LEN 43 /* 32 bytes, base64url without padding */

/* The three parts of a compact JWS, as slices of the token. */
struct parts {
	const char *hdr;
	size_t hdr_len;
	const char *pl;
	size_t pl_len;
	const char *sig;
	size_t sig_len;
	size_t signed_len; /* "header.payload" */
};

static const char b64url_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static int b64url_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '-')
		return 62;
	if (c == '_')
		return 63;
	return -1;
}

/* Bytes needed to decode len base64url characters. */
static size_t b64url_decoded_max(size_t len)
{
	return len / 4 * 3 + 2;
}

/* Strict base64url without padding. The unused low bits of the last
 * character must be zero, so that one token has exactly one spelling.
 * out holds b64url_decoded_max(len) bytes. 0 or -EINVAL. */
static int b64url_decode(const char *in, size_t len, unsigned char *out, size_t *out_len)
{
	unsigned acc = 0, nbits = 0;
	size_t o = 0;

	if (len % 4 == 1)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		int v = b64url_value((unsigned char)in[i]);

		if (v < 0)
			return -EINVAL;
		acc = (acc << 6) | (unsigned)v;
		nbits += 6;
		if (nbits >= 8) {
			nbits -= 8;
			out[o++] = (unsigned char)(acc >> nbits);
			acc &= (1u << nbits) - 1;
		}
	}
	if (acc != 0)
		return -EINVAL;
	*out_len = o;
	return 0;
}

static size_t b64url_encoded_len(size_t len)
{
	return len / 3 * 4 + (len % 3 ? len % 3 + 1 : 0);
}

/* Writes b64url_encoded_len(len) characters, no NUL. Returns that count. */
static size_t b64url_encode(const unsigned char *in, size_t len, char *out)
{
	size_t o = 0, i = 0;

	for (; i + 3 <= len; i += 3) {
		unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];

		out[o++] = b64url_chars[(v >> 18) & 63];
		out[o++] = b64url_chars[(v >> 12) & 63];
		out[o++] = b64url_chars[(v >> 6) & 63];
		out[o++] = b64url_chars[v & 63];
	}
	if (len - i == 1) {
		unsigned v = (unsigned)in[i] << 16;

		out[o++] = b64url_chars[(v >> 18) & 63];
		out[o++] = b64url_chars[(v >> 12) & 63];
	} else if (len - i == 2) {
		unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8;

		out[o++] = b64url_chars[(v >> 18) & 63];
		out[o++] = b64url_chars[(v >> 12) & 63];
		out[o++] = b64url_chars[(v >> 6) & 63];
	}
	return o;
}

static bool b64url_valid(const char *s, size_t len)
{
	unsigned char *buf = xmalloc(b64url_decoded_max(len));
	size_t n = 0;
	bool ok = b64url_decode(s, len, buf, &n) == 0;

	free(buf);
	return ok;
}

/* Exactly three parts; header and payload non-empty. The signature may be
 * empty here so that an "alg":"none" token is refused by the alg check,
 * which names the attack in the log. */
static int split_token(const char *tok, size_t len, struct parts *p)
{
	const char *end = tok + len;
	const char *d1, *d2;

	d1 = memchr(tok, '.', len);
	if (!d1)
		return -EINVAL;
	d2 = memchr(d1 + 1, '.', (size_t)(end - (d1 + 1)));
	if (!d2)
		return -EINVAL;
	if (memchr(d2 + 1, '.', (size_t)(end - (d2 + 1))))
		return -EINVAL;
	p->hdr = tok;
	p->hdr_len = (size_t)(d1 - tok);
	p->pl = d1 + 1;
	p->pl_len = (size_t)(d2 - p->pl);
	p->sig = d2 + 1;
	p->sig_len = (size_t)(end - p->sig);
	p->signed_len = (size_t)(d2 - tok);
	if (p->hdr_len == 0 || p->pl_len == 0)
		return -EINVAL;
	return 0;
}

/* A base64url part holding a JSON object, or NULL. Duplicate names are
 * refused: two parsers must never read two different claims sets. */
static json_t *decode_json_part(const char *s, size_t len)
{
	unsigned char *buf = xmalloc(b64url_decoded_max(len));
	json_t *j = NULL;
	json_error_t err;
	size_t n = 0;

	if (b64url_decode(s, len, buf, &n) < 0)
		goto out;
	j = json_loadb((const char *)buf, n, JSON_REJECT_DUPLICATES, &err);
	if (j && !json_is_object(j)) {
		json_decref(j);
		j = NULL;
	}
out:
	free(buf);
	return j;
}

static bool json_str_eq(const json_t *j, const char *want)
{
	size_t n = strlen(want);

	return json_is_string(j) && json_string_length(j) == n && memcmp(json_string_value(j), want, n) == 0;
}

static bool tenant_name_ok(const char *s, size_t n)
{
	if (n < 1 || n >= AUTH_TENANT_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
			continue;
		if (i > 0 && (c == '_' || c == '-'))
			continue;
		return false;
	}
	return true;
}

/* alg must be the tenant's, spelled exactly; "typ", when present, is JWT;
 * "crit" names extensions we do not implement, so it is refused. */
static int check_header(const json_t *hdr, enum auth_alg alg, const char **why)
{
	const json_t *typ = json_object_get(hdr, "typ");

	if (!json_str_eq(json_object_get(hdr, "alg"), auth_alg_name(alg))) {
		*why = "alg mismatch";
		return -EACCES;
	}
	if (typ && !(json_is_string(typ) && strcasecmp(json_string_value(typ), "JWT") == 0)) {
		*why = "bad typ";
		return -EACCES;
	}
	if (json_object_get(hdr, "crit")) {
		*why = "unsupported crit";
		return -EACCES;
	}
	return 0;
}

/* libjwt 1.10.2 compares HS256 signatures with strcmp: do it here, in
 * constant time. */
static int verify_hs256(const char *tok, const struct parts *p, const struct auth_key *key)
{
	unsigned char sig[HS256_SIG_LEN + 2];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned md_len = 0;
	size_t sig_len = 0;
	int rc = -EACCES;

	if (p->sig_len != HS256_SIG_B64_LEN)
		return -EACCES;
	if (b64url_decode(p->sig, p->sig_len, sig, &sig_len) < 0 || sig_len != HS256_SIG_LEN)
		return -EACCES;
	if (!HMAC(EVP_sha256(), key->key, (int)key->key_len, (const unsigned char *)tok, p->signed_len, md,
		  &md_len))
		goto out;
	if (md_len != HS256_SIG_LEN)
		goto out;
	if (CRYPTO_memcmp(md, sig, HS256_SIG_LEN) == 0)
		rc = 0;
out:
	OPENSSL_cleanse(md, sizeof md);
	return rc;
}

#define ES256_SIG_LEN 64 /* r || s, 32 bytes each, big-endian */
#define ES256_SIG_B64_LEN 86

/* The order n of P-256, and floor(n / 2). */
static const unsigned char p256_n[32] = {
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
};
static const unsigned char p256_half_n[32] = {
    0x7f, 0xff, 0xff, 0xff, 0x80, 0x00, 0x00, 0x00, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xde, 0x73, 0x7d, 0x56, 0xd3, 0x8b, 0xcf, 0x42, 0x79, 0xdc, 0xe5, 0x61, 0x7e, 0x31, 0x92, 0xa8,
};

static bool all_zero(const unsigned char *p, size_t n)
{
	unsigned char acc = 0;

	for (size_t i = 0; i < n; i++)
		acc |= p[i];
	return acc == 0;
}

/* If (r, s) verifies, so does (r, n - s): a second spelling of the same
 * token that OpenSSL (and so libjwt) accepts. Only the low-S form is
 * taken, so a signed token has exactly one spelling: 64 bytes, 0 < r < n,
 * 0 < s <= n / 2. Big-endian fixed-width numbers compare like memcmp. */
static int check_es256_shape(const struct parts *p)
{
	unsigned char sig[ES256_SIG_LEN + 2];
	size_t sig_len = 0;

	if (p->sig_len != ES256_SIG_B64_LEN)
		return -EACCES;
	if (b64url_decode(p->sig, p->sig_len, sig, &sig_len) < 0 || sig_len != ES256_SIG_LEN)
		return -EACCES;
	const unsigned char *r = sig, *s = sig + 32;
	if (all_zero(r, 32) || all_zero(s, 32))
		return -EACCES;
	if (memcmp(r, p256_n, 32) >= 0 || memcmp(s, p256_half_n, 32) > 0)
		return -EACCES;
	return 0;
}

/* RS256/ES256 through libjwt, always with the tenant's (non-empty) public
 * key, and the algorithm libjwt saw checked again afterwards. */
static int verify_pem(const char *tok, size_t len, const struct auth_key *key)
{
	jwt_alg_t want = key->alg == AUTH_ALG_RS256 ? JWT_ALG_RS256 : JWT_ALG_ES256;
	char *copy = xstrndup(tok, len); /* no NUL inside: the parts are base64url */
	jwt_t *jwt = NULL;
	int rc = -EACCES;

	if (jwt_decode(&jwt, copy, key->key, (int)key->key_len) != 0)
		goto out;
	if (jwt_get_alg(jwt) != want)
		goto out;
	rc = 0;
out:
	if (jwt)
		jwt_free(jwt);
	free(copy);
	return rc;
}

/* 0 and *v, -ENOENT when absent, -EINVAL when not a JSON integer. */
static int int_claim(const json_t *pl, const char *name, int64_t *v)
{
	const json_t *j = json_object_get(pl, name);

	if (!j)
		return -ENOENT;
	if (!json_is_integer(j))
		return -EINVAL;
	*v = (int64_t)json_integer_value(j);
	return 0;
}

/* a > b + leeway, without overflowing for any a, b and leeway >= 0. */
static bool beyond(int64_t a, int64_t b, int64_t leeway)
{
	if (a <= b)
		return false;
	return (uint64_t)a - (uint64_t)b > (uint64_t)leeway;
}

static int check_aud(const json_t *aud, const char *want, const char **why)
{
	bool match = false;

	if (!aud) {
		if (!want)
			return 0;
		*why = "missing aud";
		return -EACCES;
	}
	if (json_is_string(aud)) {
		match = want && json_str_eq(aud, want);
	} else if (json_is_array(aud)) {
		size_t i;
		json_t *v;

		json_array_foreach(aud, i, v) {
			if (!json_is_string(v)) {
				*why = "bad aud";
				return -EACCES;
			}
			if (want && json_str_eq(v, want))
				match = true;
		}
	} else {
		*why = "bad aud";
		return -EACCES;
	}
	if (want && !match) {
		*why = "wrong aud";
		return -EACCES;
	}
	return 0;
}

/* exp and nbf of an accepted token against now (again at every use of a
 * remembered one). */
static int check_times(const struct auth_verified *v, int64_t leeway, int64_t now, const char **why)
{
	if (beyond(now, v->exp, leeway)) {
		*why = "expired";
		return -EACCES;
	}
	if (v->has_nbf && beyond(v->nbf, now, leeway)) {
		*why = "not yet valid";
		return -EACCES;
	}
	return 0;
}

/* The time claims and aud, checked; exp and nbf into v. */
static int check_claims(const json_t *pl, const struct auth_config *cfg, int64_t leeway, int64_t now,
			struct auth_verified *v, const char **why)
{
	int64_t iat = 0;
	int rc;

	rc = int_claim(pl, "exp", &v->exp);
	if (rc == -ENOENT) {
		*why = "missing exp";
		return -EACCES;
	}
	if (rc < 0) {
		*why = "bad exp";
		return -EACCES;
	}
	rc = int_claim(pl, "nbf", &v->nbf);
	if (rc == -EINVAL && !beyond(now, v->exp, leeway)) {
		*why = "bad nbf";
		return -EACCES;
	}
	v->has_nbf = rc == 0;
	if (check_times(v, leeway, now, why) < 0)
		return -EACCES;
	if (int_claim(pl, "iat", &iat) == -EINVAL) {
		*why = "bad iat";
		return -EACCES;
	}
	return check_aud(json_object_get(pl, "aud"), cfg ? cfg->audience : NULL, why);
}

/* The optional sub claim into out ("" when absent): a string of 1..128
 * bytes without control characters, so that it can be shown and logged
 * as it is. -EACCES otherwise. */
static int sub_claim(const json_t *j, char out[AUTH_SUB_MAX])
{
	out[0] = '\0';
	if (!j)
		return 0;
	if (!json_is_string(j) || json_string_length(j) < 1 || json_string_length(j) >= AUTH_SUB_MAX)
		return -EACCES;
	const unsigned char *p = (const unsigned char *)json_string_value(j);
	size_t n = json_string_length(j);
	for (size_t i = 0; i < n; i++)
		if (p[i] < 0x20 || p[i] == 0x7f)
			return -EACCES;
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

/* The tenant claim into out. */
static int tenant_claim(const json_t *pl, char out[AUTH_TENANT_MAX], const char **why)
{
	const json_t *j = json_object_get(pl, "tenant");
	if (!json_is_string(j) || !tenant_name_ok(json_string_value(j), json_string_length(j))) {
		*why = "bad tenant";
		return -EACCES;
	}
	size_t n = json_string_length(j);
	memcpy(out, json_string_value(j), n);
	out[n] = '\0';
	return 0;
}

/* The tenant's key: 0, -EACCES for an unknown tenant, or the look-up's
 * failure passed on (the store is down: 503 rather than 401). */
static int find_key(auth_key_lookup lookup, void *ctx, const char *tenant, struct auth_key *key,
		    const char **why)
{
	int rc = lookup(ctx, tenant, key);
	if (rc < 0 && rc != -ENOENT) {
		*why = "key lookup failed";
		return rc;
	}
	if (rc != 0) {
		*why = "unknown tenant";
		return -EACCES;
	}
	return 0;
}

/* The key fits the header, and the signature verifies with it. */
static int check_signature(const char *token, size_t len, const struct parts *p, const json_t *hdr,
			   const struct auth_key *key, const char **why)
{
	if (!auth_alg_name(key->alg)) {
		*why = "bad key";
		return -EACCES;
	}
	/* Never verify with an empty key: libjwt treats it as "no check". */
	if (!key->key || key->key_len == 0 || key->key_len > INT_MAX) {
		*why = "no key";
		return -EACCES;
	}
	if (check_header(hdr, key->alg, why) < 0)
		return -EACCES;
	if ((key->alg == AUTH_ALG_ES256 && check_es256_shape(p) < 0) ||
	    (key->alg == AUTH_ALG_HS256 ? verify_hs256(token, p, key) < 0
					: verify_pem(token, len, key) < 0)) {
		*why = "bad signature";
		return -EACCES;
	}
	return 0;
}

/* The key a token is checked with: the approver key when it says so
 * (kid "approver"; its bytes NULL when the tenant has none, which
 * check_signature refuses), else the main key. */
static struct auth_key key_for(const struct auth_key *k, bool approver)
{
	if (!approver)
		return *k;
	return (struct auth_key){.alg = k->approver_alg,
				 .key = k->approver_key,
				 .key_len = k->approver_key_len,
				 .operator_tenant = k->operator_tenant};
}

/* Whether the header names the approver key: 0 and *approver, or
 * -EACCES for a kid that is not a string. Other kids are the main key's
 * (libraries add their own). */
static int approver_kid(const json_t *hdr, bool *approver, const char **why)
{
	const json_t *kid = json_object_get(hdr, "kid");
	if (kid && !json_is_string(kid)) {
		*why = "bad kid";
		return -EACCES;
	}
	*approver = kid && json_str_eq(kid, AUTH_KID_APPROVER);
	return 0;
}

/* One verification under way: the tenant's key, once looked up (the
 * look-up takes a reference for the caller's request: at most once). */
struct attempt {
	struct auth_key key;
	bool have_key;
	struct auth_verified v;
};

/* Everything checked from the token's bytes (the key looked up unless
 * a->have_key): 0 and a->v, -EACCES (why), or a look-up failure. */
static int verify_full(const char *token, size_t len, const struct auth_config *cfg, int64_t leeway,
		       int64_t now, auth_key_lookup lookup, void *ctx, struct attempt *a, const char **why)
{
	char known[AUTH_TENANT_MAX];
	json_t *hdr = NULL, *pl = NULL;
	struct parts p;
	int rc = -EACCES;

	memcpy(known, a->v.tenant, sizeof known);
	*why = "malformed";
	if (split_token(token, len, &p) < 0)
		goto out;
	hdr = decode_json_part(p.hdr, p.hdr_len);
	pl = decode_json_part(p.pl, p.pl_len);
	if (!hdr || !pl || !b64url_valid(p.sig, p.sig_len))
		goto out;
	if ((rc = tenant_claim(pl, a->v.tenant, why)) < 0)
		goto out;
	if (a->have_key && strcmp(known, a->v.tenant) != 0) { /* never: the same bytes */
		*why = "bad tenant";
		rc = -EACCES;
		goto out;
	}
	if (!a->have_key && (rc = find_key(lookup, ctx, a->v.tenant, &a->key, why)) < 0)
		goto out;
	a->have_key = true;
	if ((rc = approver_kid(hdr, &a->v.approver, why)) < 0)
		goto out;
	struct auth_key use = key_for(&a->key, a->v.approver);
	if (a->v.approver && !use.key) {
		*why = "no approver key";
		rc = -EACCES;
		goto out;
	}
	if ((rc = check_signature(token, len, &p, hdr, &use, why)) < 0 ||
	    (rc = check_claims(pl, cfg, leeway, now, &a->v, why)) < 0)
		goto out;
	rc = -EACCES;
	const json_t *j = json_object_get(pl, "scope");
	if (j && !json_is_string(j)) {
		*why = "bad scope";
		goto out;
	}
	a->v.scopes = j ? auth_scopes_parse(json_string_value(j)) : AUTH_SCOPE_DEFAULT;
	if (sub_claim(json_object_get(pl, "sub"), a->v.sub) < 0) {
		*why = "bad sub";
		goto out;
	}
	rc = 0;
out:
	json_decref(hdr);
	json_decref(pl);
	return rc;
}

/* A token accepted before: 0 when it is still good (the tenant's key the
 * same, exp and nbf holding), < 0 refused, 1 when it must be verified
 * again (not remembered, or the key changed: a->key is the new one). */
static int verify_cached(struct auth_cache *c, const char *token, size_t len, int64_t leeway, int64_t now,
			 auth_key_lookup lookup, void *ctx, struct attempt *a, const char **why)
{
	struct auth_cache_ref ref;
	if (!auth_cache_get(c, token, len, &a->v, &ref))
		return 1;
	int rc = find_key(lookup, ctx, a->v.tenant, &a->key, why);
	if (rc < 0)
		return rc;
	a->have_key = true;
	struct auth_key used = key_for(&a->key, a->v.approver);
	if (!auth_cache_key_is(c, &ref, &used))
		return 1;
	return check_times(&a->v, leeway, now, why);
}

/* The scopes a verified token has: what it asks, cut by the key that
 * signed it. approve only from the approver key, and that key only
 * decides and reads; admin only for an operator tenant's main key. */
static void apply_key_limits(const struct auth_verified *v, const struct auth_key *k, struct auth_claims *out)
{
	out->scopes = v->scopes;
	out->approver = v->approver;
	if (v->approver) {
		out->scopes &= AUTH_SCOPES_APPROVER;
		return;
	}
	if (out->scopes & AUTH_SCOPE_APPROVE) {
		out->scopes &= ~(unsigned)AUTH_SCOPE_APPROVE;
		out->approve_refused = true;
	}
	if ((out->scopes & AUTH_SCOPE_ADMIN) && !k->operator_tenant) {
		out->scopes &= ~(unsigned)AUTH_SCOPE_ADMIN;
		out->admin_refused = true;
	}
}

/* Errors: -EACCES for a refused token; -EINVAL for a caller's mistake; a
 * lookup failure other than -ENOENT (the store is down) is passed on, so
 * the dispatcher can answer 503 rather than 401. A NULL cfg means all
 * defaults; a negative leeway means the default 30 s (0 is honoured). */
int auth_verify(const char *token, size_t len, const struct auth_config *cfg, int64_t now,
		auth_key_lookup lookup, void *lookup_ctx, struct auth_claims *out, const char **why)
{
	size_t max = cfg && cfg->max_token_bytes ? cfg->max_token_bytes : DEFAULT_MAX_TOKEN_BYTES;
	int64_t leeway = cfg && cfg->leeway_s >= 0 ? cfg->leeway_s : DEFAULT_LEEWAY_S;
	struct auth_cache *cache =
	    cfg && cfg->cache && auth_cache_serves(cfg->cache, cfg->audience) ? cfg->cache : NULL;
	const char *reason = "malformed";
	struct attempt a = {0};
	int rc = -EACCES;

	if (out)
		memset(out, 0, sizeof *out);
	if (!token || !lookup || !out) {
		reason = "bad arguments";
		rc = -EINVAL;
		goto out;
	}
	if (len > max) {
		reason = "token too large";
		goto out;
	}
	rc = cache ? verify_cached(cache, token, len, leeway, now, lookup, lookup_ctx, &a, &reason) : 1;
	if (rc == 1) {
		rc = verify_full(token, len, cfg, leeway, now, lookup, lookup_ctx, &a, &reason);
		if (rc == 0 && cache) {
			struct auth_key used = key_for(&a.key, a.v.approver);
			auth_cache_put(cache, token, len, &a.v, &used);
		}
	}
	if (rc < 0)
		goto out;
	apply_key_limits(&a.v, &a.key, out);
	memcpy(out->tenant, a.v.tenant, sizeof out->tenant);
	memcpy(out->sub, a.v.sub, sizeof out->sub);
	out->exp = a.v.exp;
	reason = NULL;
out:
	if (rc < 0 && out)
		memset(out, 0, sizeof *out);
	if (why)
		*why = reason;
	return rc;
}

/* Compact JSON into a fresh xmalloc buffer (not NUL-terminated): json_dumpb
 * keeps the allocation ours whatever allocator jansson was given. */
static char *dump_compact(const json_t *j, size_t *len)
{
	size_t n = json_dumpb(j, NULL, 0, JSON_COMPACT);
	char *s;

	if (n == 0)
		return NULL;
	s = xmalloc(n);
	if (json_dumpb(j, s, n, JSON_COMPACT) != n) {
		free(s);
		return NULL;
	}
	*len = n;
	return s;
}

/* json_object_set_new takes the value even on failure; a NULL value (a
 * string that is not UTF-8) makes it fail. */
static int set_field(json_t *obj, const char *name, json_t *v)
{
	return json_object_set_new(obj, name, v) == 0 ? 0 : -EINVAL;
}

char *auth_mint_hs256(const unsigned char *secret, size_t secret_len, const char *tenant, const char *scope,
		      const char *sub, int64_t iat, int64_t exp, const char *audience)
{
	return auth_mint_hs256_kid(secret, secret_len, NULL, tenant, scope, sub, iat, exp, audience);
}

char *auth_mint_hs256_kid(const unsigned char *secret, size_t secret_len, const char *kid, const char *tenant,
			  const char *scope, const char *sub, int64_t iat, int64_t exp, const char *audience)
{
	json_t *hdr = NULL, *pl = NULL;
	char *hdr_json = NULL, *pl_json = NULL, *tok = NULL;
	unsigned char md[EVP_MAX_MD_SIZE];
	size_t hdr_len = 0, pl_len = 0, o, signed_len;
	unsigned md_len = 0;

	if (!secret || secret_len == 0 || secret_len > INT_MAX || !tenant ||
	    !tenant_name_ok(tenant, strlen(tenant)))
		return NULL;
	hdr = json_object();
	pl = json_object();
	if (!hdr || !pl)
		goto out;
	if (set_field(hdr, "alg", json_string("HS256")) < 0 ||
	    set_field(hdr, "typ", json_string("JWT")) < 0 ||
	    (kid && set_field(hdr, "kid", json_string(kid)) < 0))
		goto out;
	if (set_field(pl, "tenant", json_string(tenant)) < 0 || set_field(pl, "iat", json_integer(iat)) < 0 ||
	    set_field(pl, "exp", json_integer(exp)) < 0)
		goto out;
	if (scope && set_field(pl, "scope", json_string(scope)) < 0)
		goto out;
	if (sub && set_field(pl, "sub", json_string(sub)) < 0)
		goto out;
	if (audience && set_field(pl, "aud", json_string(audience)) < 0)
		goto out;
	hdr_json = dump_compact(hdr, &hdr_len);
	pl_json = dump_compact(pl, &pl_len);
	if (!hdr_json || !pl_json)
		goto out;

	signed_len = b64url_encoded_len(hdr_len) + 1 + b64url_encoded_len(pl_len);
	tok = xmalloc(signed_len + 1 + b64url_encoded_len(HS256_SIG_LEN) + 1);
	o = b64url_encode((const unsigned char *)hdr_json, hdr_len, tok);
	tok[o++] = '.';
	o += b64url_encode((const unsigned char *)pl_json, pl_len, tok + o);
	if (!HMAC(EVP_sha256(), secret, (int)secret_len, (const unsigned char *)tok, signed_len, md,
		  &md_len) ||
	    md_len != HS256_SIG_LEN) {
		free(tok);
		tok = NULL;
		goto out;
	}
	tok[o++] = '.';
	o += b64url_encode(md, md_len, tok + o);
	tok[o] = '\0';
out:
	OPENSSL_cleanse(md, sizeof md);
	free(hdr_json);
	free(pl_json);
	json_decref(hdr);
	json_decref(pl);
	return tok;
}

int auth_token_tenant_claim(const char *token, char *out, size_t outsz)
{
	const char *p = strchr(token, '.');
	const char *q = p ? strchr(p + 1, '.') : NULL;
	if (!q || outsz == 0)
		return -EINVAL;
	size_t len = (size_t)(q - p - 1), n = 0;
	unsigned char *buf = xmalloc(b64url_decoded_max(len) + 1);
	int rc = b64url_decode(p + 1, len, buf, &n);
	json_t *pl = rc == 0 ? json_loadb((const char *)buf, n, 0, NULL) : NULL;
	const char *t = json_string_value(json_object_get(pl, "tenant"));
	rc = t && strlen(t) < outsz ? 0 : -EINVAL;
	if (rc == 0)
		snprintf(out, outsz, "%s", t);
	json_decref(pl);
	free(buf);
	return rc;
}
