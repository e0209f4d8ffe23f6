/* The deadline of every blocking SSH exchange (see ssh_impl.h). libssh
 * 0.10 retries an SFTP read forever when its timeout passes, so a peer
 * that stops answering (a stopped sftp-server, a FIFO opened for reading)
 * would hold the calling thread for good: one process-wide thread shuts
 * down the socket of a connection whose deadline passed or whose cancel
 * flag is set; every libssh call on it then fails and the connection is
 * dropped. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <time.h>

#include "common/timeutil.h"
#include "sandbox/ssh_impl.h"

#define TICK_MS 100

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct sbx_ssh_watch *armed;

static bool due(const struct sbx_ssh_watch *w, int64_t now)
{
	return (w->deadline_ms && now >= w->deadline_ms) || (w->cancel && *w->cancel);
}

static void *watch_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		while (!armed)
			pthread_cond_wait(&cv, &mu);
		int64_t now = mono_ms();
		for (struct sbx_ssh_watch *w = armed; w; w = w->next)
			if (!w->fired && w->fd >= 0 && due(w, now)) {
				w->fired = true;
				w->by_cancel = w->cancel && *w->cancel;
				shutdown(w->fd, SHUT_RDWR); /* the blocked call fails now */
			}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += TICK_MS * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&cv, &mu, &ts);
	}
	return NULL;
}

static void start(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_t t;
	if (pthread_create(&t, NULL, watch_main, NULL) == 0)
		pthread_detach(t);
}

void sbx_ssh_watch_arm(struct sbx_ssh_watch *w, int fd, int64_t deadline_ms, const _Atomic bool *cancel)
{
	pthread_once(&once, start);
	pthread_mutex_lock(&mu);
	if (!w->on) {
		w->next = armed;
		armed = w;
		w->on = true;
	}
	w->fd = fd;
	w->deadline_ms = deadline_ms;
	w->cancel = cancel;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

bool sbx_ssh_watch_disarm(struct sbx_ssh_watch *w)
{
	pthread_mutex_lock(&mu);
	if (w->on)
		for (struct sbx_ssh_watch **p = &armed; *p; p = &(*p)->next)
			if (*p == w) {
				*p = w->next;
				break;
			}
	w->on = false;
	bool fired = w->fired;
	pthread_mutex_unlock(&mu);
	return fired;
}

int sbx_ssh_watch_state(struct sbx_ssh_watch *w)
{
	pthread_mutex_lock(&mu);
	int st = !w->fired ? 0 : w->by_cancel ? 2 : 1;
	pthread_mutex_unlock(&mu);
	return st;
}
