/* Making root images: mmdebstrap builds, and imports of root filesystem
 * tarballs and OCI image layouts through libarchive, whose secure
 * extraction flags refuse ".." and absolute paths and writing through
 * symlinks; this file refuses the whole import at the first such entry.
 * What libarchive does not do safely here is done relative to the rootfs
 * fd with no symlink followed: hard links, whiteouts, and the blobs of a
 * layout; and an import is bounded (bytes, entries, expansion, the
 * store's reserve), since the operator may be importing what a tenant or
 * a registry handed them. */
#include "sandbox/rootimg.h"
#include "sandbox/reaper.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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
		/* A name that does not fit is not cut to another suite's name. */
		size_t n = strlen(v);
		if (n > 0 && n < outsz && package_ok(v, n)) {
			memcpy(out, v, n + 1);
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

/* Split a clean path into its directory (allocated) and last name. */
static char *split_path(const char *path, const char **base)
{
	const char *slash = strrchr(path, '/');
	*base = slash ? slash + 1 : path;
	return xstrndup(path, slash ? (size_t)(slash - path) : 0);
}

/* A single name of a directory entry, neither "." nor "..". */
static bool plain_name(const char *name)
{
	return name[0] && strcmp(name, ".") && strcmp(name, "..") && !strchr(name, '/');
}

static int remove_at(int d, const char *name, int depth);

/* Remove everything in the directory fd (closed here; -1: errno says
 * why it could not be opened). */
static int empty_dir(int fd, int depth)
{
	DIR *dd = fd >= 0 ? fdopendir(fd) : NULL;
	if (!dd) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return -e;
	}
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (de = readdir(dd)))
		if (plain_name(de->d_name))
			rc = remove_at(dirfd(dd), de->d_name, depth + 1);
	closedir(dd);
	return rc;
}

/* Remove name in the directory d, and all beneath it, without following
 * links and relative to d only (depth bounded: each level holds an fd). */
static int remove_at(int d, const char *name, int depth)
{
	struct stat st;
	if (fstatat(d, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(d, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	if (depth > 256)
		return -ENAMETOOLONG;
	int rc = empty_dir(openat(d, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), depth);
	if (rc == 0 && unlinkat(d, name, AT_REMOVEDIR) < 0)
		rc = -errno;
	return rc;
}

/* The directory dirrel beneath the root (no symlink on the way), open
 * for reading; -1 with errno. */
static int open_dir_beneath(int root, const char *dirrel)
{
	int d = open_beneath(root, dirrel);
	if (d < 0)
		return -1;
	int fd = openat(d, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int e = errno;
	close(d);
	errno = e;
	return fd;
}

/* Remove name beneath the directory dirrel of the root (no link followed
 * on the way or below); a missing one is fine. */
static int remove_beneath(int root, const char *dirrel, const char *name)
{
	int dir = open_dir_beneath(root, dirrel);
	if (dir < 0)
		return errno == ENOENT ? 0 : -errno;
	int rc = remove_at(dir, name, 0);
	close(dir);
	return rc;
}

/* An opaque directory: everything the lower layers put in it goes. */
static int clear_beneath(int root, const char *dirrel)
{
	int dir = open_dir_beneath(root, dirrel);
	if (dir < 0 && errno == ENOENT)
		return 0;
	return empty_dir(dir, 0);
}

static bool is_whiteout(const char *path)
{
	const char *slash = strrchr(path, '/');
	return strncmp(slash ? slash + 1 : path, ".wh.", 4) == 0;
}

/* Apply one whiteout entry (path already clean): only ever inside the
 * image being built, so ".wh.", ".wh.." and ".wh..." (nothing, the
 * directory itself, its parent) are refused (-EXDEV). Other ".wh..wh."
 * names are aufs metadata, not whiteouts: ignored. */
static int whiteout(int root, const char *path)
{
	const char *base;
	char *dirrel = split_path(path, &base);
	const char *victim = base + 4;
	int rc;
	if (strcmp(base, ".wh..wh..opq") == 0)
		rc = clear_beneath(root, dirrel);
	else if (strncmp(base, ".wh..wh.", 8) == 0)
		rc = 0;
	else
		rc = plain_name(victim) ? remove_beneath(root, dirrel, victim) : -EXDEV;
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
	X(archive_read_open_fd)                                                                              \
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

/* Past this much written, the expansion ratio applies: a small archive
 * of small files may well expand more than a big one. */
#define RATIO_FLOOR_BYTES (64ull << 20)
/* Free space is looked at again after this much more is written. */
#define SPACE_CHECK_BYTES (16ull << 20)

/* One import: its bounds and what it has made so far, all layers. */
struct extract {
	const char *what; /* for messages: the file */
	bool oci;	  /* whiteouts are meaningful */
	int root;	  /* the rootfs, O_PATH */
	const struct sbx_rootimg_limits *lim;
	uint64_t in_bytes; /* archives opened so far, their sizes */
	uint64_t written, entries, space_checked;
	char *err;
	size_t errsz;
};

static struct archive *open_archive(int fd, const char *file, char *err, size_t errsz)
{
	if (la_load(err, errsz) < 0)
		return NULL;
	if (lseek(fd, 0, SEEK_SET) < 0) {
		snprintf(err, errsz, "cannot read %s: %s", file, strerror(errno));
		return NULL;
	}
	struct archive *a = la.archive_read_new();
	la.archive_read_support_filter_all(a);
	la.archive_read_support_format_tar(a);
	la.archive_read_support_format_gnutar(a);
	if (la.archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK) {
		snprintf(err, errsz, "cannot read %s: %s", file, la.archive_error_string(a));
		la.archive_read_free(a);
		return NULL;
	}
	return a;
}

/* -EFBIG (-ENOSPC) with a message naming the key when adding `more`
 * bytes would pass a bound; the free space is read every few MiB. */
static int check_bounds(struct extract *x, uint64_t more)
{
	const struct sbx_rootimg_limits *l = x->lim;
	uint64_t w = x->written + more;
	const char *key = NULL;
	if (l->max_bytes && w > l->max_bytes)
		key = "image-import-max-bytes";
	else if (l->max_entries && x->entries > l->max_entries)
		key = "image-import-max-entries";
	else if (l->max_ratio && w > RATIO_FLOOR_BYTES && w / l->max_ratio > x->in_bytes)
		key = "image-import-max-ratio";
	uint64_t limit = key == NULL					? 0
			 : strcmp(key, "image-import-max-bytes") == 0	? l->max_bytes
			 : strcmp(key, "image-import-max-entries") == 0 ? l->max_entries
									: l->max_ratio;
	if (key) {
		snprintf(x->err, x->errsz,
			 "%s: the image passes %s=%" PRIu64 " (%" PRIu64 " bytes of data, %" PRIu64
			 " entries from %" PRIu64 " bytes of archive so far): refused",
			 x->what, key, limit, w, x->entries, x->in_bytes);
		return -EFBIG;
	}
	if (!l->reserve_bytes || (x->space_checked && w < x->space_checked + SPACE_CHECK_BYTES))
		return 0;
	x->space_checked = w;
	struct statvfs v;
	uint64_t avail = fstatvfs(x->root, &v) == 0 ? (uint64_t)v.f_bavail * v.f_frsize : UINT64_MAX;
	if (avail < l->reserve_bytes + more) {
		snprintf(x->err, x->errsz,
			 "%s: the data disk has %" PRIu64 " bytes free, and store-reserve-bytes=%" PRIu64
			 " must stay free for the server's records: refused",
			 x->what, avail, l->reserve_bytes);
		return -ENOSPC;
	}
	return 0;
}

/* Check (and clean) one entry; 0 to write it, 1 to skip it, 2 for a hard
 * link (hl its clean target), -EPERM. */
static int vet_entry(struct extract *x, struct archive_entry *e, char *path, size_t pathsz, char *hl,
		     size_t hlsz)
{
	const char *name = la.archive_entry_pathname(e);
	if (!clean_path(name, path, pathsz)) {
		snprintf(x->err, x->errsz, "%s: entry %s leaves the image (absolute or ..): refused", x->what,
			 name ? name : "(none)");
		return -EPERM;
	}
	const char *link = la.archive_entry_hardlink(e);
	if (link && (!clean_path(link, hl, hlsz) || !hl[0] || !path[0])) {
		snprintf(x->err, x->errsz, "%s: hard link %s -> %s leaves the image: refused", x->what, name,
			 link);
		return -EPERM;
	}
	if (!path[0])
		return 1; /* the root itself */
	if (link)
		return 2; /* tar reports these with no file type: made here */
	mode_t type = la.archive_entry_filetype(e);
	if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
		return 1; /* devices, FIFOs, sockets: a command gets its own /dev */
	la.archive_entry_set_pathname(e, path);
	if (type != AE_IFLNK)
		la.archive_entry_set_perm(e, la.archive_entry_perm(e) &
						 ~(mode_t)(S_ISUID | S_ISGID | S_IWGRP | S_IWOTH));
	return 0;
}

/* The directory rel beneath the root (no symlink on the way), made
 * where missing (0755, as libarchive makes the missing parents of a
 * file); O_PATH, or -1 with errno. */
static int make_dirs_beneath(int root, const char *rel)
{
	int d = open_beneath(root, rel);
	if (d >= 0 || errno != ENOENT || !*rel)
		return d;
	const char *base;
	char *parent = split_path(rel, &base);
	int pd = make_dirs_beneath(root, parent);
	int e = pd < 0 || (mkdirat(pd, base, 0755) < 0 && errno != EEXIST) ? errno : 0;
	if (pd >= 0)
		close(pd);
	free(parent);
	if (e) {
		errno = e;
		return -1;
	}
	return open_beneath(root, rel);
}

/* Why a hard link cannot be made (an fd of its two was not opened). */
static const char *link_why(int e, bool target)
{
	if (e == ELOOP || e == EXDEV)
		return "a symlink is on the way";
	if (e == ENOENT || e == ENOTDIR)
		return target ? "its target is not in the image" : "its directory is not a directory";
	return strerror(e);
}

/* Link path to the existing target, both resolved beneath the root with
 * no symlink on the way: the target must be a file or a symlink of this
 * image (never a directory), and what was at path is replaced as tar
 * does (never a directory). */
static int make_hardlink(struct extract *x, const char *path, const char *target)
{
	const char *base, *tbase;
	char *dir = split_path(path, &base), *tdir = split_path(target, &tbase);
	int td = open_beneath(x->root, tdir), te = errno;
	int d = td >= 0 ? make_dirs_beneath(x->root, dir) : -1;
	struct stat st, old;
	int rc = td < 0 || d < 0 ? -EPERM : 0;
	const char *why = td < 0 ? link_why(te, true) : d < 0 ? link_why(errno, false) : "";
	if (rc == 0 && (fstatat(td, tbase, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))) {
		rc = -EPERM;
		why = "its target is not a file of the image";
	}
	if (rc == 0 && fstatat(d, base, &old, AT_SYMLINK_NOFOLLOW) == 0) {
		if (old.st_dev == st.st_dev && old.st_ino == st.st_ino)
			goto out; /* the same file already */
		if (S_ISDIR(old.st_mode) || unlinkat(d, base, 0) < 0) {
			rc = -EPERM;
			why = "a directory is in its place";
		}
	}
	if (rc == 0 && linkat(td, tbase, d, base, 0) < 0) {
		rc = -errno;
		why = strerror(errno);
	}
out:
	if (rc < 0)
		snprintf(x->err, x->errsz, "%s: hard link %s -> %s refused: %s", x->what, path, target, why);
	if (d >= 0)
		close(d);
	if (td >= 0)
		close(td);
	free(dir);
	free(tdir);
	return rc < 0 ? -EPERM : 0;
}

static int copy_data(struct extract *x, struct archive *in, struct archive *out)
{
	const void *buf;
	size_t size;
	la_int64_t off;
	int r, rc;
	while ((r = la.archive_read_data_block(in, &buf, &size, &off)) == ARCHIVE_OK) {
		if ((rc = check_bounds(x, size)) < 0)
			return rc;
		x->written += size;
		if (la.archive_write_data_block(out, buf, size, off) != ARCHIVE_OK)
			return -EIO;
	}
	return r == ARCHIVE_EOF ? 0 : -EIO;
}

/* Write one vetted entry (v as vet_entry said); 0 or -errno with err. */
static int write_entry(struct extract *x, struct archive *in, struct archive *out, struct archive_entry *e,
		       int v, const char *path, const char *hl)
{
	x->entries++;
	int rc = check_bounds(x, 0);
	if (rc == 0 && v == 2)
		return make_hardlink(x, path, hl);
	if (rc == 0 && la.archive_write_header(out, e) != ARCHIVE_OK)
		rc = -EPERM;
	if (rc == 0)
		rc = copy_data(x, in, out);
	if (rc == 0 && la.archive_write_finish_entry(out) != ARCHIVE_OK)
		rc = -EPERM;
	if (rc == -EPERM || rc == -EIO)
		snprintf(x->err, x->errsz, "%s: entry %s refused: %s", x->what, path,
			 la.archive_error_string(out) ? la.archive_error_string(out)
						      : la.archive_error_string(in));
	return rc == -EIO ? -EPERM : rc;
}

/* One pass over the archive fd: whiteouts only (pass 0, OCI) or the
 * entries. */
static int extract_pass(struct extract *x, int fd, int pass)
{
	struct archive *in = open_archive(fd, x->what, x->err, x->errsz), *out = NULL;
	if (!in)
		return -EIO;
	if (pass == 1) {
		out = la.archive_write_disk_new();
		la.archive_write_disk_set_options(
		    out, ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
			     ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);
	}
	struct archive_entry *e;
	char path[4096], hl[4096];
	int rc = 0, r;
	while (rc == 0 && (r = la.archive_read_next_header(in, &e)) == ARCHIVE_OK) {
		int v = vet_entry(x, e, path, sizeof path, hl, sizeof hl);
		if (v < 0 || v == 1) {
			rc = v < 0 ? v : 0;
			continue;
		}
		bool wh = x->oci && is_whiteout(path);
		int w = wh && pass == 0 ? whiteout(x->root, path) : 0;
		if (w < 0) {
			snprintf(x->err, x->errsz, "%s: whiteout %s refused: %s", x->what, path,
				 w == -EXDEV   ? "it names no file of its directory"
				 : w == -ELOOP ? "a symlink is on the way"
					       : strerror(-w));
			rc = w == -ELOOP || w == -EXDEV ? -EPERM : w;
		}
		if (!wh && pass == 1)
			rc = write_entry(x, in, out, e, v, path, hl);
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

/* Extract the archive fd (size bytes, named file in messages) into the
 * rootfs x->root; libarchive writes relative to the cwd. */
static int extract_file(struct extract *x, int fd, uint64_t size, const char *file)
{
	int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	int rc = cwd < 0 || fchdir(x->root) < 0 ? -errno : 0;
	x->what = file;
	x->in_bytes += size;
	/* Whiteouts first: they remove what lower layers made, never what
	 * this layer adds, whatever the order of its entries. */
	if (rc == 0 && x->oci)
		rc = extract_pass(x, fd, 0);
	if (rc == 0)
		rc = extract_pass(x, fd, 1);
	if (cwd >= 0 && fchdir(cwd) < 0 && rc == 0)
		rc = -errno;
	if (cwd >= 0)
		close(cwd);
	return rc;
}

/* Begin an import into st's rootfs: x ready, its root open. */
static int extract_begin(struct extract *x, const struct rootimg_stage *st, const char *what, bool oci,
			 const struct sbx_rootimg_limits *lim, char *err, size_t errsz)
{
	*x = (struct extract){.what = what, .oci = oci, .lim = lim, .err = err, .errsz = errsz};
	x->root = open(st->rootfs, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (x->root < 0) {
		snprintf(err, errsz, "%s: %s", st->rootfs, strerror(errno));
		return -errno;
	}
	return check_bounds(x, 0);
}

static int fix_root(const char *rootfs)
{
	/* The root of the tree stays root's and 0755 whatever the archive said. */
	return chown(rootfs, 0, 0) < 0 || chmod(rootfs, 0755) < 0 ? -errno : 0;
}

/* Open a file the import reads (relative to dirfd, resolved with the
 * given RESOLVE_ flags): a regular file only, opened without blocking (a
 * FIFO never waits for a writer, a device is never read). The fd, its
 * size in *size, or -errno with err. */
static int open_regular(int dirfd, const char *path, uint64_t resolve, const char *what, uint64_t *size,
			char *err, size_t errsz)
{
	struct open_how how = {.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, .resolve = resolve};
	int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		int e = fd < 0 ? errno : EINVAL;
		snprintf(err, errsz, "%s: %s", what,
			 fd < 0 && e != ELOOP && e != EXDEV
			     ? strerror(e)
			     : "not a regular file (a symlink, device or FIFO): refused");
		if (fd >= 0)
			close(fd);
		return e == ENOENT ? -ENOENT : -EINVAL;
	}
	*size = (uint64_t)st.st_size;
	return fd;
}

int sbx_rootimg_import_rootfs(const char *dir, const char *name, const char *tarball,
			      const struct sbx_rootimg_limits *lim, char *err, size_t errsz)
{
	struct rootimg_stage st;
	struct extract x = {.root = -1};
	uint64_t size = 0;
	char *abs = realpath(tarball, NULL); /* recorded in the manifest */
	int fd = abs ? open_regular(AT_FDCWD, abs, 0, tarball, &size, err, errsz) : -1;
	if (!abs)
		snprintf(err, errsz, "%s: %s", tarball, strerror(errno));
	if (fd < 0) {
		free(abs);
		return abs ? fd : -ENOENT;
	}
	int rc = rootimg_stage_begin(&st, dir, name, err, errsz);
	if (rc == 0)
		rc = extract_begin(&x, &st, abs, false, lim, err, errsz);
	if (rc == 0)
		rc = extract_file(&x, fd, size, abs);
	if (rc == 0)
		rc = fix_root(st.rootfs);
	if (rc == 0)
		rc = rootimg_stage_commit(&st, name, json_array(),
					  json_pack("{s:s, s:s}", "kind", "rootfs", "file", abs), err, errsz);
	rootimg_stage_end(&st);
	if (x.root >= 0)
		close(x.root);
	close(fd);
	free(abs);
	return rc;
}

/* ---- OCI image layouts ---- */

/* Beneath the layout, no symlink on the way: a blob store whose files
 * or directories are links could have an import read a device or a file
 * of the host's. */
#define LAYOUT_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
/* JSON documents of a layout (index, manifests, configurations) are
 * small: registries refuse manifests over 4 MiB. */
#define JSON_MAX_BYTES (4u << 20)

/* A digest "sha256:<64 hex>" (the only algorithm accepted: the digest
 * becomes a path, so its form is checked strictly). */
static bool digest_ok(const char *digest)
{
	if (!digest || strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 7 + 64)
		return false;
	for (const char *p = digest + 7; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

/* The first size bytes of fd hash to the digest (no more is read). */
static int blob_hash(int fd, uint64_t size, const char *digest, char *err, size_t errsz)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	static unsigned char buf[1 << 16];
	ssize_t n = 1;
	for (uint64_t left = size; left > 0 && n > 0; left -= (uint64_t)n) {
		n = read(fd, buf, left < sizeof buf ? (size_t)left : sizeof buf);
		if (n > 0)
			EVP_DigestUpdate(c, buf, (size_t)n);
		else if (n < 0 && errno == EINTR)
			n = 0;
		else
			n = -1; /* shorter than it was a moment ago: refused below */
	}
	unsigned char md[32];
	unsigned int len = 0;
	EVP_DigestFinal_ex(c, md, &len);
	EVP_MD_CTX_free(c);
	char hex[65];
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	if (n < 0 || strcmp(hex, digest + 7) != 0 || lseek(fd, 0, SEEK_SET) < 0) {
		snprintf(err, errsz, "blob %s does not match its digest", digest);
		return -EIO;
	}
	return 0;
}

/* The blob a descriptor ({"digest", "size"}) names: a regular file
 * beneath the layout of exactly the recorded size, hashing to the digest.
 * Its fd at offset 0, or -errno with err. */
static int blob_open(int lfd, json_t *desc, uint64_t *size, char *err, size_t errsz)
{
	const char *digest = json_string_value(json_object_get(desc, "digest"));
	json_t *js = json_object_get(desc, "size");
	if (!digest_ok(digest)) {
		snprintf(err, errsz, "unsupported digest %s (sha256 only)", digest ? digest : "(none)");
		return -EINVAL;
	}
	if (!json_is_integer(js) || json_integer_value(js) < 0) {
		snprintf(err, errsz, "the descriptor of blob %s has no size: refused", digest);
		return -EINVAL;
	}
	char rel[96], what[96];
	snprintf(rel, sizeof rel, "blobs/sha256/%s", digest + 7);
	snprintf(what, sizeof what, "blob %s", digest);
	int fd = open_regular(lfd, rel, LAYOUT_RESOLVE, what, size, err, errsz);
	if (fd < 0)
		return fd == -ENOENT ? -EIO : fd;
	if (*size != (uint64_t)json_integer_value(js)) {
		/* the descriptor names exactly size bytes hashing to digest */
		snprintf(err, errsz,
			 "blob %s does not match its digest and size: it is %" PRIu64
			 " bytes, its descriptor says size %" JSON_INTEGER_FORMAT ": refused",
			 digest, *size, json_integer_value(js));
		close(fd);
		return -EINVAL;
	}
	int rc = blob_hash(fd, *size, digest, err, errsz);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* The JSON document in fd (size bytes, at most JSON_MAX_BYTES); closes fd. */
static json_t *read_json(int fd, uint64_t size, const char *what, char *err, size_t errsz)
{
	json_t *j = NULL;
	char *buf = size <= JSON_MAX_BYTES ? xmalloc(size + 1) : NULL;
	size_t got = 0;
	ssize_t n = 1;
	while (buf && got < size && n > 0)
		if ((n = pread(fd, buf + got, size - got, (off_t)got)) > 0)
			got += (size_t)n;
		else if (n < 0 && errno == EINTR)
			n = 1;
	json_error_t je;
	if (!buf)
		snprintf(err, errsz, "%s: larger than %u bytes: refused", what, JSON_MAX_BYTES);
	else if (got < size)
		snprintf(err, errsz, "%s: cannot read it", what);
	else if (!(j = json_loadb(buf, size, 0, &je)))
		snprintf(err, errsz, "%s: %s", what, je.text);
	free(buf);
	close(fd);
	return j;
}

static json_t *load_blob_json(int lfd, json_t *desc, char *err, size_t errsz)
{
	uint64_t size = 0;
	int fd = blob_open(lfd, desc, &size, err, errsz);
	return fd < 0 ? NULL
		      : read_json(fd, size, json_string_value(json_object_get(desc, "digest")), err, errsz);
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
static json_t *pick_manifest(int lfd, json_t *index, int depth, char *err, size_t errsz)
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
	json_t *doc = load_blob_json(lfd, pick, err, errsz);
	if (doc && json_object_get(doc, "manifests")) {
		json_t *inner = depth < 2 ? pick_manifest(lfd, doc, depth + 1, err, errsz) : NULL;
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
	json_t *config = doc ? load_blob_json(lfd, json_object_get(doc, "config"), err, errsz) : NULL;
	if (doc && !config) {
		json_decref(doc);
		return NULL;
	}
	json_decref(config);
	return doc;
}

static int apply_layers(int lfd, json_t *manifest, struct extract *x)
{
	json_t *l;
	size_t i;
	json_array_foreach(json_object_get(manifest, "layers"), i, l) {
		const char *mt = json_string_value(json_object_get(l, "mediaType"));
		if (!mt || !strstr(mt, "tar")) {
			snprintf(x->err, x->errsz, "layer %zu: unsupported media type %s", i,
				 mt ? mt : "(none)");
			return -EINVAL;
		}
		uint64_t size = 0;
		int fd = blob_open(lfd, l, &size, x->err, x->errsz);
		if (fd < 0)
			return fd;
		int rc = extract_file(x, fd, size, json_string_value(json_object_get(l, "digest")));
		close(fd);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The layout's index.json: a regular file, no symlink, small. */
static json_t *load_index(int lfd, const char *layout, char *err, size_t errsz)
{
	uint64_t size = 0;
	char *what = xasprintf("%s/index.json", layout);
	int fd = open_regular(lfd, "index.json", LAYOUT_RESOLVE, what, &size, err, errsz);
	json_t *index = fd >= 0 ? read_json(fd, size, what, err, errsz) : NULL;
	free(what);
	return index;
}

int sbx_rootimg_import_oci(const char *dir, const char *name, const char *layout_arg,
			   const struct sbx_rootimg_limits *lim, char *err, size_t errsz)
{
	char *layout = realpath(layout_arg, NULL); /* recorded in the manifest */
	int lfd = layout ? open(layout, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
	if (lfd < 0) {
		snprintf(err, errsz, "%s: %s", layout_arg, strerror(errno));
		free(layout);
		return -ENOENT;
	}
	json_t *index = load_index(lfd, layout, err, errsz), *manifest = NULL;
	if (!index) {
		close(lfd);
		free(layout);
		return -EINVAL;
	}
	struct rootimg_stage st;
	struct extract x = {.root = -1};
	int rc = rootimg_stage_begin(&st, dir, name, err, errsz);
	if (rc == 0)
		rc = extract_begin(&x, &st, layout, true, lim, err, errsz);
	if (rc == 0 && !(manifest = pick_manifest(lfd, index, 0, err, errsz)))
		rc = -EINVAL;
	if (rc == 0)
		rc = apply_layers(lfd, manifest, &x);
	if (rc == 0)
		rc = fix_root(st.rootfs);
	if (rc == 0) {
		json_t *src = json_pack("{s:s, s:s, s:i}", "kind", "oci", "layout", layout, "layers",
					(int)json_array_size(json_object_get(manifest, "layers")));
		rc = rootimg_stage_commit(&st, name, json_array(), src, err, errsz);
	}
	rootimg_stage_end(&st);
	if (x.root >= 0)
		close(x.root);
	close(lfd);
	json_decref(manifest);
	json_decref(index);
	free(layout);
	return rc;
}
