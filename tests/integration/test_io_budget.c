/* An I/O budget per tenant (issue 27): tenant_io_read_bps,
 * tenant_io_write_bps, tenant_io_read_iops, tenant_io_write_iops, the
 * cgroup io.max of the tenant's group on its disk image's loop device.
 * What this host can show: the keys are stored, bounded and read back,
 * shown in /metrics, and never silently unenforced. A server without
 * disk images refuses a budget at PUT (409) and refuses the commands of
 * a tenant that has one from the configuration (503); a server with
 * images whose cgroups have no io controller (this host's v1 driver: no
 * blkio hierarchy) refuses the commands too (503), naming the budget
 * and what is missing; nothing of the command runs. That the budget
 * holds is test_cgroup2_io (a cgroup-v2 guest). Needs root, loop devices
 * and mkfs.ext4 (77 without). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"
#include "it_policy.h"

static struct it_server srv; /* disk-quota=image */
static char *tok, *tok_globex, *tok_ops;

static const struct it_tok toks[] = {
    {&tok, "acme", NULL},
    {&tok_globex, "globex", NULL},
    {&tok_ops, "ops", "admin"},
};

static const char *const image_args[] = {"--set", "disk-quota=image",
					 "--set", "tenant-disk-quota-bytes=25165824",
					 "--set", "tenant-disk-quota-inodes=2000",
					 NULL};

static const char *const all_io = "{\"tenant_io_read_bps\": 1048576, \"tenant_io_write_bps\": 2097152, "
				  "\"tenant_io_read_iops\": 100, \"tenant_io_write_iops\": 50}";
static const char *const no_io = "{\"tenant_io_read_bps\": null, \"tenant_io_write_bps\": null, "
				 "\"tenant_io_read_iops\": null, \"tenant_io_write_iops\": null}";

static int setup(void **state)
{
	(void)state;
	return it_start_minted(&srv, image_args, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

static bool cgroup2_host(void)
{
	struct statfs f;
	return statfs("/sys/fs/cgroup", &f) == 0 && f.f_type == CGROUP2_SUPER_MAGIC;
}

/* GET /tenants/{tenant}/policy (caller frees). */
static json_t *pol_get(struct it_server *s, const char *tenant)
{
	char path[128];
	json_t *v = NULL;
	snprintf(path, sizeof path, "/tenants/%s/policy", tenant);
	assert_int_equal(it_get_json(s, tok_ops, path, &v), 200);
	assert_non_null(v);
	return v;
}

/* The error message of a failed answer (borrowed from j). */
static const char *err_msg(json_t *j)
{
	const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
	return m ? m : "";
}

/* Whether mark exists in tenant's workspace as the server sees it (the
 * images are mounted in its own mount namespace). */
static bool srv_ws_exists(struct it_server *s, const char *tenant, const char *mark)
{
	char *p = xasprintf("/proc/%d/root%s/tenants/%s/workspace/%s", (int)s->pid, s->dir, tenant, mark);
	bool there = access(p, F_OK) == 0;
	free(p);
	return there;
}

/* POST /exec of cmd: its status, *out (optional) the body. */
static long exec_status(struct it_server *s, const char *token, const char *cmd, json_t **out)
{
	json_t *body = NULL;
	long st =
	    ex_post(s, token, NULL, json_pack("{s:s, s:i}", "command", cmd, "timeout_s", 30), &body, NULL);
	if (out)
		*out = body;
	else
		json_decref(body);
	return st;
}

/* With images: the four keys are taken, read back (effective and as
 * overrides), bounded, and reset to the configuration's 0 by null. */
static void test_keys_round_trip(void **state)
{
	(void)state;
	assert_int_equal(pol_put(&srv, tok_ops, "acme", all_io, NULL), 200);
	json_t *v = pol_get(&srv, "acme");
	json_t *p = json_object_get(v, "policy"), *o = json_object_get(v, "overrides");
	assert_int_equal(jint(p, "tenant_io_read_bps"), 1048576);
	assert_int_equal(jint(p, "tenant_io_write_bps"), 2097152);
	assert_int_equal(jint(p, "tenant_io_read_iops"), 100);
	assert_int_equal(jint(p, "tenant_io_write_iops"), 50);
	assert_int_equal(jint(o, "tenant_io_write_bps"), 2097152);
	assert_int_equal(json_object_size(o), 4);
	json_decref(v);
	/* another tenant keeps the configuration's: none */
	v = pol_get(&srv, "globex");
	p = json_object_get(v, "policy");
	assert_true(json_is_integer(json_object_get(p, "tenant_io_write_bps")));
	assert_int_equal(jint(p, "tenant_io_write_bps"), 0);
	assert_int_equal(jint(p, "tenant_io_read_iops"), 0);
	json_decref(v);

	static const char *const bad[] = {
	    "{\"tenant_io_write_bps\": -1}",	    "{\"tenant_io_write_bps\": 100000000001}",
	    "{\"tenant_io_read_bps\": 0.5}",	    "{\"tenant_io_read_bps\": \"1M\"}",
	    "{\"tenant_io_write_iops\": 10000001}", "{\"tenant_io_read_iops\": true}"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		json_t *e = NULL;
		long st = pol_put(&srv, tok_ops, "acme", bad[i], &e);
		if (st != 400)
			fprintf(stderr, "%s: %ld\n", bad[i], st);
		assert_int_equal(st, 400);
		assert_non_null(strstr(err_msg(e), "tenant_io_"));
		json_decref(e);
	}
	/* the bounds themselves are taken */
	assert_int_equal(pol_put(&srv, tok_ops, "globex",
				 "{\"tenant_io_write_bps\": 100000000000, \"tenant_io_read_iops\": 10000000}",
				 NULL),
			 200);
	/* the command line, with disk images configured */
	int st = -1;
	free(it_cli(&srv, &st, "tenant set globex tenant-io-write-bps=default tenant-io-read-iops=0"));
	assert_int_equal(st, 0);
	v = pol_get(&srv, "globex");
	assert_int_equal(jint(json_object_get(v, "policy"), "tenant_io_write_bps"), 0);
	assert_int_equal(json_object_size(json_object_get(v, "overrides")), 1); /* read_iops: 0 */
	json_decref(v);
	/* acme's is as it was: the refused PUTs changed nothing */
	v = pol_get(&srv, "acme");
	assert_int_equal(jint(json_object_get(v, "policy"), "tenant_io_write_bps"), 2097152);
	json_decref(v);
}

/* /metrics: each tenant's I/O budgets beside its other budgets. */
static void test_metrics_show_budgets(void **state)
{
	(void)state;
	assert_int_equal(pol_put(&srv, tok_ops, "acme", all_io, NULL), 200);
	assert_int_equal(it_metric(&srv, tok_ops, "sandboxd_tenant_io_read_bps_budget{tenant=\"acme\"}"),
			 1048576);
	assert_int_equal(it_metric(&srv, tok_ops, "sandboxd_tenant_io_write_bps_budget{tenant=\"acme\"}"),
			 2097152);
	assert_int_equal(it_metric(&srv, tok_ops, "sandboxd_tenant_io_read_iops_budget{tenant=\"acme\"}"),
			 100);
	assert_int_equal(it_metric(&srv, tok_ops, "sandboxd_tenant_io_write_iops_budget{tenant=\"acme\"}"),
			 50);
	assert_int_equal(it_metric(&srv, tok_ops, "sandboxd_tenant_io_write_bps_budget{tenant=\"globex\"}"),
			 0);
}

/* A budget the host's cgroups cannot apply refuses the command: 503
 * naming the budget and the missing controller, and nothing ran. Other
 * tenants and the same tenant without the budget run. */
static void test_command_refused_without_io_controller(void **state)
{
	(void)state;
	if (cgroup2_host()) {
		fprintf(stderr, "cgroup2 host: the budget applies here (test_cgroup2_io); skipped\n");
		skip();
	}
	assert_int_equal(pol_put(&srv, tok_ops, "acme", no_io, NULL), 200);
	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"tenant_io_write_bps\": 2097152}", NULL), 200);
	json_t *e = NULL;
	assert_int_equal(exec_status(&srv, tok, "touch /workspace/ran", &e), 503);
	const char *m = err_msg(e);
	fprintf(stderr, "refused: %s\n", m);
	assert_non_null(strstr(m, "tenant_io_write_bps"));
	assert_non_null(strstr(m, it_cgroups_here() ? "no io controller" : "without cgroups"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "code")),
			    "backend_unavailable");
	json_decref(e);
	/* background too: refused before anything starts */
	struct it_resp raw;
	assert_int_equal(ex_post(&srv, tok, NULL,
				 json_pack("{s:s, s:b}", "command", "touch /workspace/ran", "background", 1),
				 NULL, &raw),
			 503);
	it_resp_free(&raw);
	assert_false(srv_ws_exists(&srv, "acme", "ran"));
	/* the tenant without a budget runs */
	json_t *r = ex_run(&srv, tok_globex, "echo ok");
	assert_string_equal(ex_stdout_ok(r), "ok\n");
	json_decref(r);
	/* and so does acme once its budget is gone */
	assert_int_equal(pol_put(&srv, tok_ops, "acme", no_io, NULL), 200);
	r = ex_run(&srv, tok, "touch /workspace/ran && echo ran");
	assert_string_equal(ex_stdout_ok(r), "ran\n");
	json_decref(r);
	assert_true(srv_ws_exists(&srv, "acme", "ran"));
}

/* Without disk images there is no device to throttle: a budget set is
 * refused (409 naming why; 0 and null are not budgets), one that comes
 * from the configuration refuses the tenant's commands (503), and the
 * command line refuses it when the configured mode has no images. */
static void test_no_images_refuses(void **state)
{
	(void)state;
	struct it_server plain = {0};
	char *t = NULL, *ops = NULL;
	/* A default budget nothing here can apply stops the start (fail
	 * closed); the operator's --allow-uncontained starts it degraded. */
	const char *const refused[] = {"--set", "tenant-io-write-bps=1048576", NULL};
	assert_int_not_equal(it_start(&plain, refused), 0);
	char *log = it_read_file(plain.log, NULL);
	assert_non_null(log);
	assert_non_null(strstr(log, "tenant-io-write-bps=1048576 not enforced"));
	free(log);
	it_cleanup(&plain);
	const char *const args[] = {"--set", "tenant-io-write-bps=1048576", "--allow-uncontained", NULL};
	assert_int_equal(it_start(&plain, args), 0);
	json_t *ready = NULL;
	assert_int_equal(it_get_json(&plain, NULL, "/readyz", &ready), 200);
	assert_string_equal(jstr(ready, "status"), "degraded");
	json_decref(ready);
	t = it_token(&plain, "acme", NULL);
	ops = it_token(&plain, "ops", "admin");
	char *keep = tok_ops;
	tok_ops = ops; /* pol_get's token */

	json_t *v = pol_get(&plain, "acme");
	assert_int_equal(jint(json_object_get(v, "policy"), "tenant_io_write_bps"), 1048576);
	json_decref(v);
	json_t *e = NULL;
	assert_int_equal(pol_put(&plain, ops, "acme", "{\"tenant_io_read_bps\": 1000}", &e), 409);
	assert_non_null(strstr(err_msg(e), "tenant_io_read_bps"));
	assert_non_null(strstr(err_msg(e), "disk images (disk-quota=image)"));
	json_decref(e);
	e = NULL;
	assert_int_equal(pol_put(&plain, ops, "acme", "{\"tenant-io-write-iops\": 5, \"max_execs\": 3}", &e),
			 409);
	json_decref(e);
	v = pol_get(&plain, "acme");
	assert_int_equal(json_object_size(json_object_get(v, "overrides")), 0); /* nothing stored */
	json_decref(v);
	/* 0 (none), null, and other keys are taken */
	assert_int_equal(pol_put(&plain, ops, "acme", "{\"tenant_io_read_bps\": 0, \"max_execs\": 3}", NULL),
			 200);
	assert_int_equal(pol_put(&plain, ops, "acme", "{\"tenant_io_read_iops\": null}", NULL), 200);

	/* the configuration's budget: the command is refused, not run */
	assert_int_equal(exec_status(&plain, t, "touch /workspace/ran", &e), 503);
	fprintf(stderr, "refused: %s\n", err_msg(e));
	assert_non_null(strstr(err_msg(e), "tenant_io_write_bps"));
	assert_non_null(strstr(err_msg(e), "need disk images"));
	json_decref(e);
	assert_false(it_ws_exists(&plain, "acme", "ran"));
	assert_int_equal(pol_put(&plain, ops, "acme", "{\"tenant_io_write_bps\": 0}", NULL), 200);
	json_t *r = ex_run(&plain, t, "touch /workspace/ran && echo ran");
	assert_string_equal(ex_stdout_ok(r), "ran\n");
	json_decref(r);

	/* the command line: refused under disk-quota=none, taken as 0 */
	int st = -1;
	free(it_cli(&plain, &st, "tenant set acme tenant_io_write_bps=5 --set disk-quota=none"));
	assert_int_equal(st, 2);
	free(it_cli(&plain, &st, "tenant set acme tenant_io_write_bps=0 --set disk-quota=none"));
	assert_int_equal(st, 0);

	tok_ops = keep;
	free(t);
	free(ops);
	assert_int_equal(it_finish(&plain), 0);
}

int main(void)
{
	if (geteuid() != 0 || access("/dev/loop-control", F_OK) != 0 ||
	    it_sh_quiet("command -v mkfs.ext4") != 0) {
		fprintf(stderr, "test_io_budget: needs root, loop devices and mkfs.ext4; skipped\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_keys_round_trip),
	    cmocka_unit_test(test_metrics_show_budgets),
	    cmocka_unit_test(test_command_refused_without_io_controller),
	    cmocka_unit_test(test_no_images_refuses),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
