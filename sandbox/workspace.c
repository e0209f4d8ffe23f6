#include "sandbox/workspace.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/nowait.h"
#include "common/errors.h"
#include "common/xmalloc.h"

#define RESOLVE_FLAGS (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define OPENAT2_RETRIES 8
#define SEGMENT_PREFIX_MAX 32

/* One memoised session segment: chained hash set, grown at load 1. */
struct memo_node {
	struct memo_node *next;
	uint64_t hash;
	char seg[];
};

struct sbx_workspace {
	int dirfd;
	char *host_dir;
	struct sbx_owner owner;
	pthread_mutex_t lock;
	struct memo_node **buckets;
	size_t nbuckets; /* power of two */
	size_t nmemo;
};

uint64_t sbx_djb2_64(const char *p, size_t n)
{
	uint64_t h = 5381;
	for (size_t i = 0; i < n; i++)
		h = h * 33 + (unsigned char)p[i];
	return h;
}

static bool segment_byte_ok(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
	       c == '_' || c == '-';
}

void sbx_session_segment(const char *key, size_t len, unsigned salt, char out[SBX_SEGMENT_MAX])
{
	static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
	char b36[16];
	size_t nb = 0, o = 0;
	uint64_t h = sbx_djb2_64(key, len);

	for (size_t i = 0; i < len && i < SEGMENT_PREFIX_MAX; i++)
		out[o++] = segment_byte_ok((unsigned char)key[i]) ? key[i] : '_';
	out[o++] = '-';
	do {
		b36[nb++] = digits[h % 36];
		h /= 36;
	} while (h);
	while (nb)
		out[o++] = b36[--nb];
	out[o] = '\0';
	if (salt > 0)
		snprintf(out + o, SBX_SEGMENT_MAX - o, "-%u", salt);
}

/* mkdir -p of the configured host directory: operator input, trusted, so
 * plain path calls are fine here (unlike everything beneath the fd). */
static int mkdir_host(const char *dir)
{
	char *p = xstrdup(dir);
	int r = 0;

	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST) {
			r = -errno;
			goto out;
		}
		*s = '/';
	}
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		r = -errno;
out:
	free(p);
	return r;
}

/* The workspace root 0700, also one an older server made 0755: its files
 * are 0644, so only this keeps any other uid (another tenant's command,
 * should it ever see the host's tree) out of them. The server, root,
 * reaches it anyway; the owner is the tenant's uid (or the server's). */
static int make_private(int pathfd)
{
	int fd = openat(pathfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = fd < 0 || fchmod(fd, 0700) < 0 ? -errno : 0;

	if (fd >= 0)
		close(fd);
	return r;
}

int sbx_workspace_open(struct sbx_workspace **out, const char *host_dir, const struct sbx_owner *owner)
{
	struct sbx_workspace *ws = NULL;
	int fd = -1, r;

	if (!host_dir || !*host_dir)
		return -EINVAL;
	r = mkdir_host(host_dir);
	if (r < 0)
		goto out;
	fd = open(host_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	/* The workspace root belongs to the tenant: its commands write there. */
	if (owner && owner->chown && fchownat(fd, "", owner->uid, owner->gid, AT_EMPTY_PATH) < 0) {
		r = -errno;
		goto out;
	}
	r = make_private(fd);
	if (r < 0)
		goto out;
	ws = xcalloc(1, sizeof *ws);
	ws->dirfd = fd;
	fd = -1;
	ws->host_dir = xstrdup(host_dir);
	if (owner)
		ws->owner = *owner;
	pthread_mutex_init(&ws->lock, NULL);
	ws->nbuckets = 64;
	ws->buckets = xcalloc(ws->nbuckets, sizeof *ws->buckets);
	*out = ws;
	r = 0;
out:
	if (fd >= 0)
		close(fd);
	return r;
}

void sbx_workspace_free(struct sbx_workspace **pws)
{
	struct sbx_workspace *ws;

	if (!pws || !*pws)
		return;
	ws = *pws;
	for (size_t i = 0; i < ws->nbuckets; i++) {
		struct memo_node *n = ws->buckets[i];
		while (n) {
			struct memo_node *next = n->next;
			free(n);
			n = next;
		}
	}
	free(ws->buckets);
	pthread_mutex_destroy(&ws->lock);
	if (ws->dirfd >= 0)
		close(ws->dirfd);
	free(ws->host_dir);
	free(ws);
	*pws = NULL;
}

int sbx_workspace_dirfd(const struct sbx_workspace *ws)
{
	return ws->dirfd;
}

const char *sbx_workspace_host_dir(const struct sbx_workspace *ws)
{
	return ws->host_dir;
}

const struct sbx_owner *sbx_workspace_owner(const struct sbx_workspace *ws)
{
	return &ws->owner;
}

/* Append the components of p (len bytes) to out (*olen used), lexically
 * resolving "", "." and "..". */
static int push_components(const char *p, size_t len, char *out, size_t *olen)
{
	size_t i = 0;

	while (i < len) {
		size_t start, clen;

		while (i < len && p[i] == '/')
			i++;
		start = i;
		while (i < len && p[i] != '/')
			i++;
		clen = i - start;
		if (clen == 0 || (clen == 1 && p[start] == '.'))
			continue;
		if (clen > SBX_NAME_MAX)
			return -EINVAL;
		if (clen == 2 && p[start] == '.' && p[start + 1] == '.') {
			char *slash;
			if (*olen == 0)
				return -EXDEV;
			out[*olen] = '\0';
			slash = strrchr(out, '/');
			*olen = slash ? (size_t)(slash - out) : 0;
			continue;
		}
		if (*olen + (*olen ? 1 : 0) + clen > SBX_PATH_MAX)
			return -EINVAL;
		if (*olen)
			out[(*olen)++] = '/';
		memcpy(out + *olen, p + start, clen);
		*olen += clen;
	}
	return 0;
}

int sbx_path_normalize(const char *wire, size_t wire_len, const char *session_rel, char *out, size_t outsz)
{
	static const char root[] = "workspace";
	char tmp[SBX_PATH_MAX + 1];
	size_t tlen = 0, i = 0;
	int r;

	if (!wire || wire_len == 0 || wire_len > SBX_PATH_MAX || memchr(wire, '\0', wire_len))
		return -EINVAL;
	if (wire[0] == '/') {
		while (i < wire_len && wire[i] == '/')
			i++;
		if (wire_len - i < sizeof root - 1 || memcmp(wire + i, root, sizeof root - 1) != 0)
			return -EXDEV;
		i += sizeof root - 1;
		if (i < wire_len && wire[i] != '/')
			return -EXDEV; /* "/workspacex" */
	} else if (session_rel) {
		r = push_components(session_rel, strlen(session_rel), tmp, &tlen);
		if (r < 0)
			return r;
	}
	r = push_components(wire + i, wire_len - i, tmp, &tlen);
	if (r < 0)
		return r;
	if (tlen + 1 > outsz)
		return -EINVAL;
	memcpy(out, tmp, tlen);
	out[tlen] = '\0';
	return 0;
}

void sbx_path_wire(const char *rel, char *out, size_t outsz)
{
	if (!rel || !*rel)
		snprintf(out, outsz, "/workspace");
	else
		snprintf(out, outsz, "/workspace/%s", rel);
}

/* Every open beneath a workspace is non-blocking and never takes a
 * controlling terminal: a FIFO or a device a command planted there opens
 * at once (or fails with ENXIO) instead of holding a server thread, and
 * callers check the type of what they got (security.md item 7). O_PATH
 * opens are exempt: they open nothing, and openat2 allows no other flag
 * beside them. */
static int openat2_retry(int dirfd, const char *path, int flags, mode_t mode, uint64_t resolve)
{
	/* O_PATH opens nothing (and openat2 refuses other flags with it). */
	int safe = (flags & O_PATH) ? O_CLOEXEC : O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
	struct open_how how = {
	    .flags = (uint64_t)(flags | safe),
	    .mode = (flags & (O_CREAT | __O_TMPFILE)) ? mode : 0,
	    .resolve = resolve,
	};
	/* No-wait mode (common/nowait.h): only a lookup the dentry cache
	 * answers; EAGAIN says it would have gone to the disk. */
	bool nowait = nowait_on();
	if (nowait)
		how.resolve |= RESOLVE_CACHED;

	for (int i = 0; i < OPENAT2_RETRIES; i++) {
		long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
		if (fd >= 0)
			return (int)fd;
		if (errno == EAGAIN && nowait) {
			nowait_blocked();
			return -EAGAIN;
		}
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
	}
	return -EAGAIN;
}

int sbx_ws_openat(const struct sbx_workspace *ws, const char *rel, int flags, mode_t mode)
{
	return openat2_retry(ws->dirfd, (rel && *rel) ? rel : ".", flags, mode, RESOLVE_FLAGS);
}

int sbx_ws_open_child(int dirfd, const char *name, int flags, mode_t mode)
{
	return openat2_retry(dirfd, name, flags | O_NOFOLLOW, mode, RESOLVE_FLAGS | RESOLVE_NO_SYMLINKS);
}

static bool leaf_ok(const char *leaf)
{
	size_t n = strlen(leaf);
	return n > 0 && n <= SBX_NAME_MAX && strcmp(leaf, ".") != 0 && strcmp(leaf, "..") != 0 &&
	       !strchr(leaf, '/');
}

static int chown_fd(const struct sbx_workspace *ws, int fd)
{
	if (ws->owner.chown && fchown(fd, ws->owner.uid, ws->owner.gid) < 0)
		return -errno;
	return 0;
}

/* mkdirat name under dirfd, then open what was created without following
 * anything (a swap to a symlink in between gives ELOOP/ENOTDIR) and give it
 * to the owner. -EEXIST when something is already there. */
static int mkdir_child(const struct sbx_workspace *ws, int dirfd, const char *name, int *out)
{
	int fd, r;

	if (mkdirat(dirfd, name, 0755) < 0)
		return -errno;
	fd = sbx_ws_open_child(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0)
		return fd;
	r = chown_fd(ws, fd);
	if (r < 0) {
		close(fd);
		return r;
	}
	*out = fd;
	return 0;
}

/* Open directory rel (O_RDONLY|O_DIRECTORY beneath the workspace), creating
 * missing components one at a time relative to the parent fd. Existing
 * components resolve from the workspace root, so symlinks that stay inside
 * are followed and any that leave give -EXDEV. A dangling link in the way
 * is -EEXIST, a non-directory -ENOTDIR. */
static int mkdirs(const struct sbx_workspace *ws, const char *rel, int *out)
{
	char *buf = NULL;
	int cur = -1, fd, r;
	size_t len;

	fd = sbx_ws_openat(ws, rel, O_RDONLY | O_DIRECTORY, 0);
	if (fd >= 0) {
		*out = fd;
		return 0;
	}
	if (fd != -ENOENT)
		return fd;
	buf = xstrdup(rel);
	len = strlen(buf);
	cur = sbx_ws_openat(ws, "", O_RDONLY | O_DIRECTORY, 0);
	if (cur < 0) {
		r = cur;
		goto out;
	}
	for (size_t i = 0; i < len;) {
		size_t end = i;
		const char *name = buf + i;

		while (end < len && buf[end] != '/')
			end++;
		buf[end] = '\0';
		fd = sbx_ws_openat(ws, buf, O_RDONLY | O_DIRECTORY, 0);
		if (fd == -ENOENT) {
			r = mkdir_child(ws, cur, name, &fd);
			if (r == -EEXIST) {
				/* Raced with another creator, or a dangling link. */
				fd = sbx_ws_openat(ws, buf, O_RDONLY | O_DIRECTORY, 0);
				if (fd == -ENOENT)
					fd = -EEXIST;
			} else if (r < 0) {
				fd = r;
			}
		}
		if (fd < 0) {
			r = fd;
			goto out;
		}
		close(cur);
		cur = fd;
		if (end < len)
			buf[end] = '/';
		i = end + 1;
	}
	*out = cur;
	cur = -1;
	r = 0;
out:
	if (cur >= 0)
		close(cur);
	free(buf);
	return r;
}

int sbx_ws_open_parent(const struct sbx_workspace *ws, const char *rel, bool mkparents, int *dirfd,
		       const char **leaf)
{
	const char *slash, *name;
	char *parent = NULL;
	int fd = -1, r;

	if (!rel || !*rel)
		return -EINVAL;
	slash = strrchr(rel, '/');
	name = slash ? slash + 1 : rel;
	if (!leaf_ok(name))
		return -EINVAL;
	parent = slash ? xstrndup(rel, (size_t)(slash - rel)) : xstrdup("");
	if (mkparents && *parent) {
		r = mkdirs(ws, parent, &fd);
	} else {
		fd = sbx_ws_openat(ws, parent, O_RDONLY | O_DIRECTORY, 0);
		r = fd < 0 ? fd : 0;
		if (r == -ENOENT)
			r = -SBX_E_PARENT_MISSING;
	}
	if (r < 0)
		goto out;
	*dirfd = fd;
	*leaf = name;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	free(parent);
	return r;
}

int sbx_ws_mkdir(const struct sbx_workspace *ws, const char *rel, bool recursive)
{
	const char *leaf;
	int pfd = -1, fd = -1, r;

	if (!rel || !*rel)
		return recursive ? 0 : -EEXIST;
	r = sbx_ws_open_parent(ws, rel, recursive, &pfd, &leaf);
	if (r < 0)
		goto out;
	r = mkdir_child(ws, pfd, leaf, &fd);
	if (r == -EEXIST && recursive) {
		/* Fine if it is (or links, inside, to) a directory. */
		fd = sbx_ws_openat(ws, rel, O_PATH | O_DIRECTORY, 0);
		r = fd >= 0 ? 0 : fd;
		if (r == -ENOTDIR || r == -ENOENT)
			r = -EEXIST;
	}
out:
	if (fd >= 0)
		close(fd);
	if (pfd >= 0)
		close(pfd);
	return r;
}

static bool segment_ok(const char *seg)
{
	size_t n = strnlen(seg, SBX_SEGMENT_MAX);
	return n > 0 && n < SBX_SEGMENT_MAX && leaf_ok(seg);
}

/* Caller holds ws->lock. */
static struct memo_node **memo_find(struct sbx_workspace *ws, const char *seg, uint64_t h)
{
	struct memo_node **pp = &ws->buckets[h & (ws->nbuckets - 1)];

	while (*pp && ((*pp)->hash != h || strcmp((*pp)->seg, seg) != 0))
		pp = &(*pp)->next;
	return pp;
}

/* Caller holds ws->lock. */
static void memo_grow(struct sbx_workspace *ws)
{
	size_t nb = ws->nbuckets * 2;
	struct memo_node **b = xcalloc(nb, sizeof *b);

	for (size_t i = 0; i < ws->nbuckets; i++) {
		struct memo_node *n = ws->buckets[i];
		while (n) {
			struct memo_node *next = n->next;
			n->next = b[n->hash & (nb - 1)];
			b[n->hash & (nb - 1)] = n;
			n = next;
		}
	}
	free(ws->buckets);
	ws->buckets = b;
	ws->nbuckets = nb;
}

int sbx_session_dir_ensure(struct sbx_workspace *ws, const char *segment)
{
	char rel[sizeof "sessions/" + SBX_SEGMENT_MAX];
	uint64_t h;
	size_t n;
	bool known;
	int r;

	if (!segment || !segment_ok(segment))
		return -EINVAL;
	n = strlen(segment);
	h = sbx_djb2_64(segment, n);
	pthread_mutex_lock(&ws->lock);
	known = *memo_find(ws, segment, h) != NULL;
	pthread_mutex_unlock(&ws->lock);
	if (known)
		return 0;
	if (nowait_on()) { /* a mkdir may wait for the disk */
		nowait_blocked();
		return -EAGAIN;
	}

	/* Not under the lock: a slow disk must not stall other sessions. Two
	 * racing creators are fine, mkdirs tolerates EEXIST. */
	snprintf(rel, sizeof rel, "sessions/%s", segment);
	r = sbx_ws_mkdir(ws, rel, true);
	if (r < 0)
		return r;

	pthread_mutex_lock(&ws->lock);
	struct memo_node **pp = memo_find(ws, segment, h);
	if (!*pp) {
		struct memo_node *node = xmalloc(sizeof *node + n + 1);
		node->next = NULL;
		node->hash = h;
		memcpy(node->seg, segment, n + 1);
		*pp = node;
		if (++ws->nmemo > ws->nbuckets)
			memo_grow(ws);
	}
	pthread_mutex_unlock(&ws->lock);
	return 0;
}

void sbx_session_dir_forget(struct sbx_workspace *ws, const char *segment)
{
	struct memo_node **pp, *node;
	uint64_t h;

	if (!segment)
		return;
	h = sbx_djb2_64(segment, strlen(segment));
	pthread_mutex_lock(&ws->lock);
	pp = memo_find(ws, segment, h);
	node = *pp;
	if (node) {
		*pp = node->next;
		free(node);
		ws->nmemo--;
	}
	pthread_mutex_unlock(&ws->lock);
}

bool sbx_openat2_supported(void)
{
	struct open_how how = {.flags = O_PATH | O_CLOEXEC,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
	long fd = syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof how);
	if (fd >= 0) {
		close((int)fd);
		return true;
	}
	return errno != ENOSYS;
}

/* The child: take the identity, walk the prefixes of dir, and exit with
 * the number of the first one it cannot search (0: all fine). Only
 * system calls: the parent may have threads. */
static int reach_child(const char *dir, uid_t uid, gid_t gid)
{
	char prefix[PATH_MAX];
	size_t n = strlen(dir);
	int comp = 0;

	if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, gid, gid, gid) < 0 ||
	    syscall(SYS_setresuid, uid, uid, uid) < 0)
		return 255;
	if (n == 0 || n >= sizeof(prefix) || dir[0] != '/')
		return 254;
	for (size_t i = 1; i <= n; i++) {
		if (dir[i] != '/' && dir[i] != '\0')
			continue;
		comp++;
		memcpy(prefix, dir, i);
		prefix[i] = '\0';
		if (access(prefix, X_OK) < 0)
			return comp < 250 ? comp : 250;
	}
	return 0;
}

int sbx_workspace_reachable(const char *dir, uid_t uid, gid_t gid, char *blocked, size_t blocked_sz)
{
	char *abs = NULL;
	int status, comp;
	pid_t pid;

	abs = realpath(dir, NULL);
	if (!abs)
		return -errno;
	pid = fork();
	if (pid < 0) {
		free(abs);
		return -errno;
	}
	if (pid == 0)
		_exit(reach_child(abs, uid, gid));
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			free(abs);
			return -errno;
		}
	}
	comp = WIFEXITED(status) ? WEXITSTATUS(status) : 255;
	if (comp == 0) {
		free(abs);
		return 0;
	}
	if (comp >= 254) {
		free(abs);
		return comp == 255 ? -EPERM : -EINVAL;
	}
	/* The comp-th component's prefix. */
	size_t i = 0;
	for (int c = 0; c < comp && abs[i];) {
		i++;
		if (abs[i] == '/' || abs[i] == '\0')
			c++;
	}
	abs[i] = '\0';
	snprintf(blocked, blocked_sz, "%s", abs);
	free(abs);
	return -EACCES;
}
