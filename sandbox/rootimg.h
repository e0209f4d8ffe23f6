#pragma once
/* Root images ("images" on the command line and the wire; not the disk
 * images of the quota tests): root filesystems a tenant's commands run on
 * instead of the host's /usr. Each lives in <images-dir>/<name>/ (the
 * images dir is <data-dir>/images):
 *
 *     manifest.json   {"name", "packages", "size_bytes", "created_at", "source"}
 *     rootfs/         the root filesystem (owned by root, not writable by others)
 *
 * An image is made in <images-dir>/.tmp-<name>-XXXXXX and renamed into
 * place only when complete, so a half-built image is never visible. Only
 * the operator's command line makes or removes images (server/images_cli.c);
 * the server opens them for commands (sbx_rootimg_open), holding a shared
 * flock on the image's directory while a command runs on it, which
 * sbx_rootimg_remove needs exclusively.
 *
 * Threads: no shared state; sbx_rootimg_build and the imports chdir
 * (libarchive extracts relative to the cwd) and are for the single-
 * threaded command line only. Errors: 0 or a negative errno; where an
 * err buffer is given it holds a one-line reason. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX_ROOTIMG_NAME_MAX 63

/* [a-z0-9][a-z0-9._-]{0,62}, except "none" (the host's /usr). */
bool sbx_rootimg_name_ok(const char *name);
/* Whether the comma-separated list (NULL: empty) holds name. */
bool sbx_rootimg_list_has(const char *list, const char *name);

struct sbx_rootimg_info {
	char name[SBX_ROOTIMG_NAME_MAX + 1];
	char *manifest; /* owned: the manifest's JSON text, NULL when unreadable */
	bool usable;
	bool busy;	  /* a command runs on it now (its lock is held) */
	char reason[160]; /* why it is not usable; "" when usable */
};

/* Every image in dir (missing dir: none), by name. Free with
 * sbx_rootimg_infos_free. */
int sbx_rootimg_list(const char *dir, struct sbx_rootimg_info **out, size_t *n);
void sbx_rootimg_infos_free(struct sbx_rootimg_info *v, size_t n);

/* An image held for a command: its rootfs path stays valid and the image
 * cannot be removed until sbx_rootimg_close. */
struct sbx_rootimg_ref;

/* Open image name for use. -ENOENT (no such image), -EINVAL (bad name),
 * -EPERM (not owned by root, or writable by others: err says which
 * path), -ENOEXEC (no /usr directory, no /bin/sh in it, or a path the
 * server binds is a symlink: sbx_rootimg_sys_open). */
int sbx_rootimg_open(const char *dir, const char *name, struct sbx_rootimg_ref **out, char *err,
		     size_t errsz);
/* The host path of the image's root filesystem; borrowed from ref. */
const char *sbx_rootimg_rootfs(const struct sbx_rootimg_ref *ref);
void sbx_rootimg_close(struct sbx_rootimg_ref **ref);

/* What the server takes from an image's rootfs, in this order: "usr",
 * "bin", "sbin", "lib", "lib64", "lib32", "libx32" (bound at their
 * names), "etc/ld.so.cache" and "etc/alternatives" (bound there where
 * they exist). */
#define SBX_ROOTIMG_SYS_N 9
#define SBX_ROOTIMG_SYS_ETC 7 /* the first of the etc entries */
#define SBX_ROOTIMG_LINK_MAX 128
extern const char *const sbx_rootimg_sys_path[SBX_ROOTIMG_SYS_N];

/* Those paths opened beneath the rootfs: an O_PATH fd of each (-1: absent,
 * or a link) to bind by fd, and for bin, sbin and lib* the target of a
 * link into /usr, which the sandbox gets as a link of its own. */
struct sbx_rootimg_sys {
	int fd[SBX_ROOTIMG_SYS_N];
	char link[SBX_ROOTIMG_SYS_N][SBX_ROOTIMG_LINK_MAX]; /* "" when none */
};

/* Open the system of the image whose rootfs is the directory rootfd, each
 * path resolved inside it without following any symlink
 * (openat2 RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS): what bwrap is given
 * is what was opened, never a path it would resolve again on the host.
 * Refused, err saying which path: -ELOOP when usr, etc, etc/ld.so.cache
 * or etc/alternatives is a symlink, or bin, sbin or a lib* is one that
 * does not stay in /usr; -ENOEXEC when usr is missing or one is of
 * another type; -EPERM when one is not root's or is writable by others. Import (at the commit),
 * sbx_rootimg_open and the bwrap backend all use it, so what an import accepts is what a command gets. */
int sbx_rootimg_sys_open(int rootfd, struct sbx_rootimg_sys *s, char *err, size_t errsz);
void sbx_rootimg_sys_close(struct sbx_rootimg_sys *s);

/* Remove image name: -ENOENT, -EBUSY when a command runs on it. The
 * caller checks that no tenant selects it. */
int sbx_rootimg_remove(const char *dir, const char *name, char *err, size_t errsz);

/* Build image name with mmdebstrap: the host's Debian release
 * (VERSION_CODENAME of /etc/os-release) from the host's apt sources
 * (/etc/apt/sources.list and sources.list.d), variant (NULL: "essential")
 * plus packages (comma-separated Debian package names). mmdebstrap's own
 * output goes to stderr. -EEXIST, -EINVAL (bad name or package),
 * -ENOENT (mmdebstrap missing), -EIO (mmdebstrap failed). */
int sbx_rootimg_build(const char *dir, const char *name, const char *packages, const char *variant, char *err,
		      size_t errsz);

/* What one import may put on the data disk (the configuration's
 * image-import-* keys and store-reserve-bytes); 0 in a field: no bound. */
struct sbx_rootimg_limits {
	uint64_t max_bytes;	/* file data written, all layers together */
	uint64_t max_entries;	/* files, directories and links made */
	uint64_t max_ratio;	/* data written per byte of archive, past the first 64 MiB */
	uint64_t reserve_bytes; /* free space kept on the images' filesystem */
};

/* Import image name from a root filesystem tarball (tar, optionally
 * gzip/xz/zstd/bzip2-compressed), or from an OCI image layout directory
 * (index.json -> manifest -> layers applied in order, whiteouts honoured,
 * digests and sizes checked, every blob a regular file). Entries with
 * absolute paths, ".." components, links leaving the tree, paths through
 * a symlink, and whiteouts naming "." or ".." are refused, and the whole
 * import with them (-EPERM); hard links are made inside the tree. Files
 * are owned by root, without set-id bits and without group or other
 * write permission. Beyond a bound of lim: -EFBIG (-ENOSPC for the
 * reserve), and nothing is kept. -EEXIST, -EINVAL, -EIO. */
int sbx_rootimg_import_rootfs(const char *dir, const char *name, const char *tarball,
			      const struct sbx_rootimg_limits *lim, char *err, size_t errsz);
int sbx_rootimg_import_oci(const char *dir, const char *name, const char *layout,
			   const struct sbx_rootimg_limits *lim, char *err, size_t errsz);
