/* A session's DNS questions and the UDP datagrams its namespace dropped
 * (NFLOG). Both are bounded per session, so that a flood of either costs
 * its own session, not the loop's others:
 *   - DNS: DNS_RATE questions a second (burst twice); beyond, questions
 *     are dropped without an answer and one record a second says how many;
 *   - NFLOG: UDP_RATE records a second (burst twice); beyond, counted and
 *     said in one record a second (the kernel's rule is limited too).
 * Records: each refused or malformed question; an allowed name once per
 * session (its first question), not per packet.
 *
 * Floor 4: it calls gateway_session.c (records) and gateway.c; the loop's
 * events reach it through gateway_start.c's gw_loop_ops. */
#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/netlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "sandbox/egress/gateway_int.h"

#define DNS_RATE 100.0
#define UDP_RATE 10.0
#define READ_BATCH 32	       /* datagrams per event: the loop's others go on */
#define SYNTH_ADDRS (1u << 17) /* 198.18.0.0/15 */
#define NFLOG_BUF 8192

static void dns_record(struct sbx_egress_session *s, int family, const char *name, bool allowed,
		       const char *reason, uint64_t n)
{
	struct sbx_egress_record r;
	gw_session_base(s, &r);
	r.proto = "dns";
	r.name = name && name[0] ? name : NULL;
	r.name_source = r.name ? "dns" : NULL;
	r.dialled = family == AF_INET6 ? "[::1]:53" : SBX_EGRESS_RESOLVER ":53";
	r.port = 53;
	r.allowed = allowed;
	r.reason = reason;
	r.started_ms = r.ended_ms = now_ms();
	char dest[SBX_EGRESS_NAME_MAX + 16];
	snprintf(dest, sizeof(dest), "dns %s", r.name ? r.name : "(malformed question)");
	gw_session_note(s, &r, allowed || n > 1 ? NULL : dest, n);
}

/* The first question for this synthetic address (the name's first). */
static bool first_time(struct sbx_egress_session *s, const uint8_t a4[4])
{
	uint32_t i = ((uint32_t)a4[1] << 16 | (uint32_t)a4[2] << 8 | a4[3]) & (SYNTH_ADDRS - 1);
	if (!s->dns_seen)
		s->dns_seen = xcalloc(SYNTH_ADDRS / 8, 1);
	bool first = !(s->dns_seen[i / 8] & (1u << (i % 8)));
	s->dns_seen[i / 8] |= (uint8_t)(1u << (i % 8));
	return first;
}

/* The answer's rcode and A record for q. */
static int decide(struct sbx_egress_session *s, int family, const struct sbx_egress_dns_query *q,
		  uint8_t a4[4], bool *with_a)
{
	char why[SBX_EGRESS_WHY_MAX] = "no network rules";
	struct sbx_egress_rules *r = gw_rules_now(s->g, s->t);
	bool ok = r && sbx_egress_rules_name(r, q->name, 0, why, sizeof(why));
	sbx_egress_rules_unref(&r);
	*with_a = false;
	if (ok && sbx_egress_names_addr(s->names, q->name, a4) < 0) {
		snprintf(why, sizeof(why), "more than %d names asked", SBX_EGRESS_NAMES_MAX);
		ok = false;
	}
	if (!ok) {
		dns_record(s, family, q->name, false, why, 1);
		return SBX_DNS_REFUSED;
	}
	if (first_time(s, a4))
		dns_record(s, family, q->name, true, NULL, 1);
	*with_a = q->qtype == 1 && q->qclass == 1; /* A, IN; other types: NOERROR, empty */
	return SBX_DNS_NOERROR;
}

/* Once a second at most: how many questions the rate bound dropped. */
static void note_dropped(struct sbx_egress_session *s, int family, int64_t now)
{
	if (!s->dns_dropped || now - s->dns_dropped_since < 1000)
		return;
	char why[SBX_EGRESS_WHY_MAX];
	snprintf(why, sizeof(why), "DNS rate bound (%.0f questions/s): %llu dropped", DNS_RATE,
		 (unsigned long long)s->dns_dropped);
	dns_record(s, family, NULL, false, why, s->dns_dropped);
	s->dns_dropped = 0;
	s->dns_dropped_since = now;
}

static void answer_one(struct sbx_egress_session *s, int fd, int family, const uint8_t *p, size_t n,
		       const struct sockaddr_storage *from, socklen_t fromlen)
{
	struct sbx_egress_dns_query q;
	uint8_t out[SBX_EGRESS_DNS_MAX], a4[4];
	bool with_a = false;
	int rcode;
	memset(&q, 0, sizeof(q));
	if (sbx_egress_dns_parse(p, n, &q) == 0) {
		rcode = decide(s, family, &q, a4, &with_a);
	} else {
		dns_record(s, family, NULL, false, "malformed DNS question", 1);
		if (n < 12) /* no header to answer with */
			return;
		rcode = SBX_DNS_FORMERR;
	}
	size_t len = sbx_egress_dns_answer(p, n, &q, rcode, with_a ? a4 : NULL, out, sizeof(out));
	if (len)
		sendto(fd, out, len, MSG_DONTWAIT, (const struct sockaddr *)from, fromlen);
}

void gw_dns_read(struct sbx_egress_session *s, int fd, int family)
{
	uint8_t p[SBX_EGRESS_DNS_MAX];
	for (int i = 0; i < READ_BATCH; i++) {
		struct sockaddr_storage from;
		socklen_t fromlen = sizeof(from);
		ssize_t n = recvfrom(fd, p, sizeof(p), MSG_DONTWAIT, (struct sockaddr *)&from, &fromlen);
		if (n < 0)
			break;
		int64_t now = mono_ms();
		if (!gw_bucket_take(&s->dns_rate, DNS_RATE, 2 * DNS_RATE, now)) {
			if (!s->dns_dropped++)
				s->dns_dropped_since = now;
			continue;
		}
		answer_one(s, fd, family, p, (size_t)n, &from, fromlen);
	}
	note_dropped(s, family, mono_ms());
}

static void udp_record(struct sbx_egress_session *s, int family, const uint8_t *addr, uint16_t port,
		       uint64_t n)
{
	char ip[INET6_ADDRSTRLEN], dialled[GW_ADDR_TXT], dest[GW_ADDR_TXT + 8], why[SBX_EGRESS_WHY_MAX];
	inet_ntop(family, addr, ip, sizeof(ip));
	snprintf(dialled, sizeof(dialled), family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
	snprintf(dest, sizeof(dest), "udp %s", dialled);
	/* QUIC: clients fall back to TCP, where the name is seen. */
	const char *reason = port == 443 ? "QUIC refused; use TCP" : "UDP other than DNS is not relayed";
	if (n > 1)
		snprintf(why, sizeof(why), "%s (%llu datagrams since the last record)", reason,
			 (unsigned long long)n);
	struct sbx_egress_record r;
	gw_session_base(s, &r);
	r.proto = "udp";
	r.dialled = dialled;
	r.port = port;
	r.reason = n > 1 ? why : reason;
	r.started_ms = r.ended_ms = now_ms();
	gw_session_note(s, &r, dest, n);
}

static void udp_dropped(struct sbx_egress_session *s, int family, const uint8_t *addr, uint16_t port)
{
	int64_t now = mono_ms();
	if (!gw_bucket_take(&s->udp_rate, UDP_RATE, 2 * UDP_RATE, now)) {
		if (!s->udp_unrecorded++)
			s->udp_unrecorded_since = now;
		if (now - s->udp_unrecorded_since < 1000)
			return;
		udp_record(s, family, addr, port, s->udp_unrecorded);
		s->udp_unrecorded = 0;
		return;
	}
	udp_record(s, family, addr, port, 1);
}

void gw_nflog_read(struct sbx_egress_session *s, int fd)
{
	static _Thread_local uint8_t buf[NFLOG_BUF] __attribute__((aligned(4)));
	for (int i = 0; i < READ_BATCH; i++) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && errno == ENOBUFS)
			continue; /* the kernel dropped some: they were rate limited anyway */
		if (n <= 0)
			return;
		int len = (int)n;
		/* libmnl's walk, not NLMSG_OK/NEXT: those compare a __u32
		 * with the int length (clang's -Wsign-compare) */
		for (const struct nlmsghdr *h = (const struct nlmsghdr *)buf; mnl_nlmsg_ok(h, len);
		     h = mnl_nlmsg_next(h, &len)) {
			int family;
			uint8_t addr[16];
			uint16_t port;
			if (sbx_egress_nflog_parse(h, h->nlmsg_len, &family, addr, &port) == 0)
				udp_dropped(s, family, addr, port);
		}
	}
}
