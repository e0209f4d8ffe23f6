/* "local": /bin/sh -c <command> on the host, in the workspace. No
 * isolation beyond rlimits, a new session, an optional uid drop and
 * cgroups; for the development loop only (the server refuses it without
 * --allow-unsafe-local). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/xmalloc.h"
#include "sandbox/backend_impl.h"

static int local_init(struct sbx_backend *b, const struct sbx_backend_config *cfg)
{
	return 0;
}

static void local_fini(struct sbx_backend *b)
{
}

/* Does req->env set NAME (name_len bytes, without '=')? */
static bool env_overrides(const char *const *env, const char *name, size_t name_len)
{
	size_t i;

	for (i = 0; env && env[i]; i++) {
		if (strncmp(env[i], name, name_len) == 0 && env[i][name_len] == '=')
			return true;
	}
	return false;
}

static int local_prepare(struct sbx_backend *b, const struct sbx_spawn_req *req, struct sbx_launch *l)
{
	const char *rel = req->cwd_rel ? req->cwd_rel : "";
	size_t i;
	int rc;

	if (req->rootfs)
		return -EINVAL; /* a root image needs bwrap's mount namespace */
	rc = sbx_cwd_check(req->workspace_host_dir, rel);
	if (rc < 0)
		return rc;
	l->cwd = rel[0] ? xasprintf("%s/%s", req->workspace_host_dir, rel) : xstrdup(req->workspace_host_dir);

	l->path = sbx_command_argv(&l->argv, req);

	if (!env_overrides(req->env, "PATH", 4))
		sbx_strv_add(&l->envp, "PATH=" SBX_ENV_PATH);
	if (!env_overrides(req->env, "HOME", 4))
		sbx_strv_addf(&l->envp, "HOME=%s", req->workspace_host_dir);
	if (!env_overrides(req->env, "LANG", 4))
		sbx_strv_add(&l->envp, "LANG=" SBX_ENV_LANG);
	for (i = 0; req->env && req->env[i]; i++) {
		const char *eq = strchr(req->env[i], '=');

		if (!eq || eq == req->env[i])
			return -EINVAL;
		sbx_strv_add(&l->envp, req->env[i]);
	}
	return 0;
}

static int local_health(struct sbx_backend *b, char *msg, size_t msgsz)
{
	snprintf(msg, msgsz, "local (unsafe: no isolation)");
	return 0;
}

const struct sbx_backend_ops sbx_backend_local_ops = {
    .name = "local",
    .isolation = "none: commands run on the host, in the workspace's host directory, with the "
		 "host's network and files (the tenant's uid when the server is root; rlimits and cgroups "
		 "only); development only",
    .init = local_init,
    .fini = local_fini,
    .prepare = local_prepare,
    .health = local_health,
};
