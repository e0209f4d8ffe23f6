/* Warm sandboxes (warm.h): the pool, its thread, and the hand-over. */
#include "sandbox/warm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "sandbox/backend_impl.h"
#include "sandbox/cgroup.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/warm/proto.h"

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

#define WARM_READY_MS 30000	   /* a sandbox not ready by then is ended (TCG guests are slow) */
#define WARM_SEQ_BASE (1ULL << 48) /* warm groups' seqs: never a runner's job number */
#define WARM_BACKOFF_MAX_MS 60000  /* a tenant whose sandboxes fail waits at most this long */
#define WARM_ARGS_MAX (8u << 20)   /* as bwrap's options: far above any request's bound */
#define WARM_QUIET_MS 20	   /* a tenant's next sandbox is made this long after its last command */

/* The launcher's bytes, linked in by sandbox/warm_blob.c. */
extern const unsigned char sbx_warm_launcher[];
extern const unsigned long long sbx_warm_launcher_len;

struct sbx_warm_box {
	struct sbx_warm_box *next;
	uid_t uid;
	pid_t pid;
	int pidfd, ctl;
	uint64_t wseq;
	int64_t made_ms;
	struct sbx_egress_session *ns; /* a networked one's, until its command takes it */
};

/* A tenant's shape (warm.h) and its waiting sandboxes: one without
 * network and one with, each bounded by per_tenant. */
struct shape {
	struct shape *next;
	uid_t uid;
	bool net;     /* its sandboxes wait in egress namespaces of their own */
	char *tenant; /* whose rules and records (net) */
	gid_t gid;
	bool drop_privs;
	char *workspace, *rootfs; /* rootfs NULL: the host's /usr */
	dev_t ws_dev, root_dev;
	ino_t ws_ino, root_ino;
	struct sbx_limits limits;
	uint64_t gen; /* bumped when the shape changes: sandboxes being made for the old one are ended */
	struct sbx_warm_box *boxes;
	unsigned n, making;
	int64_t used_ms, refill_ms; /* last command; last sandbox begun (tenants in turn) */
	int64_t backoff_until;
	unsigned failures;
};

/* A command running in a warm sandbox: its cgroup's seq. */
struct taken {
	struct taken *next;
	uint64_t seq, wseq;
};

struct sbx_warm {
	struct sbx_backend *b;
	unsigned per_tenant, idle_ms;
	int exe; /* the launcher: a sealed memfd */
	struct sbx_spawner *spawner;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop, started;
	struct shape *shapes;
	struct taken *taken;
	uint64_t next_wseq;
	uint64_t n_taken, n_cold, n_made, n_failed, n_ended;
	unsigned waiting;
};

_Static_assert(sizeof(struct sbx_limits) == 12 * sizeof(uint64_t) + sizeof(dev_t),
	       "struct sbx_limits has no padding: shapes compare it with memcmp");

/* ---- ending sandboxes ---- */

/* Kill b's whole sandbox, reap it, remove its group, close its network. */
static void box_end(struct sbx_warm *w, uid_t uid, struct sbx_warm_box *bx)
{
	kill(-bx->pid, SIGKILL);
	kill(bx->pid, SIGKILL);
	while (waitpid(bx->pid, NULL, __WALL) < 0 && errno == EINTR)
		;
	close(bx->pidfd);
	if (bx->ctl >= 0)
		close(bx->ctl);
	if (w->b->cgroups)
		sbx_cgroup_remove(w->b->cgroup_root, uid, bx->wseq, NULL);
	sbx_egress_session_close(&bx->ns, NULL);
	free(bx);
}

/* A list of sandboxes to end once the lock is let go (box_end waits). */
struct doomed {
	uid_t uids[64];
	struct sbx_warm_box *v[64];
	unsigned n;
};

static void doom_locked(struct sbx_warm *w, struct doomed *d, struct shape *s, struct sbx_warm_box *bx)
{
	w->waiting--;
	w->n_ended++;
	if (d->n < 64) {
		d->uids[d->n] = s->uid;
		d->v[d->n++] = bx;
		return;
	}
	/* More than a batch (never with the bounds in force): end it now. */
	box_end(w, s->uid, bx);
}

static void doom_all_locked(struct sbx_warm *w, struct doomed *d, struct shape *s)
{
	while (s->boxes) {
		struct sbx_warm_box *bx = s->boxes;
		s->boxes = bx->next;
		s->n--;
		doom_locked(w, d, s, bx);
	}
}

static void doomed_end(struct sbx_warm *w, struct doomed *d)
{
	for (unsigned i = 0; i < d->n; i++)
		box_end(w, d->uids[i], d->v[i]);
	d->n = 0;
}

static void shape_free(struct shape *s)
{
	free(s->tenant);
	free(s->workspace);
	free(s->rootfs);
	free(s);
}

/* ---- making sandboxes ---- */

/* Wait for the launcher's ready byte: 0, or -1 (it ended, or said
 * nothing within WARM_READY_MS). */
static int wait_ready(struct sbx_warm_box *bx)
{
	int64_t deadline = mono_ms() + WARM_READY_MS;
	for (;;) {
		struct pollfd p[2] = {{.fd = bx->ctl, .events = POLLIN}, {.fd = bx->pidfd, .events = POLLIN}};
		int64_t left = deadline - mono_ms();
		if (left <= 0)
			return -1;
		int n = poll(p, 2, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		if (p[0].revents & POLLIN) {
			char c;
			ssize_t r = read(bx->ctl, &c, 1);
			return r == 1 && c == SBX_WARM_READY[0] ? 0 : -1;
		}
		return -1; /* ended, or the socket closed */
	}
}

/* A sandbox of shape copy s, numbered wseq; NULL when it cannot be made
 * (*status: its wait status when it ended, -1 else). */
static struct sbx_warm_box *box_make(struct sbx_warm *w, const struct shape *s, uint64_t wseq, int *status)
{
	int sv[2];
	*status = -1;
	/* A networked one waits in a namespace of the egress gateway's pool,
	 * bound to no command yet (sbx_egress_session_rebind at the take). */
	struct sbx_egress_session *ns = NULL;
	if (s->net) {
		char err[256];
		struct sbx_egress_bind bind = {.tenant = s->tenant, .exec_id = "", .seq = wseq};
		if (!w->b->egress || sbx_backend_net_health(w->b, err, sizeof err) < 0 ||
		    sbx_egress_session_open(w->b->egress, &bind, &ns, err, sizeof err) < 0)
			return NULL;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		sbx_egress_session_close(&ns, NULL);
		return NULL;
	}
	struct sbx_spawn_req req = {
	    .command = "",
	    .workspace_host_dir = s->workspace,
	    .cwd_rel = "",
	    .rootfs = s->rootfs,
	    .uid = s->uid,
	    .gid = s->gid,
	    .drop_privs = s->drop_privs,
	    .limits = s->limits,
	    .seq = wseq,
	    .stdin_fd = -1,
	    .stdout_fd = -1,
	    .stderr_fd = -1,
	    .net_ready = ns,
	};
	struct sbx_warm_box *bx = xcalloc(1, sizeof *bx);
	bx->ctl = sv[0];
	bx->wseq = wseq;
	bx->uid = s->uid;
	bx->ns = ns;
	int rc = sbx_backend_launch(w->b, &req, sv[1], w->exe, &bx->pid, &bx->pidfd);
	close(sv[1]);
	if (rc < 0) {
		close(bx->ctl);
		sbx_egress_session_close(&bx->ns, NULL);
		free(bx);
		return NULL;
	}
	if (wait_ready(bx) < 0) {
		kill(-bx->pid, SIGKILL);
		int st = -1;
		while (waitpid(bx->pid, &st, __WALL) < 0 && errno == EINTR)
			;
		*status = st;
		close(bx->pidfd);
		close(bx->ctl);
		if (w->b->cgroups)
			sbx_cgroup_remove(w->b->cgroup_root, s->uid, wseq, NULL);
		sbx_egress_session_close(&bx->ns, NULL);
		free(bx);
		return NULL;
	}
	bx->made_ms = mono_ms();
	return bx;
}

static unsigned uid_count_locked(const struct shape *s)
{
	return s->n + s->making;
}

/* The tenant to make a sandbox for next: below its bound, used within
 * idle_ms, not backing off, and without a command in the last
 * WARM_QUIET_MS: a making would compete for the CPU with the command just
 * started, and with the next ones of a burst, which then start cold as
 * fast as without a pool; the one served longest ago first. *next gets
 * the end of a quiet time it skipped, if sooner. */
static struct shape *needy_locked(struct sbx_warm *w, int64_t now, int64_t *next)
{
	struct shape *best = NULL;
	for (struct shape *s = w->shapes; s; s = s->next) {
		if (uid_count_locked(s) >= w->per_tenant || now - s->used_ms > (int64_t)w->idle_ms ||
		    now < s->backoff_until)
			continue;
		if (now - s->used_ms < WARM_QUIET_MS) {
			int64_t at = s->used_ms + WARM_QUIET_MS;
			*next = at < *next ? at : *next;
			continue;
		}
		if (!best || s->refill_ms < best->refill_ms)
			best = s;
	}
	return best;
}

/* Sandboxes idle too long, or whose sandbox ended while it waited;
 * tenants idle too long, forgotten. Returns the soonest time something
 * will be idle (for the thread's sleep). */
static int64_t tidy_locked(struct sbx_warm *w, struct doomed *d, int64_t now)
{
	int64_t next = now + 1000;
	for (struct shape **ps = &w->shapes; *ps;) {
		struct shape *s = *ps;
		for (struct sbx_warm_box **pb = &s->boxes; *pb;) {
			struct sbx_warm_box *bx = *pb;
			struct pollfd p = {.fd = bx->pidfd, .events = POLLIN};
			bool dead = poll(&p, 1, 0) > 0;
			if (dead || now - bx->made_ms >= (int64_t)w->idle_ms ||
			    now - s->used_ms >= (int64_t)w->idle_ms) {
				*pb = bx->next;
				s->n--;
				if (dead)
					log_msg("warn", "a warm sandbox of uid %u ended while it waited",
						(unsigned)s->uid);
				doom_locked(w, d, s, bx);
				continue;
			}
			int64_t at = bx->made_ms + (int64_t)w->idle_ms;
			next = at < next ? at : next;
			pb = &bx->next;
		}
		if (!s->boxes && !s->making && now - s->used_ms >= (int64_t)w->idle_ms) {
			*ps = s->next;
			shape_free(s);
			continue;
		}
		ps = &s->next;
	}
	return next;
}

static void cond_wait_until(struct sbx_warm *w, int64_t until_ms)
{
	int64_t left = until_ms - mono_ms();
	if (left <= 0)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(left / 1000);
	ts.tv_nsec += (long)(left % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

/* A copy of s's shape for making a sandbox with the lock let go. */
static struct shape shape_copy(const struct shape *s)
{
	struct shape c = *s;
	c.tenant = xstrdup(s->tenant);
	c.workspace = xstrdup(s->workspace);
	c.rootfs = s->rootfs ? xstrdup(s->rootfs) : NULL;
	c.boxes = NULL;
	c.next = NULL;
	return c;
}

static void *warm_main(void *arg)
{
	struct sbx_warm *w = arg;
	struct doomed d = {0};

	pthread_setname_np(pthread_self(), "sbx-warm");
	if (w->spawner)
		sbx_spawner_bind(w->spawner);
	pthread_mutex_lock(&w->mu);
	while (!w->stop) {
		int64_t now = mono_ms();
		int64_t next = tidy_locked(w, &d, now);
		struct shape *s = needy_locked(w, now, &next);
		if (d.n || !s) {
			pthread_mutex_unlock(&w->mu);
			doomed_end(w, &d);
			pthread_mutex_lock(&w->mu);
			if (!s && !w->stop)
				cond_wait_until(w, next);
			continue;
		}
		s->making++;
		s->refill_ms = now;
		struct shape c = shape_copy(s);
		uint64_t wseq = WARM_SEQ_BASE + w->next_wseq++;
		pthread_mutex_unlock(&w->mu);

		int status;
		struct sbx_warm_box *bx = box_make(w, &c, wseq, &status);

		pthread_mutex_lock(&w->mu);
		s->making--; /* s outlives this: tidy_locked frees no shape being made for */
		if (!bx) {
			w->n_failed++;
			s->failures++;
			int64_t wait = 1000LL << (s->failures < 7 ? s->failures - 1 : 6);
			s->backoff_until =
			    mono_ms() + (wait < WARM_BACKOFF_MAX_MS ? wait : WARM_BACKOFF_MAX_MS);
			if (s->failures == 1 || s->failures % 16 == 0)
				log_msg(
				    "warn",
				    "warm sandboxes of uid %u fail to start (%s %d, %u times); its commands "
				    "start cold meanwhile",
				    (unsigned)s->uid,
				    status < 0		? "not ready within the deadline, status"
				    : WIFEXITED(status) ? "exit status"
							: "signal",
				    status < 0		? -1
				    : WIFEXITED(status) ? WEXITSTATUS(status)
							: WTERMSIG(status),
				    s->failures);
		} else if (w->stop || c.gen != s->gen) {
			w->n_ended++;
			pthread_mutex_unlock(&w->mu);
			box_end(w, c.uid, bx);
			pthread_mutex_lock(&w->mu);
		} else {
			s->failures = 0;
			bx->next = s->boxes;
			s->boxes = bx;
			s->n++;
			w->waiting++;
			w->n_made++;
		}
		free(c.tenant);
		free(c.workspace);
		free(c.rootfs);
	}
	for (struct shape *s = w->shapes; s; s = s->next)
		doom_all_locked(w, &d, s);
	pthread_mutex_unlock(&w->mu);
	doomed_end(w, &d);
	return NULL;
}

/* ---- the pool ---- */

static int launcher_memfd(void)
{
	size_t len = (size_t)sbx_warm_launcher_len;
	int fd = memfd_create("sbx-launch", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
	if (fd < 0 && errno == EINVAL)
		fd = memfd_create("sbx-launch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	size_t off = 0;
	while (off < len) {
		ssize_t n = write(fd, sbx_warm_launcher + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int rc = n < 0 ? -errno : -EIO;
			close(fd);
			return rc;
		}
		off += (size_t)n;
	}
	if (fchmod(fd, 0555) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int sbx_warm_new(struct sbx_warm **out, struct sbx_backend *b, unsigned per_tenant, unsigned idle_ms)
{
	*out = NULL;
	struct sbx_warm *w = xcalloc(1, sizeof *w);
	w->b = b;
	w->per_tenant = per_tenant;
	w->idle_ms = idle_ms ? idle_ms : 1;
	w->exe = launcher_memfd();
	if (w->exe < 0) {
		int rc = w->exe;
		free(w);
		return rc;
	}
	/* Optional: without it the thread's spawns copy the fd table. */
	if (sbx_spawner_new(&w->spawner) < 0)
		w->spawner = NULL;
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	int rc = -pthread_create(&w->thread, NULL, warm_main, w);
	if (rc < 0) {
		sbx_warm_free(&w);
		return rc;
	}
	w->started = true;
	*out = w;
	return 0;
}

void sbx_warm_free(struct sbx_warm **pw)
{
	struct sbx_warm *w = pw ? *pw : NULL;
	if (!w)
		return;
	if (w->started) {
		pthread_mutex_lock(&w->mu);
		w->stop = true;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->thread, NULL);
	}
	while (w->shapes) {
		struct shape *s = w->shapes;
		w->shapes = s->next;
		shape_free(s);
	}
	while (w->taken) {
		struct taken *t = w->taken;
		w->taken = t->next;
		free(t);
	}
	sbx_spawner_free(&w->spawner);
	if (w->exe >= 0)
		close(w->exe);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w);
	*pw = NULL;
}

/* ---- taking one ---- */

static bool same_shape(const struct shape *s, const struct sbx_spawn_req *req, const struct stat *ws,
		       const struct stat *rs)
{
	return s->gid == req->gid && s->drop_privs == req->drop_privs &&
	       (!s->net || strcmp(s->tenant, req->net_tenant ? req->net_tenant : "") == 0) &&
	       strcmp(s->workspace, req->workspace_host_dir) == 0 && s->ws_dev == ws->st_dev &&
	       s->ws_ino == ws->st_ino && (s->rootfs == NULL) == (req->rootfs == NULL) &&
	       (!req->rootfs || (strcmp(s->rootfs, req->rootfs) == 0 && s->root_dev == rs->st_dev &&
				 s->root_ino == rs->st_ino)) &&
	       memcmp(&s->limits, &req->limits, sizeof s->limits) == 0;
}

static void shape_set(struct shape *s, const struct sbx_spawn_req *req, const struct stat *ws,
		      const struct stat *rs)
{
	free(s->tenant);
	free(s->workspace);
	free(s->rootfs);
	s->uid = req->uid;
	s->net = req->net_allow != NULL;
	s->tenant = xstrdup(req->net_tenant ? req->net_tenant : "");
	s->gid = req->gid;
	s->drop_privs = req->drop_privs;
	s->workspace = xstrdup(req->workspace_host_dir);
	s->rootfs = req->rootfs ? xstrdup(req->rootfs) : NULL;
	s->ws_dev = ws->st_dev;
	s->ws_ino = ws->st_ino;
	s->root_dev = req->rootfs ? rs->st_dev : 0;
	s->root_ino = req->rootfs ? rs->st_ino : 0;
	s->limits = req->limits;
	s->gen++;
	s->failures = 0;
	s->backoff_until = 0;
}

static void add_str(struct buf *b, const char *s, int *rc)
{
	if (*rc == 0 && buf_append(b, s, strlen(s) + 1) < 0)
		*rc = -E2BIG;
}

/* The base environment, then the request's, a later name replacing an
 * earlier one (as bwrap's --setenv does). */
static int make_env(struct sbx_strv *env, const struct sbx_spawn_req *req)
{
	sbx_strv_add(env, "PATH=" SBX_ENV_PATH);
	sbx_strv_add(env, "HOME=/workspace");
	sbx_strv_add(env, "LANG=" SBX_ENV_LANG);
	sbx_strv_add(env, "USER=sandbox");
	for (size_t i = 0; req->env && req->env[i]; i++) {
		const char *eq = strchr(req->env[i], '=');
		if (!eq || eq == req->env[i])
			return -EINVAL;
		size_t nl = (size_t)(eq - req->env[i]) + 1;
		size_t j = 0;
		while (j < env->n && strncmp(env->v[j], req->env[i], nl) != 0)
			j++;
		if (j == env->n) {
			sbx_strv_add(env, req->env[i]);
		} else {
			free(env->v[j]);
			env->v[j] = xstrdup(req->env[i]);
		}
	}
	return 0;
}

/* The command's payload (proto.h) into b; its argc and envc. */
static int make_payload(struct buf *b, const struct sbx_spawn_req *req, struct sbx_warm_hdr *h)
{
	struct sbx_strv argv = {0}, env = {0};
	int rc = make_env(&env, req);
	const char *path = sbx_command_argv(&argv, req);
	const char *rel = req->cwd_rel ? req->cwd_rel : "";
	char *cwd = xasprintf("/workspace%s%s", rel[0] ? "/" : "", rel);
	add_str(b, path, &rc);
	add_str(b, cwd, &rc);
	for (size_t i = 0; i < argv.n; i++)
		add_str(b, argv.v[i], &rc);
	for (size_t i = 0; i < env.n; i++)
		add_str(b, env.v[i], &rc);
	*h = (struct sbx_warm_hdr){.magic = SBX_WARM_MAGIC,
				   .len = (uint32_t)b->len,
				   .argc = (uint32_t)argv.n,
				   .envc = (uint32_t)env.n};
	free(cwd);
	sbx_strv_free(&argv);
	sbx_strv_free(&env);
	return rc;
}

static int write_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The command into bx's launcher: 0, or -1 (the sandbox is no use). */
static int hand_over(struct sbx_warm_box *bx, const struct sbx_warm_hdr *h, const struct buf *payload,
		     const struct sbx_spawn_req *req)
{
	int devnull = -1, fds[3];
	const int want[3] = {req->stdin_fd, req->stdout_fd, req->stderr_fd};
	for (int i = 0; i < 3; i++) {
		if (want[i] < 0 && devnull < 0)
			devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
		fds[i] = want[i] >= 0 ? want[i] : devnull;
	}
	int rc = -1;
	if (fds[0] >= 0 && fds[1] >= 0 && fds[2] >= 0) {
		char cbuf[CMSG_SPACE(sizeof fds)];
		memset(cbuf, 0, sizeof cbuf);
		struct iovec iov = {.iov_base = (void *)h, .iov_len = sizeof *h};
		struct msghdr m = {
		    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof fds);
		memcpy(CMSG_DATA(c), fds, sizeof fds);
		ssize_t n;
		do
			n = sendmsg(bx->ctl, &m, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		if (n == (ssize_t)sizeof *h)
			rc = write_all(bx->ctl, payload->ptr, payload->len);
	}
	if (devnull >= 0)
		close(devnull);
	return rc;
}

/* The pool's part of a take: a waiting sandbox of req's shape, out of the
 * pool, or NULL (none, or req is one the cold path should answer; the
 * pool learns its shape). */
static struct sbx_warm_box *claim(struct sbx_warm *w, const struct sbx_spawn_req *req)
{
	struct stat ws, rs;
	if (!w || req->net_ready || (req->net_allow && !w->b->egress) ||
	    stat(req->workspace_host_dir, &ws) < 0 || (req->rootfs && stat(req->rootfs, &rs) < 0))
		return NULL;
	if (sbx_cwd_check(req->workspace_host_dir, req->cwd_rel ? req->cwd_rel : "") < 0)
		return NULL; /* the cold path says why, as it always did */

	bool net = req->net_allow != NULL;
	struct doomed d = {0};
	struct sbx_warm_box *bx = NULL;
	int64_t now = mono_ms();
	pthread_mutex_lock(&w->mu);
	struct shape *s = w->shapes;
	while (s && (s->uid != req->uid || s->net != net))
		s = s->next;
	if (!s) {
		s = xcalloc(1, sizeof *s);
		s->next = w->shapes;
		w->shapes = s;
		shape_set(s, req, &ws, &rs);
	} else if (!same_shape(s, req, &ws, &rs)) {
		doom_all_locked(w, &d, s);
		shape_set(s, req, &ws, &rs);
	} else if (s->boxes) {
		bx = s->boxes;
		s->boxes = bx->next;
		s->n--;
		w->waiting--;
	}
	s->used_ms = now;
	if (bx)
		w->n_taken++;
	else
		w->n_cold++;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	doomed_end(w, &d);
	return bx;
}

/* A claimed sandbox that serves no command after all. */
static void unclaimed(struct sbx_warm *w, struct sbx_warm_box *bx, bool cold)
{
	pthread_mutex_lock(&w->mu);
	w->n_taken--;
	w->n_ended++;
	if (cold)
		w->n_cold++;
	pthread_mutex_unlock(&w->mu);
	box_end(w, bx->uid, bx);
}

/* A networked sandbox's session bound to req (its exec, its rules of
 * now): 0, -EINVAL (bad rules, as the cold path says), 1 (start cold). */
static int bind_net(struct sbx_warm_box *bx, const struct sbx_spawn_req *req)
{
	struct sbx_egress_rules *rules = NULL;
	char err[256];
	int rc = sbx_egress_rules_parse(req->net_allow, &rules, err, sizeof err);
	if (rc == 0) {
		struct sbx_egress_bind bind = sbx_backend_net_bind(req, rules);
		if (sbx_egress_session_rebind(bx->ns, &bind, err, sizeof err) < 0) {
			log_msg("warn",
				"command %" PRIu64 ": its warm sandbox's network: %s; starting it cold",
				req->seq, err);
			rc = 1;
		}
	} else {
		log_msg("error", "command %" PRIu64 " refused: its network: %s", req->seq, err);
	}
	sbx_egress_rules_unref(&rules);
	return rc;
}

/* req into bx, claimed for it: 1 with *pid and *pidfd, 0 (bx was no use:
 * start cold), -errno. bx is the command's or ended on return. */
static int start(struct sbx_warm *w, struct sbx_warm_box *bx, const struct sbx_spawn_req *req, pid_t *pid,
		 int *pidfd)
{
	int rc = bx->ns ? bind_net(bx, req) : 0;
	struct buf payload;
	struct sbx_warm_hdr h;
	buf_init(&payload, WARM_ARGS_MAX);
	if (rc == 0)
		rc = make_payload(&payload, req, &h);
	if (rc == 0 && hand_over(bx, &h, &payload, req) < 0) {
		log_msg("warn", "command %" PRIu64 ": its warm sandbox was gone; starting it cold", req->seq);
		rc = 1;
	}
	buf_free(&payload);
	if (rc != 0) {
		unclaimed(w, bx, true);
		return rc < 0 ? rc : 0;
	}
	if (bx->ns) {
		sbx_backend_net_keep(w->b, req->seq, bx->ns); /* closed at the reap, as a cold one's */
		bx->ns = NULL;
	}
	struct taken *t = xmalloc(sizeof *t);
	t->seq = req->seq;
	t->wseq = bx->wseq;
	pthread_mutex_lock(&w->mu);
	t->next = w->taken;
	w->taken = t;
	pthread_mutex_unlock(&w->mu);
	close(bx->ctl);
	*pid = bx->pid;
	*pidfd = bx->pidfd;
	free(bx);
	return 1;
}

int sbx_warm_take(struct sbx_warm *w, const struct sbx_spawn_req *req, pid_t *pid, int *pidfd)
{
	struct sbx_warm_box *bx = req->warm_box;
	if (!bx) {
		/* A networked command's sandbox is claimed before, in place
		 * of its network setup (sbx_warm_claim). */
		if (req->net_allow)
			return 0;
		bx = claim(w, req);
		if (!bx)
			return 0;
	}
	return start(w, bx, req, pid, pidfd);
}

struct sbx_warm_box *sbx_warm_claim(struct sbx_warm *w, const struct sbx_spawn_req *req)
{
	return req->net_allow ? claim(w, req) : NULL;
}

void sbx_warm_unclaim(struct sbx_warm *w, struct sbx_warm_box **bx)
{
	if (w && bx && *bx)
		unclaimed(w, *bx, false);
	if (bx)
		*bx = NULL;
}

uint64_t sbx_warm_group(struct sbx_warm *w, uint64_t seq)
{
	if (!w)
		return seq;
	uint64_t g = seq;
	pthread_mutex_lock(&w->mu);
	for (struct taken **pp = &w->taken; *pp; pp = &(*pp)->next) {
		if ((*pp)->seq == seq) {
			struct taken *t = *pp;
			*pp = t->next;
			g = t->wseq;
			free(t);
			break;
		}
	}
	pthread_mutex_unlock(&w->mu);
	return g;
}

void sbx_warm_flush(struct sbx_warm *w, uid_t uid)
{
	if (!w)
		return;
	struct doomed d = {0};
	pthread_mutex_lock(&w->mu);
	for (struct shape *s = w->shapes; s; s = s->next) {
		if (s->uid == uid) {
			doom_all_locked(w, &d, s);
			s->gen++;
			s->used_ms = INT64_MIN / 2; /* forgotten at the next tidy */
		}
	}
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	doomed_end(w, &d);
}

void sbx_warm_stats(struct sbx_warm *w, struct sbx_warm_stats *out)
{
	*out = (struct sbx_warm_stats){0};
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	out->taken = w->n_taken;
	out->cold = w->n_cold;
	out->made = w->n_made;
	out->failed = w->n_failed;
	out->ended = w->n_ended;
	out->waiting = w->waiting;
	out->per_tenant = w->per_tenant;
	pthread_mutex_unlock(&w->mu);
}
