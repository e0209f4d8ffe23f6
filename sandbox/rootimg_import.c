/* Importing root filesystem tarballs into root images, through
 * libarchive, whose secure extraction flags refuse ".." and absolute
 * paths and writing through symlinks; this file refuses the whole import
 * at the first such entry. What libarchive does not do safely here is
 * done relative to the rootfs fd with no symlink followed: hard links and
 * whiteouts; and an import is bounded (bytes, entries, expansion, the
 * store's reserve), since the operator may be importing what a tenant or
 * a registry handed them. OCI image layouts (rootimg_oci.c) are applied
 * layer by layer through the extraction here (rootimg_import_int.h). */
#include "sandbox/rootimg.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "sandbox/rootimg_impl.h"
#include "sandbox/rootimg_import_int.h"

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
int rootimg_extract_file(struct extract *x, int fd, uint64_t size, const char *file)
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
int rootimg_extract_begin(struct extract *x, const struct rootimg_stage *st, const char *what, bool oci,
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

int rootimg_fix_root(const char *rootfs)
{
	/* The root of the tree stays root's and 0755 whatever the archive said. */
	return chown(rootfs, 0, 0) < 0 || chmod(rootfs, 0755) < 0 ? -errno : 0;
}

/* Open a file the import reads (relative to dirfd, resolved with the
 * given RESOLVE_ flags): a regular file only, opened without blocking (a
 * FIFO never waits for a writer, a device is never read). The fd, its
 * size in *size, or -errno with err. */
int rootimg_open_regular(int dirfd, const char *path, uint64_t resolve, const char *what, uint64_t *size,
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
	int fd = abs ? rootimg_open_regular(AT_FDCWD, abs, 0, tarball, &size, err, errsz) : -1;
	if (!abs)
		snprintf(err, errsz, "%s: %s", tarball, strerror(errno));
	if (fd < 0) {
		free(abs);
		return abs ? fd : -ENOENT;
	}
	int rc = rootimg_stage_begin(&st, dir, name, err, errsz);
	if (rc == 0)
		rc = rootimg_extract_begin(&x, &st, abs, false, lim, err, errsz);
	if (rc == 0)
		rc = rootimg_extract_file(&x, fd, size, abs);
	if (rc == 0)
		rc = rootimg_fix_root(st.rootfs);
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
