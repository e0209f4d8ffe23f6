/* Root images: naming, listing, holding one for a command, removal, and
 * the staging directory builds and imports fill (sandbox/rootimg.h). */
#include "sandbox/rootimg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "sandbox/rootimg_impl.h"

struct sbx_rootimg_ref {
	int fd; /* the image's directory, flocked shared */
	char *rootfs;
};

bool sbx_rootimg_list_has(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list ? list : ""; *p;) {
		size_t k = strcspn(p, ",");
		if (k == n && strncmp(p, name, n) == 0)
			return true;
		p += k + (p[k] == ',');
	}
	return false;
}

bool sbx_rootimg_name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > SBX_ROOTIMG_NAME_MAX || strcmp(name, "none") == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
			return false;
	}
	return true;
}

/* A path of the image the server binds or trusts must be root's and not
 * writable by anyone else: a tenant (or any other local user) able to
 * change it could change what every command on the image runs. */
static int check_mode(const struct stat *st, const char *shown, mode_t type, char *err, size_t errsz)
{
	if ((st->st_mode & S_IFMT) != type) {
		snprintf(err, errsz, "%s is not a %s", shown, type == S_IFDIR ? "directory" : "file");
		return -ENOEXEC;
	}
	if (st->st_uid != 0 || (st->st_mode & (S_IWGRP | S_IWOTH))) {
		snprintf(err, errsz, "%s must be owned by root and writable by root only", shown);
		return -EPERM;
	}
	return 0;
}

static int check_owned(int dirfd, const char *rel, mode_t type, char *err, size_t errsz)
{
	struct stat st;
	if (fstatat(dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		snprintf(err, errsz, "%s is missing", rel);
		return -ENOEXEC;
	}
	return check_mode(&st, rel, type, err, errsz);
}

const char *const sbx_rootimg_sys_path[SBX_ROOTIMG_SYS_N] = {
    "usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32", "etc/ld.so.cache", "etc/alternatives"};

enum { SYS_USR = 0, SYS_LDCACHE = SBX_ROOTIMG_SYS_ETC };

/* name beneath dirfd, one component, never through or at a symlink
 * (ELOOP); an O_PATH fd or -errno. */
static int open_in(int dirfd, const char *name)
{
	struct open_how how = {.flags = O_PATH | O_CLOEXEC,
			       .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	int fd = (int)syscall(SYS_openat2, dirfd, name, &how, sizeof how);
	return fd < 0 ? -errno : fd;
}

/* A link of bin, sbin or lib* that the sandbox can have as a link of its
 * own: into /usr, without "..", so it means the same inside. */
static bool link_into_usr(const char *t)
{
	const char *r = t[0] == '/' ? t + 1 : t;
	if (strncmp(r, "usr/", 4) != 0)
		return false;
	for (const char *p = r; (p = strstr(p, "..")); p += 2)
		if ((p == r || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
			return false;
	return true;
}

/* rel (name beneath dirfd) refused as a link: its target in the reason. */
static int refuse_link(int dirfd, const char *name, const char *rel, char *err, size_t errsz)
{
	char t[SBX_ROOTIMG_LINK_MAX];
	ssize_t n = readlinkat(dirfd, name, t, sizeof t - 1);
	t[n > 0 ? n : 0] = '\0';
	snprintf(err, errsz,
		 "rootfs/%s is a symlink (to %s): refused, the server binds it and would follow it on the "
		 "host; it must be a real %s of the image",
		 rel, n > 0 ? t : "?", strcmp(rel, "etc/ld.so.cache") == 0 ? "file" : "directory");
	return -ELOOP;
}

/* fd (of rel) is of type and root's, writable by root only. */
static int check_fd(int fd, const char *rel, mode_t type, char *err, size_t errsz)
{
	struct stat st;
	char shown[64];
	snprintf(shown, sizeof shown, "rootfs/%s", rel);
	if (fstat(fd, &st) < 0) {
		snprintf(err, errsz, "cannot stat %s: %s", shown, strerror(errno));
		return -errno;
	}
	return check_mode(&st, shown, type, err, errsz);
}

/* Entry i (its last component name beneath dirfd) into s. */
static int sys_one(int dirfd, size_t i, struct sbx_rootimg_sys *s, char *err, size_t errsz)
{
	const char *rel = sbx_rootimg_sys_path[i], *slash = strchr(rel, '/');
	const char *name = slash ? slash + 1 : rel;
	int fd = open_in(dirfd, name);
	if (fd == -ENOENT && i != SYS_USR)
		return 0;
	if (fd == -ELOOP && i > SYS_USR && i < SBX_ROOTIMG_SYS_ETC) {
		ssize_t n = readlinkat(dirfd, name, s->link[i], sizeof s->link[i] - 1);
		s->link[i][n > 0 ? n : 0] = '\0';
		if (n > 0 && (size_t)n < sizeof s->link[i] - 1 && link_into_usr(s->link[i]))
			return 0;
		snprintf(err, errsz,
			 "rootfs/%s is a symlink (to %.*s) that does not stay in /usr: refused, only links "
			 "into /usr are made again inside the sandbox",
			 rel, 80, n > 0 ? s->link[i] : "?");
		s->link[i][0] = '\0';
		return -ELOOP;
	}
	if (fd == -ELOOP)
		return refuse_link(dirfd, name, rel, err, errsz);
	if (fd < 0) {
		snprintf(err, errsz, "rootfs/%s %s", rel, fd == -ENOENT ? "is missing" : strerror(-fd));
		return fd == -ENOENT ? -ENOEXEC : fd;
	}
	s->fd[i] = fd;
	return check_fd(fd, rel, i == SYS_LDCACHE ? S_IFREG : S_IFDIR, err, errsz);
}

int sbx_rootimg_sys_open(int rootfd, struct sbx_rootimg_sys *s, char *err, size_t errsz)
{
	int rc = 0, etc = -1;
	memset(s, 0, sizeof *s);
	for (size_t i = 0; i < SBX_ROOTIMG_SYS_N; i++)
		s->fd[i] = -1;
	for (size_t i = 0; i < SBX_ROOTIMG_SYS_ETC && rc == 0; i++)
		rc = sys_one(rootfd, i, s, err, errsz);
	/* etc itself is looked at first: through a link of it, its entries
	 * would be a host directory's */
	if (rc == 0 && (etc = open_in(rootfd, "etc")) == -ELOOP)
		rc = refuse_link(rootfd, "etc", "etc", err, errsz);
	else if (rc == 0 && etc >= 0)
		rc = check_fd(etc, "etc", S_IFDIR, err, errsz);
	for (size_t i = SBX_ROOTIMG_SYS_ETC; i < SBX_ROOTIMG_SYS_N && rc == 0 && etc >= 0; i++)
		rc = sys_one(etc, i, s, err, errsz);
	if (etc >= 0)
		close(etc);
	if (rc < 0)
		sbx_rootimg_sys_close(s);
	return rc;
}

void sbx_rootimg_sys_close(struct sbx_rootimg_sys *s)
{
	for (size_t i = 0; i < SBX_ROOTIMG_SYS_N; i++) {
		if (s->fd[i] >= 0)
			close(s->fd[i]);
		s->fd[i] = -1;
	}
}

/* The system of the image at rootfs/ beneath dirfd is one the server can
 * bind (sbx_rootimg_sys_open). */
static int check_sys(int dirfd, const char *rootfs, char *err, size_t errsz)
{
	int root = openat(dirfd, rootfs, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root < 0) {
		snprintf(err, errsz, "cannot open rootfs: %s", strerror(errno));
		return errno == ELOOP ? -ENOEXEC : -errno;
	}
	struct sbx_rootimg_sys s;
	int rc = sbx_rootimg_sys_open(root, &s, err, errsz);
	if (rc == 0)
		sbx_rootimg_sys_close(&s);
	close(root);
	return rc;
}

/* /bin/sh must resolve inside the image (absolute links are the image's,
 * not the host's: RESOLVE_IN_ROOT). */
static int check_shell(int dirfd, char *err, size_t errsz)
{
	int root = openat(dirfd, "rootfs", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root < 0) {
		snprintf(err, errsz, "rootfs is missing");
		return -ENOEXEC;
	}
	struct open_how how = {.flags = O_PATH | O_CLOEXEC,
			       .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
	int fd = (int)syscall(SYS_openat2, root, "bin/sh", &how, sizeof how);
	struct stat st;
	int rc = 0;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errsz, "rootfs has no /bin/sh");
		rc = -ENOEXEC;
	}
	if (fd >= 0)
		close(fd);
	close(root);
	return rc;
}

static int check_image(int dirfd, char *err, size_t errsz)
{
	int rc = check_owned(dirfd, ".", S_IFDIR, err, errsz);
	if (rc == 0)
		rc = check_owned(dirfd, "rootfs", S_IFDIR, err, errsz);
	if (rc == 0)
		rc = check_sys(dirfd, "rootfs", err, errsz);
	if (rc == 0)
		rc = check_shell(dirfd, err, errsz);
	return rc == -ELOOP ? -ENOEXEC : rc;
}

/* The image's directory, opened and flocked (op), checked to be still at
 * its name after the lock was taken (a removal renames it away first). */
static int open_locked(const char *dir, const char *name, int op, int *out)
{
	if (!sbx_rootimg_name_ok(name))
		return -EINVAL;
	char *path = xasprintf("%s/%s", dir, name);
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int rc = fd < 0 ? (errno == ENOTDIR || errno == ELOOP ? -ENOENT : -errno) : 0;
	while (rc == 0 && flock(fd, op) < 0) {
		if (errno != EINTR)
			rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
	}
	struct stat a, b;
	if (rc == 0 &&
	    (fstat(fd, &a) < 0 || lstat(path, &b) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev))
		rc = -ENOENT;
	free(path);
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

int sbx_rootimg_open(const char *dir, const char *name, struct sbx_rootimg_ref **out, char *err, size_t errsz)
{
	int fd = -1;
	int rc = open_locked(dir, name, LOCK_SH, &fd);
	if (rc < 0) {
		snprintf(err, errsz, "%s", rc == -EINVAL ? "bad image name" : "no such image");
		return rc;
	}
	rc = check_image(fd, err, errsz);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	struct sbx_rootimg_ref *ref = xcalloc(1, sizeof *ref);
	ref->fd = fd;
	ref->rootfs = xasprintf("%s/%s/rootfs", dir, name);
	*out = ref;
	return 0;
}

const char *sbx_rootimg_rootfs(const struct sbx_rootimg_ref *ref)
{
	return ref->rootfs;
}

void sbx_rootimg_close(struct sbx_rootimg_ref **p)
{
	struct sbx_rootimg_ref *ref = p ? *p : NULL;
	if (!ref)
		return;
	close(ref->fd);
	free(ref->rootfs);
	free(ref);
	*p = NULL;
}

static char *read_small(int dirfd, const char *rel, size_t max)
{
	int fd = openat(dirfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	char *s = xmalloc(max + 1);
	size_t got = 0;
	ssize_t n;
	while (got < max && (n = read(fd, s + got, max - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	s[got] = '\0';
	return s;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct sbx_rootimg_info *)a)->name, ((const struct sbx_rootimg_info *)b)->name);
}

static void describe(const char *dir, struct sbx_rootimg_info *info)
{
	int fd = -1;
	int rc = open_locked(dir, info->name, LOCK_SH | LOCK_NB, &fd);
	if (rc < 0) {
		snprintf(info->reason, sizeof info->reason, "cannot open: %s", strerror(-rc));
		return;
	}
	info->manifest = read_small(fd, "manifest.json", 1 << 20);
	info->usable = check_image(fd, info->reason, sizeof info->reason) == 0;
	if (info->usable && !info->manifest) {
		info->usable = false;
		snprintf(info->reason, sizeof info->reason, "manifest.json is missing");
	}
	/* Busy: a command holds it (our shared lock allows theirs; an
	 * exclusive try after dropping ours tells). */
	flock(fd, LOCK_UN);
	info->busy = flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	close(fd);
}

int sbx_rootimg_list(const char *dir, struct sbx_rootimg_info **out, size_t *n)
{
	DIR *d = opendir(dir);
	*out = NULL;
	*n = 0;
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	size_t cap = 0;
	struct sbx_rootimg_info *v = NULL;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!sbx_rootimg_name_ok(de->d_name))
			continue; /* dot entries: staging and removal */
		if (*n == cap) {
			cap = cap ? cap * 2 : 8;
			v = xrealloc(v, cap * sizeof *v);
		}
		memset(&v[*n], 0, sizeof v[*n]);
		memcpy(v[*n].name, de->d_name, strlen(de->d_name) + 1); /* name_ok: it fits */
		describe(dir, &v[*n]);
		(*n)++;
	}
	closedir(d);
	if (*n)
		qsort(v, *n, sizeof *v, by_name);
	*out = v;
	return 0;
}

void sbx_rootimg_infos_free(struct sbx_rootimg_info *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i].manifest);
	free(v);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) < 0 ? -1 : 0;
	return unlink(path) < 0 ? -1 : 0;
}

int rootimg_remove_tree(const char *path)
{
	/* FTW_PHYS: links are removed, never followed; FTW_MOUNT: stay on
	 * this filesystem (a build interrupted with /proc mounted). */
	if (nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0)
		return errno ? -errno : -EIO;
	return 0;
}

int sbx_rootimg_remove(const char *dir, const char *name, char *err, size_t errsz)
{
	int fd = -1;
	int rc = open_locked(dir, name, LOCK_EX | LOCK_NB, &fd);
	if (rc < 0) {
		snprintf(err, errsz, "%s",
			 rc == -EBUSY	 ? "a command runs on it"
			 : rc == -EINVAL ? "bad image name"
					 : "no such image");
		return rc;
	}
	/* Renamed away under the lock: a server opening it from now on finds
	 * nothing; then removed at leisure. */
	char *from = xasprintf("%s/%s", dir, name);
	char *to = xasprintf("%s/.rm-%s-%ld", dir, name, (long)getpid());
	if (rename(from, to) < 0) {
		rc = -errno;
		snprintf(err, errsz, "cannot rename %s: %s", from, strerror(errno));
	}
	close(fd);
	if (rc == 0 && (rc = rootimg_remove_tree(to)) < 0)
		snprintf(err, errsz, "cannot remove %s: %s", to, strerror(-rc));
	free(from);
	free(to);
	return rc;
}

/* Staging directories (and removals) a killed run left: their lock is
 * free. */
static void sweep_stale(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, ".tmp-", 5) != 0 && strncmp(de->d_name, ".rm-", 4) != 0)
			continue;
		char *p = xasprintf("%s/%s", dir, de->d_name);
		int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
			rootimg_remove_tree(p);
		if (fd >= 0)
			close(fd);
		free(p);
	}
	if (d)
		closedir(d);
}

int rootimg_stage_begin(struct rootimg_stage *st, const char *dir, const char *name, char *err, size_t errsz)
{
	memset(st, 0, sizeof *st);
	st->lock_fd = -1;
	if (!sbx_rootimg_name_ok(name)) {
		snprintf(err, errsz, "image names match [a-z0-9][a-z0-9._-]{0,62}");
		return -EINVAL;
	}
	if (mkdir(dir, 0711) < 0 && errno != EEXIST) {
		snprintf(err, errsz, "cannot make %s: %s", dir, strerror(errno));
		return -errno;
	}
	sweep_stale(dir);
	st->final = xasprintf("%s/%s", dir, name);
	struct stat sb;
	if (lstat(st->final, &sb) == 0) {
		snprintf(err, errsz, "image %s exists (remove it first with: sandboxd image rm %s)", name,
			 name);
		return -EEXIST;
	}
	st->tmp = xasprintf("%s/.tmp-%s-XXXXXX", dir, name);
	if (!mkdtemp(st->tmp)) {
		int e = errno;
		snprintf(err, errsz, "cannot make a directory in %s: %s", dir, strerror(e));
		free(st->tmp);
		st->tmp = NULL;
		return -e;
	}
	st->lock_fd = open(st->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->lock_fd >= 0)
		flock(st->lock_fd, LOCK_EX);
	st->rootfs = xasprintf("%s/rootfs", st->tmp);
	if (mkdir(st->rootfs, 0755) < 0 || chmod(st->rootfs, 0755) < 0) {
		snprintf(err, errsz, "cannot make %s: %s", st->rootfs, strerror(errno));
		return -errno;
	}
	return 0;
}

static uint64_t tree_bytes;
static int add_size(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path;
	(void)flag;
	(void)ftw;
	tree_bytes += (uint64_t)st->st_blocks * 512;
	return 0;
}

static int write_manifest(const char *path, json_t *m)
{
	char *text = json_dumps(m, JSON_INDENT(2) | JSON_SORT_KEYS);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	size_t len = strlen(text), off = 0;
	int rc = fd < 0 ? -errno : 0;
	while (rc == 0 && off < len) {
		ssize_t w = write(fd, text + off, len - off);
		if (w < 0 && errno != EINTR)
			rc = -errno;
		else if (w > 0)
			off += (size_t)w;
	}
	if (rc == 0 && (write(fd, "\n", 1) != 1 || fsync(fd) < 0))
		rc = -EIO;
	if (fd >= 0)
		close(fd);
	free(text);
	return rc;
}

int rootimg_stage_commit(struct rootimg_stage *st, const char *name, json_t *packages, json_t *source,
			 char *err, size_t errsz)
{
	/* What a command would refuse is refused here, before the image is
	 * anyone's: an import's links are the tarball author's choice. */
	int rc = check_sys(AT_FDCWD, st->rootfs, err, errsz);
	if (rc < 0 && rc != -ENOEXEC && rc != -EPERM) {
		json_decref(packages);
		json_decref(source);
		return rc == -ELOOP ? -EPERM : rc;
	}
	err[0] = '\0';	/* a missing /usr only makes it unusable, as a missing /bin/sh does */
	tree_bytes = 0; /* the command line's single thread only */
	nftw(st->rootfs, add_size, 32, FTW_PHYS | FTW_MOUNT);
	char when[32];
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	json_t *m = json_pack("{s:s, s:o, s:I, s:s, s:o}", "name", name, "packages", packages, "size_bytes",
			      (json_int_t)tree_bytes, "created_at", when, "source", source);
	char *mpath = xasprintf("%s/manifest.json", st->tmp);
	rc = write_manifest(mpath, m);
	free(mpath);
	json_decref(m);
	if (rc < 0) {
		snprintf(err, errsz, "cannot write the manifest: %s", strerror(-rc));
		return rc;
	}
	if (chmod(st->tmp, 0711) < 0 || rename(st->tmp, st->final) < 0) {
		rc = -errno;
		snprintf(err, errsz, "cannot move the image into place at %s: %s", st->final,
			 strerror(errno));
		return rc == -ENOTEMPTY ? -EEXIST : rc;
	}
	free(st->tmp);
	st->tmp = NULL;
	return 0;
}

void rootimg_stage_end(struct rootimg_stage *st)
{
	if (st->tmp)
		rootimg_remove_tree(st->tmp);
	if (st->lock_fd >= 0)
		close(st->lock_fd);
	free(st->final);
	free(st->tmp);
	free(st->rootfs);
	memset(st, 0, sizeof *st);
	st->lock_fd = -1;
}
