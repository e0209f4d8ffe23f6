#pragma once
/* The options every outgoing HTTP request sets, the server's (routes/peers.c,
 * to other nodes) and libsandboxd's (client/core.c) alike: only http and
 * https, no signals (both run libcurl on threads of their own), the
 * request's headers, a connect timeout, the CA bundle to verify with and
 * where the body goes. Each caller adds its own options after this. */
#include <curl/curl.h>

/* ca_file NULL: the system's bundle. */
void sbx_curl_base(CURL *e, const char *url, struct curl_slist *hdrs, long connect_timeout_ms,
		   const char *ca_file, curl_write_callback write_fn, void *write_data);
