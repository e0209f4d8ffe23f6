#pragma once
/* The file operations of the SandboxApi on rel paths (see workspace.h),
 * fd-relative beneath the workspace fd. No HTTP here. Every function
 * returns 0 or a negative errno / -SBX_E_* (common/errors.h). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "sandbox/workspace.h"

enum sbx_ftype { SBX_FT_FILE, SBX_FT_DIR, SBX_FT_SYMLINK, SBX_FT_OTHER };
const char *sbx_ftype_name(enum sbx_ftype t); /* "file", "directory", "symlink", "other" */

struct sbx_stat {
	enum sbx_ftype type;
	bool is_symlink; /* rel itself is a symlink */
	bool followed;	 /* a symlink whose target stays inside: fields describe the target */
	uint64_t size;
	struct timespec mtime;
	mode_t mode; /* permission bits (07777) */
};

/* Stat rel. A symlink inside the workspace is followed (is_symlink, followed);
 * a dangling or escaping one is described as itself (type SYMLINK,
 * followed false). Errors: -ENOENT, -EXDEV (a parent escapes), ... */
int sbx_fs_stat(const struct sbx_workspace *ws, const char *rel, struct sbx_stat *out);

/* Open a regular file for reading (O_RDONLY|O_NONBLOCK|O_CLOEXEC) into *fd,
 * its size in *size. Anything else is refused after one non-blocking open
 * (never waited on, never read): a FIFO, socket or device -SBX_E_SPECIAL, a
 * directory -EISDIR. -ENOENT, -EXDEV, -ELOOP; in no-wait mode -EAGAIN. */
int sbx_fs_open_read(const struct sbx_workspace *ws, const char *rel, int *fd, uint64_t *size);

struct sbx_dirent {
	char *name;
	enum sbx_ftype type; /* lstat type: a symlink is SBX_FT_SYMLINK */
	uint64_t size;
	struct timespec mtime;
};
/* Free n entries and the array (sbx_dir_page's). */
void sbx_dirents_free(struct sbx_dirent *d, size_t n);

/* One page of a directory listing. Pages follow the directory's own order
 * (getdents64), each page sorted bytewise; a page costs work bounded by
 * its size (limit entries, at most 2 * limit + 1024 scanned), never by the
 * directory's. The cursor is the d_off of the page's last entry (the
 * filesystem's telldir cookie: ext4's 64-bit name hash or linear offset,
 * tmpfs's stable per-directory index, XFS/btrfs likewise; cookies must
 * survive a reopen for NFS export, which these support) with a check of
 * the directory's identity, as 24 hex digits. While the directory does
 * not change, walking the pages yields every entry exactly once; an entry
 * created or removed during the walk may or may not appear, one renamed
 * may appear under both names or neither, and no other entry is skipped
 * or repeated. */
#define SBX_CURSOR_MAX 32
struct sbx_dir_page {
	struct sbx_dirent *ents; /* sorted bytewise; free with sbx_dir_page_clear */
	size_t n;
	bool more;		   /* entries may follow: ask again with next */
	char next[SBX_CURSOR_MAX]; /* "" when !more */
};
/* Up to limit (>= 1) entries of rel after cursor after (NULL: from the
 * start), without "." and ".." and uploads in flight. detail: lstat each
 * entry (type, size, mtime); otherwise only names and d_type's type. A
 * page may hold fewer than limit entries, even none, while more is true.
 * -EBADMSG: after is not a cursor of this directory. -ENOENT, -ENOTDIR,
 * -EXDEV (rel, or a parent, leaves the workspace). */
int sbx_fs_readdir_page(const struct sbx_workspace *ws, const char *rel, const char *after, size_t limit,
			bool detail, struct sbx_dir_page *out);
void sbx_dir_page_clear(struct sbx_dir_page *p);

/* *out = whether rel exists (lstat sense: a dangling link exists).
 * Errors only for -EXDEV (a parent escapes) and I/O errors. */
int sbx_fs_exists(const struct sbx_workspace *ws, const char *rel, bool *out);

/* mkdir rel (0755, owned as the workspace says). Not recursive: -EEXIST if
 * anything is there, -SBX_E_PARENT_MISSING if the parent is missing.
 * Recursive: existing directories are fine, -EEXIST/-ENOTDIR if a
 * non-directory is in the way. */
int sbx_fs_mkdir(const struct sbx_workspace *ws, const char *rel, bool recursive);

/* Remove rel without following it if it is a symlink. -SBX_E_ROOT for "",
 * "sessions" and "sessions/<segment>". Directory without recursive:
 * -ENOTEMPTY if not empty (an empty one is removed). force: missing is a
 * success with *removed false. Recursive removal walks with fd-relative
 * opens (O_NOFOLLOW) and never leaves the workspace. */
int sbx_fs_rm(const struct sbx_workspace *ws, const char *rel, bool recursive, bool force, bool *removed);

/* Remove the session directory sessions/<segment> and everything in it,
 * walking with fd-relative opens that never follow a symlink: a link put in
 * place of "sessions", of the session directory or of anything inside it is
 * removed as a link (or, for "sessions", left alone), never followed. Then
 * forget sbx_session_dir_ensure's memo, so the directory is made again
 * when the session is next used. A missing directory is a success.
 * -EINVAL for a bad segment; other -errno. */
int sbx_session_dir_remove(struct sbx_workspace *ws, const char *segment);

/* renameat from -> to (both rel, inside the workspace). Without overwrite,
 * -EEXIST if to exists (renameat2 RENAME_NOREPLACE). Roots: -SBX_E_ROOT.
 * Missing from: -ENOENT; missing parent of to: -SBX_E_PARENT_MISSING. */
int sbx_fs_move(const struct sbx_workspace *ws, const char *from, const char *to, bool overwrite);

/* Read the regular file rel whole (sbx_fs_open_read's checks) into a fresh
 * NUL-terminated buffer (*data, caller frees; *len bytes). -EFBIG when it
 * is, or grows while read to, more than max bytes (*size then says how
 * big it was found); other errors as sbx_fs_open_read. */
int sbx_fs_read_all(const struct sbx_workspace *ws, const char *rel, size_t max, char **data, size_t *len,
		    uint64_t *size);

/* Atomic replacement of a file: a temp file beside the target
 * (".sandboxd-tmp-<leaf>-<random>", O_CREAT|O_EXCL|O_NOFOLLOW, 0644,
 * owned as the workspace says), written, fsync'ed, renameat'ed over the
 * target, then the directory fsync'ed. A reader sees the old content or
 * the new, never a mix; abort leaves the old file as it was. */
struct sbx_upload;
/* -SBX_E_PARENT_MISSING (parent missing and !mkparents), -EISDIR (target is
 * a directory, or the root), -EXDEV (a parent leaves the workspace, or the
 * target is a symlink leading out of it: refused, not replaced; a link that
 * stays inside is replaced as a link), -ENOTDIR, ... */
int sbx_upload_begin(struct sbx_upload **out, const struct sbx_workspace *ws, const char *rel,
		     bool mkparents);
/* Append n bytes. -ENOSPC, -EDQUOT, -EFBIG, -EIO ... (the upload stays
 * abortable). */
int sbx_upload_write(struct sbx_upload *up, const void *p, size_t n);
/* From now on gather writes in a buffer of bytes (allocated here, freed
 * with the upload) and write them to the file when it is full and at
 * commit: a body that arrives in small pieces costs one write(2) per
 * buffer, not per piece. A write error may then come from a later
 * sbx_upload_write or from the commit. Not for an upload to be published
 * (its readers must see every write): publish refuses it. */
void sbx_upload_gather(struct sbx_upload *up, size_t bytes);
/* Write what is gathered, fsync, rename into place, fsync the directory,
 * free. *size = bytes. On error the temp file is removed and the upload
 * freed all the same. */
int sbx_upload_commit(struct sbx_upload **up, uint64_t *size);
/* Rename the temp file into place now and keep writing to it (spill
 * files: whatever a command planted at the target, a FIFO, a socket or a
 * link, is replaced by the server's own regular file, which is then
 * written through the fd, never reopened by name). No fsync. Afterwards
 * abort only closes. -EISDIR if a directory took the target's place. */
int sbx_upload_publish(struct sbx_upload *up);
/* Remove the temp file (unless published) and free. Accepts NULL / *up NULL. */
void sbx_upload_abort(struct sbx_upload **up);
/* begin + write + commit of a buffer. */
int sbx_fs_write(const struct sbx_workspace *ws, const char *rel, const void *p, size_t n, bool mkparents);

/* Remove temp files of interrupted writes (".sandboxd-tmp-*") anywhere in
 * the workspace, never following symlinks. Returns how many were removed,
 * or a negative errno. */
int sbx_fs_sweep_temps(const struct sbx_workspace *ws);
