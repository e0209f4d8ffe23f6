/* Whether the gateway can work here: namespaces can be made
 * (sbx_egress_ns_probe), and the server's own namespace, where the
 * gateway connects from, has a route out (not through lo) of at least one
 * family. A
 * host without IPv6 (or without IPv4) is fine: names resolve to the
 * families that work (getaddrinfo without AI_ADDRCONFIG still returns
 * both, and a connect without a route fails at once, on to the next). */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/errors.h"
#include "sandbox/egress/gateway_int.h"

/* /proc/net/route: "Iface Destination Gateway Flags ...", hex: a route up
 * through an interface other than lo (a default route or only some
 * networks': a host may reach just its own). */
static bool has_route4(void)
{
	FILE *f = fopen("/proc/thread-self/net/route", "re");
	if (!f)
		return false;
	char line[256], ifc[64];
	unsigned dst, gw, flags;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "%63s %x %x %x", ifc, &dst, &gw, &flags) == 4 &&
			(flags & 1) /* RTF_UP */ && strcmp(ifc, "lo") != 0;
	fclose(f);
	return found;
}

/* /proc/net/ipv6_route: "dst dstlen src srclen nexthop metric ref use
 * flags iface": as has_route4, leaving out link-local and multicast
 * (every interface with IPv6 has those). */
static bool has_route6(void)
{
	FILE *f = fopen("/proc/thread-self/net/ipv6_route", "re");
	if (!f)
		return false;
	char line[256], dst[40], ifc[64];
	unsigned flags;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "%39s %*s %*s %*s %*s %*s %*s %*s %x %63s", dst, &flags, ifc) == 3 &&
			(flags & 1) && strcmp(ifc, "lo") != 0 && strncmp(dst, "fe80", 4) != 0 &&
			strncmp(dst, "ff", 2) != 0;
	fclose(f);
	return found;
}

static int check(char *msg, size_t msgsz)
{
	char probe[200];
	if (sbx_egress_ns_probe(probe, sizeof(probe)) < 0) {
		snprintf(msg, msgsz, "egress gateway unavailable: %s", probe);
		return -SBX_E_BACKEND;
	}
	bool v4 = has_route4(), v6 = has_route6();
	if (!v4 && !v6) {
		snprintf(msg, msgsz,
			 "egress gateway unavailable: no route out of the server's network namespace");
		return -SBX_E_BACKEND;
	}
	snprintf(msg, msgsz, "egress gateway ready: %s",
		 v4 && v6 ? "IPv4 and IPv6"
		 : v4	  ? "IPv4 only"
			  : "IPv6 only");
	return 0;
}

/* Without a gateway (sandboxd doctor): the same check, once per process. */
static pthread_mutex_t host_mu = PTHREAD_MUTEX_INITIALIZER;
static bool host_done;
static int host_rc;
static char host_msg[256];

int sbx_egress_gateway_health(struct sbx_egress_gateway *g, char *msg, size_t msgsz)
{
	if (!g) {
		pthread_mutex_lock(&host_mu);
		if (!host_done)
			host_rc = check(host_msg, sizeof(host_msg));
		host_done = true;
		snprintf(msg, msgsz, "%s", host_msg);
		int rc = host_rc;
		pthread_mutex_unlock(&host_mu);
		return rc;
	}
	pthread_mutex_lock(&g->health_mu);
	if (!g->health_done) {
		g->health_rc = check(g->health_msg, sizeof(g->health_msg));
		g->health_done = true;
	}
	snprintf(msg, msgsz, "%s", g->health_msg);
	int rc = g->health_rc;
	pthread_mutex_unlock(&g->health_mu);
	return rc;
}
