#pragma once
/* What the client suites share: a handle on a harness server, and
 * waiting for a condition with a deadline. */
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "client/sandboxd.h"
#include "harness.h"

static inline int64_t ct_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A handle on base with token; o may add options (base_url and token
 * are set here). Fails the test when it cannot be made. */
static inline struct sbxc *ct_client(const char *base, const char *token, const struct sbxc_opts *o)
{
	struct sbxc_opts opts = o ? *o : (struct sbxc_opts){0};
	opts.base_url = base;
	opts.token = token;
	struct sbxc *h = NULL;
	if (sbxc_new(&h, &opts) != 0)
		return NULL;
	return h;
}
