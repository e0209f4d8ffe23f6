/* The host checks' small helpers (doctor_int.h): a check's status set
 * to missing or not needed, a word found in a configured list, a
 * program run quietly, the nearest existing parent of a path. */
#include "server/doctor_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/xmalloc.h"
#include "routes/policy.h"
#include "sandbox/backend.h"
#include "sandbox/cgroup.h"
#include "sandbox/diskimg.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/quota.h"
#include "sandbox/registry.h"
#include "sandbox/seccomp.h"
#include "sandbox/workspace.h"
#include "server/cli.h"
#include "server/datadir.h"
#include "store/store.h"

extern char **environ;

void doctor_missing(struct srv_check *c, bool refuse)
{
	c->status = SRV_CHECK_MISSING;
	c->refuse = refuse;
}

void doctor_not_needed(struct srv_check *c)
{
	c->status = SRV_CHECK_NOT_NEEDED;
}

/* Whether name is one of the comma/space separated words of list. */
bool doctor_listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *q = list; *q;) {
		q += strspn(q, ", ");
		size_t len = strcspn(q, ", ");
		if (len == n && strncmp(q, name, n) == 0)
			return true;
		q += len;
	}
	return false;
}

/* Run argv quietly (stdin, stdout and stderr /dev/null): its exit status,
 * or -errno when it could not be started. */
int doctor_run_quiet(const char *path, char *const argv[])
{
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int st = 0;
	posix_spawn_file_actions_init(&fa);
	for (int fd = 0; fd < 3; fd++)
		posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", fd ? O_WRONLY : O_RDONLY, 0);
	int rc = posix_spawn(&pid, path, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return -rc;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The nearest existing directory at or above path (a copy). */
char *doctor_existing_parent(const char *path)
{
	char *p = xstrdup(path);
	struct stat st;
	while (stat(p, &st) < 0 || !S_ISDIR(st.st_mode)) {
		char *slash = strrchr(p, '/');
		if (!slash || slash == p) {
			free(p);
			return xstrdup(path[0] == '/' ? "/" : ".");
		}
		*slash = '\0';
	}
	return p;
}
