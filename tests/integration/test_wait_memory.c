/* What a waiting request keeps is bounded (issue 26, item 7): 32
 * commands waiting for approval with 14 MB of inline stdin each raised
 * the server's RSS by 619 MiB for up to the approval timeout, outside any
 * tenant's budget. Inline stdin kept by requests waiting for approval or
 * in the admission queue is now bounded per tenant
 * (wait-stdin-bytes-per-tenant, 32 MiB by default) and in all
 * (wait-stdin-bytes); beyond, 429 (413 for one stdin over the bound). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

#define MIB (1024 * 1024)
#define STDIN_BYTES (4 * MIB)
#define BOUND (32 * MIB) /* the default wait-stdin-bytes-per-tenant */
#define NREQ 24

static struct it_server srv;
static char *tok_acme, *tok_globex, *stdin_text;

static int setup(void **state)
{
	(void)state;
	/* RSS is the measure: freed blocks must leave the process rather
	 * than sit in ASan's quarantine (256 MiB by default). */
	setenv("ASAN_OPTIONS", "detect_leaks=1:quarantine_size_mb=0", 1);
	/* Queued requests wait while the test counts the refused ones. */
	const char *const extra[] = {"--set", "exec-queue-wait-ms=300000", NULL};
	if (it_start(&srv, extra) < 0)
		return -1;
	if (pol_cli(&srv, "acme", "approval=always") != 0 ||
	    pol_cli(&srv, "globex", "max_execs=1 exec_queue=64") != 0)
		return -1;
	tok_acme = it_token(&srv, "acme", NULL);
	tok_globex = it_token(&srv, "globex", NULL);
	stdin_text = xmalloc(STDIN_BYTES + 1);
	memset(stdin_text, 'a', STDIN_BYTES);
	stdin_text[STDIN_BYTES] = '\0';
	return tok_acme && tok_globex ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	free(tok_acme);
	free(tok_globex);
	free(stdin_text);
	return it_finish(&srv);
}

static json_t *req(const char *cmd, const char *id, bool wait)
{
	return json_pack("{s:s, s:s, s:s, s:b}", "command", cmd, "id", id, "stdin", stdin_text, "wait", wait);
}

/* Commands waiting for approval: those beyond the bound are refused,
 * and the server's RSS grows by about what the bound allows. */
static void test_waiting_for_approval(void **state)
{
	(void)state;
	/* One first, so the baseline has the allocator's arenas warm. */
	assert_int_equal(ex_post(&srv, tok_acme, NULL, req("cat >/dev/null", "warm", false), NULL, NULL),
			 202);
	long base = it_rss_kib(&srv);
	assert_true(base > 0);
	int accepted = 1, refused = 0;
	for (int i = 0; i < NREQ; i++) {
		char id[32];
		snprintf(id, sizeof id, "wait-%d", i);
		json_t *body = NULL;
		long st = ex_post(&srv, tok_acme, NULL, req("cat >/dev/null", id, false), &body, NULL);
		if (st == 202)
			accepted++;
		else if (st == 429 && strstr(jstr(json_object_get(body, "error"), "message"), "inline stdin"))
			refused++;
		else
			fail_msg("POST /exec %s: %ld", id, st);
		json_decref(body);
	}
	long grown_mib = (it_rss_kib(&srv) - base) / 1024;
	fprintf(stderr, "accepted %d, refused %d, RSS grew by %ld MiB\n", accepted, refused, grown_mib);
	/* Unbounded, the server kept all 25 x 4 MiB (it grew by 102 MiB). */
	assert_true(grown_mib < 3 * BOUND / MIB / 2);
	assert_int_equal(accepted, BOUND / STDIN_BYTES);
	assert_int_equal(refused, NREQ + 1 - accepted);
	/* One stdin over the bound alone can never wait: 413. */
	char *big = xmalloc(BOUND + 2);
	memset(big, 'b', BOUND + 1);
	big[BOUND + 1] = '\0';
	json_t *body = NULL;
	assert_int_equal(ex_post(&srv, tok_acme, NULL,
				 json_pack("{s:s, s:s, s:b}", "command", "cat", "stdin", big, "wait", 0),
				 &body, NULL),
			 413);
	json_decref(body);
	free(big);
}

static long post_cancel(void)
{
	struct it_resp r;
	if (it_http(&srv, "POST", "/exec/hold/cancel", tok_globex, NULL, NULL, 0, &r) != 0)
		return -1;
	long st = r.status;
	it_resp_free(&r);
	return st;
}

/* Requests in the admission queue (globex: one exec slot, held by a
 * background sleep) keep their parsed body: the same bound. */
static void test_waiting_in_the_queue(void **state)
{
	(void)state;
	assert_int_equal(
	    ex_post(&srv, tok_globex, NULL,
		    json_pack("{s:s, s:s, s:b}", "command", "sleep 60", "id", "hold", "background", 1), NULL,
		    NULL),
	    202);
	struct bg_req b[NREQ];
	bool joined[NREQ] = {false};
	for (int i = 0; i < NREQ; i++) {
		char id[32];
		snprintf(id, sizeof id, "q-%d", i);
		bg_exec(&b[i], &srv, tok_globex, req("cat >/dev/null; echo ok", id, true), NULL);
	}
	/* Those beyond the bound are answered at once; the others wait. */
	int refused = 0;
	long until = it_now_ms() + 60000;
	while (refused < NREQ - BOUND / STDIN_BYTES && it_now_ms() < until) {
		for (int i = 0; i < NREQ; i++) {
			if (joined[i] || pthread_tryjoin_np(b[i].th, NULL) != 0)
				continue;
			joined[i] = true;
			assert_int_equal(b[i].resp.status, 429);
			refused++;
		}
		usleep(20000);
	}
	assert_int_equal(refused, NREQ - BOUND / STDIN_BYTES);
	assert_int_equal(post_cancel(), 202);
	int ran = 0;
	for (int i = 0; i < NREQ; i++) {
		if (!joined[i]) {
			pthread_join(b[i].th, NULL);
			ran += b[i].resp.status == 200;
		}
		free(b[i].body);
		it_resp_free(&b[i].resp);
	}
	assert_int_equal(ran, BOUND / STDIN_BYTES);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_waiting_for_approval),
	    cmocka_unit_test(test_waiting_in_the_queue),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
