/* sandbox/uids: finding the subordinate range, which ids a tenant may
 * have, and the decision at start (root, shared with the reason, or a
 * refusal naming the fix). Entering the namespace for real needs a user
 * with a range in /etc/subuid: tests/integration/test_uids.c does that. */
#include <errno.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/uids.h"
#include "unit.h"

#define NOBODY 65534

static void test_subid_find(void **state)
{
	(void)state;
	const char *text = "alice:100000:65536\n"
			   "bob:165536:65536\n"
			   "bobby:1:2\n"
			   "bob:300000:10\n"
			   "1001:400000:100\n"
			   "carol:x:5\n"
			   "carol:5\n"
			   "carol:7:0\n"
			   "carol:4294967295:2\n"
			   "dave:10:20"; /* no final newline */
	struct sbx_id_range r = {0, 0};

	assert_int_equal(sbx_subid_find(text, "alice", 1000, 0, &r), 0);
	assert_int_equal(r.first, 100000);
	assert_int_equal(r.count, 65536);
	/* The range holding the wanted id wins over the first. */
	assert_int_equal(sbx_subid_find(text, "bob", 1002, 300005, &r), 0);
	assert_int_equal(r.first, 300000);
	assert_int_equal(r.count, 10);
	assert_int_equal(sbx_subid_find(text, "bob", 1002, 5, &r), 0);
	assert_int_equal(r.first, 165536);
	/* By uid when the name has no line; "bob" is not "bobby". */
	assert_int_equal(sbx_subid_find(text, "eve", 1001, 0, &r), 0);
	assert_int_equal(r.first, 400000);
	assert_int_equal(sbx_subid_find(text, "bobb", 7, 0, &r), -ENOENT);
	/* Lines that do not parse are skipped. */
	assert_int_equal(sbx_subid_find(text, "carol", 7, 0, &r), -ENOENT);
	assert_int_equal(sbx_subid_find(text, "dave", 7, 0, &r), 0);
	assert_int_equal(r.first, 10);
	assert_int_equal(r.count, 20);
	assert_int_equal(sbx_subid_find("", "alice", 1000, 0, &r), -ENOENT);
	assert_int_equal(sbx_subid_find(text, "", 99, 0, &r), -ENOENT);
}

static void test_tenant_ids(void **state)
{
	(void)state;
	struct sbx_uids u;
	memset(&u, 0, sizeof u);
	u.mode = SBX_UIDS_SUBUID;
	u.uids = (struct sbx_id_range){1000, 10}; /* 1000..1009 */
	u.gids = (struct sbx_id_range){1002, 10}; /* 1002..1011 */
	/* Tenants: in both ranges, but the last common id is the probe's. */
	assert_int_equal(sbx_uids_probe_id(&u), 1009);
	assert_false(sbx_uids_tenant_ok(&u, 1001));
	assert_true(sbx_uids_tenant_ok(&u, 1002));
	assert_true(sbx_uids_tenant_ok(&u, 1008));
	assert_false(sbx_uids_tenant_ok(&u, 1009));
	assert_false(sbx_uids_tenant_ok(&u, 1010));
	u.mode = SBX_UIDS_ROOT;
	assert_true(sbx_uids_tenant_ok(&u, 5));
	assert_int_equal(sbx_uids_probe_id(&u), NOBODY);
	assert_string_equal(sbx_uids_mode_name(SBX_UIDS_ROOT), "root");
	assert_string_equal(sbx_uids_mode_name(SBX_UIDS_SUBUID), "subuid");
	assert_string_equal(sbx_uids_mode_name(SBX_UIDS_SHARED), "shared");
}

static void test_setup_root(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	struct sbx_uids u;
	char err[512] = "";
	struct sbx_uids_config cfg = {.uid_base = 100000};
	assert_int_equal(sbx_uids_setup(&u, &cfg, err, sizeof err), 0);
	assert_int_equal(u.mode, SBX_UIDS_ROOT);
	assert_non_null(strstr(u.detail, "root: one uid per tenant"));
}

/* What sbx_uids_setup did in a child running as nobody. */
struct outcome {
	int rc;
	int mode;
	char detail[256], why[256], err[512];
};

static void setup_as_nobody(const struct sbx_uids_config *cfg, struct outcome *o)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct outcome c;
		struct sbx_uids u;
		memset(&c, 0, sizeof c);
		if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
			_exit(3);
		c.rc = sbx_uids_setup(&u, cfg, c.err, sizeof c.err);
		c.mode = (int)u.mode;
		snprintf(c.detail, sizeof c.detail, "%s", u.detail);
		snprintf(c.why, sizeof c.why, "%s", u.why_shared);
		_exit(write(p[1], &c, sizeof c) == (ssize_t)sizeof c ? 0 : 4);
	}
	close(p[1]);
	memset(o, 0, sizeof *o);
	ssize_t n = read(p[0], o, sizeof *o);
	close(p[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(n, (ssize_t)sizeof *o);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	chmod(path, 0644);
}

/* Not root: shared (saying why) without a range or without the tools;
 * a refusal naming the fix when uid-base lies outside the range, and
 * when newuidmap will not write the map (nobody has no range in the real
 * /etc/subuid, which newuidmap reads). */
static void test_setup_unprivileged(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	char dir[64], uidf[96], gidf[96], none[96];
	assert_int_equal(unit_tmpdir(dir, sizeof dir, "uids"), 0);
	chmod(dir, 0755);
	snprintf(uidf, sizeof uidf, "%s/subuid", dir);
	snprintf(gidf, sizeof gidf, "%s/subgid", dir);
	snprintf(none, sizeof none, "%s/missing", dir);
	write_text(uidf, "root:100000:65536\n");
	write_text(gidf, "nobody:5000:100\n");
	struct sbx_uids_config cfg = {.uid_base = 5000, .subuid_path = uidf, .subgid_path = gidf};
	struct outcome o;

	setup_as_nobody(&cfg, &o);
	assert_int_equal(o.rc, 0);
	assert_int_equal(o.mode, SBX_UIDS_SHARED);
	assert_non_null(strstr(o.why, uidf));
	assert_non_null(strstr(o.detail, "shared uid 65534"));

	write_text(uidf, "nobody:5000:100\n");
	cfg.newuidmap = none;
	setup_as_nobody(&cfg, &o);
	assert_int_equal(o.mode, SBX_UIDS_SHARED);
	assert_non_null(strstr(o.why, "uidmap"));

	cfg.newuidmap = NULL;
	if (access("/usr/bin/newuidmap", X_OK) == 0 && access("/usr/bin/newgidmap", X_OK) == 0) {
		cfg.uid_base = 9000;
		setup_as_nobody(&cfg, &o);
		assert_int_equal(o.rc, -EINVAL);
		assert_non_null(strstr(o.err, "uid-base=5000"));

		cfg.uid_base = 5000;
		setup_as_nobody(&cfg, &o);
		assert_true(o.rc < 0);
		assert_non_null(strstr(o.err, "newuidmap"));
	}
	assert_int_equal(unit_rm_rf(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_subid_find),
	    cmocka_unit_test(test_tenant_ids),
	    cmocka_unit_test(test_setup_root),
	    cmocka_unit_test(test_setup_unprivileged),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
