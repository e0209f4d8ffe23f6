#pragma once
/* A TCP relay on loopback between a client under test and a sandboxd:
 * one connection at a time (the clients here make them one after the
 * other), with faults a network or a balancer produces for real: cut the
 * connection after so many bytes from the server, answer the first
 * requests itself with a 503 and Retry-After, as a balancer whose backend
 * is restarting does, or pass the first requests on and replace the
 * server's answer with that 503, as a balancer that lost the backend's
 * reply does (the request was acted upon; the client cannot know). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct relay {
	int listen_fd, port, target_port;
	size_t cut_after;	/* server->client bytes per connection before a cut (0: never) */
	int answer_503;		/* connections to answer with 503 before relaying */
	int lose_answers;	/* then connections whose first answer becomes that 503 */
	atomic_int connections; /* accepted so far */
	atomic_int cuts;	/* connections cut by the relay */
	atomic_bool stop;
	pthread_t thread;
	char base[64];	      /* "http://127.0.0.1:PORT" */
	char upstream[65536]; /* the first bytes clients sent (read after relay_stop) */
	size_t nupstream;
};

/* Listen on a free loopback port and relay to target_port; 0 or -1. */
int relay_start(struct relay *r, int target_port);
void relay_stop(struct relay *r);
