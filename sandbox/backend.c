#include "sandbox/backend.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/xmalloc.h"
#include "sandbox/backend_impl.h"
#include "sandbox/cgroup.h"
#include "sandbox/warm.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/reaper.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

#define CHILD_STACK_SIZE (64 * 1024)
#define KSIGSET_SIZE 8 /* the kernel's sigset_t: 64 signals */
#define KNSIG 64

/* The child shares the parent's memory (CLONE_VM) and runs on a stack of
 * its own: no instrumentation, no allocation, no libc wrappers that touch
 * shared state (glibc's setresuid would broadcast to the *parent's*
 * threads), only raw system calls. */
#if defined(__clang__)
#define CHILD_FN __attribute__((no_sanitize("address", "undefined"), noinline))
#else
#define CHILD_FN __attribute__((no_sanitize_address, no_sanitize_undefined, noinline))
#endif

enum child_step {
	STEP_NONE,
	STEP_UNSHARE,
	STEP_SETSID,
	STEP_CGROUP,
	STEP_SETNS,
	STEP_RLIMIT,
	STEP_SETGROUPS,
	STEP_SETRESGID,
	STEP_SETRESUID,
	STEP_PDEATHSIG,
	STEP_DUPFD,
	STEP_DUP3,
	STEP_CLOSE_RANGE,
	STEP_CHDIR,
	STEP_EXEC,
};

struct krlimit {
	uint64_t cur, max;
};

/* How a command gets its fds without a copy of the server's fd table
 * (issue 15, P9; a copy costs O(open connections): dup_fd takes a
 * reference on every file, close_range drops them all, while the runner
 * thread waits in CLONE_VFORK).
 *
 * Each runner thread reserves SPAWN_SLOTS low fd numbers when the runner
 * starts, before the server has any connection (placeholders on
 * /dev/null, O_CLOEXEC). Before a spawn the thread dup3()s the fds the
 * child needs (std, keep, cgroup.procs, netns) onto its own slots, and
 * clones with CLONE_FILES: the child shares the table, copies nothing. Its
 * first act, before anything else reads or changes the table, is
 * close_range(below, ~0U, CLOSE_RANGE_UNSHARE): the kernel (fs/file.c,
 * since 5.9) then gives it a private table holding only the fds under
 * `below` (at least the first 64: sane_fdtable_size), a cost bounded by
 * `below`, not by the server's connections. Next (after its parent-death
 * signal) and before anything that can block (the cgroup join can), it
 * closes every fd that is not its own, which includes every server fd
 * under `below` (the uid-base claim's lock, SQLite, the signalfd, memfds,
 * other threads' slots; another thread's slot changing while we unshare
 * is harmless, it is closed either way): a child stuck there when the
 * server is killed holds nothing of it (issue 27). Later it copies its
 * fds down to 0..n and closes the rest. Slots are never closed while the
 * thread lives (a freed low number would be taken by another thread's
 * open and then overwritten by our dup3); after the clone they are reset
 * to /dev/null so no pipe end stays referenced. A kernel without
 * CLOSE_RANGE_UNSHARE fails the child's first step before it touched
 * anything: the spawn is retried with a copied table (the old way) and
 * the old way is kept from then on. Threads with no spawner (a health
 * probe off the runner) use the old way. */
#define SPAWN_SLOTS (3 + SBX_LAUNCH_MAX_KEEP + SBX_LAUNCH_MAX_CGROUPS + 1)

struct sbx_spawner {
	int null_fd;		/* /dev/null: what an idle slot holds */
	int slots[SPAWN_SLOTS]; /* this thread's low fd numbers; never closed while it lives */
	unsigned below;		/* 1 + the highest slot: the child keeps only fds under it */
	void *stack;		/* the child's stack, free again when clone returns (VFORK) */
};

static __thread struct sbx_spawner *tls_spawner;
static atomic_bool unshare_refused; /* the kernel lacks CLOSE_RANGE_UNSHARE */

/* The fd numbers the child uses: the launch's own, or the slots. */
struct child_arg {
	struct sbx_launch *l;
	int src[3 + SBX_LAUNCH_MAX_KEEP]; /* become 0..n_src-1 (-1: left as is) */
	int n_src;
	int cgroup_fds[SBX_LAUNCH_MAX_CGROUPS];
	int netns_fd;
	unsigned unshare_below; /* 0: the child has a copy of the table already */
	pid_t parent;		/* the server's pid, taken before the clone */
};

const char *sbx_command_argv(struct sbx_strv *argv, const struct sbx_spawn_req *req)
{
	if (req->tty) {
		sbx_strv_add(argv, "setsid");
		sbx_strv_add(argv, "--ctty");
		sbx_strv_add(argv, "--wait");
	}
	sbx_strv_add(argv, "/bin/sh");
	sbx_strv_add(argv, "-c");
	sbx_strv_add(argv, req->command);
	return req->tty ? SBX_SETSID_PATH : "/bin/sh";
}

/* ---- strv ---- */

void sbx_strv_add(struct sbx_strv *sv, const char *s)
{
	if (sv->n + 2 > sv->cap) {
		sv->cap = sv->cap ? sv->cap * 2 : 16;
		sv->v = xrealloc(sv->v, sv->cap * sizeof(*sv->v));
	}
	sv->v[sv->n++] = xstrdup(s);
	sv->v[sv->n] = NULL;
}

void sbx_strv_addf(struct sbx_strv *sv, const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	s = xvasprintf(fmt, ap);
	va_end(ap);
	sbx_strv_add(sv, s);
	free(s);
}

void sbx_strv_free(struct sbx_strv *sv)
{
	size_t i;

	for (i = 0; i < sv->n; i++)
		free(sv->v[i]);
	free(sv->v);
	sv->v = NULL;
	sv->n = sv->cap = 0;
}

_Static_assert(SBX_LAUNCH_MAX_CGROUPS == SBX_CGROUP_MAX, "a command joins every hierarchy in use");

/* ---- launcher ---- */

void sbx_launch_init(struct sbx_launch *l)
{
	int i;

	memset(l, 0, sizeof(*l));
	for (i = 0; i < 3; i++)
		l->std_fds[i] = -1;
	for (i = 0; i < SBX_LAUNCH_MAX_CGROUPS; i++)
		l->cgroup_fds[i] = -1;
	l->netns_fd = -1;
	l->warm_ctl = l->warm_exe = -1;
}

void sbx_launch_release(struct sbx_launch *l)
{
	sbx_strv_free(&l->argv);
	sbx_strv_free(&l->envp);
	free(l->cwd);
	l->cwd = NULL;
	for (int i = 0; i < l->n_keep; i++)
		close(l->keep_fds[i]);
	l->n_keep = 0;
}

int sbx_launch_keep(struct sbx_launch *l, int fd)
{
	if (l->n_keep >= SBX_LAUNCH_MAX_KEEP) {
		close(fd);
		return -EMFILE;
	}
	l->keep_fds[l->n_keep] = fd;
	return 3 + l->n_keep++;
}

CHILD_FN static void child_fail(struct sbx_launch *l, int step)
{
	l->child_err = errno ? errno : EIO;
	l->child_step = step;
	syscall(SYS_exit, 127);
	for (;;)
		;
}

/* a's fds onto 0..n_src-1, every other fd closed. */
CHILD_FN static void child_fds(const struct child_arg *a)
{
	int hi[3 + SBX_LAUNCH_MAX_KEEP];
	int i, n_fds;

	/* The fds first: RLIMIT_NOFILE below must not stop the copies (a
	 * server with a thousand connections has no free fd under 1024).
	 * Move the sources out of the way first, so that any overlap between
	 * them and 0..n cannot clobber one before it is copied. */
	n_fds = a->n_src;
	for (i = 0; i < n_fds; i++) {
		int src = a->src[i];
		long r;

		hi[i] = -1;
		if (src < 0)
			continue;
		r = syscall(SYS_fcntl, src, F_DUPFD, 3 + SBX_LAUNCH_MAX_KEEP);
		if (r < 0)
			child_fail(a->l, STEP_DUPFD);
		hi[i] = (int)r;
	}
	for (i = 0; i < n_fds; i++) {
		if (hi[i] >= 0 && syscall(SYS_dup3, hi[i], i, 0) < 0)
			child_fail(a->l, STEP_DUP3);
	}
	if (syscall(SYS_close_range, (unsigned)n_fds, ~0U, 0) < 0)
		child_fail(a->l, STEP_CLOSE_RANGE);
}

/* The parent-death signal (when the launch asks for it), then whether the
 * parent is still there: gone already, the signal will never come. */
CHILD_FN static void child_die_with_parent(const struct child_arg *a)
{
	if (!a->l->pdeathsig)
		return;
	if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		child_fail(a->l, STEP_PDEATHSIG);
	if (syscall(SYS_getppid) != a->parent)
		syscall(SYS_exit, 127);
}

/* Close every fd but the child's own (its sources, cgroup.procs fds and
 * namespace fd; a std fd left as is, source -1, stays): with a shared
 * table unshared, the server's fds under `below` (the uid-base claim,
 * SQLite, the signalfd, ...); with a copied table, all of the server's.
 * The ranges between the kept fds go with one close_range each. */
CHILD_FN static void child_close_foreign(const struct child_arg *a)
{
	int keep[3 + SBX_LAUNCH_MAX_KEEP + SBX_LAUNCH_MAX_CGROUPS + 1];
	int n = 0, i, j;
	unsigned from = 0;

	for (i = 0; i < a->n_src; i++)
		keep[n++] = a->src[i] >= 0 ? a->src[i] : i < 3 ? i : -1;
	for (i = 0; i < a->l->n_cgroup_fds; i++)
		keep[n++] = a->cgroup_fds[i];
	keep[n++] = a->netns_fd;
	for (i = 1; i < n; i++) { /* insertion sort: a few ints */
		int v = keep[i];

		for (j = i; j > 0 && keep[j - 1] > v; j--)
			keep[j] = keep[j - 1];
		keep[j] = v;
	}
	for (i = 0; i < n; i++) {
		if (keep[i] < 0 || (unsigned)keep[i] < from)
			continue;
		if ((unsigned)keep[i] > from && syscall(SYS_close_range, from, (unsigned)keep[i] - 1, 0) < 0)
			child_fail(a->l, STEP_CLOSE_RANGE);
		from = (unsigned)keep[i] + 1;
	}
	if (syscall(SYS_close_range, from, ~0U, 0) < 0)
		child_fail(a->l, STEP_CLOSE_RANGE);
}

CHILD_FN static int child_main(void *arg)
{
	static const unsigned long dfl_action[8]; /* SIG_DFL, no flags, empty mask */
	static const uint64_t empty_mask;
	static char *const empty_env[] = {NULL};
	const struct child_arg *a = arg;
	struct sbx_launch *l = a->l;
	int i;

	/* Before anything reads or changes the shared table (CLONE_FILES). */
	if (a->unshare_below && syscall(SYS_close_range, a->unshare_below, ~0U, CLOSE_RANGE_UNSHARE) < 0)
		child_fail(l, STEP_UNSHARE);
	/* Before anything that can block (the cgroup join can): a server
	 * killed from here on takes the child with it, and one killed before
	 * (the signal is then never sent) is seen gone. */
	child_die_with_parent(a);
	/* Nothing of the server's may be held while the child can block: a
	 * lock held here (the uid-base claim) would outlive a killed server. */
	child_close_foreign(a);
	/* No handler of the server may run in the child: signals were
	 * blocked by the parent around clone; reset every disposition
	 * (SIGPIPE ignored by the server must not be ignored by commands). */
	for (i = 1; i <= KNSIG; i++) {
		if (i == SIGKILL || i == SIGSTOP)
			continue;
		syscall(SYS_rt_sigaction, i, dfl_action, NULL, KSIGSET_SIZE);
	}
	if (syscall(SYS_setsid) < 0)
		child_fail(l, STEP_SETSID);

	/* Join the cgroups while still privileged; without them the
	 * command does not run. */
	for (i = 0; i < l->n_cgroup_fds; i++) {
		if (syscall(SYS_write, a->cgroup_fds[i], "0\n", 2) != 2)
			child_fail(l, STEP_CGROUP);
	}
	/* The command's network namespace, made and filtered by the server
	 * before this (its egress session, sandbox/egress/nsprep.h): joined
	 * as root, never by the
	 * tenant's uid, so nothing the command runs can leave it. */
	if (a->netns_fd >= 0 && syscall(SYS_setns, a->netns_fd, CLONE_NEWNET) < 0)
		child_fail(l, STEP_SETNS);

	child_fds(a);

	for (i = 0; i < l->n_rlimits; i++) {
		struct krlimit rl = {l->rlimits[i].value, l->rlimits[i].value};

		if (syscall(SYS_prlimit64, 0, l->rlimits[i].resource, &rl, NULL) < 0)
			child_fail(l, STEP_RLIMIT);
	}

	if (l->drop_privs) {
		if (syscall(SYS_setgroups, 0, NULL) < 0)
			child_fail(l, STEP_SETGROUPS);
		if (syscall(SYS_setresgid, l->gid, l->gid, l->gid) < 0)
			child_fail(l, STEP_SETRESGID);
		if (syscall(SYS_setresuid, l->uid, l->uid, l->uid) < 0)
			child_fail(l, STEP_SETRESUID);
	}
	/* Again after the credential change, which clears it. */
	child_die_with_parent(a);

	if (l->cwd && syscall(SYS_chdir, l->cwd) < 0)
		child_fail(l, STEP_CHDIR);

	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty_mask, NULL, KSIGSET_SIZE);
	syscall(SYS_execve, l->path, l->argv.v, l->envp.v ? l->envp.v : empty_env);
	child_fail(l, STEP_EXEC);
	return 127;
}

int sbx_wait_status(pid_t pid)
{
	int status;

	/* __WALL: a child cloned without an exit signal too (reaper.h). */
	while (waitpid(pid, &status, __WALL) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	return status;
}

/* ---- spawner: a runner thread's slots and stack ---- */

/* A child stack, or MAP_FAILED. */
static void *stack_map(void)
{
	const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK;

	/* cppcheck-suppress invalidFunctionArg ; posix.cfg wants fd >= 0, MAP_ANONYMOUS takes -1 (mmap(2)) */
	return mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE, flags, -1, 0);
}

int sbx_spawner_new(struct sbx_spawner **out)
{
	struct sbx_spawner *sp = xcalloc(1, sizeof(*sp));
	int i, rc = 0;

	for (i = 0; i < SPAWN_SLOTS; i++)
		sp->slots[i] = -1;
	sp->stack = MAP_FAILED;
	sp->null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (sp->null_fd < 0)
		rc = -errno;
	for (i = 0; i < SPAWN_SLOTS && rc == 0; i++) {
		/* The lowest free from 3: a server started with 0, 1 or 2 closed
		 * must not find a command's pipe on its stderr mid-spawn. */
		sp->slots[i] = fcntl(sp->null_fd, F_DUPFD_CLOEXEC, 3);
		if (sp->slots[i] < 0)
			rc = -errno;
		else if ((unsigned)sp->slots[i] >= sp->below)
			sp->below = (unsigned)sp->slots[i] + 1;
	}
	if (rc == 0) {
		sp->stack = stack_map();
		if (sp->stack == MAP_FAILED)
			rc = -errno;
	}
	if (rc < 0) {
		sbx_spawner_free(&sp);
		return rc;
	}
	*out = sp;
	return 0;
}

void sbx_spawner_bind(struct sbx_spawner *sp)
{
	tls_spawner = sp;
}

void sbx_spawner_free(struct sbx_spawner **psp)
{
	struct sbx_spawner *sp;

	if (!psp || !*psp)
		return;
	sp = *psp;
	if (tls_spawner == sp)
		tls_spawner = NULL;
	for (int i = 0; i < SPAWN_SLOTS; i++)
		if (sp->slots[i] >= 0)
			close(sp->slots[i]);
	if (sp->null_fd >= 0)
		close(sp->null_fd);
	if (sp->stack != MAP_FAILED)
		munmap(sp->stack, CHILD_STACK_SIZE);
	free(sp);
	*psp = NULL;
}

/* ---- launcher: the parent's side ---- */

/* a's fds: the launch's own (the child gets a copy of the table). */
static void child_arg_direct(struct child_arg *a, struct sbx_launch *l)
{
	int i;

	memset(a, 0, sizeof(*a));
	a->l = l;
	a->n_src = 3 + l->n_keep;
	for (i = 0; i < a->n_src; i++)
		a->src[i] = i < 3 ? l->std_fds[i] : l->keep_fds[i - 3];
	for (i = 0; i < l->n_cgroup_fds; i++)
		a->cgroup_fds[i] = l->cgroup_fds[i];
	a->netns_fd = l->netns_fd;
}

/* Put fd on the next free slot of sp (*used counts them); returns the
 * slot's number, -1 for fd -1, or -errno. */
static int slot_put(struct sbx_spawner *sp, int fd, int *used)
{
	if (fd < 0)
		return -1;
	if (dup3(fd, sp->slots[*used], O_CLOEXEC) < 0)
		return -errno;
	return sp->slots[(*used)++];
}

/* Back to /dev/null: no slot keeps a pipe end (or anything) referenced.
 * Both fds are ours and open, so dup3 cannot fail short of a bug. */
static void slots_reset(struct sbx_spawner *sp, int used)
{
	for (int i = 0; i < used; i++)
		if (dup3(sp->null_fd, sp->slots[i], O_CLOEXEC) < 0)
			abort();
}

/* a's fds moved onto sp's slots; returns how many slots hold one (reset
 * them after the clone), or -errno with every slot reset. */
static int child_arg_slots(struct child_arg *a, struct sbx_spawner *sp)
{
	int used = 0, i, r = 0;

	for (i = 0; i < a->n_src && r >= -1; i++)
		r = a->src[i] = slot_put(sp, a->src[i], &used);
	for (i = 0; i < a->l->n_cgroup_fds && r >= -1; i++)
		r = a->cgroup_fds[i] = slot_put(sp, a->cgroup_fds[i], &used);
	if (r >= -1)
		r = a->netns_fd = slot_put(sp, a->netns_fd, &used);
	if (r < -1) {
		slots_reset(sp, used);
		return r;
	}
	a->unshare_below = sp->below;
	return used;
}

/* One clone of the child; -errno of clone, or 0 (the child's own result
 * is in l->child_err/child_step). */
static int clone_child(struct child_arg *a, void *stack, pid_t *pid, int *pidfd)
{
	/* With the server a subreaper, its main thread wakes at every
	 * SIGCHLD to reap orphans; its own children need no signal (their
	 * thread watches a pidfd and waits with __WALL). */
	int flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | (sbx_reaper_on() ? 0 : SIGCHLD);
	sigset_t all, old;
	int saved;

	if (a->unshare_below)
		flags |= CLONE_FILES;
	a->l->child_err = 0;
	a->l->child_step = STEP_NONE;
	a->parent = getpid();
	*pidfd = -1;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	*pid = clone(child_main, (char *)stack + CHILD_STACK_SIZE, flags, a, pidfd);
	saved = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return *pid < 0 ? -saved : 0;
}

/* Start the child through sp's slots; 1 (nothing started, nothing
 * changed) when the kernel refuses CLOSE_RANGE_UNSHARE. */
static int start_shared(struct sbx_launch *l, struct sbx_spawner *sp, pid_t *pid, int *pidfd)
{
	struct child_arg a;
	int used, rc;

	child_arg_direct(&a, l);
	used = child_arg_slots(&a, sp);
	if (used < 0)
		return used;
	rc = clone_child(&a, sp->stack, pid, pidfd);
	slots_reset(sp, used);
	if (rc == 0 && l->child_step == STEP_UNSHARE && (l->child_err == EINVAL || l->child_err == ENOSYS)) {
		sbx_wait_status(*pid);
		if (*pidfd >= 0)
			close(*pidfd);
		if (!atomic_exchange(&unshare_refused, true))
			log_msg("warn",
				"close_range(CLOSE_RANGE_UNSHARE) refused (%s): commands start "
				"with a copy of the server's fd table",
				sbx_strerror(-l->child_err));
		return 1;
	}
	return rc;
}

int sbx_launch_start(struct sbx_launch *l, pid_t *pid_out, int *pidfd_out)
{
	struct sbx_spawner *sp = tls_spawner;
	struct child_arg a;
	void *stack;
	int pidfd = -1;
	pid_t pid;
	int rc = 1;

	if (!l->path || !l->argv.v)
		return -EINVAL;
	if (sp && !atomic_load(&unshare_refused))
		rc = start_shared(l, sp, &pid, &pidfd);
	if (rc == 1) {
		stack = sp ? sp->stack : MAP_FAILED;
		if (!sp) {
			stack = stack_map();
			if (stack == MAP_FAILED)
				return -errno;
		}
		child_arg_direct(&a, l);
		rc = clone_child(&a, stack, &pid, &pidfd);
		if (!sp)
			munmap(stack, CHILD_STACK_SIZE);
	}
	if (rc < 0)
		return rc;
	if (l->child_err) {
		sbx_wait_status(pid);
		if (pidfd >= 0)
			close(pidfd);
		return -l->child_err;
	}
	*pid_out = pid;
	*pidfd_out = pidfd;
	return 0;
}

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
