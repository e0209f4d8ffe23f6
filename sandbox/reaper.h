#pragma once
/* The server as a child subreaper (prctl PR_SET_CHILD_SUBREAPER): a
 * process a command leaves behind is reparented, when its parent dies, to
 * the server rather than to PID 1, and reaped here at once. bwrap's outer
 * process exits before the sandbox's init is reaped, so without this every
 * bwrap command's group waits for PID 1 (seconds on some hosts) before it
 * can serve the tenant's next command (sandbox/cgroup.c's kept groups).
 *
 * Only orphans are reaped here, never a child that a thread of the server
 * started and waits for by pid (the runner's commands, image and disk
 * helpers): the kernel hands an orphan to the subreaper's first live
 * thread, the main thread, and sbx_reaper_reap runs there and waits with
 * __WNOTHREAD, that is for the main thread's own children only. The main
 * thread must therefore wait for no child of its own while it serves (it
 * waits for a signal), and every other thread's children stay theirs.
 *
 * What reaches a command is unchanged: its kill, timeout and cancel go to
 * its process group and its cgroup, whoever its processes' parent is.
 *
 * Threads: sbx_reaper_init on the main thread before any other thread is
 * started (it blocks SIGCHLD, which the threads inherit; commands unblock
 * every signal before they run); sbx_reaper_reap on the main thread only.
 * sbx_reaper_on may be asked from any thread. */
#include <spawn.h>
#include <stdbool.h>

/* Become a subreaper and take SIGCHLD through a signalfd: the fd (poll it
 * for POLLIN, then call sbx_reaper_reap), or -errno with nothing changed. */
int sbx_reaper_init(void);
/* Reap every orphan that has exited; fd from sbx_reaper_init. Returns how
 * many. Never blocks. */
int sbx_reaper_reap(int fd);
/* Whether sbx_reaper_init succeeded in this process: the runner's
 * commands then exit without signalling the server (clone exit signal 0,
 * waited for with __WALL), so that only an orphan's exit wakes the main
 * thread. */
bool sbx_reaper_on(void);

/* A program the server starts (an image or disk tool, a uid helper) must
 * not inherit the blocked SIGCHLD of sbx_reaper_init, or one that forks
 * and waits on the signal would wait forever. sbx_reaper_spawn is
 * posix_spawn (search: posix_spawnp) with the child's signal mask empty;
 * 0 or an errno value, as posix_spawn. For a fork()ed child about to exec:
 * sbx_reaper_child_unblock unblocks every signal (async-signal-safe). */
int sbx_reaper_spawn(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa, char *const argv[],
		     char *const envp[], bool search);
void sbx_reaper_child_unblock(void);
