/* The merged audit walk across nodes (routes/audit_merge.h): every record
 * once however the walk is paged, a fixed order, a node that was away
 * keeping its place. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/timeutil.h"
#include "routes/audit_merge.h"

#define NN 3
#define PER_NODE 40

/* Node k's records: ids 1..PER_NODE, "at" interleaving with the others'
 * (and ties across nodes), not always rising with the id. */
static json_t *node_records(int k)
{
	json_t *a = json_array();
	for (int id = 1; id <= PER_NODE; id++) {
		char at[40];
		int64_t ms = 1700000000000LL + (id * 7 + k * 3) % 50 + id * 10;
		rfc3339_ms(ms, at, sizeof at);
		json_array_append_new(a, json_pack("{s:i, s:s, s:s}", "id", id, "at", at, "node",
						   (const char *[]){"node-a", "node-b", "node-c"}[k]));
	}
	return a;
}

/* What node k answers for "after, limit": its records above after. */
static json_t *answer(json_t *all, int64_t after, size_t limit)
{
	json_t *page = json_array();
	size_t i;
	json_t *r;
	json_array_foreach(all, i, r) {
		if (json_integer_value(json_object_get(r, "id")) > after && json_array_size(page) < limit)
			json_array_append(page, r);
	}
	return page;
}

/* Walk everything with pages of limit; down: a node that does not answer
 * (-1: none). Returns the "node/id" sequence. */
static json_t *walk(json_t *recs[NN], size_t limit, int down, int *pages)
{
	json_t *seq = json_array();
	char *cursor = NULL;
	*pages = 0;
	for (;;) {
		struct route_audit_src src[NN];
		memset(src, 0, sizeof src);
		for (int k = 0; k < NN; k++)
			snprintf(src[k].node, sizeof src[k].node, "node-%c", 'a' + k);
		assert_int_equal(route_audit_cursor_parse(cursor, src, NN), 0);
		for (int k = 0; k < NN; k++) {
			if (k == down)
				continue;
			src[k].records = answer(recs[k], src[k].after, limit);
			src[k].full = json_array_size(src[k].records) == limit;
		}
		bool more = false;
		json_t *page = route_audit_merge(src, NN, limit, &more);
		assert_true(json_array_size(page) <= limit);
		size_t i;
		json_t *r;
		json_array_foreach(page, i, r)
			json_array_append_new(
			    seq, json_sprintf("%s/%lld", json_string_value(json_object_get(r, "node")),
					      (long long)json_integer_value(json_object_get(r, "id"))));
		json_decref(page);
		for (int k = 0; k < NN; k++)
			json_decref(src[k].records);
		free(cursor);
		cursor = more ? route_audit_cursor_format(src, NN) : NULL;
		(*pages)++;
		if (!cursor)
			return seq;
		assert_true(*pages < 1000);
	}
}

static bool has_dups(json_t *seq)
{
	for (size_t i = 0; i < json_array_size(seq); i++)
		for (size_t j = i + 1; j < json_array_size(seq); j++)
			if (json_equal(json_array_get(seq, i), json_array_get(seq, j)))
				return true;
	return false;
}

static void test_every_record_once_any_paging(void **state)
{
	(void)state;
	json_t *recs[NN];
	for (int k = 0; k < NN; k++)
		recs[k] = node_records(k);
	int pages;
	json_t *whole = walk(recs, 1000, -1, &pages);
	assert_int_equal(pages, 1);
	assert_int_equal(json_array_size(whole), NN * PER_NODE);
	assert_false(has_dups(whole));
	static const size_t limits[] = {1, 2, 7, 39, 40, 41, 119, 120};
	for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++) {
		json_t *seq = walk(recs, limits[l], -1, &pages);
		/* The same records in the same order whatever the page size. */
		assert_true(json_equal(seq, whole));
		json_decref(seq);
	}
	json_decref(whole);
	for (int k = 0; k < NN; k++)
		json_decref(recs[k]);
}

static void test_order_by_time_then_node(void **state)
{
	(void)state;
	struct route_audit_src src[2] = {{.node = "node-b"}, {.node = "node-a"}};
	src[0].records = json_pack("[{s:i, s:s}, {s:i, s:s}]", "id", 5, "at", "2026-01-01T00:00:00.002Z",
				   "id", 6, "at", "2026-01-01T00:00:00.003Z");
	src[1].records = json_pack("[{s:i, s:s}, {s:i, s:s}]", "id", 9, "at", "2026-01-01T00:00:00.002Z",
				   "id", 10, "at", "2026-01-01T00:00:00.001Z");
	bool more = true;
	json_t *page = route_audit_merge(src, 2, 10, &more);
	/* heads: b5@2, a9@2 -> a9 (tie: node); then b5@2 vs a10@1 -> a10; b5; b6 */
	int want[] = {9, 10, 5, 6};
	assert_int_equal(json_array_size(page), 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(json_integer_value(json_object_get(json_array_get(page, i), "id")), want[i]);
	assert_false(more);
	assert_int_equal(src[0].after, 6);
	assert_int_equal(src[1].after, 10);
	json_decref(page);
	json_decref(src[0].records);
	json_decref(src[1].records);
}

/* A node away for a walk keeps its position in the cursor: resuming from
 * a cursor of that walk once it is back gives its records, once. */
static void test_unavailable_node_keeps_place(void **state)
{
	(void)state;
	json_t *recs[NN];
	for (int k = 0; k < NN; k++)
		recs[k] = node_records(k);
	struct route_audit_src src[NN];
	memset(src, 0, sizeof src);
	for (int k = 0; k < NN; k++)
		snprintf(src[k].node, sizeof src[k].node, "node-%c", 'a' + k);
	src[0].records = answer(recs[0], 0, 10);
	src[0].full = true;
	src[2].records = answer(recs[2], 0, 10);
	src[2].full = true;
	bool more = false;
	json_t *page = route_audit_merge(src, NN, 10, &more);
	assert_true(more);
	char *cursor = route_audit_cursor_format(src, NN);
	assert_non_null(strstr(cursor, "node-b.0"));
	json_decref(page);
	for (int k = 0; k < NN; k++) {
		json_decref(src[k].records);
		src[k].records = NULL;
	}
	assert_int_equal(route_audit_cursor_parse(cursor, src, NN), 0);
	assert_int_equal(src[1].after, 0);
	assert_true(src[0].after + src[2].after == 10);
	free(cursor);
	for (int k = 0; k < NN; k++)
		json_decref(recs[k]);
}

static void test_cursor_text(void **state)
{
	(void)state;
	struct route_audit_src src[2] = {{.node = "node-a"}, {.node = "n2"}};
	assert_int_equal(route_audit_cursor_parse("node-a.12~n2.7~gone.99", src, 2), 0);
	assert_int_equal(src[0].after, 12);
	assert_int_equal(src[1].after, 7);
	char *t = route_audit_cursor_format(src, 2);
	assert_string_equal(t, "node-a.12~n2.7");
	free(t);
	assert_int_equal(route_audit_cursor_parse("", src, 2), 0);
	assert_int_equal(src[0].after, 0);
	static const char *const bad[] = {"12",	    "node-a",	 "node-a.",   "node-a.x",  "node-a.-1",
					  "Node.1", "node-a.1~", "~node-a.1", "node-a.1.2"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (route_audit_cursor_parse(bad[i], src, 2) != -EINVAL)
			fail_msg("cursor '%s' was taken", bad[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_record_once_any_paging),
	    cmocka_unit_test(test_order_by_time_then_node),
	    cmocka_unit_test(test_unavailable_node_keeps_place),
	    cmocka_unit_test(test_cursor_text),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
