#pragma once
/* Which files a command created, modified or deleted under a directory of
 * the workspace (POST /code's and track_changes' files_changed): a
 * snapshot before the run, a second one after it, compared.
 *
 * A snapshot walks the directory with fd-relative opens that never follow
 * a symlink (a link is neither descended nor listed) and records, for each
 * regular file, its device, inode, size, mtime and ctime (both in ns).
 * A file is "modified" when any of these differ between the two snapshots:
 * every write, truncate, chmod or replacement by rename changes the ctime
 * or the inode, and no system call lets a command set the ctime back, so a
 * change cannot hide (a metadata-only change counts as a modification).
 * File times tick with a coarse clock, though: a file changed within 20 ms
 * of the first walk is hashed by it (16 MiB of such files at most), and
 * compared by content when its metadata looks unchanged afterwards (one
 * the first walk could not hash is then listed as modified: a change is
 * never missed, at worst a file is listed that did not change).
 * Created and modified files are then hashed (SHA-256 of the content read
 * through an fd opened O_NOFOLLOW|O_NONBLOCK, its type checked); a file
 * that changes while it is hashed (fstat before and after differ) is
 * hashed again, twice at most, then reported without a sha256.
 *
 * Bounds: a snapshot records at most max_files files and descends at most
 * SBX_CHANGES_MAX_DEPTH directories; at most max_reported changes are
 * reported; hashing reads at most max_hash_bytes in all (files beyond get
 * no sha256). Hitting any bound sets truncated. Not thread-safe per
 * object; any thread may call (the walk never blocks on a FIFO). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX_CHANGES_MAX_DEPTH 64
/* A walk looks at no more than max_files times this many directory
 * entries of any type (directories, links, FIFOs included), then says
 * truncated: a tree of links or empty directories costs it no more than
 * a tree of files. */
#define SBX_CHANGES_ENTRIES_PER_FILE 4

struct sbx_workspace;
struct sbx_snapshot;

enum sbx_change_kind { SBX_CHANGE_CREATED, SBX_CHANGE_MODIFIED, SBX_CHANGE_DELETED };
const char *sbx_change_kind_name(enum sbx_change_kind k); /* "created", "modified", "deleted" */

struct sbx_change {
	char *rel; /* workspace-relative path (see workspace.h), owned */
	enum sbx_change_kind kind;
	uint64_t size;	 /* now; for a deleted file, before */
	bool hashed;	 /* sha256 is set */
	char sha256[65]; /* lowercase hex */
};

struct sbx_changes_limits {
	size_t max_files;	 /* per snapshot */
	size_t max_reported;	 /* changes listed */
	uint64_t max_hash_bytes; /* read for hashing, in all */
};

/* Snapshot directory dir_rel (a rel path, e.g. "sessions/<segment>").
 * A missing directory is an empty snapshot. -EXDEV, -ENOTDIR, -errno. */
int sbx_snapshot_take(const struct sbx_workspace *ws, const char *dir_rel, size_t max_files,
		      struct sbx_snapshot **out);
void sbx_snapshot_free(struct sbx_snapshot **s);

/* Take the second snapshot of before's directory now and compare:
 * *out (caller frees with sbx_changes_free) holds the changes sorted by
 * path; *truncated says a bound was hit (either snapshot's, the report's
 * or the hashing budget). 0 or -errno (the second walk failed). */
int sbx_changes_diff(const struct sbx_workspace *ws, const struct sbx_snapshot *before,
		     const struct sbx_changes_limits *lim, struct sbx_change **out, size_t *n,
		     bool *truncated);
void sbx_changes_free(struct sbx_change *c, size_t n);
