#pragma once
/* Holding a command's child in the window between the runner's clone and
 * the exec of bwrap (issue 27): with ptrace, the test catches the next
 * child a runner thread of the server clones and stops it at the entry
 * of its first system call that can block (write: the cgroup join;
 * setns; execve), the place where a child once still held the server's
 * fds and had no parent-death signal. The server must run with one
 * runner thread (--set runner-threads=1); the test must be root (or the
 * server's ptracer). Include after it_exec.h. */
#include <errno.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* The tid of the server's thread named name, or -1. */
static inline pid_t it_thread_named(struct it_server *s, const char *name)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/proc/%d/task", (int)s->pid);
	DIR *d = opendir(dir);
	pid_t tid = -1;
	struct dirent *e;
	while (d && tid < 0 && (e = readdir(d))) {
		char path[384];
		snprintf(path, sizeof path, "%s/%s/comm", dir, e->d_name);
		char *comm = it_read_file(path, NULL);
		if (comm && strncmp(comm, name, strlen(name)) == 0 && comm[strlen(name)] == '\n')
			tid = (pid_t)atoi(e->d_name);
		free(comm);
	}
	if (d)
		closedir(d);
	return tid;
}

/* Wait (with a deadline) for a ptrace stop of tid: its status, or -1. */
static inline int it_trace_wait(pid_t tid, long timeout_ms)
{
	long until = it_now_ms() + timeout_ms;
	int st;
	for (;;) {
		pid_t r = waitpid(tid, &st, __WALL | WNOHANG);
		if (r == tid)
			return st;
		if (r < 0 || it_now_ms() > until)
			return -1;
		usleep(1000);
	}
}

/* Arm: trace the runner thread (runner-0) for its next clone. 0 or -1. */
static inline int it_hold_arm(struct it_server *s, pid_t *runner)
{
	*runner = it_thread_named(s, "runner-0");
	if (*runner < 0)
		return -1;
	long opts = PTRACE_O_TRACECLONE | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEFORK | PTRACE_O_TRACESYSGOOD;
	return ptrace(PTRACE_SEIZE, *runner, NULL, (void *)opts) == 0 ? 0 : -1;
}

/* After it_hold_arm and a request that makes the runner spawn: the child,
 * stopped at the entry of its first write, setns or execve (*nr says
 * which), or -1. The runner thread is no longer traced; the child is,
 * until it_hold_release. */
static inline pid_t it_hold_child(pid_t runner, long *nr, long timeout_ms)
{
	pid_t child = -1;
	while (child < 0) {
		int st = it_trace_wait(runner, timeout_ms);
		if (st < 0 || !WIFSTOPPED(st))
			return -1;
		int ev = st >> 16;
		if (ev == PTRACE_EVENT_CLONE || ev == PTRACE_EVENT_VFORK || ev == PTRACE_EVENT_FORK) {
			unsigned long msg = 0;
			ptrace(PTRACE_GETEVENTMSG, runner, NULL, &msg);
			child = (pid_t)msg;
			ptrace(PTRACE_DETACH, runner, NULL, NULL);
		} else {
			int sig = ev || WSTOPSIG(st) == (SIGTRAP | 0x80) ? 0 : WSTOPSIG(st);
			ptrace(PTRACE_CONT, runner, NULL, (void *)(long)sig);
		}
	}
	for (;;) {
		int st = it_trace_wait(child, timeout_ms);
		if (st < 0 || !WIFSTOPPED(st))
			return -1;
		int sig = 0;
		if (WSTOPSIG(st) == (SIGTRAP | 0x80)) {
			struct __ptrace_syscall_info info;
			memset(&info, 0, sizeof info);
			if (ptrace(PTRACE_GET_SYSCALL_INFO, child, (void *)sizeof info, &info) > 0 &&
			    info.op == PTRACE_SYSCALL_INFO_ENTRY &&
			    (info.entry.nr == SYS_write || info.entry.nr == SYS_setns ||
			     info.entry.nr == SYS_execve)) {
				*nr = (long)info.entry.nr;
				return child;
			}
		} else if (!(st >> 16)) {
			sig = WSTOPSIG(st); /* a signal for it: delivered */
		}
		ptrace(PTRACE_SYSCALL, child, NULL, (void *)(long)sig);
	}
}

/* Let the held child go on (or reap the trace of its death). */
static inline void it_hold_release(pid_t child)
{
	if (ptrace(PTRACE_DETACH, child, NULL, NULL) == 0)
		return;
	/* Not stopped: dying or dead (its parent-death signal); its end is
	 * reported to us, the tracer, first. */
	(void)it_trace_wait(child, 5000);
}
