#pragma once
/* Root images as the routes use them (sandbox/rootimg.h): which image a
 * command runs on, and what /readyz says of them. A tenant's image and the
 * images an exec may name are its policy's `image` and `images` keys
 * (routes/policy.h), read at each command.
 * Threads: any HTTP thread; no state of its own. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct app;
struct http_req;
struct sbx_rootimg_ref;
struct sbx_backend;
struct route_policy;

/* The image the command of r runs on: requested (the exec's `image`,
 * NULL when absent; "none" names the host's /usr) or else the policy p's.
 * 0 with *ref NULL: the host's /usr; 0 with *ref set: held until the
 * caller closes it (or hands it to the runner), name (>= 64 bytes) set.
 * Otherwise r has been answered: 400 (a bad name), 403 forbidden (not
 * allowed to this tenant), 422 unknown_image (allowed but missing;
 * error.details.available lists what the tenant may name), 503
 * backend_unavailable (the tenant's own image is missing or unusable,
 * or the tenant's backend, backend, cannot run images). */
int route_image_select(struct http_req *r, const char *requested, const struct route_policy *p,
		       struct sbx_backend *backend, struct sbx_rootimg_ref **ref, char *name);

/* [{"name", "status": "ok"|"unavailable", "detail"}] of every image. */
json_t *route_images_health(struct app *a);
