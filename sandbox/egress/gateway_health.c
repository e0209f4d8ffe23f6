/* Whether the gateway can work here: namespaces can be made
 * (sbx_egress_ns_probe), and the server's own namespace, where the
 * gateway connects from, has a default route of at least one family. A
 * host without IPv6 (or without IPv4) is fine: names resolve to the
 * families that work (getaddrinfo without AI_ADDRCONFIG still returns
 * both, and a connect without a route fails at once, on to the next). */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/errors.h"
#include "sandbox/egress/gateway_int.h"

/* /proc/net/route: "Iface Destination Gateway Flags ... Mask ...", hex. */
static bool has_default4(void)
{
	FILE *f = fopen("/proc/thread-self/net/route", "re");
	if (!f)
		return false;
	char line[256], ifc[64];
	unsigned dst, gw, flags, mask;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "%63s %x %x %x %*s %*s %*s %x", ifc, &dst, &gw, &flags, &mask) == 5 &&
			dst == 0 && mask == 0 && (flags & 1); /* RTF_UP */
	fclose(f);
	return found;
}

/* /proc/net/ipv6_route: "dst dstlen src srclen nexthop metric ref use flags iface". */
static bool has_default6(void)
{
	FILE *f = fopen("/proc/thread-self/net/ipv6_route", "re");
	if (!f)
		return false;
	char line[256], dst[40], ifc[64];
	unsigned len, flags;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found =
		    sscanf(line, "%39s %x %*s %*s %*s %*s %*s %*s %x %63s", dst, &len, &flags, ifc) == 4 &&
		    len == 0 && strspn(dst, "0") == 32 && (flags & 1) && strcmp(ifc, "lo") != 0;
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
	bool v4 = has_default4(), v6 = has_default6();
	if (!v4 && !v6) {
		snprintf(msg, msgsz,
			 "egress gateway unavailable: the server's namespace has no default route");
		return -SBX_E_BACKEND;
	}
	snprintf(msg, msgsz, "egress gateway ready: %s",
		 v4 && v6 ? "IPv4 and IPv6"
		 : v4	  ? "IPv4 only"
			  : "IPv6 only");
	return 0;
}

int sbx_egress_gateway_health(struct sbx_egress_gateway *g, char *msg, size_t msgsz)
{
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
