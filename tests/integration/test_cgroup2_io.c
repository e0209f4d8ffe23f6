/* The tenant's I/O budget holds on cgroup v2 (issue 27): a tenant with a
 * disk image and tenant_io_write_bps = 2 MiB/s writes 8 MiB with
 * O_DIRECT, and the kernel's own counter (io.stat of the tenant's group
 * u<uid>, wbytes on its image's loop device) grew by at least those 8 MiB
 * at no more than the budget over the command's wall time (1.5x: io.max
 * lets a short burst through). A tenant without a budget writing the
 * same first shows that this disk is fast enough for the check to tell
 * (else the suite skips: it could not fail). The group's io.max names the
 * image's device. Runs on a pure cgroup-v2 kernel only (the guest of
 * tests/: 77 elsewhere, and without root, loop devices, mkfs.ext4 or the
 * io controller). */
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

#define BUDGET_BPS (2LL << 20)
#define WRITE_BYTES (8LL << 20)
#define DD "dd if=/dev/zero of=/workspace/f bs=1M count=8 oflag=direct 2>&1 && rm /workspace/f && echo done"

static struct it_server srv;
static char *tok, *tok_globex, *tok_ops;
static long base;

static const struct it_tok toks[] = {
    {&tok, "acme", NULL},
    {&tok_globex, "globex", NULL},
    {&tok_ops, "ops", "admin"},
};

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", "disk-quota=image",
				     "--set", "tenant-disk-quota-bytes=50331648",
				     "--set", "tenant-disk-quota-inodes=2000",
				     NULL};
	int rc = it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
	base = strtol(srv.uid_base + strlen("uid-base="), NULL, 10);
	return rc;
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* The harness adds acme, globex and ops in that order (slots 0, 1, 2). */
static long uid_of(const char *tenant)
{
	return base + (strcmp(tenant, "acme") == 0 ? 0 : strcmp(tenant, "globex") == 0 ? 1 : 2);
}

/* The tenant's group: a sibling of the server's own leaf (<root>/server,
 * where it moved itself at start), as /proc/<pid>/cgroup says. */
static char *group_of(const char *tenant)
{
	char *path = xasprintf("/proc/%d/cgroup", (int)srv.pid);
	char *t = it_read_file(path, NULL);
	free(path);
	assert_non_null(t);
	char *rel = strstr(t, "0::");
	assert_non_null(rel);
	rel += 3;
	rel[strcspn(rel, "\n")] = '\0';
	char *slash = strrchr(rel, '/');
	assert_non_null(slash);
	assert_string_equal(slash, "/server");
	*slash = '\0';
	char *g = xasprintf("/sys/fs/cgroup%s/u%ld", rel, uid_of(tenant));
	free(t);
	return g;
}

/* "MAJ:MIN" of tenant's workspace mount (its image's loop device), from
 * the server's mountinfo (the images are mounted in its namespace). */
static void dev_of(const char *tenant, char *out, size_t outsz)
{
	char *path = xasprintf("/proc/%d/mountinfo", (int)srv.pid);
	char *ws = xasprintf(" %s/tenants/%s/workspace ", srv.dir, tenant);
	char *mi = it_read_file(path, NULL);
	assert_non_null(mi);
	out[0] = '\0';
	for (char *line = mi; *line; line += strcspn(line, "\n"), line += *line == '\n') {
		unsigned id, parent, maj, min;
		char *end = line + strcspn(line, "\n"), c = *end;
		*end = '\0';
		if (strstr(line, ws) && sscanf(line, "%u %u %u:%u", &id, &parent, &maj, &min) == 4)
			snprintf(out, outsz, "%u:%u", maj, min);
		*end = c;
	}
	free(mi);
	free(ws);
	free(path);
	assert_true(out[0] != '\0');
}

/* wbytes of dev in tenant's io.stat (0 while the group or the line is
 * not there yet: nothing was written). */
static long long wbytes(const char *tenant, const char *dev)
{
	char *g = group_of(tenant), *path = xasprintf("%s/io.stat", g);
	char *t = it_read_file(path, NULL);
	long long v = 0;
	char *key = xasprintf("%s ", dev);
	/* "MAJ:MIN rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N", a line a device */
	for (char *line = t; line && *line; line += strcspn(line, "\n"), line += *line == '\n') {
		size_t len = strcspn(line, "\n");
		char *w = strstr(line, " wbytes=");
		if (strncmp(line, key, strlen(key)) == 0 && w && w < line + len)
			v = strtoll(w + strlen(" wbytes="), NULL, 10);
	}
	free(key);
	free(t);
	free(path);
	free(g);
	return v;
}

/* Run DD as tenant; the bytes its group wrote to its image and the
 * command's wall time (s). */
static void write_8m(const char *token, const char *tenant, long long *bytes, double *secs)
{
	char dev[32];
	dev_of(tenant, dev, sizeof dev);
	long long before = wbytes(tenant, dev);
	long t0 = it_now_ms();
	json_t *r = ex_ok(&srv, token, NULL, json_pack("{s:s, s:i}", "command", DD, "timeout_s", 120));
	long t1 = it_now_ms();
	const char *out = ex_stdout_ok(r);
	assert_non_null(strstr(out, "done\n"));
	json_t *d = json_object_get(r, "duration_ms");
	/* the command's own time where the result says it, else the request's */
	*secs = (json_is_integer(d) && json_integer_value(d) > 0 ? (double)json_integer_value(d)
								 : (double)(t1 - t0)) /
		1000.0;
	json_decref(r);
	*bytes = wbytes(tenant, dev) - before;
	fprintf(stderr, "%s: %lld bytes to %s in %.2f s: %.2f MiB/s\n", tenant, *bytes, dev, *secs,
		(double)*bytes / *secs / (1 << 20));
}

static void test_write_budget_holds(void **state)
{
	(void)state;
	long long bytes = 0;
	double secs = 0;
	/* without a budget: is this disk fast enough to tell? */
	write_8m(tok_globex, "globex", &bytes, &secs);
	assert_true(bytes >= WRITE_BYTES);
	if ((double)bytes / secs <= 1.5 * (double)BUDGET_BPS) {
		fprintf(stderr, "unthrottled writes here are at most 1.5x the budget: the check could not "
				"fail; skipped\n");
		skip();
	}

	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"tenant_io_write_bps\": 2097152}", NULL), 200);
	/* a first command makes the group and writes its io.max */
	json_t *r = ex_run(&srv, tok, "true");
	json_decref(r);
	char dev[32], want[96], *g = group_of("acme"), *path = xasprintf("%s/io.max", g);
	dev_of("acme", dev, sizeof dev);
	snprintf(want, sizeof want, "%s rbps=max wbps=%lld riops=max wiops=max", dev, BUDGET_BPS);
	char *iomax = it_read_file(path, NULL);
	assert_non_null(iomax);
	if (!strstr(iomax, want))
		fprintf(stderr, "%s: \"%s\", expected a line \"%s\"\n", path, iomax, want);
	assert_non_null(strstr(iomax, want));
	free(iomax);
	free(path);
	free(g);

	write_8m(tok, "acme", &bytes, &secs);
	assert_true(bytes >= WRITE_BYTES); /* the kernel counted the writes: > 0, all of them */
	assert_true((double)bytes / secs <= 1.5 * (double)BUDGET_BPS);

	/* the budget gone, the tenant writes at the disk's speed again */
	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"tenant_io_write_bps\": null}", NULL), 200);
	write_8m(tok, "acme", &bytes, &secs);
	assert_true((double)bytes / secs > 1.5 * (double)BUDGET_BPS);
}

int main(void)
{
	struct statfs f;
	if (statfs("/sys/fs/cgroup", &f) != 0 || f.f_type != CGROUP2_SUPER_MAGIC) {
		fprintf(stderr,
			"test_cgroup2_io: /sys/fs/cgroup is not cgroup2 (the v2 guest runs it); skipped\n");
		return 77;
	}
	char *ctl = it_read_file("/sys/fs/cgroup/cgroup.controllers", NULL);
	char *padded = xasprintf(" %s ", ctl ? ctl : "");
	padded[strcspn(padded, "\n")] = ' ';
	bool io = strstr(padded, " io ") != NULL;
	free(padded);
	free(ctl);
	if (geteuid() != 0 || access("/dev/loop-control", F_OK) != 0 ||
	    it_sh_quiet("command -v mkfs.ext4") != 0 || !io) {
		fprintf(stderr, "test_cgroup2_io: needs root, loop devices, mkfs.ext4 and the io "
				"controller; skipped\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_write_budget_holds),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
