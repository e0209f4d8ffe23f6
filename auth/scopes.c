/* Scope strings: the vocabulary of auth.h's scope bits. */
#include "auth/auth.h"

#include <errno.h>
#include <string.h>

static const struct {
	unsigned bit;
	const char *name;
} scopes[] = {
    {AUTH_SCOPE_FS_READ, "fs:read"},	   {AUTH_SCOPE_FS_WRITE, "fs:write"}, {AUTH_SCOPE_EXEC, "exec"},
    {AUTH_SCOPE_AUDIT_READ, "audit:read"}, {AUTH_SCOPE_ADMIN, "admin"},	      {AUTH_SCOPE_APPROVE, "approve"},
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

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
