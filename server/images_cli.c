/* sandboxd image build|import|list|rm: the operator's
 * commands for root images (sandbox/rootimg.h). Images live in
 * <data-dir>/images; only these commands, run by root, make or remove
 * them. Tenants select them with their policy (image, images keys). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/xmalloc.h"
#include "routes/policy.h"
#include "sandbox/rootimg.h"
#include "server/cli.h"
#include "store/store.h"

/* The tenants whose policy selects or allows image, comma-separated,
 * into out. */
static int users_of(struct store *s, struct sbx_config *cfg, const char *image, char *out, size_t outsz)
{
	struct store_tenant *v = NULL;
	size_t n = 0;
	int rc = store_tenant_list(s, &v, &n);
	out[0] = '\0';
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct route_policy p;
		if ((rc = route_policy_load(s, cfg, v[i].name, &p, NULL, NULL)) < 0)
			break;
		const char *how = strcmp(p.image, image) == 0		  ? "selects"
				  : sbx_rootimg_list_has(p.images, image) ? "allows"
									  : NULL;
		size_t len = strlen(out);
		if (how)
			snprintf(out + len, outsz - len, "%s%s (%s)", len ? ", " : "", v[i].name, how);
		route_policy_clear(&p);
	}
	store_tenants_free(v, n);
	return rc;
}

static int image_list(struct store *s, struct sbx_config *cfg, const char *dir, const struct cli_args *a)
{
	struct sbx_rootimg_info *v = NULL;
	size_t n = 0;
	bool json = a->format && strcmp(a->format, "json") == 0;
	if (sbx_rootimg_list(dir, &v, &n) < 0) {
		fprintf(stderr, "sandboxd: cannot list %s\n", dir);
		return 1;
	}
	json_t *arr = json_array();
	if (!json)
		printf("%-24s %10s  %-30s %s\n", "NAME", "SIZE", "PACKAGES", "IN USE BY");
	for (size_t i = 0; i < n; i++) {
		char users[1024];
		users_of(s, cfg, v[i].name, users, sizeof users);
		json_t *m = v[i].manifest ? json_loads(v[i].manifest, 0, NULL) : NULL;
		json_t *pk = json_object_get(m, "packages");
		char *pks = pk ? json_dumps(pk, JSON_COMPACT) : NULL;
		long long size = (long long)json_integer_value(json_object_get(m, "size_bytes"));
		if (json) {
			json_t *o =
			    json_pack("{s:s, s:b, s:b, s:s, s:O?}", "name", v[i].name, "usable", v[i].usable,
				      "running", v[i].busy, "in_use_by", users, "manifest", m);
			if (!v[i].usable)
				json_object_set_new(o, "reason", json_string(v[i].reason));
			json_array_append_new(arr, o);
		} else {
			printf("%-24s %9lldM  %-30s %s%s%s%s\n", v[i].name, size >> 20, pks ? pks : "?",
			       users, v[i].busy ? (*users ? ", commands running" : "commands running") : "",
			       v[i].usable ? "" : "  UNUSABLE: ", v[i].usable ? "" : v[i].reason);
		}
		free(pks);
		json_decref(m);
	}
	if (json) {
		char *t = json_dumps(arr, JSON_INDENT(2));
		printf("%s\n", t);
		free(t);
	}
	json_decref(arr);
	sbx_rootimg_infos_free(v, n);
	return 0;
}

static int image_rm(struct store *s, struct sbx_config *cfg, const char *dir, const char *name)
{
	char users[1024], err[512] = "";
	if (users_of(s, cfg, name, users, sizeof users) < 0) {
		fprintf(stderr, "sandboxd: cannot read the tenants' policies\n");
		return 1;
	}
	if (*users) {
		fprintf(stderr,
			"sandboxd: image %s is in use by %s: change their setting first "
			"(sandboxd tenant set NAME image=... images=...)\n",
			name, users);
		return 1;
	}
	int rc = sbx_rootimg_remove(dir, name, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: cannot remove image %s: %s\n", name, err);
		return 1;
	}
	printf("removed image %s\n", name);
	return 0;
}

static int image_make(const struct sbx_config *cfg, const char *dir, const char *verb, const char *name,
		      const struct cli_args *a)
{
	char err[1024] = "";
	int rc;
	/* The reserve is the store's: an import must not take the room the
	 * server keeps for its records (images live on the same data disk). */
	const struct sbx_rootimg_limits lim = {.max_bytes = (uint64_t)cfg->image_import_max_bytes,
					       .max_entries = (uint64_t)cfg->image_import_max_entries,
					       .max_ratio = (uint64_t)cfg->image_import_max_ratio,
					       .reserve_bytes = (uint64_t)cfg->store_reserve_bytes};
	if (geteuid() != 0) {
		fprintf(stderr,
			"sandboxd: image %s must run as root: an image is root's, so that no tenant "
			"can change what its commands run\n",
			verb);
		return 1;
	}
	if (strcmp(verb, "build") == 0) {
		rc = sbx_rootimg_build(dir, name, a->packages, a->variant, err, sizeof err);
	} else if (!a->oci == !a->rootfs) {
		fprintf(stderr, "sandboxd: image import NAME wants --oci DIR or --rootfs FILE\n");
		return 2;
	} else if (a->oci) {
		rc = sbx_rootimg_import_oci(dir, name, a->oci, &lim, err, sizeof err);
	} else {
		rc = sbx_rootimg_import_rootfs(dir, name, a->rootfs, &lim, err, sizeof err);
	}
	if (rc < 0) {
		fprintf(stderr, "sandboxd: image %s %s: %s\n", verb, name, *err ? err : sbx_strerror(rc));
		return rc == -EINVAL ? 2 : 1;
	}
	printf("image %s ready in %s/%s\n", name, dir, name);
	return 0;
}

int cli_image(struct sbx_config *cfg, const struct cli_args *a)
{
	const char *verb = a->nwords >= 1 ? a->words[0] : "";
	bool named = a->nwords == 2;
	if (!((strcmp(verb, "list") == 0 && a->nwords == 1) ||
	      (named &&
	       (strcmp(verb, "rm") == 0 || strcmp(verb, "build") == 0 || strcmp(verb, "import") == 0)))) {
		fprintf(stderr,
			"sandboxd: usage: image build NAME [--packages P,...] [--variant V] | image import "
			"NAME --oci DIR | --rootfs FILE | image list | image rm NAME\n");
		return 2;
	}
	struct store *s = NULL;
	if (cli_open_store(cfg, true, &s) < 0)
		return 1;
	char *dir = xasprintf("%s/images", cfg->data_dir);
	int status;
	if (strcmp(verb, "list") == 0)
		status = image_list(s, cfg, dir, a);
	else if (strcmp(verb, "rm") == 0)
		status = image_rm(s, cfg, dir, a->words[1]);
	else
		status = image_make(cfg, dir, verb, a->words[1], a);
	free(dir);
	store_close(&s);
	return status;
}
