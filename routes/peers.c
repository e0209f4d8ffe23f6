/* libcurl's multi interface: one easy handle per node, no redirects, only
 * http and https, a deadline for the whole batch. */
#include "routes/peers.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/curlopt.h"
#include "common/xmalloc.h"

#define TOKEN_FILE_MAX 16384

/* libcurl's global state, made at the first batch rather than at start:
 * only the audit of other nodes needs it here, and made at start it cost
 * every idle server ~0.3 MB of RSS (TLS set-up; bench/NOTES.md, P10).
 * The remote backend's client library (client/core.c) makes it too; it
 * is reference-counted and thread-safe in the libcurl >= 7.84 both need. */
_Static_assert(LIBCURL_VERSION_NUM >= 0x075400, "libcurl >= 7.84 expected (thread-safe global init)");
static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
	struct route_peer_get *g = ud;
	if (buf_append(&g->body, p, sz * nm) < 0) {
		snprintf(g->error, sizeof g->error, "answer larger than %zu bytes", g->body.max);
		return 0; /* libcurl stops this transfer */
	}
	return sz * nm;
}

/* "Authorization: Bearer <token>" from the peer's token-file (read at
 * every use, so a rotated token takes effect), else the caller's. NULL
 * with g->error set when the file cannot be read. */
static char *auth_header(struct route_peer_get *g)
{
	if (!g->peer->token_file)
		return g->bearer ? xasprintf("Authorization: Bearer %s", g->bearer) : NULL;
	struct buf b;
	buf_init(&b, TOKEN_FILE_MAX);
	int rc = buf_read_file(&b, g->peer->token_file);
	char *h = NULL;
	if (rc == 0 && b.len) {
		const char *t = buf_cstr(&b);
		size_t n = strcspn(t, "\r\n");
		h = xasprintf("Authorization: Bearer %.*s", (int)n, t);
	} else {
		snprintf(g->error, sizeof g->error, "cannot read token-file %s", g->peer->token_file);
	}
	buf_free(&b);
	return h;
}

static CURL *easy_for(struct route_peer_get *g, struct curl_slist **hdrs, long timeout_ms, char **url)
{
	char *auth = auth_header(g);
	if (g->error[0])
		return NULL;
	CURL *c = curl_easy_init();
	if (!c) {
		free(auth);
		snprintf(g->error, sizeof g->error, "cannot make a libcurl handle");
		return NULL;
	}
	*url = xasprintf("%s%s", g->peer->url, g->path);
	*hdrs = curl_slist_append(NULL, "Accept: application/json");
	if (auth)
		*hdrs = curl_slist_append(*hdrs, auth);
	free(auth);
	sbx_curl_base(c, *url, *hdrs, timeout_ms, g->peer->ca_file, on_body, g);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c, CURLOPT_PRIVATE, g);
	return c;
}

void route_peers_get(struct route_peer_get *v, size_t n, long timeout_ms, size_t max_body)
{
	pthread_once(&global_once, global_init);
	CURLM *m = global_rc == CURLE_OK ? curl_multi_init() : NULL;
	CURL **easy = xcalloc(n + 1, sizeof *easy);
	struct curl_slist **hdrs = xcalloc(n + 1, sizeof *hdrs);
	char **urls = xcalloc(n + 1, sizeof *urls);
	for (size_t i = 0; i < n; i++) {
		v[i].status = 0;
		v[i].error[0] = '\0';
		buf_init(&v[i].body, max_body);
		easy[i] = m ? easy_for(&v[i], &hdrs[i], timeout_ms, &urls[i]) : NULL;
		if (!m)
			snprintf(v[i].error, sizeof v[i].error, "%s",
				 global_rc == CURLE_OK ? "cannot make a libcurl handle"
						       : "cannot initialise libcurl");
		if (easy[i])
			curl_multi_add_handle(m, easy[i]);
	}
	int running = 1;
	/* libcurl enforces each handle's own timeout; the loop ends with them. */
	while (m && running) {
		if (curl_multi_perform(m, &running) != CURLM_OK)
			break;
		if (running)
			curl_multi_poll(m, NULL, 0, 200, NULL);
	}
	CURLMsg *msg;
	int left;
	while (m && (msg = curl_multi_info_read(m, &left))) {
		struct route_peer_get *g = NULL;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&g);
		if (msg->msg != CURLMSG_DONE || !g)
			continue;
		if (msg->data.result == CURLE_OK)
			curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &g->status);
		else if (!g->error[0])
			snprintf(g->error, sizeof g->error, "%s", curl_easy_strerror(msg->data.result));
	}
	for (size_t i = 0; i < n; i++) {
		if (easy[i]) {
			curl_multi_remove_handle(m, easy[i]);
			curl_easy_cleanup(easy[i]);
		}
		curl_slist_free_all(hdrs[i]);
		free(urls[i]);
	}
	if (m)
		curl_multi_cleanup(m);
	free(easy);
	free(hdrs);
	free(urls);
}
