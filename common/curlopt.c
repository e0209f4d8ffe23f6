#include "common/curlopt.h"

void sbx_curl_base(CURL *e, const char *url, struct curl_slist *hdrs, long connect_timeout_ms,
		   const char *ca_file, curl_write_callback write_fn, void *write_data)
{
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_fn);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, write_data);
	if (ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, ca_file);
}
