/* The fair queue of the file-work pool: order between tenants, the
 * per-tenant cap on running jobs, the bound on waiting ones, cancels.
 * No threads and no clocks: the order is the queue's alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "http/fairq.h"

struct job {
	struct http_fairq_item it; /* first: the item's address is the job's */
	const char *name;
};

static struct job *pop(struct http_fairq *q)
{
	return (struct job *)http_fairq_pop(q);
}

static void push(struct http_fairq *q, const char *key, struct job *j)
{
	memset(&j->it, 0, sizeof j->it);
	assert_int_equal(http_fairq_push(q, key, &j->it), 0);
}

/* One tenant with many jobs queued first never delays the next tenant's
 * job by more than one turn: tenants alternate, oldest job first each. */
static void test_round_robin(void **state)
{
	(void)state;
	struct http_fairq *q = NULL;
	http_fairq_new(&q, 100, 100);
	struct job a[5] = {{.name = "a0"}, {.name = "a1"}, {.name = "a2"}, {.name = "a3"}, {.name = "a4"}};
	struct job b[2] = {{.name = "b0"}, {.name = "b1"}}, c = {.name = "c0"};
	for (int i = 0; i < 5; i++)
		push(q, "A", &a[i]);
	push(q, "B", &b[0]);
	push(q, "B", &b[1]);
	push(q, "C", &c);
	static const char *const want[] = {"a0", "b0", "c0", "a1", "b1", "a2", "a3", "a4"};
	for (size_t i = 0; i < 8; i++) {
		struct job *j = pop(q);
		assert_non_null(j);
		assert_string_equal(j->name, want[i]);
	}
	assert_null(pop(q));
	http_fairq_free(&q);
	assert_null(q);
}

struct seen {
	size_t keys, waiting, running;
};

static void count(void *ctx, const char *key, size_t waiting, size_t running)
{
	struct seen *s = ctx;
	(void)key;
	s->keys++;
	s->waiting += waiting;
	s->running += running;
}

/* A tenant runs at most running_max jobs at once; its other jobs wait
 * while another tenant's run; a finished job lets the next one go. */
static void test_cap(void **state)
{
	(void)state;
	struct http_fairq *q = NULL;
	http_fairq_new(&q, 2, 100);
	struct job a[4] = {{.name = "a0"}, {.name = "a1"}, {.name = "a2"}, {.name = "a3"}};
	struct job b = {.name = "b0"};
	for (int i = 0; i < 4; i++)
		push(q, "A", &a[i]);
	assert_string_equal(pop(q)->name, "a0");
	assert_string_equal(pop(q)->name, "a1");
	assert_null(pop(q)); /* A runs its cap; nothing else waits */
	push(q, "B", &b);
	assert_string_equal(pop(q)->name, "b0"); /* B passes A's waiting jobs */
	assert_null(pop(q));
	http_fairq_done(q, a[0].it.key);
	assert_string_equal(pop(q)->name, "a2");
	assert_null(pop(q));
	http_fairq_done(q, a[1].it.key);
	http_fairq_done(q, a[2].it.key);
	assert_string_equal(pop(q)->name, "a3");
	http_fairq_done(q, a[3].it.key);
	http_fairq_done(q, b.it.key);
	struct seen s = {0};
	http_fairq_each(q, count, &s);
	assert_int_equal(s.running, 0);
	assert_int_equal(s.waiting, 0);
	http_fairq_free(&q);
}

/* A tenant at its cap keeps its place: when it frees up, it comes first. */
static void test_capped_keeps_turn(void **state)
{
	(void)state;
	struct http_fairq *q = NULL;
	http_fairq_new(&q, 1, 100);
	struct job a[2] = {{.name = "a0"}, {.name = "a1"}},
		   b[3] = {{.name = "b0"}, {.name = "b1"}, {.name = "b2"}};
	push(q, "A", &a[0]);
	push(q, "A", &a[1]);
	push(q, "B", &b[0]);
	push(q, "B", &b[1]);
	push(q, "B", &b[2]);
	assert_string_equal(pop(q)->name, "a0");
	assert_string_equal(pop(q)->name, "b0");
	assert_null(pop(q));
	http_fairq_done(q, b[0].it.key);
	assert_string_equal(pop(q)->name, "b1"); /* A still runs a0 */
	http_fairq_done(q, a[0].it.key);
	http_fairq_done(q, b[1].it.key);
	assert_string_equal(pop(q)->name, "a1");
	assert_string_equal(pop(q)->name, "b2");
	http_fairq_free(&q);
}

/* The waiting bound is per tenant: a full tenant does not refuse another. */
static void test_bound(void **state)
{
	(void)state;
	struct http_fairq *q = NULL;
	http_fairq_new(&q, 1, 2);
	struct job a[3], b;
	push(q, "A", &a[0]);
	push(q, "A", &a[1]);
	memset(&a[2], 0, sizeof a[2]);
	assert_int_equal(http_fairq_push(q, "A", &a[2].it), -EAGAIN);
	assert_false(a[2].it.queued);
	push(q, "B", &b);
	assert_ptr_equal(pop(q), &a[0]); /* running does not count as waiting */
	push(q, "A", &a[2]);
	http_fairq_free(&q);
}

/* A cancelled job never runs, and the others keep their order. */
static void test_cancel(void **state)
{
	(void)state;
	struct http_fairq *q = NULL;
	http_fairq_new(&q, 10, 10);
	struct job a[3] = {{.name = "a0"}, {.name = "a1"}, {.name = "a2"}}, b = {.name = "b0"};
	for (int i = 0; i < 3; i++)
		push(q, "A", &a[i]);
	push(q, "B", &b);
	assert_true(http_fairq_cancel(q, &a[1].it));
	assert_false(http_fairq_cancel(q, &a[1].it));
	assert_true(http_fairq_cancel(q, &b.it)); /* B leaves the round */
	assert_string_equal(pop(q)->name, "a0");
	assert_false(http_fairq_cancel(q, &a[0].it)); /* running, not waiting */
	assert_string_equal(pop(q)->name, "a2");
	assert_null(pop(q));
	/* take drains whatever the caps. */
	struct http_fairq *q2 = NULL;
	http_fairq_new(&q2, 1, 10);
	push(q2, "A", &a[0]);
	push(q2, "A", &a[1]);
	assert_ptr_equal(pop(q2), &a[0]);
	assert_ptr_equal(http_fairq_take(q2), &a[1]);
	assert_null(http_fairq_take(q2));
	http_fairq_free(&q2);
	http_fairq_free(&q);
}

static void test_each(void **state)
{
	(void)state;
	struct http_fairq *q = NULL;
	http_fairq_new(&q, 1, 10);
	struct job j[3];
	push(q, "A", &j[0]);
	push(q, "A", &j[1]);
	push(q, "B", &j[2]);
	pop(q);
	struct seen s = {0};
	http_fairq_each(q, count, &s);
	assert_int_equal(s.keys, 2);
	assert_int_equal(s.waiting, 2);
	assert_int_equal(s.running, 1);
	http_fairq_free(&q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_robin),
	    cmocka_unit_test(test_cap),
	    cmocka_unit_test(test_capped_keeps_turn),
	    cmocka_unit_test(test_bound),
	    cmocka_unit_test(test_cancel),
	    cmocka_unit_test(test_each),
	};
	return cmocka_run_group_tests_name("fairq", tests, NULL, NULL);
}
