/* Address classes of the egress rules (sandbox/egress/rules.h): the
 * ranges no rule reaches, the internal ones only a literal rule reaches,
 * and the host's own addresses. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "sandbox/egress/rules.h"

struct range {
	int family;
	uint8_t addr[16];
	unsigned prefix;
};

/* Never reachable, whatever the rules say: link-local (where cloud
 * metadata services live), the metadata addresses outside it, the IPv6
 * forms of IPv4 addresses (they would reach IPv4 addresses the IPv4
 * rules never saw), multicast, and addresses that name no one host. */
static const struct range never[] = {
    {AF_INET, {169, 254}, 16},
    {AF_INET, {100, 100, 100, 200}, 32},
    {AF_INET, {168, 63, 129, 16}, 32},
    {AF_INET, {0}, 8},
    {AF_INET, {224}, 4},
    {AF_INET, {240}, 4},
    {AF_INET6, {0}, 128},
    {AF_INET6, {0xfe, 0x80}, 10},
    {AF_INET6, {0xfd, 0x00, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54}, 128},
    {AF_INET6, {[10] = 0xff, [11] = 0xff}, 96},
    {AF_INET6, {[0] = 0}, 96}, /* IPv4-compatible ::a.b.c.d */
    {AF_INET6, {0x00, 0x64, 0xff, 0x9b}, 96},
    {AF_INET6, {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48},
    {AF_INET6, {0xff}, 8},
};

/* Reached only through a literal rule (not a /0): loopback, private,
 * CGNAT, site-local, benchmarking (the sandbox's synthetic DNS answers
 * live there), IETF protocol assignments. */
static const struct range internal[] = {
    {AF_INET, {127}, 8},	  {AF_INET, {10}, 8},	       {AF_INET, {172, 16}, 12},
    {AF_INET, {192, 168}, 16},	  {AF_INET, {100, 64}, 10},    {AF_INET, {198, 18}, 15},
    {AF_INET, {192, 0, 0}, 24},	  {AF_INET6, {[15] = 1}, 128}, {AF_INET6, {0xfc}, 7},
    {AF_INET6, {0xfe, 0xc0}, 10},
};

static bool in_range(int family, const uint8_t *a, const struct range *r)
{
	unsigned i, bits = r->prefix;

	if (family != r->family)
		return false;
	for (i = 0; i < bits / 8; i++) {
		if (a[i] != r->addr[i])
			return false;
	}
	if (bits % 8) {
		uint8_t mask = (uint8_t)(0xff << (8 - bits % 8));

		if ((a[i] & mask) != (r->addr[i] & mask))
			return false;
	}
	return true;
}

static bool in_any(int family, const uint8_t *a, const struct range *rs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (in_range(family, a, &rs[i]))
			return true;
	}
	return false;
}

bool sbx_egress_addr_never(int family, const uint8_t *addr)
{
	/* ::1 is loopback, not IPv4-compatible */
	static const uint8_t lo6[16] = {[15] = 1};

	if (family == AF_INET6 && memcmp(addr, lo6, 16) == 0)
		return false;
	return in_any(family, addr, never, sizeof(never) / sizeof(never[0]));
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

bool sbx_egress_addr_internal(int family, const uint8_t *addr)
{
	return sbx_egress_addr_never(family, addr) ||
	       in_any(family, addr, internal, sizeof(internal) / sizeof(internal[0])) ||
	       sbx_egress_host_addr(family, addr);
}
