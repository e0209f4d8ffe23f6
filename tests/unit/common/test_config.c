/* Configuration: defaults, then the file, then the command line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/timeutil.h"

static char *write_tmp(const char *text)
{
	static char path[64];
	snprintf(path, sizeof path, "/tmp/sandboxd-cfg-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void test_defaults(void **state)
{
	(void)state;
	struct sbx_config c;
	cfg_defaults(&c);
	cfg_finish(&c);
	assert_string_equal(c.listen, "127.0.0.1:8080");
	assert_string_equal(c.data_dir, "./sandboxd-data");
	assert_string_equal(c.db_path, "./sandboxd-data/sandboxd.db");
	assert_string_equal(c.backend, "bwrap");
	assert_int_equal(c.leeway_s, 30);
	assert_int_equal(c.max_buffered_bytes, 16 * 1024 * 1024);
	assert_int_equal(c.heartbeat_ms, 2000);
	assert_int_equal(c.max_output_bytes_default, 64000);
	assert_false(c.allow_unsafe_local);
	assert_false(c.metrics_public);
	assert_null(c.tls_cert);
	/* bounded by default: rows older than 30 days go, unauthenticated
	 * rows are rate-limited per address */
	assert_int_equal(c.retention_max_age_s, 30 * 86400);
	assert_int_equal(c.audit_unauth_per_s, 10);
	assert_int_equal(c.audit_unauth_burst, 20);
	cfg_free(&c);
}

static void test_file_then_flags(void **state)
{
	(void)state;
	struct sbx_config c;
	char err[256];
	cfg_defaults(&c);
	char *path =
	    write_tmp("{\"listen\": \"127.0.0.1:9000\", \"data_dir\": \"/srv/x\", \"heartbeat-ms\": 750,"
		      " \"metrics-public\": true}");
	assert_int_equal(cfg_load_file(&c, path, err, sizeof err), 0);
	unlink(path);
	assert_string_equal(c.listen, "127.0.0.1:9000");
	assert_int_equal(c.heartbeat_ms, 750);
	assert_true(c.metrics_public);
	/* the command line comes after the file and wins */
	assert_int_equal(cfg_set(&c, "listen", "[::1]:9001", err, sizeof err), 0);
	assert_int_equal(cfg_set(&c, "heartbeat_ms", "100", err, sizeof err), 0);
	cfg_finish(&c);
	assert_string_equal(c.listen, "[::1]:9001");
	assert_int_equal(c.heartbeat_ms, 100);
	assert_string_equal(c.data_dir, "/srv/x");
	assert_string_equal(c.db_path, "/srv/x/sandboxd.db");
	cfg_free(&c);
}

static void test_bad_input(void **state)
{
	(void)state;
	struct sbx_config c;
	char err[256];
	cfg_defaults(&c);
	assert_int_equal(cfg_set(&c, "no-such-key", "1", err, sizeof err), -ENOENT);
	assert_int_equal(cfg_set(&c, "heartbeat-ms", "10", err, sizeof err), -EINVAL); /* below 50 */
	assert_int_equal(cfg_set(&c, "heartbeat-ms", "12x", err, sizeof err), -EINVAL);
	assert_int_equal(cfg_set(&c, "use-cgroups", "yes", err, sizeof err), -EINVAL);
	assert_int_equal(c.heartbeat_ms, 2000); /* unchanged by the refusals */
	const char *bad[] = {"[1, 2]",		"{\"heartbeat-ms\": \"fast\"}", "{\"unknown\": 1}",
			     "{\"listen\": 5}", "{\"a\": 1, \"a\": 2}",		"not json"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *path = write_tmp(bad[i]);
		assert_int_equal(cfg_load_file(&c, path, err, sizeof err), -EINVAL);
		assert_true(strlen(err) > 0);
		unlink(path);
	}
	assert_int_equal(cfg_load_file(&c, "/nonexistent/sandboxd.json", err, sizeof err), -EINVAL);
	cfg_free(&c);
}

/* The tenants' I/O budgets: 0 (none) by default, up to 100 GB/s and 10M
 * operations per second. */
static void test_io_budgets(void **state)
{
	(void)state;
	struct sbx_config c;
	char err[256];
	cfg_defaults(&c);
	assert_int_equal(c.tenant_io_read_bps, 0);
	assert_int_equal(c.tenant_io_write_bps, 0);
	assert_int_equal(c.tenant_io_read_iops, 0);
	assert_int_equal(c.tenant_io_write_iops, 0);
	assert_int_equal(cfg_set(&c, "tenant-io-write-bps", "100000000000", err, sizeof err), 0);
	assert_int_equal(c.tenant_io_write_bps, 100000000000LL);
	assert_int_equal(cfg_set(&c, "tenant_io_read_iops", "10000000", err, sizeof err), 0);
	assert_int_equal(c.tenant_io_read_iops, 10000000);
	assert_int_equal(cfg_set(&c, "tenant-io-write-bps", "100000000001", err, sizeof err), -EINVAL);
	assert_int_equal(cfg_set(&c, "tenant-io-read-bps", "-1", err, sizeof err), -EINVAL);
	assert_int_equal(cfg_set(&c, "tenant-io-write-iops", "10000001", err, sizeof err), -EINVAL);
	assert_int_equal(c.tenant_io_write_iops, 0);
	cfg_free(&c);
}

/* The tenants' CPU budget: millicores, "auto" (every core this process
 * may use but one, at least one), 0 for none; 1..9 is below the kernel's
 * least quota and refused, as are fractions, negatives and other words. */
static void test_cpu_budget(void **state)
{
	(void)state;
	struct sbx_config c;
	char err[256];
	cfg_defaults(&c);
	cpu_set_t set;
	assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
	int64_t cpus = CPU_COUNT(&set), want = cpus > 2 ? (cpus - 1) * 1000 : 1000;
	assert_int_equal(cfg_cpu_auto(), want);
	assert_int_equal(c.tenant_cpu_budget_millicores, want);
	assert_int_equal(cfg_set(&c, "tenant-cpu-budget-millicores", "1500", err, sizeof err), 0);
	assert_int_equal(c.tenant_cpu_budget_millicores, 1500);
	assert_int_equal(cfg_set(&c, "tenant_cpu_budget_millicores", "0", err, sizeof err), 0);
	assert_int_equal(c.tenant_cpu_budget_millicores, 0);
	assert_int_equal(cfg_set(&c, "tenant-cpu-budget-millicores", "10", err, sizeof err), 0);
	assert_int_equal(c.tenant_cpu_budget_millicores, 10);
	assert_int_equal(cfg_set(&c, "tenant-cpu-budget-millicores", "auto", err, sizeof err), 0);
	assert_int_equal(c.tenant_cpu_budget_millicores, want);
	static const char *const bad[] = {"9", "1", "-1000", "1.5", "", "1000m", "AUTO", "1000001", "0x10"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		c.tenant_cpu_budget_millicores = 777;
		if (cfg_set(&c, "tenant-cpu-budget-millicores", bad[i], err, sizeof err) != -EINVAL)
			fail_msg("accepted tenant-cpu-budget-millicores=\"%s\"", bad[i]);
		assert_non_null(strstr(err, "tenant-cpu-budget-millicores"));
		assert_int_equal(c.tenant_cpu_budget_millicores, 777);
	}
	/* The file takes a number or "auto", nothing else. */
	char *path = write_tmp("{\"tenant-cpu-budget-millicores\": 2500}");
	assert_int_equal(cfg_load_file(&c, path, err, sizeof err), 0);
	unlink(path);
	assert_int_equal(c.tenant_cpu_budget_millicores, 2500);
	path = write_tmp("{\"tenant_cpu_budget_millicores\": \"auto\"}");
	assert_int_equal(cfg_load_file(&c, path, err, sizeof err), 0);
	unlink(path);
	assert_int_equal(c.tenant_cpu_budget_millicores, want);
	static const char *const bad_files[] = {
	    "{\"tenant-cpu-budget-millicores\": 1.5}", "{\"tenant-cpu-budget-millicores\": 5}",
	    "{\"tenant-cpu-budget-millicores\": true}", "{\"tenant-cpu-budget-millicores\": \"1500\"}"};
	for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
		path = write_tmp(bad_files[i]);
		if (cfg_load_file(&c, path, err, sizeof err) != -EINVAL)
			fail_msg("accepted the file %s", bad_files[i]);
		unlink(path);
	}
	cfg_free(&c);
}

static void test_rfc3339(void **state)
{
	(void)state;
	int64_t ms = 0;
	char out[40];
	assert_int_equal(rfc3339_parse("2026-11-29T09:19:17Z", &ms), 0);
	assert_int_equal(ms, 1795943957000LL);
	rfc3339_ms(ms + 123, out, sizeof out);
	assert_string_equal(out, "2026-11-29T09:19:17.123Z");
	assert_int_equal(rfc3339_parse("2026-11-29T10:19:17.5+01:00", &ms), 0);
	assert_int_equal(ms, 1795943957500LL);
	assert_int_equal(rfc3339_parse("1795943957000", &ms), 0);
	assert_int_equal(ms, 1795943957000LL);
	assert_int_equal(rfc3339_parse("yesterday", &ms), -EINVAL);
	assert_int_equal(rfc3339_parse("2026-13-01T00:00:00Z", &ms), -EINVAL);
	assert_int_equal(rfc3339_parse("2026-11-29T09:19:17", &ms), -EINVAL);
}

/* The reference (sandboxd config reference) reads every key's meaning
 * from the table: none missing, each one line, names unique, and the keys
 * marked as having a flag are those server/main.c has a flag for. */
static void test_reference_table(void **state)
{
	(void)state;
	static const char *const flagged[] = {
	    "listen",	"data-dir", "backend", "allow-unsafe-local", "allow-uncontained",
	    "tls-cert", "tls-key"};
	size_t n = cfg_key_count(), nflag = 0;
	assert_true(n > 80);
	for (size_t i = 0; i < n; i++) {
		struct cfg_key k;
		cfg_key_get(i, &k);
		assert_non_null(k.help);
		assert_true(strlen(k.help) > 5);
		assert_null(strchr(k.help, '\n'));
		assert_non_null(k.type);
		for (size_t j = 0; j < i; j++) {
			struct cfg_key o;
			cfg_key_get(j, &o);
			assert_string_not_equal(o.name, k.name);
		}
		bool listed = false;
		for (size_t j = 0; j < sizeof flagged / sizeof flagged[0]; j++)
			listed = listed || strcmp(flagged[j], k.name) == 0;
		assert_int_equal(k.flag, listed);
		nflag += k.flag;
	}
	assert_int_equal(nflag, sizeof flagged / sizeof flagged[0]);
	struct sbx_config c;
	char err[256];
	cfg_defaults(&c);
	assert_string_equal(c.docs_dir, "/usr/share/sandboxd/docs");
	assert_int_equal(cfg_set(&c, "docs-dir", "", err, sizeof err), 0);
	assert_string_equal(c.docs_dir, "");
	cfg_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults),	    cmocka_unit_test(test_file_then_flags),
	    cmocka_unit_test(test_bad_input),	    cmocka_unit_test(test_cpu_budget),
	    cmocka_unit_test(test_io_budgets),	    cmocka_unit_test(test_rfc3339),
	    cmocka_unit_test(test_reference_table),
	};
	return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
