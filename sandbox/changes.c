/* files_changed: two snapshots of a directory, compared (see changes.h). */
#include "sandbox/changes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "sandbox/workspace.h"

#define HASH_CHUNK (64 * 1024)
#define HASH_TRIES 3
/* File times come from a coarse clock (one tick, 1-10 ms): a file changed
 * in the tick of the first walk may show the same times after a second
 * change. Such "racy" files (git's word) are hashed by the first walk, and
 * compared by content when their metadata looks unchanged. */
#define RACY_NS (20 * 1000000LL)
#define RACY_HASH_MAX (16u << 20)

struct entry {
	char *path; /* relative to the snapshot's directory */
	dev_t dev;
	ino_t ino;
	uint64_t size;
	struct timespec mtime, ctime;
	bool racy;	  /* changed within RACY_NS of the walk */
	bool racy_hashed; /* sha holds its content then */
	unsigned char sha[32];
};

struct sbx_snapshot {
	char *dir_rel;
	struct entry *v;
	size_t n, cap, max;
	size_t seen; /* directory entries looked at, of any type */
	bool truncated;
	struct timespec taken; /* CLOCK_REALTIME_COARSE, the file times' clock */
	uint64_t racy_budget;
};

static bool digest_fd(int fd, unsigned char md[32], uint64_t *size, uint64_t *budget);

static int64_t ts_ns(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

const char *sbx_change_kind_name(enum sbx_change_kind k)
{
	return k == SBX_CHANGE_CREATED ? "created" : k == SBX_CHANGE_MODIFIED ? "modified" : "deleted";
}

static void add_entry(struct sbx_snapshot *s, int dfd, const char *name, const char *path,
		      const struct stat *st)
{
	int64_t since = ts_ns(s->taken) - RACY_NS;
	bool racy = ts_ns(st->st_ctim) >= since || ts_ns(st->st_mtim) >= since;

	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 64;
		s->v = xrealloc(s->v, s->cap * sizeof *s->v);
	}
	s->v[s->n++] = (struct entry){.path = xstrdup(path),
				      .dev = st->st_dev,
				      .ino = st->st_ino,
				      .size = (uint64_t)st->st_size,
				      .mtime = st->st_mtim,
				      .ctime = st->st_ctim,
				      .racy = racy};
	if (racy) {
		struct entry *e = &s->v[s->n - 1];
		int fd = sbx_ws_open_child(dfd, name, O_RDONLY, 0);
		uint64_t size = 0;

		if (fd >= 0) {
			e->racy_hashed = digest_fd(fd, e->sha, &size, &s->racy_budget);
			close(fd);
		}
	}
}

/* Walk dfd (owned, closed here); prefix is the path of dfd ("" at the top). */
static int walk(struct sbx_snapshot *s, int dfd, const char *prefix, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;

	if (!d) {
		int rc = -errno;
		close(dfd);
		return rc;
	}
	while ((de = readdir(d)) != NULL) {
		struct stat st;
		char *path;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		/* Every entry costs a fstatat: links, FIFOs and directories
		 * count against the walk's bound too, not only the files. */
		if (++s->seen > s->max * SBX_CHANGES_ENTRIES_PER_FILE) {
			s->truncated = true;
			break;
		}
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone meanwhile */
		if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
			continue; /* links, FIFOs, sockets, devices: not files */
		if (s->n >= s->max) {
			s->truncated = true;
			break;
		}
		path = prefix[0] ? xasprintf("%s/%s", prefix, de->d_name) : xstrdup(de->d_name);
		if (S_ISREG(st.st_mode)) {
			add_entry(s, dirfd(d), de->d_name, path, &st);
		} else if (depth >= SBX_CHANGES_MAX_DEPTH) {
			s->truncated = true;
		} else {
			/* never through a link swapped in since the fstatat */
			int cfd = sbx_ws_open_child(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY, 0);
			if (cfd >= 0)
				walk(s, cfd, path, depth + 1);
		}
		free(path);
	}
	closedir(d);
	return 0;
}

static int by_path(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->path, ((const struct entry *)b)->path);
}

int sbx_snapshot_take(const struct sbx_workspace *ws, const char *dir_rel, size_t max_files,
		      struct sbx_snapshot **out)
{
	struct sbx_snapshot *s = xcalloc(1, sizeof *s);
	int fd = sbx_ws_openat(ws, dir_rel, O_RDONLY | O_DIRECTORY, 0);

	s->dir_rel = xstrdup(dir_rel);
	s->max = max_files;
	s->racy_budget = RACY_HASH_MAX;
	clock_gettime(CLOCK_REALTIME_COARSE, &s->taken);
	if (fd < 0 && fd != -ENOENT) {
		sbx_snapshot_free(&s);
		return fd;
	}
	if (fd >= 0) {
		int rc = walk(s, fd, "", 0);
		if (rc < 0) {
			sbx_snapshot_free(&s);
			return rc;
		}
	}
	if (s->n)
		qsort(s->v, s->n, sizeof *s->v, by_path);
	*out = s;
	return 0;
}

void sbx_snapshot_free(struct sbx_snapshot **ps)
{
	struct sbx_snapshot *s = ps ? *ps : NULL;

	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].path);
	free(s->v);
	free(s->dir_rel);
	free(s);
	*ps = NULL;
}

static bool ts_eq(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static bool same_file(const struct entry *a, const struct entry *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size && ts_eq(a->mtime, b->mtime) &&
	       ts_eq(a->ctime, b->ctime);
}

/* Open path (relative to dir_rel) one component at a time, no links. */
static int open_nofollow(const struct sbx_workspace *ws, const char *dir_rel, const char *path)
{
	char *copy = xstrdup(path);
	int cur = sbx_ws_openat(ws, dir_rel, O_RDONLY | O_DIRECTORY, 0);

	for (char *c = copy; c && cur >= 0;) {
		char *slash = strchr(c, '/');
		int fd;

		if (slash)
			*slash = '\0';
		fd = sbx_ws_open_child(cur, c, slash ? O_RDONLY | O_DIRECTORY : O_RDONLY, 0);
		close(cur);
		cur = fd;
		c = slash ? slash + 1 : NULL;
	}
	free(copy);
	return cur;
}

/* Hash one file within *budget. true with ch->sha256 and ch->size set. */
static bool hash_file(int fd, struct sbx_change *ch, uint64_t *budget)
{
	unsigned char md[32];
	uint64_t size = 0;

	if (!digest_fd(fd, md, &size, budget))
		return false;
	for (size_t i = 0; i < 32; i++)
		snprintf(ch->sha256 + 2 * i, 3, "%02x", md[i]);
	ch->size = size;
	return true;
}

/* SHA-256 of a regular file's whole content, read within *budget; retried
 * when it changes while read. */
static bool digest_fd(int fd, unsigned char md[32], uint64_t *size, uint64_t *budget)
{
	for (int attempt = 0; attempt < HASH_TRIES; attempt++) {
		struct stat a, b;
		unsigned char *buf;
		unsigned int mdlen = 0;
		bool ok = true;
		EVP_MD_CTX *ctx;

		if (fstat(fd, &a) < 0 || !S_ISREG(a.st_mode) || (uint64_t)a.st_size > *budget)
			return false;
		if (lseek(fd, 0, SEEK_SET) < 0)
			return false;
		ctx = EVP_MD_CTX_new();
		buf = xmalloc(HASH_CHUNK);
		EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
		for (uint64_t left = (uint64_t)a.st_size + 1; ok;) {
			ssize_t n = read(fd, buf, HASH_CHUNK < left ? HASH_CHUNK : left);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				ok = n == 0;
				break;
			}
			EVP_DigestUpdate(ctx, buf, (size_t)n);
			left -= (uint64_t)n;
			*budget -= (uint64_t)n < *budget ? (uint64_t)n : *budget;
			ok = left > 0; /* grew past its size: changed while read */
		}
		EVP_DigestFinal_ex(ctx, md, &mdlen);
		EVP_MD_CTX_free(ctx);
		free(buf);
		if (ok && fstat(fd, &b) == 0 && b.st_size == a.st_size && ts_eq(a.st_mtim, b.st_mtim) &&
		    ts_eq(a.st_ctim, b.st_ctim)) {
			*size = (uint64_t)b.st_size;
			return true;
		}
	}
	return false;
}

static void push(struct sbx_change **v, size_t *n, size_t *cap, const char *dir_rel, const struct entry *e,
		 enum sbx_change_kind kind)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 16;
		*v = xrealloc(*v, *cap * sizeof **v);
	}
	(*v)[(*n)++] = (struct sbx_change){
	    .rel = dir_rel[0] ? xasprintf("%s/%s", dir_rel, e->path) : xstrdup(e->path),
	    .kind = kind,
	    .size = e->size,
	};
}

/* A racy file whose metadata looks the same: is its content too? One the
 * first walk could not hash counts as changed (never a change missed). */
static bool racy_changed(const struct sbx_workspace *ws, const char *dir_rel, const struct entry *e,
			 uint64_t *budget)
{
	unsigned char md[32];
	uint64_t size = 0;
	int fd;
	bool same;

	if (!e->racy_hashed)
		return true;
	fd = open_nofollow(ws, dir_rel, e->path);
	if (fd < 0)
		return true;
	same = digest_fd(fd, md, &size, budget) && memcmp(md, e->sha, sizeof md) == 0;
	close(fd);
	return !same;
}

/* Merge the two sorted lists into changes (at most max_reported). */
static void compare(const struct sbx_workspace *ws, const struct sbx_snapshot *a,
		    const struct sbx_snapshot *b, size_t max, struct sbx_change **v, size_t *n,
		    bool *truncated)
{
	size_t i = 0, k = 0, cap = 0;
	uint64_t budget = RACY_HASH_MAX;

	while (i < a->n || k < b->n) {
		int c = i == a->n ? 1 : k == b->n ? -1 : strcmp(a->v[i].path, b->v[k].path);
		const struct entry *e = c < 0 ? &a->v[i] : &b->v[k];
		enum sbx_change_kind kind = c < 0   ? SBX_CHANGE_DELETED
					    : c > 0 ? SBX_CHANGE_CREATED
						    : SBX_CHANGE_MODIFIED;
		bool changed = c != 0 || !same_file(&a->v[i], &b->v[k]) ||
			       (a->v[i].racy && racy_changed(ws, a->dir_rel, &a->v[i], &budget));

		i += c <= 0;
		k += c >= 0;
		if (!changed)
			continue;
		if (*n == max) {
			*truncated = true;
			return;
		}
		push(v, n, &cap, a->dir_rel, e, kind);
	}
}

int sbx_changes_diff(const struct sbx_workspace *ws, const struct sbx_snapshot *before,
		     const struct sbx_changes_limits *lim, struct sbx_change **out, size_t *n,
		     bool *truncated)
{
	struct sbx_snapshot *after = NULL;
	uint64_t budget = lim->max_hash_bytes;
	int rc = sbx_snapshot_take(ws, before->dir_rel, lim->max_files, &after);

	*out = NULL;
	*n = 0;
	*truncated = false;
	if (rc < 0)
		return rc;
	*truncated = before->truncated || after->truncated;
	compare(ws, before, after, lim->max_reported, out, n, truncated);
	for (size_t i = 0; i < *n; i++) {
		struct sbx_change *ch = &(*out)[i];
		const char *path = ch->rel + strlen(before->dir_rel) + (before->dir_rel[0] ? 1 : 0);
		int fd;

		if (ch->kind == SBX_CHANGE_DELETED)
			continue;
		fd = open_nofollow(ws, before->dir_rel, path);
		if (fd < 0)
			continue; /* gone since the walk: reported as found, without a hash */
		ch->hashed = hash_file(fd, ch, &budget);
		if (!ch->hashed)
			*truncated |= budget < ch->size || budget == 0;
		close(fd);
	}
	sbx_snapshot_free(&after);
	return 0;
}

void sbx_changes_free(struct sbx_change *c, size_t n)
{
	for (size_t i = 0; c && i < n; i++)
		free(c[i].rel);
	free(c);
}
