/* The host checks, one table for `sandboxd doctor` and `serve`'s start
 * (server/doctor.h, docs/doctor.md): the table and its phases, the host's
 * making and release, and the report `sandboxd doctor` prints. The checks
 * themselves live by concern in doctor_config.c, doctor_disk.c and
 * doctor_host.c (doctor_int.h). */
#include "server/doctor.h"
#include "server/doctor_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/xmalloc.h"
#include "routes/policy.h"
#include "sandbox/backend.h"
#include "sandbox/cgroup.h"
#include "sandbox/diskimg.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/quota.h"
#include "sandbox/registry.h"
#include "sandbox/seccomp.h"
#include "sandbox/workspace.h"
#include "server/cli.h"
#include "server/datadir.h"
#include "store/store.h"

/* ---- the table ---- */

static const struct {
	const char *name;
	enum srv_phase phase;
	void (*run)(struct srv_host *h, struct srv_check *c);
} checks[] = {
    {"clock", SRV_PHASE_CONFIG, check_clock},
    {"config", SRV_PHASE_CONFIG, check_config},
    {"tls", SRV_PHASE_CONFIG, check_tls},
    {"uids", SRV_PHASE_UIDS, check_uids},
    {"data-dir", SRV_PHASE_UIDS, check_data_dir},
    {"disk-quota", SRV_PHASE_STORE, check_disk_quota},
    {"loop-devices", SRV_PHASE_STORE, check_loop},
    {"mkfs.ext4", SRV_PHASE_STORE, check_mkfs},
    {"store", SRV_PHASE_STORE, check_store},
    {"tenants", SRV_PHASE_STORE, check_tenants},
    {"uid-range", SRV_PHASE_HOST, check_uid_range},
    {"bwrap", SRV_PHASE_HOST, check_bwrap},
    {"user-namespaces", SRV_PHASE_HOST, check_userns},
    {"seccomp", SRV_PHASE_HOST, check_seccomp},
    {"cgroups", SRV_PHASE_HOST, check_cgroups},
    {"network", SRV_PHASE_HOST, check_network},
};

#define NCHECKS (sizeof checks / sizeof checks[0])

void srv_host_init(struct srv_host *h, struct sbx_config *cfg, bool serving)
{
	memset(h, 0, sizeof *h);
	h->cfg = cfg;
	h->serving = serving;
	h->uids_lock = -1;
	h->images_lock = -1;
}

void srv_host_fini(struct srv_host *h)
{
	for (size_t i = 0; i < h->nbackends; i++)
		sbx_backend_free(&h->backends[i]);
	h->nbackends = 0;
	h->backend = NULL;
	sbx_egress_gateway_free(&h->egress);
	store_close(&h->store);
	/* After every request and command: the mounts go now (a command of
	 * a cancelled exec still running keeps its image until it ends). */
	sbx_diskimg_detach_all(h->diskimg);
	sbx_diskimg_free(&h->diskimg);
	if (h->images_lock >= 0)
		close(h->images_lock);
	if (h->uids_lock >= 0)
		close(h->uids_lock);
	h->images_lock = h->uids_lock = -1;
	sbx_quota_free(&h->quota);
}

size_t srv_checks_run(struct srv_host *h, enum srv_phase phase, struct srv_check *out, size_t max)
{
	size_t n = 0;
	bool serving = h->serving, refused = false;
	for (size_t i = 0; i < NCHECKS && n < max; i++) {
		if (checks[i].phase != phase)
			continue;
		struct srv_check *c = &out[n++];
		memset(c, 0, sizeof *c);
		c->name = checks[i].name;
		/* serve stops at the end of a phase with a refusal: the rest of
		 * it only looks, as doctor does (no store migrated, no mount
		 * namespace, no cgroup claimed after the uid range's refusal). */
		h->serving = serving && !refused;
		checks[i].run(h, c);
		refused |= c->status == SRV_CHECK_MISSING && c->refuse;
	}
	h->serving = serving;
	return n;
}

int srv_checks_start(struct srv_host *h, enum srv_phase phase)
{
	struct srv_check got[NCHECKS];
	size_t n = srv_checks_run(h, phase, got, NCHECKS);
	int status = 0;
	for (size_t i = 0; i < n; i++) {
		const struct srv_check *c = &got[i];
		if (c->status != SRV_CHECK_MISSING)
			continue;
		if (c->refuse) {
			fprintf(stderr, "sandboxd: refusing to start: %s: %s.\nFix: %s\n", c->name, c->detail,
				c->fix);
			status = strcmp(c->name, "config") == 0 ? 2 : status ? status : 1;
		} else {
			log_msg("warn", "%s: %s; fix: %s (sandboxd doctor lists every check)", c->name,
				c->detail, c->fix);
		}
	}
	return status;
}

/* ---- sandboxd doctor ---- */

/* A detail as a JSON string: paths need not be UTF-8 (jansson refuses
 * those, and the check would vanish from the list), and a cut detail may
 * end inside a character. */
static json_t *json_text(const char *s)
{
	size_t n = 0;
	char *clean = utf8_sanitize(s, strlen(s), &n);
	json_t *j = json_stringn(clean, n);
	free(clean);
	return j;
}

static const char *status_name(enum srv_check_status s)
{
	return s == SRV_CHECK_OK ? "ok" : s == SRV_CHECK_MISSING ? "missing" : "not needed";
}

/* The JSON of a doctor that checked nothing (exit 2). */
static void print_json_error(const char *why)
{
	json_t *doc = json_pack("{s:s, s:o, s:[]}", "status", "error", "error", json_text(why), "checks");
	char *text = json_dumps(doc, JSON_INDENT(2));
	puts(text);
	free(text);
	json_decref(doc);
}

void cli_doctor_refused(int argc, char **argv, const char *why)
{
	for (int i = 2; i < argc; i++)
		if (strcmp(argv[i], "--format=json") == 0 ||
		    (strcmp(argv[i], "--format") == 0 && i + 1 < argc && strcmp(argv[i + 1], "json") == 0)) {
			print_json_error(why);
			return;
		}
}

int cli_doctor(struct sbx_config *cfg, const struct cli_args *a)
{
	const char *format = a->format ? a->format : "text";
	if (strcmp(format, "text") != 0 && strcmp(format, "json") != 0) {
		fprintf(stderr, "sandboxd: doctor --format must be text or json\n");
		return 2;
	}
	struct srv_host h;
	struct srv_check got[NCHECKS];
	size_t n = 0;
	srv_host_init(&h, cfg, false);
	for (int ph = 0; ph < SRV_PHASES; ph++)
		n += srv_checks_run(&h, (enum srv_phase)ph, got + n, NCHECKS - n);
	srv_host_fini(&h);
	bool bad = false;
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++) {
		const struct srv_check *c = &got[i];
		bad |= c->status == SRV_CHECK_MISSING;
		if (strcmp(format, "json") == 0)
			json_array_append_new(list, json_pack("{s:s, s:s, s:o, s:o, s:b}", "name", c->name,
							      "status", status_name(c->status), "detail",
							      json_text(c->detail), "fix", json_text(c->fix),
							      "refuses_start", c->refuse));
		else if (c->status == SRV_CHECK_MISSING)
			printf("%-10s  %-15s  %s; fix: %s%s\n", status_name(c->status), c->name, c->detail,
			       c->fix, c->refuse ? " (serve refuses to start)" : "");
		else
			printf("%-10s  %-15s  %s\n", status_name(c->status), c->name, c->detail);
	}
	if (strcmp(format, "json") == 0) {
		json_t *doc = json_pack("{s:s, s:o}", "status", bad ? "missing" : "ok", "checks", list);
		char *text = json_dumps(doc, JSON_INDENT(2));
		puts(text);
		free(text);
		json_decref(doc);
	} else {
		json_decref(list);
	}
	return bad ? 1 : 0;
}
