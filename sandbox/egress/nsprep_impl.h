#pragma once
/* What the files of nsprep share (nsprep.h is the contract). Internal. */
#include <stdbool.h>
#include <stddef.h>

#define SBX_NSPREP_DUMMY "egress0"

/* On a thread inside a fresh namespace: lo up, the dummy up with its
 * addresses and the default routes (IPv6 only when v6). 0, or
 * -SBX_E_BACKEND with the step that failed in err. */
int sbx_nsprep_links(bool v6, char *err, size_t errsz);
/* On a thread inside the namespace: a non-blocking, close-on-exec
 * NETLINK_NETFILTER socket bound to SBX_EGRESS_NFLOG_GROUP. The fd, or
 * -SBX_E_BACKEND with the reason in err. */
int sbx_nsprep_nflog_open(char *err, size_t errsz);
