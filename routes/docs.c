/* GET /docs/...: the built documentation site (mkdocs, docs/) from the
 * directory docs-dir, to anyone: a public route, so everything in the
 * path is hostile. Only regular files beneath docs-dir are served, found
 * by an fd-relative walk that never follows a symlink and never crosses a
 * mount (sbx_ws_open_child: openat2 with RESOLVE_BENEATH,
 * RESOLVE_NO_SYMLINKS, RESOLVE_NO_XDEV), after a lexical check that
 * refuses ".", "..", hidden names and empty segments; string checks are
 * not the boundary, the kernel's resolution is. Only what everyone may
 * read is served (files readable by others, in directories others may
 * enter), and only from a site: docs-dir with its index.html. A directory
 * is its index.html (and a directory named without its '/' is redirected
 * to it, so the site's relative links resolve); nothing is ever listed.
 * Pages are streamed from their file, of any size. Runs on the file pool
 * (RF_POOL), in the queue of requests that name no tenant; it only opens
 * and stats there, the bytes go out from the event thread. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "http/req.h"
#include "http/response.h"
#include "routes/routes.h"
#include "sandbox/workspace.h"

#define DOCS_PATH_MAX 1024 /* longest page path accepted after /docs/ */

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

/* What anyone may read: the route is public, so the measure is the
 * file's mode for others, not the server's own rights (it may run as
 * root). A hard link to a private file elsewhere keeps that file's mode;
 * a docs-dir set to a directory of private files serves none of them. */
static bool public_mode(int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return false;
	return S_ISDIR(st.st_mode) ? (st.st_mode & S_IXOTH) != 0 : (st.st_mode & S_IROTH) != 0;
}

static const char private_detail[] =
    "not served: a file or directory on its way that others may not read (a public route serves "
    "only what everyone may read)";

/* Open rel beneath root, one segment at a time, following no symlink and
 * passing only directories everyone may enter: the fd (O_RDONLY) or a
 * negative errno (-EACCES: a directory on the way is private). */
static int open_beneath(int root, const char *rel)
{
	char path[DOCS_PATH_MAX + sizeof "index.html"];
	snprintf(path, sizeof path, "%s", rel);
	int dir = root;
	char *seg = path;
	for (char *slash; (slash = strchr(seg, '/')); seg = slash + 1) {
		*slash = '\0';
		int next = sbx_ws_open_child(dir, seg, O_PATH | O_DIRECTORY, 0);
		if (dir != root)
			close(dir);
		if (next >= 0 && !public_mode(next)) {
			close(next);
			next = -EACCES;
		}
		if (next < 0)
			return next;
		dir = next;
	}
	int fd = sbx_ws_open_child(dir, seg, O_RDONLY, 0);
	if (dir != root)
		close(dir);
	return fd;
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
	struct http_response *resp = http_response_static(NULL, 0);
	if (!resp)
		return -ENOMEM;
	http_response_header(resp, "Location", loc);
	return http_reply_response(r, 301, resp);
}

static int not_installed(struct http_req *r)
{
	r->error_code = "docs_not_installed";
	return http_fail(r, -ENOENT,
			 "the documentation is not installed on this server (configuration key "
			 "docs-dir); the project's docs/ folder has the same pages");
}

/* Whether docs-dir holds a site: its index.html, a regular file anyone
 * may read. A directory without one (the data directory, set there by
 * mistake) serves nothing at all, not its other files. */
static bool site_installed(int root)
{
	if (!public_mode(root))
		return false;
	int top = sbx_ws_open_child(root, "index.html", O_PATH, 0);
	struct stat st;
	bool ok = top >= 0 && fstat(top, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & S_IROTH);
	if (top >= 0)
		close(top);
	return ok;
}

/* Serve fd (the page rel names; the response owns it once made) or
 * redirect when it is a directory. The page is streamed from the file
 * (sendfile), never copied into memory: many readers that read slowly
 * cost an fd each, not a page each. */
static int serve_fd(struct http_req *r, int fd, const char *rel, const char *path)
{
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int rc = -errno;
		close(fd);
		return http_fail(r, rc, "cannot read %s", path);
	}
	if (S_ISDIR(st.st_mode) && (st.st_mode & S_IXOTH) && *rel && rel[strlen(rel) - 1] != '/') {
		close(fd);
		return redirect_to_dir(r, rel);
	}
	if (!S_ISREG(st.st_mode) || !(st.st_mode & S_IROTH)) {
		close(fd);
		if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
			r->log_detail = private_detail;
		return http_fail(r, -ENOENT, "no such page: /docs/%s", rel);
	}
	struct http_response *resp = http_response_fd(fd, 0, (uint64_t)st.st_size);
	if (!resp) {
		close(fd);
		return -ENOMEM;
	}
	http_response_header(resp, "Content-Type", content_type(path));
	http_response_header(resp, "Content-Security-Policy", docs_csp);
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
	if (root < 0 || !site_installed(root)) {
		if (root >= 0)
			close(root);
		return not_installed(r);
	}
	/* A directory's page is its index.html. */
	char path[DOCS_PATH_MAX + sizeof "index.html"];
	snprintf(path, sizeof path, "%s%s", rel, !*rel || rel[strlen(rel) - 1] == '/' ? "index.html" : "");
	int fd = open_beneath(root, path);
	close(root);
	if (fd >= 0)
		return serve_fd(r, fd, rel, path);
	if (fd == -EACCES)
		r->log_detail = private_detail;
	return http_fail(r, -ENOENT, "no such page: /docs/%s", rel);
}
