/* Address classes of the egress rules (sandbox/egress/rules.h): the
 * ranges no rule reaches, the internal ones only a literal rule reaches,
 * and the host's own addresses. */
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "sandbox/egress/classes.h"
#include "sandbox/egress/rules.h"

struct range {
	int family;
	uint8_t addr[16];
	unsigned prefix;
	const char *what; /* as a reason says it */
	const char *text; /* set: no allow rule may name or overlap it (rules.h) */
};

/* Never reachable, whatever the rules say: link-local (where cloud
 * metadata services live), the metadata addresses outside it, the IPv6
 * forms of IPv4 addresses (they would reach IPv4 addresses the IPv4
 * rules never saw), multicast, and addresses that name no one host.
 * Those with a text (no allow rule may name them) first: a rule's
 * refusal names the first it overlaps. */
static const struct range never[] = {
    {AF_INET, {169, 254}, 16, "a metadata or link-local address", "169.254.0.0/16"},
    {AF_INET, {100, 100, 100, 200}, 32, "a metadata address", "100.100.100.200"},
    {AF_INET, {168, 63, 129, 16}, 32, "a metadata address", "168.63.129.16"},
    {AF_INET6, {0xfe, 0x80}, 10, "a link-local address", "fe80::/10"},
    {AF_INET6,
     {0xfd, 0x00, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54},
     128,
     "a metadata address",
     "fd00:ec2::254"},
    {AF_INET6, {[10] = 0xff, [11] = 0xff}, 96, "an IPv4-mapped address", "::ffff:0:0/96"},
    {AF_INET6, {[0] = 0}, 96, "an IPv4-compatible address", "::/96"}, /* ::a.b.c.d, and :: */
    {AF_INET6, {0x00, 0x64, 0xff, 0x9b}, 96, "a NAT64 address", "64:ff9b::/96"},
    {AF_INET6, {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48, "a NAT64 address", "64:ff9b:1::/48"},
    {AF_INET, {0}, 8, "an unspecified address", NULL},
    {AF_INET, {224}, 4, "a multicast address", NULL},
    {AF_INET, {240}, 4, "a reserved address", NULL},
    {AF_INET6, {0xff}, 8, "a multicast address", NULL},
};

/* Reached only through a literal rule (not a /0): loopback, private,
 * CGNAT, site-local, benchmarking (the sandbox's synthetic DNS answers
 * live there), IETF protocol assignments. */
static const struct range internal[] = {
    {AF_INET, {127}, 8, "a loopback address", NULL},
    {AF_INET, {10}, 8, "a private address", NULL},
    {AF_INET, {172, 16}, 12, "a private address", NULL},
    {AF_INET, {192, 168}, 16, "a private address", NULL},
    {AF_INET, {100, 64}, 10, "a shared (CGNAT) address", NULL},
    {AF_INET, {198, 18}, 15, "a benchmarking address", NULL},
    {AF_INET, {192, 0, 0}, 24, "an IETF protocol address", NULL},
    {AF_INET6, {[15] = 1}, 128, "a loopback address", NULL},
    {AF_INET6, {0xfc}, 7, "a private address", NULL},
    {AF_INET6, {0xfe, 0xc0}, 10, "a site-local address", NULL},
};

#define N_NEVER (sizeof(never) / sizeof(never[0]))
#define N_INTERNAL (sizeof(internal) / sizeof(internal[0]))

static const uint8_t lo6[16] = {[15] = 1};

bool sbx_egress_prefix_eq(const uint8_t *a, const uint8_t *b, unsigned bits)
{
	unsigned i;

	for (i = 0; i < bits / 8; i++) {
		if (a[i] != b[i])
			return false;
	}
	if (bits % 8) {
		uint8_t mask = (uint8_t)(0xff << (8 - bits % 8));

		if ((a[i] & mask) != (b[i] & mask))
			return false;
	}
	return true;
}

/* a/prefix lies within r (inside), or shares an address with it. */
static bool in_range(int family, const uint8_t *a, unsigned prefix, const struct range *r, bool inside)
{
	if (family != r->family || (inside && prefix < r->prefix))
		return false;
	return sbx_egress_prefix_eq(a, r->addr, prefix < r->prefix ? prefix : r->prefix);
}

static const struct range *find(int family, const uint8_t *a, const struct range *rs, size_t n)
{
	unsigned full = family == AF_INET ? 32 : 128;

	for (size_t i = 0; i < n; i++) {
		if (in_range(family, a, full, &rs[i], true))
			return &rs[i];
	}
	return NULL;
}

static bool is_lo6(int family, const uint8_t *addr, unsigned prefix)
{
	return family == AF_INET6 && prefix == 128 && memcmp(addr, lo6, 16) == 0;
}

bool sbx_egress_addr_never(int family, const uint8_t *addr)
{
	return !is_lo6(family, addr, 128) && find(family, addr, never, N_NEVER);
}

bool sbx_egress_never_named(int family, const uint8_t *addr, unsigned prefix, bool *inside, char *text,
			    size_t textsz)
{
	if (is_lo6(family, addr, prefix))
		return false;
	for (int pass = 1; pass >= 0; pass--) {
		for (size_t i = 0; i < N_NEVER && never[i].text; i++) {
			if (!in_range(family, addr, prefix, &never[i], pass))
				continue;
			*inside = pass;
			snprintf(text, textsz, "%s", never[i].text);
			return true;
		}
	}
	return false;
}

/* ---- the host's own addresses ---- */

#define HOST_ADDRS_MAX 256

static pthread_mutex_t host_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int family;
	uint8_t addr[16];
} host_addrs[HOST_ADDRS_MAX];
static size_t n_host_addrs;
static int64_t host_read_ms = -1000000;

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void host_refresh(void)
{
	struct ifaddrs *ifa = NULL;

	if (getifaddrs(&ifa) < 0)
		return; /* keep the last list */
	n_host_addrs = 0;
	for (struct ifaddrs *i = ifa; i && n_host_addrs < HOST_ADDRS_MAX; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET) {
			host_addrs[n_host_addrs].family = AF_INET;
			memcpy(host_addrs[n_host_addrs++].addr,
			       &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			host_addrs[n_host_addrs].family = AF_INET6;
			memcpy(host_addrs[n_host_addrs++].addr,
			       &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
		}
	}
	freeifaddrs(ifa);
}

bool sbx_egress_host_addr(int family, const uint8_t *addr)
{
	size_t len = family == AF_INET ? 4 : 16;
	bool found = false;
	int64_t now = mono_ms();

	pthread_mutex_lock(&host_mu);
	if (now - host_read_ms >= 1000) {
		host_refresh();
		host_read_ms = now;
	}
	for (size_t i = 0; i < n_host_addrs && !found; i++)
		found = host_addrs[i].family == family && memcmp(host_addrs[i].addr, addr, len) == 0;
	pthread_mutex_unlock(&host_mu);
	return found;
}

const char *sbx_egress_addr_what(int family, const uint8_t *addr, bool *never_out)
{
	const struct range *r = NULL;

	*never_out = false;
	if (family != AF_INET && family != AF_INET6)
		return NULL;
	if (!is_lo6(family, addr, 128))
		r = find(family, addr, never, N_NEVER);
	if (r) {
		*never_out = true;
		return r->what;
	}
	r = find(family, addr, internal, N_INTERNAL);
	if (r)
		return r->what;
	return sbx_egress_host_addr(family, addr) ? "an address of this host" : NULL;
}

bool sbx_egress_addr_internal(int family, const uint8_t *addr)
{
	bool never_;

	return sbx_egress_addr_what(family, addr, &never_) != NULL;
}
