#include "relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int dial(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
		return fd;
	if (fd >= 0)
		close(fd);
	return -1;
}

static void send_503(int c)
{
	static const char body[] =
	    "{\"error\":{\"code\":\"backend_unavailable\",\"message\":\"the backend is "
	    "restarting\",\"retry_hint\":\"retry after Retry-After seconds\"}}";
	char head[256];
	int h = snprintf(
	    head, sizeof head,
	    "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
	    "Content-Length: %zu\r\nConnection: close\r\n\r\n",
	    sizeof body - 1);
	if (write(c, head, (size_t)h) < 0 || write(c, body, sizeof body - 1) < 0)
		return;
}

/* Read the request head (up to the blank line) and answer 503. */
static void answer_503(int c)
{
	char buf[8192];
	size_t n = 0;
	while (n < sizeof buf - 1) {
		struct pollfd p = {.fd = c, .events = POLLIN};
		if (poll(&p, 1, 5000) <= 0)
			break;
		ssize_t k = read(c, buf + n, sizeof buf - 1 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
		buf[n] = '\0';
		if (strstr(buf, "\r\n\r\n"))
			break;
	}
	send_503(c);
}

/* Copy both ways until one side closes, the cut point or stop. lose:
 * the server's answer goes no further; once its head is in (the server
 * has acted), the client gets the 503 instead. */
static void pump(struct relay *r, int c, int s, bool lose)
{
	size_t down = 0;
	char buf[16384], lost[8192];
	size_t nlost = 0;
	while (!atomic_load(&r->stop)) {
		struct pollfd p[2] = {{.fd = c, .events = POLLIN}, {.fd = s, .events = POLLIN}};
		if (poll(p, 2, 100) < 0 && errno != EINTR)
			return;
		for (int i = 0; i < 2; i++) {
			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			size_t cap = sizeof buf;
			if (i == 1 && r->cut_after)
				cap = r->cut_after - down < cap ? r->cut_after - down : cap;
			ssize_t n = read(p[i].fd, buf, cap);
			if (n > 0 && i == 1 && lose) {
				size_t k =
				    (size_t)n < sizeof lost - 1 - nlost ? (size_t)n : sizeof lost - 1 - nlost;
				memcpy(lost + nlost, buf, k);
				lost[nlost += k] = '\0';
				if (strstr(lost, "\r\n\r\n")) {
					send_503(c);
					return;
				}
				continue;
			}
			if (n <= 0 || write(i == 0 ? s : c, buf, (size_t)n) != n)
				return;
			if (i == 0 && r->nupstream < sizeof r->upstream - 1) {
				size_t k = (size_t)n < sizeof r->upstream - 1 - r->nupstream
					       ? (size_t)n
					       : sizeof r->upstream - 1 - r->nupstream;
				memcpy(r->upstream + r->nupstream, buf, k);
				r->nupstream += k;
			}
			if (i == 1 && r->cut_after && (down += (size_t)n) >= r->cut_after) {
				atomic_fetch_add(&r->cuts, 1);
				return;
			}
		}
	}
}

static void *run(void *arg)
{
	struct relay *r = arg;
	while (!atomic_load(&r->stop)) {
		struct pollfd p = {.fd = r->listen_fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		int c = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		int n = atomic_fetch_add(&r->connections, 1);
		if (n < r->answer_503) {
			answer_503(c);
		} else {
			int s = dial(r->target_port);
			if (s >= 0) {
				pump(r, c, s, n < r->answer_503 + r->lose_answers);
				close(s);
			}
		}
		close(c);
	}
	return NULL;
}

int relay_start(struct relay *r, int target_port)
{
	r->target_port = target_port;
	atomic_init(&r->connections, 0);
	atomic_init(&r->cuts, 0);
	atomic_init(&r->stop, false);
	r->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof a;
	if (r->listen_fd < 0 || bind(r->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    listen(r->listen_fd, 16) != 0 || getsockname(r->listen_fd, (struct sockaddr *)&a, &len) != 0)
		return -1;
	r->port = ntohs(a.sin_port);
	snprintf(r->base, sizeof r->base, "http://127.0.0.1:%d", r->port);
	return pthread_create(&r->thread, NULL, run, r) == 0 ? 0 : -1;
}

void relay_stop(struct relay *r)
{
	atomic_store(&r->stop, true);
	pthread_join(r->thread, NULL);
	close(r->listen_fd);
}
