/* libFuzzer harness: auth_verify on arbitrary bytes, against a fixed HS256
 * tenant ("acme") and a fixed RS256 tenant ("rsa1"), with and without a
 * configured audience. Not built by CMake; from the repository root:
 *
 *   clang -std=c17 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
 *     -fno-sanitize-recover=undefined -I. tests/fuzz/fuzz_token.c auth/auth.c \
 *     auth/scopes.c common/xmalloc.c -ljwt -ljansson -lcrypto -o fuzz_token
 *   ./fuzz_token -max_len=9000 corpus/
 *
 * A seed worth giving it: `sandboxd token` output for acme, or
 * auth_mint_hs256() with the secret below. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth/auth.h"

#define NOW ((int64_t)1700000000)

static const unsigned char hs_secret[] = "fuzz-secret-0123456789abcdef0123";

/* Public half of a throwaway 2048-bit key made for this harness. */
static const char rsa_pub[] = "-----BEGIN PUBLIC KEY-----\n"
			      "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAmQVCXsneobKr+AtGR0N8\n"
			      "BQgxbTDNYBCFm8g6fD2bTDwILS8tBwbq/ueYxnTFYKQCm2YA2vmBtW1PWwTMBSXJ\n"
			      "5m3qZbf9Cv1ljA3dzWZLNFAio5aUkoKsZC7qRRmQBfgihYKpNMAiX3D+joMejYyV\n"
			      "Aj21K30r65+ZxhEtzYrGtKiqdaTEwVwkHr2xNBV4KF0PtiwW+9TgWF0Bg8jnrkEb\n"
			      "dC50EfLWRyIIw3AgM833+nUOlKNsHdkIt1qN11kAXGkOpsiduHjxqLMqtcr+dEE6\n"
			      "zY25gPC+PxjeiLgynOoFjJrgbt9eSt9l6c2Ln8/sXGVaCkXw69ki+xt7MHfhvii0\n"
			      "owIDAQAB\n"
			      "-----END PUBLIC KEY-----\n";

static int lookup(void *ctx, const char *tenant, struct auth_key *key)
{
	(void)ctx;
	if (strcmp(tenant, "acme") == 0) {
		/* An approver key too, so the fuzzer reaches the kid "approver" path. */
		*key = (struct auth_key){.alg = AUTH_ALG_HS256,
					 .key = hs_secret,
					 .key_len = sizeof hs_secret - 1,
					 .approver_alg = AUTH_ALG_RS256,
					 .approver_key = (const unsigned char *)rsa_pub,
					 .approver_key_len = sizeof rsa_pub - 1};
		return 0;
	}
	if (strcmp(tenant, "rsa1") == 0) {
		*key = (struct auth_key){.alg = AUTH_ALG_RS256,
					 .key = (const unsigned char *)rsa_pub,
					 .key_len = sizeof rsa_pub - 1};
		return 0;
	}
	return -ENOENT;
}

static void run(const uint8_t *data, size_t size, const struct auth_config *cfg)
{
	struct auth_claims c;
	const char *why = NULL;
	int rc = auth_verify((const char *)data, size, cfg, NOW, lookup, NULL, &c, &why);

	if (rc != 0 && rc != -EACCES)
		abort();
	if (rc == 0) {
		/* Neither tenant is an operator; exp within leeway; known tenant. */
		if (why || (c.scopes & AUTH_SCOPE_ADMIN) || c.exp < NOW - 30)
			abort();
		if (strcmp(c.tenant, "acme") != 0 && strcmp(c.tenant, "rsa1") != 0)
			abort();
	} else if (!why) {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct auth_config plain = {.leeway_s = 30};
	static const struct auth_config aud = {
	    .audience = "sandboxd", .leeway_s = 30, .max_token_bytes = 4096};

	run(data, size, &plain);
	run(data, size, &aud);
	return 0;
}
