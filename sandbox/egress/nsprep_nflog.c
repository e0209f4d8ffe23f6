/* The NFLOG side of an egress namespace: the socket the filter's refused
 * datagrams are logged to, and the parser of what it reads (the
 * destination the gateway records as refused). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/errors.h"
#include "sandbox/egress/nsprep.h"
#include "sandbox/egress/nsprep_impl.h"

/* Enough of each packet for its IPv4 (up to 60 bytes of options) or
 * IPv6 header and the UDP ports after it. */
#define NFLOG_COPY 64

/* Bind the group, copy NFLOG_COPY bytes of each packet, and send each
 * one at once (the kernel's default waits for 100 or a second). */
static int configure(struct mnl_socket *nl)
{
	char buf[512];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct nfgenmsg *nfg;
	struct nfulnl_msg_config_cmd cmd = {.command = NFULNL_CFG_CMD_BIND};
	struct nfulnl_msg_config_mode mode = {.copy_range = htonl(NFLOG_COPY),
					      .copy_mode = NFULNL_COPY_PACKET};
	unsigned seq = 1, portid = mnl_socket_get_portid(nl);
	ssize_t n;

	nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	nlh->nlmsg_seq = seq;
	nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
	nfg->nfgen_family = AF_UNSPEC;
	nfg->version = NFNETLINK_V0;
	nfg->res_id = htons(SBX_EGRESS_NFLOG_GROUP);
	mnl_attr_put(nlh, NFULA_CFG_CMD, sizeof(cmd), &cmd);
	mnl_attr_put(nlh, NFULA_CFG_MODE, sizeof(mode), &mode);
	mnl_attr_put_u32(nlh, NFULA_CFG_QTHRESH, htonl(1));
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	/* The ACK is queued before sendto returns: no wait on this
	 * non-blocking socket. */
	n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
	if (n < 0)
		return -errno;
	return mnl_cb_run(buf, (size_t)n, seq, portid, NULL, NULL) < 0 ? -errno : 0;
}

int sbx_nsprep_nflog_open(char *err, size_t errsz)
{
	struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_NONBLOCK | SOCK_CLOEXEC);
	int rc = 0, fd = -1;

	if (!nl)
		rc = -errno;
	else if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
		rc = -errno;
	else
		rc = configure(nl);
	/* libmnl cannot let go of its fd without closing it: keep a
	 * duplicate (the same bound socket). */
	if (!rc && (fd = fcntl(mnl_socket_get_fd(nl), F_DUPFD_CLOEXEC, 0)) < 0)
		rc = -errno;
	if (nl)
		mnl_socket_close(nl);
	if (!rc)
		return fd;
	snprintf(err, errsz, "NFLOG group %d: %s", SBX_EGRESS_NFLOG_GROUP, strerror(-rc));
	return -SBX_E_BACKEND;
}

/* The offset of the UDP header in an IPv4 packet p of n bytes, or 0. */
static size_t udp_in_ipv4(const uint8_t *p, size_t n, uint8_t addr[16])
{
	size_t ihl;

	if (n < 20 || p[0] >> 4 != 4)
		return 0;
	ihl = (size_t)(p[0] & 0x0f) * 4;
	/* A later fragment has no UDP header. */
	if (ihl < 20 || p[9] != IPPROTO_UDP || ((p[6] & 0x1f) | p[7]))
		return 0;
	memcpy(addr, p + 16, 4);
	return ihl;
}

/* The same for IPv6, through the extension headers a datagram may carry
 * before its UDP header (a fragment's is not followed). */
static size_t udp_in_ipv6(const uint8_t *p, size_t n, uint8_t addr[16])
{
	size_t off = 40;
	uint8_t next;

	if (n < 40 || p[0] >> 4 != 6)
		return 0;
	memcpy(addr, p + 24, 16);
	for (next = p[6]; next == 0 || next == 43 || next == 60;) {
		if (off + 2 > n)
			return 0;
		next = p[off];
		off += ((size_t)p[off + 1] + 1) * 8;
	}
	return next == IPPROTO_UDP ? off : 0;
}

struct payload {
	const uint8_t *p;
	size_t n;
};

static int payload_cb(const struct nlattr *a, void *data)
{
	struct payload *pl = data;

	if (mnl_attr_get_type(a) == NFULA_PAYLOAD) {
		pl->p = mnl_attr_get_payload(a);
		pl->n = mnl_attr_get_payload_len(a);
	}
	return MNL_CB_OK;
}

int sbx_egress_nflog_parse(const void *buf, size_t len, int *family, uint8_t addr[16], uint16_t *port)
{
	const struct nlmsghdr *nlh = buf;
	const struct nfgenmsg *nfg;
	struct payload pl = {0};
	size_t udp = 0;

	if (len < sizeof(*nlh) || !mnl_nlmsg_ok(nlh, (int)(len > INT32_MAX ? INT32_MAX : len)) ||
	    nlh->nlmsg_type != ((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET) ||
	    mnl_nlmsg_get_payload_len(nlh) < sizeof(*nfg))
		return -EINVAL;
	nfg = mnl_nlmsg_get_payload(nlh);
	if (mnl_attr_parse(nlh, sizeof(*nfg), payload_cb, &pl) < 0 || !pl.p)
		return -EINVAL;
	memset(addr, 0, 16);
	if (nfg->nfgen_family == AF_INET)
		udp = udp_in_ipv4(pl.p, pl.n, addr);
	else if (nfg->nfgen_family == AF_INET6)
		udp = udp_in_ipv6(pl.p, pl.n, addr);
	if (!udp || udp + 4 > pl.n)
		return -EINVAL;
	*family = nfg->nfgen_family;
	*port = (uint16_t)(pl.p[udp + 2] << 8 | pl.p[udp + 3]);
	return 0;
}
