/* The registry of backends (see registry.h). */
#include "sandbox/registry.h"

#include <stdio.h>
#include <string.h>

static const struct sbx_backend_kind kinds[] = {
    {SBX_BK_BWRAP, "bwrap", true, true, true},
    {SBX_BK_LOCAL, "local", true, false, false},
    {SBX_BK_REMOTE, "remote", false, true, false},
    {SBX_BK_SSH, "ssh", false, true, false},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

const struct sbx_backend_kind *sbx_backend_kind_find(const char *name, size_t len)
{
	for (size_t i = 0; name && i < N_KINDS; i++)
		if (strlen(kinds[i].name) == len && memcmp(kinds[i].name, name, len) == 0)
			return &kinds[i];
	return NULL;
}

const struct sbx_backend_kind *sbx_backend_kind_named(const char *name)
{
	return name ? sbx_backend_kind_find(name, strlen(name)) : NULL;
}

void sbx_backend_kind_list(char *buf, size_t size, bool quoted, bool on_host)
{
	size_t n = 0, total = 0, at = 0;
	for (size_t i = 0; i < N_KINDS; i++)
		total += !on_host || kinds[i].on_host;
	if (size)
		buf[0] = '\0';
	for (size_t i = 0; i < N_KINDS && at < size; i++) {
		if (on_host && !kinds[i].on_host)
			continue;
		const char *sep = n == 0 ? "" : n + 1 == total ? " or " : ", ";
		int w = snprintf(buf + at, size - at, quoted ? "%s\"%s\"" : "%s%s", sep, kinds[i].name);
		at += w > 0 ? (size_t)w : 0;
		n++;
	}
}
