/* libsandboxd's streams: 1 GiB up and down in constant client memory
 * (measured as the growth of a child process's peak RSS, a bound, not a
 * timing), resuming a download at an offset, fd-based transfers and
 * transfer tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client_test.h"
#include "common/xmalloc.h"

#define MIB (1024ull * 1024ull)
#define BIG (1024ull * MIB)
#define RSS_GROWTH_MAX_KIB (64 * 1024) /* 1/16 of the size: far below it */

static struct it_server srv;
static char *tok;
static const struct it_tok toks[] = {{&tok, "acme", NULL}};

CT_SERVER_FIXTURE(srv, NULL, toks)

/* Deterministic bytes (xorshift64), hashed as they are produced. */
struct gen {
	uint64_t state, left;
	EVP_MD_CTX *md;
};

static ssize_t gen_source(void *arg, void *buf, size_t cap)
{
	struct gen *g = arg;
	size_t n = cap < g->left ? cap : (size_t)g->left;
	n &= ~(size_t)7;
	if (n == 0 && g->left > 0)
		n = (size_t)g->left; /* the size is a multiple of 8 here */
	for (size_t i = 0; i + 8 <= n; i += 8) {
		g->state ^= g->state << 13;
		g->state ^= g->state >> 7;
		g->state ^= g->state << 17;
		memcpy((char *)buf + i, &g->state, 8);
	}
	EVP_DigestUpdate(g->md, buf, n);
	g->left -= n;
	return (ssize_t)n;
}

static int hash_sink(void *arg, const void *data, size_t len)
{
	EVP_DigestUpdate(arg, data, len);
	return 0;
}

static void hex(EVP_MD_CTX *md, char out[65])
{
	unsigned char d[32];
	EVP_DigestFinal_ex(md, d, NULL);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* Up, then down, size bytes: 0 when both ends agree on every byte. */
static int roundtrip(struct sbxc *h, const char *path, uint64_t size)
{
	struct gen g = {.state = 0x9e3779b97f4a7c15ull, .left = size, .md = EVP_MD_CTX_new()};
	EVP_DigestInit_ex(g.md, EVP_sha256(), NULL);
	struct sbxc_upload up;
	struct sbxc_err e;
	char sent[65], got[65];
	int rc = sbxc_write_file_stream(h, NULL, path, (int64_t)size, gen_source, &g, &up, &e);
	hex(g.md, sent);
	EVP_MD_CTX_free(g.md);
	if (rc != 0 || up.size != size || strcmp(up.sha256, sent) != 0) {
		fprintf(stderr, "upload: rc %d (%s) size %llu\n", rc, e.message, (unsigned long long)up.size);
		return -1;
	}
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	uint64_t total = 0;
	rc = sbxc_read_file_stream(h, NULL, path, 0, hash_sink, md, &total, &e);
	hex(md, got);
	EVP_MD_CTX_free(md);
	if (rc != 0 || total != size || strcmp(got, sent) != 0) {
		fprintf(stderr, "download: rc %d (%s) total %llu\n", rc, e.message,
			(unsigned long long)total);
		return -1;
	}
	return 0;
}

/* The same through the writer (pieces of 1000 bytes) and the reader
 * (pieces of 4 KiB). */
static int roundtrip_pull(struct sbxc *h, const char *path, uint64_t size)
{
	struct gen g = {.state = 0x2545f4914f6cdd1dull, .left = size, .md = EVP_MD_CTX_new()};
	EVP_DigestInit_ex(g.md, EVP_sha256(), NULL);
	struct sbxc_writer *w = NULL;
	struct sbxc_err e;
	char piece[4096], sent[65], got[65];
	int rc = sbxc_writer_open(h, NULL, path, (int64_t)size, &w, &e);
	while (rc == 0 && g.left > 0) {
		ssize_t n = gen_source(&g, piece, 1000);
		rc = sbxc_writer_write(w, piece, (size_t)n, &e);
	}
	struct sbxc_upload up = {0};
	if (rc == 0)
		rc = sbxc_writer_finish(w, &up, &e);
	sbxc_writer_close(&w);
	hex(g.md, sent);
	EVP_MD_CTX_free(g.md);
	if (rc != 0 || up.size != size || strcmp(up.sha256, sent) != 0) {
		fprintf(stderr, "writer: rc %d (%s) size %llu\n", rc, e.message, (unsigned long long)up.size);
		return -1;
	}
	struct sbxc_reader *r = NULL;
	int64_t len = 0;
	uint64_t total = 0;
	if (sbxc_reader_open(h, NULL, path, 0, &r, &len, &e) != 0 || len != (int64_t)size)
		return -1;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	ssize_t n;
	while ((n = sbxc_reader_read(r, piece, sizeof piece, &e)) > 0) {
		EVP_DigestUpdate(md, piece, (size_t)n);
		total += (uint64_t)n;
	}
	sbxc_reader_close(&r);
	hex(md, got);
	EVP_MD_CTX_free(md);
	if (n != 0 || total != size || strcmp(got, sent) != 0) {
		fprintf(stderr, "reader: %zd (%s) total %llu\n", n, e.message, (unsigned long long)total);
		return -1;
	}
	return 0;
}

static long peak_rss_kib(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

/* The child's part: warm up, then 1 GiB up and down with callbacks and
 * again with the writer and the reader; prints "ok before after". */
static int child_main(void)
{
	struct sbxc *h = ct_client(getenv("SBXC_CHILD_BASE"), getenv("SBXC_CHILD_TOKEN"), NULL);
	int ok = h && roundtrip(h, "warm.bin", 8 * MIB) == 0 && roundtrip_pull(h, "warm.bin", 8 * MIB) == 0;
	long before = peak_rss_kib();
	ok = ok && roundtrip(h, "big.bin", BIG) == 0 && roundtrip_pull(h, "big.bin", BIG) == 0;
	long after = peak_rss_kib();
	printf("%d %ld %ld\n", ok, before, after);
	sbxc_free(&h);
	curl_global_cleanup();
	return ok ? 0 : 1;
}

/* In a child process of its own (this binary again), so that its peak RSS
 * is the client's alone; without ASan's quarantine of freed memory
 * (256 MiB by default), which would count libcurl's churn of small
 * buffers as growth that a real client does not have. */
static void test_gib_each_way_constant_memory(void **state)
{
	(void)state;
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 1);
		const char *asan = getenv("ASAN_OPTIONS");
		char *opts = xasprintf("%s%squarantine_size_mb=0", asan ? asan : "", asan ? ":" : "");
		setenv("ASAN_OPTIONS", opts, 1);
		setenv("SBXC_CHILD_BASE", srv.base, 1);
		setenv("SBXC_CHILD_TOKEN", tok, 1);
		execl("/proc/self/exe", "client_test_lib_stream", "--child", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char line[96] = {0};
	size_t n = 0;
	for (ssize_t k; n < sizeof line - 1 && (k = read(p[0], line + n, sizeof line - 1 - n)) > 0;)
		n += (size_t)k;
	close(p[0]);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(n > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	int ok = 0;
	long before = 0, after = 0;
	assert_int_equal(sscanf(line, "%d %ld %ld", &ok, &before, &after), 3);
	fprintf(stderr, "client peak RSS: %ld KiB before, %ld KiB after 1 GiB each way, twice\n", before,
		after);
	assert_int_equal(ok, 1);
	assert_true(after - before < RSS_GROWTH_MAX_KIB);
	struct sbxc *h = ct_client(srv.base, tok, NULL);
	struct sbxc_err e;
	assert_int_equal(sbxc_rm(h, NULL, "big.bin", false, false, NULL, &e), 0);
	sbxc_free(&h);
}

static int stop_at_once(void *arg, const void *data, size_t len)
{
	(void)arg;
	(void)data;
	(void)len;
	return 1;
}

static void test_offsets_fds_and_tokens(void **state)
{
	(void)state;
	struct sbxc *h = ct_client(srv.base, tok, NULL);
	struct sbxc_err e;
	assert_int_equal(sbxc_write_file(h, NULL, "abc.txt", "0123456789", 10, NULL, &e), 0);
	/* resume at an offset */
	ct_expect_stream(h, NULL, "abc.txt", 4, "456789");
	uint64_t total = 0;
	/* a receiver that stops */
	assert_int_equal(sbxc_read_file_stream(h, NULL, "abc.txt", 0, stop_at_once, NULL, &total, &e),
			 -ECANCELED);
	/* fds both ways */
	char path[] = "/tmp/sbxc-fd-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(sbxc_read_file_to_fd(h, NULL, "abc.txt", fd, &total, &e), 0);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	struct sbxc_upload up;
	assert_int_equal(sbxc_write_file_from_fd(h, NULL, "copy.txt", fd, &up, &e), 0);
	assert_int_equal(up.size, 10);
	assert_string_equal(up.sha256, "84d89877f0d4041efb6bf91a16f0248f2fd573e6af05c19f96bedb9f882f7882");
	close(fd);
	unlink(path);
	/* a missing parent: the stream does not create directories */
	fd = open("/dev/null", O_RDONLY);
	assert_int_equal(sbxc_write_file_from_fd(h, NULL, "no/dir/x", fd, &up, &e), -ENOENT);
	assert_string_equal(e.code, "parent_missing");
	close(fd);
	/* a token anyone may spend once */
	struct sbxc_transfer t;
	assert_int_equal(sbxc_transfer_mint(h, NULL, "copy.txt", false, 30, &t, &e), 0);
	assert_string_equal(t.direction, "read");
	assert_true(strncmp(t.url, "/fs/stream/", 11) == 0 && t.expires_at[0]);
	sbxc_free(&h);
}

static void test_reader_and_writer(void **state)
{
	(void)state;
	struct sbxc *h = ct_client(srv.base, tok, NULL);
	struct sbxc_err e;
	assert_int_equal(roundtrip_pull(h, "pull.bin", 3 * MIB + 17 * 8), 0);
	assert_int_equal(roundtrip_pull(h, "empty.bin", 0), 0);
	/* a reader from an offset, read in small pieces */
	assert_int_equal(sbxc_write_file(h, NULL, "abc.txt", "0123456789", 10, NULL, &e), 0);
	struct sbxc_reader *r = NULL;
	int64_t size = 0;
	assert_int_equal(sbxc_reader_open(h, NULL, "abc.txt", 3, &r, &size, &e), 0);
	assert_int_equal(size, 7);
	char got[16] = {0};
	size_t n = 0;
	ssize_t k;
	while ((k = sbxc_reader_read(r, got + n, 2, &e)) > 0)
		n += (size_t)k;
	assert_int_equal(k, 0);
	assert_string_equal(got, "3456789");
	sbxc_reader_close(&r);
	assert_int_equal(sbxc_reader_open(h, NULL, "nope.txt", 0, &r, NULL, &e), -ENOENT);
	assert_null(r);
	/* refused before the body: a missing parent */
	struct sbxc_writer *w = NULL;
	assert_int_equal(sbxc_writer_open(h, NULL, "no/dir/x", 5, &w, &e), -ENOENT);
	assert_string_equal(e.code, "parent_missing");
	assert_null(w);
	/* a writer closed before its end: the old file stays */
	assert_int_equal(sbxc_writer_open(h, NULL, "abc.txt", -1, &w, &e), 0);
	static char junk[1 << 20];
	assert_int_equal(sbxc_writer_write(w, junk, sizeof junk, &e), 0);
	sbxc_writer_close(&w);
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(sbxc_read_file(h, NULL, "abc.txt", &data, &len, &e), 0);
	assert_string_equal(data, "0123456789");
	free(data);
	/* a reader closed early: the next calls work */
	assert_int_equal(sbxc_reader_open(h, NULL, "pull.bin", 0, &r, NULL, &e), 0);
	assert_int_equal(sbxc_reader_read(r, got, 8, &e), 8);
	sbxc_reader_close(&r);
	bool yes = false;
	assert_int_equal(sbxc_exists(h, NULL, "pull.bin", &yes, &e), 0);
	assert_true(yes);
	sbxc_free(&h);
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--child") == 0) {
		curl_global_init(CURL_GLOBAL_ALL);
		return child_main();
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_offsets_fds_and_tokens),
	    cmocka_unit_test(test_reader_and_writer),
	    cmocka_unit_test(test_gib_each_way_constant_memory),
	};
	return cmocka_run_group_tests_name("libsandboxd streams", tests, setup, teardown);
}
