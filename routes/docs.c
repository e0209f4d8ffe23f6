/* GET /docs/...: the built documentation site (mkdocs, docs/) from the
 * directory docs-dir, to anyone: a public route, so everything in the
 * path is hostile. Only regular files beneath docs-dir are served, found
 * by an fd-relative walk that never follows a symlink and never crosses a
 * mount (sbx_ws_open_child: openat2 with RESOLVE_BENEATH,
 * RESOLVE_NO_SYMLINKS, RESOLVE_NO_XDEV), after a lexical check that
 * refuses ".", "..", hidden names and empty segments; string checks are
 * not the boundary, the kernel's resolution is. A directory is its
 * index.html (and a directory named without its '/' is redirected to it,
 * so the site's relative links resolve); nothing is ever listed. Runs on
 * the file pool (RF_POOL), in the queue of requests that name no tenant. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/xmalloc.h"
#include "http/req.h"
#include "routes/routes.h"
#include "sandbox/workspace.h"

#define DOCS_PATH_MAX 1024	  /* longest page path accepted after /docs/ */
#define DOCS_FILE_MAX (16u << 20) /* a page larger than this is not served */

/* What the site is made of (mkdocs' output and its themes' assets). */
static const struct {
	const char *ext, *type;
} types[] = {
    {".html", "text/html; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".json", "application/json"},
    {".map", "application/json"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".jpg", "image/jpeg"},
    {".jpeg", "image/jpeg"},
    {".gif", "image/gif"},
    {".ico", "image/vnd.microsoft.icon"},
    {".woff", "font/woff"},
    {".woff2", "font/woff2"},
    {".ttf", "font/ttf"},
    {".eot", "application/vnd.ms-fontobject"},
    {".xml", "application/xml"},
    {".gz", "application/gzip"},
    {".txt", "text/plain; charset=utf-8"},
    {".yaml", "application/yaml"},
};

/* The site may run only its own scripts and styles and reach only this
 * server: a page (or a file an attacker got into docs-dir) cannot load
 * from or send to elsewhere, nor be framed. Inline scripts and styles are
 * allowed because mkdocs' themes use them. */
static const char docs_csp[] = "default-src 'self'; script-src 'self' 'unsafe-inline'; "
			       "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; "
			       "connect-src 'self'; worker-src 'self'; object-src 'none'; base-uri 'self'; "
			       "form-action 'self'; frame-ancestors 'none'";

static const char *content_type(const char *path)
{
	const char *dot = strrchr(path, '.');
	for (size_t i = 0; dot && !strchr(dot, '/') && i < sizeof types / sizeof types[0]; i++)
		if (strcasecmp(dot, types[i].ext) == 0)
			return types[i].type;
	return "application/octet-stream";
}

/* Whether rel (what follows /docs/, "" or ending in '/' for a directory)
 * names only plain segments: none empty, ".", "..", hidden, or too long. */
static bool rel_ok(const char *rel)
{
	size_t n = strlen(rel);
	if (n > DOCS_PATH_MAX)
		return false;
	for (const char *s = rel; *s;) {
		const char *e = strchr(s, '/');
		size_t len = e ? (size_t)(e - s) : strlen(s);
		if (len == 0 || len > SBX_NAME_MAX || s[0] == '.')
			return false;
		if (!e)
			break;
		s = e + 1;
	}
	return true;
}

/* Open rel beneath root, one segment at a time, following no symlink:
 * the fd (O_RDONLY) or a negative errno. */
static int open_beneath(int root, const char *rel)
{
	char path[DOCS_PATH_MAX + sizeof "index.html"];
	snprintf(path, sizeof path, "%s", rel);
	int dir = root, fd = -1;
	char *seg = path;
	for (char *slash; (slash = strchr(seg, '/')); seg = slash + 1) {
		*slash = '\0';
		int next = sbx_ws_open_child(dir, seg, O_PATH | O_DIRECTORY, 0);
		if (dir != root)
			close(dir);
		if (next < 0)
			return next;
		dir = next;
	}
	fd = sbx_ws_open_child(dir, seg, O_RDONLY, 0);
	if (dir != root)
		close(dir);
	return fd;
}

/* The file's bytes, whole: 0, or a negative errno (-EFBIG over the bound). */
static int read_page(int fd, size_t size, char **out)
{
	char *p = xmalloc(size ? size : 1);
	size_t got = 0;
	while (got < size) {
		ssize_t n = read(fd, p + got, size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int rc = n < 0 ? -errno : -EIO; /* shrank while read: not a page to serve */
			free(p);
			return rc;
		}
		got += (size_t)n;
	}
	*out = p;
	return 0;
}

/* 301 to "/docs/<rel>/" ("/docs/" for ""), rel percent-encoded but for its '/'s. */
static int redirect_to_dir(struct http_req *r, const char *rel)
{
	static const char hex[] = "0123456789ABCDEF";
	char loc[3 * DOCS_PATH_MAX + 16];
	size_t n = (size_t)snprintf(loc, sizeof loc, "/docs/");
	for (const unsigned char *s = (const unsigned char *)rel; *s && n + 4 < sizeof loc; s++) {
		if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		    strchr("-._~/", *s))
			loc[n++] = (char)*s;
		else {
			loc[n++] = '%';
			loc[n++] = hex[*s >> 4];
			loc[n++] = hex[*s & 15];
		}
	}
	if (*rel)
		loc[n++] = '/';
	loc[n] = '\0';
	struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return -ENOMEM;
	MHD_add_response_header(resp, "Location", loc);
	return http_reply_response(r, 301, resp);
}

static int not_installed(struct http_req *r)
{
	r->error_code = "docs_not_installed";
	return http_fail(r, -ENOENT,
			 "the documentation is not installed on this server (configuration key "
			 "docs-dir); the project's docs/ folder has the same pages");
}

/* Serve fd (the page rel names) or redirect when it is a directory. */
static int serve_fd(struct http_req *r, int fd, const char *rel, const char *path)
{
	struct stat st;
	char *body = NULL;
	if (fstat(fd, &st) < 0)
		return http_fail(r, -errno, "cannot read %s", path);
	if (S_ISDIR(st.st_mode) && *rel && rel[strlen(rel) - 1] != '/')
		return redirect_to_dir(r, rel);
	if (!S_ISREG(st.st_mode))
		return http_fail(r, -ENOENT, "no such page: /docs/%s", rel);
	if ((uint64_t)st.st_size > DOCS_FILE_MAX)
		return http_fail(r, -EIO, "/docs/%s is over the %u MiB bound of a page", rel,
				 DOCS_FILE_MAX >> 20);
	int rc = read_page(fd, (size_t)st.st_size, &body);
	if (rc < 0)
		return http_fail(r, rc, "cannot read /docs/%s", rel);
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer((size_t)st.st_size, body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return -ENOMEM;
	}
	MHD_add_response_header(resp, "Content-Type", content_type(path));
	MHD_add_response_header(resp, "Content-Security-Policy", docs_csp);
	r->bytes_out += (int64_t)st.st_size;
	return http_reply_response(r, 200, resp);
}

int route_docs(struct http_req *r)
{
	const char *dir = r->env->cfg->docs_dir;
	if (strcmp(r->url, "/docs") == 0)
		return redirect_to_dir(r, "");
	const char *rel = r->params[0] ? r->params[0] : "";
	http_set_target_raw(r, r->url, strlen(r->url));
	if (!rel_ok(rel))
		return http_fail(r, -ENOENT, "no such page: /docs/%s", rel);
	int root = dir && *dir ? open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
	if (root < 0)
		return not_installed(r);
	/* A directory's page is its index.html. */
	char path[DOCS_PATH_MAX + sizeof "index.html"];
	snprintf(path, sizeof path, "%s%s", rel, !*rel || rel[strlen(rel) - 1] == '/' ? "index.html" : "");
	int rc, fd = open_beneath(root, path);
	if (fd >= 0) {
		rc = serve_fd(r, fd, rel, path);
		close(fd);
	} else {
		int top = sbx_ws_open_child(root, "index.html", O_PATH, 0);
		rc = top < 0 ? not_installed(r) : http_fail(r, -ENOENT, "no such page: /docs/%s", rel);
		if (top >= 0)
			close(top);
	}
	close(root);
	return rc;
}
