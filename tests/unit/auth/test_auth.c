/* auth: one test per bad token of security.md "tokens", plus the good
 * tokens each refusal is measured against. Tokens are built by hand here
 * (own base64url, own HMAC) so that every refusal test differs from an
 * accepted token in exactly the property under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jwt.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include "auth/auth.h"
#include "common/xmalloc.h"

#define NOW ((int64_t)1700000000)

static const unsigned char secret[] = "0123456789abcdef0123456789abcdef";
static const unsigned char ops_secret[] = "fedcba9876543210fedcba9876543210";
static const unsigned char wrong_secret[] = "0123456789abcdef0123456789abcdeX";
static const unsigned char approver_secret[] = "approver-secret-0123456789abcdef";
#define SECRET_LEN 32

struct keys {
	char *rsa_pub, *rsa_priv;
	char *ec_pub, *ec_priv;
};
static struct keys keys;

struct tenant {
	const char *name;
	struct auth_key key;
};
static struct tenant tenants[5];

static int lookups; /* look-ups made: one per verification at most */

static int lookup(void *ctx, const char *name, struct auth_key *key)
{
	(void)ctx;
	lookups++;
	for (size_t i = 0; i < sizeof tenants / sizeof tenants[0]; i++) {
		if (tenants[i].name && strcmp(tenants[i].name, name) == 0) {
			*key = tenants[i].key;
			return 0;
		}
	}
	return -ENOENT;
}

/* ---- token building ---- */

static char *b64url(const void *data, size_t len)
{
	char *out = xmalloc(4 * ((len + 2) / 3) + 1);
	int n = EVP_EncodeBlock((unsigned char *)out, data, (int)len);
	int o = 0;

	for (int i = 0; i < n; i++) {
		if (out[i] == '=')
			break;
		out[o++] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
	}
	out[o] = '\0';
	return out;
}

static char *signing_input(const char *hdr, const char *pl)
{
	char *h = b64url(hdr, strlen(hdr)), *p = b64url(pl, strlen(pl));
	char *s = xasprintf("%s.%s", h, p);

	free(h);
	free(p);
	return s;
}

/* header.payload signed with HMAC-SHA256 under key, keeping only the
 * first sig_len bytes of the MAC (all 32 when sig_len is larger). */
static char *hs256_token_cut(const char *hdr, const char *pl, const void *key, size_t key_len, size_t sig_len)
{
	char *in = signing_input(hdr, pl);
	unsigned char md[32];
	unsigned md_len = 0;
	char *sig, *tok;

	assert_non_null(HMAC(EVP_sha256(), key, (int)key_len, (unsigned char *)in, strlen(in), md, &md_len));
	sig = b64url(md, sig_len < md_len ? sig_len : md_len);
	tok = xasprintf("%s.%s", in, sig);
	free(in);
	free(sig);
	return tok;
}

/* header.payload signed with HMAC-SHA256 under key. */
static char *hs256_token(const char *hdr, const char *pl, const void *key, size_t key_len)
{
	return hs256_token_cut(hdr, pl, key, key_len, SIZE_MAX);
}

#define HDR_HS256 "{\"alg\":\"HS256\",\"typ\":\"JWT\"}"

static char *acme(const char *pl)
{
	return hs256_token(HDR_HS256, pl, secret, SECRET_LEN);
}

/* A payload for tenant with exp and extra members (",..." or ""). */
static char *payload(const char *tenant, int64_t exp, const char *extra)
{
	return xasprintf("{\"tenant\":\"%s\",\"iat\":%lld,\"exp\":%lld%s}", tenant, (long long)NOW,
			 (long long)exp, extra);
}

/* A valid acme token expiring in a minute. */
static char *acme_valid(void)
{
	char *pl = payload("acme", NOW + 60, "");
	char *tok = acme(pl);

	free(pl);
	return tok;
}

/* The signature of tok, base64url-decoded into out (at most 96 bytes). */
static size_t sig_bytes(const char *tok, unsigned char *out)
{
	const char *sig = strrchr(tok, '.') + 1;
	size_t n = strlen(sig);
	char std[160];
	unsigned char raw[128];
	int len;

	assert_true(n + 4 < sizeof std);
	for (size_t i = 0; i < n; i++)
		std[i] = sig[i] == '-' ? '+' : sig[i] == '_' ? '/' : sig[i];
	while (n % 4)
		std[n++] = '=';
	std[n] = '\0';
	len = EVP_DecodeBlock(raw, (unsigned char *)std, (int)n);
	assert_true(len >= 0);
	/* EVP_DecodeBlock counts the padding as zero bytes */
	for (size_t i = n; i > 0 && std[i - 1] == '='; i--)
		len--;
	assert_true(len <= 96);
	memcpy(out, raw, (size_t)len);
	return (size_t)len;
}

/* tok with its signature replaced by sig (len bytes). */
static char *with_sig(const char *tok, const unsigned char *sig, size_t len)
{
	const char *dot = strrchr(tok, '.');
	char *b = b64url(sig, len);
	char *out = xasprintf("%.*s.%s", (int)(dot - tok), tok, b);

	free(b);
	return out;
}

enum s_form { S_LOW, S_HIGH };

/* An ES256 token with s in the form asked for: (r, s) and (r, n - s) both
 * verify, and exactly one of them has s <= n / 2 (the low-S form). */
static char *es256_with_s(const char *tok, enum s_form form)
{
	unsigned char sig[96];
	BIGNUM *n = NULL, *half = BN_new(), *sv;
	char *out;

	assert_int_equal(sig_bytes(tok, sig), 64);
	assert_true(BN_hex2bn(&n, "FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551") > 0);
	assert_int_equal(BN_rshift1(half, n), 1);
	sv = BN_bin2bn(sig + 32, 32, NULL);
	assert_non_null(sv);
	if ((form == S_HIGH) == (BN_cmp(sv, half) <= 0))
		assert_int_equal(BN_sub(sv, n, sv), 1);
	assert_int_equal(BN_bn2binpad(sv, sig + 32, 32), 32);
	out = with_sig(tok, sig, 64);
	BN_free(sv);
	BN_free(half);
	BN_free(n);
	return out;
}

/* Signed with libjwt and a PEM private key, as it comes (ES256: s is
 * high half of the time). */
static char *pem_token_raw(jwt_alg_t alg, const char *priv, const char *pl)
{
	jwt_t *jwt = NULL;
	char *s, *tok;

	assert_int_equal(jwt_new(&jwt), 0);
	assert_int_equal(jwt_set_alg(jwt, alg, (const unsigned char *)priv, (int)strlen(priv)), 0);
	assert_int_equal(jwt_add_grants_json(jwt, pl), 0);
	s = jwt_encode_str(jwt);
	assert_non_null(s);
	tok = xstrdup(s);
	free(s); /* libjwt 1.10 has no jwt_free_str; its default allocator is malloc */
	jwt_free(jwt);
	return tok;
}

/* The same as a conforming client sends it: ES256 in low-S form. */
static char *pem_token(jwt_alg_t alg, const char *priv, const char *pl)
{
	char *tok = pem_token_raw(alg, priv, pl), *low;

	if (alg != JWT_ALG_ES256)
		return tok;
	low = es256_with_s(tok, S_LOW);
	free(tok);
	return low;
}

/* ---- verifying ---- */

/* The suite runs twice (main): the second time every verification is
 * made again through a cache of accepted tokens (auth_cache), twice, so
 * the second is answered from the cache whenever the first accepted; each
 * answer must be the one without a cache. One cache per audience, as the
 * server has one for its configured audience. */
static bool with_cache;
#define NCACHES 4
static struct auth_cache *caches[NCACHES];
static char *cache_aud[NCACHES];

static struct auth_cache *cache_for(const char *aud)
{
	for (size_t i = 0; i < NCACHES; i++) {
		if (!caches[i]) {
			auth_cache_new(&caches[i], aud);
			cache_aud[i] = aud ? xstrdup(aud) : NULL;
			return caches[i];
		}
		if ((!aud && !cache_aud[i]) || (aud && cache_aud[i] && strcmp(aud, cache_aud[i]) == 0))
			return caches[i];
	}
	fail_msg("more audiences than caches");
	return NULL;
}

static void caches_free(void)
{
	for (size_t i = 0; i < NCACHES; i++) {
		auth_cache_free(&caches[i]);
		free(cache_aud[i]);
		cache_aud[i] = NULL;
	}
}

static int verify_cfg(const char *tok, const struct auth_config *cfg, struct auth_claims *c, const char **why)
{
	int rc = auth_verify(tok, strlen(tok), cfg, NOW, lookup, NULL, c, why);
	if (!with_cache)
		return rc;
	struct auth_config cc = cfg ? *cfg : (struct auth_config){.leeway_s = -1};
	cc.cache = cache_for(cc.audience);
	for (int i = 0; i < 2; i++) {
		struct auth_claims c2;
		const char *why2 = "unset";
		int before = lookups;
		memset(&c2, 0x5a, sizeof c2);
		assert_int_equal(auth_verify(tok, strlen(tok), &cc, NOW, lookup, NULL, &c2, &why2), rc);
		assert_true(lookups - before <= 1);
		if (!*why || !why2)
			assert_ptr_equal(*why, why2);
		else
			assert_string_equal(*why, why2);
		assert_memory_equal(c, &c2, sizeof c2);
	}
	return rc;
}

static void expect_ok(const char *tok, const struct auth_config *cfg, struct auth_claims *c)
{
	const char *why = "unset";
	int rc = verify_cfg(tok, cfg, c, &why);

	if (rc != 0)
		print_error("refused: %s\n", why ? why : "(null)");
	assert_int_equal(rc, 0);
	assert_null(why);
}

static void expect_refused(const char *tok, const struct auth_config *cfg, const char *reason)
{
	struct auth_claims c;
	const char *why = NULL;

	memset(&c, 0x5a, sizeof c);
	assert_int_equal(verify_cfg(tok, cfg, &c, &why), -EACCES);
	assert_non_null(why);
	assert_string_equal(why, reason);
	/* Nothing of a refused token leaks to the caller. */
	assert_string_equal(c.tenant, "");
	assert_int_equal(c.scopes, 0);
}

/* Expect tok refused with reason, then free it. */
static void refused_free(char *tok, const struct auth_config *cfg, const char *reason)
{
	expect_refused(tok, cfg, reason);
	free(tok);
}

/* tok with its payload replaced by pl2 is refused: the signature no
 * longer covers it. Frees tok and pl2. */
static void swapped_payload_refused(char *tok, char *pl2)
{
	char *b2 = b64url(pl2, strlen(pl2));
	const char *d1 = strchr(tok, '.'), *d2 = strchr(d1 + 1, '.');

	refused_free(xasprintf("%.*s.%s%s", (int)(d1 - tok), tok, b2, d2), NULL, "bad signature");
	free(b2);
	free(pl2);
	free(tok);
}

/* A token for tenant (payload expiring in a minute, no extra claims)
 * signed with HMAC-SHA256 under key with header hdr: refused for reason. */
static void hs256_refused(const char *tenant, const char *hdr, const void *key, size_t key_len,
			  const char *reason)
{
	char *pl = payload(tenant, NOW + 60, "");

	refused_free(hs256_token(hdr, pl, key, key_len), NULL, reason);
	free(pl);
}

/* pl signed with libjwt under a PEM key: accepted for tenant. */
static void pem_ok(jwt_alg_t alg, const char *priv, char *pl, const char *tenant, struct auth_claims *c)
{
	char *tok = pem_token(alg, priv, pl);

	expect_ok(tok, NULL, c);
	assert_string_equal(c->tenant, tenant);
	free(tok);
	free(pl);
}

/* Sign pl for acme, expect a refusal with reason, then free. */
static void acme_refused(char *pl, const struct auth_config *cfg, const char *reason)
{
	char *tok = acme(pl);

	expect_refused(tok, cfg, reason);
	free(tok);
	free(pl);
}

static void acme_ok(char *pl, const struct auth_config *cfg, struct auth_claims *c)
{
	char *tok = acme(pl);

	expect_ok(tok, cfg, c);
	free(tok);
	free(pl);
}

/* ---- fixtures ---- */

static char *pem_of(EVP_PKEY *pk, bool priv)
{
	BIO *bio = BIO_new(BIO_s_mem());
	char *data = NULL, *out;
	long n;

	assert_non_null(bio);
	if (priv)
		assert_int_equal(PEM_write_bio_PrivateKey(bio, pk, NULL, NULL, 0, NULL, NULL), 1);
	else
		assert_int_equal(PEM_write_bio_PUBKEY(bio, pk), 1);
	n = BIO_get_mem_data(bio, &data);
	assert_true(n > 0);
	out = xstrndup(data, (size_t)n);
	BIO_free(bio);
	return out;
}

static int group_setup(void **state)
{
	EVP_PKEY *rsa = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
	EVP_PKEY *ec = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");

	if (!rsa || !ec)
		return -1;
	keys.rsa_pub = pem_of(rsa, false);
	keys.rsa_priv = pem_of(rsa, true);
	keys.ec_pub = pem_of(ec, false);
	keys.ec_priv = pem_of(ec, true);
	EVP_PKEY_free(rsa);
	EVP_PKEY_free(ec);

	/* acme has an approver key (HS256); ec1's is the RSA public key. */
	tenants[0] = (struct tenant){"acme",
				     {.alg = AUTH_ALG_HS256,
				      .key = secret,
				      .key_len = SECRET_LEN,
				      .approver_alg = AUTH_ALG_HS256,
				      .approver_key = approver_secret,
				      .approver_key_len = SECRET_LEN}};
	tenants[1] = (struct tenant){
	    "ops",
	    {.alg = AUTH_ALG_HS256, .key = ops_secret, .key_len = SECRET_LEN, .operator_tenant = true}};
	tenants[2] = (struct tenant){
	    "rsa1",
	    {.alg = AUTH_ALG_RS256, .key = (unsigned char *)keys.rsa_pub, .key_len = strlen(keys.rsa_pub)}};
	tenants[3] = (struct tenant){"ec1",
				     {.alg = AUTH_ALG_ES256,
				      .key = (unsigned char *)keys.ec_pub,
				      .key_len = strlen(keys.ec_pub),
				      .approver_alg = AUTH_ALG_RS256,
				      .approver_key = (unsigned char *)keys.rsa_pub,
				      .approver_key_len = strlen(keys.rsa_pub)}};
	tenants[4] =
	    (struct tenant){"nokey", {.alg = AUTH_ALG_HS256, .key = (const unsigned char *)"", .key_len = 0}};
	(void)state;
	return 0;
}

static int group_teardown(void **state)
{
	free(keys.rsa_pub);
	free(keys.rsa_priv);
	free(keys.ec_pub);
	free(keys.ec_priv);
	(void)state;
	return 0;
}

/* ---- accepted tokens ---- */

/* approve comes from the approver key alone (issue 26): a token of the
 * main key (the gateway's) loses it; the approver key's tokens keep only
 * approve and audit:read; kid "approver" is checked with that key, never
 * the main one, and refused where the tenant has none. */
static void test_approver_key(void **state)
{
	struct auth_claims c;
	const char *greedy = "approve audit:read exec fs:read fs:write admin";
	char *tok = auth_mint_hs256(secret, SECRET_LEN, "acme", greedy, "gateway", NOW, NOW + 60, NULL);
	expect_ok(tok, NULL, &c);
	assert_int_equal(c.scopes,
			 AUTH_SCOPE_AUDIT_READ | AUTH_SCOPE_EXEC | AUTH_SCOPE_FS_READ | AUTH_SCOPE_FS_WRITE);
	assert_true(c.approve_refused);
	assert_false(c.approver);
	free(tok);
	tok = auth_mint_hs256_kid(approver_secret, SECRET_LEN, AUTH_KID_APPROVER, "acme", greedy, "alice",
				  NOW, NOW + 60, NULL);
	expect_ok(tok, NULL, &c);
	assert_int_equal(c.scopes, AUTH_SCOPES_APPROVER);
	assert_true(c.approver);
	free(tok);
	/* No scope claim: the default scopes, none of which an approver keeps. */
	tok = auth_mint_hs256_kid(approver_secret, SECRET_LEN, AUTH_KID_APPROVER, "acme", NULL, "alice", NOW,
				  NOW + 60, NULL);
	expect_ok(tok, NULL, &c);
	assert_int_equal(c.scopes, 0);
	free(tok);
	/* The main key claiming to be the approver's; the approver key without the kid. */
	refused_free(auth_mint_hs256_kid(secret, SECRET_LEN, AUTH_KID_APPROVER, "acme", "approve", "m", NOW,
					 NOW + 60, NULL),
		     NULL, "bad signature");
	refused_free(
	    auth_mint_hs256(approver_secret, SECRET_LEN, "acme", "approve", "m", NOW, NOW + 60, NULL), NULL,
	    "bad signature");
	refused_free(auth_mint_hs256_kid(ops_secret, SECRET_LEN, AUTH_KID_APPROVER, "ops", "approve", "m",
					 NOW, NOW + 60, NULL),
		     NULL, "no approver key");
	/* The approver key's algorithm decides, not the main key's (ec1: ES256 main, RS256 approver). */
	refused_free(auth_mint_hs256_kid((const unsigned char *)keys.rsa_pub, strlen(keys.rsa_pub),
					 AUTH_KID_APPROVER, "ec1", "approve", "m", NOW, NOW + 60, NULL),
		     NULL, "alg mismatch");
	(void)state;
}

/* sub names the holder (approval needs it); a bad one refuses the token. */
static void test_sub_claim(void **state)
{
	struct auth_claims c;
	char *tok = auth_mint_hs256_kid(approver_secret, SECRET_LEN, AUTH_KID_APPROVER, "acme", "approve",
					"alice@example.com", NOW, NOW + 60, NULL);
	assert_non_null(tok);
	expect_ok(tok, NULL, &c);
	assert_string_equal(c.sub, "alice@example.com");
	assert_int_equal(c.scopes, AUTH_SCOPE_APPROVE);
	assert_true(c.approver);
	free(tok);
	tok = auth_mint_hs256(secret, SECRET_LEN, "acme", NULL, NULL, NOW, NOW + 60, NULL);
	expect_ok(tok, NULL, &c);
	assert_string_equal(c.sub, "");
	free(tok);
	char long_sub[200];
	memset(long_sub, 'a', sizeof long_sub - 1);
	long_sub[sizeof long_sub - 1] = '\0';
	const char *bad[] = {"", "bob\n", "esc\x1b[0m", long_sub};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		tok = auth_mint_hs256(secret, SECRET_LEN, "acme", NULL, bad[i], NOW, NOW + 60, NULL);
		assert_non_null(tok);
		expect_refused(tok, NULL, "bad sub");
		free(tok);
	}
	(void)state;
}

static void test_minted_hs256_accepted(void **state)
{
	struct auth_claims c;
	char *tok = auth_mint_hs256(secret, SECRET_LEN, "acme", NULL, NULL, NOW, NOW + 60, NULL);

	assert_non_null(tok);
	expect_ok(tok, NULL, &c);
	assert_string_equal(c.tenant, "acme");
	assert_int_equal(c.exp, NOW + 60);
	assert_int_equal(c.scopes, AUTH_SCOPE_DEFAULT);
	assert_false(c.admin_refused);
	free(tok);
	(void)state;
}

static void test_minted_with_scope_and_aud(void **state)
{
	struct auth_config cfg = {.audience = "sandboxd"};
	struct auth_claims c;
	char *tok =
	    auth_mint_hs256(secret, SECRET_LEN, "acme", "audit:read", NULL, NOW, NOW + 60, "sandboxd");

	assert_non_null(tok);
	expect_ok(tok, &cfg, &c);
	assert_int_equal(c.scopes, AUTH_SCOPE_AUDIT_READ);
	free(tok);
	/* Refuses what it could not sign honestly. */
	assert_null(auth_mint_hs256(secret, SECRET_LEN, "Bad Name", NULL, NULL, NOW, NOW + 60, NULL));
	assert_null(auth_mint_hs256(secret, 0, "acme", NULL, NULL, NOW, NOW + 60, NULL));
	(void)state;
}

static void test_handmade_hs256_accepted(void **state)
{
	struct auth_claims c;

	acme_ok(payload("acme", NOW + 60, ""), NULL, &c);
	assert_string_equal(c.tenant, "acme");
	(void)state;
}

static void test_rs256_accepted(void **state)
{
	struct auth_claims c;

	pem_ok(JWT_ALG_RS256, keys.rsa_priv, payload("rsa1", NOW + 60, ",\"scope\":\"exec\""), "rsa1", &c);
	assert_int_equal(c.scopes, AUTH_SCOPE_EXEC);
	(void)state;
}

static void test_rs256_tampered_refused(void **state)
{
	char *pl = payload("rsa1", NOW + 60, "");

	swapped_payload_refused(pem_token(JWT_ALG_RS256, keys.rsa_priv, pl),
				payload("rsa1", NOW + 99999, ""));
	free(pl);
	(void)state;
}

static void test_es256_accepted(void **state)
{
	struct auth_claims c;

	pem_ok(JWT_ALG_ES256, keys.ec_priv, payload("ec1", NOW + 60, ""), "ec1", &c);
	(void)state;
}

/* libjwt (OpenSSL) accepts both (r, s) and (r, n - s); only the low-S
 * spelling is taken. 50 signatures: both forms of each, whichever form
 * the signer happened to produce. */
static void test_es256_high_s_refused(void **state)
{
	for (int i = 0; i < 50; i++) {
		struct auth_claims c;
		char *pl = payload("ec1", NOW + 60 + i, "");
		char *tok = pem_token_raw(JWT_ALG_ES256, keys.ec_priv, pl);
		char *low = es256_with_s(tok, S_LOW), *high = es256_with_s(tok, S_HIGH);
		jwt_t *jwt = NULL;

		assert_string_not_equal(low, high);
		/* the library alone would take the high-S one */
		assert_int_equal(
		    jwt_decode(&jwt, high, (const unsigned char *)keys.ec_pub, (int)strlen(keys.ec_pub)), 0);
		jwt_free(jwt);
		expect_ok(low, NULL, &c);
		assert_string_equal(c.tenant, "ec1");
		expect_refused(high, NULL, "bad signature");
		free(high);
		free(low);
		free(tok);
		free(pl);
	}
	(void)state;
}

/* r or s zero, r >= n, and signatures that are not 64 bytes. */
static void test_es256_bad_shape_refused(void **state)
{
	static const unsigned char n[32] = {
	    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
	};
	char *pl = payload("ec1", NOW + 60, "");
	char *tok = pem_token(JWT_ALG_ES256, keys.ec_priv, pl);
	unsigned char sig[96], bad[96];

	assert_int_equal(sig_bytes(tok, sig), 64);
	memcpy(bad, sig, 64);
	memset(bad, 0, 32); /* r = 0 */
	refused_free(with_sig(tok, bad, 64), NULL, "bad signature");
	memcpy(bad, sig, 64);
	memset(bad + 32, 0, 32); /* s = 0 */
	refused_free(with_sig(tok, bad, 64), NULL, "bad signature");
	memcpy(bad, sig, 64);
	memcpy(bad, n, 32); /* r = n */
	refused_free(with_sig(tok, bad, 64), NULL, "bad signature");
	refused_free(with_sig(tok, sig, 63), NULL, "bad signature"); /* short */
	memcpy(bad, sig, 64);
	bad[64] = 0;
	refused_free(with_sig(tok, bad, 65), NULL, "bad signature"); /* long */
	struct auth_claims c;
	expect_ok(tok, NULL, &c); /* the untouched low-S token */
	free(tok);
	free(pl);
	(void)state;
}

/* ---- algorithm confusion ---- */

static void test_alg_none_refused(void **state)
{
	char *pl = payload("acme", NOW + 60, "");
	char *in = signing_input("{\"alg\":\"none\",\"typ\":\"JWT\"}", pl);
	char *tok = xasprintf("%s.", in);

	expect_refused(tok, NULL, "alg mismatch");
	free(tok);
	free(in);
	free(pl);
	(void)state;
}

/* Signed with the right secret: only the alg check can refuse these. */
static void test_alg_None_refused(void **state)
{
	hs256_refused("acme", "{\"alg\":\"None\",\"typ\":\"JWT\"}", secret, SECRET_LEN, "alg mismatch");
	(void)state;
}

static void test_alg_other_refused(void **state)
{
	static const char *hdrs[] = {
	    "{\"alg\":\"HS384\"}",  "{\"alg\":\"RS256\"}",   "{\"alg\":\"hs256\"}",
	    "{\"alg\":\"HS256 \"}", "{\"alg\":[\"HS256\"]}", "{\"typ\":\"JWT\"}",
	};
	char *pl = payload("acme", NOW + 60, "");

	for (size_t i = 0; i < sizeof hdrs / sizeof hdrs[0]; i++) {
		refused_free(hs256_token(hdrs[i], pl, secret, SECRET_LEN), NULL, "alg mismatch");
	}
	free(pl);
	(void)state;
}

/* The attacker knows the RS256 tenant's public key and uses its PEM bytes
 * as an HS256 secret. */
static void test_rs256_pem_as_hs256_secret_refused(void **state)
{
	hs256_refused("rsa1", HDR_HS256, keys.rsa_pub, strlen(keys.rsa_pub), "alg mismatch");
	(void)state;
}

static void test_es256_against_rs256_tenant_refused(void **state)
{
	char *pl = payload("rsa1", NOW + 60, "");

	refused_free(pem_token(JWT_ALG_ES256, keys.ec_priv, pl), NULL, "alg mismatch");
	free(pl);
	(void)state;
}

static void test_empty_key_refused(void **state)
{
	hs256_refused("nokey", HDR_HS256, "", 0, "no key");
	(void)state;
}

/* ---- signature ---- */

static void test_wrong_secret_refused(void **state)
{
	hs256_refused("acme", HDR_HS256, wrong_secret, SECRET_LEN, "bad signature");
	(void)state;
}

static void test_tampered_claims_refused(void **state)
{
	char *pl = payload("acme", NOW + 60, "");

	swapped_payload_refused(acme(pl), payload("acme", NOW + 60, ",\"scope\":\"admin\""));
	free(pl);
	(void)state;
}

static void test_truncated_signature_refused(void **state)
{
	char *pl = payload("acme", NOW + 60, "");

	/* The first 31 bytes of the right MAC: a prefix compare would pass. */
	refused_free(hs256_token_cut(HDR_HS256, pl, secret, SECRET_LEN, 31), NULL, "bad signature");
	free(pl);
	(void)state;
}

/* ---- claims ---- */

static void test_missing_exp_refused(void **state)
{
	acme_refused(xasprintf("{\"tenant\":\"acme\",\"iat\":%lld}", (long long)NOW), NULL, "missing exp");
	(void)state;
}

static void test_exp_string_refused(void **state)
{
	acme_refused(xasprintf("{\"tenant\":\"acme\",\"exp\":\"%lld\"}", (long long)(NOW + 60)), NULL,
		     "bad exp");
	(void)state;
}

static void test_exp_float_refused(void **state)
{
	acme_refused(xasprintf("{\"tenant\":\"acme\",\"exp\":%lld.0}", (long long)(NOW + 60)), NULL,
		     "bad exp");
	(void)state;
}

static void test_expired_beyond_leeway_refused(void **state)
{
	struct auth_config cfg = {.leeway_s = 30};

	acme_refused(payload("acme", NOW - 31, ""), &cfg, "expired");
	/* The default leeway is 30 s too. */
	acme_refused(payload("acme", NOW - 31, ""), NULL, "expired");
	(void)state;
}

static void test_expired_within_leeway_accepted(void **state)
{
	struct auth_config cfg = {.leeway_s = 30};
	struct auth_claims c;

	acme_ok(payload("acme", NOW - 30, ""), &cfg, &c);
	acme_ok(payload("acme", NOW - 30, ""), NULL, &c);
	(void)state;
}

static void test_nbf_beyond_leeway_refused(void **state)
{
	struct auth_config cfg = {.leeway_s = 30};

	acme_refused(payload("acme", NOW + 600, ",\"nbf\":1700000031"), &cfg, "not yet valid");
	(void)state;
}

static void test_nbf_within_leeway_accepted(void **state)
{
	struct auth_config cfg = {.leeway_s = 30};
	struct auth_claims c;

	acme_ok(payload("acme", NOW + 600, ",\"nbf\":1700000030"), &cfg, &c);
	(void)state;
}

static void test_ill_typed_optional_claims_refused(void **state)
{
	acme_refused(payload("acme", NOW + 60, ",\"nbf\":\"1\""), NULL, "bad nbf");
	acme_refused(xasprintf("{\"tenant\":\"acme\",\"iat\":1.5,\"exp\":%lld}", (long long)(NOW + 60)), NULL,
		     "bad iat");
	acme_refused(payload("acme", NOW + 60, ",\"scope\":[\"exec\"]"), NULL, "bad scope");
	(void)state;
}

static void test_extreme_times_no_overflow(void **state)
{
	struct auth_claims c;

	acme_ok(payload("acme", INT64_MAX, ",\"nbf\":-9223372036854775807"), NULL, &c);
	acme_refused(payload("acme", INT64_MIN, ""), NULL, "expired");
	acme_refused(payload("acme", INT64_MAX, ",\"nbf\":9223372036854775807"), NULL, "not yet valid");
	(void)state;
}

static void test_unknown_tenant_refused(void **state)
{
	acme_refused(payload("ghost", NOW + 60, ""), NULL, "unknown tenant");
	(void)state;
}

static void test_bad_tenant_claim_refused(void **state)
{
	acme_refused(xasprintf("{\"exp\":%lld}", (long long)(NOW + 60)), NULL, "bad tenant");
	acme_refused(xasprintf("{\"tenant\":7,\"exp\":%lld}", (long long)(NOW + 60)), NULL, "bad tenant");
	acme_refused(payload("Acme", NOW + 60, ""), NULL, "bad tenant");
	acme_refused(payload("-acme", NOW + 60, ""), NULL, "bad tenant");
	acme_refused(payload("", NOW + 60, ""), NULL, "bad tenant");
	acme_refused(
	    payload("a234567890123456789012345678901234567890123456789012345678901234", NOW + 60, ""), NULL,
	    "bad tenant");
	(void)state;
}

static int lookup_down(void *ctx, const char *name, struct auth_key *key)
{
	(void)ctx;
	(void)name;
	(void)key;
	return -EIO;
}

/* A store that is down is not the caller's fault: not -EACCES (401). */
static void test_lookup_failure_passed_on(void **state)
{
	char *pl = payload("acme", NOW + 60, "");
	char *tok = acme(pl);
	struct auth_claims c;
	const char *why = NULL;

	assert_int_equal(auth_verify(tok, strlen(tok), NULL, NOW, lookup_down, NULL, &c, &why), -EIO);
	assert_string_equal(why, "key lookup failed");
	assert_int_equal(auth_verify(tok, strlen(tok), NULL, NOW, NULL, NULL, &c, &why), -EINVAL);
	assert_int_equal(auth_verify(NULL, 0, NULL, NOW, lookup, NULL, &c, &why), -EINVAL);
	free(tok);
	free(pl);
	(void)state;
}

/* ---- the cache of accepted tokens ---- */

/* A token answered from the cache is refused as soon as its tenant's key
 * is another (and accepted again with the key back), its tenant gone, its
 * time over; the operator flag is read anew; one changed byte misses. */
static void test_cache_follows_the_tenant(void **state)
{
	struct auth_cache *cache = NULL;
	auth_cache_new(&cache, NULL);
	struct auth_config cfg = {.leeway_s = 0, .cache = cache};
	char *pl = payload("ops", NOW + 60, ",\"scope\":\"admin\"");
	char *tok = hs256_token(HDR_HS256, pl, ops_secret, SECRET_LEN);
	struct auth_claims c;
	const char *why = NULL;
	size_t n = strlen(tok);

	for (int i = 0; i < 2; i++) {
		assert_int_equal(auth_verify(tok, n, &cfg, NOW, lookup, NULL, &c, &why), 0);
		assert_int_equal(c.scopes, AUTH_SCOPE_ADMIN);
	}
	/* The key changed: refused, though the same bytes were accepted. */
	tenants[1].key.key = secret;
	assert_int_equal(auth_verify(tok, n, &cfg, NOW, lookup, NULL, &c, &why), -EACCES);
	assert_string_equal(why, "bad signature");
	tenants[1].key.key = ops_secret;
	assert_int_equal(auth_verify(tok, n, &cfg, NOW, lookup, NULL, &c, &why), 0);
	/* No longer an operator: admin cleared at once. */
	tenants[1].key.operator_tenant = false;
	assert_int_equal(auth_verify(tok, n, &cfg, NOW, lookup, NULL, &c, &why), 0);
	assert_int_equal(c.scopes, 0);
	assert_true(c.admin_refused);
	tenants[1].key.operator_tenant = true;
	/* The tenant gone. */
	tenants[1].name = "ops-removed";
	assert_int_equal(auth_verify(tok, n, &cfg, NOW, lookup, NULL, &c, &why), -EACCES);
	assert_string_equal(why, "unknown tenant");
	tenants[1].name = "ops";
	/* Time passes. */
	assert_int_equal(auth_verify(tok, n, &cfg, NOW + 60, lookup, NULL, &c, &why), 0);
	assert_int_equal(auth_verify(tok, n, &cfg, NOW + 61, lookup, NULL, &c, &why), -EACCES);
	assert_string_equal(why, "expired");
	assert_string_equal(c.tenant, "");
	/* One byte of the signature changed, at its end and at its start. */
	char *bad = xstrdup(tok);
	bad[n - 1] = bad[n - 1] == 'A' ? 'B' : 'A';
	assert_int_equal(auth_verify(bad, n, &cfg, NOW, lookup, NULL, &c, &why), -EACCES);
	bad[n - 1] = tok[n - 1];
	char *dot = strrchr(bad, '.');
	dot[1] = dot[1] == 'A' ? 'B' : 'A';
	assert_int_equal(auth_verify(bad, n, &cfg, NOW, lookup, NULL, &c, &why), -EACCES);
	/* A prefix is no hit either. */
	assert_int_equal(auth_verify(tok, n - 1, &cfg, NOW, lookup, NULL, &c, &why), -EACCES);
	free(bad);
	free(tok);
	free(pl);
	auth_cache_free(&cache);
	auth_cache_free(&cache); /* NULL is fine */
	(void)state;
}

/* A cache made for one audience answers nothing under another. */
static void test_cache_of_another_audience_unused(void **state)
{
	struct auth_cache *cache = NULL;
	auth_cache_new(&cache, "gw-a");
	char *pl = payload("acme", NOW + 60, ",\"aud\":\"gw-a\"");
	char *tok = acme(pl);
	struct auth_config a = {.audience = "gw-a", .leeway_s = 30, .cache = cache};
	struct auth_config b = {.audience = "gw-b", .leeway_s = 30, .cache = cache};
	struct auth_claims c;
	const char *why = NULL;

	assert_int_equal(auth_verify(tok, strlen(tok), &a, NOW, lookup, NULL, &c, &why), 0);
	assert_int_equal(auth_verify(tok, strlen(tok), &a, NOW, lookup, NULL, &c, &why), 0);
	assert_int_equal(auth_verify(tok, strlen(tok), &b, NOW, lookup, NULL, &c, &why), -EACCES);
	assert_string_equal(why, "wrong aud");
	free(tok);
	free(pl);
	auth_cache_free(&cache);
	(void)state;
}

/* ---- audience ---- */

static void test_wrong_aud_refused(void **state)
{
	struct auth_config cfg = {.audience = "sandboxd", .leeway_s = 30};

	acme_refused(payload("acme", NOW + 60, ",\"aud\":\"other\""), &cfg, "wrong aud");
	acme_refused(payload("acme", NOW + 60, ",\"aud\":[\"other\",\"x\"]"), &cfg, "wrong aud");
	acme_refused(payload("acme", NOW + 60, ",\"aud\":[]"), &cfg, "wrong aud");
	acme_refused(payload("acme", NOW + 60, ",\"aud\":[\"sandboxd\",7]"), &cfg, "bad aud");
	acme_refused(payload("acme", NOW + 60, ",\"aud\":7"), &cfg, "bad aud");
	(void)state;
}

static void test_aud_string_and_array_accepted(void **state)
{
	struct auth_config cfg = {.audience = "sandboxd", .leeway_s = 30};
	struct auth_claims c;

	acme_ok(payload("acme", NOW + 60, ",\"aud\":\"sandboxd\""), &cfg, &c);
	acme_ok(payload("acme", NOW + 60, ",\"aud\":[\"other\",\"sandboxd\"]"), &cfg, &c);
	(void)state;
}

static void test_missing_aud_when_configured_refused(void **state)
{
	struct auth_config cfg = {.audience = "sandboxd", .leeway_s = 30};
	struct auth_claims c;

	acme_refused(payload("acme", NOW + 60, ""), &cfg, "missing aud");
	/* Without a configured audience the same token passes. */
	acme_ok(payload("acme", NOW + 60, ""), NULL, &c);
	(void)state;
}

/* ---- shape ---- */

static void test_oversized_token_refused(void **state)
{
	struct auth_config big = {.max_token_bytes = 65536, .leeway_s = 30};
	struct auth_claims c;
	char *pad = xmalloc(7000);
	char *extra, *pl, *tok;

	memset(pad, 'x', 6999);
	pad[6999] = '\0';
	extra = xasprintf(",\"pad\":\"%s\"", pad);
	pl = payload("acme", NOW + 60, extra);
	tok = acme(pl);
	assert_true(strlen(tok) > 8192);
	expect_refused(tok, NULL, "token too large");
	/* The same token is fine under a larger cap: it is the size that failed. */
	expect_ok(tok, &big, &c);
	/* And a small configured cap applies as well. */
	free(tok);
	tok = acme_valid();
	big.max_token_bytes = strlen(tok) - 1;
	expect_refused(tok, &big, "token too large");
	big.max_token_bytes = strlen(tok);
	expect_ok(tok, &big, &c);
	free(tok);
	free(pl);
	free(extra);
	free(pad);
	(void)state;
}

static void test_garbage_base64_refused(void **state)
{
	char *tok = acme_valid();
	char *pl = payload("acme", NOW + 60, "");
	char *in = signing_input(HDR_HS256, pl);
	char *t;

	expect_refused("!!!.???.***", NULL, "malformed");
	/* Standard base64 characters and padding are not base64url. */
	refused_free(xasprintf("%s+", tok), NULL, "malformed");
	refused_free(xasprintf("%s=", tok), NULL, "malformed");
	/* A valid token with one header character replaced. */
	t = xstrdup(tok);
	t[3] = '*';
	refused_free(t, NULL, "malformed");
	/* A header that decodes but is not JSON. */
	refused_free(xasprintf("bm90IGpzb24.%s", strchr(tok, '.') + 1), NULL, "malformed");
	/* JSON that is not an object. */
	refused_free(xasprintf("WzFd.%s", strchr(tok, '.') + 1), NULL, "malformed");
	/* Non-canonical base64url: "QR" and "QQ" both decode to "A". */
	refused_free(xasprintf("%s.QR", in), NULL, "malformed");
	free(in);
	free(pl);
	free(tok);
	(void)state;
}

static void test_two_part_token_refused(void **state)
{
	char *tok = acme_valid();

	*strrchr(tok, '.') = '\0';
	expect_refused(tok, NULL, "malformed");
	/* Three parts with an empty signature: shaped right, never valid. */
	refused_free(xasprintf("%s.", tok), NULL, "bad signature");
	free(tok);
	tok = acme_valid();
	refused_free(xasprintf("%s.e30", tok), NULL, "malformed");
	expect_refused("", NULL, "malformed");
	expect_refused("..", NULL, "malformed");
	free(tok);
	(void)state;
}

static void test_duplicate_claims_refused(void **state)
{
	acme_refused(xasprintf("{\"tenant\":\"acme\",\"exp\":%lld,\"exp\":%lld}", (long long)NOW - 999,
			       (long long)NOW + 60),
		     NULL, "malformed");
	(void)state;
}

/* ---- scopes ---- */

static void test_scope_parsing(void **state)
{
	struct auth_claims c;

	acme_ok(payload("acme", NOW + 60, ""), NULL, &c);
	assert_int_equal(c.scopes, AUTH_SCOPE_DEFAULT);
	acme_ok(payload("acme", NOW + 60, ",\"scope\":\"fs:read exec\""), NULL, &c);
	assert_int_equal(c.scopes, AUTH_SCOPE_FS_READ | AUTH_SCOPE_EXEC);
	acme_ok(payload("acme", NOW + 60, ",\"scope\":\" fs:read  teleport exec fs:readx \""), NULL, &c);
	assert_int_equal(c.scopes, AUTH_SCOPE_FS_READ | AUTH_SCOPE_EXEC);
	acme_ok(payload("acme", NOW + 60, ",\"scope\":\"\""), NULL, &c);
	assert_int_equal(c.scopes, 0);

	assert_int_equal(auth_scopes_parse("fs:write audit:read"),
			 AUTH_SCOPE_FS_WRITE | AUTH_SCOPE_AUDIT_READ);
	assert_int_equal(auth_scopes_parse("frobnicate"), 0);
	assert_int_equal(auth_scopes_parse("exe exec:"), 0);
	assert_int_equal(auth_scopes_parse(NULL), 0);
	(void)state;
}

static void test_admin_cleared_for_non_operator(void **state)
{
	struct auth_claims c;

	acme_ok(payload("acme", NOW + 60, ",\"scope\":\"admin fs:read\""), NULL, &c);
	assert_int_equal(c.scopes, AUTH_SCOPE_FS_READ);
	assert_true(c.admin_refused);
	(void)state;
}

static void test_admin_kept_for_operator(void **state)
{
	struct auth_claims c;
	char *pl = payload("ops", NOW + 60, ",\"scope\":\"admin fs:read\"");
	char *tok = hs256_token(HDR_HS256, pl, ops_secret, SECRET_LEN);

	expect_ok(tok, NULL, &c);
	assert_string_equal(c.tenant, "ops");
	assert_int_equal(c.scopes, AUTH_SCOPE_ADMIN | AUTH_SCOPE_FS_READ);
	assert_false(c.admin_refused);
	free(tok);
	free(pl);
	(void)state;
}

static void test_scopes_format_round_trip(void **state)
{
	char buf[128], small[12];

	for (unsigned bits = 0; bits < 32; bits++) {
		auth_scopes_format(bits, buf, sizeof buf);
		assert_int_equal(auth_scopes_parse(buf), bits);
	}
	auth_scopes_format(AUTH_SCOPE_FS_READ | AUTH_SCOPE_EXEC, buf, sizeof buf);
	assert_string_equal(buf, "fs:read exec");
	auth_scopes_format(0, buf, sizeof buf);
	assert_string_equal(buf, "");
	/* Too small: whole names only, never a cut one. */
	auth_scopes_format(AUTH_SCOPE_FS_READ | AUTH_SCOPE_FS_WRITE, small, sizeof small);
	assert_string_equal(small, "fs:read");
	(void)state;
}

/* ---- the rest of the header ---- */

static void test_alg_names(void **state)
{
	enum auth_alg a;

	assert_string_equal(auth_alg_name(AUTH_ALG_HS256), "HS256");
	assert_string_equal(auth_alg_name(AUTH_ALG_RS256), "RS256");
	assert_string_equal(auth_alg_name(AUTH_ALG_ES256), "ES256");
	assert_null(auth_alg_name((enum auth_alg)0));
	assert_int_equal(auth_alg_parse("ES256", &a), 0);
	assert_int_equal(a, AUTH_ALG_ES256);
	assert_int_equal(auth_alg_parse("none", &a), -EINVAL);
	assert_int_equal(auth_alg_parse("hs256", &a), -EINVAL);
	(void)state;
}

static void test_random(void **state)
{
	unsigned char a[64], b[64];

	memset(a, 0, sizeof a);
	memset(b, 0, sizeof b);
	assert_int_equal(auth_random(a, sizeof a), 0);
	assert_int_equal(auth_random(b, sizeof b), 0);
	assert_memory_not_equal(a, b, sizeof a);
	assert_int_equal(auth_random(a, 0), 0);
	(void)state;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_minted_hs256_accepted),
	    cmocka_unit_test(test_sub_claim),
	    cmocka_unit_test(test_approver_key),
	    cmocka_unit_test(test_minted_with_scope_and_aud),
	    cmocka_unit_test(test_handmade_hs256_accepted),
	    cmocka_unit_test(test_rs256_accepted),
	    cmocka_unit_test(test_rs256_tampered_refused),
	    cmocka_unit_test(test_es256_accepted),
	    cmocka_unit_test(test_es256_high_s_refused),
	    cmocka_unit_test(test_es256_bad_shape_refused),
	    cmocka_unit_test(test_alg_none_refused),
	    cmocka_unit_test(test_alg_None_refused),
	    cmocka_unit_test(test_alg_other_refused),
	    cmocka_unit_test(test_rs256_pem_as_hs256_secret_refused),
	    cmocka_unit_test(test_es256_against_rs256_tenant_refused),
	    cmocka_unit_test(test_empty_key_refused),
	    cmocka_unit_test(test_wrong_secret_refused),
	    cmocka_unit_test(test_tampered_claims_refused),
	    cmocka_unit_test(test_truncated_signature_refused),
	    cmocka_unit_test(test_missing_exp_refused),
	    cmocka_unit_test(test_exp_string_refused),
	    cmocka_unit_test(test_exp_float_refused),
	    cmocka_unit_test(test_expired_beyond_leeway_refused),
	    cmocka_unit_test(test_expired_within_leeway_accepted),
	    cmocka_unit_test(test_nbf_beyond_leeway_refused),
	    cmocka_unit_test(test_nbf_within_leeway_accepted),
	    cmocka_unit_test(test_ill_typed_optional_claims_refused),
	    cmocka_unit_test(test_extreme_times_no_overflow),
	    cmocka_unit_test(test_unknown_tenant_refused),
	    cmocka_unit_test(test_bad_tenant_claim_refused),
	    cmocka_unit_test(test_lookup_failure_passed_on),
	    cmocka_unit_test(test_wrong_aud_refused),
	    cmocka_unit_test(test_aud_string_and_array_accepted),
	    cmocka_unit_test(test_missing_aud_when_configured_refused),
	    cmocka_unit_test(test_oversized_token_refused),
	    cmocka_unit_test(test_garbage_base64_refused),
	    cmocka_unit_test(test_two_part_token_refused),
	    cmocka_unit_test(test_duplicate_claims_refused),
	    cmocka_unit_test(test_scope_parsing),
	    cmocka_unit_test(test_admin_cleared_for_non_operator),
	    cmocka_unit_test(test_admin_kept_for_operator),
	    cmocka_unit_test(test_scopes_format_round_trip),
	    cmocka_unit_test(test_alg_names),
	    cmocka_unit_test(test_random),
	    cmocka_unit_test(test_cache_follows_the_tenant),
	    cmocka_unit_test(test_cache_of_another_audience_unused),
	};

	int failed = cmocka_run_group_tests_name("auth", tests, group_setup, group_teardown);
	with_cache = true;
	failed += cmocka_run_group_tests_name("auth through a cache", tests, group_setup, group_teardown);
	caches_free();
	return failed;
}
