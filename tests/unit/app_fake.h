#pragma once
/* What the routes' unit tests start from: a struct app with nothing in
 * it but the default configuration (common/config.h's defaults,
 * finished), which the test then fills with what it needs (a store,
 * metrics, tenants...). Header-only (static inline): each test
 * executable stays one .c file. */
#include <string.h>

#include "common/config.h"
#include "routes/app.h"

/* cfg's defaults, and a zeroed a that reads cfg. cfg_free(cfg) at the end. */
static inline void app_fake_init(struct app *a, struct sbx_config *cfg)
{
	cfg_defaults(cfg);
	cfg_finish(cfg);
	memset(a, 0, sizeof *a);
	a->cfg = cfg;
}
