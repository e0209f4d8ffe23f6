/* Writing into a workspace (sandbox/fsops.h): an upload written to a
 * hidden temporary file beside its target and published by a rename
 * once whole (begin, write, commit, publish, abort), sbx_fs_write for a
 * buffer at once, and the sweep of the temporary files an interrupted
 * upload left behind. Reading, listing, stat, mkdir, rm and move are
 * fsops.c. */
#include "sandbox/fsops.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/nowait.h"
#include "common/errors.h"
#include "common/xmalloc.h"
#include "sandbox/fsops_int.h"

struct sbx_upload {
	int dirfd;
	int fd;
	char *leaf;
	char tmp[SBX_NAME_MAX + 1];
	uint64_t size;	   /* bytes written to fd */
	char *gather;	   /* sbx_upload_gather's buffer, or NULL */
	size_t gcap, glen; /* its size and what it holds */
};

static void upload_free(struct sbx_upload *up, bool unlink_tmp)
{
	if (up->fd >= 0)
		close(up->fd);
	if (unlink_tmp && up->tmp[0])
		unlinkat(up->dirfd, up->tmp, 0);
	if (up->dirfd >= 0)
		close(up->dirfd);
	free(up->gather);
	free(up->leaf);
	free(up);
}

static int tmp_name(char out[SBX_NAME_MAX + 1], const char *leaf)
{
	unsigned char rnd[TMP_RAND_HEX / 2];
	char hex[TMP_RAND_HEX + 1];
	size_t got = 0;
	int n;

	while (got < sizeof rnd) {
		ssize_t k = getrandom(rnd + got, sizeof rnd - got, 0);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)k;
	}
	for (size_t i = 0; i < sizeof rnd; i++)
		snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
	n = (int)strnlen(leaf, TMP_LEAF_MAX);
	snprintf(out, SBX_NAME_MAX + 1, TMP_PREFIX "%.*s-%s", n, leaf, hex);
	return 0;
}

/* Whether the symlink at rel leads out of the workspace (resolving it
 * beneath the root gives EXDEV; an absolute target always does). A dangling
 * link that stays inside does not. */
static bool link_escapes(const struct sbx_workspace *ws, const char *rel)
{
	int fd = sbx_ws_openat(ws, rel, O_PATH, 0);

	if (fd >= 0) {
		close(fd);
		return false;
	}
	return fd == -EXDEV;
}

int sbx_upload_begin(struct sbx_upload **out, const struct sbx_workspace *ws, const char *rel, bool mkparents)
{
	const struct sbx_owner *own = sbx_workspace_owner(ws);
	struct sbx_upload *up = NULL;
	const char *leaf;
	struct stat st;
	int pfd = -1, r;

	if (!rel || !*rel)
		return -EISDIR; /* the workspace root */
	r = sbx_ws_open_parent(ws, rel, mkparents, &pfd, &leaf);
	if (r < 0)
		return r;
	/* The target is replaced by rename, never written through: a symlink
	 * there is replaced as a link, not followed. */
	if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode)) {
			close(pfd);
			return -EISDIR;
		}
		/* Nothing outside would be written, but the path names a place
		 * outside the workspace: refuse it as wire.md says, rather than
		 * quietly replace the client's link with a file. */
		if (S_ISLNK(st.st_mode) && link_escapes(ws, rel)) {
			close(pfd);
			return -EXDEV;
		}
	}
	up = xcalloc(1, sizeof *up);
	up->dirfd = pfd;
	up->fd = -1;
	up->leaf = xstrdup(leaf);
	for (int i = 0; i < 8; i++) {
		r = tmp_name(up->tmp, leaf);
		if (r < 0)
			break;
		up->fd = sbx_ws_open_child(pfd, up->tmp, O_CREAT | O_EXCL | O_WRONLY, 0644);
		r = up->fd < 0 ? up->fd : 0;
		if (r != -EEXIST)
			break;
	}
	if (r < 0) {
		up->tmp[0] = '\0'; /* not ours to remove */
		goto out;
	}
	if (fchmod(up->fd, 0644) < 0 || (own->chown && fchown(up->fd, own->uid, own->gid) < 0)) {
		r = -errno;
		goto out;
	}
	*out = up;
	up = NULL;
	r = 0;
out:
	if (up)
		upload_free(up, true);
	return r;
}

static int write_all(struct sbx_upload *up, const char *c, size_t n)
{
	while (n > 0) {
		ssize_t k = write(up->fd, c, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			return -EIO;
		c += k;
		n -= (size_t)k;
		up->size += (uint64_t)k;
	}
	return 0;
}

/* Write what the gather buffer holds. */
static int gather_flush(struct sbx_upload *up)
{
	size_t n = up->glen;
	up->glen = 0;
	return n ? write_all(up, up->gather, n) : 0;
}

void sbx_upload_gather(struct sbx_upload *up, size_t bytes)
{
	if (up->gather || bytes == 0)
		return;
	up->gather = xmalloc(bytes);
	up->gcap = bytes;
}

int sbx_upload_write(struct sbx_upload *up, const void *p, size_t n)
{
	if (!up->gather)
		return write_all(up, p, n);
	if (n > up->gcap - up->glen) {
		int r = gather_flush(up);
		if (r < 0)
			return r;
		if (n >= up->gcap)
			return write_all(up, p, n);
	}
	memcpy(up->gather + up->glen, p, n);
	up->glen += n;
	return 0;
}

int sbx_upload_commit(struct sbx_upload **pup, uint64_t *size)
{
	struct sbx_upload *up;
	int r;

	if (!pup || !*pup)
		return -EINVAL;
	up = *pup;
	*pup = NULL;
	if ((r = gather_flush(up)) < 0)
		goto out;
	if (fsync(up->fd) < 0) {
		r = -errno;
		goto out;
	}
	r = close(up->fd);
	up->fd = -1;
	if (r < 0) {
		r = -errno;
		goto out;
	}
	if (renameat(up->dirfd, up->tmp, up->dirfd, up->leaf) < 0) {
		r = -errno;
		goto out;
	}
	up->tmp[0] = '\0';
	/* The rename is done: a failing directory fsync is reported, but the
	 * new file is in place. */
	r = fsync(up->dirfd) < 0 ? -errno : 0;
	if (size)
		*size = up->size;
out:
	upload_free(up, true);
	return r;
}

int sbx_upload_publish(struct sbx_upload *up)
{
	if (!up || !up->tmp[0] || up->gather)
		return -EINVAL;
	if (renameat(up->dirfd, up->tmp, up->dirfd, up->leaf) < 0)
		return -errno;
	up->tmp[0] = '\0';
	return 0;
}

void sbx_upload_abort(struct sbx_upload **pup)
{
	if (!pup || !*pup)
		return;
	upload_free(*pup, true);
	*pup = NULL;
}

int sbx_fs_write(const struct sbx_workspace *ws, const char *rel, const void *p, size_t n, bool mkparents)
{
	struct sbx_upload *up = NULL;
	int r;

	r = sbx_upload_begin(&up, ws, rel, mkparents);
	if (r < 0)
		return r;
	r = sbx_upload_write(up, p, n);
	if (r < 0) {
		sbx_upload_abort(&up);
		return r;
	}
	return sbx_upload_commit(&up, NULL);
}

static int sweep_dir(int dfd, int depth)
{
	char **names = NULL;
	size_t n = 0;
	int count = 0, r;

	if (depth > WALK_DEPTH_MAX)
		return 0;
	r = sbx_fs_list_names(dfd, &names, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		int cfd;

		if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISREG(st.st_mode) && strncmp(names[i], TMP_PREFIX, TMP_PREFIX_LEN) == 0) {
			if (unlinkat(dfd, names[i], 0) == 0)
				count++;
			continue;
		}
		if (!S_ISDIR(st.st_mode))
			continue;
		cfd = sbx_ws_open_child(dfd, names[i], O_RDONLY | O_DIRECTORY, 0);
		if (cfd < 0)
			continue; /* swapped for a link, or unreadable: skip */
		r = sweep_dir(cfd, depth + 1);
		close(cfd);
		if (r > 0)
			count += r;
	}
	sbx_fs_free_names(names, n);
	return count;
}

int sbx_fs_sweep_temps(const struct sbx_workspace *ws)
{
	int dfd, r;

	dfd = sbx_ws_openat(ws, "", O_RDONLY | O_DIRECTORY, 0);
	if (dfd < 0)
		return dfd;
	r = sweep_dir(dfd, 0);
	close(dfd);
	return r;
}
