#include "routes/audit_merge.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"

#define CURSOR_MAX 8192

/* One "NODE.ID" entry of len bytes at p into src. 0 or -EINVAL. */
static int cursor_entry(const char *p, size_t len, struct route_audit_src *src, size_t n)
{
	char e[SBX_NODE_ID_MAX + 32];
	if (len == 0 || len >= sizeof e)
		return -EINVAL;
	memcpy(e, p, len);
	e[len] = '\0';
	char *dot = strchr(e, '.');
	if (!dot)
		return -EINVAL;
	*dot = '\0';
	char *end = NULL;
	errno = 0;
	long long id = strtoll(dot + 1, &end, 10);
	if (!sbx_node_id_ok(e) || errno || end == dot + 1 || *end || id < 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (strcmp(src[i].node, e) == 0)
			src[i].after = id;
	return 0;
}

int route_audit_cursor_parse(const char *text, struct route_audit_src *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		src[i].after = 0;
	if (!text || !*text)
		return 0;
	if (strlen(text) > CURSOR_MAX)
		return -EINVAL;
	for (const char *p = text;;) {
		size_t len = strcspn(p, "~");
		if (cursor_entry(p, len, src, n) < 0)
			return -EINVAL;
		if (!p[len])
			return 0;
		p += len + 1;
	}
}

char *route_audit_cursor_format(const struct route_audit_src *src, size_t n)
{
	struct buf b;
	buf_init(&b, SIZE_MAX);
	for (size_t i = 0; i < n; i++)
		buf_appendf(&b, "%s%s.%lld", i ? "~" : "", src[i].node, (long long)src[i].after);
	return buf_steal(&b, NULL);
}

struct head {
	int64_t at, id;
	bool ok;
};

static struct head head_of(json_t *rec)
{
	struct head h = {0, 0, false};
	json_t *id = json_object_get(rec, "id");
	const char *at = json_string_value(json_object_get(rec, "at"));
	if (json_is_integer(id) && at && rfc3339_parse(at, &h.at) == 0) {
		h.id = (int64_t)json_integer_value(id);
		h.ok = true;
	}
	return h;
}

/* Whether head a of node na sorts before head b of node nb. */
static bool before(struct head a, const char *na, struct head b, const char *nb)
{
	if (a.at != b.at)
		return a.at < b.at;
	int c = strcmp(na, nb);
	return c != 0 ? c < 0 : a.id < b.id;
}

json_t *route_audit_merge(struct route_audit_src *src, size_t n, size_t limit, bool *more)
{
	json_t *page = json_array();
	size_t *pos = xcalloc(n + 1, sizeof *pos);
	while (json_array_size(page) < limit) {
		size_t best = n;
		struct head bh = {0, 0, false};
		for (size_t i = 0; i < n; i++) {
			/* Skip what cannot be ordered: never given, never stuck on. */
			while (src[i].records && pos[i] < json_array_size(src[i].records) &&
			       !head_of(json_array_get(src[i].records, pos[i])).ok)
				pos[i]++;
			if (!src[i].records || pos[i] >= json_array_size(src[i].records))
				continue;
			struct head h = head_of(json_array_get(src[i].records, pos[i]));
			if (best == n || before(h, src[i].node, bh, src[best].node)) {
				best = i;
				bh = h;
			}
		}
		if (best == n)
			break;
		json_array_append(page, json_array_get(src[best].records, pos[best]));
		src[best].after = bh.id;
		pos[best]++;
	}
	*more = false;
	for (size_t i = 0; i < n; i++)
		if (src[i].records && (src[i].full || pos[i] < json_array_size(src[i].records)))
			*more = true;
	free(pos);
	return page;
}
