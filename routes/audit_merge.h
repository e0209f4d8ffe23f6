#pragma once
/* Merging the audit pages of several nodes into one page, and the cursor
 * that walks them (README "Running many nodes"). Pure functions: no I/O,
 * thread-safe.
 *
 * Each node's records come in its own id order. A page takes the next
 * records of every node and interleaves them by (at, node, id) — a k-way
 * merge of the nodes' heads — so the order is fixed by the data alone.
 * The cursor holds, per node, the id of the last record of that node a
 * page has given: every record is given exactly once however the walk is
 * paged, and a node that was unavailable keeps its position (its records
 * come in a later walk from the same cursor). Text: "NODE.ID" entries
 * joined by '~' ("node-a.120~node-b.97"), characters that need no
 * escaping in a query. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/nodes.h"

struct route_audit_src {
	char node[SBX_NODE_ID_MAX + 1];
	int64_t after;	 /* in: the cursor's position; out: after this page */
	json_t *records; /* this node's next records (ids above after, ascending); NULL: unavailable */
	bool full;	 /* the node gave as many as were asked: it may have more */
};

/* Set each src[i].after from cursor text (NULL or "": all 0). A node of
 * the cursor that is not among src is ignored (removed from the list).
 * 0, or -EINVAL when the text is not such a cursor. */
int route_audit_cursor_parse(const char *text, struct route_audit_src *src, size_t n);
/* The cursor text of src (caller frees). */
char *route_audit_cursor_format(const struct route_audit_src *src, size_t n);
/* The first limit records of the merged order (new array; the records
 * are shared references), advancing each src[i].after past what it
 * gave. *more: a further page may hold records (a node has records left
 * or gave a full page). Records without an integer "id" or a parseable
 * "at" are skipped (the caller validates peers' answers first). */
json_t *route_audit_merge(struct route_audit_src *src, size_t n, size_t limit, bool *more);
