/* Algorithm names and scope strings: the vocabulary of auth.h. */
#include "auth/auth.h"

#include <errno.h>
#include <string.h>

static const struct {
	enum auth_alg alg;
	const char *name;
} algs[] = {
    {AUTH_ALG_HS256, "HS256"},
    {AUTH_ALG_RS256, "RS256"},
    {AUTH_ALG_ES256, "ES256"},
};

static const struct {
	unsigned bit;
	const char *name;
} scopes[] = {
    {AUTH_SCOPE_FS_READ, "fs:read"},	   {AUTH_SCOPE_FS_WRITE, "fs:write"}, {AUTH_SCOPE_EXEC, "exec"},
    {AUTH_SCOPE_AUDIT_READ, "audit:read"}, {AUTH_SCOPE_ADMIN, "admin"},	      {AUTH_SCOPE_APPROVE, "approve"},
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

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

static unsigned scope_bit(const char *word, size_t len)
{
	for (size_t i = 0; i < ARRAY_LEN(scopes); i++)
		if (strlen(scopes[i].name) == len && memcmp(scopes[i].name, word, len) == 0)
			return scopes[i].bit;
	return 0; /* unknown names are ignored: a newer server's token still works */
}

unsigned auth_scopes_parse(const char *s)
{
	unsigned bits = 0;

	if (!s)
		return 0;
	while (*s) {
		size_t n;

		while (*s == ' ')
			s++;
		n = strcspn(s, " ");
		if (n)
			bits |= scope_bit(s, n);
		s += n;
	}
	return bits;
}

void auth_scopes_format(unsigned bits, char *out, size_t outsz)
{
	size_t used = 0;

	if (!out || outsz == 0)
		return;
	out[0] = '\0';
	for (size_t i = 0; i < ARRAY_LEN(scopes); i++) {
		size_t n = strlen(scopes[i].name);
		size_t need = n + (used ? 1 : 0);

		if (!(bits & scopes[i].bit))
			continue;
		/* Whole names only: a truncated name would read as another scope. */
		if (used + need >= outsz)
			break;
		if (used)
			out[used++] = ' ';
		memcpy(out + used, scopes[i].name, n);
		used += n;
		out[used] = '\0';
	}
}
