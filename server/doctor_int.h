#pragma once
/* Inside server/: what the host checks of doctor.c share. The detail and
 * fix writers, the small helpers of doctor_kit.c, and the checks of the
 * table, each file of checks by concern: doctor_config.c (clock,
 * configuration, TLS, the tenants' uids), doctor_disk.c (the data
 * directory, disk quotas and images, the store) and doctor_host.c
 * (backends, user namespaces, seccomp, cgroups, network). */
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "server/doctor.h"

#define DETAIL(c, ...) snprintf((c)->detail, sizeof(c)->detail, __VA_ARGS__)
#define FIX(c, ...) snprintf((c)->fix, sizeof(c)->fix, __VA_ARGS__)

void doctor_missing(struct srv_check *c, bool refuse);
void doctor_not_needed(struct srv_check *c);
bool doctor_listed(const char *list, const char *name);
int doctor_run_quiet(const char *path, char *const argv[]);
char *doctor_existing_parent(const char *path);
void check_clock(struct srv_host *h, struct srv_check *c);
void check_config(struct srv_host *h, struct srv_check *c);
void check_tls(struct srv_host *h, struct srv_check *c);
void check_uids(struct srv_host *h, struct srv_check *c);
void check_uid_range(struct srv_host *h, struct srv_check *c);
void check_data_dir(struct srv_host *h, struct srv_check *c);
void check_disk_quota(struct srv_host *h, struct srv_check *c);
void check_loop(struct srv_host *h, struct srv_check *c);
void check_mkfs(struct srv_host *h, struct srv_check *c);
void check_store(struct srv_host *h, struct srv_check *c);
void check_tenants(struct srv_host *h, struct srv_check *c);
void check_bwrap(struct srv_host *h, struct srv_check *c);
void check_userns(struct srv_host *h, struct srv_check *c);
void check_seccomp(struct srv_host *h, struct srv_check *c);
void check_cgroups(struct srv_host *h, struct srv_check *c);
void check_network(struct srv_host *h, struct srv_check *c);
