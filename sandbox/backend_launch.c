/* One sandbox started cold, from a request (sandbox/backend_impl.h): the
 * checks of its cwd, its network on request (the egress session opened
 * for it and kept until the reap), its std fds, rlimits and cgroup, then
 * the backend's prepare() and the launcher of sandbox/spawn.h. The warm
 * pool makes its sandboxes here too; sbx_backend_spawn (backend.c), above
 * both, tries the pool first. */
#include "sandbox/backend.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include "sandbox/egress/gateway.h"

/* ---- network on request ---- */

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

void sbx_backend_net_down(struct sbx_backend *b, uint64_t seq, struct sbx_egress_summary *sum)
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

/* ---- one sandbox, cold ---- */

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

/* The command's cgroup, made and opened for the child to join (its
 * cgroup.procs into l->cgroup_fds). Limits are in force: without them
 * the command does not run (-SBX_E_BACKEND, counted). */
static int launch_cgroup(struct sbx_backend *b, const struct sbx_spawn_req *req, struct sbx_launch *l)
{
	int n = sbx_cgroup_prepare(b->cgroup_root, req->uid, req->seq, &req->limits, l->cgroup_fds);

	if (n < 0) {
		b->refused_limits++;
		log_msg("error", "command %" PRIu64 " refused: its cgroup cannot be made: %s", req->seq,
			sbx_strerror(n));
		return -SBX_E_BACKEND;
	}
	l->n_cgroup_fds = n;
	return 0;
}

/* What a failed sbx_launch_start (rc) means, by the child's step:
 * -SBX_E_BACKEND where the backend, not the command, is at fault. */
static int launch_failed(struct sbx_backend *b, const struct sbx_spawn_req *req, const struct sbx_launch *l,
			 int rc)
{
	if (l->exec_fail_is_backend && l->child_step == STEP_EXEC &&
	    (rc == -ENOENT || rc == -EACCES || rc == -ENOEXEC))
		rc = -SBX_E_BACKEND;
	if (l->child_step == STEP_SETNS)
		rc = -SBX_E_BACKEND; /* the command's network cannot be joined */
	if (l->child_step == STEP_CGROUP) {
		b->refused_limits++;
		log_msg("error", "command %" PRIu64 " refused: joining its cgroup failed: %s", req->seq,
			sbx_strerror(rc));
		rc = -SBX_E_BACKEND;
	}
	return rc;
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
		rc = launch_cgroup(b, req, &l);
		if (rc < 0)
			goto out;
		cgroup_made = true;
	}

	rc = sbx_launch_start(&l, pid, pidfd);
	if (rc < 0) {
		rc = launch_failed(b, req, &l, rc);
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
