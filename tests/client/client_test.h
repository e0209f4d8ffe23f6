#pragma once
/* What the client suites share: a handle on a harness server, waiting
 * for a condition with a deadline, and an exec run on a thread of its
 * own (to cancel it from this one). Include cmocka.h first. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/sandboxd.h"
#include "common/buf.h"
#include "harness.h"

static inline int64_t ct_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Defines setup() and teardown(), the group fixture of a client suite:
 * libcurl initialised and server s started with extra (a NULL-terminated
 * array of arguments, or NULL) and the tokens of the table toks minted
 * before the first test; all of it undone after the last. */
#define CT_SERVER_FIXTURE(s, extra, toks)                                                                    \
	static int setup(void **state)                                                                       \
	{                                                                                                    \
		(void)state;                                                                                 \
		curl_global_init(CURL_GLOBAL_ALL);                                                           \
		return it_start_minted(&(s), (extra), (toks), IT_NTOKS(toks));                               \
	}                                                                                                    \
	static int teardown(void **state)                                                                    \
	{                                                                                                    \
		(void)state;                                                                                 \
		it_free_all((toks), IT_NTOKS(toks));                                                         \
		it_cleanup(&(s));                                                                            \
		curl_global_cleanup();                                                                       \
		return 0;                                                                                    \
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

/* An upload's body from a string (sbxc_source_fn): arg is a const char **
 * moved along as it is read. */
static inline ssize_t ct_text_source(void *arg, void *buf, size_t cap)
{
	const char **p = arg;
	size_t n = strlen(*p) < cap ? strlen(*p) : cap;
	memcpy(buf, *p, n);
	*p += n;
	return (ssize_t)n;
}

/* A download into a struct buf (sbxc_sink_fn). */
static inline int ct_buf_sink(void *arg, const void *data, size_t len)
{
	return buf_append(arg, data, len) < 0 ? -1 : 0;
}

/* read_file_stream of path from offset must deliver want, no more. */
static inline void ct_expect_stream(struct sbxc *h, const struct sbxc_call *c, const char *path,
				    uint64_t offset, const char *want)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	uint64_t total = 0;
	struct sbxc_err e;
	assert_int_equal(sbxc_read_file_stream(h, c, path, offset, ct_buf_sink, &b, &total, &e), 0);
	assert_int_equal(total, strlen(want));
	assert_string_equal(buf_cstr(&b), want);
	buf_free(&b);
}

/* An exec's output as it arrives (sbxc_output_fn) and its id
 * (sbxc_started_fn), for the thread that waits on it. */
struct ct_collected {
	pthread_mutex_t lock;
	char out[4096], err[4096], id[72];
	size_t nout, nerr;
};

static inline int ct_collect(void *arg, int stream, const char *data, size_t len)
{
	struct ct_collected *k = arg;
	pthread_mutex_lock(&k->lock);
	char *dst = stream == 2 ? k->err : k->out;
	size_t *n = stream == 2 ? &k->nerr : &k->nout;
	if (*n + len < sizeof k->out) {
		memcpy(dst + *n, data, len);
		*n += len;
		dst[*n] = '\0';
	}
	pthread_mutex_unlock(&k->lock);
	return 0;
}

static inline void ct_started(void *arg, const char *id)
{
	struct ct_collected *k = arg;
	pthread_mutex_lock(&k->lock);
	snprintf(k->id, sizeof k->id, "%s", id);
	pthread_mutex_unlock(&k->lock);
}

/* sbxc_exec of req on h with call, as a pthread start routine (streamed:
 * with ct_collect into k); rc, res and err are its outcome. */
struct ct_exec_thread {
	struct sbxc *h;
	struct sbxc_call call;
	struct sbxc_exec_req req;
	struct ct_collected k;
	struct sbxc_result res;
	struct sbxc_err err;
	int rc;
	bool streamed;
};

static inline void *ct_exec_main(void *arg)
{
	struct ct_exec_thread *t = arg;
	t->rc = sbxc_exec(t->h, &t->call, &t->req, t->streamed ? ct_collect : NULL, ct_started, &t->k,
			  &t->res, &t->err);
	return NULL;
}

/* The exec's state, polled until it is not running (deadline 20 s),
 * must be want. */
static inline void ct_wait_state(struct sbxc *h, const char *id, const char *want)
{
	struct sbxc_exec_info x = {0};
	int64_t end = ct_now_ms() + 20000;
	for (;;) {
		int rc = sbxc_exec_get(h, NULL, id, &x, NULL);
		bool done = rc == 0 && strcmp(x.state, "running") != 0;
		if (done) {
			assert_string_equal(x.state, want);
			sbxc_exec_info_clear(&x);
			return;
		}
		sbxc_exec_info_clear(&x);
		assert_true(ct_now_ms() < end);
		usleep(20000);
	}
}

/* Polls until the exec is running (deadline 20 s). */
static inline void ct_wait_running(struct sbxc *h, const char *id)
{
	int64_t end = ct_now_ms() + 20000;
	for (;;) {
		struct sbxc_exec_info x = {0};
		bool running = sbxc_exec_get(h, NULL, id, &x, NULL) == 0 && strcmp(x.state, "running") == 0;
		sbxc_exec_info_clear(&x);
		if (running)
			return;
		assert_true(ct_now_ms() < end);
		usleep(20000);
	}
}
