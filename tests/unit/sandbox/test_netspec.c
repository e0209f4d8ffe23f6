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

#include "allowlist_cases.h"
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
	for (size_t i = 0; i < sizeof(allowlist_good) / sizeof(allowlist_good[0]); i++)
		good(allowlist_good[i]);
	/* the egress rules' grammar grew the allowlist (sandbox/egress/rules.h) */
	good("*.github.com:443, *, !*.internal, !169.254.0.0/16, ![::1], !127.0.0.0/8");
}

static void test_bad_specs(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(allowlist_bad) / sizeof(allowlist_bad[0]); i++)
		bad(allowlist_bad[i].spec, allowlist_bad[i].want);
	/* no rules: the egress rules' "nothing allowed", but a policy says
	 * "none" for no network */
	bad("", "empty");
	bad(" none ", "empty");
}

/* Every new TCP connection out of the namespace is marked and bounded
 * (open at once, and per second), before any accept. */
static void test_conn_limits(void **state)
{
	struct sbx_net_allow a = {0};
	struct sbx_net_limits lim = {.conn_max = 7, .conn_per_s = 3};
	struct buf rules;
	char err[128];
	const char *r, *mark, *count, *rate, *accept;

	(void)state;
	assert_int_equal(sbx_net_allow_parse("127.0.0.1:8080,10.0.0.0/8:443", &a, err, sizeof(err)), 0);
	buf_init(&rules, 1 << 20);
	assert_int_equal(sbx_net_ruleset(a.e, a.n, &lim, &rules), 0);
	r = buf_cstr(&rules);
	mark = strstr(r, "ct state new oif != lo meta l4proto tcp meta mark set 0x5bd");
	assert_non_null(mark);
	assert_non_null(strstr(r, "ct state new oif lo tcp dport { 8080 } meta mark set 0x5bd"));
	count = strstr(r, "meta mark 0x5bd ct count over 7 reject with tcp reset");
	rate = strstr(r, "meta mark 0x5bd limit rate over 3/second burst 6 packets reject with tcp reset");
	accept = strstr(r, "accept");
	assert_non_null(count);
	assert_non_null(rate);
	assert_true(mark < count && count < rate && rate < accept);
	buf_reset(&rules);
	assert_int_equal(sbx_net_ruleset(a.e, a.n, NULL, &rules), 0);
	assert_non_null(strstr(buf_cstr(&rules), "ct count over 64 "));
	assert_non_null(strstr(buf_cstr(&rules), "limit rate over 10/second burst 20 packets"));
	buf_free(&rules);
	sbx_net_allow_clear(&a);
}

/* A name's addresses: internal ones only under a literal entry. */
static void test_internal(void **state)
{
	struct sbx_net_allow a = {0};
	uint8_t ip[16] = {0};
	char err[128];
	const char *inside[] = {"127.0.0.1",   "10.1.2.3",   "172.20.0.1",
				"192.168.1.1", "100.64.0.1", "169.254.169.254"};

	(void)state;
	for (size_t i = 0; i < sizeof(inside) / sizeof(inside[0]); i++) {
		inet_pton(AF_INET, inside[i], ip);
		if (!sbx_net_is_internal(AF_INET, ip))
			fail_msg("%s is not internal", inside[i]);
	}
	inet_pton(AF_INET, "192.0.2.1", ip);
	assert_false(sbx_net_is_internal(AF_INET, ip));
	inet_pton(AF_INET6, "::ffff:169.254.169.254", ip);
	assert_true(sbx_net_is_internal(AF_INET6, ip));
	inet_pton(AF_INET6, "fd12::1", ip);
	assert_true(sbx_net_is_internal(AF_INET6, ip));
	inet_pton(AF_INET6, "2001:db8::1", ip);
	assert_false(sbx_net_is_internal(AF_INET6, ip));
	assert_int_equal(sbx_net_allow_parse("db.example:5432,10.0.0.0/8:5432", &a, err, sizeof(err)), 0);
	inet_pton(AF_INET, "10.1.2.3", ip);
	assert_false(sbx_net_covers(&a.e[0], AF_INET, ip)); /* a name covers nothing */
	assert_true(sbx_net_covers(&a.e[1], AF_INET, ip));
	inet_pton(AF_INET, "11.1.2.3", ip);
	assert_false(sbx_net_covers(&a.e[1], AF_INET, ip));
	sbx_net_allow_clear(&a);
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
	assert_int_equal(sbx_net_ruleset(a.e, a.n, NULL, &rules), 0);
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
	assert_int_equal(sbx_net_ruleset(a.e, a.n, NULL, &rules), 0);
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

/* The pasta path (netns.c) until the egress gateway replaces it: the
 * wildcards and `*` it cannot resolve are left out, and a deny rule it
 * cannot honour refuses the command, though the policy accepts both. */
static void test_pasta_path(void **state)
{
	struct sbx_net_allow a = {0};
	char err[256] = "";

	(void)state;
	assert_int_equal(sbx_net_allow_parse("*.github.com:443, example.com:443, *", &a, err, sizeof(err)),
			 0);
	assert_int_equal(a.n, 1);
	assert_string_equal(a.e[0].name, "example.com");
	assert_int_equal(a.e[0].lo, 443);
	sbx_net_allow_clear(&a);
	good("example.com, !bad.example");
	assert_int_equal(sbx_net_allow_parse("example.com, !bad.example", &a, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'!bad.example': deny rules need the egress gateway"));
	assert_null(a.e);
	assert_int_equal(sbx_net_allow_parse("Example.COM", &a, err, sizeof(err)), 0);
	assert_string_equal(a.e[0].name, "example.com");
	sbx_net_allow_clear(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_good_specs), cmocka_unit_test(test_bad_specs),
	    cmocka_unit_test(test_limits),     cmocka_unit_test(test_parse_fields),
	    cmocka_unit_test(test_ruleset),    cmocka_unit_test(test_conn_limits),
	    cmocka_unit_test(test_internal),   cmocka_unit_test(test_pasta_path),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
