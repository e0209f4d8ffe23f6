#pragma once
/* Tenant workspaces, session directories and path resolution that cannot
 * escape. No HTTP here. A wire path is what a client sends ("notes.txt",
 * "/workspace/a/b"); a rel path is its normalised, workspace-relative form
 * ("sessions/chat_42-29c5c2leqt/notes.txt", "" for /workspace itself).
 * Every file operation goes through an fd-relative openat2() beneath the
 * workspace directory fd: string checks are never the security boundary. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SBX_SEGMENT_MAX 64 /* 32 readable bytes, '-', 13 base-36 digits, NUL */
#define SBX_PATH_MAX 4096  /* longest wire or rel path accepted */
#define SBX_NAME_MAX 255   /* longest path component accepted */

/* Whether the kernel (or the tool running us: valgrind 3.19 does not know
 * it) offers openat2. Without it no path can be resolved safely, and every
 * file operation fails with -ENOSYS (503). */
bool sbx_openat2_supported(void);

/* 64-bit djb2: h = 5381; h = h * 33 + byte (mod 2^64). */
uint64_t sbx_djb2_64(const char *p, size_t n);

/* The directory segment of a session key (wire.md "The model"): at most 32
 * leading bytes of the key, each outside [A-Za-z0-9._-] replaced by '_',
 * then '-', then base-36 of sbx_djb2_64(whole key). "chat:42" ->
 * "chat_42-29c5c2leqt". `salt` > 0 appends "-<salt>" (used by the store to
 * give a colliding key a distinct directory). */
void sbx_session_segment(const char *key, size_t len, unsigned salt, char out[SBX_SEGMENT_MAX]);

/* Who owns what the server creates in a workspace. When chown is true
 * (server runs as root), every file and directory created through this
 * module is fchown'ed to uid:gid, the uid the tenant's commands run as. */
struct sbx_owner {
	uid_t uid;
	gid_t gid;
	bool chown;
};

struct sbx_workspace;

/* Open the workspace at host_dir (creating it, and its parents, 0755, if
 * missing; owned by owner; host_dir itself made 0700, also when it was
 * there already) and keep an O_PATH|O_DIRECTORY fd on it.
 * Errors: negative errno. *out untouched on failure. */
int sbx_workspace_open(struct sbx_workspace **out, const char *host_dir, const struct sbx_owner *owner);
void sbx_workspace_free(struct sbx_workspace **ws);
int sbx_workspace_dirfd(const struct sbx_workspace *ws);
const char *sbx_workspace_host_dir(const struct sbx_workspace *ws);

/* Whether uid:gid (no supplementary groups) can reach dir: every
 * directory from / down to dir searchable by it, as the kernel decides
 * (a child process takes that identity and tries; ACLs and LSMs count).
 * 0, or -EACCES with the first directory it cannot pass copied to
 * blocked; other -errno when the check itself failed. Call it before any
 * thread of the server starts (it forks). */
int sbx_workspace_reachable(const char *dir, uid_t uid, gid_t gid, char *blocked, size_t blocked_sz);
const struct sbx_owner *sbx_workspace_owner(const struct sbx_workspace *ws);

/* Normalise a wire path (wire_len bytes, may contain NUL: refused) into
 * out (rel form). Relative paths resolve against session_rel (a rel path).
 * "." and ".." are resolved lexically. Errors: -EINVAL (empty, NUL,
 * component > SBX_NAME_MAX, path > SBX_PATH_MAX, out too small), -EXDEV
 * (absolute path not under /workspace, or ".." above /workspace). */
int sbx_path_normalize(const char *wire, size_t wire_len, const char *session_rel, char *out, size_t outsz);

/* The wire form of a rel path: "/workspace" or "/workspace/<rel>". */
void sbx_path_wire(const char *rel, char *out, size_t outsz);

/* openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV) of rel
 * beneath the workspace fd ("" opens the root itself); EAGAIN retried a few
 * times. Always O_CLOEXEC|O_NONBLOCK|O_NOCTTY: opening what a command
 * planted (a FIFO, a device) never blocks; check the type after opening. Returns the fd or a negative errno;
 * an escape (EXDEV, or a symlink leading out) is -EXDEV. */
int sbx_ws_openat(const struct sbx_workspace *ws, const char *rel, int flags, mode_t mode);

/* Open the parent directory of rel (O_DIRECTORY, beneath the workspace) and
 * point *leaf at rel's last component. mkparents creates missing parent
 * directories (0755, owned as above). Errors: -EINVAL for the root (no
 * parent), -SBX_E_PARENT_MISSING when a parent is missing and !mkparents,
 * -ENOTDIR when a parent is not a directory, -EXDEV, other -errno. */
int sbx_ws_open_parent(const struct sbx_workspace *ws, const char *rel, bool mkparents, int *dirfd,
		       const char **leaf);

/* Make sure sessions/<segment> exists (mkdir -p beneath the fd, owned as
 * above). Memoised: after the first success it costs a hash lookup; a
 * failure is not memoised, so a transient error does not poison the
 * session. Thread-safe. */
int sbx_session_dir_ensure(struct sbx_workspace *ws, const char *segment);
/* Forget the memo (after the session directory was removed). */
void sbx_session_dir_forget(struct sbx_workspace *ws, const char *segment);

/* openat2 of one name (no '/') beneath dirfd, never following a symlink at
 * any step (O_NOFOLLOW, RESOLVE_NO_SYMLINKS, plus the flags above): for
 * walks that already hold a directory fd inside the workspace. Returns the
 * fd or a negative errno (a symlink: -ELOOP, or -ENOTDIR with O_DIRECTORY). */
int sbx_ws_open_child(int dirfd, const char *name, int flags, mode_t mode);

/* mkdir rel (0755, owned as above) beneath the workspace. Not recursive:
 * -EEXIST if anything is there, -SBX_E_PARENT_MISSING if the parent is
 * missing. Recursive: each missing component is created with mkdirat on
 * its parent's fd; an existing directory (or an in-workspace link to one)
 * is fine; -EEXIST if a non-directory or dangling link is the last
 * component, -ENOTDIR if one is in the way earlier, -EXDEV on escapes.
 * "" is the root: 0 when recursive, else -EEXIST. */
int sbx_ws_mkdir(const struct sbx_workspace *ws, const char *rel, bool recursive);
