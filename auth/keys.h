#pragma once
/* The floor of auth/: a tenant's keys and what every part of auth/ shares
 * about them. The algorithms and their names, the key record as the store
 * keeps it, the limits of a tenant name and of a sub claim, the kernel's
 * random bytes, and the check of a public key a tenant registers. The
 * verifier (auth.c) and its memo of tokens (cache.c) both stand on this;
 * auth.h includes it, so its users see these names as before. */
#include <stdbool.h>
#include <stddef.h>

enum auth_alg { AUTH_ALG_HS256 = 1, AUTH_ALG_RS256, AUTH_ALG_ES256 };
const char *auth_alg_name(enum auth_alg a);	       /* "HS256", ... */
int auth_alg_parse(const char *s, enum auth_alg *out); /* 0 or -EINVAL */

/* A tenant's registered keys, as the store keeps them: the main key,
 * and optionally the approver key (approver_key NULL: none), the only
 * key whose tokens approve (header kid "approver"). */
struct auth_key {
	enum auth_alg alg;
	const unsigned char *key; /* HS256: the secret bytes; RS256/ES256: PEM public key */
	size_t key_len;
	bool operator_tenant; /* may its tokens carry admin? */
	enum auth_alg approver_alg;
	const unsigned char *approver_key;
	size_t approver_key_len;
};

#define AUTH_TENANT_MAX 64
#define AUTH_SUB_MAX 129 /* a sub claim: 1..128 bytes, no control characters */

/* Fill buf with n random bytes from the kernel (getrandom). 0 or -errno. */
int auth_random(void *buf, size_t n);

/* Check a PEM public key for a tenant registered with alg (RS256: RSA of
 * at least 2048 bits; ES256: EC P-256). 0, or -EINVAL with a reason. */
int auth_check_public_key(const unsigned char *pem, size_t len, enum auth_alg alg, const char **why);
