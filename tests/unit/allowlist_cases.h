#pragma once
/* The old network allowlist's forms, accepted and refused (with a word
 * of the reason), which the egress rules that grew from it keep
 * (tests/unit/egress/test_rules.c) and a tenant policy's `network`
 * takes with the rules' reasons (tests/unit/routes/test_policy.c). */
#include <stddef.h>

static const char *const allowlist_good[] = {
    "example.com",     "example.com:443",  "pypi.org:443, files.pythonhosted.org:443 ,github.com:22-443",
    "10.0.0.0/8",      "10.0.0.0/8:80-90", "0.0.0.0/0:443",
    "192.0.2.7",       "127.0.0.1:8080",   "127.0.0.1:1-256",
    "[::1]:8080",      "[2001:db8::1]",	   "[2001:db8::/32]:443",
    "[::/0]:443",      "localhost:5000",   "my_host-1.internal",
    "a:1,b:65535",     "0.0.0.0/0",	   "169.0.0.0/9",
    "[2001:db8::/32]",
};

/* IPv6 forms of IPv4 addresses (mapped, NAT64) reach IPv4 on the host,
 * and a CIDR around a never range names it: refused at parse time
 * (issue 26). "Everything" stays allowed: the filter carves the never
 * ranges out of it. */
static const struct {
	const char *spec, *want;
} allowlist_bad[] = {
    {NULL, "empty"},
    {"a,,b", "empty entry"},
    {"a,", "empty entry"},
    {" , ", "empty entry"},
    {"example.com:0", "port"},
    {"example.com:65536", "port"},
    {"example.com:", "port"},
    {"example.com:http", "port"},
    {"example.com:90-80", "LO <= HI"},
    {"example.com:-80", "port"},
    {"example.com:+80", "port"},
    {"::1", "brackets"},
    {"2001:db8::1:443", "brackets"},
    {"[::1", "brackets"},
    {"[::1]x", "brackets"},
    {"[10.0.0.1]", "IPv6"},
    {"[fe80::1]:80", "link-local"},
    {"[fe80::/16]", "link-local"},
    {"[fd00:ec2::254]:80", "metadata"},
    {"169.254.169.254", "metadata"},
    {"169.254.0.0/16:80", "metadata"},
    {"100.100.100.200:80", "metadata"},
    {"168.63.129.16", "metadata"},
    {"10.0.0.1/8", "bits set"},
    {"10.0.0.0/33", "CIDR"},
    {"10.0.0.0/", "CIDR"},
    {"10.0.0/8", "CIDR"},
    {"10.1.2", "host name"},
    {"-bad.example", "host name"},
    {"bad-.example", "host name"},
    {"a..b", "host name"},
    {"exa mple.com", "host name"},
    {"héllo.example", "host name"},
    {"0.0.0.0:80", "unspecified"},
    {"[::]:80", "unspecified"},
    {"127.0.0.1", "loopback"},
    {"127.0.0.2:80", "loopback"},
    {"127.0.0.0/8:80", "loopback"},
    {"[::1]", "loopback"},
    {"127.0.0.1:1-1000", "loopback ports"},
    {"127.0.0.1:1-200,[::1]:1-100", "loopback ports"},
    {"[::ffff:169.254.169.254]", "never reachable"},
    {"[::ffff:10.0.0.1]:80", "never reachable"},
    {"[::ffff:0:0/96]", "never reachable"},
    {"[64:ff9b::/96]", "never reachable"},
    {"[64:ff9b::a9fe:a9fe]:80", "never reachable"},
    {"[64:ff9b:1::/48]", "never reachable"},
    {"169.254.0.0/15", "overlaps 169.254.0.0/16"},
    {"128.0.0.0/1:443", "overlaps"},
    {"168.63.0.0/16", "overlaps 168.63.129.16"},
    {"[fe00::/7]", "overlaps fe80::/10"},
    {"[::/64]", "overlaps ::ffff:0:0/96"},
    {"[64::/16]", "overlaps 64:ff9b::/96"},
};
