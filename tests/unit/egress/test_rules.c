/* The egress rules (sandbox/egress/rules.h): the grammar (the old
 * allowlist's and what it grew), and the decisions the gateway asks per
 * connection, with the reasons a model reads. Only documentation
 * addresses (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32) and
 * the classes' own ranges appear; nothing is dialled. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "allowlist_cases.h"
#include "common/buf.h"
#include "sandbox/egress/rules.h"

static struct sbx_egress_rules *rules(const char *spec)
{
	struct sbx_egress_rules *r = NULL;
	char err[256] = "";

	if (sbx_egress_rules_parse(spec, &r, err, sizeof(err)) != 0)
		fail_msg("'%s' refused: %s", spec, err);
	return r;
}

static void good(const char *spec)
{
	struct sbx_egress_rules *r = rules(spec);

	sbx_egress_rules_unref(&r);
	assert_null(r);
}

/* Refused, with a reason that contains want; *out untouched. */
static void bad(const char *spec, const char *want)
{
	struct sbx_egress_rules *r = (struct sbx_egress_rules *)&r;
	char err[256] = "";

	if (sbx_egress_rules_parse(spec, &r, err, sizeof(err)) != -EINVAL)
		fail_msg("'%s' accepted", spec ? spec : "(null)");
	assert_ptr_equal(r, &r);
	if (!strstr(err, want))
		fail_msg("'%s': reason '%s' does not say '%s'", spec ? spec : "(null)", err, want);
}

/* name on port: allowed (want NULL) or refused with a reason containing want. */
static void name_is(const char *spec, const char *name, uint16_t port, const char *want)
{
	struct sbx_egress_rules *r = rules(spec);
	char why[SBX_EGRESS_WHY_MAX] = "";
	bool ok = sbx_egress_rules_name(r, name, port, why, sizeof(why));

	if (ok != !want)
		fail_msg("'%s': %s:%u %s (%s)", spec, name, port, ok ? "allowed" : "refused", why);
	if (want && !strstr(why, want))
		fail_msg("'%s': %s:%u: reason '%s' does not say '%s'", spec, name, port, why, want);
	sbx_egress_rules_unref(&r);
}

static void addr_is(const char *spec, const char *addr, uint16_t port, bool from_name, const char *want)
{
	struct sbx_egress_rules *r = rules(spec);
	char why[SBX_EGRESS_WHY_MAX] = "";
	uint8_t a[16];
	int family = strchr(addr, ':') ? AF_INET6 : AF_INET;
	bool ok;

	assert_int_equal(inet_pton(family, addr, a), 1);
	ok = sbx_egress_rules_addr(r, family, a, port, from_name, why, sizeof(why));
	if (ok != !want)
		fail_msg("'%s': %s port %u (%s) %s (%s)", spec, addr, port,
			 from_name ? "resolved" : "dialled", ok ? "allowed" : "refused", why);
	if (want && !strstr(why, want))
		fail_msg("'%s': %s port %u: reason '%s' does not say '%s'", spec, addr, port, why, want);
	sbx_egress_rules_unref(&r);
}

/* Every form the old allowlist took, with its refusals. */
static void test_old_forms(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(allowlist_good) / sizeof(allowlist_good[0]); i++)
		good(allowlist_good[i]);
	for (size_t i = 0; i < sizeof(allowlist_bad) / sizeof(allowlist_bad[0]); i++)
		bad(allowlist_bad[i].spec, allowlist_bad[i].want);
	/* refusals it grew: IPv4-compatible IPv6, and a deny rule's loopback
	 * ports are no ports granted */
	bad("[::a9fe:a9fe]:80", "never reachable");
	bad("[::/96]", "never reachable");
	bad("*.example.com, 127.0.0.1:1-200, !127.0.0.1:1-200, [::1]:1-100", "loopback ports");
}

/* Wildcards, any name, deny rules, ports on every kind. */
static void test_new_forms(void **state)
{
	struct sbx_egress_rules *r;

	(void)state;
	good("*.github.com");
	good("*.github.com:443, *:80, *.example.com:8000-8100");
	good("*, !*.internal");
	good("!example.com");
	good("!169.254.0.0/16, ![fe80::/10], !100.100.100.200, ![::ffff:0:0/96]"); /* denying is always
										      allowed */
	good("!127.0.0.0/8, ![::1], !127.0.0.1, !0.0.0.0/0, !0.0.0.0"); /* loopback: no port needed */
	good("!*.example.com:22, !10.0.0.0/8:1-1024, ![2001:db8::/32]:443");
	good("*.Example.COM");
	good("");
	good("none");
	good("  none  ");
	bad("*foo.example.com", "wildcard");
	bad("a.*.example.com", "wildcard");
	bad("*.*.example.com", "wildcard");
	bad("**", "wildcard");
	bad("*.", "wildcard");
	bad("*.10", "wildcard");
	bad("!", "host name");
	bad("!!example.com", "host name");
	bad("! example.com", "host name");
	bad("!10.0.0.1/8", "bits set");
	bad("!*.example.com:0", "port");
	good("*, none"); /* a name there, as before */
	r = rules(" none ");
	assert_string_equal(sbx_egress_rules_spec(r), " none ");
	sbx_egress_rules_unref(&r);
}

static void test_limits(void **state)
{
	struct buf b;

	(void)state;
	buf_init(&b, 1 << 20);
	for (int i = 0; i < SBX_EGRESS_RULES_MAX; i++)
		buf_appendf(&b, "%s%s%d.example", i ? "," : "", i % 2 ? "!*.h" : "h", i);
	good(buf_cstr(&b));
	buf_appendf(&b, ",one.more");
	bad(buf_cstr(&b), "more than 64");
	buf_reset(&b);
	buf_appendf(&b, "%0*d.example", SBX_EGRESS_SPEC_MAX, 1);
	bad(buf_cstr(&b), "longer than");
	buf_free(&b);
}

static void test_wildcards(void **state)
{
	(void)state;
	name_is("*.github.com", "api.github.com", 443, NULL);
	name_is("*.github.com", "a.b.github.com", 22, NULL);
	name_is("*.github.com", "github.com", 443, "not in the allowlist");
	name_is("*.github.com", "evilgithub.com", 443, "not in the allowlist");
	name_is("*.github.com", "api.github.com.evil.example", 443, "not in the allowlist");
	name_is("*.GitHub.com", "api.github.com", 443, NULL);
	name_is("PyPI.org", "pypi.org", 443, NULL);
	name_is("pypi.org", "www.pypi.org", 443, "not in the allowlist");
	name_is("*", "anything.example", 443, NULL);
	name_is("*", "localhost", 1, NULL);
	name_is("", "example.com", 443, "not in the allowlist");
	name_is("none", "example.com", 443, "not in the allowlist");
	name_is("10.0.0.0/8, 0.0.0.0/0", "example.com", 443, "not in the allowlist");
}

/* Deny rules win whatever their order, and name the rule. */
static void test_deny_wins(void **state)
{
	(void)state;
	name_is("*, !*.internal", "db.internal", 443, "denied by rule !*.internal");
	name_is("!*.internal, *", "db.internal", 443, "denied by rule !*.internal");
	name_is("*.internal, !*.internal", "db.internal", 443, "denied by rule !*.internal");
	name_is("*, !*.internal", "example.com", 443, NULL);
	name_is("*, !*.internal", "internal", 443, NULL);
	name_is("  *  ,  !evil.example  ", "evil.example", 80, "denied by rule !evil.example");
	name_is("*.example.com, !api.example.com:22", "api.example.com", 443, NULL);
	name_is("*.example.com, !api.example.com:22", "api.example.com", 22,
		"denied by rule !api.example.com:22");
	name_is("*, !*:25", "mail.example", 25, "denied by rule !*:25");
}

static void test_ports(void **state)
{
	(void)state;
	name_is("pypi.org:443", "pypi.org", 443, NULL);
	name_is("pypi.org:443", "pypi.org", 22, "port 22 not allowed for pypi.org");
	name_is("example.com:8000-8100", "example.com", 8000, NULL);
	name_is("example.com:8000-8100", "example.com", 8100, NULL);
	name_is("example.com:8000-8100", "example.com", 7999, "port 7999 not allowed for example.com");
	name_is("example.com:8000-8100", "example.com", 8101, "port 8101 not allowed");
	name_is("example.com:443, example.com:80", "example.com", 80, NULL);
	name_is("*.example.com:443", "www.example.com", 80, "port 80 not allowed for www.example.com");
	name_is("*:443", "any.example", 443, NULL);
	name_is("example.com", "example.com", 65535, NULL);
	name_is("example.com", "other.example", 443, "not in the allowlist");
}

/* Port 0: a DNS question, answered when some allow rule matches the name
 * and no deny rule matching it covers every port. */
static void test_dns_question(void **state)
{
	(void)state;
	name_is("pypi.org:443", "pypi.org", 0, NULL);
	name_is("*.example.com:8000-8100", "a.example.com", 0, NULL);
	name_is("*, !*.internal", "db.internal", 0, "denied by rule !*.internal");
	name_is("*, !db.internal:22", "db.internal", 0, NULL);
	name_is("*, !db.internal:1-65535", "db.internal", 0, "denied by rule");
	name_is("pypi.org:443", "example.com", 0, "not in the allowlist");
	name_is("10.0.0.0/8", "example.com", 0, "not in the allowlist");
}

/* What the command sends as a name may be an address: no name rule
 * matches it, `*` included (the address rules decide it). */
static void test_not_names(void **state)
{
	char name[300];

	(void)state;
	name_is("*", "192.0.2.1", 443, "not a host name");
	name_is("*", "", 443, "not a host name");
	name_is("*", "[2001:db8::1]", 443, "not a host name");
	name_is("*", "a b.example", 443, "not a host name");
	memset(name, 'a', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	name_is("*", name, 443, "not a host name");
}

/* Addresses the gateway resolved for an allowed name: never the never
 * classes; internal ones only under a literal rule that is not a /0. */
static void test_resolved(void **state)
{
	(void)state;
	addr_is("*", "192.0.2.1", 443, true, NULL);
	addr_is("*", "2001:db8::1", 443, true, NULL);
	addr_is("*", "10.0.0.5", 443, true, "resolves to a private address (10.0.0.5)");
	addr_is("*", "172.16.3.4", 443, true, "private address");
	addr_is("*", "192.168.1.1", 443, true, "private address");
	addr_is("*", "100.64.0.1", 443, true, "CGNAT");
	addr_is("*", "127.0.0.1", 443, true, "resolves to a loopback address (127.0.0.1)");
	addr_is("*", "::1", 443, true, "loopback");
	addr_is("*", "fd12::1", 443, true, "private address");
	addr_is("*", "fec0::1", 443, true, "site-local");
	addr_is("*", "169.254.169.254", 80, true,
		"resolves to a metadata or link-local address (169.254.169.254)");
	addr_is("*", "100.100.100.200", 80, true, "metadata address");
	addr_is("*", "fd00:ec2::254", 80, true, "metadata address");
	addr_is("*", "fe80::1", 80, true, "link-local");
	addr_is("*", "::ffff:192.0.2.1", 80, true, "IPv4-mapped");
	addr_is("*", "64:ff9b::c000:201", 80, true, "NAT64");
	addr_is("*", "0.0.0.0", 80, true, "unspecified");
	addr_is("*", "224.0.0.1", 80, true, "multicast");
	/* a /0 never grants an internal address; a narrower rule does, on its ports */
	addr_is("*, 0.0.0.0/0", "10.0.0.5", 5432, true, "private address");
	addr_is("*, [::/0]", "fd12::1", 5432, true, "private address");
	addr_is("*, 10.0.0.0/8:5432", "10.0.0.5", 5432, true, NULL);
	addr_is("*, 10.0.0.0/8:5432", "10.0.0.5", 80, true, "resolves to a private address");
	addr_is("*, 10.0.0.5", "10.0.0.5", 80, true, NULL);
	addr_is("*, [fd12::/16]:443", "fd12::1", 443, true, NULL);
	addr_is("*, 127.0.0.1:8080", "127.0.0.1", 8080, true, NULL);
	addr_is("*, 127.0.0.1:8080", "127.0.0.1", 8081, true, "loopback");
	addr_is("*, 0.0.0.0/0", "169.254.169.254", 80, true, "metadata");
	addr_is("*, 169.0.0.0/9", "169.1.1.1", 80, true, NULL);
}

/* The host's own addresses are internal: a name reaching one, or a /0,
 * is refused (loopback always exists, so this always checks some). */
static void test_host_own(void **state)
{
	struct ifaddrs *ifa = NULL, *i;
	struct sbx_egress_rules *r = rules("*, 0.0.0.0/0, [::/0]");
	char why[SBX_EGRESS_WHY_MAX];
	size_t seen = 0;

	(void)state;
	assert_int_equal(getifaddrs(&ifa), 0);
	for (i = ifa; i; i = i->ifa_next) {
		const uint8_t *a;
		int f = i->ifa_addr ? i->ifa_addr->sa_family : 0;

		if (f != AF_INET && f != AF_INET6)
			continue;
		a = f == AF_INET ? (const uint8_t *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
				 : (const uint8_t *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
		assert_true(sbx_egress_addr_internal(f, a));
		assert_false(sbx_egress_rules_addr(r, f, a, 443, true, why, sizeof(why)));
		assert_false(sbx_egress_rules_addr(r, f, a, 443, false, why, sizeof(why)));
		seen++;
	}
	freeifaddrs(ifa);
	assert_true(seen > 0);
	sbx_egress_rules_unref(&r);
}

/* A deny address rule refuses an address, resolved or dialled. */
static void test_deny_addr(void **state)
{
	(void)state;
	addr_is("*, !203.0.113.0/24", "203.0.113.7", 443, true, "denied by rule !203.0.113.0/24");
	addr_is("!203.0.113.0/24, *", "203.0.113.7", 443, true, "denied by rule !203.0.113.0/24");
	addr_is("*, !203.0.113.0/24", "198.51.100.1", 443, true, NULL);
	addr_is("*, !203.0.113.0/24:22", "203.0.113.7", 443, true, NULL);
	addr_is("*, !203.0.113.0/24:22", "203.0.113.7", 22, true, "denied by rule !203.0.113.0/24:22");
	addr_is("*, ![2001:db8::/32]", "2001:db8::1", 443, true, "denied by rule ![2001:db8::/32]");
	addr_is("*, 10.0.0.0/8, !10.1.0.0/16", "10.1.2.3", 443, true, "denied by rule !10.1.0.0/16");
	addr_is("*, 10.0.0.0/8, !10.1.0.0/16", "10.2.2.3", 443, true, NULL);
	addr_is("0.0.0.0/0, !192.0.2.0/24", "192.0.2.1", 443, false, "denied by rule !192.0.2.0/24");
	addr_is("0.0.0.0/0, !192.0.2.0/24", "198.51.100.1", 443, false, NULL);
	addr_is("127.0.0.1:8080, !127.0.0.0/8", "127.0.0.1", 8080, false, "denied by rule !127.0.0.0/8");
}

/* A connection with no name: only address rules grant it. */
static void test_dialled(void **state)
{
	(void)state;
	addr_is("192.0.2.0/24:443", "192.0.2.5", 443, false, NULL);
	addr_is("192.0.2.0/24:443", "192.0.2.5", 80, false, "port 80 not allowed for 192.0.2.5");
	addr_is("192.0.2.0/24:443", "198.51.100.1", 443, false, "address not in the allowlist");
	addr_is("[2001:db8::/32]:443", "2001:db8::1", 443, false, NULL);
	addr_is("[2001:db8::/32]:443", "2001:db9::1", 443, false, "address not in the allowlist");
	addr_is("192.0.2.0/24", "2001:db8::1", 443, false, "address not in the allowlist");
	addr_is("0.0.0.0/0", "198.51.100.1", 22, false, NULL);
	addr_is("0.0.0.0/0", "10.0.0.5", 443, false, "a private address (10.0.0.5), not in the allowlist");
	addr_is("0.0.0.0/0:443", "169.254.169.254", 443, false, "metadata");
	addr_is("10.0.0.0/8", "10.0.0.5", 443, false, NULL);
	addr_is("10.0.0.0/8:5432", "10.0.0.5", 443, false, "port 443 not allowed for 10.0.0.5");
	addr_is("127.0.0.1:8080", "127.0.0.1", 8080, false, NULL);
	addr_is("127.0.0.1:8080", "127.0.0.1", 8081, false, "port 8081 not allowed for 127.0.0.1");
	addr_is("127.0.0.1:8080", "::1", 8080, false, "loopback address (::1), not in the allowlist");
	addr_is("127.0.0.1:8080", "127.0.0.2", 8080, false, "loopback");
	addr_is("*, example.com", "192.0.2.1", 443, false, "address not in the allowlist");
	addr_is("", "192.0.2.1", 443, false, "address not in the allowlist");
}

static void test_loopback_ports(void **state)
{
	struct sbx_egress_rules *r =
	    rules("127.0.0.1:8080, [::1]:8080, 127.0.0.1:8079-8081, [::1]:9001, [::1]:9000, 127.0.0.1:65535, "
		  "!127.0.0.1:7000, 10.0.0.0/8:80, *.example.com:8080");
	uint16_t p[8][2];

	(void)state;
	assert_int_equal(sbx_egress_rules_loopback(r, AF_INET, p, 8), 2);
	assert_int_equal(p[0][0], 8079);
	assert_int_equal(p[0][1], 8081);
	assert_int_equal(p[1][0], 65535);
	assert_int_equal(p[1][1], 65535);
	assert_int_equal(sbx_egress_rules_loopback(r, AF_INET6, p, 8), 2);
	assert_int_equal(p[0][0], 8080);
	assert_int_equal(p[0][1], 8080);
	assert_int_equal(p[1][0], 9000);
	assert_int_equal(p[1][1], 9001);
	assert_int_equal(sbx_egress_rules_loopback(r, AF_INET, p, 1), 1);
	assert_int_equal(p[0][0], 8079);
	sbx_egress_rules_unref(&r);
	r = rules("*, 0.0.0.0/0, [::/0]:443");
	assert_int_equal(sbx_egress_rules_loopback(r, AF_INET, p, 8), 0);
	assert_int_equal(sbx_egress_rules_loopback(r, AF_INET6, p, 8), 0);
	sbx_egress_rules_unref(&r);
}

/* A reason fits its buffer however long the rule, and the callers may
 * pass none; references keep the rules alive. */
static void test_reasons_and_refs(void **state)
{
	char spec[400], why[SBX_EGRESS_WHY_MAX];
	struct sbx_egress_rules *r, *r2;
	char label[64];

	(void)state;
	memset(label, 'a', 63);
	label[63] = '\0';
	snprintf(spec, sizeof(spec), "*, !*.%s.%s.%s.example", label, label, label);
	r = rules(spec);
	assert_false(
	    sbx_egress_rules_name(r,
				  "x.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa."
				  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa."
				  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.example",
				  443, why, sizeof(why)));
	assert_true(strlen(why) < sizeof(why));
	assert_non_null(strstr(why, "denied by rule !*.aaa"));
	assert_false(
	    sbx_egress_rules_name(r,
				  "x.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa."
				  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa."
				  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.example",
				  443, NULL, 0));
	r2 = sbx_egress_rules_ref(r);
	sbx_egress_rules_unref(&r);
	assert_null(r);
	assert_true(sbx_egress_rules_name(r2, "example.com", 443, NULL, 0));
	assert_string_equal(sbx_egress_rules_spec(r2), spec);
	sbx_egress_rules_unref(&r2);
	sbx_egress_rules_unref(&r2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_old_forms),

	    cmocka_unit_test(test_new_forms),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_wildcards),
	    cmocka_unit_test(test_deny_wins),
	    cmocka_unit_test(test_ports),
	    cmocka_unit_test(test_dns_question),
	    cmocka_unit_test(test_not_names),
	    cmocka_unit_test(test_resolved),
	    cmocka_unit_test(test_host_own),
	    cmocka_unit_test(test_deny_addr),
	    cmocka_unit_test(test_dialled),
	    cmocka_unit_test(test_loopback_ports),
	    cmocka_unit_test(test_reasons_and_refs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
