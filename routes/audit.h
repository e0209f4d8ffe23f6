#pragma once
/* The audit record's wire shape, shared by GET /audit and `sandboxd audit`. */
#include <jansson.h>

#include "store/store.h"

/* {"id", "at", "tenant", "session", "request_id", "method", "route",
 *  "target", "status", "outcome", "exit_code", "bytes_in", "bytes_out",
 *  "duration_ms", "client"} — a new reference. */
json_t *route_audit_json(const struct store_audit *a);
