/* What a policy of backend remote names: the back server and tenant, and
 * the token file that speaks for it. Below both the policy, which refuses
 * two front tenants naming one back tenant, and the provider
 * (routes/remote.c), which refuses it at use. */
#include "routes/remote_back.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/auth.h"
#include "common/secretfile.h"
#include "routes/policy.h"

#define TOKEN_MAX 16384

/* The token file's content without surrounding white space, or NULL
 * with why. */
char *route_remote_token_read(const char *path, char *why, size_t whysz)
{
	size_t n;
	char *buf = sbx_secret_file_read(path, "remote_token_file", TOKEN_MAX, &n, why, whysz);
	if (!buf)
		return NULL;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
		n--;
	buf[n] = '\0';
	if (n == 0 || n == TOKEN_MAX || strpbrk(buf, " \t\r\n")) {
		snprintf(why, whysz, "remote_token_file %s must hold one token (at most %d bytes)", path,
			 TOKEN_MAX - 1);
		free(buf);
		return NULL;
	}
	return buf;
}

int route_remote_back_of(const struct route_policy *p, char *out, size_t outsz, char *why, size_t whysz)
{
	if (!p->remote_url)
		return -EINVAL;
	size_t n = strlen(p->remote_url);
	while (n > 0 && p->remote_url[n - 1] == '/')
		n--;
	char back[64] = "";
	if (p->remote_tenant && *p->remote_tenant) {
		snprintf(back, sizeof back, "%s", p->remote_tenant);
	} else {
		char *token =
		    p->remote_token_file ? route_remote_token_read(p->remote_token_file, why, whysz) : NULL;
		int rc = token ? auth_token_tenant_claim(token, back, sizeof back) : -EINVAL;
		if (token)
			memset(token, 0, strlen(token));
		free(token);
		if (rc < 0) {
			if (token)
				snprintf(why, whysz, "the token in remote_token_file names no tenant");
			return -EINVAL;
		}
	}
	snprintf(out, outsz, "%.*s %s", (int)n, p->remote_url, back);
	return 0;
}
