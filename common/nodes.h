#pragma once
/* Node identity and the cluster's node list (docs/nodes.md).
 *
 * A node id names one sandboxd among several behind a load balancer. It is
 * a short token, `[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?` (a DNS label of at
 * most 32 characters, so a Kubernetes pod name or a host name fits), and
 * never contains '_': the ids this node mints (server-chosen exec ids,
 * transfer tokens) are "<node>_<rest>", and a balancer routes them by the
 * text before the first '_'.
 *
 * The node list (configuration key `nodes`) is a JSON array of
 * {"id", "url", "token-file"?, "ca-file"?}: the nodes whose audit records
 * `GET /audit?nodes=all` and `sandboxd audit --all-nodes` merge. Pure
 * functions, no I/O; thread-safe. */
#include <stdbool.h>
#include <stddef.h>

#define SBX_NODE_ID_MAX 32

/* Whether s is a valid node id. */
bool sbx_node_id_ok(const char *s);
/* The default node id, derived from a host name: its first label,
 * lowercased, every byte outside [a-z0-9-] made '-', cut to 32, leading
 * and trailing '-' dropped; "node" when nothing is left. out holds at
 * least SBX_NODE_ID_MAX + 1 bytes. */
void sbx_node_id_from_host(const char *host, char *out, size_t outsz);
/* The node a routable id names: the text before its first '_' when that
 * is a valid node id (copied to out, SBX_NODE_ID_MAX + 1 bytes), else
 * false (an id of no node: a client's own exec id, an old token). */
bool sbx_node_of(const char *id, char *out, size_t outsz);

struct sbx_peer {
	char id[SBX_NODE_ID_MAX + 1];
	char *url;	  /* "http://host:port" or "https://...", no trailing '/' */
	char *token_file; /* bearer token presented to it; NULL: forward the caller's */
	char *ca_file;	  /* CA bundle for https; NULL: the system's */
};

struct sbx_nodes {
	struct sbx_peer *v;
	size_t n;
};

/* Parse the `nodes` JSON text (NULL or "": no nodes). Ids must be valid
 * and distinct; urls http:// or https:// without query or fragment;
 * unknown fields refused. 0 with *out filled (owned, sbx_nodes_free), or
 * -EINVAL with err saying why (*out untouched). */
int sbx_nodes_parse(const char *text, struct sbx_nodes *out, char *err, size_t errsz);
void sbx_nodes_free(struct sbx_nodes *n);
/* The entry with id, or NULL. */
const struct sbx_peer *sbx_nodes_find(const struct sbx_nodes *n, const char *id);
