/* Three nodes behind Debian's nginx with deploy/nginx/sandboxd.conf
 * (docs/nodes.md): it_nodes.h has the tests. Exit 77 when
 * nginx is not installed (scripts/deps installs it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "it_nodes.h"

#define NGINX "/usr/sbin/nginx"

static int balancer_start(void)
{
	char conf[256], snippet[256], addrs[NNODES][32], listen[48], *main_conf;
	const char *pairs[2 * NNODES + 2];
	address_pairs(pairs, addrs);
	snprintf(listen, sizeof listen, "listen 127.0.0.1:%d;", C.lb.port);
	pairs[2 * NNODES] = "listen 80;";
	pairs[2 * NNODES + 1] = listen;
	snprintf(snippet, sizeof snippet, "%s/sandboxd.conf", C.dir);
	if (template_file(SBX_SOURCE_DIR "/deploy/nginx/sandboxd.conf", snippet, pairs, 2 * NNODES + 2) < 0)
		return -1;
	/* The main file a distribution's nginx.conf would be: here, a
	 * foreground nginx with every path in the test's directory. */
	main_conf = xasprintf(
	    "daemon off;\nworker_processes 1;\npid %s/nginx.pid;\nerror_log %s/nginx-error.log info;\n"
	    "events { worker_connections 1024; }\n"
	    "http {\n access_log %s/nginx-access.log;\n client_body_temp_path %s/body;\n"
	    " proxy_temp_path %s/proxy;\n fastcgi_temp_path %s/fastcgi;\n uwsgi_temp_path %s/uwsgi;\n"
	    " scgi_temp_path %s/scgi;\n include %s;\n}\n",
	    C.dir, C.dir, C.dir, C.dir, C.dir, C.dir, C.dir, C.dir, snippet);
	snprintf(conf, sizeof conf, "%s/nginx.conf", C.dir);
	int rc = it_write_file(conf, main_conf, strlen(main_conf));
	free(main_conf);
	if (rc < 0)
		return -1;
	char errlog[256];
	snprintf(errlog, sizeof errlog, "%s/nginx-error.log", C.dir);
	const char *const argv[] = {NGINX, "-p", C.dir, "-e", errlog, "-c", conf, NULL};
	C.lb_pid = spawn_logged(argv, C.lb_log);
	return 0;
}

int main(void)
{
	if (access(NGINX, X_OK) != 0) {
		fprintf(stderr, "skipped: %s is not installed (apt-get install nginx; scripts/deps does)\n",
			NGINX);
		return 77;
	}
	return run_cluster_tests();
}
