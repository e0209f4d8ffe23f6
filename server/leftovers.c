#include "server/leftovers.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/config.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "sandbox/rootimg_impl.h"

bool srv_leftovers_present(const struct sbx_config *cfg, const char *name)
{
	char *tdir = xasprintf("%s/tenants/%s", cfg->data_dir, name);
	struct stat st;
	bool there = lstat(tdir, &st) == 0;
	free(tdir);
	return there;
}

/* removed/ under the data directory: 0700, so that no tenant's uid can
 * reach what was moved there (a workspace moved there by an older version may still be 0755). */
static int removed_dir(const struct sbx_config *cfg, char **out)
{
	char *dir = xasprintf("%s/removed", cfg->data_dir);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		int err = errno;
		free(dir);
		return -err;
	}
	struct stat st;
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || chmod(dir, 0700) < 0) {
		free(dir);
		return -ENOTDIR;
	}
	*out = dir;
	return 0;
}

int srv_leftovers_move_aside(const struct sbx_config *cfg, const char *name, int64_t life, char *dest,
			     size_t destsz)
{
	dest[0] = '\0';
	if (!srv_leftovers_present(cfg, name))
		return 0;
	char *dir = NULL;
	int rc = removed_dir(cfg, &dir);
	if (rc < 0)
		return rc;
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;
	strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", gmtime_r(&now, &tm));
	char *tdir = xasprintf("%s/tenants/%s", cfg->data_dir, name);
	/* The life makes the name unique (0: a directory no life of the
	 * store claims, e.g. left by a release before lives). */
	snprintf(dest, destsz, "%s/%s.%s.%lld.%ld", dir, name, stamp, (long long)life, (long)getpid());
	rc = rename(tdir, dest) < 0 ? -errno : 0;
	if (rc < 0)
		dest[0] = '\0';
	free(tdir);
	free(dir);
	return rc;
}

int srv_leftovers_purge(const struct sbx_config *cfg, const char *name, int64_t life, char *dest,
			size_t destsz)
{
	int rc = srv_leftovers_move_aside(cfg, name, life, dest, destsz);
	if (rc < 0 || !dest[0])
		return rc;
	rc = rootimg_remove_tree(dest);
	if (rc == 0)
		dest[0] = '\0';
	return rc;
}

/* The real uid and the state letter of /proc/<pid>/status; -1 when gone. */
static long status_uid_state(const char *pid, char *state)
{
	char path[300], line[256];
	snprintf(path, sizeof path, "/proc/%s/status", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	long uid = -1;
	*state = '?';
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, "State:", 6) == 0)
			sscanf(line + 6, " %c", state);
		else if (strncmp(line, "Uid:", 4) == 0) {
			uid = strtol(line + 4, NULL, 10);
			break;
		}
	}
	fclose(f);
	return uid;
}

int srv_uid_processes(uid_t uid)
{
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	int n = 0;
	char state;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] >= '0' && e->d_name[0] <= '9' &&
		    status_uid_state(e->d_name, &state) == (long)uid)
			n++;
	closedir(d);
	return n;
}

/* One pass over /proc: SIGKILL every live process whose real uid is in
 * first .. first + count - 1 (never this process); how many were alive. */
static int kill_uid_range(uid_t first, uint32_t count)
{
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	int n = 0;
	pid_t self = getpid();
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		/* The process pinned first (a pidfd), then its uid read: a pid
		 * reused between the read and the signal cannot be hit. */
		pid_t pid = (pid_t)strtol(e->d_name, NULL, 10);
		int pfd = pid == self ? -1 : (int)syscall(SYS_pidfd_open, pid, 0);
		if (pfd < 0)
			continue;
		char state;
		long uid = status_uid_state(e->d_name, &state);
		if (uid >= (long)first && uid < (long)first + (long)count && state != 'Z') {
			(void)syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
			n++;
		}
		close(pfd);
	}
	closedir(d);
	return n;
}

int srv_uid_sweep(uid_t first, uint32_t count, int64_t timeout_ms, int *left)
{
	int killed = kill_uid_range(first, count), alive = killed;
	int64_t until = mono_ms() + timeout_ms;
	while (alive > 0 && mono_ms() < until) {
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
		alive = kill_uid_range(first, count); /* forks of the dying too */
	}
	*left = alive;
	return killed;
}
