/* The log's writer (common/log.h): with stderr a file, lines of many
 * threads at once all arrive, whole, once each, each thread's in its
 * order; a line longer than the buffer too; a forked child's line is
 * written at once, without the writer; log_flush returns with every line
 * before it in the file; and nothing is lost across a stop and restart. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"

#define THREADS 8
#define LINES 20000

static char path[] = "/tmp/sandboxd-test-log-XXXXXX";
static int saved_stderr = -1;

/* stderr becomes a fresh temporary file. */
static int to_file(void **state)
{
	(void)state;
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	saved_stderr = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	close(fd);
	return 0;
}

static int back(void **state)
{
	(void)state;
	dup2(saved_stderr, STDERR_FILENO);
	close(saved_stderr);
	unlink(path);
	return 0;
}

static char *slurp(size_t *n)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	fstat(fd, &st);
	char *b = malloc((size_t)st.st_size + 1);
	size_t got = 0;
	ssize_t r;
	while (got < (size_t)st.st_size && (r = read(fd, b + got, (size_t)st.st_size - got)) > 0)
		got += (size_t)r;
	close(fd);
	b[got] = 0;
	*n = got;
	return b;
}

static void *lines_of(void *arg)
{
	int t = (int)(intptr_t)arg;
	char line[128];
	for (int i = 0; i < LINES; i++) {
		int n = snprintf(line, sizeof line, "{\"t\":%d,\"i\":%d,\"pad\":\"%.*s\"}", t, i, i % 60,
				 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
		log_line_write(line, (size_t)n);
	}
	return NULL;
}

static void every_line_once_in_order(void **state)
{
	(void)state;
	log_writer_start();
	pthread_t th[THREADS];
	for (int t = 0; t < THREADS; t++)
		pthread_create(&th[t], NULL, lines_of, (void *)(intptr_t)t);
	/* one line far longer than the writer's buffer, meanwhile */
	size_t big = 600 * 1024;
	char *b = malloc(big);
	memset(b, 'B', big);
	log_line_write(b, big);
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	log_flush();
	/* flushed: all of them are in the file before the stop */
	size_t n;
	char *text = slurp(&n);
	log_writer_stop();

	int next[THREADS] = {0};
	int bigs = 0;
	for (char *line = text, *end; *line; line = end + 1) {
		end = strchr(line, '\n');
		assert_non_null(end); /* every line ends */
		*end = 0;
		if (line[0] == 'B') {
			assert_int_equal((size_t)(end - line), big);
			bigs++;
			continue;
		}
		int t = -1, i = -1;
		assert_int_equal(sscanf(line, "{\"t\":%d,\"i\":%d,", &t, &i), 2);
		assert_true(t >= 0 && t < THREADS);
		assert_int_equal(i, next[t]); /* in order, none twice, none missing */
		next[t]++;
	}
	for (int t = 0; t < THREADS; t++)
		assert_int_equal(next[t], LINES);
	assert_int_equal(bigs, 1);
	free(text);
	free(b);
}

/* A child forked while the writer runs writes its own line at once. */
static void child_writes_directly(void **state)
{
	(void)state;
	assert_int_equal(ftruncate(STDERR_FILENO, 0), 0);
	lseek(STDERR_FILENO, 0, SEEK_SET);
	log_writer_start();
	pid_t pid = fork();
	if (pid == 0) {
		log_line_write("child", 5);
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	size_t n;
	char *text = slurp(&n);
	assert_string_equal(text, "child\n");
	free(text);
	log_line_write("parent", 6);
	log_writer_stop();
	text = slurp(&n);
	assert_string_equal(text, "child\nparent\n");
	free(text);
	/* stopped: written directly */
	log_line_write("after", 5);
	text = slurp(&n);
	assert_string_equal(text, "child\nparent\nafter\n");
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(every_line_once_in_order),
	    cmocka_unit_test(child_writes_directly),
	};
	return cmocka_run_group_tests(tests, to_file, back);
}
