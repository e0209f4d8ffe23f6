#pragma once
/* Internal to sandbox/: how a sandbox's process is started (sandbox/spawn.c),
 * below the backends and the warm pool, which both start theirs through
 * it: a struct sbx_launch says everything the child does between clone
 * and execve, sbx_launch_start does it. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/backend.h"

/* A growable NULL-terminated array of owned strings (argv, envp). */
struct sbx_strv {
	char **v;
	size_t n, cap;
};
void sbx_strv_add(struct sbx_strv *sv, const char *s);
void sbx_strv_addf(struct sbx_strv *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbx_strv_free(struct sbx_strv *sv);

#define SBX_LAUNCH_MAX_RLIMITS 5
#define SBX_LAUNCH_MAX_CGROUPS 4 /* SBX_CGROUP_MAX (sandbox/cgroup.h) */
#define SBX_LAUNCH_MAX_KEEP 24	 /* bwrap: 8 of its own and up to 9 of an image (sandbox/rootimg.h) */

/* Everything the child does between clone and execve, decided in the
 * parent so the child only makes system calls. */
struct sbx_launch {
	/* filled by the backend's prepare() */
	const char *path; /* absolute path to execve */
	struct sbx_strv argv;
	struct sbx_strv envp;
	char *cwd;			   /* chdir before exec, or NULL */
	int keep_fds[SBX_LAUNCH_MAX_KEEP]; /* keep_fds[i] becomes fd 3 + i in the child; owned */
	int n_keep;
	bool exec_fail_is_backend; /* execve failing means the backend is unusable */

	/* filled by the dispatch */
	int std_fds[3]; /* become 0, 1, 2 */
	struct {
		int resource;
		uint64_t value;
	} rlimits[SBX_LAUNCH_MAX_RLIMITS];
	int n_rlimits;
	bool drop_privs;
	uid_t uid;
	gid_t gid;
	int cgroup_fds[SBX_LAUNCH_MAX_CGROUPS]; /* cgroup.procs; the child writes "0\n" */
	int n_cgroup_fds;
	bool pdeathsig; /* PR_SET_PDEATHSIG SIGKILL after dropping privileges */
	int netns_fd;	/* setns(CLONE_NEWNET) into it while still privileged (-1: stay); not owned */
	bool net;	/* the command has network (net_allow): netns_fd is its egress namespace */

	/* filled by the warm pool (sandbox/warm.h); -1 for a command: a warm
	 * sandbox, whose command is the launcher (warm_exe, a sealed memfd)
	 * waiting on its control socket (warm_ctl); not owned */
	int warm_ctl, warm_exe;

	/* written by the child on failure (shared memory, CLONE_VM) */
	volatile int child_err;
	volatile int child_step;
};

void sbx_launch_init(struct sbx_launch *l);
/* Hand fd (owned from now on) to the child as fd 3 + n_keep; returns that
 * number, or -EMFILE (the fd is closed) when there is no room. */
int sbx_launch_keep(struct sbx_launch *l, int fd);
/* Frees argv, envp, cwd and closes the keep_fds. */
void sbx_launch_release(struct sbx_launch *l);
/* Start l in a new session. On success *pid and *pidfd (O_CLOEXEC) are
 * set. Errors: -errno of the failing step in the child (execve, chdir,
 * setresuid, ...) or of clone. */
int sbx_launch_start(struct sbx_launch *l, pid_t *pid, int *pidfd);

/* Wait for pid (retrying EINTR); returns the wait status or -errno. */
int sbx_wait_status(pid_t pid);

/* The child's steps, in order: child_step says at which one it failed. */
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

/* Base environment shared by the backends. */
#define SBX_ENV_PATH "/usr/local/bin:/usr/bin:/bin"
#define SBX_ENV_LANG "C.UTF-8"

/* The command's argv: "/bin/sh -c <command>", behind "setsid --ctty
 * --wait" for a terminal (req->tty). Returns the program to execve. */
#define SBX_SETSID_PATH "/usr/bin/setsid"
const char *sbx_command_argv(struct sbx_strv *argv, const struct sbx_spawn_req *req);
