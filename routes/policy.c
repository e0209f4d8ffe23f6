/* Tenant policies: keys, values, defaults, the stored overrides, and the
 * approval patterns (see policy.h). */
#include "routes/policy.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/errors.h"
#include "common/log.h"
#include "routes/remote_back.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "sandbox/egress/rules.h"
#include "sandbox/registry.h"
#include "sandbox/rootimg.h"
#include "store/store.h"

#define PATTERNS_MAX 64
#define PATTERN_MAX 1024

/* PK_MILLICORES: a PK_INT that is 0 (none) or at least 10, the kernel's
 * least CFS quota (1 ms per 100 ms period). PK_OPTINT: a PK_INT whose 0
 * means unset (left out of the JSON). */
enum key_kind {
	PK_INT,
	PK_MILLICORES,
	PK_OPTINT,
	PK_BACKEND,
	PK_NETWORK,
	PK_APPROVAL,
	PK_IMAGE,
	PK_IMAGES,
	PK_STRING
};

static const struct policy_key {
	const char *name;
	enum key_kind kind;
	size_t off; /* PK_INT, PK_MILLICORES: the int64_t in struct route_policy */
	int64_t min, max;
} keys[] = {
    {"backend", PK_BACKEND, 0, 0, 0},
    {"mem_limit_bytes", PK_INT, offsetof(struct route_policy, mem_limit_bytes), 0, INT64_MAX},
    {"nproc_limit", PK_INT, offsetof(struct route_policy, nproc_limit), 0, 1000000},
    {"fsize_limit_bytes", PK_INT, offsetof(struct route_policy, fsize_limit_bytes), 0, INT64_MAX},
    {"timeout_max_s", PK_INT, offsetof(struct route_policy, timeout_max_s), 1, 604800},
    {"max_output_bytes_cap", PK_INT, offsetof(struct route_policy, max_output_bytes_cap), 256, 1073741824},
    {"tenant_mem_budget_bytes", PK_INT, offsetof(struct route_policy, tenant_mem_budget_bytes), 0, INT64_MAX},
    {"tenant_nproc_budget", PK_INT, offsetof(struct route_policy, tenant_nproc_budget), 0, 1000000},
    {"tenant_cpu_budget_millicores", PK_MILLICORES,
     offsetof(struct route_policy, tenant_cpu_budget_millicores), 0, 1000000},
    {"tenant_io_read_bps", PK_INT, offsetof(struct route_policy, tenant_io_read_bps), 0, SBX_IO_BPS_MAX},
    {"tenant_io_write_bps", PK_INT, offsetof(struct route_policy, tenant_io_write_bps), 0, SBX_IO_BPS_MAX},
    {"tenant_io_read_iops", PK_INT, offsetof(struct route_policy, tenant_io_read_iops), 0, SBX_IO_IOPS_MAX},
    {"tenant_io_write_iops", PK_INT, offsetof(struct route_policy, tenant_io_write_iops), 0, SBX_IO_IOPS_MAX},
    {"max_execs", PK_INT, offsetof(struct route_policy, max_execs), 1, 100000},
    {"exec_queue", PK_INT, offsetof(struct route_policy, exec_queue), 0, 100000},
    {"max_transfers", PK_INT, offsetof(struct route_policy, max_transfers), 1, 100000},
    {"store_max_bytes", PK_INT, offsetof(struct route_policy, store_max_bytes), 0, INT64_MAX},
    {"store_max_rows", PK_INT, offsetof(struct route_policy, store_max_rows), 0, INT64_MAX},
    {"network", PK_NETWORK, 0, 0, 0},
    {"approval", PK_APPROVAL, 0, 0, 0},
    {"image", PK_IMAGE, 0, 0, 0},
    {"images", PK_IMAGES, 0, 0, 0},
    /* backend remote (routes/remote.h): PK_STRING's off is the char * */
    {"remote_url", PK_STRING, offsetof(struct route_policy, remote_url), 0, 0},
    {"remote_token_file", PK_STRING, offsetof(struct route_policy, remote_token_file), 0, 0},
    {"remote_tenant", PK_STRING, offsetof(struct route_policy, remote_tenant), 0, 0},
    /* backend ssh (routes/ssh.h) */
    {"ssh_host", PK_STRING, offsetof(struct route_policy, ssh_host), 0, 0},
    {"ssh_port", PK_OPTINT, offsetof(struct route_policy, ssh_port), 1, 65535}, /* unset: 22 */
    {"ssh_user", PK_STRING, offsetof(struct route_policy, ssh_user), 0, 0},
    {"ssh_root", PK_STRING, offsetof(struct route_policy, ssh_root), 0, 0},
    {"ssh_key_file", PK_STRING, offsetof(struct route_policy, ssh_key_file), 0, 0},
    {"ssh_host_key", PK_STRING, offsetof(struct route_policy, ssh_host_key), 0, 0},
};
#define NKEYS (sizeof keys / sizeof keys[0])

static const struct policy_key *key_find(const char *name)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (sbx_key_same(keys[i].name, name))
			return &keys[i];
	return NULL;
}

/* ---- the network allowlist (the grammar of sandbox/backend.h's net_allow) ---- */

/* The grammar and its rules are the egress rules' (sandbox/egress/
 * rules.h): an allowlist that passes here is one the gateway enforces.
 * But one of no rules ("", or "none" with spaces around it), which the
 * rules read as "nothing allowed", is refused: a policy's "none" (exact)
 * means no network at all, and anything else that says nothing is a
 * mistake, not a network that reaches nothing. */
static int allowlist_check(const char *spec, char *err, size_t errsz)
{
	struct sbx_egress_rules *r = NULL;
	char why[256];
	int rc = sbx_egress_rules_parse(spec, &r, why, sizeof(why));

	if (rc == 0 && sbx_egress_rules_count(r) == 0) {
		snprintf(why, sizeof(why), "the allowlist is empty (\"none\": no network)");
		rc = -EINVAL;
	}
	sbx_egress_rules_unref(&r);
	if (rc == 0)
		return 0;
	snprintf(err, errsz, "network: %s", why);
	return -EINVAL;
}

/* ---- values ---- */

static void patterns_free(struct route_policy *p)
{
	for (size_t i = 0; i < p->npatterns; i++)
		free(p->patterns[i]);
	free(p->patterns);
	p->patterns = NULL;
	p->npatterns = 0;
}

static int set_approval(struct route_policy *p, const json_t *v, char *err, size_t errsz)
{
	const char *s = json_string_value(v);
	if (s && (strcmp(s, "never") == 0 || strcmp(s, "always") == 0)) {
		patterns_free(p);
		p->approval = strcmp(s, "never") == 0 ? ROUTE_APPROVAL_NEVER : ROUTE_APPROVAL_ALWAYS;
		return 0;
	}
	size_t n = json_array_size(v);
	if (!json_is_array(v) || n < 1 || n > PATTERNS_MAX) {
		snprintf(err, errsz, "approval: \"never\", \"always\", or an array of 1..%d command patterns",
			 PATTERNS_MAX);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *e = json_array_get(v, i);
		size_t len = json_string_length(e);
		if (!json_is_string(e) || len < 1 || len > PATTERN_MAX ||
		    memchr(json_string_value(e), 0, len)) {
			snprintf(err, errsz, "approval: pattern %zu must be a string of 1..%d bytes", i,
				 PATTERN_MAX);
			return -EINVAL;
		}
	}
	patterns_free(p);
	p->patterns = xcalloc(n, sizeof *p->patterns);
	for (size_t i = 0; i < n; i++)
		p->patterns[i] = xstrdup(json_string_value(json_array_get(v, i)));
	p->npatterns = n;
	p->approval = ROUTE_APPROVAL_PATTERNS;
	return 0;
}

/* One image name, or (list) names separated by commas. */
static bool names_ok(const char *s, bool list)
{
	if (!*s || strlen(s) > 1024)
		return false;
	for (const char *q = s;;) {
		size_t n = strcspn(q, ",");
		char one[SBX_ROOTIMG_NAME_MAX + 2];
		if (n >= sizeof one - 1)
			return false;
		memcpy(one, q, n);
		one[n] = '\0';
		if (!sbx_rootimg_name_ok(one))
			return false;
		if (!q[n])
			return true;
		if (!list)
			return false;
		q += n + 1;
	}
}

/* image: a name or "none"; images: names or "none". An image need not
 * exist yet: its commands answer 503 until it does. */
static int set_image(struct route_policy *p, const struct policy_key *k, const char *s, char *err,
		     size_t errsz)
{
	bool list = k->kind == PK_IMAGES, none = s && strcmp(s, "none") == 0;
	if (!s || (!none && !names_ok(s, list))) {
		snprintf(err, errsz, "%s: %s, or \"none\"", k->name,
			 list ? "image names separated by commas"
			      : "an image name ([a-z0-9][a-z0-9._-]{0,62})");
		return -EINVAL;
	}
	if (!list) {
		snprintf(p->image, sizeof p->image, "%s", none ? "" : s);
	} else {
		free(p->images);
		p->images = none ? NULL : xstrdup(s);
	}
	return 0;
}

/* remote_url (http:// or https://), remote_token_file (an absolute
 * path: the secret itself is never stored), remote_tenant; "" resets. */
static int set_string(struct route_policy *p, const struct policy_key *k, const char *s, char *err,
		      size_t errsz)
{
	if (!s || strlen(s) > 1024 || strpbrk(s, "\r\n")) {
		snprintf(err, errsz, "%s: a string of at most 1024 bytes on one line", k->name);
		return -EINVAL;
	}
	if (*s && strcmp(k->name, "remote_url") == 0 && strncmp(s, "http://", 7) != 0 &&
	    strncmp(s, "https://", 8) != 0) {
		snprintf(err, errsz, "remote_url: an http:// or https:// URL of the back sandboxd");
		return -EINVAL;
	}
	if (*s && strcmp(k->name, "remote_token_file") == 0 && *s != '/') {
		snprintf(err, errsz, "remote_token_file: an absolute path of a file holding the token");
		return -EINVAL;
	}
	if (*s && (strcmp(k->name, "ssh_key_file") == 0 || strcmp(k->name, "ssh_root") == 0) && *s != '/') {
		snprintf(err, errsz, "%s: an absolute path", k->name);
		return -EINVAL;
	}
	char **slot = (char **)((char *)p + k->off);
	free(*slot);
	*slot = *s ? xstrdup(s) : NULL;
	return 0;
}

static int set_value(struct route_policy *p, const struct policy_key *k, const json_t *v, char *err,
		     size_t errsz)
{
	const char *s = json_string_value(v);
	switch (k->kind) {
	case PK_INT:
	case PK_MILLICORES:
	case PK_OPTINT: {
		json_int_t x = json_integer_value(v), lo = k->kind == PK_MILLICORES ? 10 : k->min;
		if (!json_is_integer(v) || x < k->min || x > k->max || (x != 0 && x < lo)) {
			snprintf(err, errsz, "%s: %san integer in [%lld, %lld]", k->name,
				 k->kind == PK_MILLICORES ? "0 (none) or " : "", (long long)lo,
				 (long long)k->max);
			return -EINVAL;
		}
		*(int64_t *)((char *)p + k->off) = x;
		return 0;
	}
	case PK_BACKEND:
		if (!sbx_backend_kind_named(s)) {
			char names[96];
			sbx_backend_kind_list(names, sizeof names, true, false);
			snprintf(err, errsz, "backend: %s", names);
			return -EINVAL;
		}
		snprintf(p->backend, sizeof p->backend, "%s", s);
		return 0;
	case PK_NETWORK:
		if (!s) {
			snprintf(err, errsz, "network: a string, \"none\" or an allowlist");
			return -EINVAL;
		}
		if (strcmp(s, "none") != 0 && allowlist_check(s, err, errsz) < 0)
			return -EINVAL;
		free(p->network);
		p->network = strcmp(s, "none") == 0 ? NULL : xstrdup(s);
		return 0;
	case PK_APPROVAL:
		return set_approval(p, v, err, errsz);
	case PK_IMAGE:
	case PK_IMAGES:
		return set_image(p, k, s, err, errsz);
	case PK_STRING:
		return set_string(p, k, s, err, errsz);
	}
	return -EINVAL;
}

/* Stored overrides onto p. A key this binary does not know (written by
 * an older or newer one) is skipped, and *unknown (optional) counts it;
 * every other key still applies. A known key whose value cannot be
 * applied is -EINVAL with err: never the default in its place. */
static int apply(struct route_policy *p, json_t *overrides, size_t *unknown, char *err, size_t errsz)
{
	const char *name;
	json_t *v;
	json_object_foreach(overrides, name, v) {
		const struct policy_key *k = key_find(name);
		if (!k) {
			if (unknown)
				++*unknown;
			continue;
		}
		if (set_value(p, k, v, err, errsz) < 0)
			return -EINVAL;
	}
	return 0;
}

/* The configured approval: never, always, or a JSON array text. */
static int approval_text(struct route_policy *p, const char *text, char *err, size_t errsz)
{
	json_t *v = text && text[0] == '[' ? json_loads(text, 0, NULL) : json_string(text ? text : "never");
	int rc = v ? set_approval(p, v, err, errsz) : -EINVAL;
	if (!v)
		snprintf(err, errsz, "approval: a JSON array of patterns must be valid JSON");
	json_decref(v);
	return rc;
}

int route_policy_defaults(const struct sbx_config *cfg, struct route_policy *p, char *err, size_t errsz)
{
	memset(p, 0, sizeof *p);
	if (!sbx_backend_kind_named(cfg->backend)) {
		char names[96];
		sbx_backend_kind_list(names, sizeof names, true, false);
		snprintf(err, errsz, "backend \"%s\": %s", cfg->backend ? cfg->backend : "", names);
		return -EINVAL;
	}
	snprintf(p->backend, sizeof p->backend, "%s", cfg->backend);
	p->mem_limit_bytes = cfg->mem_limit_bytes;
	p->nproc_limit = cfg->nproc_limit;
	p->fsize_limit_bytes = cfg->fsize_limit_bytes;
	p->timeout_max_s = cfg->exec_timeout_max_s;
	p->max_output_bytes_cap = cfg->max_output_bytes_cap;
	p->tenant_mem_budget_bytes = cfg->tenant_mem_budget_bytes;
	p->tenant_nproc_budget = cfg->tenant_nproc_budget;
	p->tenant_cpu_budget_millicores = cfg->tenant_cpu_budget_millicores;
	p->tenant_io_read_bps = cfg->tenant_io_read_bps;
	p->tenant_io_write_bps = cfg->tenant_io_write_bps;
	p->tenant_io_read_iops = cfg->tenant_io_read_iops;
	p->tenant_io_write_iops = cfg->tenant_io_write_iops;
	p->max_execs = cfg->tenant_max_execs;
	p->exec_queue = cfg->tenant_exec_queue;
	p->max_transfers = cfg->tenant_max_transfers;
	p->store_max_bytes = cfg->tenant_store_max_bytes;
	p->store_max_rows = cfg->tenant_store_max_rows;
	json_t *net = json_string(cfg->network ? cfg->network : "none");
	int rc = set_value(p, key_find("network"), net, err, errsz);
	json_decref(net);
	if (rc == 0)
		rc = approval_text(p, cfg->approval, err, errsz);
	if (rc < 0)
		route_policy_clear(p);
	return rc;
}

void route_policy_clear(struct route_policy *p)
{
	if (!p)
		return;
	free(p->network);
	free(p->images);
	free(p->remote_url);
	free(p->remote_token_file);
	free(p->ssh_host);
	free(p->ssh_user);
	free(p->ssh_root);
	free(p->ssh_key_file);
	free(p->ssh_host_key);
	free(p->remote_tenant);
	patterns_free(p);
	memset(p, 0, sizeof *p);
}

static json_t *value_json(const struct route_policy *p, const struct policy_key *k)
{
	switch (k->kind) {
	case PK_INT:
	case PK_MILLICORES:
	case PK_OPTINT: {
		int64_t v = *(const int64_t *)((const char *)p + k->off);
		return v == 0 && k->kind == PK_OPTINT ? json_null() : json_integer(v);
	}
	case PK_BACKEND:
		return json_string(p->backend);
	case PK_NETWORK:
		return json_string(p->network ? p->network : "none");
	case PK_IMAGE:
		return json_string(p->image[0] ? p->image : "none");
	case PK_IMAGES:
		return json_string(p->images ? p->images : "none");
	case PK_STRING: {
		const char *v = *(char *const *)((const char *)p + k->off);
		return v ? json_string(v) : json_null();
	}
	case PK_APPROVAL:
		if (p->approval != ROUTE_APPROVAL_PATTERNS)
			return json_string(p->approval == ROUTE_APPROVAL_NEVER ? "never" : "always");
		json_t *a = json_array();
		for (size_t i = 0; i < p->npatterns; i++)
			json_array_append_new(a, json_string(p->patterns[i]));
		return a;
	}
	return json_null();
}

json_t *route_policy_json(const struct route_policy *p)
{
	json_t *o = json_object();
	for (size_t i = 0; i < NKEYS; i++) {
		json_t *v = value_json(p, &keys[i]);
		if (json_is_null(v)) /* remote_* unset: left out, so other tenants' views stay as they were */
			json_decref(v);
		else
			json_object_set_new(o, keys[i].name, v);
	}
	return o;
}

/* The I/O budget keys, in the order they are named when refused. */
static const char *const io_keys[] = {"tenant_io_read_bps", "tenant_io_write_bps", "tenant_io_read_iops",
				      "tenant_io_write_iops"};

const char *route_policy_io_budget(const struct route_policy *p)
{
	for (size_t i = 0; i < sizeof io_keys / sizeof io_keys[0]; i++)
		if (*(const int64_t *)((const char *)p + key_find(io_keys[i])->off) != 0)
			return io_keys[i];
	return NULL;
}

const char *route_policy_io_set(json_t *changes)
{
	const char *name;
	json_t *v;
	json_object_foreach(changes, name, v) {
		const struct policy_key *k = key_find(name);
		if (!k || !json_is_integer(v) || json_integer_value(v) <= 0)
			continue; /* null or 0: none; a bad value is merge's 400 */
		for (size_t i = 0; i < sizeof io_keys / sizeof io_keys[0]; i++)
			if (strcmp(k->name, io_keys[i]) == 0)
				return io_keys[i];
	}
	return NULL;
}

bool route_policy_needs_approval(const struct route_policy *p, const char *command)
{
	if (p->approval != ROUTE_APPROVAL_PATTERNS)
		return p->approval == ROUTE_APPROVAL_ALWAYS;
	for (size_t i = 0; i < p->npatterns; i++)
		if (fnmatch(p->patterns[i], command, 0) == 0)
			return true;
	return false;
}

const struct sbx_backend_kind *route_policy_kind(const struct route_policy *p)
{
	return sbx_backend_kind_named(p->backend);
}

bool route_policy_backend_offered(const struct sbx_config *cfg, const char *backend)
{
	const char *list = cfg->backends ? cfg->backends : cfg->backend;
	size_t n = strlen(backend);
	for (const char *q = list; *q;) {
		q += strspn(q, ", ");
		size_t len = strcspn(q, ", ");
		if (len == n && len && strncmp(q, backend, n) == 0)
			return true;
		q += len;
	}
	return false;
}

/* The stored overrides of tenant (a new object; {} when none) and their
 * text as stored (NULL when none). */
static int read_overrides(struct store *s, const char *tenant, json_t **obj, char **text, int64_t *updated_at)
{
	char *t = NULL;
	int64_t at = 0;
	int rc = store_policy_get(s, tenant, &t, &at);
	if (rc < 0)
		return rc;
	json_t *o = t ? json_loads(t, 0, NULL) : json_object();
	if (!json_is_object(o)) {
		json_decref(o);
		free(t);
		return -SBX_E_STORE;
	}
	*obj = o;
	if (text)
		*text = t;
	else
		free(t);
	if (updated_at)
		*updated_at = at;
	return 0;
}

int route_policy_load(struct store *s, const struct sbx_config *cfg, const char *tenant,
		      struct route_policy *out, json_t **overrides, int64_t *updated_at)
{
	json_t *o = NULL;
	char err[256];
	int rc = read_overrides(s, tenant, &o, NULL, updated_at);
	if (rc < 0)
		return rc;
	rc = route_policy_defaults(cfg, out, err, sizeof err);
	size_t unknown = 0;
	/* Stored overrides were checked when set; a key this binary does not
	 * know is skipped (one log line per load), never a reason to refuse
	 * every command. A known key it cannot apply fails the load closed:
	 * the defaults in its place could lift a limit the operator set. */
	if (rc == 0 && apply(out, o, &unknown, err, sizeof err) < 0) {
		log_msg("error", "tenant %s: stored policy cannot be applied: %s", tenant, err);
		route_policy_clear(out);
		rc = -SBX_E_BACKEND;
	}
	if (unknown)
		log_msg("warn", "tenant %s: %zu stored policy key(s) unknown to this binary skipped", tenant,
			unknown);
	if (overrides)
		*overrides = json_incref(o);
	json_decref(o);
	return rc;
}

/* What changes does to overrides (both objects); -EINVAL with err. */
static int merge(json_t *overrides, json_t *changes, const struct sbx_config *cfg, char *err, size_t errsz)
{
	const char *name;
	json_t *v;
	if (!json_is_object(changes) || json_object_size(changes) == 0) {
		snprintf(err, errsz, "give at least one policy key");
		return -EINVAL;
	}
	json_object_foreach(changes, name, v) {
		const struct policy_key *k = key_find(name);
		if (!k) {
			snprintf(err, errsz, "unknown policy key \"%s\"", name);
			return -EINVAL;
		}
		if (json_is_null(v)) {
			json_object_del(overrides, k->name);
			continue;
		}
		struct route_policy scratch = {0};
		int rc = set_value(&scratch, k, v, err, errsz);
		route_policy_clear(&scratch);
		if (rc < 0)
			return rc;
		if (k->kind == PK_BACKEND && !route_policy_backend_offered(cfg, json_string_value(v))) {
			snprintf(err, errsz, "backend %s is not offered by this server (backends: %s)",
				 json_string_value(v), cfg->backends ? cfg->backends : cfg->backend);
			return -EINVAL;
		}
		json_object_set(overrides, k->name, v);
	}
	return 0;
}

/* {"old": {...}, "new": {...}}: the effective values of the changed keys. */
static json_t *change_of(const struct sbx_config *cfg, json_t *before, json_t *after, json_t *changes)
{
	struct route_policy a, b;
	char err[256];
	route_policy_defaults(cfg, &a, err, sizeof err);
	route_policy_defaults(cfg, &b, err, sizeof err);
	apply(&a, before, NULL, err, sizeof err);
	apply(&b, after, NULL, err, sizeof err);
	json_t *old = json_object(), *new = json_object();
	const char *name;
	json_t *v;
	json_object_foreach(changes, name, v) {
		const struct policy_key *k = key_find(name);
		json_object_set_new(old, k->name, value_json(&a, k));
		json_object_set_new(new, k->name, value_json(&b, k));
	}
	route_policy_clear(&a);
	route_policy_clear(&b);
	return json_pack("{s:o, s:o}", "old", old, "new", new);
}

/* Backend remote needs its URL and token file: refused at once rather
 * than failing every request later. */
static int remote_complete(const struct sbx_config *cfg, json_t *overrides, char *err, size_t errsz)
{
	struct route_policy p;
	if (route_policy_defaults(cfg, &p, err, errsz) < 0)
		return -EINVAL;
	int rc = apply(&p, overrides, NULL, err, errsz);
	enum sbx_backend_id id = route_policy_kind(&p)->id;
	if (rc == 0 && id == SBX_BK_REMOTE && (!p.remote_url || !p.remote_token_file)) {
		snprintf(err, errsz, "backend remote needs remote_url and remote_token_file");
		rc = -EINVAL;
	}
	if (rc == 0 && id == SBX_BK_SSH &&
	    (!p.ssh_host || !p.ssh_user || !p.ssh_root || !p.ssh_key_file || !p.ssh_host_key)) {
		snprintf(err, errsz,
			 "backend ssh needs ssh_host, ssh_user, ssh_root, ssh_key_file and ssh_host_key");
		rc = -EINVAL;
	}
	route_policy_clear(&p);
	return rc;
}

/* One back tenant per front tenant (issue 26 item 11): two front tenants
 * naming the same back tenant would read and change each other's files
 * there. Refused when set (-EEXIST); a back tenant that cannot be told yet
 * (its token file not there) is checked again at use (routes/remote.c). */
static int back_unique(struct store *s, const struct sbx_config *cfg, const char *tenant, json_t *overrides,
		       char *err, size_t errsz)
{
	struct route_policy p;
	char mine[400], theirs[400], why[320];
	if (route_policy_defaults(cfg, &p, err, errsz) < 0)
		return -EINVAL;
	int rc = apply(&p, overrides, NULL, err, errsz);
	bool remote = rc == 0 && route_policy_kind(&p)->id == SBX_BK_REMOTE &&
		      route_remote_back_of(&p, mine, sizeof mine, why, sizeof why) == 0;
	route_policy_clear(&p);
	if (!remote)
		return rc;
	struct store_tenant *v = NULL;
	size_t n = 0;
	if (store_tenant_list(s, &v, &n) < 0)
		return -SBX_E_STORE;
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct route_policy q;
		if (strcmp(v[i].name, tenant) == 0 ||
		    route_policy_load(s, cfg, v[i].name, &q, NULL, NULL) < 0)
			continue;
		if (route_policy_kind(&q)->id == SBX_BK_REMOTE &&
		    route_remote_back_of(&q, theirs, sizeof theirs, why, sizeof why) == 0 &&
		    strcmp(mine, theirs) == 0) {
			snprintf(
			    err, errsz,
			    "tenant %s already names this back tenant (%s): one back tenant per front tenant",
			    v[i].name, mine);
			rc = -EEXIST;
		}
		route_policy_clear(&q);
	}
	store_tenants_free(v, n);
	return rc;
}

int route_policy_update(struct store *s, const struct sbx_config *cfg, const char *tenant, json_t *changes,
			json_t **change, char *err, size_t errsz)
{
	for (int attempt = 0; attempt < 16; attempt++) {
		json_t *cur = NULL;
		char *text = NULL;
		int rc = read_overrides(s, tenant, &cur, &text, NULL);
		if (rc < 0)
			return rc;
		json_t *next = json_deep_copy(cur);
		rc = merge(next, changes, cfg, err, errsz);
		if (rc == 0)
			rc = remote_complete(cfg, next, err, errsz);
		if (rc == 0)
			rc = back_unique(s, cfg, tenant, next, err, errsz);
		char *next_text = rc == 0 ? json_dumps(next, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
		if (rc == 0)
			rc = store_policy_replace(s, tenant, text, next_text, now_ms());
		if (rc == 0 && change)
			*change = change_of(cfg, cur, next, changes);
		free(next_text);
		free(text);
		json_decref(cur);
		json_decref(next);
		if (rc != -EAGAIN)
			return rc;
	}
	return -SBX_E_STORE;
}

int route_policy_kv(const char *kv, json_t *changes, char *err, size_t errsz)
{
	const char *eq = strchr(kv, '=');
	char name[32];
	if (!eq || (size_t)(eq - kv) >= sizeof name) {
		snprintf(err, errsz, "\"%s\": expected KEY=VALUE", kv);
		return -EINVAL;
	}
	memcpy(name, kv, (size_t)(eq - kv));
	name[eq - kv] = '\0';
	const struct policy_key *k = key_find(name);
	const char *val = eq + 1;
	if (!k) {
		snprintf(err, errsz, "unknown policy key \"%s\"", name);
		return -EINVAL;
	}
	json_t *v = NULL;
	if (strcmp(val, "default") == 0) {
		v = json_null();
	} else if (k->kind == PK_INT || k->kind == PK_MILLICORES || k->kind == PK_OPTINT) {
		char *end = NULL;
		errno = 0;
		long long x = strtoll(val, &end, 10);
		v = end != val && !*end && !errno ? json_integer(x) : NULL;
	} else if (k->kind == PK_APPROVAL && val[0] == '[') {
		v = json_loads(val, 0, NULL);
	} else {
		v = json_string(val);
	}
	if (!v) {
		snprintf(err, errsz, "%s: cannot read \"%s\"", k->name, val);
		return -EINVAL;
	}
	json_object_set_new(changes, k->name, v);
	return 0;
}

int route_policy_view(struct store *s, const struct sbx_config *cfg, const char *tenant, json_t **out)
{
	struct route_policy p;
	json_t *overrides = NULL;
	int64_t at = 0;
	int rc = route_policy_load(s, cfg, tenant, &p, &overrides, &at);
	if (rc < 0)
		return rc;
	char ts[40];
	rfc3339_ms(at, ts, sizeof ts);
	*out = json_pack("{s:s, s:o, s:o, s:o}", "tenant", tenant, "policy", route_policy_json(&p),
			 "overrides", overrides, "updated_at", at ? json_string(ts) : json_null());
	route_policy_clear(&p);
	return 0;
}
