/* The network allowlist's grammar (sbx_net_allow_check / _parse) and what
 * it becomes: pasta's loopback forwards and the nft ruleset. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"
#include "sandbox/netplan.h"

static void good(const char *spec)
{
	char err[256] = "";

	if (sbx_net_allow_check(spec, err, sizeof(err)) != 0)
		fail_msg("'%s' refused: %s", spec, err);
}

/* Refused, with a reason that contains want. */
static void bad(const char *spec, const char *want)
{
	char err[256] = "";

	if (sbx_net_allow_check(spec, err, sizeof(err)) != -EINVAL)
		fail_msg("'%s' accepted", spec ? spec : "(null)");
	if (!strstr(err, want))
		fail_msg("'%s': reason '%s' does not say '%s'", spec ? spec : "(null)", err, want);
}

static void test_good_specs(void **state)
{
	(void)state;
	good("example.com");
	good("example.com:443");
	good("pypi.org:443, files.pythonhosted.org:443 ,github.com:22-443");
	good("10.0.0.0/8");
	good("10.0.0.0/8:80-90");
	good("0.0.0.0/0:443");
	good("192.0.2.7");
	good("127.0.0.1:8080");
	good("127.0.0.1:1-256");
	good("[::1]:8080");
	good("[2001:db8::1]");
	good("[2001:db8::/32]:443");
	good("[::/0]:443");
	good("localhost:5000");
	good("my_host-1.internal");
	good("a:1,b:65535");
}

static void test_bad_specs(void **state)
{
	(void)state;
	bad(NULL, "empty");
	bad("", "empty");
	bad("a,,b", "empty entry");
	bad("a,", "empty entry");
	bad(" , ", "empty entry");
	bad("example.com:0", "port");
	bad("example.com:65536", "port");
	bad("example.com:", "port");
	bad("example.com:http", "port");
	bad("example.com:90-80", "LO <= HI");
	bad("example.com:-80", "port");
	bad("example.com:+80", "port");
	bad("::1", "brackets");
	bad("2001:db8::1:443", "brackets");
	bad("[::1", "brackets");
	bad("[::1]x", "brackets");
	bad("[10.0.0.1]", "IPv6");
	bad("[fe80::1]:80", "link-local");
	bad("[fe80::/16]", "link-local");
	bad("[fd00:ec2::254]:80", "metadata");
	bad("169.254.169.254", "metadata");
	bad("169.254.0.0/16:80", "metadata");
	bad("100.100.100.200:80", "metadata");
	bad("168.63.129.16", "metadata");
	bad("10.0.0.1/8", "bits set");
	bad("10.0.0.0/33", "CIDR");
	bad("10.0.0.0/", "CIDR");
	bad("10.0.0/8", "CIDR");
	bad("10.1.2", "host name");
	bad("-bad.example", "host name");
	bad("bad-.example", "host name");
	bad("a..b", "host name");
	bad("exa mple.com", "host name");
	bad("héllo.example", "host name");
	bad("0.0.0.0:80", "unspecified");
	bad("[::]:80", "unspecified");
	bad("127.0.0.1", "loopback");
	bad("127.0.0.2:80", "loopback");
	bad("127.0.0.0/8:80", "loopback");
	bad("[::1]", "loopback");
	bad("127.0.0.1:1-1000", "loopback ports");
	bad("127.0.0.1:1-200,[::1]:1-100", "loopback ports");
}

static void test_limits(void **state)
{
	struct buf b;

	(void)state;
	buf_init(&b, 1 << 20);
	for (int i = 0; i < SBX_NET_ENTRIES_MAX; i++)
		buf_appendf(&b, "%sh%d.example", i ? "," : "", i);
	good(buf_cstr(&b));
	buf_appendf(&b, ",one.more");
	bad(buf_cstr(&b), "more than");
	buf_reset(&b);
	buf_appendf(&b, "%0*d.example", SBX_NET_SPEC_MAX, 1);
	bad(buf_cstr(&b), "longer than");
	buf_free(&b);
}

static void test_parse_fields(void **state)
{
	struct sbx_net_allow a = {0};
	char err[128];
	uint8_t want[16] = {0};

	(void)state;
	assert_int_equal(
	    sbx_net_allow_parse("example.com, 10.1.0.0/16:80-90, [2001:db8::]:443", &a, err, sizeof(err)), 0);
	assert_int_equal(a.n, 3);
	assert_int_equal(a.e[0].family, 0);
	assert_string_equal(a.e[0].name, "example.com");
	assert_int_equal(a.e[0].lo, 1);
	assert_int_equal(a.e[0].hi, 65535);
	assert_int_equal(a.e[1].family, AF_INET);
	assert_int_equal(a.e[1].prefix, 16);
	assert_int_equal(a.e[1].lo, 80);
	assert_int_equal(a.e[1].hi, 90);
	inet_pton(AF_INET, "10.1.0.0", want);
	assert_memory_equal(a.e[1].addr, want, 4);
	assert_int_equal(a.e[2].family, AF_INET6);
	assert_int_equal(a.e[2].prefix, 128);
	assert_int_equal(a.e[2].lo, 443);
	sbx_net_allow_clear(&a);
	assert_null(a.e);
}

/* The filter: loopback forwards only at the named family, metadata
 * before any allow, TCP to the allowed destinations, a reject last. */
static void test_ruleset(void **state)
{
	struct sbx_net_allow a = {0};
	struct buf rules, ports;
	char err[128];
	const char *r, *never, *allow, *last;

	(void)state;
	assert_int_equal(
	    sbx_net_allow_parse("127.0.0.1:8080,[::1]:9000-9001,0.0.0.0/0:443", &a, err, sizeof(err)), 0);
	buf_init(&rules, 1 << 20);
	buf_init(&ports, 1 << 20);
	assert_int_equal(sbx_net_ruleset(a.e, a.n, &rules), 0);
	assert_int_equal(sbx_net_pasta_ports(a.e, a.n, &ports), 0);
	assert_string_equal(buf_cstr(&ports), "8080,9000-9001");
	r = buf_cstr(&rules);
	assert_non_null(strstr(r, "policy drop;"));
	assert_non_null(strstr(r, "oif lo ip daddr 127.0.0.1 tcp dport { 8080 } accept"));
	assert_non_null(strstr(r, "oif lo ip6 daddr ::1 tcp dport { 9000-9001 } accept"));
	assert_non_null(strstr(r, "oif lo tcp dport { 8080,9000-9001 } reject"));
	never = strstr(r, "ip daddr 169.254.0.0/16 meta l4proto tcp reject with tcp reset");
	allow = strstr(r, "ip daddr 0.0.0.0/0 tcp dport 443 accept");
	last = strstr(r, "\t\tmeta l4proto tcp reject with tcp reset\n");
	assert_non_null(never);
	assert_non_null(strstr(r, "ip6 daddr fd00:ec2::254 reject"));
	assert_non_null(allow);
	assert_non_null(last);
	assert_true(never < allow && allow < last);
	assert_null(strstr(r, "udp"));
	buf_free(&rules);
	buf_reset(&ports);
	sbx_net_allow_clear(&a);

	/* One port named twice, ranges that overlap or touch: merged (pasta
	 * refuses overlapping forwards). */
	assert_int_equal(sbx_net_allow_parse("127.0.0.1:8080, [::1]:8080, 127.0.0.1:8079-8081, [::1]:9001, "
					     "[::1]:9000, 127.0.0.1:65535",
					     &a, err, sizeof(err)),
			 0);
	buf_init(&rules, 1 << 20);
	assert_int_equal(sbx_net_pasta_ports(a.e, a.n, &ports), 0);
	assert_string_equal(buf_cstr(&ports), "8079-8081,9000-9001,65535");
	assert_int_equal(sbx_net_ruleset(a.e, a.n, &rules), 0);
	assert_non_null(strstr(buf_cstr(&rules), "ip daddr 127.0.0.1 tcp dport { 8079-8081,65535 } accept"));
	assert_non_null(strstr(buf_cstr(&rules), "ip6 daddr ::1 tcp dport { 8080,9000-9001 } accept"));
	buf_free(&rules);
	buf_reset(&ports);
	sbx_net_allow_clear(&a);

	assert_int_equal(sbx_net_allow_parse("example.org:443", &a, err, sizeof(err)), 0);
	assert_int_equal(sbx_net_pasta_ports(a.e, 0, &ports), 0);
	assert_string_equal(buf_cstr(&ports), "none");
	buf_free(&ports);
	sbx_net_allow_clear(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_good_specs), cmocka_unit_test(test_bad_specs),
	    cmocka_unit_test(test_limits),     cmocka_unit_test(test_parse_fields),
	    cmocka_unit_test(test_ruleset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
