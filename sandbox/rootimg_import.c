/* Making root images: mmdebstrap builds, and imports of root filesystem
 * tarballs and OCI image layouts through libarchive, whose secure
 * extraction flags refuse ".." and absolute paths and writing through
 * symlinks; this file refuses the whole import at the first such entry. */
#include "sandbox/rootimg.h"
#include "sandbox/reaper.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "sandbox/rootimg_impl.h"

extern char **environ;

/* ---- mmdebstrap ---- */

static bool package_ok(const char *p, size_t n)
{
	if (n < 2 || !((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= '0' && p[0] <= '9')))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'))
			return false;
	}
	return true;
}

static bool variant_ok(const char *v)
{
	static const char *const ok[] = {"extract", "custom", "essential", "apt",	  "required",
					 "minbase", "buildd", "important", "debootstrap", "standard"};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		if (strcmp(v, ok[i]) == 0)
			return true;
	return false;
}

/* The host's release name, e.g. "bookworm". */
static int host_codename(char *out, size_t outsz)
{
	FILE *f = fopen("/etc/os-release", "re");
	char line[256];
	int rc = -ENOENT;
	while (f && fgets(line, sizeof line, f)) {
		if (strncmp(line, "VERSION_CODENAME=", 17) != 0)
			continue;
		char *v = line + 17;
		v[strcspn(v, "\r\n")] = '\0';
		if (*v == '"') {
			v++;
			v[strcspn(v, "\"")] = '\0';
		}
		if (*v && package_ok(v, strlen(v))) {
			snprintf(out, outsz, "%s", v);
			rc = 0;
		}
	}
	if (f)
		fclose(f);
	return rc;
}

/* mmdebstrap pastes a MIRROR argument that names an existing file into the
 * image's sources: the host's own apt configuration, whatever mirror or
 * proxy the operator set up. */
static void add_sources(json_t *argv, json_t *used)
{
	struct stat st;
	if (stat("/etc/apt/sources.list", &st) == 0 && st.st_size > 0) {
		json_array_append_new(argv, json_string("/etc/apt/sources.list"));
		json_array_append_new(used, json_string("/etc/apt/sources.list"));
	}
	static const char *const pats[] = {"/etc/apt/sources.list.d/*.list",
					   "/etc/apt/sources.list.d/*.sources"};
	for (size_t i = 0; i < 2; i++) {
		glob_t g;
		if (glob(pats[i], 0, NULL, &g) != 0)
			continue;
		for (size_t k = 0; k < g.gl_pathc; k++) {
			json_array_append_new(argv, json_string(g.gl_pathv[k]));
			json_array_append_new(used, json_string(g.gl_pathv[k]));
		}
		globfree(&g);
	}
}

/* Run argv (a JSON array of strings) with stdout sent to stderr; the
 * exit status, or -errno when it cannot start. */
static int run_tool(json_t *argv)
{
	size_t n = json_array_size(argv);
	char **v = xcalloc(n + 1, sizeof *v);
	for (size_t i = 0; i < n; i++)
		v[i] = (char *)json_string_value(json_array_get(argv, i));
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, 2, 1);
	pid_t pid;
	int rc = sbx_reaper_spawn(&pid, v[0], &fa, v, environ, true);
	posix_spawn_file_actions_destroy(&fa);
	free(v);
	if (rc != 0)
		return -rc;
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int parse_packages(const char *packages, json_t *list, char *err, size_t errsz)
{
	const char *p = packages ? packages : "";
	while (*p) {
		size_t n = strcspn(p, ",");
		while (n && p[0] == ' ') {
			p++;
			n--;
		}
		size_t m = n;
		while (m && p[m - 1] == ' ')
			m--;
		if (m && !package_ok(p, m)) {
			snprintf(err, errsz, "not a Debian package name: %.*s", (int)m, p);
			return -EINVAL;
		}
		if (m)
			json_array_append_new(list, json_stringn(p, m));
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
}

static json_t *build_argv(const char *variant, json_t *pkgs, const char *suite, const char *rootfs,
			  json_t *sources)
{
	json_t *argv = json_pack("[s, s, s]", "mmdebstrap", "--quiet", "--format=directory");
	json_array_append_new(argv, json_sprintf("--variant=%s", variant));
	/* Documentation is of no use to a command and a third of the size. */
	static const char *const dpkg[] = {"path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
					   "path-exclude=/usr/share/doc/*",
					   "path-include=/usr/share/doc/*/copyright"};
	for (size_t i = 0; i < sizeof dpkg / sizeof dpkg[0]; i++)
		json_array_append_new(argv, json_sprintf("--dpkgopt=%s", dpkg[i]));
	if (json_array_size(pkgs)) {
		json_t *s = json_string("--include=");
		size_t i;
		json_t *p;
		json_array_foreach(pkgs, i, p) {
			char *t =
			    xasprintf("%s%s%s", json_string_value(s), i ? "," : "", json_string_value(p));
			json_string_set(s, t);
			free(t);
		}
		json_array_append_new(argv, s);
	}
	json_array_append_new(argv, json_string(suite));
	json_array_append_new(argv, json_string(rootfs));
	add_sources(argv, sources);
	return argv;
}

int sbx_rootimg_build(const char *dir, const char *name, const char *packages, const char *variant, char *err,
		      size_t errsz)
{
	struct rootimg_stage st;
	json_t *pkgs = json_array(), *sources = json_array(), *argv = NULL;
	char suite[64];
	variant = variant ? variant : "essential";
	int rc = parse_packages(packages, pkgs, err, errsz);
	if (rc == 0 && !variant_ok(variant)) {
		snprintf(err, errsz, "unknown mmdebstrap variant %s", variant);
		rc = -EINVAL;
	}
	if (rc == 0 && host_codename(suite, sizeof suite) < 0) {
		snprintf(err, errsz, "no VERSION_CODENAME in /etc/os-release: not a Debian host?");
		rc = -EINVAL;
	}
	if (rc < 0) {
		json_decref(pkgs);
		json_decref(sources);
		return rc;
	}
	rc = rootimg_stage_begin(&st, dir, name, err, errsz);
	if (rc == 0) {
		argv = build_argv(variant, pkgs, suite, st.rootfs, sources);
		if (json_array_size(sources) == 0) {
			snprintf(err, errsz, "no apt sources on this host (/etc/apt/sources.list[.d])");
			rc = -ENOENT;
		}
	}
	if (rc == 0) {
		int status = run_tool(argv);
		if (status != 0) {
			snprintf(err, errsz,
				 status < 0 ? "cannot run mmdebstrap (install it: apt-get install mmdebstrap)"
					    : "mmdebstrap failed (exit status %d; its messages are above)",
				 status);
			rc = status == -ENOENT ? -ENOENT : -EIO;
		}
	}
	if (rc == 0) {
		json_t *source = json_pack("{s:s, s:s, s:s, s:O}", "kind", "mmdebstrap", "suite", suite,
					   "variant", variant, "apt_sources", sources);
		rc = rootimg_stage_commit(&st, name, json_incref(pkgs), source, err, errsz);
	}
	rootimg_stage_end(&st);
	json_decref(argv);
	json_decref(pkgs);
	json_decref(sources);
	return rc;
}

/* ---- extraction ---- */

/* A path inside the image: relative, without "..", without "./" noise.
 * Writes the cleaned path to out; false when it leaves the tree. */
static bool clean_path(const char *in, char *out, size_t outsz)
{
	if (!in || in[0] == '/')
		return false;
	size_t o = 0;
	const char *p = in;
	while (*p) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return false;
		if (n && !(n == 1 && p[0] == '.')) {
			if (o + n + 2 > outsz)
				return false;
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p += n;
		while (*p == '/')
			p++;
	}
	out[o] = '\0';
	return true;
}

/* The directory rel inside the root (no symlink on the way), O_PATH. */
static int open_beneath(int root, const char *rel)
{
	struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	return (int)syscall(SYS_openat2, root, *rel ? rel : ".", &how, sizeof how);
}

/* Remove name beneath the directory dirrel of the root (not following
 * links); a missing one is fine. */
static int remove_beneath(int root, const char *dirrel, const char *name)
{
	int d = open_beneath(root, dirrel);
	if (d < 0)
		return errno == ENOENT ? 0 : -errno;
	struct stat st;
	int rc = 0;
	if (fstatat(d, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode)) {
			/* No symlink on the way (checked above): the path is safe
			 * to hand to nftw, which never follows links. */
			char *p = xasprintf("%s%s%s", dirrel, *dirrel ? "/" : "", name);
			rc = rootimg_remove_tree(p);
			free(p);
		} else if (unlinkat(d, name, 0) < 0) {
			rc = -errno;
		}
	}
	close(d);
	return rc;
}

/* An opaque directory: everything the lower layers put in it goes. */
static int clear_beneath(int root, const char *dirrel)
{
	int d = open_beneath(root, dirrel);
	if (d < 0)
		return errno == ENOENT ? 0 : -errno;
	int fd = openat(d, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	close(d);
	DIR *dd = fd >= 0 ? fdopendir(fd) : NULL;
	if (!dd)
		return -errno;
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (de = readdir(dd)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			rc = remove_beneath(root, dirrel, de->d_name);
	closedir(dd);
	return rc;
}

static bool is_whiteout(const char *path)
{
	const char *slash = strrchr(path, '/');
	return strncmp(slash ? slash + 1 : path, ".wh.", 4) == 0;
}

/* Apply one whiteout entry (path already clean). */
static int whiteout(int root, const char *path)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	char *dirrel = xstrndup(path, slash ? (size_t)(slash - path) : 0);
	int rc = strcmp(base, ".wh..wh..opq") == 0 ? clear_beneath(root, dirrel)
						   : remove_beneath(root, dirrel, base + 4);
	free(dirrel);
	return rc;
}

/* ---- libarchive, loaded on first use ----
 *
 * Only `sandboxd image import` extracts archives, yet linking libarchive
 * made every process load it with libxml2, ICU and libstdc++: about 2.4
 * MB of an idle server's RSS (bench/NOTES.md, P10). So it is opened with
 * dlopen when an import starts. Its soname is that of libarchive 3.x
 * (the headers this is built against, checked below); scripts/deps
 * installs it with libarchive-dev. */
_Static_assert(ARCHIVE_VERSION_NUMBER >= 3000000 && ARCHIVE_VERSION_NUMBER < 4000000,
	       "libarchive 3.x expected (soname libarchive.so.13)");
#define LIBARCHIVE_SONAME "libarchive.so.13"
#define LA_FNS(X)                                                                                            \
	X(archive_entry_filetype)                                                                            \
	X(archive_entry_hardlink)                                                                            \
	X(archive_entry_pathname)                                                                            \
	X(archive_entry_perm)                                                                                \
	X(archive_entry_set_hardlink)                                                                        \
	X(archive_entry_set_pathname)                                                                        \
	X(archive_entry_set_perm)                                                                            \
	X(archive_error_string)                                                                              \
	X(archive_read_data_block)                                                                           \
	X(archive_read_free)                                                                                 \
	X(archive_read_new)                                                                                  \
	X(archive_read_next_header)                                                                          \
	X(archive_read_open_filename)                                                                        \
	X(archive_read_support_filter_all)                                                                   \
	X(archive_read_support_format_gnutar)                                                                \
	X(archive_read_support_format_tar)                                                                   \
	X(archive_write_data_block)                                                                          \
	X(archive_write_disk_new)                                                                            \
	X(archive_write_disk_set_options)                                                                    \
	X(archive_write_finish_entry)                                                                        \
	X(archive_write_free)                                                                                \
	X(archive_write_header)

static struct {
#define X(f) __typeof__(&f) f;
	LA_FNS(X)
#undef X
} la;
static pthread_once_t la_once = PTHREAD_ONCE_INIT;
static char la_error[256];
static void *la_handle; /* open for the process's life: la points into it */

static void la_open(void)
{
	void *h = la_handle = dlopen(LIBARCHIVE_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(la_error, sizeof la_error, "cannot load %s: %s", LIBARCHIVE_SONAME, dlerror());
		return;
	}
#define X(f)                                                                                                 \
	if (!la_error[0] && !(*(void **)&la.f = dlsym(h, #f)))                                               \
		snprintf(la_error, sizeof la_error, "%s lacks %s", LIBARCHIVE_SONAME, #f);
	LA_FNS(X)
#undef X
}

/* 0 once libarchive's functions are in la; else -ENOSYS with err set. */
static int la_load(char *err, size_t errsz)
{
	pthread_once(&la_once, la_open);
	if (!la_error[0])
		return 0;
	snprintf(err, errsz, "%s", la_error);
	return -ENOSYS;
}

struct extract {
	const char *what; /* for messages: the file */
	bool oci;	  /* whiteouts are meaningful */
	int root;	  /* the rootfs, O_PATH */
	char *err;
	size_t errsz;
};

static struct archive *open_archive(const char *file, char *err, size_t errsz)
{
	if (la_load(err, errsz) < 0)
		return NULL;
	struct archive *a = la.archive_read_new();
	la.archive_read_support_filter_all(a);
	la.archive_read_support_format_tar(a);
	la.archive_read_support_format_gnutar(a);
	if (la.archive_read_open_filename(a, file, 1 << 16) != ARCHIVE_OK) {
		snprintf(err, errsz, "cannot read %s: %s", file, la.archive_error_string(a));
		la.archive_read_free(a);
		return NULL;
	}
	return a;
}

/* Check (and clean) one entry; 0 to write it, 1 to skip it, -EPERM. */
static int vet_entry(struct extract *x, struct archive_entry *e, char *path, size_t pathsz)
{
	const char *name = la.archive_entry_pathname(e);
	if (!clean_path(name, path, pathsz)) {
		snprintf(x->err, x->errsz, "%s: entry %s leaves the image (absolute or ..): refused", x->what,
			 name ? name : "(none)");
		return -EPERM;
	}
	const char *hl = la.archive_entry_hardlink(e);
	char hlpath[4096];
	if (hl && !clean_path(hl, hlpath, sizeof hlpath)) {
		snprintf(x->err, x->errsz, "%s: hard link %s -> %s leaves the image: refused", x->what, name,
			 hl);
		return -EPERM;
	}
	if (!path[0])
		return 1; /* the root itself */
	mode_t type = la.archive_entry_filetype(e);
	if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
		return 1; /* devices, FIFOs, sockets: a command gets its own /dev */
	la.archive_entry_set_pathname(e, path);
	if (hl)
		la.archive_entry_set_hardlink(e, hlpath);
	if (type != AE_IFLNK)
		la.archive_entry_set_perm(e, la.archive_entry_perm(e) &
						 ~(mode_t)(S_ISUID | S_ISGID | S_IWGRP | S_IWOTH));
	return 0;
}

static int copy_data(struct archive *in, struct archive *out)
{
	const void *buf;
	size_t size;
	la_int64_t off;
	int r;
	while ((r = la.archive_read_data_block(in, &buf, &size, &off)) == ARCHIVE_OK)
		if (la.archive_write_data_block(out, buf, size, off) != ARCHIVE_OK)
			return ARCHIVE_FATAL;
	return r == ARCHIVE_EOF ? ARCHIVE_OK : r;
}

/* One pass over file: whiteouts only (pass 0, OCI) or the entries. */
static int extract_pass(struct extract *x, const char *file, int pass)
{
	struct archive *in = open_archive(file, x->err, x->errsz), *out = NULL;
	if (!in)
		return -EIO;
	if (pass == 1) {
		out = la.archive_write_disk_new();
		la.archive_write_disk_set_options(
		    out, ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
			     ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);
	}
	struct archive_entry *e;
	char path[4096];
	int rc = 0, r;
	while (rc == 0 && (r = la.archive_read_next_header(in, &e)) == ARCHIVE_OK) {
		int v = vet_entry(x, e, path, sizeof path);
		if (v != 0) {
			rc = v < 0 ? v : 0;
			continue;
		}
		bool wh = x->oci && is_whiteout(path);
		int w = wh && pass == 0 ? whiteout(x->root, path) : 0;
		if (w < 0) {
			snprintf(x->err, x->errsz, "%s: whiteout %s refused: %s", x->what, path,
				 strerror(-w));
			rc = w == -ELOOP || w == -EXDEV ? -EPERM : w;
		}
		if (wh || pass == 0)
			continue;
		if (la.archive_write_header(out, e) != ARCHIVE_OK || copy_data(in, out) != ARCHIVE_OK ||
		    la.archive_write_finish_entry(out) != ARCHIVE_OK) {
			snprintf(x->err, x->errsz, "%s: entry %s refused: %s", x->what, path,
				 la.archive_error_string(out));
			rc = -EPERM;
		}
	}
	if (rc == 0 && r != ARCHIVE_EOF) {
		snprintf(x->err, x->errsz, "%s: %s", x->what, la.archive_error_string(in));
		rc = -EIO;
	}
	la.archive_read_free(in);
	if (out)
		la.archive_write_free(out);
	return rc;
}

/* Extract file into rootfs (libarchive writes relative to the cwd). */
static int extract_file(const char *rootfs, const char *file, bool oci, char *err, size_t errsz)
{
	int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	int root = open(rootfs, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct extract x = {.what = file, .oci = oci, .root = root, .err = err, .errsz = errsz};
	int rc = cwd < 0 || root < 0 || fchdir(root) < 0 ? -errno : 0;
	/* Whiteouts first: they remove what lower layers made, never what
	 * this layer adds, whatever the order of its entries. */
	if (rc == 0 && oci)
		rc = extract_pass(&x, file, 0);
	if (rc == 0)
		rc = extract_pass(&x, file, 1);
	if (cwd >= 0 && fchdir(cwd) < 0 && rc == 0)
		rc = -errno;
	if (cwd >= 0)
		close(cwd);
	if (root >= 0)
		close(root);
	return rc;
}

static int fix_root(const char *rootfs)
{
	/* The root of the tree stays root's and 0755 whatever the archive said. */
	return chown(rootfs, 0, 0) < 0 || chmod(rootfs, 0755) < 0 ? -errno : 0;
}

int sbx_rootimg_import_rootfs(const char *dir, const char *name, const char *tarball, char *err, size_t errsz)
{
	struct rootimg_stage st;
	char *abs = realpath(tarball, NULL); /* extraction changes the cwd */
	if (!abs) {
		snprintf(err, errsz, "%s: %s", tarball, strerror(errno));
		return -ENOENT;
	}
	int rc = rootimg_stage_begin(&st, dir, name, err, errsz);
	if (rc == 0)
		rc = extract_file(st.rootfs, abs, false, err, errsz);
	if (rc == 0)
		rc = fix_root(st.rootfs);
	if (rc == 0)
		rc = rootimg_stage_commit(&st, name, json_array(),
					  json_pack("{s:s, s:s}", "kind", "rootfs", "file", abs), err, errsz);
	rootimg_stage_end(&st);
	free(abs);
	return rc;
}

/* ---- OCI image layouts ---- */

/* blobs/<alg>/<hex> of a digest "sha256:<64 hex>" (the only algorithm
 * accepted: the digest becomes a path, so its form is checked strictly). */
static char *blob_path(const char *layout, const char *digest)
{
	if (!digest || strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 7 + 64)
		return NULL;
	for (const char *p = digest + 7; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return NULL;
	return xasprintf("%s/blobs/sha256/%s", layout, digest + 7);
}

/* The blob's content hashes to its digest. */
static int blob_verify(const char *path, const char *digest, char *err, size_t errsz)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errsz, "missing blob %s", digest);
		return -EIO;
	}
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	static unsigned char buf[1 << 16];
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf)) > 0)
		EVP_DigestUpdate(c, buf, (size_t)n);
	unsigned char md[32];
	unsigned int len = 0;
	EVP_DigestFinal_ex(c, md, &len);
	EVP_MD_CTX_free(c);
	close(fd);
	char hex[65];
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	if (n < 0 || strcmp(hex, digest + 7) != 0) {
		snprintf(err, errsz, "blob %s does not match its digest", digest);
		return -EIO;
	}
	return 0;
}

static json_t *load_blob_json(const char *layout, const char *digest, char *err, size_t errsz)
{
	char *p = blob_path(layout, digest);
	json_t *j = NULL;
	if (!p)
		snprintf(err, errsz, "unsupported digest %s (sha256 only)", digest ? digest : "(none)");
	else if (blob_verify(p, digest, err, errsz) == 0) {
		json_error_t je;
		j = json_load_file(p, 0, &je);
		if (!j)
			snprintf(err, errsz, "blob %s: %s", digest, je.text);
	}
	free(p);
	return j;
}

static const char *host_arch(void)
{
	struct utsname u;
	if (uname(&u) == 0 && strcmp(u.machine, "aarch64") == 0)
		return "arm64";
	return "amd64";
}

/* Of an index's manifests: the one for linux/<host arch>, else the only
 * one. Nested indexes are followed (depth bounded). Returns the image
 * manifest (new reference) or NULL with err. */
static json_t *pick_manifest(const char *layout, json_t *index, int depth, char *err, size_t errsz)
{
	json_t *list = json_object_get(index, "manifests"), *pick = NULL, *m;
	size_t i;
	json_array_foreach(list, i, m) {
		json_t *plat = json_object_get(m, "platform");
		const char *os = json_string_value(json_object_get(plat, "os"));
		const char *arch = json_string_value(json_object_get(plat, "architecture"));
		if (!plat || (os && arch && strcmp(os, "linux") == 0 && strcmp(arch, host_arch()) == 0)) {
			pick = m;
			if (plat)
				break;
		}
	}
	if (!pick && json_array_size(list) == 1)
		pick = json_array_get(list, 0);
	if (!pick) {
		snprintf(err, errsz, "index.json names no manifest for linux/%s", host_arch());
		return NULL;
	}
	json_t *doc = load_blob_json(layout, json_string_value(json_object_get(pick, "digest")), err, errsz);
	if (doc && json_object_get(doc, "manifests")) {
		json_t *inner = depth < 2 ? pick_manifest(layout, doc, depth + 1, err, errsz) : NULL;
		if (depth >= 2)
			snprintf(err, errsz, "image indexes nested too deeply");
		json_decref(doc);
		return inner;
	}
	if (doc && !json_is_array(json_object_get(doc, "layers"))) {
		snprintf(err, errsz, "the manifest has no layers");
		json_decref(doc);
		return NULL;
	}
	/* The configuration is not used (commands run /bin/sh -c), but a
	 * layout whose blobs do not all match is not imported. */
	json_t *config =
	    doc ? load_blob_json(layout,
				 json_string_value(json_object_get(json_object_get(doc, "config"), "digest")),
				 err, errsz)
		: NULL;
	if (doc && !config) {
		json_decref(doc);
		return NULL;
	}
	json_decref(config);
	return doc;
}

static int apply_layers(const char *layout, json_t *manifest, const char *rootfs, char *err, size_t errsz)
{
	json_t *l;
	size_t i;
	json_array_foreach(json_object_get(manifest, "layers"), i, l) {
		const char *mt = json_string_value(json_object_get(l, "mediaType"));
		const char *digest = json_string_value(json_object_get(l, "digest"));
		if (!mt || !strstr(mt, "tar")) {
			snprintf(err, errsz, "layer %zu: unsupported media type %s", i, mt ? mt : "(none)");
			return -EINVAL;
		}
		char *p = blob_path(layout, digest);
		int rc = p ? blob_verify(p, digest, err, errsz) : -EINVAL;
		if (!p)
			snprintf(err, errsz, "layer %zu: unsupported digest", i);
		if (rc == 0)
			rc = extract_file(rootfs, p, true, err, errsz);
		free(p);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int sbx_rootimg_import_oci(const char *dir, const char *name, const char *layout_arg, char *err, size_t errsz)
{
	char *layout = realpath(layout_arg, NULL); /* extraction changes the cwd */
	if (!layout) {
		snprintf(err, errsz, "%s: %s", layout_arg, strerror(errno));
		return -ENOENT;
	}
	char *ipath = xasprintf("%s/index.json", layout);
	json_error_t je;
	json_t *index = json_load_file(ipath, 0, &je), *manifest = NULL;
	free(ipath);
	if (!index) {
		snprintf(err, errsz, "%s/index.json: %s", layout, je.text);
		free(layout);
		return -EINVAL;
	}
	struct rootimg_stage st;
	int rc = rootimg_stage_begin(&st, dir, name, err, errsz);
	if (rc == 0 && !(manifest = pick_manifest(layout, index, 0, err, errsz)))
		rc = -EINVAL;
	if (rc == 0)
		rc = apply_layers(layout, manifest, st.rootfs, err, errsz);
	if (rc == 0)
		rc = fix_root(st.rootfs);
	if (rc == 0) {
		json_t *src = json_pack("{s:s, s:s, s:i}", "kind", "oci", "layout", layout, "layers",
					(int)json_array_size(json_object_get(manifest, "layers")));
		rc = rootimg_stage_commit(&st, name, json_array(), src, err, errsz);
	}
	rootimg_stage_end(&st);
	json_decref(manifest);
	json_decref(index);
	free(layout);
	return rc;
}
