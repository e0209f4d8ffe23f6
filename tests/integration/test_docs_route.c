/* GET /docs/ (routes/docs.c): the documentation site from a real
 * directory, to anyone. The pages, their types and headers and the
 * redirects a site's relative links need; then the hostile side:
 * traversal raw and percent-encoded, symlinks planted inside the
 * directory (to /etc/passwd, to /etc, relative ones climbing out, and one
 * to a page inside: no symlink is followed) and swapped in under load,
 * hidden names, a FIFO, a device, a hard link to a private file and
 * other files not everyone may read, directories never listed, methods
 * other than GET and HEAD refused; large pages streamed whole, and many
 * readers that read nothing costing no copy each; docs-dir missing,
 * empty or without its index.html answers docs_not_installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"

static struct it_server srv;
/* docs-dir is <top>/html: test_not_installed moves it away and back, as
 * a package removal and install would, under the running server. */
static char top[64] = "/tmp/sandboxd-docs-XXXXXX";
static char site[96];

static const char index_html[] = "<!doctype html><title>sandboxd</title><h1>sandboxd docs</h1>\n";
static const char guide_html[] = "<!doctype html><title>Guide</title><p>install and operate</p>\n";
static const char style_css[] = "body { font-family: sans-serif; }\n";

static void put(const char *rel, const char *text)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", site, rel);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(top))
		return -1;
	snprintf(site, sizeof site, "%s/html", top);
	if (it_sh(
		"cd %s && mkdir html && cd html && mkdir guide assets search css css/fonts .git rdir private",
		top) != 0)
		return -1;
	put("index.html", index_html);
	put("guide/index.html", guide_html);
	put("css/style.css", style_css);
	put("assets/app.js", "console.log('docs');\n");
	put("assets/logo.svg", "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n");
	put("assets/logo.png", "\x89PNG\r\n");
	put("css/fonts/f.woff", "wOFF");
	put("search/search_index.json", "{\"docs\": []}\n");
	put(".git/config", "[core]\n");
	put("race.html", "the page\n");
	put("rdir/index.html", "the page\n");
	put("private/index.html", "private dir\n");
	put("shared.html", "group only\n");
	/* What an attacker with a foothold in the directory would plant. */
	if (it_sh("cd %s && ln -s /etc/passwd passwd && ln -s /etc etc && ln -s ../../../../../etc/passwd "
		  "up.html"
		  " && ln -s index.html alias.html && ln -s /etc guide/sys && mkfifo fifo.html"
		  " && truncate -s 17M big.html && truncate -s 8M large.bin",
		  site) != 0)
		return -1;
	/* What is outside the site: a secret only its owner may read, and
	 * what the race swaps in (readable by anyone: the symlink is what
	 * must be refused, not the mode). */
	if (it_sh("cd %s && mkdir out out/dir && echo LEAKED-SECRET > out/secret && chmod 600 out/secret"
		  " && echo LEAKED-LINKED > out/open.html && chmod 644 out/open.html"
		  " && echo LEAKED-LINKED > out/dir/index.html && chmod 755 out out/dir"
		  " && ln -s %s/out/open.html html/race.alt && ln -s %s/out/dir html/rdir.alt"
		  " && chmod 700 html/private && chmod 640 html/shared.html"
		  " && ln out/secret html/notes.html && mknod html/zero.html c 1 5",
		  top, top, top) != 0)
		return -1;
	char set_site[128];
	snprintf(set_site, sizeof set_site, "docs-dir=%s", site);
	const char *const extra[] = {"--set", set_site, NULL};
	return it_start(&srv, extra);
}

static int teardown(void **state)
{
	(void)state;
	it_cleanup(&srv);
	it_sh("rm -rf %s", top);
	return 0;
}

static void expect_page(const char *path, const char *type, const char *body)
{
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", path, NULL, NULL, NULL, 0, &r), 0);
	if (r.status != 200)
		fprintf(stderr, "GET %s: %ld %s\n", path, r.status, r.body);
	it_expect_status(&r, 200);
	it_expect_header(&r, "Content-Type", type);
	if (body) {
		assert_int_equal(r.len, strlen(body));
		assert_memory_equal(r.body, body, r.len);
	}
	char *csp = it_header(&r, "Content-Security-Policy");
	assert_non_null(csp);
	assert_non_null(strstr(csp, "default-src 'self'"));
	assert_non_null(strstr(csp, "frame-ancestors 'none'"));
	free(csp);
	it_expect_header(&r, "X-Content-Type-Options", "nosniff");
	char *cookie = it_header(&r, "Set-Cookie");
	assert_null(cookie);
	it_resp_free(&r);
}

static void test_pages_and_types(void **state)
{
	(void)state;
	expect_page("/docs/", "text/html; charset=utf-8", index_html);
	expect_page("/docs/index.html", "text/html; charset=utf-8", index_html);
	expect_page("/docs/guide/", "text/html; charset=utf-8", guide_html);
	expect_page("/docs/guide/index.html", "text/html; charset=utf-8", guide_html);
	expect_page("/docs/css/style.css", "text/css; charset=utf-8", style_css);
	expect_page("/docs/assets/app.js", "text/javascript; charset=utf-8", NULL);
	expect_page("/docs/assets/logo.svg", "image/svg+xml", NULL);
	expect_page("/docs/assets/logo.png", "image/png", NULL);
	expect_page("/docs/css/fonts/f.woff", "font/woff", NULL);
	expect_page("/docs/search/search_index.json", "application/json", NULL);
	/* A query string is not part of the page's name. */
	expect_page("/docs/css/style.css?v=3", "text/css; charset=utf-8", style_css);
}

static void expect_redirect(const char *path, const char *to)
{
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", path, NULL, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 301);
	it_expect_header(&r, "Location", to);
	it_resp_free(&r);
}

/* A site's relative links resolve against a directory's URL only when it
 * ends in '/'. */
static void test_directory_redirects(void **state)
{
	(void)state;
	expect_redirect("/docs", "/docs/");
	expect_redirect("/docs/guide", "/docs/guide/");
}

static void test_head(void **state)
{
	(void)state;
	struct it_resp r;
	assert_int_equal(it_http(&srv, "HEAD", "/docs/css/style.css", NULL, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	it_expect_header(&r, "Content-Type", "text/css; charset=utf-8");
	char want[16];
	snprintf(want, sizeof want, "%zu", strlen(style_css));
	it_expect_header(&r, "Content-Length", want);
	assert_int_equal(r.len, 0);
	it_resp_free(&r);
}

static void expect_not_found(struct it_server *s, const char *path, const char *code)
{
	struct it_resp r;
	assert_int_equal(it_http(s, "GET", path, NULL, NULL, NULL, 0, &r), 0);
	if (r.status != 404)
		fprintf(stderr, "GET %s: %ld %.200s\n", path, r.status, r.body ? r.body : "");
	it_expect_error(&r, 404, code);
	it_resp_free(&r);
}

/* Missing pages, hidden names, and directories: never listed. */
static void test_not_found_and_no_listing(void **state)
{
	(void)state;
	expect_not_found(&srv, "/docs/nope.html", "not_found");
	expect_not_found(&srv, "/docs/guide/nope/", "not_found");
	expect_not_found(&srv, "/docs/assets/", "not_found"); /* a directory without index.html */
	expect_not_found(&srv, "/docs/.git/config", "not_found");
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/docs/assets/", NULL, NULL, NULL, 0, &r), 0);
	assert_null(strstr(r.body, "logo.svg"));
	assert_null(strstr(r.body, "app.js"));
	it_resp_free(&r);
}

/* Symlinks planted inside the directory are never followed: out to
 * /etc/passwd, through a link to /etc, climbing with "..", and even to a
 * page inside. */
static void test_symlinks_refused(void **state)
{
	(void)state;
	static const char *const paths[] = {"/docs/passwd",	      "/docs/etc/passwd", "/docs/up.html",
					    "/docs/guide/sys/passwd", "/docs/alias.html", "/docs/etc/"};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		struct it_resp r;
		assert_int_equal(it_http(&srv, "GET", paths[i], NULL, NULL, NULL, 0, &r), 0);
		assert_null(strstr(r.body ? r.body : "", "root:"));
		if (r.status != 404)
			fprintf(stderr, "GET %s: %ld\n", paths[i], r.status);
		it_expect_error(&r, 404, "not_found");
		it_resp_free(&r);
	}
}

/* Raw requests, as a client that does not tidy its paths sends them
 * (libcurl would remove the dot segments): literal and percent-encoded
 * "..", encoded slashes, doubled slashes, a NUL. */
static void test_traversal_raw(void **state)
{
	(void)state;
	static const char *const targets[] = {
	    "/docs/../etc/passwd",
	    "/docs/../../../../etc/passwd",
	    "/docs/guide/../../etc/passwd",
	    "/docs/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
	    "/docs/%2E%2E%2F%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
	    "/docs/guide/..%2f..%2f..%2fetc%2fpasswd",
	    "/docs/.%2e/.%2e/etc/passwd",
	    "/docs//etc/passwd",
	    "/docs/%2fetc%2fpasswd",
	    "/docs/guide/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
	    "/docs/guide/..",
	};
	for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
		char req[512];
		int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
				 targets[i]);
		char *resp = it_raw(&srv, req, (size_t)n, 5000);
		assert_non_null(resp);
		if (strncmp(resp, "HTTP/1.1 404 ", 13) != 0 && strncmp(resp, "HTTP/1.1 400 ", 13) != 0)
			fprintf(stderr, "GET %s answered:\n%.300s\n", targets[i], resp);
		assert_true(strncmp(resp, "HTTP/1.1 404 ", 13) == 0 ||
			    strncmp(resp, "HTTP/1.1 400 ", 13) == 0);
		assert_null(strstr(resp, "root:"));
		free(resp);
	}
	/* libmicrohttpd hands the path over cut at a decoded NUL: what is
	 * left, "/docs/", is still a page beneath docs-dir, never the file
	 * the rest names. */
	static const char nul[] =
	    "GET /docs/%00/../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	char *resp = it_raw(&srv, nul, sizeof nul - 1, 5000);
	assert_non_null(resp);
	assert_null(strstr(resp, "root:"));
	free(resp);
	assert_true(it_alive(&srv));
}

/* What is not a regular file: a FIFO (opened without blocking, never
 * read) and a character device (/dev/zero's numbers: endless if read). */
static void test_special_files(void **state)
{
	(void)state;
	expect_not_found(&srv, "/docs/fifo.html", "not_found");
	expect_not_found(&srv, "/docs/zero.html", "not_found");
	assert_true(it_alive(&srv));
}

/* A page is streamed from its file, not held in memory: a large one is
 * served whole (its length said by HEAD too). */
static void test_large_page(void **state)
{
	(void)state;
	struct it_resp r;
	assert_int_equal(it_http(&srv, "HEAD", "/docs/big.html", NULL, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	it_expect_header(&r, "Content-Length", "17825792");
	assert_int_equal(r.len, 0);
	it_resp_free(&r);
	assert_int_equal(it_http(&srv, "GET", "/docs/big.html", NULL, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, 17825792);
	it_resp_free(&r);
}

/* Read one response's head (through its blank line) from fd within the
 * deadline: whether it came and says 200. The body is left unread. */
static bool head_200(int fd, int timeout_ms)
{
	char got[2048];
	size_t n = 0;
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	while (n < sizeof got - 1 && poll(&pfd, 1, timeout_ms) > 0) {
		/* one byte at a time: nothing of the body is taken off the socket */
		ssize_t k = recv(fd, got + n, 1, 0);
		if (k <= 0)
			return false;
		got[++n] = '\0';
		if (n >= 4 && memcmp(got + n - 4, "\r\n\r\n", 4) == 0)
			return strncmp(got, "HTTP/1.1 200 ", 13) == 0;
	}
	return false;
}

/* Anyone may ask for the same large page on many connections and read
 * none of it: the server's memory must not grow by a copy per reader
 * (16 MiB pages on the default 1024 connections of one address would be
 * 16 GiB). Sixteen readers of an 8 MiB file: 128 MiB if each holds a
 * copy; streamed, the bytes wait in the kernel's socket buffers. */
static void test_many_readers_bounded_memory(void **state)
{
	(void)state;
	enum { READERS = 16 };
	static const char req[] = "GET /docs/large.bin HTTP/1.1\r\nHost: x\r\n\r\n";
	int fds[READERS];
	long rss0 = it_rss_kib(&srv);
	int fds0 = it_fd_count(&srv);
	assert_true(rss0 > 0 && fds0 > 0);
	for (int i = 0; i < READERS; i++) {
		fds[i] = it_connect(&srv);
		assert_true(fds[i] >= 0);
		int small = 4096;
		setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
		assert_int_equal(send(fds[i], req, sizeof req - 1, MSG_NOSIGNAL), (ssize_t)(sizeof req - 1));
	}
	for (int i = 0; i < READERS; i++)
		assert_true(head_200(fds[i], 10000));
	long grown = it_rss_kib(&srv) - rss0;
	fprintf(stderr, "server RSS grew by %ld KiB with %d readers of an 8 MiB page\n", grown, READERS);
	for (int i = 0; i < READERS; i++)
		close(fds[i]);
	assert_true(grown < 32 * 1024);
	/* Each reader's file is closed with its connection: no fd is left. */
	int fds1 = -1;
	for (int waited = 0; waited < 10000; waited += 20) {
		fds1 = it_fd_count(&srv);
		if (fds1 <= fds0)
			break;
		usleep(20000);
	}
	if (fds1 > fds0)
		fprintf(stderr, "server fds: %d before the readers, %d after they left\n", fds0, fds1);
	assert_true(fds1 <= fds0);
	assert_true(it_alive(&srv));
}

/* The route is public: it serves only what the filesystem lets anyone
 * read. Not a file only its owner or group may read, whether it is a
 * hard link to a secret elsewhere (a link keeps the secret's mode) or a
 * file the operator left private, nor a page in a directory others may
 * not enter; the server's own rights (it may run as root) are not the
 * measure. */
static void test_private_files_refused(void **state)
{
	(void)state;
	static const char *const paths[] = {"/docs/notes.html", "/docs/shared.html", "/docs/private/",
					    "/docs/private/index.html"};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		struct it_resp r;
		assert_int_equal(it_http(&srv, "GET", paths[i], NULL, NULL, NULL, 0, &r), 0);
		if (r.status != 404)
			fprintf(stderr, "GET %s: %ld %.100s\n", paths[i], r.status, r.body ? r.body : "");
		assert_null(strstr(r.body ? r.body : "", "LEAKED"));
		it_expect_error(&r, 404, "not_found");
		it_resp_free(&r);
	}
}

/* A directory that is not a site (no index.html at its top: docs-dir set
 * to the data directory, say) serves nothing, not its other files. */
static void test_not_a_site_serves_nothing(void **state)
{
	(void)state;
	static const char *const paths[] = {"/docs/css/style.css", "/docs/guide/", "/docs/guide/index.html"};
	struct it_resp r[3];
	assert_int_equal(it_sh("mv %s/index.html %s/index.away", site, top), 0);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(it_http(&srv, "GET", paths[i], NULL, NULL, NULL, 0, &r[i]), 0);
	/* the site back before any verdict, for the tests after this one */
	assert_int_equal(it_sh("mv %s/index.away %s/index.html", top, site), 0);
	for (size_t i = 0; i < 3; i++) {
		if (r[i].status != 404)
			fprintf(stderr, "GET %s without the index: %ld\n", paths[i], r[i].status);
		it_expect_error(&r[i], 404, "docs_not_installed");
		it_resp_free(&r[i]);
	}
	expect_page("/docs/css/style.css", "text/css; charset=utf-8", style_css);
}

/* A file or a directory swapped for a symlink while requests come in
 * (renameat2 RENAME_EXCHANGE, atomic): each answer is the page or a
 * refusal, never what the link points at. */
struct swapper {
	atomic_bool stop;
	const char *a, *b;
	long swaps;
};

static void *swap_loop(void *p)
{
	struct swapper *w = p;
	char a[160], b[160];
	snprintf(a, sizeof a, "%s/%s", site, w->a);
	snprintf(b, sizeof b, "%s/%s", site, w->b);
	while (!atomic_load(&w->stop))
		if (renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0)
			w->swaps++;
	return NULL;
}

static void race(const char *a, const char *b, const char *path)
{
	struct swapper w = {.a = a, .b = b};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, swap_loop, &w), 0);
	int pages = 0, refused = 0;
	for (int i = 0; i < 300; i++) {
		struct it_resp r;
		assert_int_equal(it_http(&srv, "GET", path, NULL, NULL, NULL, 0, &r), 0);
		assert_null(strstr(r.body ? r.body : "", "LEAKED"));
		if (r.status == 200)
			pages++;
		else
			refused++;
		it_resp_free(&r);
	}
	atomic_store(&w.stop, true);
	pthread_join(th, NULL);
	fprintf(stderr, "GET %s under %ld swaps: %d pages, %d refused\n", path, w.swaps, pages, refused);
	/* put it back as it was: an even number of swaps */
	if (w.swaps % 2) {
		char pa[160], pb[160];
		snprintf(pa, sizeof pa, "%s/%s", site, a);
		snprintf(pb, sizeof pb, "%s/%s", site, b);
		assert_int_equal(renameat2(AT_FDCWD, pa, AT_FDCWD, pb, RENAME_EXCHANGE), 0);
	}
	assert_true(w.swaps > 0);
}

static void test_symlink_swap_race(void **state)
{
	(void)state;
	race("race.html", "race.alt", "/docs/race.html");
	race("rdir", "rdir.alt", "/docs/rdir/");
}

static void test_methods_refused(void **state)
{
	(void)state;
	static const char *const methods[] = {"POST", "PUT", "DELETE", "PATCH"};
	static const char *const paths[] = {"/docs/", "/docs/index.html", "/docs"};
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
		for (size_t j = 0; j < sizeof paths / sizeof paths[0]; j++) {
			struct it_resp r;
			assert_int_equal(it_http(&srv, methods[i], paths[j], NULL, NULL, "x", 1, &r), 0);
			it_expect_error(&r, 405, "method_not_allowed");
			it_expect_header(&r, "Allow", "GET");
			it_resp_free(&r);
		}
	/* and the page is still there, unchanged */
	expect_page("/docs/index.html", "text/html; charset=utf-8", index_html);
}

/* No site: none at all, or an empty directory; then the site installed
 * again is served at once (docs-dir is opened per request). */
static void test_not_installed(void **state)
{
	(void)state;
	assert_int_equal(it_sh("mv %s %s/away", site, top), 0);
	expect_not_found(&srv, "/docs/", "docs_not_installed");
	expect_not_found(&srv, "/docs/guide/index.html", "docs_not_installed");
	/* the path's checks come first there too */
	expect_not_found(&srv, "/docs/.git/config", "not_found");
	assert_int_equal(it_sh("mkdir %s", site), 0);
	expect_not_found(&srv, "/docs/", "docs_not_installed");
	expect_not_found(&srv, "/docs/guide/", "docs_not_installed");
	assert_int_equal(it_sh("rmdir %s && mv %s/away %s", site, top, site), 0);
	expect_page("/docs/", "text/html; charset=utf-8", index_html);
}

/* The dashboard links to the site, in a tab of its own. */
static void test_dashboard_links(void **state)
{
	(void)state;
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/dashboard", NULL, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	assert_non_null(strstr(r.body, "href=\"/docs/\" target=\"_blank\" rel=\"noopener noreferrer\""));
	it_resp_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pages_and_types),
	    cmocka_unit_test(test_directory_redirects),
	    cmocka_unit_test(test_head),
	    cmocka_unit_test(test_not_found_and_no_listing),
	    cmocka_unit_test(test_symlinks_refused),
	    cmocka_unit_test(test_traversal_raw),
	    cmocka_unit_test(test_special_files),
	    cmocka_unit_test(test_large_page),
	    cmocka_unit_test(test_many_readers_bounded_memory),
	    cmocka_unit_test(test_private_files_refused),
	    cmocka_unit_test(test_not_a_site_serves_nothing),
	    cmocka_unit_test(test_symlink_swap_race),
	    cmocka_unit_test(test_methods_refused),
	    cmocka_unit_test(test_not_installed),
	    cmocka_unit_test(test_dashboard_links),
	};
	return cmocka_run_group_tests_name("docs_route", tests, setup, teardown);
}
