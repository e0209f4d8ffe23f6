/* The pure cgroup-v2 host issue 27's tests run on (label cgroup2; the
 * CTest test vm_cgroup2 runs every cgroup2 test inside tests/vm's guest):
 * /sys/fs/cgroup is cgroup2, no v1 hierarchy holds a controller the v2
 * driver needs, and memory, pids, cpu and io are on the unified hierarchy
 * and available to this process's own group, to enable for its children.
 *
 * Exits 77 on a host whose /sys/fs/cgroup is not cgroup2 (a hybrid host,
 * as the project's machines are), except in the guest (SANDBOXD_VM_GUEST=1,
 * set by tests/vm/run), where that is a failure: there the hookup itself
 * is under test. Outside the guest, a group without a controller its
 * host's root has (a session systemd delegates no io to) skips that case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <linux/magic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>

#define CGROOT "/sys/fs/cgroup"

static const char *const needed[] = {"memory", "pids", "cpu", "io"};

static bool in_guest(void)
{
	const char *g = getenv("SANDBOXD_VM_GUEST");
	return g && strcmp(g, "1") == 0;
}

/* Whether the space-separated list in the file at path (cgroup.controllers)
 * names ctl. */
static bool file_lists(const char *path, const char *ctl)
{
	char line[1024];
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool found = false;
	if (fgets(line, sizeof line, f)) {
		for (char *p = line; *p && !found;) {
			size_t n = strcspn(p, " \n");
			found = n == strlen(ctl) && strncmp(p, ctl, n) == 0;
			p += n;
			p += strspn(p, " \n");
		}
	}
	fclose(f);
	return found;
}

/* This process's group, from /proc/self/cgroup's "0::" line ("/" for the
 * root): 0 or -1 when there is none. */
static int own_group(char *out, size_t len)
{
	char line[4096];
	int rc = -1;
	FILE *f = fopen("/proc/self/cgroup", "r");
	if (!f)
		return -1;
	while (rc < 0 && fgets(line, sizeof line, f)) {
		if (strncmp(line, "0::", 3) != 0)
			continue;
		line[strcspn(line, "\n")] = '\0';
		if ((size_t)snprintf(out, len, "%s", line + 3) < len)
			rc = 0;
	}
	fclose(f);
	return rc;
}

static void test_controllers_on_the_unified_hierarchy(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof needed / sizeof *needed; i++) {
		if (!file_lists(CGROOT "/cgroup.controllers", needed[i]))
			fail_msg("%s is not in " CGROOT "/cgroup.controllers", needed[i]);
	}
}

/* /proc/cgroups gives each controller's hierarchy: 0 is the unified one
 * (or none); any other is a v1 mount that keeps it from v2. io is "blkio"
 * there. */
static void test_no_v1_hierarchy_holds_them(void **state)
{
	(void)state;
	static const char *const v1names[] = {"memory", "pids", "cpu", "blkio"};
	char line[256], name[64];
	int hier, ncg, enabled, seen = 0;
	FILE *f = fopen("/proc/cgroups", "r");
	assert_non_null(f);
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, "%63s %d %d %d", name, &hier, &ncg, &enabled) != 4)
			continue; /* the header */
		for (size_t i = 0; i < sizeof v1names / sizeof *v1names; i++) {
			if (strcmp(name, v1names[i]) != 0)
				continue;
			seen++;
			if (hier != 0)
				fail_msg("%s is on cgroup v1 hierarchy %d", name, hier);
			if (!enabled)
				fail_msg("%s is disabled (cgroup_disable= on the kernel's command line?)",
					 name);
		}
	}
	fclose(f);
	assert_int_equal(seen, 4);
}

static void test_available_to_our_group(void **state)
{
	(void)state;
	char grp[2048], path[2200];
	assert_int_equal(own_group(grp, sizeof grp), 0);
	snprintf(path, sizeof path, CGROOT "%s/cgroup.controllers", strcmp(grp, "/") == 0 ? "" : grp);
	/* tests/vm/run puts the command in a service's group, as systemd
	 * does with Delegate=yes, never in the root, where cgroup v2's
	 * no-internal-processes rule would not bite. */
	if (in_guest() && strcmp(grp, "/") == 0)
		fail_msg("the guest runs its command in the root group");
	for (size_t i = 0; i < sizeof needed / sizeof *needed; i++) {
		if (file_lists(path, needed[i]))
			continue;
		if (in_guest())
			fail_msg("%s is not available to %s (%s)", needed[i], grp, path);
		fprintf(stderr, "skipped: %s is not delegated to this group (%s)\n", needed[i], grp);
		skip();
	}
}

int main(void)
{
	struct statfs sf;
	if (statfs(CGROOT, &sf) != 0 || sf.f_type != CGROUP2_SUPER_MAGIC) {
		if (in_guest()) {
			fprintf(stderr, "test_cgroup2_host: " CGROOT " is not cgroup2 inside the guest\n");
			return 1;
		}
		fprintf(stderr, "test_cgroup2_host: skipped: " CGROOT " is not cgroup2 here (a hybrid host); "
				"CTest's vm_cgroup2 runs this in a pure cgroup-v2 guest\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_controllers_on_the_unified_hierarchy),
	    cmocka_unit_test(test_no_v1_hierarchy_holds_them),
	    cmocka_unit_test(test_available_to_our_group),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
