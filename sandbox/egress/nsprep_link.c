/* The links of one egress namespace, over rtnetlink with libmnl (no
 * `ip` process): lo and the dummy up, the dummy's addresses, default
 * routes through it. Runs on the thread that made the namespace. */
#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/errors.h"
#include "sandbox/egress/nsprep_impl.h"

/* lo is 1 in every new namespace; the dummy asks for 2 when it is made,
 * so nothing has to look its index up. */
#define LO_INDEX 1
#define DUMMY_INDEX 2

/* Links that drop what they are given. Kernels without dummy (some VM
 * hosts' are built so) have ifb, which does the same with what was not
 * redirected to it. An unknown kind costs a modprobe each time: the
 * first one missing is remembered. */
static const char *const kinds[] = {"dummy", "ifb"};
static unsigned kind_at;

/* Requests are small and so are their ACKs (an error quotes the
 * request): one page is room for either. */
#define RTNL_BUF 4096

struct rtnl {
	struct mnl_socket *nl;
	unsigned portid, seq;
	char buf[RTNL_BUF];
};

static struct nlmsghdr *request(struct rtnl *r, uint16_t type, uint16_t flags, void **extra, size_t extra_len)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(r->buf);

	nlh->nlmsg_type = type;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
	nlh->nlmsg_seq = ++r->seq;
	*extra = mnl_nlmsg_put_extra_header(nlh, extra_len);
	return nlh;
}

/* Send one request and wait for its ACK. 0 or -errno. */
static int talk(struct rtnl *r, struct nlmsghdr *nlh)
{
	ssize_t n;

	if (mnl_socket_sendto(r->nl, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	n = mnl_socket_recvfrom(r->nl, r->buf, sizeof(r->buf));
	if (n < 0)
		return -errno;
	/* MNL_CB_STOP is the ACK; anything else but an error is not one. */
	if (mnl_cb_run(r->buf, (size_t)n, r->seq, r->portid, NULL, NULL) < 0)
		return -errno;
	return 0;
}

static int link_up(struct rtnl *r, int index, const char *kind)
{
	struct ifinfomsg *ifi;
	struct nlmsghdr *nlh =
	    request(r, RTM_NEWLINK, kind ? NLM_F_CREATE | NLM_F_EXCL : 0, (void **)&ifi, sizeof(*ifi));
	struct nlattr *info;

	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = index;
	ifi->ifi_flags = IFF_UP;
	ifi->ifi_change = IFF_UP;
	if (kind) {
		mnl_attr_put_strz(nlh, IFLA_IFNAME, SBX_NSPREP_DUMMY);
		info = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
		mnl_attr_put_strz(nlh, IFLA_INFO_KIND, kind);
		mnl_attr_nest_end(nlh, info);
	}
	return talk(r, nlh);
}

static int add_addr(struct rtnl *r, int family, const char *text)
{
	struct ifaddrmsg *ifa;
	struct nlmsghdr *nlh =
	    request(r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, (void **)&ifa, sizeof(*ifa));
	uint8_t addr[16];
	size_t alen = family == AF_INET ? 4 : 16;

	inet_pton(family, text, addr);
	ifa->ifa_family = (uint8_t)family;
	ifa->ifa_prefixlen = (uint8_t)(alen * 8);
	ifa->ifa_scope = RT_SCOPE_UNIVERSE;
	ifa->ifa_index = DUMMY_INDEX;
	mnl_attr_put(nlh, IFA_LOCAL, alen, addr);
	mnl_attr_put(nlh, IFA_ADDRESS, alen, addr);
	/* No duplicate address detection: the address is usable at once
	 * (nothing else is on a dummy to be a duplicate of). */
	if (family == AF_INET6)
		mnl_attr_put_u32(nlh, IFA_FLAGS, IFA_F_NODAD);
	return talk(r, nlh);
}

static int add_default_route(struct rtnl *r, int family)
{
	struct rtmsg *rtm;
	struct nlmsghdr *nlh =
	    request(r, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, (void **)&rtm, sizeof(*rtm));

	rtm->rtm_family = (uint8_t)family;
	rtm->rtm_table = RT_TABLE_MAIN;
	rtm->rtm_protocol = RTPROT_STATIC;
	rtm->rtm_scope = family == AF_INET ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
	rtm->rtm_type = RTN_UNICAST;
	mnl_attr_put_u32(nlh, RTA_OIF, DUMMY_INDEX);
	return talk(r, nlh);
}

static int make_dummy(struct rtnl *r)
{
	unsigned k = __atomic_load_n(&kind_at, __ATOMIC_RELAXED);
	int rc;

	for (; (rc = link_up(r, DUMMY_INDEX, kinds[k])) == -EOPNOTSUPP &&
	       k + 1 < sizeof(kinds) / sizeof(kinds[0]);)
		__atomic_store_n(&kind_at, ++k, __ATOMIC_RELAXED);
	return rc;
}

/* The steps in order; the first that fails names itself. */
static int configure(struct rtnl *r, bool v6, const char **step)
{
	int rc;

	if ((rc = link_up(r, LO_INDEX, NULL)) < 0) {
		*step = "lo up";
		return rc;
	}
	if ((rc = make_dummy(r)) < 0) {
		*step = "dummy " SBX_NSPREP_DUMMY;
		return rc;
	}
	if ((rc = add_addr(r, AF_INET, "192.0.2.1")) < 0 || (rc = add_default_route(r, AF_INET)) < 0) {
		*step = "IPv4 address or route";
		return rc;
	}
	if (v6 &&
	    ((rc = add_addr(r, AF_INET6, "fd00:5b0::1")) < 0 || (rc = add_default_route(r, AF_INET6)) < 0)) {
		*step = "IPv6 address or route";
		return rc;
	}
	return 0;
}

int sbx_nsprep_links(bool v6, char *err, size_t errsz)
{
	struct rtnl r = {0};
	const char *step = "rtnetlink socket";
	int rc = 0;

	r.seq = (unsigned)time(NULL);
	r.nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
	if (!r.nl || mnl_socket_bind(r.nl, 0, MNL_SOCKET_AUTOPID) < 0)
		rc = -errno;
	else
		r.portid = mnl_socket_get_portid(r.nl);
	if (!rc)
		rc = configure(&r, v6, &step);
	if (r.nl)
		mnl_socket_close(r.nl);
	if (!rc)
		return 0;
	snprintf(err, errsz, "namespace links: %s: %s", step, strerror(-rc));
	return -SBX_E_BACKEND;
}
