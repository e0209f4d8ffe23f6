/* The bottom floor of the runner: a job's deep copy of its request and
 * its free, the event to its callback, the epoll registration of its
 * fds (and their close), the deadline arithmetic and
 * sbx_exec_result_clear. It calls nothing of the other runner files. */
#include "sandbox/runner_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "sandbox/cgroup.h"
#include "sandbox/collector.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/netpool.h"
#include "sandbox/rootimg.h"
#include "sandbox/workspace.h"

int64_t rn_add_ms(int64_t t, uint64_t ms)
{
	if (ms >= (uint64_t)(NO_DEADLINE - t))
		return NO_DEADLINE;
	return t + (int64_t)ms;
}

void sbx_exec_result_clear(struct sbx_exec_result *res)
{
	if (!res)
		return;
	free(res->stdout_text);
	free(res->stderr_text);
	free(res->stdout_spill);
	free(res->stderr_spill);
	res->stdout_text = res->stderr_text = NULL;
	res->stdout_spill = res->stderr_spill = NULL;
	res->stdout_len = res->stderr_len = 0;
}

void rn_job_free(struct job *j)
{
	if (!j)
		return;
	for (int k = 0; k < W_COUNT; k++)
		if (j->fd[k] >= 0)
			close(j->fd[k]);
	sbx_collector_free(&j->out);
	sbx_collector_free(&j->err);
	free(j->command);
	free(j->cwd_rel);
	free(j->host_dir);
	free(j->rootfs);
	sbx_rootimg_close(&j->req.rootimg);
	free(j->exec_id);
	free(j->net_allow);
	free(j->net_tenant);
	free(j->net_sub);
	if (j->env) {
		for (char **e = j->env; *e; e++)
			free(*e);
		free(j->env);
	}
	free(j->in_buf);
	sbx_egress_session_close(&j->net, NULL);
	sbx_backend_warm_unclaim(j->req.backend, &j->req.spawn.warm_box);
	if (j->net_held)
		sbx_netpool_release(j->lane->owner->net, j->req.spawn.uid);
	free(j);
}

struct job *rn_job_copy(const struct sbx_exec_req *req)
{
	struct job *j = xcalloc(1, sizeof(*j));
	const char *host = req->spawn.workspace_host_dir;
	size_t n = 0;

	j->req = *req;
	j->command = xstrdup(req->spawn.command);
	j->cwd_rel = xstrdup(req->spawn.cwd_rel ? req->spawn.cwd_rel : "");
	if (!host && req->ws)
		host = sbx_workspace_host_dir(req->ws);
	j->host_dir = host ? xstrdup(host) : NULL;
	j->exec_id = req->id ? xstrdup(req->id) : NULL;
	j->net_allow = req->spawn.net_allow ? xstrdup(req->spawn.net_allow) : NULL;
	j->net_tenant = req->spawn.net_tenant ? xstrdup(req->spawn.net_tenant) : NULL;
	j->net_sub = req->spawn.net_sub ? xstrdup(req->spawn.net_sub) : NULL;
	j->rootfs = req->spawn.rootfs ? xstrdup(req->spawn.rootfs) : NULL;
	if (req->spawn.env) {
		while (req->spawn.env[n])
			n++;
		j->env = xcalloc(n + 1, sizeof(*j->env));
		for (size_t i = 0; i < n; i++)
			j->env[i] = xstrdup(req->spawn.env[i]);
	}
	if (req->stdin_len > 0) {
		j->in_buf = xmalloc(req->stdin_len);
		memcpy(j->in_buf, req->stdin_data, req->stdin_len);
		j->in_len = j->in_cap = req->stdin_len;
	}
	j->req.stdin_pipe = req->stdin_pipe || req->tty;
	j->in_eof = !j->req.stdin_pipe;
	j->cols = req->cols;
	j->rows = req->rows;
	/* the copy's pointers now point at the job's own strings */
	j->req.spawn.command = j->command;
	j->req.spawn.cwd_rel = j->cwd_rel;
	j->req.spawn.workspace_host_dir = j->host_dir;
	j->req.spawn.rootfs = j->rootfs;
	j->req.spawn.env = (const char *const *)j->env;
	j->req.id = j->exec_id;
	j->req.spawn.net_allow = j->net_allow;
	j->req.spawn.net_tenant = j->net_tenant;
	j->req.spawn.net_sub = j->net_sub;
	j->req.spawn.net_exec_id = j->exec_id;
	j->req.stdin_data = NULL;
	j->req.stdin_len = 0;
	for (int k = 0; k < W_COUNT; k++) {
		j->fd[k] = -1;
		j->w[k].job = j;
		j->w[k].kind = (enum watch_kind)k;
	}
	j->pid = -1;
	j->timeout_at = j->kill_at = j->next_hb = j->drain_until = NO_DEADLINE;
	return j;
}

void rn_emit(struct job *j, struct sbx_event *ev, int spawn_error)
{
	ev->job = j->id;
	ev->at_ms = now_ms();
	j->cb(j->ctx, ev, spawn_error);
}

/* EPOLL_CTL_DEL before the close, never the close alone: a registration
 * lives as long as the open file, and a command another runner thread is
 * spawning holds copies of every fd of the process until its close_range
 * (clone without CLONE_FILES), so a closed fd could still report events
 * for a freed job. */
void rn_unwatch(struct lane *r, struct job *j, int k)
{
	if (j->fd[k] < 0)
		return;
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, j->fd[k], NULL);
	close(j->fd[k]);
	j->fd[k] = -1;
}

int rn_watch(struct lane *r, struct job *j, int k, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = &j->w[k]};

	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, j->fd[k], &ev) < 0)
		return -errno;
	return 0;
}
