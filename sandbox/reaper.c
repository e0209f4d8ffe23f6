/* The server as a child subreaper (see reaper.h). */
#include "sandbox/reaper.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

static _Atomic bool reaper_on;

int sbx_reaper_init(void)
{
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	/* Blocked before the signalfd exists and before any thread: a
	 * SIGCHLD is then never delivered to a thread as a signal, only
	 * read here. */
	int rc = -pthread_sigmask(SIG_BLOCK, &chld, NULL);
	if (rc < 0)
		return rc;
	int fd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
	if (fd < 0 || prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		pthread_sigmask(SIG_UNBLOCK, &chld, NULL);
		return rc;
	}
	atomic_store(&reaper_on, true);
	return fd;
}

int sbx_reaper_reap(int fd)
{
	struct signalfd_siginfo si[8];
	int n = 0;
	/* Drain first: an exit after the last read below signals again. */
	while (read(fd, si, sizeof si) == (ssize_t)sizeof si)
		;
	for (;;) {
		siginfo_t info = {0};
		/* The main thread's children only: the orphans (reaper.h). */
		if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | __WALL | __WNOTHREAD) < 0) {
			if (errno == EINTR)
				continue;
			break; /* ECHILD: none left */
		}
		if (info.si_pid == 0)
			break; /* some alive, none exited */
		n++;
	}
	return n;
}

bool sbx_reaper_on(void)
{
	return atomic_load(&reaper_on);
}

int sbx_reaper_spawn(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa, char *const argv[],
		     char *const envp[], bool search)
{
	posix_spawnattr_t at;
	sigset_t none;
	sigemptyset(&none);
	int rc = posix_spawnattr_init(&at);
	if (rc)
		return rc;
	if ((rc = posix_spawnattr_setsigmask(&at, &none)) == 0 &&
	    (rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK)) == 0)
		rc = search ? posix_spawnp(pid, file, fa, &at, argv, envp)
			    : posix_spawn(pid, file, fa, &at, argv, envp);
	posix_spawnattr_destroy(&at);
	return rc;
}

void sbx_reaper_child_unblock(void)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}
