/* sandboxd debug bwrap-argv: the bwrap line the bwrap backend would start
 * for a command, as files (sbx_backend_dump), so that the P2 benchmark's
 * bare line is the backend's own and never drifts from it. Not in the
 * usage text: it is for benchmarks and debugging. It starts no server,
 * reads no secret and writes only the new files in the directory it is
 * given; the backend's start probe runs as the given uid. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "sandbox/backend.h"
#include "server/cli.h"

static const char debug_usage[] = "usage: sandboxd debug bwrap-argv OUTDIR WORKSPACE UID GID [COMMAND]\n"
				  "  writes OUTDIR/path, OUTDIR/argv (NUL-separated) and OUTDIR/fd-N (what\n"
				  "  bwrap reads from fd N) for COMMAND (default: true) as a tenant's\n"
				  "  sandbox uid:gid with WORKSPACE at /workspace (tmp-size-bytes from the\n"
				  "  configuration; no network, no root image)\n";

static int parse_id(const char *s, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > 0x7fffffffUL)
		return -1;
	*out = (unsigned)v;
	return 0;
}

int cli_debug(struct sbx_config *cfg, const struct cli_args *a)
{
	unsigned uid, gid;
	struct sbx_backend *b = NULL;
	int rc;

	if (a->nwords < 5 || a->nwords > 6 || strcmp(a->words[0], "bwrap-argv") != 0 ||
	    parse_id(a->words[3], &uid) < 0 || parse_id(a->words[4], &gid) < 0) {
		fputs(debug_usage, stderr);
		return 2;
	}
	struct sbx_backend_config bc = {.name = "bwrap", .cgroup_shared = true, .probe_uid = uid};
	struct sbx_spawn_req req = {
	    .command = a->nwords == 6 ? a->words[5] : "true",
	    .workspace_host_dir = a->words[2],
	    .cwd_rel = "",
	    .uid = uid,
	    .gid = gid,
	    .drop_privs = true,
	    .limits = {.tmp_bytes = (uint64_t)cfg->tmp_size_bytes},
	    .stdin_fd = -1,
	    .stdout_fd = -1,
	    .stderr_fd = -1,
	};
	rc = sbx_backend_new(&b, &bc);
	if (rc == 0)
		rc = sbx_backend_dump(b, &req, a->words[1]);
	sbx_backend_free(&b);
	if (rc < 0) {
		fprintf(stderr, "sandboxd: debug bwrap-argv: %s\n", sbx_strerror(rc));
		return 1;
	}
	return 0;
}
