/* Three nodes behind Debian's HAProxy 2.6 with deploy/haproxy/haproxy.cfg
 * and its map (docs/nodes.md): it_nodes.h has the tests.
 * Exit 77 when haproxy is not installed (scripts/deps installs it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "it_nodes.h"

#define HAPROXY "/usr/sbin/haproxy"

static int balancer_start(void)
{
	char conf[256], map[256], sock[256], addrs[NNODES][32], bind[48];
	const char *pairs[2 * NNODES + 6];
	address_pairs(pairs, addrs);
	snprintf(bind, sizeof bind, "bind 127.0.0.1:%d", C.lb.port);
	snprintf(map, sizeof map, "%s/sandboxd-nodes.map", C.dir);
	snprintf(sock, sizeof sock, "%s/haproxy.sock", C.dir);
	pairs[2 * NNODES] = "bind :80";
	pairs[2 * NNODES + 1] = bind;
	pairs[2 * NNODES + 2] = "/etc/haproxy/sandboxd-nodes.map";
	pairs[2 * NNODES + 3] = map;
	pairs[2 * NNODES + 4] = "/run/haproxy/admin.sock";
	pairs[2 * NNODES + 5] = sock;
	snprintf(conf, sizeof conf, "%s/haproxy.cfg", C.dir);
	if (template_file(SBX_SOURCE_DIR "/deploy/haproxy/haproxy.cfg", conf, pairs, 2 * NNODES + 6) < 0 ||
	    template_file(SBX_SOURCE_DIR "/deploy/haproxy/sandboxd-nodes.map", map, NULL, 0) < 0)
		return -1;
	/* -db: in the foreground, whatever the file's "daemon" says. */
	const char *const argv[] = {HAPROXY, "-db", "-f", conf, NULL};
	C.lb_pid = spawn_logged(argv, C.lb_log);
	return 0;
}

int main(void)
{
	if (access(HAPROXY, X_OK) != 0) {
		fprintf(stderr, "skipped: %s is not installed (apt-get install haproxy; scripts/deps does)\n",
			HAPROXY);
		return 77;
	}
	return run_cluster_tests();
}
