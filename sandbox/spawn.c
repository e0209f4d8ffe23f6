/* How every sandbox's process is started (sandbox/spawn.h): the one child
 * launcher the backends and the warm pool share, clone(CLONE_VM|CLONE_VFORK|
 * CLONE_PIDFD) with a small async-signal-safe child on its own stack (no
 * fork()), a runner thread's spawner (its low fd slots and the child's
 * stack), the argv and environment arrays it is given, and the wait for
 * what it started. It knows no backend: what the child does is decided
 * in the parent, in a struct sbx_launch. */
#include "sandbox/spawn.h"

#include <errno.h>
#include <fcntl.h>
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
#include "sandbox/backend.h"
#include "sandbox/cgroup.h"
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
