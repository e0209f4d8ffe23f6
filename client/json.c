/* Reading the server's JSON into the library's structs: readers that
 * tolerate a member the server left out (wire.md: a field the backend
 * cannot know is left out, never invented). */
#include "client/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xmalloc.h"

char *sbxc__jstrdup(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_string(v) ? xstrndup(json_string_value(v), json_string_length(v)) : NULL;
}

void sbxc__jcopy(json_t *o, const char *key, char *dst, size_t dstsz)
{
	const char *v = json_string_value(json_object_get(o, key));
	snprintf(dst, dstsz, "%s", v ? v : "");
}

int64_t sbxc__jint(json_t *o, const char *key, int64_t dflt)
{
	json_t *v = json_object_get(o, key);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

bool sbxc__jbool(json_t *o, const char *key)
{
	return json_is_true(json_object_get(o, key));
}

/* egress_denied is there only for a command with network, an empty array
 * when nothing was refused; entries without a dest are not kept. */
static void egress_from(json_t *o, struct sbxc_result *r)
{
	json_t *a = json_object_get(o, "egress_denied");
	if (!json_is_array(a))
		return;
	r->networked = true;
	size_t n = json_array_size(a);
	if (n > SBXC_EGRESS_DENIED_MAX)
		n = SBXC_EGRESS_DENIED_MAX;
	if (n)
		r->egress_denied = xcalloc(n, sizeof *r->egress_denied);
	for (size_t i = 0; i < n; i++) {
		json_t *d = json_array_get(a, i);
		char *dest = sbxc__jstrdup(d, "dest"), *reason = sbxc__jstrdup(d, "reason");
		if (!dest) {
			free(reason);
			continue;
		}
		r->egress_denied[r->n_egress_denied++] =
		    (struct sbxc_egress_denied){dest, reason ? reason : xstrdup("")};
	}
	if (!r->n_egress_denied) {
		free(r->egress_denied);
		r->egress_denied = NULL;
	}
}

void sbxc__result_from(json_t *o, struct sbxc_result *r)
{
	*r = (struct sbxc_result){0};
	sbxc__jcopy(o, "id", r->id, sizeof r->id);
	r->exit_code = (int)sbxc__jint(o, "exit_code", -1);
	r->stdout_text = sbxc__jstrdup(o, "stdout");
	r->stderr_text = sbxc__jstrdup(o, "stderr");
	if (!r->stdout_text)
		r->stdout_text = xstrdup("");
	if (!r->stderr_text)
		r->stderr_text = xstrdup("");
	r->timed_out = sbxc__jbool(o, "timed_out");
	r->cancelled = sbxc__jbool(o, "cancelled");
	r->truncated = sbxc__jbool(o, "truncated");
	r->idle = sbxc__jbool(o, "idle");
	r->stdout_bytes = (uint64_t)sbxc__jint(o, "stdout_bytes", 0);
	r->stderr_bytes = (uint64_t)sbxc__jint(o, "stderr_bytes", 0);
	r->stdout_spill = sbxc__jstrdup(o, "stdout_spill");
	r->stderr_spill = sbxc__jstrdup(o, "stderr_spill");
	sbxc__jcopy(o, "started_at", r->started_at, sizeof r->started_at);
	sbxc__jcopy(o, "finished_at", r->finished_at, sizeof r->finished_at);
	r->duration_ms = sbxc__jint(o, "duration_ms", 0);
	r->oom_killed = sbxc__jbool(o, "oom_killed");
	r->pids_limited = sbxc__jbool(o, "pids_limited");
	r->uncontained = sbxc__jbool(o, "uncontained");
	egress_from(o, r);
}

void sbxc_result_clear(struct sbxc_result *r)
{
	if (!r)
		return;
	free(r->stdout_text);
	free(r->stderr_text);
	free(r->stdout_spill);
	free(r->stderr_spill);
	for (size_t i = 0; i < r->n_egress_denied; i++) {
		free(r->egress_denied[i].dest);
		free(r->egress_denied[i].reason);
	}
	free(r->egress_denied);
	*r = (struct sbxc_result){0};
}

int64_t sbxc__time(const char *s)
{
	struct tm tm = {0};
	int used = 0;
	if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
			 &tm.tm_min, &tm.tm_sec, &used) != 6)
		return -1;
	const char *p = s + used;
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++)
			;
	long off = 0;
	int oh = 0, om = 0;
	if ((*p == '+' || *p == '-') && sscanf(p + 1, "%2d:%2d", &oh, &om) == 2)
		off = (*p == '+' ? 1 : -1) * (oh * 3600L + om * 60L);
	else if (*p != 'Z' && *p != 'z')
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm) - off;
}

int sbxc__time_frac_ms(const char *s)
{
	const char *p = s ? strchr(s, '.') : NULL;
	int ms = 0, digits = 0;
	for (p = p ? p + 1 : NULL; p && *p >= '0' && *p <= '9' && digits < 3; p++, digits++)
		ms = ms * 10 + (*p - '0');
	for (; p && digits < 3; digits++)
		ms *= 10;
	return ms;
}

enum sbxc_type sbxc__type(const char *s)
{
	if (!s)
		return SBXC_UNKNOWN;
	if (strcmp(s, "file") == 0)
		return SBXC_FILE;
	if (strcmp(s, "directory") == 0)
		return SBXC_DIR;
	if (strcmp(s, "symlink") == 0)
		return SBXC_SYMLINK;
	return SBXC_OTHER;
}

bool sbxc__id_ok(const char *id)
{
	size_t n = id ? strlen(id) : 0;
	return n >= 1 && n <= 64 &&
	       strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

/* base64url without padding into a fresh NUL-terminated buffer, or NULL. */
static char *b64url_decode(const char *in, size_t n)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	char *out = xmalloc(n * 3 / 4 + 4);
	size_t o = 0;
	uint32_t acc = 0;
	int bits = 0;
	for (size_t i = 0; i < n; i++) {
		const char *p = memchr(abc, in[i], 64);
		if (!p || !in[i]) {
			free(out);
			return NULL;
		}
		acc = acc << 6 | (uint32_t)(p - abc);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (char)((acc >> bits) & 0xff);
		}
	}
	out[o] = '\0';
	return out;
}

char *sbxc__token_tenant(const char *token)
{
	const char *dot1 = strchr(token, '.');
	const char *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
	if (!dot2 || dot2 - dot1 - 1 > 8192)
		return NULL;
	char *payload = b64url_decode(dot1 + 1, (size_t)(dot2 - dot1 - 1));
	json_t *o = payload ? json_loads(payload, 0, NULL) : NULL;
	free(payload);
	const char *t = json_string_value(json_object_get(o, "tenant"));
	char *tenant = t && *t && !strpbrk(t, "\r\n") ? xstrdup(t) : NULL;
	json_decref(o);
	return tenant;
}
