#pragma once
/* The audit record's wire shape, shared by GET /audit and `sandboxd audit`. */
#include <jansson.h>

#include "store/store.h"

/* {"id", "at", "tenant", "session", "request_id", "method", "route",
 *  "target", "status", "outcome", "exit_code", "bytes_in", "bytes_out",
 *  "duration_ms", "client", "node"} — a new reference; node: the id of
 *  the node whose store holds the record (borrowed). */
json_t *route_audit_json(const struct store_audit *a, const char *node);

/* A stored text as a JSON string (absent: dflt, or null when dflt is
 * NULL). Rows written by older versions, or texts a sandbox chose (a TLS
 * server name), may hold bytes that are not UTF-8, which json_string
 * refuses (and json_pack with it): those are replaced. */
json_t *route_text_json(const char *s, const char *dflt);

/* A page of records being collected: store_audit_cb appending each record
 * (route_audit_json) to records. */
struct route_audit_page {
	json_t *records;
	const char *node;
};
int route_audit_collect(void *page, const struct store_audit *a);
