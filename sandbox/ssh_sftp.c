/* Files over SFTP, confined to the tenant's remote root (see ssh.h). */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/errors.h"
#include "common/xmalloc.h"
#include "sandbox/ssh.h"
#include "sandbox/ssh_impl.h"
#include "sandbox/workspace.h"

#define LINKS_MAX 40
#define DIR_MAX 100000 /* entries of one directory listed over SFTP (beyond: -EFBIG) */
/* Entries read (skipped ones too: a server may send `.` forever) and
 * name bytes per listing; a name longer than NAME_MAX is the server's
 * fault (-EIO). */
#define DIR_READ_MAX (DIR_MAX + 2)
#define DIR_BYTES_MAX (64u << 20)
#define P 4096

/* The last SFTP or connection error as an errno. */
static int sftp_err(struct sbx_ssh_conn *c)
{
	if (!ssh_is_connected(c->s) || sbx_ssh_watch_state(&c->watch)) {
		c->broken = true;
		return -SBX_E_BACKEND;
	}
	switch (sftp_get_error(c->sftp)) {
	case SSH_FX_NO_SUCH_FILE:
	case SSH_FX_NO_SUCH_PATH:
		return -ENOENT;
	case SSH_FX_PERMISSION_DENIED:
		return -EACCES;
	case SSH_FX_FILE_ALREADY_EXISTS:
		return -EEXIST;
	case SSH_FX_NO_CONNECTION:
	case SSH_FX_CONNECTION_LOST:
		c->broken = true;
		return -SBX_E_BACKEND;
	case SSH_FX_OK:
		c->broken = true; /* a failure with no SFTP status: the session's */
		return -SBX_E_BACKEND;
	default:
		return -EIO;
	}
}

static int mkdir_p(struct sbx_ssh_conn *c, const char *abs)
{
	char path[P];
	snprintf(path, sizeof path, "%s", abs);
	for (char *q = path + 1;; q++) {
		if (*q != '/' && *q)
			continue;
		char was = *q;
		*q = '\0';
		sftp_attributes a = sftp_stat(c->sftp, path);
		if (!a && sftp_mkdir(c->sftp, path, 0700) < 0 &&
		    sftp_get_error(c->sftp) != SSH_FX_FILE_ALREADY_EXISTS)
			return sftp_err(c);
		sftp_attributes_free(a);
		if (!was)
			return 0;
		*q = was;
	}
}

/* ssh_root 0700 when the account owns it, as a local workspace is
 * (sandbox/workspace.h), also one made 0755 before: its files are
 * readable by every other account on the host otherwise. One the account
 * cannot chmod (not its own) stays as the operator made it. */
static void make_private(struct sbx_ssh_conn *c)
{
	sftp_attributes a = sftp_stat(c->sftp, c->root);
	if (a && (a->permissions & 077))
		(void)sftp_chmod(c->sftp, c->root, a->permissions & 07700);
	sftp_attributes_free(a);
}

int sbx_ssh_sftp_open(struct sbx_ssh_conn *c, const char *root, char *why, size_t whysz)
{
	c->sftp = sftp_new(c->s);
	if (!c->sftp || sftp_init(c->sftp) < 0) {
		snprintf(why, whysz, "the host offers no SFTP: %s", ssh_get_error(c->s));
		return -SBX_E_BACKEND;
	}
	int rc = mkdir_p(c, root);
	char *canon = rc == 0 ? sftp_canonicalize_path(c->sftp, root) : NULL;
	if (!canon || strlen(canon) >= sizeof c->root) {
		snprintf(why, whysz, "ssh_root %s cannot be made or resolved on the host", root);
		ssh_string_free_char(canon);
		return -SBX_E_BACKEND;
	}
	snprintf(c->root, sizeof c->root, "%s", canon);
	ssh_string_free_char(canon);
	make_private(c);
	return 0;
}

/* The path under the root a symlink's target names (abs: the remote
 * host's absolute paths), as the rest to walk: -EXDEV beyond the root. */
static int link_rest(struct sbx_ssh_conn *c, const char *target, char *done, const char *pending, char *out,
		     size_t outsz)
{
	const char *t = target;
	if (target[0] == '/') {
		size_t n = strlen(c->root);
		if (strcmp(c->root, "/") != 0 &&
		    (strncmp(target, c->root, n) != 0 || (target[n] != '/' && target[n] != '\0')))
			return -EXDEV;
		t = strcmp(c->root, "/") == 0 ? target : target + n;
		snprintf(done, P, "%s", c->root);
	}
	if ((size_t)snprintf(out, outsz, "%s/%s", t, pending) >= outsz)
		return -ENAMETOOLONG;
	return 0;
}

/* Walk rel under the root. 0 with abs and *attr (lstat of the last
 * component, or of a symlink's target when follow; NULL when only the last
 * component is missing); -ENOENT when a parent is missing, -ENOTDIR,
 * -EXDEV, -ELOOP, -SBX_E_BACKEND. */
static int resolve(struct sbx_ssh_conn *c, const char *rel, bool follow, char *abs, sftp_attributes *attr)
{
	char done[P], pending[P], next[P];
	int links = 0;
	*attr = NULL;
	snprintf(done, sizeof done, "%s", c->root);
	snprintf(pending, sizeof pending, "%s", rel);
	for (;;) {
		char *p = pending;
		while (*p == '/')
			p++;
		if (!*p)
			break;
		size_t len = strcspn(p, "/");
		char name[256];
		if (len >= sizeof name)
			return -ENAMETOOLONG;
		memcpy(name, p, len);
		name[len] = '\0';
		memmove(pending, p + len, strlen(p + len) + 1);
		bool last = pending[strspn(pending, "/")] == '\0';
		if (strcmp(name, ".") == 0)
			continue;
		if (strcmp(name, "..") == 0) {
			if (strcmp(done, c->root) == 0)
				return -EXDEV;
			*strrchr(done, '/') = '\0';
			if (!done[0])
				snprintf(done, sizeof done, "/");
			continue;
		}
		char cand[P];
		if ((size_t)snprintf(cand, sizeof cand, "%s/%s", strcmp(done, "/") ? done : "", name) >=
		    sizeof cand)
			return -ENAMETOOLONG;
		sftp_attributes a = sftp_lstat(c->sftp, cand);
		if (!a) {
			int rc = sftp_err(c);
			if (rc == -ENOENT && last) {
				snprintf(abs, P, "%s", cand);
				return 0;
			}
			return rc;
		}
		if (a->type == SSH_FILEXFER_TYPE_SYMLINK && (!last || follow)) {
			sftp_attributes_free(a);
			char *target = sftp_readlink(c->sftp, cand);
			if (!target)
				return sftp_err(c);
			int rc = ++links > LINKS_MAX ? -ELOOP
						     : link_rest(c, target, done, pending, next, sizeof next);
			ssh_string_free_char(target);
			if (rc < 0)
				return rc;
			snprintf(pending, sizeof pending, "%s", next);
			continue;
		}
		snprintf(done, sizeof done, "%s", cand);
		if (last) {
			*attr = a;
			snprintf(abs, P, "%s", done);
			return 0;
		}
		bool dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
		sftp_attributes_free(a);
		if (!dir)
			return -ENOTDIR;
	}
	snprintf(abs, P, "%s", done); /* the root itself */
	*attr = sftp_lstat(c->sftp, done);
	return *attr ? 0 : sftp_err(c);
}

/* resolve, for a path that must be there: -ENOENT also when only its last
 * component is missing; *attr is then set on success. */
static int resolve_existing(struct sbx_ssh_conn *c, const char *rel, bool follow, char *abs,
			    sftp_attributes *attr)
{
	int rc = resolve(c, rel, follow, abs, attr);
	return rc == 0 && !*attr ? -ENOENT : rc;
}

static enum sbx_ftype ftype(const sftp_attributes a)
{
	switch (a->type) {
	case SSH_FILEXFER_TYPE_REGULAR:
		return SBX_FT_FILE;
	case SSH_FILEXFER_TYPE_DIRECTORY:
		return SBX_FT_DIR;
	case SSH_FILEXFER_TYPE_SYMLINK:
		return SBX_FT_SYMLINK;
	default:
		return SBX_FT_OTHER;
	}
}

int sbx_ssh_read(struct sbx_ssh_conn *c, const char *rel, uint64_t start, uint64_t want, size_t max,
		 char **data, size_t *len, uint64_t *size)
{
	char abs[P];
	sftp_attributes a;
	int rc = resolve_existing(c, rel, true, abs, &a);
	if (rc < 0)
		return rc;
	enum sbx_ftype t = ftype(a);
	*size = a->size;
	sftp_attributes_free(a);
	if (t == SBX_FT_DIR)
		return -EISDIR;
	if (t != SBX_FT_FILE)
		return -SBX_E_SPECIAL;
	if (start > *size)
		start = *size;
	uint64_t n = want ? want : *size - start;
	if (n > max)
		return -EFBIG;
	sftp_file f = sftp_open(c->sftp, abs, O_RDONLY, 0);
	if (!f)
		return sftp_err(c);
	char *buf = xmalloc(n + 1);
	size_t got = 0;
	rc = sftp_seek64(f, start) < 0 ? sftp_err(c) : 0;
	while (rc == 0 && got < n) {
		ssize_t k = sftp_read(f, buf + got, n - got > 65536 ? 65536 : n - got);
		if (k < 0)
			rc = sftp_err(c);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	sftp_close(f);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	buf[got] = '\0';
	*data = buf;
	*len = got;
	return 0;
}

static void parent_of(const char *rel, char *out)
{
	snprintf(out, P, "%s", rel);
	char *s = strrchr(out, '/');
	if (s)
		*s = '\0';
	else
		out[0] = '\0';
}

int sbx_ssh_dir(struct sbx_ssh_conn *c, const char *rel, bool create, char *abs, size_t abssz)
{
	char path[P], parent[P];
	sftp_attributes a;
	int rc = resolve(c, rel, true, path, &a);
	if (rc == -ENOENT && create) { /* a parent is missing: make it first */
		parent_of(rel, parent);
		rc = sbx_ssh_dir(c, parent, true, abs, abssz);
		if (rc == 0)
			rc = resolve(c, rel, true, path, &a);
	}
	if (rc == 0 && !a && create) {
		if (sftp_mkdir(c->sftp, path, 0755) < 0 &&
		    sftp_get_error(c->sftp) != SSH_FX_FILE_ALREADY_EXISTS)
			return sftp_err(c);
		rc = resolve(c, rel, true, path, &a);
	}
	if (rc < 0)
		return rc;
	if (!a)
		return -ENOENT;
	bool dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
	sftp_attributes_free(a);
	if (!dir)
		return -ENOTDIR;
	snprintf(abs, abssz, "%s", path);
	return 0;
}

int sbx_ssh_session(struct sbx_ssh_conn *c, const char *rel)
{
	if (strcmp(c->session, rel) == 0)
		return 0;
	char abs[P];
	int rc = sbx_ssh_dir(c, rel, true, abs, sizeof abs);
	if (rc == 0 && strlen(rel) < sizeof c->session)
		snprintf(c->session, sizeof c->session, "%s", rel);
	return rc;
}

int sbx_ssh_write(struct sbx_ssh_conn *c, const char *rel, const void *data, size_t len)
{
	char parent[P], abs[P];
	parent_of(rel, parent);
	int rc = sbx_ssh_dir(c, parent, true, abs, sizeof abs);
	sftp_attributes a = NULL;
	if (rc == 0)
		rc = resolve(c, rel, true, abs, &a);
	if (rc < 0)
		return rc;
	enum sbx_ftype t = a ? ftype(a) : SBX_FT_FILE;
	sftp_attributes_free(a);
	if (t == SBX_FT_DIR)
		return -EISDIR;
	if (t != SBX_FT_FILE)
		return -SBX_E_SPECIAL;
	sftp_file f = sftp_open(c->sftp, abs, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (!f)
		return sftp_err(c);
	size_t put = 0;
	while (rc == 0 && put < len) {
		ssize_t k = sftp_write(f, (const char *)data + put, len - put > 65536 ? 65536 : len - put);
		if (k <= 0)
			rc = sftp_err(c);
		else
			put += (size_t)k;
	}
	if (sftp_close(f) < 0 && rc == 0)
		rc = sftp_err(c);
	return rc;
}

static void fill_stat(const sftp_attributes a, struct sbx_stat *st)
{
	st->type = ftype(a);
	st->size = a->size;
	st->mtime.tv_sec = (time_t)a->mtime;
	st->mode = a->permissions & 07777;
}

int sbx_ssh_stat(struct sbx_ssh_conn *c, const char *rel, struct sbx_stat *st)
{
	char abs[P];
	sftp_attributes a;
	*st = (struct sbx_stat){0};
	int rc = resolve_existing(c, rel, false, abs, &a);
	if (rc < 0)
		return rc;
	fill_stat(a, st);
	st->is_symlink = a->type == SSH_FILEXFER_TYPE_SYMLINK;
	sftp_attributes_free(a);
	if (!st->is_symlink)
		return 0;
	/* A link that stays inside is described by its target; one that
	 * dangles or leaves is described as itself. */
	rc = resolve(c, rel, true, abs, &a);
	if (rc == -SBX_E_BACKEND)
		return rc;
	if (rc == 0 && a) {
		fill_stat(a, st);
		st->followed = true;
	}
	sftp_attributes_free(a);
	return 0;
}

int sbx_ssh_exists(struct sbx_ssh_conn *c, const char *rel, bool *exists)
{
	char abs[P];
	sftp_attributes a;
	int rc = resolve(c, rel, true, abs, &a);
	*exists = rc == 0 && a;
	sftp_attributes_free(a);
	return rc == -ENOENT || rc == -ENOTDIR ? 0 : rc;
}

static int name_cmp(const void *x, const void *y)
{
	return strcmp(((const struct sbx_dirent *)x)->name, ((const struct sbx_dirent *)y)->name);
}

int sbx_ssh_readdir(struct sbx_ssh_conn *c, const char *rel, const char *after, size_t limit, bool detail,
		    struct sbx_dir_page *page)
{
	char abs[P];
	*page = (struct sbx_dir_page){0};
	int rc = sbx_ssh_dir(c, rel, false, abs, sizeof abs);
	if (rc < 0)
		return rc;
	sftp_dir d = sftp_opendir(c->sftp, abs);
	if (!d)
		return sftp_err(c);
	struct sbx_dirent *v = NULL;
	size_t n = 0, cap = 0;
	bool over = false, bad = false;
	sftp_attributes a;
	size_t seen = 0, bytes = 0;
	while ((a = sftp_readdir(c->sftp, d)) != NULL) {
		size_t nlen = a->name ? strlen(a->name) : NAME_MAX + 1;
		bytes += nlen;
		if (nlen > NAME_MAX || !nlen) {
			sftp_attributes_free(a);
			bad = true;
			break;
		}
		if (++seen > DIR_READ_MAX || bytes > DIR_BYTES_MAX) {
			sftp_attributes_free(a);
			over = true;
			break;
		}
		bool skip = strcmp(a->name, ".") == 0 || strcmp(a->name, "..") == 0 ||
			    (after && strcmp(a->name, after) <= 0);
		if (!skip && n == DIR_MAX) {
			sftp_attributes_free(a);
			over = true; /* not listed rather than listed in part */
			break;
		}
		if (!skip) {
			if (n == cap)
				v = xrealloc(v, (cap = cap ? cap * 2 : 64) * sizeof *v);
			v[n++] = (struct sbx_dirent){.name = xstrdup(a->name),
						     .type = ftype(a),
						     .size = detail ? a->size : 0,
						     .mtime = {.tv_sec = detail ? (time_t)a->mtime : 0}};
		}
		sftp_attributes_free(a);
	}
	rc = bad ? -EIO : over ? -EFBIG : sftp_dir_eof(d) ? 0 : sftp_err(c);
	sftp_closedir(d);
	if (rc < 0) {
		sbx_dirents_free(v, n);
		return rc;
	}
	if (n)
		qsort(v, n, sizeof *v, name_cmp);
	if (n > limit) {
		for (size_t i = limit; i < n; i++)
			free(v[i].name);
		n = limit;
		page->more = true;
		snprintf(page->next, sizeof page->next, "%s", v[n - 1].name);
	}
	page->ents = v;
	page->n = n;
	return 0;
}

int sbx_ssh_mkdir(struct sbx_ssh_conn *c, const char *rel, bool recursive)
{
	char abs[P], parent[P];
	if (recursive)
		return sbx_ssh_dir(c, rel, true, abs, sizeof abs);
	parent_of(rel, parent);
	int rc = sbx_ssh_dir(c, parent, false, abs, sizeof abs);
	if (rc == -ENOENT)
		return -SBX_E_PARENT_MISSING;
	sftp_attributes a;
	if (rc == 0)
		rc = resolve(c, rel, false, abs, &a);
	if (rc < 0)
		return rc;
	if (a) {
		sftp_attributes_free(a);
		return -EEXIST;
	}
	return sftp_mkdir(c->sftp, abs, 0755) < 0 ? sftp_err(c) : 0;
}

/* A session's root or the root itself: never removed nor moved. */
static bool is_root(const char *rel)
{
	if (!rel[0])
		return true;
	if (strncmp(rel, "sessions", 8) != 0 || (rel[8] != '/' && rel[8] != '\0'))
		return false;
	return rel[8] == '\0' || !strchr(rel + 9, '/');
}

/* abs, not following links. */
static int rm_tree(struct sbx_ssh_conn *c, const char *abs)
{
	sftp_dir d = sftp_opendir(c->sftp, abs);
	if (!d)
		return sftp_err(c);
	sftp_attributes a;
	int rc = 0;
	while (rc == 0 && (a = sftp_readdir(c->sftp, d)) != NULL) {
		char sub[P];
		if (strcmp(a->name, ".") != 0 && strcmp(a->name, "..") != 0 &&
		    (size_t)snprintf(sub, sizeof sub, "%s/%s", abs, a->name) < sizeof sub) {
			if (a->type == SSH_FILEXFER_TYPE_DIRECTORY)
				rc = rm_tree(c, sub);
			else if (sftp_unlink(c->sftp, sub) < 0)
				rc = sftp_err(c);
		}
		sftp_attributes_free(a);
	}
	sftp_closedir(d);
	if (rc == 0 && sftp_rmdir(c->sftp, abs) < 0)
		rc = sftp_err(c);
	return rc;
}

int sbx_ssh_rm(struct sbx_ssh_conn *c, const char *rel, bool recursive, bool force, bool *removed)
{
	char abs[P];
	sftp_attributes a;
	*removed = false;
	if (is_root(rel))
		return -SBX_E_ROOT;
	int rc = resolve_existing(c, rel, false, abs, &a);
	if (rc == -ENOENT && force)
		return 0;
	if (rc < 0)
		return rc;
	bool dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
	sftp_attributes_free(a);
	if (!dir)
		rc = sftp_unlink(c->sftp, abs) < 0 ? sftp_err(c) : 0;
	else if (recursive)
		rc = rm_tree(c, abs);
	else if (sftp_rmdir(c->sftp, abs) < 0)
		rc = sftp_err(c) == -EIO ? -ENOTEMPTY : sftp_err(c);
	*removed = rc == 0;
	return rc;
}

int sbx_ssh_move(struct sbx_ssh_conn *c, const char *from, const char *to, bool overwrite)
{
	char af[P], at[P], parent[P];
	sftp_attributes a = NULL, b = NULL;
	if (is_root(from) || is_root(to))
		return -SBX_E_ROOT;
	int rc = resolve_existing(c, from, false, af, &a);
	sftp_attributes_free(a);
	if (rc < 0)
		return rc;
	parent_of(to, parent);
	rc = sbx_ssh_dir(c, parent, false, at, sizeof at);
	if (rc == -ENOENT)
		return -SBX_E_PARENT_MISSING;
	if (rc == 0)
		rc = resolve(c, to, false, at, &b);
	if (rc < 0)
		return rc;
	bool exists = b != NULL, dir = b && b->type == SSH_FILEXFER_TYPE_DIRECTORY;
	sftp_attributes_free(b);
	if (exists && !overwrite)
		return -EEXIST;
	/* SFTP v3's rename never replaces: the target goes first (an empty
	 * directory, as rename(2) would replace; not atomic, unlike locally). */
	if (exists && strcmp(af, at) != 0 && (dir ? sftp_rmdir(c->sftp, at) : sftp_unlink(c->sftp, at)) < 0)
		return dir && sftp_err(c) == -EIO ? -ENOTEMPTY : sftp_err(c);
	return sftp_rename(c->sftp, af, at) < 0 ? sftp_err(c) : 0;
}
