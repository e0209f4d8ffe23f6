#include "sandbox/backend.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/xmalloc.h"
#include "sandbox/backend_impl.h"
#include "sandbox/cgroup.h"
#include "sandbox/warm.h"
#include "sandbox/egress/gateway.h"

/* ---- network on request ---- */

struct sbx_backend_net {
	uint64_t seq;
	struct sbx_egress_session *ns;
	struct sbx_backend_net *next;
};

void sbx_backend_set_egress(struct sbx_backend *b, struct sbx_egress_gateway *g)
{
	if (b)
		b->egress = g;
}

/* The command's egress session, open (its namespace taken from the
 * gateway's pool, bound to the tenant's rules), or NULL without
 * net_allow. */
int sbx_backend_net_prepare(struct sbx_backend *b, const struct sbx_spawn_req *req,
			    struct sbx_egress_session **out)
{
	struct sbx_egress_rules *rules = NULL;
	char err[256];
	int rc;

	*out = NULL;
	if (!req->net_allow)
		return 0;
	if (sbx_backend_net_health(b, err, sizeof(err)) < 0 || !b->egress) {
		log_msg("error", "command %" PRIu64 " refused: network on request %s", req->seq,
			b->egress ? err : "unavailable: no egress gateway");
		return -SBX_E_BACKEND;
	}
	rc = sbx_egress_rules_parse(req->net_allow, &rules, err, sizeof(err));
	if (rc == 0) {
		struct sbx_egress_bind bind = sbx_backend_net_bind(req, rules);

		rc = sbx_egress_session_open(b->egress, &bind, out, err, sizeof(err));
	}
	sbx_egress_rules_unref(&rules);
	if (rc < 0)
		log_msg("error", "command %" PRIu64 " refused: its network: %s", req->seq, err);
	return rc;
}

struct sbx_egress_bind sbx_backend_net_bind(const struct sbx_spawn_req *req, struct sbx_egress_rules *rules)
{
	return (struct sbx_egress_bind){.tenant = req->net_tenant ? req->net_tenant : "",
					.exec_id = req->net_exec_id,
					.sub = req->net_sub,
					.rules = rules,
					.seq = req->seq};
}

void sbx_backend_net_keep(struct sbx_backend *b, uint64_t seq, struct sbx_egress_session *ns)
{
	struct sbx_backend_net *e = xcalloc(1, sizeof(*e));

	e->seq = seq;
	e->ns = ns;
	pthread_mutex_lock(&b->net_mu);
	e->next = b->nets;
	b->nets = e;
	pthread_mutex_unlock(&b->net_mu);
}

static void net_down(struct sbx_backend *b, uint64_t seq, struct sbx_egress_summary *sum)
{
	struct sbx_backend_net **pp, *e = NULL;

	pthread_mutex_lock(&b->net_mu);
	for (pp = &b->nets; *pp; pp = &(*pp)->next) {
		if ((*pp)->seq == seq) {
			e = *pp;
			*pp = e->next;
			break;
		}
	}
	pthread_mutex_unlock(&b->net_mu);
	if (!e)
		return;
	sbx_egress_session_close(&e->ns, sum);
	free(e);
}

/* ---- dispatch ---- */

static const struct sbx_backend_ops *const backends[] = {
    &sbx_backend_bwrap_ops,
    &sbx_backend_local_ops,
};

bool sbx_cwd_rel_ok(const char *cwd_rel)
{
	const char *p = cwd_rel;

	if (!p)
		return true;
	if (*p == '/')
		return false;
	while (*p) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);

		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		p += n;
		while (*p == '/')
			p++;
	}
	return true;
}

int sbx_cwd_check(const char *workspace_host_dir, const char *cwd_rel)
{
	struct open_how how = {
	    .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	int dfd, fd, attempt, rc = 0;

	if (!cwd_rel || !cwd_rel[0])
		return 0;
	dfd = open(workspace_host_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	for (attempt = 0; attempt < 4; attempt++) {
		fd = (int)syscall(SYS_openat2, dfd, cwd_rel, &how, sizeof(how));
		if (fd >= 0 || errno != EAGAIN)
			break;
	}
	if (fd < 0)
		rc = -errno;
	else
		close(fd);
	close(dfd);
	return rc;
}

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
		net_down(b, b->nets->seq, NULL);
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

/* RLIMIT_NPROC where cgroups are in force: not the limit, a backstop.
 * It counts per uid (the tenant's) and the kernel checks it in fork
 * before the pids controller, so at the same value it would refuse a
 * command's forks itself, pids.events would never count them, and the
 * command would not say pids_limited. The pids limits (the command's
 * pids.max, the tenant's budget on its parent group) are what hold;
 * RLIMIT_NPROC stays at twice the larger of them, in case a process of
 * the tenant's uid is ever outside its groups. Without cgroups it is the
 * command's limit. */
static uint64_t nproc_rlimit(const struct sbx_limits *lim, bool contained)
{
	if (!contained || !lim->nproc)
		return lim->nproc;
	uint64_t top = lim->tenant_nproc > lim->nproc ? lim->tenant_nproc : lim->nproc;
	return top * 2;
}

static void set_rlimits(struct sbx_launch *l, const struct sbx_limits *lim, bool contained)
{
	const struct {
		int resource;
		uint64_t value;
	} want[] = {
	    {RLIMIT_AS, lim->mem_bytes},
	    {RLIMIT_NPROC, nproc_rlimit(lim, contained)},
	    {RLIMIT_FSIZE, lim->fsize_bytes},
	    {RLIMIT_NOFILE, lim->nofile},
	};
	size_t i;

	l->n_rlimits = 0;
	l->rlimits[l->n_rlimits].resource = RLIMIT_CORE;
	l->rlimits[l->n_rlimits++].value = 0;
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		if (!want[i].value)
			continue;
		l->rlimits[l->n_rlimits].resource = want[i].resource;
		l->rlimits[l->n_rlimits++].value = want[i].value;
	}
}

/* The request's std fds, /dev/null (opened once, into *devnull) for
 * those it leaves at -1. */
static int set_std_fds(struct sbx_launch *l, const struct sbx_spawn_req *req, int *devnull)
{
	const int req_fds[3] = {req->stdin_fd, req->stdout_fd, req->stderr_fd};

	for (int i = 0; i < 3; i++) {
		if (req_fds[i] >= 0) {
			l->std_fds[i] = req_fds[i];
			continue;
		}
		if (*devnull < 0)
			*devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (*devnull < 0)
			return -errno;
		l->std_fds[i] = *devnull;
	}
	return 0;
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

int sbx_backend_launch(struct sbx_backend *b, const struct sbx_spawn_req *req, int warm_ctl, int warm_exe,
		       pid_t *pid, int *pidfd)
{
	struct sbx_launch l;
	struct sbx_egress_session *net = NULL;
	int devnull = -1;
	bool cgroup_made = false, own_net;
	int i, rc;

	sbx_launch_init(&l);
	l.warm_ctl = warm_ctl;
	l.warm_exe = warm_exe;
	/* A command's: ours now, whatever happens; a warm sandbox's stays its
	 * pool's (sandbox/warm.h), and a warm one asks for no rules. */
	net = req ? req->net_ready : NULL;
	own_net = warm_ctl < 0;
	if (!b || !req || !pid || !pidfd || !req->command || !req->workspace_host_dir ||
	    !sbx_cwd_rel_ok(req->cwd_rel) || (warm_ctl >= 0 && (!b->ops->warm || req->net_allow))) {
		rc = -EINVAL;
		goto out;
	}
	if (!net && req->net_allow) {
		rc = sbx_backend_net_prepare(b, req, &net);
		if (rc < 0)
			goto out;
	}
	l.net = net != NULL;
	l.netns_fd = net ? sbx_egress_session_netns(net) : -1;
	rc = b->ops->prepare(b, req, &l);
	if (rc < 0)
		goto out;

	rc = set_std_fds(&l, req, &devnull);
	if (rc < 0)
		goto out;
	set_rlimits(&l, &req->limits, b->cgroups);
	l.drop_privs = req->drop_privs && geteuid() == 0;
	l.uid = req->uid;
	l.gid = req->gid;
	l.pdeathsig = true;

	if (b->cgroups) {
		int n = sbx_cgroup_prepare(b->cgroup_root, req->uid, req->seq, &req->limits, l.cgroup_fds);

		if (n < 0) {
			/* Limits are in force: without them the command does not run. */
			b->refused_limits++;
			log_msg("error", "command %" PRIu64 " refused: its cgroup cannot be made: %s",
				req->seq, sbx_strerror(n));
			rc = -SBX_E_BACKEND;
			goto out;
		}
		l.n_cgroup_fds = n;
		cgroup_made = true;
	}

	rc = sbx_launch_start(&l, pid, pidfd);
	if (rc < 0) {
		if (l.exec_fail_is_backend && l.child_step == STEP_EXEC &&
		    (rc == -ENOENT || rc == -EACCES || rc == -ENOEXEC))
			rc = -SBX_E_BACKEND;
		if (l.child_step == STEP_SETNS)
			rc = -SBX_E_BACKEND; /* the command's network cannot be joined */
		if (l.child_step == STEP_CGROUP) {
			b->refused_limits++;
			log_msg("error", "command %" PRIu64 " refused: joining its cgroup failed: %s",
				req->seq, sbx_strerror(rc));
			rc = -SBX_E_BACKEND;
		}
		if (cgroup_made)
			sbx_cgroup_remove(b->cgroup_root, req->uid, req->seq, NULL);
	} else if (net && own_net) {
		sbx_backend_net_keep(b, req->seq, net);
		net = NULL;
	}
out:
	if (own_net)
		sbx_egress_session_close(&net, NULL);
	for (i = 0; i < l.n_cgroup_fds; i++)
		close(l.cgroup_fds[i]);
	if (devnull >= 0)
		close(devnull);
	sbx_launch_release(&l);
	return rc;
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
		net_down(b, req->seq, egress);
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

int sbx_backend_net_health(struct sbx_backend *b, char *msg, size_t msgsz)
{
	if (!b)
		return -EINVAL;
	/* Without a gateway (sandboxd doctor, tests): whether this host could
	 * run one. */
	if (b->ops->net)
		return sbx_egress_gateway_health(b->egress, msg, msgsz);
	if (msg && msgsz)
		snprintf(msg, msgsz, "unavailable: the %s backend cannot filter a network", b->ops->name);
	return -SBX_E_BACKEND;
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
