/* Streaming transfers against the real binary: tokens (mint, single use,
 * expiry, direction), large downloads and chunked uploads with constant
 * server memory, Range resume, interrupted and killed uploads that leave
 * the old file, the per-tenant limit, and the audit row of token routes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <dirent.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/xmalloc.h"
#include "harness.h"

static struct it_server srv;
static struct it_server s2; /* servers with other settings; cleaned up by teardown if a test fails */

#define MIB (1024ull * 1024ull)
#define RSS_SLACK_KIB (32 * 1024)

static int setup(void **state)
{
	(void)state;
	curl_global_init(CURL_GLOBAL_ALL);
	return it_start(&srv, NULL);
}

static int teardown(void **state)
{
	(void)state;
	it_cleanup(&srv);
	it_cleanup(&s2);
	curl_global_cleanup();
	return 0;
}

/* ---- helpers ---- */

/* Start s2 with one setting ("name=value") changed. */
static void start_s2(const char *setting)
{
	const char *extra[] = {"--set", setting, NULL};
	assert_int_equal(it_start(&s2, extra), 0);
}

static char *session_header(const char *session)
{
	return xasprintf("X-Session-Key: %s", session);
}

/* A request as tenant acme in a session. */
static void req(const char *method, const char *path, const char *session, const void *body, size_t len,
		struct it_resp *out)
{
	char *tok = it_token(&srv, "acme", NULL);
	char *sh = session_header(session);
	const char *h[] = {sh, NULL};
	assert_int_equal(it_http(&srv, method, path, tok, h, body, len, out), 0);
	free(sh);
	free(tok);
}

/* Write a small file through /fs/write; returns the host directory of the
 * session (caller frees). */
static char *put_file(const char *session, const char *name, const char *content)
{
	struct it_resp r;
	char *path = xasprintf("/fs/write?path=%s", name);
	req("PUT", path, session, content, strlen(content), &r);
	assert_int_equal(r.status, 200);
	json_t *j = it_json(&r);
	const char *wire = json_string_value(json_object_get(j, "path"));
	assert_non_null(wire);
	assert_true(strncmp(wire, "/workspace/", 11) == 0);
	const char *slash = strrchr(wire, '/');
	char *dir = xasprintf("%s/tenants/acme/workspace/%.*s", srv.dir, (int)(slash - wire - 11), wire + 11);
	json_decref(j);
	it_resp_free(&r);
	free(path);
	return dir;
}

/* POST /fs/transfers; returns the token (caller frees) or NULL, with the
 * response in *out when given. */
static char *mint(const char *session, const char *path, const char *direction, int ttl, struct it_resp *out)
{
	struct it_resp r;
	char *body =
	    ttl > 0 ? xasprintf("{\"path\":\"%s\",\"direction\":\"%s\",\"ttl_s\":%d}", path, direction, ttl)
		    : xasprintf("{\"path\":\"%s\",\"direction\":\"%s\"}", path, direction);
	req("POST", "/fs/transfers", session, body, strlen(body), &r);
	free(body);
	char *tok = NULL;
	if (r.status == 201) {
		json_t *j = it_json(&r);
		tok = xstrdup(json_string_value(json_object_get(j, "token")));
		json_decref(j);
	}
	if (out)
		*out = r;
	else
		it_resp_free(&r);
	return tok;
}

static char *stream_url(const char *tok)
{
	return xasprintf("/fs/stream/%s", tok);
}

/* A request to the stream URL of tok, with no bearer token. */
static void stream_http(const char *method, const char *tok, const char *const *hdrs, const void *body,
			size_t len, struct it_resp *r)
{
	char *url = stream_url(tok);
	assert_int_equal(it_http(&srv, method, url, NULL, hdrs, body, len, r), 0);
	free(url);
}

static void sha256_hex(const void *p, size_t n, char out[65])
{
	unsigned char d[32];
	unsigned int dn = 32;
	EVP_Digest(p, n, d, &dn, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void md_hex(EVP_MD_CTX *md, char out[65])
{
	unsigned char d[32];
	EVP_DigestFinal_ex(md, d, NULL);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* One column of the transfer row of tok, read with the sqlite3 shell. */
static char *row_col(const char *tok, const char *col)
{
	char h[65];
	sha256_hex(tok, strlen(tok), h);
	char *cmd = xasprintf(
	    "sqlite3 '%s/sandboxd.db' \"select %s from transfers where lower(hex(token_hash))='%s'\"",
	    srv.dir, col, h);
	FILE *p = popen(cmd, "r");
	free(cmd);
	assert_non_null(p);
	char line[512] = "";
	if (!fgets(line, sizeof line, p))
		line[0] = '\0';
	pclose(p);
	line[strcspn(line, "\n")] = '\0';
	return xstrdup(line);
}

static void assert_row(const char *tok, const char *col, const char *want)
{
	char *v = row_col(tok, col);
	assert_string_equal(v, want);
	free(v);
}

/* A request to tok's stream URL that must fail with a wire error. */
static void stream_err(const char *method, const char *tok, const void *body, size_t len, long status,
		       const char *code)
{
	struct it_resp r;
	stream_http(method, tok, NULL, body, len, &r);
	it_expect_error(&r, status, code);
	it_resp_free(&r);
}

/* Poll until the row's state is want (the completion runs a moment after
 * the client leaves). */
static bool wait_state(const char *tok, const char *want, int ms)
{
	for (int i = 0; i < ms / 50; i++) {
		char *s = row_col(tok, "state");
		bool ok = strcmp(s, want) == 0;
		free(s);
		if (ok)
			return true;
		usleep(50000);
	}
	return false;
}

/* Deterministic pseudo-random bytes: byte p of the stream is byte p%8 of
 * splitmix64(seed + p/8). */
static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void fill(uint64_t seed, uint64_t pos, unsigned char *buf, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint64_t w = splitmix64(seed + (pos + i) / 8);
		unsigned off = (unsigned)((pos + i) % 8);
		for (; off < 8 && i < n; off++, i++)
			buf[i] = (unsigned char)(w >> (8 * off));
	}
}

/* Server RSS sampled in a thread while a transfer runs. */
struct rss_watch {
	pthread_t th;
	volatile bool stop;
	long base, peak;
};

static void *rss_loop(void *p)
{
	struct rss_watch *w = p;
	while (!w->stop) {
		long k = it_rss_kib(&srv);
		if (k > w->peak)
			w->peak = k;
		usleep(10000);
	}
	return NULL;
}

static void rss_start(struct rss_watch *w)
{
	memset(w, 0, sizeof *w);
	w->base = it_rss_kib(&srv);
	w->peak = w->base;
	assert_true(w->base > 0);
	pthread_create(&w->th, NULL, rss_loop, w);
}

static long rss_stop(struct rss_watch *w)
{
	w->stop = true;
	pthread_join(w->th, NULL);
	fprintf(stderr, "server RSS: base %ld KiB, peak %ld KiB, growth %ld KiB\n", w->base, w->peak,
		w->peak - w->base);
	return w->peak - w->base;
}

/* Streaming download and upload through libcurl, hashing on the fly. */
struct io {
	EVP_MD_CTX *md;
	uint64_t n;	/* bytes seen */
	uint64_t total; /* upload: bytes to send */
	uint64_t seed;
};

static size_t on_write_hash(char *p, size_t sz, size_t n, void *ud)
{
	struct io *io = ud;
	EVP_DigestUpdate(io->md, p, sz * n);
	io->n += sz * n;
	return sz * n;
}

static size_t on_read_gen(char *p, size_t sz, size_t n, void *ud)
{
	struct io *io = ud;
	size_t want = sz * n;
	if (want > io->total - io->n)
		want = (size_t)(io->total - io->n);
	fill(io->seed, io->n, (unsigned char *)p, want);
	EVP_DigestUpdate(io->md, p, want);
	io->n += want;
	return want;
}

static size_t on_body_keep(char *p, size_t sz, size_t n, void *ud)
{
	char **b = ud;
	size_t old = *b ? strlen(*b) : 0;
	*b = xrealloc(*b, old + sz * n + 1);
	memcpy(*b + old, p, sz * n);
	(*b)[old + sz * n] = '\0';
	return sz * n;
}

/* Perform c against path on s with an optional bearer token and extra
 * headers (freed here), with the suites' timeout; returns the status, -1
 * on a transport error. Cleans c up. */
static long curl_run(CURL *c, struct it_server *s, const char *path, const char *bearer,
		     struct curl_slist *hl)
{
	char *url = xasprintf("%s%s", s->base, path);
	char *auth = bearer ? xasprintf("Authorization: Bearer %s", bearer) : NULL;
	if (auth)
		hl = curl_slist_append(hl, auth);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 300L);
	CURLcode rc = curl_easy_perform(c);
	long status = -1;
	if (rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	else
		fprintf(stderr, "curl: %s\n", curl_easy_strerror(rc));
	curl_slist_free_all(hl);
	curl_easy_cleanup(c);
	free(url);
	free(auth);
	return status;
}

/* GET url (absolute path on srv) into the hash; returns the status. */
static long curl_download(struct it_server *s, const char *path, const char *bearer, struct io *io)
{
	CURL *c = curl_easy_init();
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write_hash);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, io);
	return curl_run(c, s, path, bearer, NULL);
}

/* PUT of io->total generated bytes without a length (chunked); *body gets
 * the response body. Returns the status. */
static long curl_upload_chunked(struct it_server *s, const char *path, const char *bearer, bool expect100,
				struct io *io, char **body)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hl = curl_slist_append(NULL, "Transfer-Encoding: chunked");
	hl = curl_slist_append(hl, expect100 ? "Expect: 100-continue" : "Expect:");
	curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read_gen);
	curl_easy_setopt(c, CURLOPT_READDATA, io);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body_keep);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
	return curl_run(c, s, path, bearer, hl);
}

/* The request line and headers of a raw PUT of 10 MiB to tok's stream URL. */
static char *raw_put_head(const char *tok)
{
	return xasprintf("PUT /fs/stream/%s HTTP/1.1\r\nHost: x\r\nContent-Length: %llu\r\n\r\n", tok,
			 (unsigned long long)(10 * MIB));
}

/* GET /fs/read of name in session must answer 200 with exactly want. */
static void assert_read(const char *session, const char *name, const char *want)
{
	struct it_resp r;
	char *path = xasprintf("/fs/read?path=%s", name);
	req("GET", path, session, NULL, 0, &r);
	free(path);
	it_expect_status(&r, 200);
	assert_string_equal(r.body, want);
	it_resp_free(&r);
}

/* A raw connection that stays open (it_raw closes at once). */
static int raw_open(struct it_server *s)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)s->port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	return fd;
}

static void raw_send(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		assert_true(w > 0);
		c += w;
		n -= (size_t)w;
	}
}

/* The readdir entries of a wire path, as one JSON text (caller frees). */
static char *listing(const char *session, const char *path)
{
	struct it_resp r;
	char *p = xasprintf("/fs/readdir?path=%s", path);
	req("GET", p, session, NULL, 0, &r);
	assert_int_equal(r.status, 200);
	char *out = xstrndup(r.body, r.len);
	it_resp_free(&r);
	free(p);
	return out;
}

static int count_temps(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *e;
	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (strncmp(e->d_name, ".sandboxd-tmp-", 14) == 0)
			n++;
	closedir(d);
	return n;
}

/* ---- tests ---- */

static void test_mint_shape_scope_and_hash_only(void **state)
{
	(void)state;
	struct it_resp r;
	free(put_file("tr-mint", "m.txt", "mint me"));
	char *tok = mint("tr-mint", "m.txt", "read", 30, &r);
	assert_int_equal(r.status, 201);
	assert_non_null(tok);
	json_t *j = it_json(&r);
	/* "<node>_" (docs/nodes.md) and 256 random bits. */
	const char *rnd = strchr(tok, '_');
	assert_non_null(rnd);
	assert_int_equal(strlen(++rnd), 43);
	for (const char *c = rnd; *c; c++)
		assert_non_null(
		    strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", *c));
	char *url = stream_url(tok);
	assert_string_equal(json_string_value(json_object_get(j, "url")), url);
	assert_string_equal(json_string_value(json_object_get(j, "direction")), "read");
	const char *path = json_string_value(json_object_get(j, "path"));
	assert_true(strncmp(path, "/workspace/sessions/tr-mint-", 28) == 0);
	assert_non_null(strstr(path, "/m.txt"));
	const char *exp = json_string_value(json_object_get(j, "expires_at"));
	assert_non_null(exp);
	assert_int_equal(exp[strlen(exp) - 1], 'Z');
	json_decref(j);
	it_resp_free(&r);

	/* the store has the row by hash, minted; the token text is nowhere in the database files */
	assert_row(tok, "state", "minted");
	char *cmd = xasprintf("cat '%s'/sandboxd.db* | grep -c -a -F '%s'", srv.dir, tok);
	FILE *p = popen(cmd, "r");
	char line[32] = "";
	assert_non_null(fgets(line, sizeof line, p));
	pclose(p);
	free(cmd);
	assert_int_equal(atoi(line), 0);

	/* ttl is capped at the server's maximum (3600 s by default) */
	char *t2 = mint("tr-mint", "m.txt", "read", 999999, NULL);
	char *c1 = row_col(t2, "expires_at - created_at");
	assert_true(atoll(c1) <= 3600 * 1000ll);
	assert_true(atoll(c1) > 3000 * 1000ll);
	free(c1);
	free(t2);

	/* scope by direction */
	char *ro = it_token(&srv, "acme", "fs:read");
	const char *h[] = {"X-Session-Key: tr-mint", NULL};
	const char *wbody = "{\"path\":\"w.txt\",\"direction\":\"write\"}";
	assert_int_equal(it_http(&srv, "POST", "/fs/transfers", ro, h, wbody, strlen(wbody), &r), 0);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	const char *rbody = "{\"path\":\"m.txt\",\"direction\":\"read\"}";
	assert_int_equal(it_http(&srv, "POST", "/fs/transfers", ro, h, rbody, strlen(rbody), &r), 0);
	assert_int_equal(r.status, 201);
	it_resp_free(&r);
	free(ro);
	char *ex = it_token(&srv, "acme", "exec");
	assert_int_equal(it_http(&srv, "POST", "/fs/transfers", ex, h, rbody, strlen(rbody), &r), 0);
	it_expect_error(&r, 403, "insufficient_scope");
	it_resp_free(&r);
	free(ex);

	/* bad direction, missing file, escape */
	free(mint("tr-mint", "m.txt", "sideways", 0, &r));
	it_expect_error(&r, 400, "bad_request");
	it_resp_free(&r);
	free(mint("tr-mint", "nope.txt", "read", 0, &r));
	it_expect_error(&r, 404, "not_found");
	it_resp_free(&r);
	free(mint("tr-mint", "../../../etc/passwd", "read", 0, &r));
	it_expect_error(&r, 403, "outside_workspace");
	it_resp_free(&r);
	free(url);
	free(tok);
}

static void test_big_download_constant_memory(void **state)
{
	(void)state;
	const uint64_t size = 300 * MIB;
	const uint64_t seed = 42;
	char *dir = put_file("tr-big", "seed.txt", "x");
	char *host = xasprintf("%s/big.bin", dir);
	FILE *f = fopen(host, "wb");
	assert_non_null(f);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	unsigned char *buf = xmalloc(MIB);
	for (uint64_t pos = 0; pos < size; pos += MIB) {
		fill(seed, pos, buf, MIB);
		EVP_DigestUpdate(md, buf, MIB);
		assert_int_equal(fwrite(buf, 1, MIB, f), MIB);
	}
	fclose(f);
	free(buf);
	char want[65];
	md_hex(md, want);
	EVP_MD_CTX_free(md);

	char *tok = mint("tr-big", "big.bin", "read", 120, NULL);
	assert_non_null(tok);
	char *url = stream_url(tok);
	struct io io = {.md = EVP_MD_CTX_new()};
	EVP_DigestInit_ex(io.md, EVP_sha256(), NULL);
	struct rss_watch w;
	rss_start(&w);
	long status = curl_download(&srv, url, NULL, &io);
	long growth = rss_stop(&w);
	assert_int_equal(status, 200);
	assert_int_equal(io.n, size);
	char got[65];
	md_hex(io.md, got);
	EVP_MD_CTX_free(io.md);
	assert_string_equal(got, want);
	assert_true(growth < RSS_SLACK_KIB);

	/* the row is done with every byte */
	assert_true(wait_state(tok, "done", 3000));
	char *bytes = row_col(tok, "bytes");
	assert_int_equal(atoll(bytes), (long long)size);
	free(bytes);
	unlink(host);
	free(host);
	free(url);
	free(tok);
	free(dir);
}

static void test_big_chunked_upload_constant_memory(void **state)
{
	(void)state;
	const uint64_t size = 150 * MIB;
	char *dir = put_file("tr-up", "up.bin", "the old content");
	char *tok = mint("tr-up", "up.bin", "write", 120, NULL);
	assert_non_null(tok);
	char *url = stream_url(tok);
	struct io io = {.md = EVP_MD_CTX_new(), .total = size, .seed = 7};
	EVP_DigestInit_ex(io.md, EVP_sha256(), NULL);
	char *body = NULL;
	struct rss_watch w;
	rss_start(&w);
	long status = curl_upload_chunked(&srv, url, NULL, false, &io, &body);
	long growth = rss_stop(&w);
	if (status != 201)
		fprintf(stderr, "upload: %ld %s\n", status, body ? body : "");
	assert_int_equal(status, 201);
	char want[65];
	md_hex(io.md, want);
	EVP_MD_CTX_free(io.md);
	json_t *j = json_loads(body, 0, NULL);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "sha256")), want);
	assert_int_equal(json_integer_value(json_object_get(j, "size")), (json_int_t)size);
	assert_non_null(strstr(json_string_value(json_object_get(j, "path")), "/up.bin"));
	json_decref(j);
	free(body);
	assert_true(growth < RSS_SLACK_KIB);

	/* the file on the host is the new content, no temp file is left, the row is done */
	char *host = xasprintf("%s/up.bin", dir);
	struct stat st;
	assert_int_equal(stat(host, &st), 0);
	assert_int_equal((uint64_t)st.st_size, size);
	assert_int_equal(count_temps(dir), 0);
	assert_true(wait_state(tok, "done", 3000));
	char *sha = row_col(tok, "sha256");
	assert_string_equal(sha, want);
	free(sha);
	unlink(host);
	free(host);

	/* the bearer shortcut, chunked too, lands the same row shape */
	char *bearer = it_token(&srv, "acme", "fs:write");
	io = (struct io){.md = EVP_MD_CTX_new(), .total = 3 * MIB + 17, .seed = 9};
	EVP_DigestInit_ex(io.md, EVP_sha256(), NULL);
	body = NULL;
	status = curl_upload_chunked(&srv, "/fs/write_stream?path=/workspace/shortcut.bin", bearer, true, &io,
				     &body);
	assert_int_equal(status, 201);
	md_hex(io.md, want);
	EVP_MD_CTX_free(io.md);
	assert_non_null(strstr(body, want));
	free(body);
	char *cmd =
	    xasprintf("sqlite3 '%s/sandboxd.db' \"select state||' '||direction||' '||bytes from transfers "
		      "where path='shortcut.bin'\"",
		      srv.dir);
	FILE *p = popen(cmd, "r");
	char line[128] = "";
	assert_non_null(fgets(line, sizeof line, p));
	pclose(p);
	free(cmd);
	char expect_row[64];
	snprintf(expect_row, sizeof expect_row, "done write %llu\n", (unsigned long long)(3 * MIB + 17));
	assert_string_equal(line, expect_row);

	/* and reads back through the read shortcut */
	char *rb = it_token(&srv, "acme", "fs:read");
	io = (struct io){.md = EVP_MD_CTX_new()};
	EVP_DigestInit_ex(io.md, EVP_sha256(), NULL);
	assert_int_equal(curl_download(&srv, "/fs/read_stream?path=/workspace/shortcut.bin", rb, &io), 200);
	char got[65];
	md_hex(io.md, got);
	EVP_MD_CTX_free(io.md);
	assert_string_equal(got, want);
	/* the read shortcut needs fs:read */
	it_expect_error_at(&srv, "GET", "/fs/read_stream?path=/workspace/shortcut.bin", bearer, 403,
			   "insufficient_scope");
	free(rb);
	free(bearer);
	free(url);
	free(tok);
	free(dir);
}

struct racer {
	const char *url;
	pthread_barrier_t *bar;
	long status;
	char *body;
};

static void *race_get(void *p)
{
	struct racer *rc = p;
	struct it_resp r;
	pthread_barrier_wait(rc->bar);
	if (it_http(&srv, "GET", rc->url, NULL, NULL, NULL, 0, &r) == 0) {
		rc->status = r.status;
		rc->body = xstrndup(r.body, r.len);
		it_resp_free(&r);
	}
	return NULL;
}

static void test_single_use_under_race(void **state)
{
	(void)state;
	free(put_file("tr-race", "race.txt", "only once"));
	for (int round = 0; round < 5; round++) {
		char *tok = mint("tr-race", "race.txt", "read", 0, NULL);
		char *url = stream_url(tok);
		pthread_barrier_t bar;
		pthread_barrier_init(&bar, NULL, 2);
		struct racer a = {.url = url, .bar = &bar}, b = {.url = url, .bar = &bar};
		pthread_t ta, tb;
		pthread_create(&ta, NULL, race_get, &a);
		pthread_create(&tb, NULL, race_get, &b);
		pthread_join(ta, NULL);
		pthread_join(tb, NULL);
		pthread_barrier_destroy(&bar);
		struct racer *win = a.status == 200 ? &a : &b, *lose = a.status == 200 ? &b : &a;
		if (!((a.status == 200 && b.status == 410) || (a.status == 410 && b.status == 200)))
			fprintf(stderr, "race: %ld %s / %ld %s\n", a.status, a.body, b.status, b.body);
		assert_int_equal(win->status, 200);
		assert_string_equal(win->body, "only once");
		assert_int_equal(lose->status, 410);
		assert_non_null(strstr(lose->body, "token_used"));
		free(a.body);
		free(b.body);
		free(url);
		free(tok);
	}
}

static void test_expiry(void **state)
{
	(void)state;
	free(put_file("tr-exp", "e.txt", "soon gone"));
	char *tok = mint("tr-exp", "e.txt", "read", 1, NULL);
	char *wtok = mint("tr-exp", "e2.txt", "write", 1, NULL);
	sleep(2);
	stream_err("GET", tok, NULL, 0, 410, "token_expired");
	/* still expired the second time, and recorded as such */
	stream_err("GET", tok, NULL, 0, 410, "token_expired");
	assert_row(tok, "state", "expired");
	stream_err("PUT", wtok, "data", 4, 410, "token_expired");
	free(wtok);
	free(tok);
}

static void test_range_resume(void **state)
{
	(void)state;
	struct it_resp r;
	char content[1001];
	for (int i = 0; i < 1000; i++)
		content[i] = (char)('a' + i % 26);
	content[1000] = '\0';
	free(put_file("tr-range", "r.txt", content));
	char *tok = mint("tr-range", "r.txt", "read", 0, NULL);
	const char *h[] = {"Range: bytes=100-", NULL};
	stream_http("GET", tok, h, NULL, 0, &r);
	assert_int_equal(r.status, 206);
	assert_int_equal(r.len, 900);
	assert_memory_equal(r.body, content + 100, 900);
	it_expect_header(&r, "Content-Range", "bytes 100-999/1000");
	it_resp_free(&r);
	assert_true(wait_state(tok, "done", 2000));
	assert_row(tok, "bytes", "900");
	free(tok);

	/* an unsatisfiable range is refused without spending the token */
	tok = mint("tr-range", "r.txt", "read", 0, NULL);
	const char *h2[] = {"Range: bytes=5000-", NULL};
	stream_http("GET", tok, h2, NULL, 0, &r);
	assert_int_equal(r.status, 416);
	it_resp_free(&r);
	const char *h3[] = {"Range: bytes=-10", NULL};
	stream_http("GET", tok, h3, NULL, 0, &r);
	assert_int_equal(r.status, 206);
	assert_int_equal(r.len, 10);
	assert_memory_equal(r.body, content + 990, 10);
	it_resp_free(&r);
	free(tok);
}

static void test_wrong_direction_and_unknown(void **state)
{
	(void)state;
	struct it_resp r;
	free(put_file("tr-dir", "d.txt", "direction"));
	char *rtok = mint("tr-dir", "d.txt", "read", 0, NULL);
	char *wtok = mint("tr-dir", "d.txt", "write", 0, NULL);
	stream_http("PUT", rtok, NULL, "x", 1, &r);
	it_expect_error(&r, 409, "conflict");
	assert_non_null(strstr(r.body, "downloads"));
	it_resp_free(&r);
	stream_http("GET", wtok, NULL, NULL, 0, &r);
	it_expect_error(&r, 409, "conflict");
	assert_non_null(strstr(r.body, "uploads"));
	it_resp_free(&r);
	/* neither was spent by the refusal */
	stream_http("GET", rtok, NULL, NULL, 0, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "direction");
	it_resp_free(&r);
	stream_http("PUT", wtok, NULL, "new", 3, &r);
	assert_int_equal(r.status, 201);
	it_resp_free(&r);
	assert_read("tr-dir", "d.txt", "new");
	/* used tokens */
	stream_err("PUT", wtok, "again", 5, 410, "token_used");

	/* unknown, malformed */
	const char *unknown = "/fs/stream/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
	it_expect_error_at(&srv, "GET", unknown, NULL, 404, "not_found");
	assert_int_equal(it_http(&srv, "PUT", unknown, NULL, NULL, "x", 1, &r), 0);
	it_expect_error(&r, 404, "not_found");
	it_resp_free(&r);
	/* a client waiting for 100 Continue is refused before it sends the body */
	const char *ask = "PUT /fs/stream/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA HTTP/1.1\r\nHost: x\r\n"
			  "Content-Length: 1048576\r\nExpect: 100-continue\r\n\r\n";
	char *ans = it_raw(&srv, ask, strlen(ask), 1000);
	assert_non_null(ans);
	assert_true(strncmp(ans, "HTTP/1.1 404", 12) == 0);
	assert_null(strstr(ans, "100 Continue"));
	free(ans);
	it_expect_error_at(&srv, "GET", "/fs/stream/short", NULL, 404, "not_found");
	stream_err("DELETE", rtok, NULL, 0, 405, "method_not_allowed");
	free(rtok);
	free(wtok);
}

static void test_missing_parent(void **state)
{
	(void)state;
	struct it_resp r;
	char *dir = put_file("tr-par", "keep.txt", "k");
	free(mint("tr-par", "nodir/x.txt", "write", 0, &r));
	it_expect_error(&r, 404, "parent_missing");
	it_resp_free(&r);
	req("PUT", "/fs/write_stream?path=nodir/x.txt", "tr-par", "abc", 3, &r);
	it_expect_error(&r, 404, "parent_missing");
	it_resp_free(&r);

	/* minted while the parent existed, removed before the upload: 404,
	 * nothing created, and the token still good once the parent is back */
	const char *mk = "{\"path\":\"sub\"}";
	req("POST", "/fs/mkdir", "tr-par", mk, strlen(mk), &r);
	assert_int_equal(r.status, 201);
	it_resp_free(&r);
	char *tok = mint("tr-par", "sub/y.txt", "write", 0, NULL);
	assert_non_null(tok);
	const char *rm = "{\"path\":\"sub\",\"recursive\":true}";
	req("POST", "/fs/rm", "tr-par", rm, strlen(rm), &r);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
	stream_err("PUT", tok, "abc", 3, 404, "parent_missing");
	char *sub = xasprintf("%s/sub", dir);
	struct stat st;
	assert_int_equal(stat(sub, &st), -1);
	req("POST", "/fs/mkdir", "tr-par", mk, strlen(mk), &r);
	it_resp_free(&r);
	stream_http("PUT", tok, NULL, "abc", 3, &r);
	assert_int_equal(r.status, 201);
	it_resp_free(&r);
	free(sub);
	free(tok);
	free(dir);
}

static void test_cut_off_upload_leaves_old_file(void **state)
{
	(void)state;
	char *dir = put_file("tr-cut", "keep.txt", "the old content");
	char *before = listing("tr-cut", ".");
	char *tok = mint("tr-cut", "keep.txt", "write", 0, NULL);
	char *head = raw_put_head(tok);
	size_t hl = strlen(head);
	char *msg = xcalloc(1, hl + MIB);
	memcpy(msg, head, hl);
	memset(msg + hl, 'N', MIB);
	free(it_raw(&srv, msg, hl + MIB, 300));
	free(msg);
	free(head);

	assert_true(wait_state(tok, "failed", 5000));
	char *err = row_col(tok, "error");
	assert_non_null(strstr(err, "client left"));
	free(err);
	assert_read("tr-cut", "keep.txt", "the old content");
	char *after = listing("tr-cut", ".");
	assert_string_equal(after, before);
	assert_int_equal(count_temps(dir), 0);
	free(after);
	free(before);
	free(tok);
	free(dir);
}

static void test_kill9_mid_upload(void **state)
{
	(void)state;
	char *dir = put_file("tr-kill", "keep.txt", "survives a crash");
	char *before = listing("tr-kill", ".");
	char *tok = mint("tr-kill", "keep.txt", "write", 0, NULL);
	int fd = raw_open(&srv);
	char *head = raw_put_head(tok);
	raw_send(fd, head, strlen(head));
	char *chunk = xmalloc(MIB);
	memset(chunk, 'K', MIB);
	raw_send(fd, chunk, MIB);
	free(chunk);
	free(head);
	/* the temp file is there and growing: the upload is in flight */
	int tries = 0;
	while (count_temps(dir) < 1 && tries++ < 100)
		usleep(20000);
	assert_int_equal(count_temps(dir), 1);
	assert_true(wait_state(tok, "active", 2000));

	it_stop(&srv, SIGKILL);
	close(fd);
	assert_int_equal(count_temps(dir), 1); /* the crash left it: the restart must clean it */
	assert_int_equal(it_restart(&srv, NULL), 0);

	assert_read("tr-kill", "keep.txt", "survives a crash");
	char *after = listing("tr-kill", ".");
	assert_string_equal(after, before);
	assert_null(strstr(after, "sandboxd-tmp"));
	assert_int_equal(count_temps(dir), 0);
	assert_row(tok, "state", "failed");
	/* and the token stays spent */
	stream_err("PUT", tok, "x", 1, 410, "token_used");
	free(after);
	free(before);
	free(tok);
	free(dir);
}

static void test_over_upload_limit_and_head(void **state)
{
	(void)state;
	start_s2("max-upload-bytes=1000000");
	struct it_resp r;
	char *bearer = it_token(&s2, "acme", NULL);
	/* Content-Length over the limit: refused before a byte is written */
	char *big = xcalloc(1, 2000000);
	assert_int_equal(
	    it_http(&s2, "PUT", "/fs/write_stream?path=/workspace/big", bearer, NULL, big, 2000000, &r), 0);
	it_expect_error(&r, 413, "too_large");
	it_resp_free(&r);
	/* chunked over the limit: refused once it passes, nothing is left behind */
	struct io io = {.md = EVP_MD_CTX_new(), .total = 3000000, .seed = 1};
	EVP_DigestInit_ex(io.md, EVP_sha256(), NULL);
	char *body = NULL;
	long status =
	    curl_upload_chunked(&s2, "/fs/write_stream?path=/workspace/big", bearer, false, &io, &body);
	EVP_MD_CTX_free(io.md);
	assert_int_equal(status, 413);
	assert_non_null(strstr(body, "too_large"));
	free(body);
	assert_int_equal(it_http(&s2, "GET", "/fs/exists?path=/workspace/big", bearer, NULL, NULL, 0, &r), 0);
	assert_non_null(strstr(r.body, "false"));
	it_resp_free(&r);
	char *ws = xasprintf("%s/tenants/acme/workspace", s2.dir);
	assert_int_equal(count_temps(ws), 0);
	free(ws);

	/* HEAD of a token answers the headers and does not spend it */
	assert_int_equal(
	    it_http(&s2, "PUT", "/fs/write?path=/workspace/h.txt", bearer, NULL, "0123456789", 10, &r), 0);
	it_resp_free(&r);
	const char *mb = "{\"path\":\"/workspace/h.txt\",\"direction\":\"read\"}";
	assert_int_equal(it_http(&s2, "POST", "/fs/transfers", bearer, NULL, mb, strlen(mb), &r), 0);
	json_t *j = it_json(&r);
	char *url = xstrdup(json_string_value(json_object_get(j, "url")));
	json_decref(j);
	it_resp_free(&r);
	assert_int_equal(it_http(&s2, "HEAD", url, NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	char *cl = it_header(&r, "Content-Length");
	assert_string_equal(cl, "10");
	free(cl);
	it_resp_free(&r);
	assert_int_equal(it_http(&s2, "GET", url, NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "0123456789");
	it_resp_free(&r);
	free(url);
	free(big);
	free(bearer);
	it_cleanup(&s2);
	memset(&s2, 0, sizeof s2);
}

static void test_tenant_transfer_limit_429(void **state)
{
	(void)state;
	start_s2("tenant-max-transfers=1");
	struct it_resp r;
	char *acme = it_token(&s2, "acme", NULL);
	char *globex = it_token(&s2, "globex", NULL);
	assert_int_equal(
	    it_http(&s2, "PUT", "/fs/write?path=/workspace/f.txt", acme, NULL, "acme file", 9, &r), 0);
	it_resp_free(&r);
	assert_int_equal(
	    it_http(&s2, "PUT", "/fs/write?path=/workspace/g.txt", globex, NULL, "globex", 6, &r), 0);
	it_resp_free(&r);

	/* hold acme's only slot with an upload that never finishes */
	int fd = raw_open(&s2);
	char *head = xasprintf("PUT /fs/write_stream?path=/workspace/slow.bin HTTP/1.1\r\nHost: x\r\n"
			       "Authorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n0123456789",
			       acme);
	raw_send(fd, head, strlen(head));
	free(head);

	const char *mb = "{\"path\":\"/workspace/f.txt\",\"direction\":\"read\"}";
	assert_int_equal(it_http(&s2, "POST", "/fs/transfers", acme, NULL, mb, strlen(mb), &r), 0);
	assert_int_equal(r.status, 201); /* minting takes no slot */
	json_t *j = it_json(&r);
	char *url = xstrdup(json_string_value(json_object_get(j, "url")));
	json_decref(j);
	it_resp_free(&r);

	long got = 0;
	for (int i = 0; i < 100 && got != 429; i++) {
		assert_int_equal(
		    it_http(&s2, "GET", "/fs/read_stream?path=/workspace/f.txt", acme, NULL, NULL, 0, &r), 0);
		got = r.status;
		if (got != 429)
			it_resp_free(&r);
		usleep(20000);
	}
	it_expect_error(&r, 429, "too_many_requests");
	char *ra = it_header(&r, "Retry-After");
	assert_non_null(ra);
	assert_true(atoi(ra) >= 1);
	free(ra);
	it_resp_free(&r);
	it_expect_error_at(&s2, "GET", url, NULL, 429, "too_many_requests");
	/* another tenant is not affected */
	assert_int_equal(
	    it_http(&s2, "GET", "/fs/read_stream?path=/workspace/g.txt", globex, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "globex");
	it_resp_free(&r);

	/* the client leaves: the slot comes back, and the refused token was not spent */
	close(fd);
	got = 0;
	for (int i = 0; i < 100 && got != 200; i++) {
		assert_int_equal(it_http(&s2, "GET", url, NULL, NULL, NULL, 0, &r), 0);
		got = r.status;
		if (got != 200)
			it_resp_free(&r);
		usleep(20000);
	}
	assert_int_equal(got, 200);
	assert_string_equal(r.body, "acme file");
	it_resp_free(&r);
	free(url);
	free(acme);
	free(globex);
	it_cleanup(&s2);
	memset(&s2, 0, sizeof s2);
}

static void test_audit_row_of_token_route(void **state)
{
	(void)state;
	struct it_resp r;
	free(put_file("tr-audit-key", "a.txt", "audited"));
	char *tok = mint("tr-audit-key", "a.txt", "read", 0, NULL);
	/* the stream request names another session: the row carries the transfer's */
	const char *h[] = {"X-Session-Key: someone-else", NULL};
	stream_http("GET", tok, h, NULL, 0, &r);
	assert_int_equal(r.status, 200);
	it_resp_free(&r);
	char *aud = it_token(&srv, "acme", "audit:read");
	json_t *rec = NULL;
	for (int i = 0; i < 50 && !rec; i++) {
		assert_int_equal(it_http(&srv, "GET", "/audit?route=/fs/stream/%7Btoken%7D&limit=1000", aud,
					 NULL, NULL, 0, &r),
				 0);
		assert_int_equal(r.status, 200);
		json_t *j = it_json(&r);
		json_t *recs = json_object_get(j, "records");
		size_t k;
		json_t *v;
		json_array_foreach(recs, k, v) {
			const char *target = json_string_value(json_object_get(v, "target"));
			const char *sess = json_string_value(json_object_get(v, "session"));
			if (target && strstr(target, "/a.txt") && sess && strcmp(sess, "tr-audit-key") == 0)
				rec = json_incref(v);
		}
		json_decref(j);
		it_resp_free(&r);
		if (!rec)
			usleep(50000);
	}
	assert_non_null(rec);
	assert_string_equal(json_string_value(json_object_get(rec, "tenant")), "acme");
	assert_int_equal(json_integer_value(json_object_get(rec, "bytes_out")), 7);
	assert_int_equal(json_integer_value(json_object_get(rec, "status")), 200);
	json_decref(rec);
	/* another tenant's auditor does not see it */
	char *gaud = it_token(&srv, "globex", "audit:read");
	assert_int_equal(
	    it_http(&srv, "GET", "/audit?route=/fs/stream/%7Btoken%7D&limit=1000", gaud, NULL, NULL, 0, &r),
	    0);
	assert_null(strstr(r.body, "tr-audit-key"));
	it_resp_free(&r);
	/* the token is not in the server's log */
	size_t n = 0;
	char *log = it_read_file(srv.log, &n);
	assert_non_null(log);
	assert_null(memmem(log, n, tok, strlen(tok)));
	free(log);
	free(gaud);
	free(aud);
	free(tok);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mint_shape_scope_and_hash_only),
	    cmocka_unit_test(test_big_download_constant_memory),
	    cmocka_unit_test(test_big_chunked_upload_constant_memory),
	    cmocka_unit_test(test_single_use_under_race),
	    cmocka_unit_test(test_expiry),
	    cmocka_unit_test(test_range_resume),
	    cmocka_unit_test(test_wrong_direction_and_unknown),
	    cmocka_unit_test(test_missing_parent),
	    cmocka_unit_test(test_cut_off_upload_leaves_old_file),
	    cmocka_unit_test(test_audit_row_of_token_route),
	    cmocka_unit_test(test_over_upload_limit_and_head),
	    cmocka_unit_test(test_tenant_transfer_limit_429),
	    cmocka_unit_test(test_kill9_mid_upload),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
