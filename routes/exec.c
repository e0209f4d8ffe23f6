/* POST /exec, GET /exec/{id}, POST /exec/{id}/cancel, GET /execs, and
 * approve/reject.
 *
 * Each handler parses and checks its request; a POST /exec then starts
 * the command through routes/exec_registry.c on the tenant's provider
 * (routes/provider.h), which suspends the connection and answers it at
 * the exit (the first request, and idempotent retries with the same id).
 * A client that hangs up while its command runs cancels it (http/watch.c
 * notices). */
#include "routes/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth/auth.h"
#include "common/errors.h"
#include "common/timeutil.h"
#include "common/xmalloc.h"
#include "routes/admit.h"
#include "routes/app.h"
#include "routes/paths.h"
#include "routes/tenant_cache.h"
#include "routes/code.h"
#include "routes/exec_extras.h"
#include "http/fields.h"
#include "http/errors.h"
#include "routes/exec_registry.h"
#include "routes/exec_row.h"
#include "routes/fs.h"
#include "routes/policy.h"
#include "routes/images.h"
#include "routes/provider.h"
#include "routes/routes.h"
#include "routes/storage.h"
#include "sandbox/backend.h"
#include "sandbox/cgroup.h"
#include "sandbox/rootimg.h"
#include "sandbox/runner.h"
#include "sandbox/workspace.h"
#include "store/store.h"

#define ENV_MAX 256

/* What every command runs with, from the configuration, once; the
 * backend and the limits of the tenant's policy replace these per command. */
void route_exec_init(struct app *a)
{
	const struct sbx_config *cfg = a->cfg;
	const struct sbx_exec_req base = {
	    .backend = a->backend,
	    .spawn =
		{
		    .drop_privs = a->drop_privs,
		    .limits = {.mem_bytes = (uint64_t)cfg->mem_limit_bytes,
			       .nproc = (uint64_t)cfg->nproc_limit,
			       .fsize_bytes = (uint64_t)cfg->fsize_limit_bytes,
			       .nofile = (uint64_t)cfg->nofile_limit,
			       .tmp_bytes = (uint64_t)cfg->tmp_size_bytes,
			       .tenant_mem_bytes = (uint64_t)cfg->tenant_mem_budget_bytes,
			       .tenant_nproc = (uint64_t)cfg->tenant_nproc_budget,
			       .tenant_cpu_millicores = (uint64_t)cfg->tenant_cpu_budget_millicores},
		},
	    .kill_grace_ms = (uint64_t)cfg->exec_kill_grace_ms,
	    .spill_cap = (uint64_t)cfg->spill_cap_bytes,
	    .heartbeat_ms = (uint64_t)cfg->heartbeat_ms,
	};
	route_execs_new(&a->execs, a, &base);
	route_jobs_new(&a->jobs);
}

/* Remote commands (cancelled when stopping) report their exits first. */
void route_exec_drain(struct app *a)
{
	if (a->stopping)
		route_jobs_free(&a->jobs);
	route_execs_flush(a->execs);
}

void route_exec_fini(struct app *a)
{
	route_jobs_free(&a->jobs);
	route_execs_free(&a->execs);
}

static bool id_ok(const char *id, size_t n)
{
	if (n < 1 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}

static bool env_name_ok(const char *k)
{
	if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_'))
		return false;
	for (const char *p = k + 1; *p; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		      *p == '_'))
			return false;
	return strlen(k) <= 256;
}

static void sha256_hex(const char *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned int len = 0;
	EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
	for (size_t i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* A POST /exec as parsed and checked. */
struct exec_request {
	const char *command, *cwd, *stdin_data, *id, *image;
	size_t command_len, cwd_len, stdin_len, id_len, image_len;
	json_t *env;
	int64_t timeout_s, idle_timeout_s, max_output;
	bool stream, network, wait, timeout_given, output_given;
	struct route_exec_extras x; /* track_changes, background, stdin_pipe, tty (routes/exec_extras.h) */
	/* Derived by the steps below; freed by request_clear. */
	struct route_policy policy; /* the tenant's, read at this request */
	struct sbx_backend *backend;
	char *policy_text;
	const char *envv[ENV_MAX + 1];
	char *envbuf[ENV_MAX];
	size_t nenv;
	json_t *env_sorted;
	char cwd_rel[SBX_PATH_MAX];
	char cwd_wire[SBX_PATH_MAX + 16];
	char hash[65];
	char idbuf[72];
	struct sbx_rootimg_ref *img; /* the root image it runs on (routes/images.h) */
	char img_name[64];
};

static void request_clear(struct exec_request *q)
{
	for (size_t i = 0; i < q->nenv; i++)
		free(q->envbuf[i]);
	json_decref(q->env_sorted);
	route_policy_clear(&q->policy);
	free(q->policy_text);
	sbx_rootimg_close(&q->img);
}

/* Parse: the body's fields. */
static int parse_fields(struct http_req *r, struct exec_request *q)
{
	const struct http_field f[] = {
	    {"command", F_STRING, true, &q->command, &q->command_len, 0, 0, NULL},
	    {"cwd", F_STRING, false, &q->cwd, &q->cwd_len, 0, 0, NULL},
	    {"env", F_OBJECT, false, &q->env, NULL, 0, 0, NULL},
	    {"timeout_s", F_INT, false, &q->timeout_s, NULL, 1, 604800, &q->timeout_given},
	    {"idle_timeout_s", F_INT, false, &q->idle_timeout_s, NULL, 1, 604800, NULL},
	    {"stdin", F_STRING, false, &q->stdin_data, &q->stdin_len, 0, 0, NULL},
	    {"max_output_bytes", F_INT, false, &q->max_output, NULL, 256, INT64_MAX, &q->output_given},
	    {"id", F_STRING, false, &q->id, &q->id_len, 0, 0, NULL},
	    {"stream", F_BOOL, false, &q->stream, NULL, 0, 0, NULL},
	    ROUTE_EXEC_EXTRA_FIELDS(q->x),
	    {"network", F_BOOL, false, &q->network, NULL, 0, 0, NULL},
	    {"wait", F_BOOL, false, &q->wait, NULL, 0, 0, NULL},
	    {"image", F_STRING, false, &q->image, &q->image_len, 0, 0, NULL},
	};
	int rc = http_fields_read(r, r->json, f, sizeof f / sizeof f[0]);
	if (rc < 0)
		return rc;
	if (q->command_len == 0 || memchr(q->command, '\0', q->command_len))
		return http_fail(r, -EINVAL, "command must be a non-empty string without NUL bytes");
	if (q->command_len > ROUTE_EXEC_COMMAND_MAX) {
		/* One argument of sh -c: the kernel would refuse it at execve.
		 * Refused before anything is stored; the audit keeps its head. */
		http_set_target(r, q->command);
		return http_fail(
		    r, -EINVAL,
		    "command is %zu bytes; at most %d can run (the kernel's MAX_ARG_STRLEN): put a "
		    "longer script in a file and run that",
		    q->command_len, ROUTE_EXEC_COMMAND_MAX);
	}
	if (q->image && (q->image_len > 63 || strlen(q->image) != q->image_len))
		return http_fail(r, -EINVAL, "image must match [a-z0-9][a-z0-9._-]{0,62} (or be none)");
	if (q->id && !id_ok(q->id, q->id_len))
		return http_fail(r, -EINVAL, "id must match [A-Za-z0-9_-]{1,64}");
	if ((rc = route_exec_extras_check(r, &q->x, q->stream)) < 0)
		return rc;
	return 0;
}

/* A provider whose commands run elsewhere (routes/provider.h; a remote
 * tenant's run on the back server under its policy): the fields only
 * this server's backends give are refused, here alone. */
static int elsewhere_checks(struct http_req *r, struct exec_request *q)
{
	const struct route_provider_ops *ops = r->tenant->provider->ops;
	const char *what = q->image		? "image"
			   : q->x.track_changes ? "track_changes"
			   : q->x.stdin_pipe	? "stdin_pipe"
			   : q->x.tty		? "tty"
			   : q->network		? "network"
						: NULL;
	if (what)
		return http_fail(r, -SBX_E_FORBIDDEN,
				 "%s is not available for tenant %s: its commands run %s", what,
				 r->tenant->name, ops->where);
	q->backend = r->app->backend; /* not used: the job runs on the back */
	if (!ops->check)
		return 0;
	struct route_call c;
	route_call_init(&c, r);
	int rc = ops->check(&c);
	return rc < 0 ? route_call_fail(r, &c, rc, "run in", r->session_rel) : 0;
}

/* The tenant's I/O budget binds its disk image's loop device (cgroup
 * io.max on its group): without the image, cgroups or an io controller it
 * cannot be applied, and the command does not run (503 naming the budget
 * and what is missing), never runs unthrottled. */
static int io_check(struct http_req *r, const struct route_policy *p, const struct sbx_backend *b)
{
	const char *io = route_policy_io_budget(p);
	const struct sbx_cgroup_caps *caps = sbx_cgroup_caps();
	char why[256];
	if (!io)
		return 0;
	if (r->app->disk_mode != DISK_IMAGE || !r->tenant->io_dev)
		snprintf(why, sizeof why, "I/O budgets need disk images (disk-quota=image), and %s",
			 r->app->disk_mode == DISK_IMAGE ? "the tenant's image is not attached"
							 : "this server has none");
	else if (!sbx_backend_contained(b))
		snprintf(why, sizeof why, "backend %s runs commands without cgroups", p->backend);
	else if (!caps->io)
		snprintf(why, sizeof why,
			 "the host's cgroups have no io controller (driver cgroup v%d%s; io.max needs "
			 "cgroup v2 with io enabled for the server's subtree)",
			 caps->version, caps->version == 1 ? ": no blkio hierarchy is used" : "");
	else
		return 0;
	r->retry_after_s = 60; /* the operator's to change, as a backend not offered */
	return http_fail(r, -SBX_E_BACKEND, "the tenant's %s cannot be applied: %s", io, why);
}

/* Check: the tenant's policy, read now (a change applies to the next
 * command): its caps clamp timeout_s and max_output_bytes (and their
 * defaults), its backend must be offered here, and network: true needs
 * an allowlist. */
static int apply_policy(struct http_req *r, struct exec_request *q)
{
	struct app *a = r->app;
	int rc = route_policy_load(a->store, a->cfg, r->tenant->name, &q->policy, NULL, NULL);
	if (rc < 0)
		return http_fail(r, rc == -ENOENT ? -SBX_E_STORE : rc,
				 rc == -SBX_E_BACKEND
				     ? "the tenant's stored policy cannot be applied (the "
				       "operator must fix it; the reason is in the server log)"
				     : "cannot read the tenant's policy");
	const struct route_policy *p = &q->policy;
	if (!q->timeout_given)
		q->timeout_s = a->cfg->exec_timeout_default_s;
	if (!q->output_given)
		q->max_output = a->cfg->max_output_bytes_default;
	/* Caps: a larger ask is clamped, not refused. */
	if (q->timeout_s > p->timeout_max_s)
		q->timeout_s = p->timeout_max_s;
	if (q->max_output > p->max_output_bytes_cap)
		q->max_output = p->max_output_bytes_cap;
	if (q->network && !p->network)
		return http_fail(
		    r, -SBX_E_FORBIDDEN,
		    "network: true needs an egress allowlist in the tenant's policy (network is none)");
	json_t *pj = route_policy_json(p);
	q->policy_text = json_dumps(pj, JSON_COMPACT);
	json_decref(pj);
	if (!(r->tenant->provider->ops->caps & ROUTE_CAN_RUN_HERE))
		return elsewhere_checks(r, q);
	q->backend = route_backend_find(a, p->backend);
	if (!q->backend) {
		r->retry_after_s = 60;
		return http_fail(r, -SBX_E_BACKEND, "the tenant's backend %s is not offered by this server",
				 p->backend);
	}
	return io_check(r, p, q->backend);
}

/* Parse: the environment, as NAME=value strings and as a sorted object
 * for the idempotency key. */
static int parse_env(struct http_req *r, struct exec_request *q)
{
	const char *k;
	json_t *v;
	if (q->env) {
		json_object_foreach(q->env, k, v) {
			if (q->nenv == ENV_MAX)
				return http_fail(r, -EINVAL, "at most %d environment variables", ENV_MAX);
			if (!env_name_ok(k))
				return http_fail(r, -EINVAL,
						 "env name \"%s\" must match [A-Za-z_][A-Za-z0-9_]*", k);
			if (!json_is_string(v) || memchr(json_string_value(v), '\0', json_string_length(v)))
				return http_fail(r, -EINVAL,
						 "env value of %s must be a string without NUL bytes", k);
			q->envbuf[q->nenv] = xasprintf("%s=%s", k, json_string_value(v));
			q->envv[q->nenv] = q->envbuf[q->nenv];
			q->nenv++;
			json_object_set(q->env_sorted, k, v);
		}
	}
	q->envv[q->nenv] = NULL;
	return 0;
}

static int parse_request(struct http_req *r, struct exec_request *q)
{
	*q = (struct exec_request){.wait = true};
	q->env_sorted = json_object();
	int rc = parse_fields(r, q);
	if (rc == 0)
		rc = parse_env(r, q);
	return rc < 0 ? rc : apply_policy(r, q);
}

/* Check: the session (made here if it is new: a visible step) and the
 * cwd, once, where the provider keeps the files (routes/local.c: beneath
 * the workspace fd). */
static int check_cwd(struct http_req *r, struct exec_request *q)
{
	int rc;
	if ((rc = route_session(r)) < 0)
		return rc;
	if (q->cwd) {
		if ((rc = route_path(r, q->cwd, q->cwd_len, q->cwd_rel, sizeof q->cwd_rel)) < 0)
			return rc;
	} else {
		snprintf(q->cwd_rel, sizeof q->cwd_rel, "%s", r->session_rel);
	}
	sbx_path_wire(q->cwd_rel, q->cwd_wire, sizeof q->cwd_wire);
	const struct route_provider_ops *ops = r->tenant->provider->ops;
	if (!ops->cwd)
		return 0; /* checked where it starts */
	struct route_call c;
	route_call_init(&c, r);
	rc = ops->cwd(&c, q->cwd_rel, q->cwd);
	return rc < 0 ? route_call_fail(r, &c, rc, "run in", q->cwd_rel) : 0;
}

/* The idempotency key covers everything that changes what runs. */
static void request_hash(struct http_req *r, struct exec_request *q)
{
	json_t *canon = json_pack(
	    "{s:s%, s:s%, s:s, s:O, s:I, s:I, s:s%, s:I}", "command", q->command, q->command_len, "session",
	    r->session_key, r->session_key_len, "cwd", q->cwd_wire, "env", q->env_sorted, "timeout_s",
	    (json_int_t)q->timeout_s, "idle_timeout_s", (json_int_t)q->idle_timeout_s, "stdin",
	    q->stdin_data ? q->stdin_data : "", q->stdin_len, "max_output_bytes", (json_int_t)q->max_output);
	route_exec_extras_hash(&q->x, canon);
	if (q->network)
		json_object_set_new(canon, "network", json_true());
	if (q->image) /* absent from the key without it: older ids keep theirs */
		json_object_set_new(canon, "image", json_string(q->image));
	char *ctext = json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(canon);
	sha256_hex(ctext, strlen(ctext), q->hash);
	free(ctext);
}

/* The client's id, or a random one naming this node ("<node>_" and 20
 * hex digits): a balancer routes /exec/{id} by what precedes the '_'. A
 * client's id that names another node of the cluster is refused, since
 * the balancer would send its /exec/{id} there. */
static int choose_id(struct http_req *r, struct exec_request *q)
{
	const char *self = r->app->cfg->node_id;
	if (q->id) {
		memcpy(q->idbuf, q->id, q->id_len);
		q->idbuf[q->id_len] = '\0';
		char node[SBX_NODE_ID_MAX + 1];
		if (sbx_node_of(q->idbuf, node, sizeof node) && strcmp(node, self) != 0 &&
		    sbx_nodes_find(&r->app->nodes, node))
			return http_fail(r, -EINVAL,
					 "id %s names node %s (ids \"<node>_...\" are routed to that "
					 "node): choose an id without a node prefix",
					 q->idbuf, node);
		return 0;
	}
	unsigned char rnd[10];
	auth_random(rnd, sizeof rnd);
	int o = snprintf(q->idbuf, sizeof q->idbuf, "%s_", self);
	for (size_t i = 0; i < sizeof rnd; i++)
		snprintf(q->idbuf + o + 2 * i, 3, "%02x", rnd[i]);
	return 0;
}

/* Start: record it (fail closed: nothing runs unless its start is
 * recorded) and hand it to the runner through the registry. */
static int start(struct http_req *r, struct exec_request *q)
{
	struct app *a = r->app;
	if (a->stopping) {
		r->retry_after_s = 5;
		return http_fail(r, -SBX_E_BACKEND, "the server is shutting down");
	}
	int rc = route_storage_guard(r);
	if (rc < 0)
		return rc;
	struct store_exec row = {.session = r->session_key,
				 .session_len = r->session_key_len,
				 .command = (char *)q->command,
				 .cwd = q->cwd_wire,
				 .request_hash = q->hash};
	snprintf(row.tenant, sizeof row.tenant, "%s", r->tenant->name);
	snprintf(row.id, sizeof row.id, "%s", q->idbuf);
	row.state = EXEC_RUNNING;
	row.policy = q->policy_text;
	row.requested_by = r->claims.sub[0] ? r->claims.sub : NULL;

	const struct route_policy *p = &q->policy;
	struct sbx_exec_req run = *route_execs_base(a->execs);
	run.backend = q->backend;
	run.spawn.limits.mem_bytes = (uint64_t)p->mem_limit_bytes;
	run.spawn.limits.nproc = (uint64_t)p->nproc_limit;
	run.spawn.limits.fsize_bytes = (uint64_t)p->fsize_limit_bytes;
	run.spawn.limits.tenant_mem_bytes = (uint64_t)p->tenant_mem_budget_bytes;
	run.spawn.limits.tenant_nproc = (uint64_t)p->tenant_nproc_budget;
	run.spawn.limits.tenant_cpu_millicores = (uint64_t)p->tenant_cpu_budget_millicores;
	run.spawn.limits.tenant_io_read_bps = (uint64_t)p->tenant_io_read_bps;
	run.spawn.limits.tenant_io_write_bps = (uint64_t)p->tenant_io_write_bps;
	run.spawn.limits.tenant_io_read_iops = (uint64_t)p->tenant_io_read_iops;
	run.spawn.limits.tenant_io_write_iops = (uint64_t)p->tenant_io_write_iops;
	run.spawn.limits.io_dev = r->tenant->io_dev;
	run.spawn.net_allow = q->network ? p->network : NULL;
	run.spawn.net_tenant = r->tenant->name;
	run.spawn.net_sub = r->claims.sub[0] ? r->claims.sub : NULL;
	run.spawn.command = q->command;
	run.spawn.cwd_rel = q->cwd_rel;
	run.spawn.env = q->envv;
	run.timeout_ms = (uint64_t)q->timeout_s * 1000;
	run.idle_timeout_ms = (uint64_t)q->idle_timeout_s * 1000;
	run.stdin_data = q->stdin_data;
	run.stdin_len = q->stdin_len;
	run.max_output_bytes = (size_t)q->max_output;
	/* Always: a watcher may follow any exec's output (GET /exec/{id}/events
	 * ?output=true); the hub drops chunks nobody asked for. */
	run.want_output_events = true;
	struct route_exec_opts o = {
	    .id_given = q->id != NULL,
	    .stream = q->stream,
	    .approval = route_policy_needs_approval(p, q->command),
	    .wait = q->wait,
	    .max_execs = p->max_execs,
	    .exec_queue = p->exec_queue,
	    .approval_timeout_ms = a->cfg->approval_timeout_s * 1000,
	    .rerun = route_exec_post,
	};
	rc = route_exec_extras_apply(r, &q->x, &run, &o);
	if (rc < 0)
		return rc;
	run.rootimg = q->img;
	run.spawn.rootfs = q->img ? sbx_rootimg_rootfs(q->img) : NULL;
	rc = route_execs_start(r, &row, &run, &o);
	q->img = run.rootimg; /* NULL once the runner took it */
	return rc;
}

/* Parse, check, start; the reply comes at the exit (or from the earlier
 * exec of the same id). */
int route_exec_post(struct http_req *r)
{
	struct exec_request q;
	int rc = parse_request(r, &q);
	/* track_changes: its file work (the session, the first snapshot) on
	 * the pool, once the request is known to be one that runs; this
	 * starts again with the snapshot taken. */
	if (rc == 0 && route_exec_snapshot_deferred(r, &rc, route_exec_post)) {
		request_clear(&q);
		return rc;
	}
	if (rc == 0)
		rc = check_cwd(r, &q);
	if (rc == 0 && (r->tenant->provider->ops->caps & ROUTE_CAN_RUN_HERE)) /* else the back's */
		rc = route_image_select(r, q.image, &q.policy, q.backend, &q.img, q.img_name);
	if (rc == 0) {
		http_set_target(r, q.command);
		request_hash(r, &q);
		rc = choose_id(r, &q);
		if (rc == 0) {
			snprintf(r->exec_id, sizeof r->exec_id, "%s", q.idbuf); /* the audit row's */
			rc = start(r, &q);
		}
	}
	request_clear(&q);
	return rc;
}

/* The decision on an exec that waited for approval; null for others. */
static json_t *approval_json(const struct store_exec *ex)
{
	if (!ex->decision[0])
		return json_null();
	char at[40];
	rfc3339_ms(ex->decided_at, at, sizeof at);
	return json_pack("{s:s, s:o, s:s, s:o}", "decision", ex->decision, "decided_by",
			 ex->decided_by ? json_string(ex->decided_by) : json_null(), "decided_at", at,
			 "reason", ex->reason ? json_string(ex->reason) : json_null());
}

static json_t *exec_view(const struct http_req *r, const struct store_exec *ex, bool with_result)
{
	json_t *o = route_exec_start_json(ex);
	json_object_set_new(o, "state", json_string(store_exec_state_name(ex->state)));
	if (ex->state == EXEC_PENDING_APPROVAL) {
		/* Waiting commands do not outlive the run that set their timeout. */
		char at[40];
		rfc3339_ms(ex->started_at + r->app->cfg->approval_timeout_s * 1000, at, sizeof at);
		json_object_set_new(o, "expires_at", json_string(at));
	}
	json_t *policy = ex->policy ? json_loads(ex->policy, 0, NULL) : NULL;
	json_object_set_new(o, "policy", policy ? policy : json_null());
	json_object_set_new(o, "requested_by",
			    ex->requested_by ? json_string(ex->requested_by) : json_null());
	json_object_set_new(o, "approval", approval_json(ex));
	if (with_result) {
		json_t *res = route_exec_row_result(r->tenant, ex);
		json_object_set_new(o, "result", res ? res : json_null());
	}
	return o;
}

int route_exec_load(struct http_req *r, const char *id, struct store_exec *ex)
{
	int rc = store_exec_get(r->app->store, r->tenant->name, id, ex);
	if (rc == -ENOENT)
		return route_exec_unknown(r, id);
	if (rc < 0)
		return http_fail(r, rc, "cannot read the exec record");
	return rc;
}

int route_exec_get(struct http_req *r)
{
	const char *id = r->params[0];
	if (!id_ok(id, strlen(id)))
		return http_fail(r, -ENOENT, "no exec %s", id);
	struct store_exec ex;
	int rc = route_exec_load(r, id, &ex);
	if (rc < 0)
		return rc;
	json_t *o = exec_view(r, &ex, true);
	json_t *progress =
	    ex.state == EXEC_RUNNING ? route_execs_progress(r->app->execs, r->tenant->name, id) : NULL;
	if (progress)
		json_object_set_new(o, "progress", progress);
	store_exec_clear(&ex);
	return http_reply_json(r, 200, o);
}

int route_exec_cancel(struct http_req *r)
{
	return route_exec_cancel_id(r, r->params[0]);
}

int route_exec_cancel_id(struct http_req *r, const char *id)
{
	http_set_target(r, id);
	if (!id_ok(id, strlen(id)))
		return route_exec_unknown(r, id);
	/* Twice: a command approved between the two looks is running the
	 * second time. A request still waiting for an exec slot (routes/
	 * admit.h) is withdrawn and ends cancelled without running. */
	for (int look = 0; look < 2; look++) {
		uint64_t handle = route_execs_handle(r->app->execs, r->tenant->name, id);
		/* Waiting twins of a running one too: they would join it. */
		bool waiting = route_admit_cancel(r->app, r->tenant->load, id) > 0;
		if ((handle && route_jobs_cancel(r->app, handle) == 0) ||
		    route_execs_cancel_pending(r->app->execs, r->tenant->name, id) || waiting)
			return http_reply_json(r, 202,
					       json_pack("{s:s, s:s}", "id", id, "state", "cancelling"));
	}
	return route_execs_answer_state(r, id, "has already finished");
}

/* POST /exec/{id}/approve and /reject (scope approve): a person decides
 * on a command that waits for approval (see exec_registry.h). */
int route_exec_approve(struct http_req *r)
{
	const char *id = r->params[0];
	if (!id_ok(id, strlen(id)))
		return http_fail(r, -ENOENT, "no exec %s", id);
	return route_execs_decide(r, id, true, NULL);
}

int route_exec_reject(struct http_req *r)
{
	const char *id = r->params[0];
	const char *reason = NULL;
	size_t len = 0;
	const struct http_field f[] = {{"reason", F_STRING, false, &reason, &len, 0, 0, NULL}};
	if (r->json && http_fields_read(r, r->json, f, 1) < 0)
		return -EINVAL;
	if (reason && (len > 1024 || memchr(reason, '\0', len)))
		return http_fail(r, -EINVAL, "reason: at most 1024 bytes, without NUL");
	if (!id_ok(id, strlen(id)))
		return http_fail(r, -ENOENT, "no exec %s", id);
	return route_execs_decide(r, id, false, reason && len ? reason : NULL);
}

int route_exec_list(struct http_req *r)
{
	const char *state_name = http_query(r, "state");
	const char *session = http_query(r, "session");
	int64_t limit;
	int rc = http_query_int(r, "limit", 100, 1, 1000, &limit);
	if (rc < 0)
		return rc;
	enum store_exec_state state;
	if (state_name && store_exec_state_parse(state_name, &state) < 0) {
		char names[256] = "";
		for (int i = 0; i < EXEC_STATES; i++)
			snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
				 i == 0			? ""
				 : i == EXEC_STATES - 1 ? " or "
							: ", ",
				 store_exec_state_name((enum store_exec_state)i));
		return http_fail(r, -EINVAL, "state must be %s", names);
	}
	struct store_exec *v = NULL;
	size_t n = 0;
	rc = store_exec_list(r->app->store, r->tenant->name, state_name ? &state : NULL, session,
			     session ? strlen(session) : 0, (size_t)limit, false, &v, &n);
	if (rc < 0)
		return http_fail(r, rc, "cannot list execs");
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, exec_view(r, &v[i], false));
	store_execs_free(v, n);
	return http_reply_json(r, 200, json_pack("{s:o}", "execs", arr));
}
