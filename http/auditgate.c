#include "http/auditgate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "auth/auth.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"

#define SLOTS 4096 /* power of two */
#define STRIPES 64
#define MAX_GAP_MS 10000000 /* past this any bucket is full: keeps the refill product small */

struct slot {
	uint64_t key;  /* 0: empty */
	int64_t milli; /* tokens, in thousandths */
	int64_t last_ms;
};

struct http_audit_gate {
	int64_t rate, burst;
	uint64_t seed; /* random: which addresses share a slot is not predictable */
	pthread_mutex_t mu[STRIPES];
	struct slot slots[SLOTS];
};

void http_audit_gate_new(struct http_audit_gate **out, int64_t rate_per_s, int64_t burst)
{
	struct http_audit_gate *g = xcalloc(1, sizeof *g);
	g->rate = rate_per_s;
	g->burst = burst;
	if (auth_random(&g->seed, sizeof g->seed) < 0)
		g->seed = (uint64_t)mono_ns();
	for (size_t i = 0; i < STRIPES; i++)
		pthread_mutex_init(&g->mu[i], NULL);
	*out = g;
}

void http_audit_gate_free(struct http_audit_gate **gp)
{
	struct http_audit_gate *g = *gp;
	if (!g)
		return;
	for (size_t i = 0; i < STRIPES; i++)
		pthread_mutex_destroy(&g->mu[i]);
	free(g);
	*gp = NULL;
}

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A nonzero key for the address: IPv4, or the /64 of IPv6. */
static uint64_t key_of(const struct http_audit_gate *g, const char *client)
{
	unsigned char a[16];
	const unsigned char *p = (const unsigned char *)client;
	size_t n = strlen(client);
	uint64_t h = 0xcbf29ce484222325ULL ^ g->seed;
	if (inet_pton(AF_INET6, client, a) == 1) {
		bool v4 = IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)a);
		p = v4 ? a + 12 : a;
		n = v4 ? 4 : 8;
	} else if (inet_pton(AF_INET, client, a) == 1) {
		p = a;
		n = 4;
	}
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	h = mix(h);
	return h ? h : 1;
}

bool http_audit_gate_take(struct http_audit_gate *g, const char *client, int64_t now_ms)
{
	uint64_t k = key_of(g, client ? client : "");
	size_t i = (size_t)(k & (SLOTS - 1));
	struct slot *s = &g->slots[i];
	int64_t cap = g->burst * 1000;
	pthread_mutex_t *m = &g->mu[i % STRIPES];

	pthread_mutex_lock(m);
	if (s->key != k) {
		s->key = k;
		s->milli = cap;
		s->last_ms = now_ms;
	} else if (now_ms > s->last_ms) {
		int64_t gap = now_ms - s->last_ms;
		if (gap > MAX_GAP_MS)
			gap = MAX_GAP_MS;
		s->milli += gap * g->rate; /* rate per second = thousandths per ms */
		if (s->milli > cap)
			s->milli = cap;
		s->last_ms = now_ms;
	}
	bool ok = s->milli >= 1000;
	if (ok)
		s->milli -= 1000;
	pthread_mutex_unlock(m);
	return ok;
}
