#pragma once
/* Disk for tenants, as the routes see it: each tenant's project quota
 * (sandbox/quota.h), and the store's reserve: free space on the store's
 * filesystem that new tenant work may not take, so audit and exec rows
 * can always be written. Thread-safe; every function is a few syscalls. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct app;
struct tenant;
struct http_req;

/* Image mode: make sure the tenant's workspace is the mount of its disk
 * image (sandbox/diskimg.h), before the workspace is opened. 0 in other
 * modes; -errno (logged, the reason in t->quota_why) when it cannot be
 * attached: route_storage_admit then refuses every request of the
 * tenant, as its workspace directory is not its disk. */
int route_storage_attach_image(struct app *a, struct tenant *t);
/* A tenant removed from the store (a name that was cached): its disk
 * image is unmounted (lazily: requests still holding it finish). */
void route_storage_forget(struct app *a, const char *name);
/* For http_hooks.tenant_admit: -SBX_E_BACKEND (503) with the cause in
 * why for a tenant whose disk image is not attached, else 0. */
int route_storage_admit(const struct app *a, const struct tenant *t, char *why, size_t whysz);

/* Put the tenant's workspace under its project quota: project id = the
 * tenant's uid, limits from tenant-disk-quota-bytes and -inodes (one call
 * a tenant policy can give other limits). Called when the tenant is
 * loaded; 0 when quotas are unavailable; -errno (logged) when they are
 * enforced but could not be applied: route_storage_guard then refuses
 * the tenant's writes. */
int route_storage_apply_quota(struct app *a, struct tenant *t);

/* Before new tenant work that writes (exec, writes, uploads, mkdir):
 * 0, or http_fail with 507 insufficient_storage (details: available and
 * reserve bytes) when the store's filesystem has less than
 * store-reserve-bytes free, or 503 backend_unavailable when the tenant's
 * quota could not be applied. */
int route_storage_guard(struct http_req *r);

/* Whether the store's filesystem is below its reserve; *avail and *total
 * get its space (0 when unknown). */
bool route_storage_low(struct app *a, uint64_t *avail, uint64_t *total);

/* http_fail for -ENOSPC / -EDQUOT of a write for the request's tenant:
 * 507 quota_exceeded with details {usage_bytes, limit_bytes,
 * usage_inodes, limit_inodes} when its project quota stopped it, else
 * 507 insufficient_storage (the filesystem is full). wire: the path. */
int route_storage_fail(struct http_req *r, int rc, const char *wire);
