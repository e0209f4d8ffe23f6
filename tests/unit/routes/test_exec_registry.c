/* The exec registry (routes/exec_registry.h and the files under it:
 * exec_registry.c, exec_jobs.c, exec_complete.c, exec_answer.c,
 * exec_approval.c) through its public functions, on fake requests
 * (tests/unit/http_fake.h) with a real store in a temp directory and no
 * socket, runner or server. The tenants' provider is a fake
 * (routes/provider.h's seam): its submit keeps the registry's event
 * callback, and the test plays the runner by calling it (start, output,
 * exit), on its own thread, so what happens at an exit is in the test's
 * hands: the waiting request resumed to record it, the others woken, the
 * store row, the tenant's slot. Exits that no request waits for go to the
 * registry's completion thread; route_execs_flush waits for them
 * (no timing). The approval timeout runs on the approvals thread: waited
 * for as a condition with a deadline.
 *
 * Not reached here: hang-ups (a fake request has no client fd, so no
 * disconnect watch), streamed answers (text/event-stream subscribers of
 * the hub), files_changed (a workspace snapshot), kills and cancels of a
 * running job (the fake's handles name no runner or provider job; only
 * what the registry returns is checked). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app_fake.h"
#include "common/config.h"
#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "http/hub.h"
#include "http/metrics.h"
#include "http_fake.h"
#include "routes/admit.h"
#include "routes/app.h"
#include "routes/exec_registry.h"
#include "routes/provider.h"
#include "routes/routes.h"
#include "routes/tenant_cache.h"
#include "sandbox/workspace.h"
#include "store/store.h"
#include "unit.h"

#define PROVIDER_JOB (1ULL << 63) /* a provider job's handle (routes/provider.h) */
#define MAX_JOBS 8
#define MAX_REQS 16

/* What the fake provider was asked to run. */
struct fake_job {
	sbx_event_cb cb;
	void *ctx;
	uint64_t handle;
	char command[64];
};

static struct fake_job jobs[MAX_JOBS];
static int njobs;
static int submit_rc; /* what the next submit answers */

static int fake_submit(struct app *a, struct route_provider *p, const char *session, size_t session_len,
		       const struct sbx_exec_req *req, sbx_event_cb cb, void *ctx, uint64_t *job)
{
	(void)a;
	(void)p;
	(void)session;
	(void)session_len;
	if (submit_rc < 0)
		return submit_rc;
	assert_true(njobs < MAX_JOBS);
	struct fake_job *f = &jobs[njobs++];
	f->cb = cb;
	f->ctx = ctx;
	f->handle = PROVIDER_JOB | (uint64_t)njobs;
	snprintf(f->command, sizeof f->command, "%s", req->spawn.command);
	*job = f->handle;
	return 0;
}

static void fake_free(struct route_provider *p)
{
	(void)p; /* static: nothing to free */
}

static const struct route_provider_ops fake_ops = {
    .name = "fake", .where = "in the test", .submit = fake_submit, .free = fake_free};
static struct route_provider fake_provider = {.ops = &fake_ops};

static struct sbx_config cfg;
static struct app app;
static char dir[64];
static struct tenant *acme, *beta;
static struct http_req *reqs[MAX_REQS];
static int nreqs;

static void life_ended(struct app *a, const char *name, uid_t uid, int64_t incarnation, bool removed,
		       bool forget_storage)
{
	(void)a;
	(void)name;
	(void)uid;
	(void)incarnation;
	(void)removed;
	(void)forget_storage;
	fail_msg("no tenant's life ends in these tests");
}

/* Tenant name in the store and in the cache, served by the fake
 * provider, its workspace under dir. */
static struct tenant *add_tenant(const char *name)
{
	struct store_tenant st = {.key = (unsigned char *)"k", .key_len = 1};
	snprintf(st.name, sizeof st.name, "%s", name);
	snprintf(st.alg, sizeof st.alg, "HS256");
	assert_int_equal(store_tenant_add(app.store, &st, -1), 0);

	struct tenant *t = xcalloc(1, sizeof *t);
	snprintf(t->name, sizeof t->name, "%s", name);
	t->incarnation = st.incarnation;
	t->provider = &fake_provider;
	t->loaded_at_ms = INT64_MAX / 4; /* fresh for the whole test */
	char ws[128];
	snprintf(ws, sizeof ws, "%s/ws-%s", dir, name);
	struct sbx_owner owner = {.uid = getuid(), .gid = getgid(), .chown = false};
	assert_int_equal(sbx_workspace_open(&t->ws, ws, &owner), 0);
	t->load = xcalloc(1, sizeof *t->load);
	snprintf(t->load->name, sizeof t->load->name, "%s", name);
	app.tenants = xrealloc(app.tenants, (app.ntenants + 1) * sizeof *app.tenants);
	app.tenants[app.ntenants++] = t;
	app.loads = xrealloc(app.loads, (app.nloads + 1) * sizeof *app.loads);
	app.loads[app.nloads++] = t->load;
	return t;
}

static int setup(void **state)
{
	(void)state;
	app_fake_init(&app, &cfg);
	app.life_ended = life_ended;
	pthread_mutex_init(&app.tenants_lock, NULL);
	if (unit_tmpdir(dir, sizeof dir, "xreg"))
		return -1;
	char path[128], err[256];
	snprintf(path, sizeof path, "%s/store.db", dir);
	if (store_open(&app.store, path, true, err, sizeof err) != 0)
		return -1;
	http_metrics_new(&app.metrics, route_table, route_count);
	http_hub_new(&app.hub, app.metrics, NULL, 16, NULL, NULL);
	acme = add_tenant("acme");
	beta = add_tenant("beta");
	/* Our own writes are not another connection's: the cache stays. */
	store_changed_elsewhere(app.store, &app.store_seen);
	struct sbx_exec_req base = {0};
	route_execs_new(&app.execs, &app, &base);
	memset(jobs, 0, sizeof jobs);
	njobs = 0;
	submit_rc = 0;
	nreqs = 0;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	/* A waiter resumed to record an exit and never run again (a test that
	 * failed) hands it to the completion thread as it goes. */
	route_execs_cancel_all_pending(app.execs);
	for (int i = 0; i < nreqs; i++)
		http_req_fake_free(reqs[i]);
	route_execs_flush(app.execs);
	route_execs_free(&app.execs);
	assert_null(app.execs);
	route_tenant_cache_free(&app);
	http_hub_free(&app.hub);
	http_metrics_free(&app.metrics);
	store_close(&app.store);
	pthread_mutex_destroy(&app.tenants_lock);
	cfg_free(&cfg);
	return unit_rm_rf(dir);
}

/* How a test starts an exec. */
struct start {
	struct tenant *t; /* NULL: acme */
	const char *id;
	const char *hash;    /* NULL: "h1" */
	const char *session; /* NULL: "s1" */
	const char *requested_by;
	struct route_exec_opts o; /* max_execs 0 means 4 */
};

static struct http_req *new_req(struct tenant *t, const char *method, const char *url)
{
	assert_true(nreqs < MAX_REQS);
	struct http_req *r = http_req_fake_new(&app, method, url);
	r->tenant = t;
	reqs[nreqs++] = r;
	return r;
}

/* POST /exec as routes/exec.c hands it over; *rc gets its return. */
static struct http_req *start(struct start s, int *rc)
{
	struct tenant *t = s.t ? s.t : acme;
	struct http_req *r = new_req(t, "POST", "/exec");
	const char *session = s.session ? s.session : "s1";
	struct store_exec row = {.session = (char *)session,
				 .session_len = strlen(session),
				 .command = (char *)"echo hi",
				 .cwd = (char *)"/",
				 .request_hash = (char *)(s.hash ? s.hash : "h1"),
				 .requested_by = (char *)s.requested_by};
	snprintf(row.tenant, sizeof row.tenant, "%s", t->name);
	snprintf(row.id, sizeof row.id, "%s", s.id);
	struct sbx_exec_req run = *route_execs_base(app.execs);
	run.spawn.command = "echo hi";
	run.spawn.cwd_rel = "";
	if (!s.o.max_execs)
		s.o.max_execs = 4;
	int got = http_req_fake_answer(r, route_execs_start(r, &row, &run, &s.o));
	if (rc)
		*rc = got;
	return r;
}

/* The runner's events for fake job i. */
static void emit_output(int i, int stream, const char *text)
{
	struct sbx_event ev = {.kind = SBX_EV_OUTPUT,
			       .job = jobs[i].handle,
			       .at_ms = now_ms(),
			       .stream = stream,
			       .data = text,
			       .len = strlen(text)};
	jobs[i].cb(jobs[i].ctx, &ev, 0);
}

static void emit_result(int i, int exit_code, bool timed_out, bool cancelled, const char *out)
{
	int64_t now = now_ms();
	struct sbx_exec_result res = {.exit_code = exit_code,
				      .timed_out = timed_out,
				      .cancelled = cancelled,
				      .stdout_text = (char *)out,
				      .stdout_len = out ? strlen(out) : 0,
				      .stdout_bytes = out ? strlen(out) : 0,
				      .started_at_ms = now - 5,
				      .finished_at_ms = now};
	struct sbx_event ev = {.kind = SBX_EV_EXIT, .job = jobs[i].handle, .at_ms = now, .result = &res};
	jobs[i].cb(jobs[i].ctx, &ev, 0);
}

static void emit_error(int i, int err, const char *message, int64_t retry_after_s)
{
	struct sbx_event ev = {.kind = SBX_EV_EXIT,
			       .job = jobs[i].handle,
			       .at_ms = now_ms(),
			       .message = message,
			       .retry_after_s = retry_after_s};
	jobs[i].cb(jobs[i].ctx, &ev, err);
}

/* The state of the row (tenant t, id); -1 when there is none. */
static int row_state(struct tenant *t, const char *id)
{
	struct store_exec ex;
	if (store_exec_get(app.store, t->name, id, &ex) != 0)
		return -1;
	int s = (int)ex.state;
	store_exec_clear(&ex);
	return s;
}

/* The integer field key of r's JSON answer. */
static json_int_t body_int(struct http_req *r, const char *key)
{
	assert_non_null(http_req_fake_body(r));
	json_t *o = json_loads(http_req_fake_body(r), 0, NULL);
	assert_non_null(o);
	json_t *v = json_object_get(o, key);
	assert_true(json_is_integer(v));
	json_int_t n = json_integer_value(v);
	json_decref(o);
	return n;
}

/* The string field key of r's JSON answer, into out. */
static const char *body_str(struct http_req *r, const char *key, char *out, size_t outsz)
{
	assert_non_null(http_req_fake_body(r));
	json_t *o = json_loads(http_req_fake_body(r), 0, NULL);
	assert_non_null(o);
	json_t *v = json_object_get(o, key);
	assert_true(json_is_string(v));
	snprintf(out, outsz, "%s", json_string_value(v));
	json_decref(o);
	return out;
}

/* Wait (bounded) until r has been resumed n times, by another thread. */
static void await_resumes(struct http_req *r, int n)
{
	int64_t until = mono_ms() + 30000;
	while (http_req_fake_resumes(r) < n && mono_ms() < until)
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	assert_int_equal(http_req_fake_resumes(r), n);
}

static void test_state_names(void **state)
{
	(void)state;
	static const char *const names[EXEC_STATES] = {
	    [EXEC_RUNNING] = "running",	    [EXEC_PENDING_APPROVAL] = "pending_approval",
	    [EXEC_EXITED] = "exited",	    [EXEC_TIMED_OUT] = "timed_out",
	    [EXEC_CANCELLED] = "cancelled", [EXEC_REJECTED] = "rejected",
	    [EXEC_LOST] = "lost",
	};
	for (int i = 0; i < EXEC_STATES; i++) {
		enum store_exec_state s = EXEC_LOST;
		assert_string_equal(store_exec_state_name((enum store_exec_state)i), names[i]);
		assert_int_equal(store_exec_state_parse(names[i], &s), 0);
		assert_int_equal(s, i);
		assert_int_equal(store_exec_state_live((enum store_exec_state)i),
				 i == EXEC_RUNNING || i == EXEC_PENDING_APPROVAL);
	}
	enum store_exec_state s = EXEC_EXITED;
	assert_int_equal(store_exec_state_parse("finished", &s), -EINVAL);
	assert_int_equal(store_exec_state_parse("", &s), -EINVAL);
	assert_int_equal(s, EXEC_EXITED); /* untouched */
	/* a value out of the table reads as lost, never NULL */
	assert_string_equal(store_exec_state_name((enum store_exec_state)EXEC_STATES), "lost");
	assert_string_equal(store_exec_state_name((enum store_exec_state) - 1), "lost");
}

/* A request waits for its exec: suspended, progress and handle known
 * while it runs, and at the exit it is resumed to record the exit, then
 * answered 200 with the result; the row says exited, the slot is free,
 * and the registry no longer knows it. */
static void test_wait_then_exit(void **state)
{
	(void)state;
	int rc = -1;
	struct http_req *r = start((struct start){.id = "job-1", .o = {.id_given = true}}, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(r->status, 0);
	assert_int_equal(http_req_fake_suspends(r), 1);
	assert_int_equal(njobs, 1);
	assert_string_equal(jobs[0].command, "echo hi");
	assert_int_equal(acme->load->execs, 1);
	assert_int_equal(row_state(acme, "job-1"), EXEC_RUNNING);
	assert_true(route_execs_handle(app.execs, "acme", "job-1") == jobs[0].handle);

	emit_output(0, 1, "hello ");
	emit_output(0, 2, "oops");
	json_t *p = route_execs_progress(app.execs, "acme", "job-1");
	assert_non_null(p);
	assert_int_equal(json_integer_value(json_object_get(p, "stdout_bytes")), 6);
	assert_int_equal(json_integer_value(json_object_get(p, "stderr_bytes")), 4);
	assert_string_equal(json_string_value(json_object_get(p, "tail")), "hello oops");
	assert_true(json_is_string(json_object_get(p, "last_output_at")));
	json_decref(p);

	emit_result(0, 3, false, false, "hello ");
	/* the waiter records the exit itself: resumed, not yet answered */
	assert_int_equal(http_req_fake_resumes(r), 1);
	assert_int_equal(r->status, 0);
	assert_int_equal(http_req_fake_resume(r), 0);
	assert_int_equal(r->status, 200);
	assert_int_equal(body_int(r, "exit_code"), 3);
	char out[64];
	assert_string_equal(body_str(r, "stdout", out, sizeof out), "hello ");
	assert_true(r->has_exit_code);
	assert_int_equal(r->exit_code, 3);

	assert_int_equal(row_state(acme, "job-1"), EXEC_EXITED);
	assert_int_equal(acme->load->execs, 0);
	assert_true(route_execs_handle(app.execs, "acme", "job-1") == 0);
	assert_null(route_execs_progress(app.execs, "acme", "job-1"));
}

/* Lookups are by (tenant, id): the same id in two tenants names two
 * execs, and neither is found under the other's name. */
static void test_lookup_by_tenant(void **state)
{
	(void)state;
	struct http_req *ra = start((struct start){.id = "job-1", .o = {.id_given = true}}, NULL);
	struct http_req *rb = start((struct start){.t = beta, .id = "job-1", .o = {.id_given = true}}, NULL);
	assert_int_equal(njobs, 2);
	assert_true(route_execs_handle(app.execs, "acme", "job-1") == jobs[0].handle);
	assert_true(route_execs_handle(app.execs, "beta", "job-1") == jobs[1].handle);
	assert_true(route_execs_handle(app.execs, "acme", "job-2") == 0);
	assert_true(route_execs_handle(app.execs, "gamma", "job-1") == 0);
	assert_null(route_execs_progress(app.execs, "gamma", "job-1"));
	assert_null(route_execs_progress(app.execs, "acme", "job-2"));

	emit_output(1, 1, "beta's");
	json_t *p = route_execs_progress(app.execs, "acme", "job-1");
	assert_int_equal(json_integer_value(json_object_get(p, "stdout_bytes")), 0);
	json_decref(p);

	/* beta's exit answers beta's request only */
	emit_result(1, 7, false, false, NULL);
	assert_int_equal(http_req_fake_resumes(rb), 1);
	assert_int_equal(http_req_fake_resumes(ra), 0);
	http_req_fake_resume(rb);
	assert_int_equal(body_int(rb, "exit_code"), 7);
	assert_int_equal(row_state(beta, "job-1"), EXEC_EXITED);
	assert_int_equal(row_state(acme, "job-1"), EXEC_RUNNING);
	assert_true(route_execs_handle(app.execs, "acme", "job-1") == jobs[0].handle);

	emit_result(0, 0, false, false, NULL);
	http_req_fake_resume(ra);
	assert_int_equal(body_int(ra, "exit_code"), 0);
}

/* The same id and body again: no second command; it waits on the
 * first, both are answered with the one result, and once it has ended
 * the same request is answered from the store at once. */
static void test_idempotent_same_request(void **state)
{
	(void)state;
	struct start s = {.id = "job-1", .o = {.id_given = true}};
	struct http_req *r1 = start(s, NULL), *r2 = start(s, NULL);
	assert_int_equal(njobs, 1);
	assert_int_equal(http_req_fake_suspends(r2), 1);
	assert_int_equal(r2->status, 0);
	assert_int_equal(acme->load->execs, 1);

	emit_result(0, 5, false, false, "once");
	/* the first records, then every other waiter is woken */
	assert_int_equal(http_req_fake_resumes(r1), 1);
	assert_int_equal(http_req_fake_resumes(r2), 0);
	http_req_fake_resume(r1);
	assert_int_equal(http_req_fake_resumes(r2), 1);
	http_req_fake_resume(r2);
	assert_int_equal(r1->status, 200);
	assert_int_equal(r2->status, 200);
	assert_string_equal(http_req_fake_body(r1), http_req_fake_body(r2));
	assert_int_equal(body_int(r2, "exit_code"), 5);

	int rc = -1;
	struct http_req *r3 = start(s, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(http_req_fake_suspends(r3), 0);
	assert_int_equal(r3->status, 200);
	assert_int_equal(body_int(r3, "exit_code"), 5);
	char out[64];
	assert_string_equal(body_str(r3, "stdout", out, sizeof out), "once");
	assert_int_equal(njobs, 1);
	assert_int_equal(acme->load->execs, 0);
}

/* The same id with another body: 409, while it runs and after. */
static void test_idempotent_other_request(void **state)
{
	(void)state;
	struct http_req *r1 = start((struct start){.id = "job-1", .o = {.id_given = true}}, NULL);
	int rc = 0;
	struct start other = {.id = "job-1", .hash = "h2", .o = {.id_given = true}};
	struct http_req *r2 = start(other, &rc);
	assert_int_equal(rc, -SBX_E_CONFLICT);
	assert_int_equal(r2->status, 409);
	assert_string_equal(r2->error_msg, "exec id job-1 was used for a different request");
	assert_int_equal(http_req_fake_suspends(r2), 0);
	assert_int_equal(njobs, 1);
	assert_int_equal(acme->load->execs, 1); /* the refused one took no slot */

	emit_result(0, 0, false, false, NULL);
	http_req_fake_resume(r1);
	assert_int_equal(r1->status, 200);
	struct http_req *r3 = start(other, &rc);
	assert_int_equal(rc, -SBX_E_CONFLICT);
	assert_int_equal(r3->status, 409);
	assert_int_equal(njobs, 1);

	/* without id_given, an id that exists is a collision of generated ids */
	struct http_req *r4 = start((struct start){.id = "job-1"}, &rc);
	assert_int_equal(rc, -SBX_E_CONFLICT);
	assert_string_equal(r4->error_msg, "generated exec id collided; retry");
	assert_int_equal(acme->load->execs, 0);
}

/* A background exec is answered 202 at once; its exit, which no request
 * waits for, is recorded by the completion thread (flush waits for it);
 * its id asked again while it runs gives its view. */
static void test_background(void **state)
{
	(void)state;
	struct start s = {.id = "job-1", .o = {.id_given = true, .background = true}};
	int rc = -1;
	struct http_req *r = start(s, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(r->status, 202);
	assert_int_equal(http_req_fake_suspends(r), 0);
	char st[32];
	assert_string_equal(body_str(r, "state", st, sizeof st), "running");
	assert_string_equal(body_str(r, "id", st, sizeof st), "job-1");

	struct http_req *again = start(s, &rc);
	assert_int_equal(again->status, 202);
	assert_string_equal(body_str(again, "state", st, sizeof st), "running");
	assert_int_equal(njobs, 1);

	emit_result(0, 9, true, false, NULL);
	route_execs_flush(app.execs);
	assert_int_equal(row_state(acme, "job-1"), EXEC_TIMED_OUT);
	assert_int_equal(acme->load->execs, 0);
	assert_true(route_execs_handle(app.execs, "acme", "job-1") == 0);
	struct http_req *after = start(s, &rc);
	assert_int_equal(after->status, 200);
	assert_string_equal(body_str(after, "state", st, sizeof st), "timed_out");
}

/* Every waiter is woken at the exit; one that left before it is not,
 * and the exit it would have recorded goes to the completion thread. */
static void test_waiter_leaves(void **state)
{
	(void)state;
	struct start s = {.id = "job-1", .o = {.id_given = true}};
	struct http_req *first = start(s, NULL), *second = start(s, NULL), *third = start(s, NULL);
	/* the first (which would record) goes away */
	http_req_fake_free(first);
	for (int i = 0; i < nreqs - 1; i++)
		reqs[i] = reqs[i + 1];
	nreqs--;
	emit_result(0, 0, false, true, NULL);
	route_execs_flush(app.execs);
	assert_int_equal(row_state(acme, "job-1"), EXEC_CANCELLED);
	assert_int_equal(http_req_fake_resumes(second), 1);
	assert_int_equal(http_req_fake_resumes(third), 1);
	http_req_fake_resume(second);
	http_req_fake_resume(third);
	assert_int_equal(second->status, 200);
	assert_int_equal(third->status, 200);
	assert_int_equal(acme->load->execs, 0);
}

/* The provider refuses the command: the waiter is answered with the
 * error, the row is forgotten (the id may be used again) and the slot
 * is free. A background one is answered with the error itself. */
static void test_submit_refused(void **state)
{
	(void)state;
	struct start s = {.id = "job-1", .o = {.id_given = true}};
	submit_rc = -SBX_E_BACKEND;
	int rc = -1;
	struct http_req *r = start(s, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(http_req_fake_resumes(r), 1);
	http_req_fake_resume(r);
	assert_int_equal(r->status, 503);
	assert_string_equal(r->error_msg, "the isolation backend could not start the command");
	assert_int_equal(row_state(acme, "job-1"), -1);
	assert_int_equal(acme->load->execs, 0);

	struct http_req *bg =
	    start((struct start){.id = "job-2", .o = {.id_given = true, .background = true}}, &rc);
	assert_int_equal(rc, -SBX_E_BACKEND);
	assert_int_equal(bg->status, 503);
	assert_string_equal(bg->error_msg, "the command could not be started");
	assert_int_equal(row_state(acme, "job-2"), -1);

	submit_rc = 0;
	struct http_req *retry = start(s, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(njobs, 1);
	assert_int_equal(row_state(acme, "job-1"), EXEC_RUNNING);
	emit_result(0, 0, false, false, NULL);
	http_req_fake_resume(retry);
	assert_int_equal(retry->status, 200);
}

/* An exit without result: a provider's message and Retry-After reach
 * the waiter; a cancel before the start is a cancelled result. */
static void test_exit_without_result(void **state)
{
	(void)state;
	struct http_req *r = start((struct start){.id = "job-1", .o = {.id_given = true}}, NULL);
	emit_error(0, -SBX_E_BACKEND, "the back server went away", 7);
	http_req_fake_resume(r);
	assert_int_equal(r->status, 503);
	assert_string_equal(r->error_msg, "the back server went away");
	assert_int_equal(r->retry_after_s, 7);
	assert_int_equal(row_state(acme, "job-1"), -1);

	struct http_req *c = start((struct start){.id = "job-2", .o = {.id_given = true}}, NULL);
	emit_error(1, -ECANCELED, NULL, 0);
	http_req_fake_resume(c);
	assert_int_equal(c->status, 200);
	assert_int_equal(body_int(c, "exit_code"), 128 + SIGTERM);
	assert_int_equal(row_state(acme, "job-2"), EXEC_CANCELLED);
	assert_int_equal(acme->load->execs, 0);
}

/* At max_execs: a background request is refused 429 at once, and so is
 * one with no queue to wait in. */
static void test_limit(void **state)
{
	(void)state;
	struct http_req *r = start((struct start){.id = "job-1", .o = {.max_execs = 1}}, NULL);
	int rc = 0;
	struct http_req *bg =
	    start((struct start){.id = "job-2", .o = {.max_execs = 1, .background = true}}, &rc);
	assert_int_equal(rc, -SBX_E_TOO_MANY);
	assert_int_equal(bg->status, 429);
	assert_string_equal(bg->error_msg, "tenant acme already runs 1 commands");
	struct http_req *nq = start((struct start){.id = "job-3", .o = {.max_execs = 1}}, &rc);
	assert_int_equal(rc, -SBX_E_TOO_MANY);
	assert_int_equal(nq->status, 429);
	assert_int_equal(row_state(acme, "job-2"), -1);
	assert_int_equal(row_state(acme, "job-3"), -1);
	assert_int_equal(njobs, 1);
	/* another tenant's slots are its own */
	struct http_req *b = start((struct start){.t = beta, .id = "job-2", .o = {.max_execs = 1}}, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(njobs, 2);
	emit_result(0, 0, false, false, NULL);
	emit_result(1, 0, false, false, NULL);
	http_req_fake_resume(r);
	http_req_fake_resume(b);
	assert_int_equal(acme->load->execs, 0);
	assert_int_equal(beta->load->execs, 0);
}

/* The exec handler run again once the queue admits the request. */
static int rerun(struct http_req *r)
{
	struct store_exec row = {.session = (char *)"s1",
				 .session_len = 2,
				 .command = (char *)"echo again",
				 .cwd = (char *)"/",
				 .request_hash = (char *)"h1"};
	snprintf(row.tenant, sizeof row.tenant, "%s", r->tenant->name);
	snprintf(row.id, sizeof row.id, "job-2");
	struct sbx_exec_req run = *route_execs_base(app.execs);
	run.spawn.command = "echo again";
	run.spawn.cwd_rel = "";
	struct route_exec_opts o = {.id_given = true, .max_execs = 1, .exec_queue = 1, .rerun = rerun};
	return route_execs_start(r, &row, &run, &o);
}

/* At max_execs with a queue: the request waits (no row yet), and the
 * exit of the running one admits it: its handler runs again and its
 * command starts on the slot handed over. */
static void test_queued_then_admitted(void **state)
{
	(void)state;
	struct http_req *r1 = start((struct start){.id = "job-1", .o = {.max_execs = 1}}, NULL);
	int rc = -1;
	struct http_req *r2 =
	    start((struct start){.id = "job-2",
				 .o = {.id_given = true, .max_execs = 1, .exec_queue = 1, .rerun = rerun}},
		  &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(http_req_fake_suspends(r2), 1);
	assert_int_equal(row_state(acme, "job-2"), -1);
	assert_int_equal(njobs, 1);

	emit_result(0, 0, false, false, NULL);
	http_req_fake_resume(r1); /* records: frees the slot, which goes to r2 */
	assert_int_equal(http_req_fake_resumes(r2), 1);
	assert_int_equal(acme->load->execs, 1);
	assert_int_equal(http_req_fake_resume(r2), 0); /* rerun: starts, waits on it */
	assert_int_equal(njobs, 2);
	assert_string_equal(jobs[1].command, "echo again");
	assert_int_equal(row_state(acme, "job-2"), EXEC_RUNNING);
	assert_int_equal(http_req_fake_suspends(r2), 2);
	emit_result(1, 4, false, false, NULL);
	http_req_fake_resume(r2);
	assert_int_equal(r2->status, 200);
	assert_int_equal(body_int(r2, "exit_code"), 4);
	assert_int_equal(acme->load->execs, 0);
}

/* A decision on a request of r's tenant by sub. */
static struct http_req *decide(struct tenant *t, const char *sub, const char *id, bool approve,
			       const char *reason, int *rc)
{
	struct http_req *r = new_req(t, "POST", approve ? "/exec/x/approve" : "/exec/x/reject");
	snprintf(r->claims.sub, sizeof r->claims.sub, "%s", sub);
	*rc = http_req_fake_answer(r, route_execs_decide(r, id, approve, reason));
	return r;
}

static const struct route_exec_opts approval = {
    .id_given = true, .approval = true, .approval_timeout_ms = 3600 * 1000};

/* A command that needs approval is parked: 202 with its view, no
 * command run, a pending slot; approved by another sub, it runs. */
static void test_approve(void **state)
{
	(void)state;
	struct start s = {.id = "job-1", .requested_by = "bob", .o = approval};
	int rc = -1;
	struct http_req *r = start(s, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(r->status, 202);
	char st[32];
	assert_string_equal(body_str(r, "state", st, sizeof st), "pending_approval");
	assert_int_equal(njobs, 0);
	assert_int_equal(row_state(acme, "job-1"), EXEC_PENDING_APPROVAL);
	assert_int_equal(acme->load->pending, 1);
	assert_int_equal(acme->load->execs, 0);
	assert_true(route_execs_handle(app.execs, "acme", "job-1") == 0); /* no runner job yet */

	/* the same request again: the same view, still parked */
	struct http_req *again = start(s, &rc);
	assert_int_equal(again->status, 202);
	assert_string_equal(body_str(again, "state", st, sizeof st), "pending_approval");

	/* a token never approves its own request; one without a sub never decides */
	struct http_req *self = decide(acme, "bob", "job-1", true, NULL, &rc);
	assert_int_equal(rc, -SBX_E_FORBIDDEN);
	assert_int_equal(self->status, 403);
	struct http_req *nosub = decide(acme, "", "job-1", true, NULL, &rc);
	assert_int_equal(nosub->status, 403);
	/* another tenant's exec of that id does not exist */
	struct http_req *other = decide(beta, "alice", "job-1", true, NULL, &rc);
	assert_int_equal(other->status, 404);
	assert_int_equal(row_state(acme, "job-1"), EXEC_PENDING_APPROVAL);
	assert_int_equal(njobs, 0);

	struct http_req *ok = decide(acme, "alice", "job-1", true, NULL, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(ok->status, 200);
	assert_string_equal(body_str(ok, "state", st, sizeof st), "running");
	assert_string_equal(body_str(ok, "decided_by", st, sizeof st), "alice");
	assert_int_equal(njobs, 1);
	assert_int_equal(row_state(acme, "job-1"), EXEC_RUNNING);
	assert_int_equal(acme->load->pending, 0);
	assert_int_equal(acme->load->execs, 1);
	assert_true(route_execs_handle(app.execs, "acme", "job-1") == jobs[0].handle);

	/* decided already: 409 naming its state */
	struct http_req *twice = decide(acme, "alice", "job-1", true, NULL, &rc);
	assert_int_equal(twice->status, 409);
	assert_string_equal(twice->error_msg, "exec job-1 is not waiting for approval (running)");
	assert_false(route_execs_cancel_pending(app.execs, "acme", "job-1"));

	emit_result(0, 0, false, false, NULL);
	route_execs_flush(app.execs);
	assert_int_equal(row_state(acme, "job-1"), EXEC_EXITED);
	assert_int_equal(acme->load->execs, 0);
}

/* A rejection answers the waiting request 403 and every later ask of
 * that id; nothing ran, the pending slot is free. */
static void test_reject(void **state)
{
	(void)state;
	struct route_exec_opts o = approval;
	o.wait = true;
	struct start s = {.id = "job-1", .requested_by = "bob", .o = o};
	struct http_req *r = start(s, NULL);
	assert_int_equal(http_req_fake_suspends(r), 1);
	assert_int_equal(r->status, 0);
	int rc = -1;
	struct http_req *no = decide(acme, "alice", "job-1", false, "not today", &rc);
	assert_int_equal(rc, 0);
	char st[32];
	assert_string_equal(body_str(no, "state", st, sizeof st), "rejected");
	assert_int_equal(http_req_fake_resumes(r), 1);
	http_req_fake_resume(r);
	assert_int_equal(r->status, 403);
	assert_string_equal(r->error_msg, "exec job-1 was rejected by alice: not today");
	assert_int_equal(row_state(acme, "job-1"), EXEC_REJECTED);
	assert_int_equal(acme->load->pending, 0);
	assert_int_equal(njobs, 0);

	struct http_req *later = start(s, &rc);
	assert_int_equal(rc, -SBX_E_REJECTED);
	assert_int_equal(later->status, 403);
	assert_string_equal(later->error_msg, "exec job-1 was rejected by alice: not today");
}

/* Cancels of parked commands: one by id (once), every one at shutdown,
 * and those of a tenant's life that ended (not another life's). */
static void test_cancel_pending(void **state)
{
	(void)state;
	start((struct start){.id = "job-1", .o = approval}, NULL);
	start((struct start){.id = "job-2", .o = approval}, NULL);
	start((struct start){.id = "job-3", .o = approval}, NULL);
	start((struct start){.t = beta, .id = "job-1", .o = approval}, NULL);
	assert_int_equal(acme->load->pending, 3);

	assert_false(route_execs_cancel_pending(app.execs, "acme", "job-9"));
	assert_false(route_execs_cancel_pending(app.execs, "gamma", "job-1"));
	assert_true(route_execs_cancel_pending(app.execs, "acme", "job-1"));
	route_execs_flush(app.execs);
	assert_false(route_execs_cancel_pending(app.execs, "acme", "job-1"));
	assert_int_equal(row_state(acme, "job-1"), EXEC_CANCELLED);
	assert_int_equal(acme->load->pending, 2);

	route_execs_stop_life(app.execs, "acme", acme->incarnation + 1); /* not this life */
	route_execs_flush(app.execs);
	assert_int_equal(row_state(acme, "job-2"), EXEC_PENDING_APPROVAL);
	route_execs_stop_life(app.execs, "acme", acme->incarnation);
	route_execs_flush(app.execs);
	assert_int_equal(row_state(acme, "job-2"), EXEC_CANCELLED);
	assert_int_equal(row_state(acme, "job-3"), EXEC_CANCELLED);
	assert_int_equal(row_state(beta, "job-1"), EXEC_PENDING_APPROVAL);
	assert_int_equal(acme->load->pending, 0);

	route_execs_cancel_all_pending(app.execs);
	route_execs_flush(app.execs);
	assert_int_equal(row_state(beta, "job-1"), EXEC_CANCELLED);
	assert_int_equal(beta->load->pending, 0);
	assert_int_equal(njobs, 0);
}

/* Nobody decides in time: the approvals thread rejects it, and the
 * waiting request is answered 403 saying so. */
static void test_approval_expires(void **state)
{
	(void)state;
	struct route_exec_opts o = approval;
	o.wait = true;
	o.approval_timeout_ms = 0;
	struct http_req *r = start((struct start){.id = "job-1", .o = o}, NULL);
	assert_int_equal(http_req_fake_suspends(r), 1);
	route_execs_wake(app.execs);
	await_resumes(r, 1);
	http_req_fake_resume(r);
	assert_int_equal(r->status, 403);
	char why[128];
	snprintf(why, sizeof why, "exec job-1 was rejected: approval timed out after %lld s",
		 (long long)cfg.approval_timeout_s);
	assert_string_equal(r->error_msg, why);
	assert_int_equal(row_state(acme, "job-1"), EXEC_REJECTED);
	assert_int_equal(acme->load->pending, 0);
	assert_int_equal(njobs, 0);
}

/* DELETE /session's stop counts the running execs of that session of
 * that tenant only (wait 0: the fake's handles end nothing). */
static void test_stop_session(void **state)
{
	(void)state;
	start((struct start){.id = "job-1", .o = {.background = true}}, NULL);
	start((struct start){.id = "job-2", .o = {.background = true}}, NULL);
	start((struct start){.id = "job-3", .session = "s2", .o = {.background = true}}, NULL);
	start((struct start){.t = beta, .id = "job-1", .o = {.background = true}}, NULL);
	assert_int_equal(route_execs_stop_session(app.execs, "acme", "s1", 2, 0), 2);
	assert_int_equal(route_execs_stop_session(app.execs, "acme", "s2", 2, 0), 1);
	assert_int_equal(route_execs_stop_session(app.execs, "acme", "s3", 2, 0), 0);
	assert_int_equal(route_execs_stop_session(app.execs, "acme", "s", 1, 0), 0);
	assert_int_equal(route_execs_stop_session(app.execs, "beta", "s1", 2, 0), 1);
	emit_result(0, 0, false, false, NULL);
	route_execs_flush(app.execs);
	assert_int_equal(route_execs_stop_session(app.execs, "acme", "s1", 2, 0), 1);
	for (int i = 1; i < njobs; i++)
		emit_result(i, 0, false, false, NULL);
	route_execs_flush(app.execs);
	assert_int_equal(route_execs_stop_session(app.execs, "acme", "s1", 2, 0), 0);
	assert_int_equal(acme->load->execs, 0);
	assert_int_equal(beta->load->execs, 0);
}

/* 404 and 409 of an exec id. */
static void test_unknown_and_state(void **state)
{
	(void)state;
	struct http_req *r = new_req(acme, "GET", "/exec/nope");
	assert_int_equal(http_req_fake_answer(r, route_exec_unknown(r, "nope")), -ENOENT);
	assert_int_equal(r->status, 404);
	assert_string_equal(r->error_msg, "no exec nope");

	/* an id another node made says so; one of this node's does not */
	free(cfg.node_id);
	cfg.node_id = xstrdup("node-a");
	struct http_req *n = new_req(acme, "GET", "/exec/x");
	assert_int_equal(http_req_fake_answer(n, route_exec_unknown(n, "node-b_x1")), -ENOENT);
	assert_int_equal(n->status, 404);
	assert_string_equal(
	    n->error_msg,
	    "no exec node-b_x1 on node node-a: its id names node node-b (route /exec/{id} by it)");
	struct http_req *here = new_req(acme, "GET", "/exec/x");
	route_exec_unknown(here, "node-a_x1");
	assert_string_equal(here->error_msg, "no exec node-a_x1");

	struct http_req *s = new_req(acme, "POST", "/exec/nope/cancel");
	assert_int_equal(http_req_fake_answer(s, route_execs_answer_state(s, "nope", "cannot be cancelled")),
			 -ENOENT);
	assert_int_equal(s->status, 404);

	struct http_req *run = start((struct start){.id = "job-1", .o = {.id_given = true}}, NULL);
	emit_result(0, 0, false, false, NULL);
	http_req_fake_resume(run);
	struct http_req *c = new_req(acme, "POST", "/exec/job-1/cancel");
	assert_int_equal(http_req_fake_answer(c, route_execs_answer_state(c, "job-1", "has ended")),
			 -SBX_E_CONFLICT);
	assert_int_equal(c->status, 409);
	assert_string_equal(c->error_msg, "exec job-1 has ended (exited)");
	/* another tenant has no such exec */
	struct http_req *b = new_req(beta, "POST", "/exec/job-1/cancel");
	http_req_fake_answer(b, route_execs_answer_state(b, "job-1", "has ended"));
	assert_int_equal(b->status, 404);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    UNIT_TEST_FX(test_state_names),
	    UNIT_TEST_FX(test_wait_then_exit),
	    UNIT_TEST_FX(test_lookup_by_tenant),
	    UNIT_TEST_FX(test_idempotent_same_request),
	    UNIT_TEST_FX(test_idempotent_other_request),
	    UNIT_TEST_FX(test_background),
	    UNIT_TEST_FX(test_waiter_leaves),
	    UNIT_TEST_FX(test_submit_refused),
	    UNIT_TEST_FX(test_exit_without_result),
	    UNIT_TEST_FX(test_limit),
	    UNIT_TEST_FX(test_queued_then_admitted),
	    UNIT_TEST_FX(test_approve),
	    UNIT_TEST_FX(test_reject),
	    UNIT_TEST_FX(test_cancel_pending),
	    UNIT_TEST_FX(test_approval_expires),
	    UNIT_TEST_FX(test_stop_session),
	    UNIT_TEST_FX(test_unknown_and_state),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
