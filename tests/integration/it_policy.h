#pragma once
/* Helpers of the policy and approval suites: setting a tenant's policy
 * through the command line and through the admin route. Include after
 * it_exec.h. */
#include "it_exec.h"

/* `sandboxd tenant set TENANT KVS [--set backends=...]`: its exit status. */
static inline int pol_cli(struct it_server *s, const char *tenant, const char *kvs)
{
	char *args = xasprintf("tenant set %s %s --set backends=bwrap,local", tenant, kvs);
	int st = -1;
	free(it_cli(s, &st, args));
	free(args);
	return st;
}

/* PUT /tenants/{tenant}/policy with body (text); the status, *out the body. */
static inline long pol_put(struct it_server *s, const char *tok, const char *tenant, const char *body,
			   json_t **out)
{
	char path[128];
	snprintf(path, sizeof path, "/tenants/%s/policy", tenant);
	struct it_resp r;
	if (it_http(s, "PUT", path, tok, NULL, body, strlen(body), &r) != 0)
		return -1;
	if (out)
		*out = it_json(&r);
	long st = r.status;
	if (st != 200 && !out)
		it_show(&r);
	it_resp_free(&r);
	return st;
}
