#include "server/retention.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "routes/app.h"
#include "routes/tenant_cache.h"
#include "sandbox/fsops.h"
#include "store/store.h"

#define BATCH 500

struct srv_retention {
	struct app *app;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
};

static void forget_spill(void *ctx, const char *tenant, const char *id)
{
	struct app *a = ctx;
	struct tenant *t = NULL;
	if (route_tenant_get(a, tenant, &t) < 0)
		return;
	static const char *const streams[] = {"stdout", "stderr"};
	for (size_t i = 0; i < 2; i++) {
		char rel[160];
		bool removed = false;
		snprintf(rel, sizeof rel, ".sandboxd/spill/%s.%s", id, streams[i]);
		sbx_fs_rm(t->ws, rel, false, true, &removed);
	}
	route_tenant_put(a, &t);
}

static void *loop(void *arg)
{
	struct srv_retention *r = arg;
	const struct sbx_config *cfg = r->app->cfg;
	pthread_mutex_lock(&r->mu);
	while (!r->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += cfg->retention_interval_s;
		pthread_cond_timedwait(&r->cv, &r->mu, &ts);
		if (r->stop)
			break;
		pthread_mutex_unlock(&r->mu);
		int64_t cutoff =
		    cfg->retention_max_age_s > 0 ? now_ms() - cfg->retention_max_age_s * 1000 : 0;
		int64_t deleted = 0;
		int rc = store_prune(r->app->store, cutoff, cfg->retention_max_rows, BATCH, forget_spill,
				     r->app, &deleted);
		if (rc < 0)
			log_msg("warn", "retention: pruning failed (%d); will retry", rc);
		else if (deleted > 0)
			log_msg("info", "retention: removed %lld old rows", (long long)deleted);
		pthread_mutex_lock(&r->mu);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int srv_retention_start(struct srv_retention **out, struct app *a)
{
	*out = NULL;
	if (a->cfg->retention_max_age_s <= 0 && a->cfg->retention_max_rows <= 0)
		return 0; /* keep everything: no thread */
	struct srv_retention *r = xcalloc(1, sizeof *r);
	r->app = a;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	if (pthread_create(&r->thread, NULL, loop, r) != 0) {
		pthread_mutex_destroy(&r->mu);
		pthread_cond_destroy(&r->cv);
		free(r);
		return -EAGAIN;
	}
	*out = r;
	return 0;
}

void srv_retention_stop(struct srv_retention **rp)
{
	struct srv_retention *r = *rp;
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = true;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	pthread_join(r->thread, NULL);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r);
	*rp = NULL;
}
