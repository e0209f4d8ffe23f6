#pragma once
/* The network namespace of a command with network, made in-process
 * (netlink through libmnl, the filter through libnftables: no program is
 * started) and kept in a small pool of ready ones, refilled off the hot
 * path. Internal to sandbox/egress/ (gateway.c takes them).
 *
 * What one namespace is (the same in every one; nothing in it depends on
 * the command or its policy but the loopback sets):
 *   - lo up; a dummy interface "egress0" (ifb where the kernel has no
 *     dummy: it drops what it is given too) up with 192.0.2.1/32 and
 *     fd00:5b0::1/128 (documentation and ULA addresses, the sandbox's own),
 *     and default routes for both families through it: every connect()
 *     has a route, nothing leaves (a dummy drops what it is given);
 *   - owned by the server's user namespace (root's): nothing in the
 *     sandbox (an unprivileged uid, no capabilities) can change it;
 *   - table inet sandboxd: every outgoing TCP connection is redirected to
 *     the gateway's listeners (127.0.0.1:SBX_EGRESS_GW_PORT and
 *     [::1]:SBX_EGRESS_GW_PORT), except those to the sandbox's own
 *     loopback; those to the loopback ports of the sets loop4/loop6 (the
 *     host loopback ports the rules grant) are redirected too; every UDP
 *     datagram to port 53 goes to the gateway's DNS sockets
 *     (127.0.0.53:53, [::1]:53); every other UDP datagram is logged to
 *     NFLOG group SBX_EGRESS_NFLOG_GROUP (the gateway records it as
 *     refused) and dropped; everything else (ICMP, SCTP, ...) is rejected;
 *   - the gateway's sockets, made inside it (a socket keeps the namespace
 *     it was made in), non-blocking and close-on-exec: the listeners, the
 *     DNS sockets, and the NFLOG netlink socket.
 * The thread that makes one enters the new namespace and is back in its
 * own before it returns (aborting if it cannot come back). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX_EGRESS_GW_PORT 15001
#define SBX_EGRESS_NFLOG_GROUP 5353
#define SBX_EGRESS_RESOLVER "127.0.0.53" /* the sandbox's resolv.conf */

struct sbx_egress_ns {
	int netns;	/* the namespace (for setns) */
	int tcp4, tcp6; /* listening (tcp6: -1 when the host has no IPv6 at all) */
	int dns4, dns6; /* UDP, bound to port 53 (dns6: -1 as tcp6) */
	int nflog;	/* NETLINK_NETFILTER bound to the group, -1: none */
};

/* 0 and *ns, or -SBX_E_BACKEND with the step that failed in err. Nothing
 * is left behind on failure. Root only. */
int sbx_egress_ns_make(struct sbx_egress_ns *ns, char *err, size_t errsz);
/* Close every fd (the kernel frees the namespace with its last one). */
void sbx_egress_ns_close(struct sbx_egress_ns *ns);
/* Replace the loopback sets: ports4/ports6 are n4/n6 lo-hi pairs. 0, or
 * -SBX_E_BACKEND (the namespace is then unusable: the caller ends it). */
int sbx_egress_ns_loopback(const struct sbx_egress_ns *ns, const uint16_t (*ports4)[2], size_t n4,
			   const uint16_t (*ports6)[2], size_t n6, char *err, size_t errsz);

/* One message read from ns.nflog (buf, len: the bytes of that message,
 * or of the read that starts with it): the destination of the refused
 * datagram it logs into *family (AF_INET or AF_INET6), addr (4 or 16
 * bytes) and *port (host order). 0, or -EINVAL when it is not an NFLOG
 * packet of a UDP datagram (or not all of it is within len). */
int sbx_egress_nflog_parse(const void *buf, size_t len, int *family, uint8_t addr[16], uint16_t *port);

/* A pool of ready namespaces: up to `ready` made ahead by one thread of
 * its own (started by the first take), refilled as they are taken. */
struct sbx_egress_nspool;
struct sbx_egress_nspool *sbx_egress_nspool_new(unsigned ready);
void sbx_egress_nspool_free(struct sbx_egress_nspool **p);
/* A ready namespace (or one made now, on this thread, when none is).
 * 0, or sbx_egress_ns_make's error. */
int sbx_egress_nspool_take(struct sbx_egress_nspool *p, struct sbx_egress_ns *ns, char *err, size_t errsz);

/* 0 when this host can make one: root, libnftables and netlink work, a
 * probe namespace is made and closed. msg: one line either way. */
int sbx_egress_ns_probe(char *msg, size_t msgsz);
