/* spawnceil: the in-process spawn ceiling of performance.md: THREADS
 * threads (default 2) each posix_spawn `sh -c true` and wait for it, in a
 * loop, for SECONDS. Prints spawns=N secs=S rate=R/s.
 *   spawnceil [-t THREADS] [-d SECONDS] */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static double deadline;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
	long *count = arg;
	char *argv[] = {"sh", "-c", "true", NULL};

	while (now() < deadline) {
		pid_t pid;
		int st;

		if (posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ) != 0)
			continue;
		while (waitpid(pid, &st, 0) < 0)
			;
		(*count)++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = 2, o;
	double secs = 5;

	while ((o = getopt(argc, argv, "t:d:")) != -1) {
		char *end = NULL;
		errno = 0;
		if (o == 't') {
			long t = strtol(optarg, &end, 10);
			threads = t >= 1 && t <= 256 ? (int)t : 0;
		} else if (o == 'd')
			secs = strtod(optarg, &end);
		if (!end || end == optarg || *end || errno)
			return 2;
	}
	if (threads < 1 || threads > 256 || secs <= 0 || secs > 3600)
		return 2;
	pthread_t th[256];
	long counts[256] = {0}, total = 0;
	double t0 = now();
	deadline = t0 + secs;
	for (int i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, worker, &counts[i]);
	for (int i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		total += counts[i];
	}
	double el = now() - t0;
	printf("spawns=%ld secs=%.3f rate=%.1f\n", total, el, total / el);
	return 0;
}
