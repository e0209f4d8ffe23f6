/* Subcommands other than serve: tenant, token, migrate, audit. They open
 * the store directly (WAL lets them run while the server does). */
#include "server/cli.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth/auth.h"
#include "common/errors.h"
#include "common/buf.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "routes/audit.h"
#include "routes/audit_nodes.h"
#include "routes/policy.h"
#include "sandbox/diskimg.h"
#include "server/datadir.h"
#include "server/leftovers.h"
#include "store/store.h"

static int open_store(struct sbx_config *cfg, bool migrate, struct store **s)
{
	char err[512] = "";
	int rc = srv_prepare_data_dir(cfg);
	if (rc < 0)
		return rc;
	rc = store_open(s, cfg->db_path, migrate, err, sizeof err);
	if (rc < 0)
		fprintf(stderr, "sandboxd: %s: %s\n", cfg->db_path, *err ? err : sbx_strerror(rc));
	return rc;
}

int cli_open_store(struct sbx_config *cfg, bool migrate, struct store **s)
{
	return open_store(cfg, migrate, s);
}

static bool tenant_name_ok(const char *n)
{
	size_t len = strlen(n);
	if (len < 1 || len > 63)
		return false;
	if (!((n[0] >= 'a' && n[0] <= 'z') || (n[0] >= '0' && n[0] <= '9')))
		return false;
	for (size_t i = 1; i < len; i++)
		if (!((n[i] >= 'a' && n[i] <= 'z') || (n[i] >= '0' && n[i] <= '9') || n[i] == '_' ||
		      n[i] == '-'))
			return false;
	return true;
}

static int read_whole(const char *path, size_t max, unsigned char **out, size_t *len)
{
	struct buf b;
	buf_init(&b, max);
	int rc = buf_read_file(&b, path);
	if (rc < 0) {
		buf_free(&b);
		return rc;
	}
	*out = (unsigned char *)buf_steal(&b, len);
	return 0;
}

/* A generated secret is 32 random bytes written as 43 base64url characters;
 * the secret *is* that text, so a gateway can paste it as it is. */
static char *generate_secret(void)
{
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	unsigned char rnd[33];
	if (auth_random(rnd, sizeof rnd) < 0)
		return NULL;
	char *s = xmalloc(45);
	size_t o = 0;
	for (size_t i = 0; i < 33; i += 3) {
		unsigned v = (unsigned)rnd[i] << 16 | (unsigned)rnd[i + 1] << 8 | rnd[i + 2];
		s[o++] = b64[(v >> 18) & 63];
		s[o++] = b64[(v >> 12) & 63];
		s[o++] = b64[(v >> 6) & 63];
		s[o++] = b64[v & 63];
	}
	s[43] = '\0'; /* 43 characters carry 258 bits; keep 256 bits' worth and more */
	return s;
}

/* An RS256/ES256 tenant's key: the public key file, checked. Returns the
 * exit status on failure (said on stderr), 0 when t->key and t->alg are set. */
static int public_key_of(struct store_tenant *t, const struct cli_args *a)
{
	enum auth_alg alg;
	const char *why = NULL;
	int rc;
	if (!a->alg || auth_alg_parse(a->alg, &alg) < 0 || alg == AUTH_ALG_HS256) {
		fprintf(stderr, "sandboxd: --public-key needs --alg RS256 or --alg ES256\n");
		return 2;
	}
	if ((rc = read_whole(a->public_key, 64 * 1024, &t->key, &t->key_len)) < 0) {
		fprintf(stderr, "sandboxd: %s: %s\n", a->public_key, sbx_strerror(rc));
		return 1;
	}
	if (auth_check_public_key(t->key, t->key_len, alg, &why) < 0) {
		fprintf(stderr, "sandboxd: %s: %s\n", a->public_key, why);
		free(t->key);
		t->key = NULL;
		return 1;
	}
	snprintf(t->alg, sizeof t->alg, "%s", auth_alg_name(alg));
	return 0;
}

/* An HS256 tenant's key: the secret file (at least 256 bits), or a fresh
 * secret, also left in *generated to be shown once. Exit status on
 * failure (said on stderr), else 0. */
static int secret_of(struct store_tenant *t, const struct cli_args *a, char **generated)
{
	int rc;
	if (a->alg && strcmp(a->alg, "HS256") != 0) {
		fprintf(stderr, "sandboxd: --alg %s needs --public-key\n", a->alg);
		return 2;
	}
	snprintf(t->alg, sizeof t->alg, "HS256");
	if (!a->secret_file) {
		*generated = generate_secret();
		if (!*generated) {
			fprintf(stderr, "sandboxd: cannot read random bytes\n");
			return 1;
		}
		t->key = (unsigned char *)xstrdup(*generated);
		t->key_len = strlen(*generated);
		return 0;
	}
	if ((rc = read_whole(a->secret_file, 64 * 1024, &t->key, &t->key_len)) < 0) {
		fprintf(stderr, "sandboxd: %s: %s\n", a->secret_file, sbx_strerror(rc));
		return 1;
	}
	/* One trailing newline is an artefact of editors and echo, not key material. */
	if (t->key_len && t->key[t->key_len - 1] == '\n')
		t->key_len--;
	if (t->key_len && t->key[t->key_len - 1] == '\r')
		t->key_len--;
	if (t->key_len < 32) {
		fprintf(stderr, "sandboxd: an HS256 secret must be at least 32 bytes (256 bits)\n");
		free(t->key);
		t->key = NULL;
		return 1;
	}
	return 0;
}

/* A name whose directory is still there (a removed tenant's workspace
 * or disk image, files of its uid) is refused unless the operator says:
 * --fresh moves it aside, --reuse-leftovers gives it to the new tenant,
 * with the removed one's uid slot (its files' owner), once no process of
 * that uid runs. 0 to go on (*reuse_slot: the slot to take, or -1), else
 * the exit status. */
static int leftovers_for_add(struct store *s, const struct sbx_config *cfg, const struct cli_args *a,
			     const char *name, int64_t *reuse_slot)
{
	struct store_tenant live;
	if (store_tenant_get(s, name, &live) == 0) {
		store_tenant_clear(&live);
		return 0; /* store_tenant_add says it exists */
	}
	if (a->fresh && a->reuse_leftovers) {
		fprintf(stderr, "sandboxd: give --fresh or --reuse-leftovers, not both\n");
		return 2;
	}
	int64_t slot = -1, life = 0;
	if (store_tenant_last_life(s, name, &slot, &life) < 0)
		slot = -1;
	if (!srv_leftovers_present(cfg, name))
		return 0;
	if (!a->fresh && !a->reuse_leftovers) {
		fprintf(
		    stderr,
		    "sandboxd: %s/tenants/%s is still there (a removed tenant %s's workspace or disk image, "
		    "owned by its uid): add with --fresh to move it aside to %s/removed/ and start empty, or "
		    "with --reuse-leftovers to give it to the new tenant\n",
		    cfg->data_dir, name, name, cfg->data_dir);
		return 1;
	}
	if (a->fresh) {
		char dest[512];
		int rc = srv_leftovers_move_aside(cfg, name, life, dest, sizeof dest);
		if (rc < 0) {
			fprintf(stderr, "sandboxd: cannot move %s/tenants/%s aside: %s\n", cfg->data_dir,
				name, sbx_strerror(rc));
			return 1;
		}
		printf("the leftovers of %s are moved to %s\n", name, dest);
		return 0;
	}
	if (slot >= 0) {
		int n = srv_uid_processes((uid_t)(cfg->uid_base + slot));
		if (n > 0) {
			fprintf(stderr,
				"sandboxd: %d processes of the removed %s's uid %lld still run: stop them "
				"(or the "
				"server) first\n",
				n, name, (long long)(cfg->uid_base + slot));
			return 1;
		}
	} else {
		printf("(no earlier life of %s is recorded: the new tenant gets a new uid, and files of "
		       "another uid in its workspace stay that uid's)\n",
		       name);
	}
	*reuse_slot = slot;
	return 0;
}

static int tenant_add(struct store *s, const struct sbx_config *cfg, const struct cli_args *a)
{
	if (a->nwords != 2) {
		fprintf(stderr, "sandboxd: usage: tenant add NAME [--secret-file F | --public-key F --alg "
				"RS256|ES256] [--operator]\n");
		return 2;
	}
	const char *name = a->words[1];
	if (!tenant_name_ok(name)) {
		fprintf(stderr, "sandboxd: tenant name must match [a-z0-9][a-z0-9_-]{0,62}\n");
		return 2;
	}
	if (a->secret_file && a->public_key) {
		fprintf(stderr, "sandboxd: give --secret-file or --public-key, not both\n");
		return 2;
	}
	int64_t reuse_slot = -1;
	int rc = leftovers_for_add(s, cfg, a, name, &reuse_slot);
	if (rc != 0)
		return rc;
	struct store_tenant t = {0};
	snprintf(t.name, sizeof t.name, "%s", name);
	t.operator_tenant = a->operator_tenant;
	t.created_at = now_ms();
	char *generated = NULL;
	rc = a->public_key ? public_key_of(&t, a) : secret_of(&t, a, &generated);
	if (rc != 0)
		return rc;
	rc = store_tenant_add(s, &t, reuse_slot);
	free(t.key);
	if (rc < 0) {
		if (rc == -EEXIST)
			fprintf(stderr, "sandboxd: tenant %s exists\n", name);
		else if (rc == -EBUSY)
			fprintf(stderr,
				"sandboxd: the uid slot %lld of the removed %s is another tenant's now\n",
				(long long)reuse_slot, name);
		else
			fprintf(stderr, "sandboxd: cannot add tenant %s: %s\n", name, sbx_strerror(rc));
		free(generated);
		return 1;
	}
	printf("tenant %s added (%s%s)\n", name, t.alg, a->operator_tenant ? ", operator" : "");
	if (generated) {
		printf("secret: %s\n", generated);
		printf("(the secret is shown once; store it now. It is the HS256 key of this tenant's "
		       "tokens.)\n");
		free(generated);
	}
	return 0;
}

/* The audit row of a change made here (route "tenant set", "tenant
 * set-approver"): who (the Unix user), the tenant, and what changed. */
static void audit_cli_change(struct store *s, const char *tenant, const char *route, json_t *change)
{
	json_object_set_new(change, "tenant", json_string(tenant));
	char *target = json_dumps(change, JSON_COMPACT | JSON_SORT_KEYS);
	char who[64], rid[48];
	snprintf(who, sizeof who, "cli:uid %u", (unsigned)getuid());
	int64_t now = now_ms();
	snprintf(rid, sizeof rid, "cli-%lld-%d", (long long)now, (int)getpid());
	struct store_audit rec = {.at = now,
				  .tenant = tenant,
				  .request_id = rid,
				  .method = "CLI",
				  .route = route,
				  .target = target,
				  .status = 200,
				  .outcome = "ok",
				  .client = "local",
				  .sub = who};
	store_audit_append(s, &rec);
	store_audit_flush(s);
	free(target);
}

static int print_json(json_t *j)
{
	char *t = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	json_decref(j);
	if (!t)
		return 1;
	printf("%s\n", t);
	free(t);
	return 0;
}

/* tenant set NAME KEY=VALUE...: applies to the running server's next
 * command (it reads the policy from the store at each command). */
static int tenant_set(struct store *s, struct sbx_config *cfg, const struct cli_args *a)
{
	char err[512] = "";
	if (a->nwords < 3) {
		fprintf(stderr,
			"sandboxd: usage: tenant set NAME KEY=VALUE ... (VALUE \"default\" resets a key)\n");
		return 2;
	}
	json_t *changes = json_object(), *change = NULL;
	int rc = 0;
	for (int i = 2; i < a->nwords && rc == 0; i++)
		rc = route_policy_kv(a->words[i], changes, err, sizeof err);
	/* As PUT /tenants/{name}/policy: no disk images, no I/O budget. Which
	 * mode "auto" becomes is the server's to find; this knows the
	 * configured one only. */
	const char *io =
	    rc == 0 && (strcmp(cfg->disk_quota, "none") == 0 || strcmp(cfg->disk_quota, "project") == 0)
		? route_policy_io_set(changes)
		: NULL;
	if (io) {
		snprintf(err, sizeof err, "%s: I/O budgets need disk images (disk-quota=image; it is %s)", io,
			 cfg->disk_quota);
		rc = -EINVAL;
	}
	if (rc == 0)
		rc = route_policy_update(s, cfg, a->words[1], changes, &change, err, sizeof err);
	json_decref(changes);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: %s\n",
			rc == -ENOENT ? "no such tenant"
			: *err	      ? err
				      : sbx_strerror(rc));
		return rc == -EINVAL ? 2 : 1;
	}
	audit_cli_change(s, a->words[1], "tenant set", change);
	json_decref(change);
	json_t *view = NULL;
	return route_policy_view(s, cfg, a->words[1], &view) == 0 ? print_json(view) : 1;
}

static int tenant_show(struct store *s, struct sbx_config *cfg, const char *name)
{
	json_t *view = NULL;
	int rc = route_policy_view(s, cfg, name, &view);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: %s\n", rc == -ENOENT ? "no such tenant" : sbx_strerror(rc));
		return 1;
	}
	return print_json(view);
}

/* The key a new approver key must not be: the tenant's main key (its
 * gateway holds it, and would approve its own requests). 0, or the exit
 * status (said on stderr). */
static int approver_differs(struct store *s, const char *name, const struct store_tenant *k)
{
	struct store_tenant t;
	int rc = store_tenant_get(s, name, &t);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: %s\n", rc == -ENOENT ? "no such tenant" : sbx_strerror(rc));
		return 1;
	}
	bool same =
	    strcmp(t.alg, k->alg) == 0 && t.key_len == k->key_len && memcmp(t.key, k->key, t.key_len) == 0;
	store_tenant_clear(&t);
	if (same)
		fprintf(stderr, "sandboxd: the approver key must not be the tenant's main key (whoever holds "
				"that, a gateway, would approve its own requests)\n");
	return same ? 1 : 0;
}

/* tenant set-approver NAME [--secret-file F | --public-key F --alg A]:
 * the key of the tenant's approve tokens (docs/tenants.md, "Approval"); a fresh
 * HS256 secret, shown once, without a file. A running server takes it
 * within seconds (its tenant cache). */
static int tenant_set_approver(struct store *s, const struct cli_args *a)
{
	if (a->nwords != 2 || (a->secret_file && a->public_key)) {
		fprintf(stderr, "sandboxd: usage: tenant set-approver NAME [--secret-file F | --public-key F "
				"--alg RS256|ES256]\n");
		return 2;
	}
	struct store_tenant k = {0};
	char *generated = NULL;
	int rc = a->public_key ? public_key_of(&k, a) : secret_of(&k, a, &generated);
	if (rc == 0)
		rc = approver_differs(s, a->words[1], &k);
	if (rc == 0 && (rc = store_tenant_set_approver(s, a->words[1], k.alg, k.key, k.key_len)) < 0) {
		fprintf(stderr, "sandboxd: cannot set the approver key of %s: %s\n", a->words[1],
			rc == -ENOENT ? "no such tenant" : sbx_strerror(rc));
		rc = 1;
	}
	free(k.key);
	if (rc == 0) {
		json_t *change = json_pack("{s:s}", "approver_alg", k.alg);
		audit_cli_change(s, a->words[1], "tenant set-approver", change);
		json_decref(change);
		printf("tenant %s: approver key set (%s); only its tokens approve or reject\n", a->words[1],
		       k.alg);
		if (generated)
			printf(
			    "approver secret: %s\n(shown once; give it to the people who approve, never to "
			    "the gateway)\n",
			    generated);
	}
	free(generated);
	return rc;
}

/* tenant clear-approver NAME: nothing of the tenant can be approved any
 * more (commands that wait for approval are rejected at the timeout). */
static int tenant_clear_approver(struct store *s, const struct cli_args *a)
{
	if (a->nwords != 2) {
		fprintf(stderr, "sandboxd: usage: tenant clear-approver NAME\n");
		return 2;
	}
	int rc = store_tenant_set_approver(s, a->words[1], NULL, NULL, 0);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: %s\n", rc == -ENOENT ? "no such tenant" : sbx_strerror(rc));
		return 1;
	}
	json_t *change = json_pack("{s:n}", "approver_alg");
	audit_cli_change(s, a->words[1], "tenant set-approver", change);
	json_decref(change);
	printf("tenant %s: approver key removed\n", a->words[1]);
	return 0;
}

/* A removed tenant's disk image (disk-quota=image) is unmounted now,
 * which frees its loop device once nothing uses it; the image file is
 * left with the rest of its directory. The image is mounted in the
 * running server's mount namespace (sandbox/diskimg.h): entered for the
 * unmount; an earlier version's mount on the host goes too. A running
 * server notices the removal within seconds and would do the same. */
static void detach_image(const struct sbx_config *cfg, const char *name)
{
	char *tdir = xasprintf("%s/tenants/%s", cfg->data_dir, name);
	int rc = sbx_diskimg_detach(tdir);
	pid_t pid = 0;
	int r = sbx_diskimg_detach_in_server(cfg->data_dir, tdir, &pid);
	if (r < 0 && r != -ESRCH)
		fprintf(stderr,
			"sandboxd: cannot unmount %s/workspace in the running server's mount namespace (pid "
			"%d): %s; the server unmounts it when it next sees the tenant gone\n",
			tdir, (int)pid, sbx_strerror(r));
	else if (rc >= 0 && r > 0)
		rc = r;
	if (rc > 0)
		printf("its disk image %s/disk.img is unmounted (its loop device is released)\n", tdir);
	else if (rc < 0)
		fprintf(stderr, "sandboxd: cannot unmount %s/workspace: %s\n", tdir, sbx_strerror(rc));
	free(tdir);
}

/* Remove the tenant (its rows go by cascade; its audit rows stay, of its
 * life), then its directory: moved aside by default, so that an
 * operator's mistake loses nothing and no later tenant of the name or of
 * its uid slot finds it; deleted with --purge. */
static int tenant_remove(struct store *s, const struct sbx_config *cfg, const char *name, bool purge)
{
	int64_t life = 0;
	int rc = store_tenant_remove(s, name, &life);
	if (rc == -ENOENT) {
		fprintf(stderr, "sandboxd: no tenant %s\n", name);
		return 1;
	}
	if (rc < 0) {
		fprintf(stderr, "sandboxd: cannot remove tenant %s\n", name);
		return 1;
	}
	printf("tenant %s removed\n", name);
	detach_image(cfg, name);
	char dest[512];
	rc = purge ? srv_leftovers_purge(cfg, name, life, dest, sizeof dest)
		   : srv_leftovers_move_aside(cfg, name, life, dest, sizeof dest);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: cannot %s the directory of %s: %s (left at %s)\n",
			purge ? "delete" : "move aside", name, sbx_strerror(rc),
			dest[0] ? dest : "its place under tenants/");
		return 1;
	}
	if (!purge && dest[0])
		printf("its directory (workspace or disk image) is moved to %s\n", dest);
	else if (purge)
		printf("its directory (workspace or disk image) is deleted\n");
	return 0;
}

int cli_tenant(struct sbx_config *cfg, const struct cli_args *a)
{
	if (a->nwords < 1) {
		fprintf(stderr, "sandboxd: usage: tenant add NAME ... | list | remove NAME | set NAME "
				"KEY=VALUE ... | show NAME | set-approver NAME ... | clear-approver NAME\n");
		return 2;
	}
	struct store *s = NULL;
	if (open_store(cfg, true, &s) < 0)
		return 1;
	int status = 2;
	const char *verb = a->words[0];
	if (strcmp(verb, "add") == 0) {
		status = tenant_add(s, cfg, a);
	} else if (strcmp(verb, "list") == 0) {
		struct store_tenant *v = NULL;
		size_t n = 0;
		if (store_tenant_list(s, &v, &n) < 0) {
			fprintf(stderr, "sandboxd: cannot list tenants\n");
			status = 1;
		} else {
			printf("%-32s %-6s %-9s %-8s %s\n", "NAME", "ALG", "OPERATOR", "APPROVER", "CREATED");
			for (size_t i = 0; i < n; i++) {
				char ts[40];
				rfc3339_ms(v[i].created_at, ts, sizeof ts);
				printf("%-32s %-6s %-9s %-8s %s\n", v[i].name, v[i].alg,
				       v[i].operator_tenant ? "yes" : "no",
				       v[i].approver_alg[0] ? v[i].approver_alg : "-", ts);
			}
			store_tenants_free(v, n);
			status = 0;
		}
	} else if (strcmp(verb, "set") == 0) {
		status = tenant_set(s, cfg, a);
	} else if (strcmp(verb, "set-approver") == 0) {
		status = tenant_set_approver(s, a);
	} else if (strcmp(verb, "clear-approver") == 0) {
		status = tenant_clear_approver(s, a);
	} else if (strcmp(verb, "show") == 0 && a->nwords == 2) {
		status = tenant_show(s, cfg, a->words[1]);
	} else if (strcmp(verb, "remove") == 0 && a->nwords == 2) {
		status = tenant_remove(s, cfg, a->words[1], a->purge);
	} else {
		fprintf(stderr, "sandboxd: usage: tenant add NAME ... | list | remove NAME | set NAME "
				"KEY=VALUE ... | show NAME | set-approver NAME ... | clear-approver NAME\n");
	}
	store_close(&s);
	return status;
}

/* Whether this CLI can mint the token asked for: an approve token only
 * with the tenant's approver key (the main key's never approve) and
 * only the scopes that key's tokens keep; an HS256 key either way. 0,
 * or -1 said on stderr. */
static int token_key_check(const struct store_tenant *t, const struct cli_args *a, bool approver)
{
	const char *alg = approver ? t->approver_alg : t->alg;
	if (approver && !t->approver_key) {
		fprintf(stderr,
			"sandboxd: tenant %s has no approver key: approve tokens are signed with it, never "
			"with the main key (sandboxd tenant set-approver %s)\n",
			a->tenant, a->tenant);
		return -1;
	}
	if (approver && (auth_scopes_parse(a->scope) & ~(unsigned)AUTH_SCOPES_APPROVER)) {
		fprintf(stderr, "sandboxd: an approve token carries only approve and audit:read (the "
				"approver key never runs commands or touches files)\n");
		return -1;
	}
	if (strcmp(alg, "HS256") != 0) {
		fprintf(stderr,
			"sandboxd: tenant %s's %s key is %s: mint its tokens with its private key%s\n",
			a->tenant, approver ? "approver" : "main", alg,
			approver ? " (header kid \"approver\")" : "");
		return -1;
	}
	return 0;
}

int cli_token(struct sbx_config *cfg, const struct cli_args *a)
{
	if (!a->tenant) {
		fprintf(stderr, "sandboxd: usage: token --tenant NAME [--scope \"...\"] [--ttl SECONDS]\n");
		return 2;
	}
	struct store *s = NULL;
	if (open_store(cfg, true, &s) < 0)
		return 1;
	struct store_tenant t;
	int status = 1;
	int rc = store_tenant_get(s, a->tenant, &t);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: no tenant %s\n", a->tenant);
		goto out;
	}
	bool approver = a->scope && (auth_scopes_parse(a->scope) & AUTH_SCOPE_APPROVE);
	if (token_key_check(&t, a, approver) < 0) {
		store_tenant_clear(&t);
		goto out;
	}
	int64_t now = now_ms() / 1000;
	if (a->ttl > INT64_MAX - now) {
		fprintf(stderr, "sandboxd: --ttl is too large\n");
		store_tenant_clear(&t);
		goto out;
	}
	char *tok = approver ? auth_mint_hs256_kid(t.approver_key, t.approver_key_len, AUTH_KID_APPROVER,
						   t.name, a->scope, a->sub, now, now + a->ttl, cfg->audience)
			     : auth_mint_hs256(t.key, t.key_len, t.name, a->scope, a->sub, now, now + a->ttl,
					       cfg->audience);
	store_tenant_clear(&t);
	if (!tok) {
		fprintf(stderr, "sandboxd: cannot mint a token\n");
		goto out;
	}
	printf("%s\n", tok);
	free(tok);
	status = 0;
out:
	store_close(&s);
	return status;
}

/* migrate's exit statuses besides 0 (done, or nothing to do) and 1 (an
 * error): docs/upgrades.md. */
#define MIGRATE_PENDING 10 /* --dry-run: migrations would run */
#define MIGRATE_NEWER 11   /* the store is newer than this binary: refused */

/* The embedded migrations numbered in (from, to], one a line. */
static void print_migrations(int from, int to)
{
	const char *name;
	int num = 0;

	for (size_t i = 0; (name = store_migration_name(i, &num)); i++)
		if (num > from && num <= to)
			printf("  %s\n", name);
}

/* migrate --dry-run: the store's version and what `migrate` would run,
 * read without changing anything (no data directory made either). */
static int migrate_dry_run(const struct sbx_config *cfg)
{
	char err[512] = "";
	int known = store_known_version(), v = 0;
	int r = store_peek_version(cfg->db_path, &v, err, sizeof err);

	if (r == -EPROTO) {
		fprintf(stderr, "sandboxd: %s: %s\n", cfg->db_path, err);
		return MIGRATE_NEWER;
	}
	if (r == -ENOENT) {
		printf("database %s does not exist yet: `sandboxd migrate` would create it\n", cfg->db_path);
	} else if (r < 0) {
		fprintf(stderr, "sandboxd: %s: %s\n", cfg->db_path, err);
		return 1;
	} else {
		printf("database %s: schema version %d, this binary's %d\n", cfg->db_path, v, known);
	}
	if (v == known) {
		printf("no migration pending\n");
		return 0;
	}
	printf("pending migrations, applied in this order in one transaction by `sandboxd migrate` (or "
	       "`serve`):\n");
	print_migrations(v, known);
	printf("dry run: nothing was changed\n");
	return MIGRATE_PENDING;
}

int cli_migrate(struct sbx_config *cfg, const struct cli_args *a)
{
	struct store *s = NULL;
	int from, to;

	if (a->dry_run)
		return migrate_dry_run(cfg);
	int r = open_store(cfg, true, &s);
	if (r < 0)
		return r == -EPROTO ? MIGRATE_NEWER : 1;
	from = store_opened_version(s);
	to = store_schema_version(s);
	if (from == to) {
		printf("database %s is at schema version %d (current)\n", cfg->db_path, to);
	} else {
		printf("database %s migrated from schema version %d to %d, applying:\n", cfg->db_path, from,
		       to);
		print_migrations(from, to);
	}
	store_close(&s);
	return 0;
}

struct audit_print {
	const char *format;
	size_t n;
	const char *node;
};

/* A tenant chose the target (a path, a command): on an operator's
 * terminal its control characters (ESC, C1 as UTF-8) become '?'. */
static char *term_safe(const char *s)
{
	char *o = xstrdup(s ? s : "");
	for (unsigned char *p = (unsigned char *)o; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			*p = '?';
		else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
			p[0] = p[1] = '?';
	}
	return o;
}

static int print_record(void *ctx, const struct store_audit *r)
{
	struct audit_print *p = ctx;
	if (strcmp(p->format, "table") == 0) {
		char ts[40];
		rfc3339_ms(r->at, ts, sizeof ts);
		char *method = term_safe(r->method), *target = term_safe(r->target);
		printf("%-8lld %-24s %-12s %-6s %-22s %-4d %-7s %s\n", (long long)r->id, ts, r->tenant,
		       method, r->route, r->status, r->outcome, target);
		free(method);
		free(target);
	} else {
		json_t *j = route_audit_json(r, p->node);
		char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
		if (!t) {
			json_decref(j);
			return 0;
		}
		printf("%s%s%s", strcmp(p->format, "json") == 0 && p->n ? ",\n" : "", t,
		       strcmp(p->format, "ndjson") == 0 ? "\n" : "");
		free(t);
		json_decref(j);
	}
	p->n++;
	return 0;
}

/* One merged record as the format says. */
static void print_merged(json_t *rec, const char *format, size_t n)
{
	if (strcmp(format, "table") != 0) {
		char *t = json_dumps(rec, JSON_COMPACT);
		printf("%s%s%s", strcmp(format, "json") == 0 && n ? ",\n" : "", t ? t : "{}",
		       strcmp(format, "ndjson") == 0 ? "\n" : "");
		free(t);
		return;
	}
	char *tenant = term_safe(json_string_value(json_object_get(rec, "tenant")));
	char *method = term_safe(json_string_value(json_object_get(rec, "method")));
	char *target = term_safe(json_string_value(json_object_get(rec, "target")));
	printf("%-12s %-8lld %-24s %-12s %-6s %-22s %-4lld %-7s %s\n",
	       json_string_value(json_object_get(rec, "node")),
	       (long long)json_integer_value(json_object_get(rec, "id")),
	       json_string_value(json_object_get(rec, "at")), tenant, method,
	       json_string_value(json_object_get(rec, "route")),
	       (long long)json_integer_value(json_object_get(rec, "status")),
	       json_string_value(json_object_get(rec, "outcome")), target);
	free(tenant);
	free(method);
	free(target);
}

/* Say on stderr which nodes did not answer (the records are the others'). */
static bool report_nodes(json_t *page)
{
	bool all = true;
	size_t i;
	json_t *st;
	json_array_foreach(json_object_get(page, "nodes"), i, st) {
		if (strcmp(json_string_value(json_object_get(st, "status")), "ok") == 0)
			continue;
		all = false;
		fprintf(stderr, "sandboxd: node %s %s: %s\n", json_string_value(json_object_get(st, "id")),
			json_string_value(json_object_get(st, "status")),
			json_string_value(json_object_get(st, "error")));
	}
	return all;
}

/* --all-nodes: merged pages (routes/audit_nodes.c) until --limit records
 * or the end. Exit 1 when a node did not answer (its records are missing). */
static int audit_all_nodes(struct sbx_config *cfg, const struct cli_args *a, struct store *s,
			   struct store_audit_filter f, const char *format)
{
	struct sbx_nodes nodes;
	char err[512] = "", *bearer = NULL;
	if (sbx_nodes_parse(cfg->nodes, &nodes, err, sizeof err) < 0) {
		fprintf(stderr, "sandboxd: %s\n", err);
		return 1;
	}
	if (a->token_file) {
		unsigned char *t = NULL;
		size_t n = 0;
		if (read_whole(a->token_file, 16384, &t, &n) < 0) {
			fprintf(stderr, "sandboxd: cannot read %s\n", a->token_file);
			sbx_nodes_free(&nodes);
			return 1;
		}
		bearer = xstrndup((char *)t, strcspn((char *)t, "\r\n"));
		free(t);
	}
	size_t want = f.limit, given = 0;
	char *cursor = NULL;
	int status = 0;
	bool complete = true;
	while (given < want) {
		json_t *page = NULL;
		f.limit = want - given < 1000 ? want - given : 1000;
		struct route_audit_ask ask = {.f = f, .cursor = cursor, .bearer = bearer};
		if (route_audit_gather(cfg, &nodes, s, &ask, &page, err, sizeof err) < 0) {
			fprintf(stderr, "sandboxd: %s\n", err);
			status = 1;
			break;
		}
		complete &= report_nodes(page);
		size_t i;
		json_t *rec;
		json_array_foreach(json_object_get(page, "records"), i, rec)
			print_merged(rec, format, given++);
		const char *next = json_string_value(json_object_get(page, "next"));
		free(cursor);
		cursor = next ? xstrdup(next) : NULL;
		json_decref(page);
		if (!cursor)
			break;
	}
	free(cursor);
	free(bearer);
	sbx_nodes_free(&nodes);
	return status ? status : complete ? 0 : 1;
}

int cli_audit(struct sbx_config *cfg, const struct cli_args *a)
{
	const char *format = a->format ? a->format : "table";
	if (strcmp(format, "table") && strcmp(format, "json") && strcmp(format, "ndjson")) {
		fprintf(stderr, "sandboxd: --format must be table, json or ndjson\n");
		return 2;
	}
	struct store_audit_filter f = {.tenant = a->tenant,
				       .route = a->route,
				       .outcome = a->outcome,
				       .session = a->session,
				       .session_len = a->session ? strlen(a->session) : 0,
				       .limit = a->limit > 0 ? (size_t)a->limit : 100};
	if (a->since && rfc3339_parse(a->since, &f.since) < 0) {
		fprintf(stderr, "sandboxd: --since must be an RFC 3339 time\n");
		return 2;
	}
	if (a->until && rfc3339_parse(a->until, &f.until) < 0) {
		fprintf(stderr, "sandboxd: --until must be an RFC 3339 time\n");
		return 2;
	}
	struct store *s = NULL;
	if (open_store(cfg, false, &s) < 0)
		return 1;
	if (a->all_nodes) {
		if (strcmp(format, "table") == 0)
			printf("%-12s %-8s %-24s %-12s %-6s %-22s %-4s %-7s %s\n", "NODE", "ID", "AT",
			       "TENANT", "METHOD", "ROUTE", "STAT", "OUTCOME", "TARGET");
		if (strcmp(format, "json") == 0)
			printf("[");
		int st = audit_all_nodes(cfg, a, s, f, format);
		if (strcmp(format, "json") == 0)
			printf("]\n");
		store_close(&s);
		return st;
	}
	struct audit_print p = {format, 0, cfg->node_id};
	if (strcmp(format, "table") == 0)
		printf("%-8s %-24s %-12s %-6s %-22s %-4s %-7s %s\n", "ID", "AT", "TENANT", "METHOD", "ROUTE",
		       "STAT", "OUTCOME", "TARGET");
	if (strcmp(format, "json") == 0)
		printf("[");
	int64_t last = 0;
	int rc = store_audit_query(s, &f, print_record, &p, &last);
	if (strcmp(format, "json") == 0)
		printf("]\n");
	store_close(&s);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: cannot read the audit table\n");
		return 1;
	}
	return 0;
}
