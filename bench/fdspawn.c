/* fdspawn: time the bare bwrap line of `sandboxd debug bwrap-argv DIR ...`
 * (bench/p2-exec-bwrap.sh): RUNS times, posix_spawn DIR/path with the
 * NUL-separated DIR/argv, in a new session, with an empty environment,
 * each DIR/fd-N opened afresh on fd N in the child (bwrap reads those fds
 * from their offset, so every run needs its own open file description, as
 * the server gives it), and wait for it. With -u/-g it first drops to that
 * uid:gid (no supplementary groups), as the server's child does. Prints
 * runs=N median_ms=M mean_ms=A min_ms=L; fails if any run exits non-zero.
 *   fdspawn [-n RUNS] [-w WARMUP] [-u UID -g GID] DIR */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_FDS 64

static char *slurp(const char *dir, const char *name, size_t *len)
{
	char path[4096];
	FILE *f;
	char *buf;
	long n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (!f || fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0) {
		perror(path);
		exit(2);
	}
	buf = calloc(1, (size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		perror(path);
		exit(2);
	}
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static long num(const char *s)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > 0x7fffffffL) {
		fprintf(stderr, "fdspawn: bad number %s\n", s);
		exit(2);
	}
	return v;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int runs = 100, warm = 10, c, i, nargs = 0;
	long uid = -1, gid = -1;
	char *path, *args, *p, *av[4096], *envp[] = {NULL}, fdpath[MAX_FDS][4200];
	size_t len, plen;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;

	while ((c = getopt(argc, argv, "n:w:u:g:")) != -1) {
		switch (c) {
		case 'n':
			runs = (int)num(optarg);
			break;
		case 'w':
			warm = (int)num(optarg);
			break;
		case 'u':
			uid = num(optarg);
			break;
		case 'g':
			gid = num(optarg);
			break;
		default:
			return 2;
		}
	}
	if (optind != argc - 1 || runs < 1 || warm < 0) {
		fprintf(stderr, "usage: fdspawn [-n RUNS] [-w WARMUP] [-u UID -g GID] DIR\n");
		return 2;
	}
	path = slurp(argv[optind], "path", &plen);
	args = slurp(argv[optind], "argv", &len);
	for (p = args; p < args + len && nargs < 4095; p += strlen(p) + 1)
		av[nargs++] = p;
	av[nargs] = NULL;
	posix_spawn_file_actions_init(&fa);
	for (i = 3; i < MAX_FDS; i++) {
		snprintf(fdpath[i], sizeof(fdpath[i]), "%s/fd-%d", argv[optind], i);
		if (access(fdpath[i], R_OK) == 0)
			posix_spawn_file_actions_addopen(&fa, i, fdpath[i], O_RDONLY, 0);
	}
	posix_spawnattr_init(&at);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
	if (gid >= 0 && (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0)) {
		perror("setresgid");
		return 2;
	}
	if (uid >= 0 && setresuid(uid, uid, uid) < 0) {
		perror("setresuid");
		return 2;
	}
	double *t = calloc((size_t)runs, sizeof(double)), sum = 0;
	for (i = -warm; i < runs; i++) {
		double t0 = now_ms();
		pid_t pid;
		int st, rc = posix_spawn(&pid, path, &fa, &at, av, envp);

		if (rc != 0) {
			fprintf(stderr, "posix_spawn %s: %s\n", path, strerror(rc));
			return 1;
		}
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "run %d: %s exited with status %#x\n", i, path, st);
			return 1;
		}
		if (i >= 0) {
			t[i] = now_ms() - t0;
			sum += t[i];
		}
	}
	qsort(t, (size_t)runs, sizeof(double), cmp);
	printf("runs=%d median_ms=%.3f mean_ms=%.3f min_ms=%.3f\n", runs,
	       runs % 2 ? t[runs / 2] : (t[runs / 2 - 1] + t[runs / 2]) / 2, sum / runs, t[0]);
	return 0;
}
