/* The fair queue of the file-work pool: order between tenants, the
 * per-tenant cap on running jobs, the bound on waiting ones, cancels,
 * and fairness by CPU time. No threads and no clocks: the CPU times are
 * the test's, the order is the queue's alone. */
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

/* j ran and used cpu_ns of CPU. */
static void done(struct http_fairq *q, struct job *j, int64_t cpu_ns)
{
	http_fairq_done(q, j->it.key, j->it.charged_ns, cpu_ns, cpu_ns);
}

#define MS 1000000LL

/* A tenant whose jobs cost 100 times more CPU than another's waits while
 * the other's go first: once A's jobs have shown what they cost, B's
 * whole backlog (costing less together than one of A's jobs) runs before
 * A's next. Round-robin would have alternated A and B. */
static void test_cpu_fair(void **state)
{
	(void)state;
	struct http_fairq *q = NULL;
	http_fairq_new(&q, 1, 100);
	struct job a[4] = {{.name = "a0"}, {.name = "a1"}, {.name = "a2"}, {.name = "a3"}}, b[8];
	for (int i = 0; i < 4; i++)
		push(q, "A", &a[i]);
	assert_ptr_equal(pop(q), &a[0]);
	done(q, &a[0], 10 * MS); /* A's readdir page */
	for (int i = 0; i < 8; i++) {
		b[i].name = "b";
		push(q, "B", &b[i]);
	}
	/* B enters level with A and goes first among equals. */
	assert_ptr_equal(pop(q), &b[0]);
	done(q, &b[0], MS / 10); /* a stat: 0.1 ms */
	assert_ptr_equal(pop(q), &a[1]);
	done(q, &a[1], 10 * MS);
	for (int i = 1; i < 8; i++) {
		struct job *j = pop(q);
		assert_ptr_equal(j, &b[i]);
		done(q, j, MS / 10);
	}
	assert_ptr_equal(pop(q), &a[2]);
	assert_null(pop(q)); /* A runs its cap */
	done(q, &a[2], 10 * MS);
	assert_ptr_equal(pop(q), &a[3]);
	http_fairq_free(&q);
}

/* With a bound of one CPU, a tenant whose jobs keep a CPU busy runs one
 * at a time; one whose jobs mostly wait (a tenth of their time on a CPU)
 * runs up to its count cap. */
static void test_cpu_cores(void **state)
{
	(void)state;
	struct http_fairq *q = NULL;
	http_fairq_new(&q, 3, 100);
	http_fairq_set_cpu_cores(q, 1);
	struct job a[6], b[6];
	for (int i = 0; i < 6; i++) {
		a[i].name = "a";
		push(q, "A", &a[i]);
		b[i].name = "b";
		push(q, "B", &b[i]);
	}
	/* Nothing known yet: the count cap. */
	for (int i = 0; i < 6; i++)
		assert_non_null(pop(q));
	assert_null(pop(q));
	for (int i = 0; i < 3; i++) {
		http_fairq_done(q, a[i].it.key, a[i].it.charged_ns, 10 * MS, 10 * MS); /* busy */
		http_fairq_done(q, b[i].it.key, b[i].it.charged_ns, MS, 10 * MS);      /* waits */
	}
	int na = 0, nb = 0;
	struct job *j;
	while ((j = pop(q)))
		*(j->name[0] == 'a' ? &na : &nb) += 1;
	assert_int_equal(na, 1);
	assert_int_equal(nb, 3);
	http_fairq_free(&q);
}

/* Between two tenants with backlogs, jobs alternate so that their CPU
 * time stays level: B's jobs cost a third of A's, so B runs three for
 * each of A's. */
static void test_cpu_share(void **state)
{
	(void)state;
	struct http_fairq *q = NULL;
	http_fairq_new(&q, 1, 100);
	struct job a[20], b[60];
	for (int i = 0; i < 20; i++) {
		a[i].name = "a";
		push(q, "A", &a[i]);
	}
	for (int i = 0; i < 60; i++) {
		b[i].name = "b";
		push(q, "B", &b[i]);
	}
	int64_t cpu_a = 0, cpu_b = 0;
	for (int n = 0; n < 40; n++) {
		struct job *j = pop(q);
		assert_non_null(j);
		bool is_a = j->name[0] == 'a';
		done(q, j, is_a ? 3 * MS : MS);
		*(is_a ? &cpu_a : &cpu_b) += is_a ? 3 * MS : MS;
		/* Never more than one job's cost apart (after the first two). */
		if (n >= 2)
			assert_true(cpu_a - cpu_b <= 3 * MS && cpu_b - cpu_a <= 3 * MS);
	}
	assert_true(cpu_b >= cpu_a - 3 * MS);
	http_fairq_free(&q);
}

/* A tenant that had nothing waiting and nothing running does not bank
 * credit: after A used 1 s alone, B arriving does not get 1 s of turns
 * ahead of A; it enters level with A. */
static void test_no_banked_credit(void **state)
{
	(void)state;
	struct http_fairq *q = NULL;
	http_fairq_new(&q, 1, 100);
	struct job a[3] = {{.name = "a0"}, {.name = "a1"}, {.name = "a2"}}, b[3];
	push(q, "A", &a[0]);
	assert_ptr_equal(pop(q), &a[0]);
	done(q, &a[0], 1000 * MS);
	push(q, "A", &a[1]);
	push(q, "A", &a[2]);
	for (int i = 0; i < 3; i++) {
		b[i].name = "b";
		push(q, "B", &b[i]);
	}
	/* Level: one job each, in either order, then each costs as much. */
	struct job *j1 = pop(q);
	done(q, j1, 1000 * MS);
	struct job *j2 = pop(q);
	assert_true(j1->name[0] != j2->name[0]);
	done(q, j2, 1000 * MS);
	struct job *j3 = pop(q);
	assert_true(j3->name[0] == j1->name[0]);
	http_fairq_free(&q);
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

static void count(void *ctx, const struct http_fairq_stat *st)
{
	struct seen *s = ctx;
	s->keys++;
	s->waiting += st->waiting;
	s->running += st->running;
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
	http_fairq_done(q, a[0].it.key, a[0].it.charged_ns, 0, 0);
	assert_string_equal(pop(q)->name, "a2");
	assert_null(pop(q));
	http_fairq_done(q, a[1].it.key, a[1].it.charged_ns, 0, 0);
	http_fairq_done(q, a[2].it.key, a[2].it.charged_ns, 0, 0);
	assert_string_equal(pop(q)->name, "a3");
	http_fairq_done(q, a[3].it.key, a[3].it.charged_ns, 0, 0);
	http_fairq_done(q, b.it.key, b.it.charged_ns, 0, 0);
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
	http_fairq_done(q, b[0].it.key, b[0].it.charged_ns, 0, 0);
	assert_string_equal(pop(q)->name, "b1"); /* A still runs a0 */
	http_fairq_done(q, a[0].it.key, a[0].it.charged_ns, 0, 0);
	http_fairq_done(q, b[1].it.key, b[1].it.charged_ns, 0, 0);
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
	    cmocka_unit_test(test_cpu_fair),
	    cmocka_unit_test(test_cpu_share),
	    cmocka_unit_test(test_cpu_cores),
	    cmocka_unit_test(test_no_banked_credit),
	};
	return cmocka_run_group_tests_name("fairq", tests, NULL, NULL);
}
