/* A tenant's keys (keys.h): the algorithms' names, the kernel's random
 * bytes secrets are made of, and the checks of keys a tenant registers
 * (`sandboxd tenant add`). */
#include <errno.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <string.h>
#include <sys/random.h>

#include "auth/keys.h"

static const struct {
	enum auth_alg alg;
	const char *name;
} algs[] = {
    {AUTH_ALG_HS256, "HS256"},
    {AUTH_ALG_RS256, "RS256"},
    {AUTH_ALG_ES256, "ES256"},
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

int auth_check_public_key(const unsigned char *pem, size_t len, enum auth_alg alg, const char **why)
{
	int rc = -EINVAL;
	BIO *bio = BIO_new_mem_buf(pem, (int)len);
	EVP_PKEY *pk = bio ? PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL) : NULL;
	*why = "not a PEM public key (-----BEGIN PUBLIC KEY-----)";
	if (!pk)
		goto out;
	if (alg == AUTH_ALG_RS256) {
		*why = "RS256 needs an RSA public key of at least 2048 bits";
		if (EVP_PKEY_is_a(pk, "RSA") && EVP_PKEY_get_bits(pk) >= 2048)
			rc = 0;
	} else if (alg == AUTH_ALG_ES256) {
		char group[64] = "";
		size_t glen = 0;
		*why = "ES256 needs an EC public key on the P-256 curve";
		if (EVP_PKEY_is_a(pk, "EC") &&
		    EVP_PKEY_get_utf8_string_param(pk, "group", group, sizeof group, &glen) == 1 &&
		    (strcmp(group, "prime256v1") == 0 || strcmp(group, "P-256") == 0))
			rc = 0;
	} else {
		*why = "public keys are for RS256 and ES256";
	}
out:
	EVP_PKEY_free(pk);
	BIO_free(bio);
	return rc;
}

const char *auth_alg_name(enum auth_alg a)
{
	for (size_t i = 0; i < ARRAY_LEN(algs); i++)
		if (algs[i].alg == a)
			return algs[i].name;
	return NULL;
}

int auth_alg_parse(const char *s, enum auth_alg *out)
{
	if (!s)
		return -EINVAL;
	/* Exact match only: "hs256" or "HS256 " is not an algorithm of ours. */
	for (size_t i = 0; i < ARRAY_LEN(algs); i++) {
		if (strcmp(algs[i].name, s) == 0) {
			*out = algs[i].alg;
			return 0;
		}
	}
	return -EINVAL;
}

int auth_random(void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n > 0) {
		ssize_t r = getrandom(p, n, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}
