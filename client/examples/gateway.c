/* libsandboxd in a gateway: write a script, run it, read what it made.
 * Build: cc gateway.c $(pkg-config --cflags --libs sandboxd)
 * Run:   SANDBOXD_URL=http://127.0.0.1:8080 SANDBOXD_TOKEN=... ./a.out */
#include <curl/curl.h>
#include <sandboxd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int print_output(void *arg, int stream, const char *data, size_t len)
{
	(void)arg;
	fwrite(data, 1, len, stream == 2 ? stderr : stdout);
	return 0; /* go on */
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_ALL); /* once, before any thread */
	struct sbxc_opts opts = {.base_url = getenv("SANDBOXD_URL"), .token = getenv("SANDBOXD_TOKEN")};
	struct sbxc *h = NULL;
	if (sbxc_new(&h, &opts) < 0) {
		fprintf(stderr, "set SANDBOXD_URL and SANDBOXD_TOKEN\n");
		return 2;
	}
	struct sbxc_call call = {.session = "example"}; /* every call: session, deadline, cancel */
	struct sbxc_err err;
	char msg[1024];
	const char *script = "print('hello from the sandbox')\n";
	int rc = sbxc_write_file(h, &call, "hello.py", script, strlen(script), NULL, &err);
	if (rc == 0) {
		struct sbxc_exec_req req = {.command = "python3 hello.py > out.txt; cat out.txt",
					    .timeout_s = 30};
		struct sbxc_result res;
		rc = sbxc_exec(h, &call, &req, print_output, NULL, NULL, &res, &err);
		if (rc == 0) {
			printf("exit %d%s\n", res.exit_code, res.timed_out ? " (timed out)" : "");
			sbxc_result_clear(&res);
		}
	}
	char *out = NULL;
	size_t len = 0;
	if (rc == 0 && (rc = sbxc_read_file(h, &call, "out.txt", &out, &len, &err)) == 0) {
		printf("out.txt has %zu bytes\n", len);
		free(out);
	}
	if (rc < 0) /* the wire code, message and retry hint, or what failed locally */
		fprintf(stderr, "error: %s\n", sbxc_err_text(&err, rc, msg, sizeof msg));
	sbxc_free(&h);
	curl_global_cleanup();
	return rc < 0 ? 1 : 0;
}
