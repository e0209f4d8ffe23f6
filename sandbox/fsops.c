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

const char *sbx_ftype_name(enum sbx_ftype t)
{
	switch (t) {
	case SBX_FT_FILE:
		return "file";
	case SBX_FT_DIR:
		return "directory";
	case SBX_FT_SYMLINK:
		return "symlink";
	case SBX_FT_OTHER:
	default:
		return "other";
	}
}

static enum sbx_ftype ftype_of(mode_t m)
{
	if (S_ISREG(m))
		return SBX_FT_FILE;
	if (S_ISDIR(m))
		return SBX_FT_DIR;
	if (S_ISLNK(m))
		return SBX_FT_SYMLINK;
	return SBX_FT_OTHER;
}

static void fill_stat(struct sbx_stat *out, const struct stat *st)
{
	out->type = ftype_of(st->st_mode);
	out->size = (uint64_t)st->st_size;
	out->mtime = st->st_mtim;
	out->mode = st->st_mode & 07777;
}

static bool same_inode(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* "", "sessions" and "sessions/<x>" by name. */
static bool is_root_rel(const char *rel)
{
	if (!*rel || strcmp(rel, "sessions") == 0)
		return true;
	return strncmp(rel, "sessions/", 9) == 0 && rel[9] && !strchr(rel + 9, '/');
}

/* The same by identity, for names reached through in-workspace links
 * ("l/sessions" with l -> "."): is pfd/leaf the sessions directory, or
 * pfd the sessions directory itself? */
static int check_root_identity(const struct sbx_workspace *ws, int pfd)
{
	int root = sbx_workspace_dirfd(ws);
	struct stat pst, st;

	if (fstat(pfd, &pst) < 0)
		return -errno;
	if (fstatat(root, "sessions", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
	    same_inode(&st, &pst))
		return -SBX_E_ROOT;
	return 0;
}

static int check_not_root(const struct sbx_workspace *ws, const char *rel, int pfd, const char *leaf)
{
	struct stat pst, rst;

	if (is_root_rel(rel))
		return -SBX_E_ROOT;
	if (fstat(pfd, &pst) < 0 || fstat(sbx_workspace_dirfd(ws), &rst) < 0)
		return -errno;
	if (same_inode(&pst, &rst) && strcmp(leaf, "sessions") == 0)
		return -SBX_E_ROOT;
	return check_root_identity(ws, pfd);
}

void sbx_fs_free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

int sbx_fs_list_names(int dfd, char ***out, size_t *nout)
{
	char **names = NULL;
	size_t n = 0, cap = 0;
	DIR *d = NULL;
	int fd, r = 0;

	fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		r = -errno;
		close(fd);
		return r;
	}
	for (;;) {
		struct dirent *e;

		errno = 0;
		e = readdir(d);
		if (!e) {
			r = errno ? -errno : 0;
			break;
		}
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			names = xrealloc(names, cap * sizeof *names);
		}
		names[n++] = xstrdup(e->d_name);
	}
	closedir(d);
	if (r < 0) {
		sbx_fs_free_names(names, n);
		return r;
	}
	*out = names;
	*nout = n;
	return 0;
}

int sbx_fs_stat(const struct sbx_workspace *ws, const char *rel, struct sbx_stat *out)
{
	struct stat st;
	int fd = -1, tfd = -1, r;

	fd = sbx_ws_openat(ws, rel, O_PATH | O_NOFOLLOW, 0);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	memset(out, 0, sizeof *out);
	fill_stat(out, &st);
	if (S_ISLNK(st.st_mode)) {
		struct stat tst;

		out->is_symlink = true;
		/* Follow only if the whole resolution stays beneath the root;
		 * otherwise (escaping, dangling, looping) describe the link. */
		tfd = sbx_ws_openat(ws, rel, O_PATH, 0);
		if (tfd == -EAGAIN && nowait_on()) { /* not "unfollowable": unknown yet */
			r = -EAGAIN;
			goto out;
		}
		if (tfd >= 0 && fstat(tfd, &tst) == 0) {
			fill_stat(out, &tst);
			out->followed = true;
		}
	}
	r = 0;
out:
	if (tfd >= 0)
		close(tfd);
	close(fd);
	return r;
}

/* One open, then the type of what was opened: the fd read is the object
 * checked, so nothing can be swapped in between. Every open beneath the
 * workspace is O_NONBLOCK|O_NOCTTY (sbx_ws_openat), so a FIFO opens at
 * once without waiting for a writer (and is closed unread: its bytes stay
 * for the tenant's own reader), a socket fails with ENXIO, a directory
 * opens and is refused here. Devices: a command in the sandbox can make
 * only the whiteout (0:0), which no driver opens (ENXIO); a device with a
 * driver behind it can only be put in a workspace by someone who could
 * open it directly (root on the host, or a command of the unisolated local
 * backend), so opening it here gives nobody anything new, and workspaces
 * on a tenant's disk image are mounted nodev anyway (EACCES). This is what
 * nginx does too (open O_NONBLOCK, then fstat); it replaced an O_PATH
 * look-up and fstat before the open, three system calls a read (issue 15;
 * tests/integration/test_fs_planted.c plants each kind). */
int sbx_fs_open_read(const struct sbx_workspace *ws, const char *rel, int *fdp, uint64_t *size)
{
	struct stat st;
	int fd, r;

	fd = sbx_ws_openat(ws, rel, O_RDONLY, 0);
	if (fd == -ENXIO || fd == -ENODEV)
		return -SBX_E_SPECIAL;
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		r = S_ISDIR(st.st_mode) ? -EISDIR : -SBX_E_SPECIAL;
		goto fail;
	}
	/* O_NONBLOCK stays: it means nothing for a regular file. */
	*fdp = fd;
	*size = (uint64_t)st.st_size;
	return 0;
fail:
	close(fd);
	return r;
}

static int cmp_dirents(const void *a, const void *b)
{
	return strcmp(((const struct sbx_dirent *)a)->name, ((const struct sbx_dirent *)b)->name);
}

/* ---- pages ---- */

#define DENTS_BUF (64u * 1024u)
#define CURSOR_HEX 24

struct dent64 { /* what getdents64 writes (glibc 2.36 has no wrapper type) */
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* A check of the directory's identity and the offset: a cursor of another
 * directory, or a mangled one, is refused rather than followed. Not a
 * secret: a forged cursor only lists the caller's own directory. */
static uint32_t cursor_check(const struct stat *dir, uint64_t off)
{
	uint64_t h = off ^ 0x9e3779b97f4a7c15ULL;
	h ^= (uint64_t)dir->st_ino * 0xbf58476d1ce4e5b9ULL;
	h ^= (uint64_t)dir->st_dev * 0x94d049bb133111ebULL;
	h ^= h >> 31;
	h *= 0xd6e8feb86659fd93ULL;
	h ^= h >> 32;
	return (uint32_t)h;
}

static int cursor_parse(const struct stat *dir, const char *s, uint64_t *off)
{
	if (strlen(s) != CURSOR_HEX)
		return -EBADMSG;
	for (size_t i = 0; i < CURSOR_HEX; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return -EBADMSG;
	char hi[17];
	memcpy(hi, s, 16);
	hi[16] = '\0';
	uint64_t o = strtoull(hi, NULL, 16);
	uint32_t c = (uint32_t)strtoul(s + 16, NULL, 16);
	if (c != cursor_check(dir, o) || o > INT64_MAX)
		return -EBADMSG;
	*off = o;
	return 0;
}

static enum sbx_ftype ftype_of_dtype(unsigned char t)
{
	return t == DT_REG   ? SBX_FT_FILE
	       : t == DT_DIR ? SBX_FT_DIR
	       : t == DT_LNK ? SBX_FT_SYMLINK
			     : SBX_FT_OTHER;
}

/* One entry into *e: 1 kept, 0 left out (an upload in flight, or gone
 * since listed), or -errno. */
static int take_entry(int dfd, const struct dent64 *d, bool detail, struct sbx_dirent *e)
{
	bool tmp = strncmp(d->d_name, TMP_PREFIX, TMP_PREFIX_LEN) == 0;
	struct stat st;
	if (detail || d->d_type == DT_UNKNOWN || (tmp && d->d_type == DT_REG)) {
		if (fstatat(dfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return errno == ENOENT ? 0 : -errno;
		if (tmp && S_ISREG(st.st_mode))
			return 0;
		e->type = ftype_of(st.st_mode);
		e->size = (uint64_t)st.st_size;
		e->mtime = st.st_mtim;
	} else {
		e->type = ftype_of_dtype(d->d_type);
	}
	e->name = xstrdup(d->d_name);
	return 1;
}

/* Fill p from dfd's current position: entries until limit, then a look
 * at the next one for p->more; *last gets the d_off after the last entry
 * taken. */
static int read_page(int dfd, size_t limit, bool detail, struct sbx_dir_page *p, uint64_t *last)
{
	char *buf = xmalloc(DENTS_BUF);
	size_t scanned = 0, budget = 2 * limit + 1024;
	int rc = 0;
	for (;;) {
		long nread = syscall(SYS_getdents64, dfd, buf, DENTS_BUF);
		if (nread <= 0) {
			rc = nread < 0 ? -errno : 0;
			break;
		}
		for (long off = 0; off < nread;) {
			const struct dent64 *d = (const struct dent64 *)(buf + off);
			off += d->d_reclen;
			if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0) {
				*last = (uint64_t)d->d_off;
				continue;
			}
			if (p->n == limit || scanned == budget) {
				p->more = true; /* an entry follows the page */
				goto out;
			}
			scanned++;
			int k = take_entry(dfd, d, detail, &p->ents[p->n]);
			if (k < 0) {
				rc = k;
				goto out;
			}
			p->n += (size_t)k;
			*last = (uint64_t)d->d_off;
		}
	}
out:
	free(buf);
	return rc;
}

int sbx_fs_readdir_page(const struct sbx_workspace *ws, const char *rel, const char *after, size_t limit,
			bool detail, struct sbx_dir_page *out)
{
	struct sbx_dir_page p = {0};
	struct stat st;
	uint64_t pos = 0;
	int rc = 0, dfd = sbx_ws_openat(ws, rel, O_RDONLY | O_DIRECTORY, 0);
	if (dfd < 0)
		return dfd;
	if (fstat(dfd, &st) < 0)
		rc = -errno;
	if (rc == 0 && after && (rc = cursor_parse(&st, after, &pos)) == 0 &&
	    lseek(dfd, (off_t)pos, SEEK_SET) < 0)
		rc = -errno;
	if (rc == 0) {
		p.ents = xcalloc(limit ? limit : 1, sizeof *p.ents);
		rc = read_page(dfd, limit ? limit : 1, detail, &p, &pos);
	}
	close(dfd);
	if (rc < 0) {
		sbx_dir_page_clear(&p);
		return rc;
	}
	qsort(p.ents, p.n, sizeof *p.ents, cmp_dirents);
	if (p.more)
		snprintf(p.next, sizeof p.next, "%016" PRIx64 "%08" PRIx32, pos, cursor_check(&st, pos));
	*out = p;
	return 0;
}

void sbx_dir_page_clear(struct sbx_dir_page *p)
{
	sbx_dirents_free(p->ents, p->n);
	*p = (struct sbx_dir_page){0};
}

void sbx_dirents_free(struct sbx_dirent *d, size_t n)
{
	if (!d)
		return;
	for (size_t i = 0; i < n; i++)
		free(d[i].name);
	free(d);
}

int sbx_fs_exists(const struct sbx_workspace *ws, const char *rel, bool *out)
{
	int fd = sbx_ws_openat(ws, rel, O_PATH | O_NOFOLLOW, 0);

	if (fd >= 0) {
		close(fd);
		*out = true;
		return 0;
	}
	if (fd == -ENOENT || fd == -ENOTDIR || fd == -ELOOP) {
		*out = false;
		return 0;
	}
	return fd;
}

int sbx_fs_mkdir(const struct sbx_workspace *ws, const char *rel, bool recursive)
{
	return sbx_ws_mkdir(ws, rel, recursive);
}

/* Remove name (a directory when known) from dfd, recursively, never
 * following a symlink: children are opened with sbx_ws_open_child. */
static int remove_tree(int dfd, const char *name, int depth)
{
	char **names = NULL;
	size_t n = 0;
	int cfd = -1, r;

	if (depth > WALK_DEPTH_MAX)
		return -ELOOP;
	cfd = sbx_ws_open_child(dfd, name, O_RDONLY | O_DIRECTORY, 0);
	if (cfd == -ELOOP || cfd == -ENOTDIR) {
		/* Swapped for a link or a file since we looked: unlink it as
		 * what it now is, never descend through it. */
		r = unlinkat(dfd, name, 0) < 0 ? -errno : 0;
		goto out;
	}
	if (cfd < 0) {
		r = cfd;
		goto out;
	}
	r = sbx_fs_list_names(cfd, &names, &n);
	if (r < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		struct stat st;

		if (fstatat(cfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			r = -errno;
			goto out;
		}
		if (S_ISDIR(st.st_mode)) {
			r = remove_tree(cfd, names[i], depth + 1);
		} else if (unlinkat(cfd, names[i], 0) < 0) {
			r = -errno;
			if (r == -EISDIR) /* became a directory */
				r = remove_tree(cfd, names[i], depth + 1);
		}
		if (r == -ENOENT)
			r = 0;
		if (r < 0)
			goto out;
	}
	r = unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
	if (r == -ENOTDIR) /* swapped for a non-directory: remove that */
		r = unlinkat(dfd, name, 0) < 0 ? -errno : 0;
out:
	sbx_fs_free_names(names, n);
	if (cfd >= 0)
		close(cfd);
	return r;
}

int sbx_fs_rm(const struct sbx_workspace *ws, const char *rel, bool recursive, bool force, bool *removed)
{
	const char *leaf;
	struct stat st;
	int pfd = -1, r;

	*removed = false;
	if (is_root_rel(rel))
		return -SBX_E_ROOT;
	r = sbx_ws_open_parent(ws, rel, false, &pfd, &leaf);
	if (r == -SBX_E_PARENT_MISSING)
		r = -ENOENT;
	if (r < 0)
		goto out;
	r = check_not_root(ws, rel, pfd, leaf);
	if (r < 0)
		goto out;
	if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		r = -errno;
		goto out;
	}
	if (!S_ISDIR(st.st_mode)) {
		r = unlinkat(pfd, leaf, 0) < 0 ? -errno : 0;
		if (r == -EISDIR && !recursive)
			r = unlinkat(pfd, leaf, AT_REMOVEDIR) < 0 ? -errno : 0;
		else if (r == -EISDIR)
			r = remove_tree(pfd, leaf, 0);
	} else if (!recursive) {
		r = unlinkat(pfd, leaf, AT_REMOVEDIR) < 0 ? -errno : 0;
		if (r == -ENOTDIR)
			r = unlinkat(pfd, leaf, 0) < 0 ? -errno : 0;
	} else {
		r = remove_tree(pfd, leaf, 0);
	}
	if (r == -EEXIST)
		r = -ENOTEMPTY;
	if (r == 0)
		*removed = true;
out:
	if (r < 0 && force && (r == -ENOENT || r == -ENOTDIR) && !*removed)
		r = 0;
	if (pfd >= 0)
		close(pfd);
	return r;
}

int sbx_session_dir_remove(struct sbx_workspace *ws, const char *segment)
{
	int sfd, r;

	if (!segment || !*segment || strnlen(segment, SBX_SEGMENT_MAX) >= SBX_SEGMENT_MAX ||
	    strchr(segment, '/') || strcmp(segment, ".") == 0 || strcmp(segment, "..") == 0)
		return -EINVAL;
	sbx_session_dir_forget(ws, segment);
	sfd = sbx_ws_open_child(sbx_workspace_dirfd(ws), "sessions", O_RDONLY | O_DIRECTORY, 0);
	/* No real sessions directory (missing, or a tenant's command put a
	 * link or a file there): there is no session directory to remove. */
	if (sfd == -ENOENT || sfd == -ELOOP || sfd == -ENOTDIR)
		return 0;
	if (sfd < 0)
		return sfd;
	r = remove_tree(sfd, segment, 0);
	close(sfd);
	if (r == -ENOENT)
		r = 0;
	/* Again: a request of the session may have made it anew meanwhile. */
	sbx_session_dir_forget(ws, segment);
	return r;
}

int sbx_fs_move(const struct sbx_workspace *ws, const char *from, const char *to, bool overwrite)
{
	const char *fleaf, *tleaf;
	int fpfd = -1, tpfd = -1, r;

	if (is_root_rel(from) || is_root_rel(to))
		return -SBX_E_ROOT;
	r = sbx_ws_open_parent(ws, from, false, &fpfd, &fleaf);
	if (r == -SBX_E_PARENT_MISSING)
		r = -ENOENT;
	if (r < 0)
		goto out;
	r = sbx_ws_open_parent(ws, to, false, &tpfd, &tleaf);
	if (r < 0)
		goto out;
	r = check_not_root(ws, from, fpfd, fleaf);
	if (r == 0)
		r = check_not_root(ws, to, tpfd, tleaf);
	if (r < 0)
		goto out;
	if (renameat2(fpfd, fleaf, tpfd, tleaf, overwrite ? 0 : RENAME_NOREPLACE) < 0) {
		r = -errno;
		if (r == -EEXIST && overwrite)
			r = -ENOTEMPTY;
		goto out;
	}
	r = 0;
out:
	if (fpfd >= 0)
		close(fpfd);
	if (tpfd >= 0)
		close(tpfd);
	return r;
}

/* read(2), or in no-wait mode (common/nowait.h) only bytes the page cache
 * holds: EAGAIN (or EOPNOTSUPP where the filesystem cannot say) marks the
 * thread, and the caller's work is done again where waiting is allowed. */
static ssize_t read_some(int fd, void *p, size_t n)
{
	if (!nowait_on())
		return read(fd, p, n);
	struct iovec iov = {.iov_base = p, .iov_len = n};
	ssize_t got = preadv2(fd, &iov, 1, -1, RWF_NOWAIT);
	if (got < 0 && (errno == EAGAIN || errno == EOPNOTSUPP)) {
		nowait_blocked();
		errno = EAGAIN;
	}
	return got;
}

int sbx_fs_read_all(const struct sbx_workspace *ws, const char *rel, size_t max, char **data, size_t *len,
		    uint64_t *size)
{
	uint64_t found = 0;
	size_t got = 0, cap;
	char *p = NULL;
	int fd = -1, r;

	r = sbx_fs_open_read(ws, rel, &fd, &found);
	if (size)
		*size = found;
	if (r < 0)
		return r;
	if (found > max) {
		r = -EFBIG;
		goto out;
	}
	/* One read of the size found and one byte more. Coming back short of
	 * that byte with exactly the size fstat gave, the read met the end of
	 * the file: no second read to confirm it. A file that grew meanwhile
	 * fills the extra byte, and is read on to its new end (up to max); one
	 * that shrank comes back shorter and is read until a read gives 0. So
	 * the answer is the file as it was at some instant of the read, and
	 * its Content-Length (the buffer's) is always the bytes sent. */
	cap = (size_t)found + 1;
	p = xmalloc(cap + 1);
	for (;;) {
		ssize_t n = read_some(fd, p + got, cap - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
		if (got == found && got < cap)
			break;
		if (got == cap) {
			if (got > max) {
				r = -EFBIG;
				goto out;
			}
			cap = cap * 2 < max + 1 ? cap * 2 : max + 1;
			p = xrealloc(p, cap + 1);
		}
	}
	p[got] = '\0';
	*data = p;
	*len = got;
	p = NULL;
	r = 0;
out:
	free(p);
	close(fd);
	return r;
}
