/* The floor of the exec registry (routes/exec_registry_int.h): a job's
 * references and its lookup, and the helpers every floor above uses. It
 * includes no other file of the registry but the internal header, and
 * calls nothing above it. */
#include "routes/exec_registry_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/timeutil.h"
#include "routes/app.h"
#include "routes/tenant_cache.h"
#include "sandbox/changes.h"
#include "sandbox/rootimg.h"

static void pending_free(struct pending *p)
{
	if (!p)
		return;
	free(p->command);
	free(p->cwd_rel);
	free(p->net_allow);
	free(p->net_tenant);
	free(p->net_sub);
	free(p->rootfs);
	sbx_rootimg_close(&p->run.rootimg);
	for (char **v = p->env; v && *v; v++)
		free(*v);
	free(p->env);
	free(p->stdin_data);
	free(p);
}

void xr_job_put_locked(struct exec_job *j)
{
	if (--j->refs > 0)
		return;
	route_tenant_put(j->app, &j->tenant);
	sbx_snapshot_free(&j->before);
	pthread_mutex_destroy(&j->pmu);
	free(j->session);
	pending_free(j->pend);
	free(j->requested_by);
	free(j->reason);
	free(j);
}

/* life: the tenant's life whose exec it must be (0: any life of the
 * name, for callers that found its row in the store first). */
struct exec_job *xr_find_locked(struct route_execs *e, const char *tenant, int64_t life, const char *id)
{
	for (struct exec_job *j = e->jobs; j; j = j->next)
		if (strcmp(j->id, id) == 0 && strcmp(j->tenant->name, tenant) == 0 &&
		    (!life || j->tenant->incarnation == life))
			return j;
	return NULL;
}

json_t *xr_time_json(int64_t ms)
{
	char t[40];
	rfc3339_ms(ms, t, sizeof t);
	return json_string(t);
}
