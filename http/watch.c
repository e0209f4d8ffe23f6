#include "http/watch.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/xmalloc.h"

struct entry {
	int64_t handle;
	int fd;
	http_watch_cb cb;
	void *ctx;
	struct entry *next;
};

struct http_watch {
	pthread_t thread;
	pthread_mutex_t lock; /* held while a callback runs, so remove can wait it out */
	int ep, stopfd;
	int64_t next_handle;
	struct entry *entries;
	bool stop;
};

static struct entry *unlink_entry(struct http_watch *w, int64_t handle)
{
	for (struct entry **p = &w->entries; *p; p = &(*p)->next)
		if ((*p)->handle == handle) {
			struct entry *e = *p;
			*p = e->next;
			return e;
		}
	return NULL;
}

static void *loop(void *arg)
{
	struct http_watch *w = arg;
	struct epoll_event evs[64];
	for (;;) {
		int n = epoll_wait(w->ep, evs, 64, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			abort(); /* only EBADF/EFAULT/EINVAL: a bug (as in the runner) */
		pthread_mutex_lock(&w->lock);
		if (w->stop) {
			pthread_mutex_unlock(&w->lock);
			return NULL;
		}
		for (int i = 0; i < n; i++) {
			int64_t handle = (int64_t)evs[i].data.u64;
			if (handle == 0)
				continue; /* the stop eventfd */
			struct entry *e = unlink_entry(w, handle);
			if (!e)
				continue;
			epoll_ctl(w->ep, EPOLL_CTL_DEL, e->fd, NULL);
			e->cb(e->ctx);
			free(e);
		}
		pthread_mutex_unlock(&w->lock);
	}
}

int http_watch_new(struct http_watch **out)
{
	struct http_watch *w = xcalloc(1, sizeof *w);
	int rc = 0;
	pthread_mutex_init(&w->lock, NULL);
	w->next_handle = 1;
	w->ep = epoll_create1(EPOLL_CLOEXEC);
	if (w->ep < 0)
		rc = -errno;
	w->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!rc && w->stopfd < 0)
		rc = -errno;
	if (rc)
		goto fail;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, w->stopfd, &ev) < 0) {
		rc = -errno;
		goto fail;
	}
	rc = -pthread_create(&w->thread, NULL, loop, w); /* returns the error, sets no errno */
	if (rc)
		goto fail;
	*out = w;
	return 0;
fail:
	if (w->ep >= 0)
		close(w->ep);
	if (w->stopfd >= 0)
		close(w->stopfd);
	pthread_mutex_destroy(&w->lock);
	free(w);
	return rc;
}

void http_watch_free(struct http_watch **wp)
{
	struct http_watch *w = *wp;
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_mutex_unlock(&w->lock);
	uint64_t one = 1;
	ssize_t n = write(w->stopfd, &one, sizeof one);
	(void)n;
	pthread_join(w->thread, NULL);
	while (w->entries) {
		struct entry *e = w->entries;
		w->entries = e->next;
		free(e);
	}
	close(w->ep);
	close(w->stopfd);
	pthread_mutex_destroy(&w->lock);
	free(w);
	*wp = NULL;
}

int64_t http_watch_add(struct http_watch *w, int fd, http_watch_cb cb, void *ctx)
{
	struct entry *e = xcalloc(1, sizeof *e);
	e->fd = fd;
	e->cb = cb;
	e->ctx = ctx;
	pthread_mutex_lock(&w->lock);
	e->handle = w->next_handle++;
	struct epoll_event ev = {.events = EPOLLRDHUP, .data.u64 = (uint64_t)e->handle};
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int err = errno;
		pthread_mutex_unlock(&w->lock);
		free(e);
		return -err;
	}
	e->next = w->entries;
	w->entries = e;
	int64_t handle = e->handle; /* once unlocked, a hang-up may fire and free e */
	pthread_mutex_unlock(&w->lock);
	return handle;
}

void http_watch_remove(struct http_watch *w, int64_t handle)
{
	if (handle <= 0)
		return;
	pthread_mutex_lock(&w->lock);
	struct entry *e = unlink_entry(w, handle);
	if (e) {
		epoll_ctl(w->ep, EPOLL_CTL_DEL, e->fd, NULL);
		free(e);
	}
	pthread_mutex_unlock(&w->lock);
}
