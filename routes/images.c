/* Root images as the routes use them (routes/images.h). */
#include "routes/images.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "http/req.h"
#include "routes/app.h"
#include "routes/policy.h"
#include "sandbox/backend.h"
#include "sandbox/registry.h"
#include "sandbox/rootimg.h"

/* The images the tenant may name that exist and are usable. */
static json_t *available(struct app *a, const struct route_policy *p)
{
	struct sbx_rootimg_info *v = NULL;
	size_t n = 0;
	json_t *out = json_array();
	sbx_rootimg_list(a->images_dir, &v, &n);
	for (size_t i = 0; i < n; i++)
		if (v[i].usable &&
		    (strcmp(v[i].name, p->image) == 0 || sbx_rootimg_list_has(p->images, v[i].name)))
			json_array_append_new(out, json_string(v[i].name));
	sbx_rootimg_infos_free(v, n);
	return out;
}

static int open_failed(struct http_req *r, const struct route_policy *p, const char *name, bool named, int rc,
		       const char *why)
{
	if (rc == -ENOENT && named) {
		json_decref(r->error_details);
		r->error_details = json_pack("{s:s, s:o}", "image", name, "available", available(r->app, p));
		return http_fail(r, -SBX_E_NO_IMAGE, "no image %s on this server", name);
	}
	r->retry_after_s = 30;
	return http_fail(r, -SBX_E_BACKEND, "image %s cannot be used: %s (the operator must fix it)", name,
			 why);
}

int route_image_select(struct http_req *r, const char *requested, const struct route_policy *p,
		       struct sbx_backend *backend, struct sbx_rootimg_ref **ref, char *name)
{
	*ref = NULL;
	name[0] = '\0';
	bool none = requested && strcmp(requested, "none") == 0;
	if (requested && !none && !sbx_rootimg_name_ok(requested))
		return http_fail(r, -EINVAL, "image must match [a-z0-9][a-z0-9._-]{0,62} (or be none)");
	const char *want = none ? "" : requested ? requested : p->image;
	bool allowed = strcmp(want, p->image) == 0 || (!none && sbx_rootimg_list_has(p->images, want));
	if (!allowed)
		return http_fail(r, -SBX_E_FORBIDDEN,
				 "image %s is not allowed for tenant %s (policy image %s, images %s)",
				 none ? "none" : want, r->tenant->name, p->image[0] ? p->image : "none",
				 p->images ? p->images : "none");
	if (!want[0])
		return 0;
	if (!sbx_backend_kind_named(sbx_backend_name(backend))->images) {
		r->retry_after_s = 30;
		return http_fail(r, -SBX_E_BACKEND, "image %s needs the bwrap backend; the tenant's is %s",
				 want, sbx_backend_name(backend));
	}
	char why[200] = "";
	int rc = sbx_rootimg_open(r->app->images_dir, want, ref, why, sizeof why);
	if (rc < 0)
		return open_failed(r, p, want, requested != NULL, rc, why);
	snprintf(name, SBX_ROOTIMG_NAME_MAX + 1, "%s", want);
	return 0;
}

json_t *route_images_health(struct app *a)
{
	struct sbx_rootimg_info *v = NULL;
	size_t n = 0;
	json_t *out = json_array();
	sbx_rootimg_list(a->images_dir, &v, &n);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "name", v[i].name, "status",
						     v[i].usable ? "ok" : "unavailable", "detail",
						     v[i].usable ? "usable" : v[i].reason));
	sbx_rootimg_infos_free(v, n);
	return out;
}
