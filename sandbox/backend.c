#include "sandbox/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/xmalloc.h"
#include "sandbox/backend_impl.h"
#include "sandbox/cgroup.h"
#include "sandbox/warm.h"
#include "sandbox/egress/gateway.h"

void sbx_backend_set_egress(struct sbx_backend *b, struct sbx_egress_gateway *g)
{
	if (b)
		b->egress = g;
}

/* ---- dispatch ---- */

static const struct sbx_backend_ops *const backends[] = {
    &sbx_backend_bwrap_ops,
    &sbx_backend_local_ops,
};

int sbx_backend_new(struct sbx_backend **out, const struct sbx_backend_config *cfg)
{
	const struct sbx_backend_ops *ops = NULL;
	struct sbx_backend *b;
	size_t i;
	int rc;

	if (!out || !cfg || !cfg->name)
		return -EINVAL;
	for (i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		if (strcmp(backends[i]->name, cfg->name) == 0)
			ops = backends[i];
	}
	if (!ops)
		return -EINVAL;
	b = xcalloc(1, sizeof(*b));
	b->ops = ops;
	pthread_mutex_init(&b->net_mu, NULL);
	b->cgroup_root = xstrdup(cfg->cgroup_root ? cfg->cgroup_root : "sandboxd/default");
	struct sbx_cgroup_caps caps;
	b->cgroups = cfg->use_cgroups && geteuid() == 0 && sbx_cgroup_probe(b->cgroup_root, &caps) == 0;
	if (!cfg->use_cgroups)
		snprintf(b->uncontained_why, sizeof b->uncontained_why, "use-cgroups=false");
	else if (geteuid() != 0)
		snprintf(b->uncontained_why, sizeof b->uncontained_why,
			 "not root: cgroups need a root server (or root of its own user namespace with a "
			 "writable, delegated cgroup2 tree)");
	else if (!b->cgroups)
		snprintf(b->uncontained_why, sizeof b->uncontained_why, "%s",
			 caps.why[0] ? caps.why : "no usable cgroup hierarchy");
	b->cgroup_lock = -1;
	if (b->cgroups && !cfg->cgroup_shared) {
		b->cgroup_lock = sbx_cgroup_claim(b->cgroup_root);
		if (b->cgroup_lock < 0) {
			rc = b->cgroup_lock;
			free(b->cgroup_root);
			free(b);
			return rc;
		}
	}
	rc = ops->init(b, cfg);
	if (rc < 0) {
		if (b->cgroup_lock >= 0)
			close(b->cgroup_lock);
		free(b->cgroup_root);
		free(b);
		return rc;
	}
	if (cfg->warm_per_tenant && ops->warm) {
		rc = sbx_warm_new(&b->warm, b, cfg->warm_per_tenant, cfg->warm_idle_ms);
		if (rc < 0)
			log_msg("warn", "warm sandboxes off: %s", sbx_strerror(rc));
	}
	*out = b;
	return 0;
}

void sbx_backend_free(struct sbx_backend **pb)
{
	struct sbx_backend *b;

	if (!pb || !*pb)
		return;
	b = *pb;
	sbx_warm_free(&b->warm);
	while (b->nets) /* commands never reaped: their sessions must not outlive us */
		sbx_backend_net_down(b, b->nets->seq, NULL);
	pthread_mutex_destroy(&b->net_mu);
	b->ops->fini(b);
	/* The claiming backend (the one with the lock) cleans the root up; a
	 * backend sharing it leaves it to that one. */
	if (b->cgroup_lock >= 0)
		sbx_cgroup_release(b->cgroup_root, b->cgroup_lock);
	free(b->cgroup_root);
	free(b);
	*pb = NULL;
}

const char *sbx_backend_name(const struct sbx_backend *b)
{
	return b ? b->ops->name : NULL;
}

const char *sbx_backend_isolation(const struct sbx_backend *b)
{
	return b ? b->ops->isolation : NULL;
}

int sbx_backend_spawn(struct sbx_backend *b, const struct sbx_spawn_req *req, pid_t *pid, int *pidfd)
{
	if (b && req && pid && pidfd && req->command && req->workspace_host_dir &&
	    sbx_cwd_rel_ok(req->cwd_rel)) {
		int rc = sbx_warm_take(b->warm, req, pid, pidfd);
		if (rc != 0)
			return rc < 0 ? rc : 0;
	} else if (b && req && req->warm_box) {
		struct sbx_warm_box *bx = req->warm_box;
		sbx_warm_unclaim(b->warm, &bx);
	}
	return sbx_backend_launch(b, req, -1, -1, pid, pidfd);
}

void sbx_backend_reap(struct sbx_backend *b, const struct sbx_spawn_req *req, struct sbx_cgroup_outcome *out,
		      struct sbx_egress_summary *egress)
{
	if (out)
		*out = (struct sbx_cgroup_outcome){0};
	if (egress)
		*egress = (struct sbx_egress_summary){0};
	if (!b || !req)
		return;
	if (req->net_allow)
		sbx_backend_net_down(b, req->seq, egress);
	uint64_t group = sbx_warm_group(b->warm, req->seq);
	if (b->cgroups)
		sbx_cgroup_remove(b->cgroup_root, req->uid, group, out);
}

int sbx_backend_tenant_usage(struct sbx_backend *b, uid_t uid, uint64_t *mem_bytes, uint64_t *nproc)
{
	if (!b || !b->cgroups)
		return -ENOTSUP;
	return sbx_cgroup_tenant_usage(b->cgroup_root, uid, mem_bytes, nproc);
}

int sbx_backend_tenant_cpu(struct sbx_backend *b, uid_t uid, uint64_t *usage_ns, uint64_t *throttled_ns)
{
	if (!b || !b->cgroups)
		return -ENOTSUP;
	return sbx_cgroup_tenant_cpu(b->cgroup_root, uid, usage_ns, throttled_ns);
}

int sbx_backend_tenant_pressure(struct sbx_backend *b, uid_t uid, struct sbx_cgroup_pressure *out)
{
	if (!b || !b->cgroups || !sbx_cgroup_caps()->psi)
		return -ENOTSUP;
	return sbx_cgroup_tenant_pressure(b->cgroup_root, uid, out);
}

const char *sbx_backend_uncontained_why(const struct sbx_backend *b)
{
	return !b ? "no backend" : b->cgroups ? "" : b->uncontained_why;
}

bool sbx_backend_cpu(const struct sbx_backend *b, bool *usage)
{
	const struct sbx_cgroup_caps *c = sbx_cgroup_caps();
	if (usage)
		*usage = b && b->cgroups && c->cpu_usage;
	return b && b->cgroups && c->cpu;
}

int sbx_backend_sweep(struct sbx_backend *b)
{
	return b && b->cgroups ? sbx_cgroup_sweep(b->cgroup_root) : 0;
}

void sbx_backend_kept_groups(const struct sbx_backend *b, unsigned *busy, unsigned *idle)
{
	*busy = *idle = 0;
	if (b && b->cgroups)
		sbx_cgroup_kept(b->cgroup_root, busy, idle);
}

bool sbx_backend_contained(const struct sbx_backend *b)
{
	return b && b->cgroups;
}

uint64_t sbx_backend_refused_limits(const struct sbx_backend *b)
{
	return b ? b->refused_limits : 0;
}

int sbx_backend_health(struct sbx_backend *b, char *msg, size_t msgsz)
{
	char part[256];
	int rc;

	if (!b)
		return -EINVAL;
	rc = b->ops->health(b, part, sizeof(part));
	const char *ver = sbx_cgroup_caps()->version == 2 ? "v2" : "v1";
	if (msg && msgsz)
		snprintf(msg, msgsz, "%s; cgroup %s%s%s%s; rlimits on", part,
			 b->cgroups ? "memory+pids " : "none", b->cgroups ? ver : "",
			 sbx_backend_cpu(b, NULL) ? ", cpu " : "", sbx_backend_cpu(b, NULL) ? ver : "");
	return rc;
}

void sbx_backend_warm_stats(struct sbx_backend *b, struct sbx_warm_stats *out)
{
	sbx_warm_stats(b ? b->warm : NULL, out);
}

void sbx_backend_warm_flush(struct sbx_backend *b, uid_t uid)
{
	if (b)
		sbx_warm_flush(b->warm, uid);
}

struct sbx_warm_box *sbx_backend_warm_claim(struct sbx_backend *b, const struct sbx_spawn_req *req)
{
	if (!b || !req || !req->net_allow || !req->command || !req->workspace_host_dir ||
	    !sbx_cwd_rel_ok(req->cwd_rel))
		return NULL;
	return sbx_warm_claim(b->warm, req);
}

void sbx_backend_warm_unclaim(struct sbx_backend *b, struct sbx_warm_box **bx)
{
	if (b)
		sbx_warm_unclaim(b->warm, bx);
}
