#pragma once
/* What a policy of backend remote names (routes/remote_back.c). */
#include <stddef.h>

struct route_policy;

/* The back tenant p names, as "URL tenant" (the URL without trailing
 * slashes; the tenant remote_tenant, else the token's tenant claim):
 * two front tenants naming the same one would share its files, so the
 * policy (routes/policy.c) and the provider refuse the second. 0, or
 * -EINVAL with why (for the server's log: it names the token file). */
int route_remote_back_of(const struct route_policy *p, char *out, size_t outsz, char *why, size_t whysz);
/* The token file's content without surrounding white space (one token,
 * at most 16383 bytes), or NULL with why. The caller wipes and frees it. */
char *route_remote_token_read(const char *path, char *why, size_t whysz);
