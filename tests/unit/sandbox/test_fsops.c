/* Unit tests of sandbox/fsops.c. Every test runs on a fresh temp dir:
 * top/ws is the workspace, top/out a host directory the workspace must
 * never reach. Hostile symlinks are planted in ws pointing at out; after
 * each attack, out is checked from the host side: an inotify watch must
 * have seen no open, read, write, create, delete or attribute change, and
 * a snapshot (modes, sizes, times, contents) must be unchanged. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/errors.h"
#include "common/nowait.h"
#include "sandbox/fsops.h"
#include "sandbox/workspace.h"
#include "host.h"

struct fx {
	struct host_ws h;
	int ino;    /* inotify on out and its directories */
	char *snap; /* baseline snapshot of out */
};

/* The whole of a directory of up to 10,000 entries, with detail: the
 * first page of sbx_fs_readdir_page, which the readdir route serves. */
static int readdir_all(const struct sbx_workspace *ws, const char *rel, struct sbx_dirent **ents, size_t *n)
{
	struct sbx_dir_page p;
	int rc = sbx_fs_readdir_page(ws, rel, NULL, 10000, true, &p);
	if (rc == 0) {
		assert_false(p.more);
		*ents = p.ents;
		*n = p.n;
	}
	return rc;
}

/* ---- host-side helpers ---- */

static bool host_is(const char *base, const char *rel, mode_t type)
{
	char p[512];
	struct stat st;

	hpath(p, sizeof p, base, rel);
	return lstat(p, &st) == 0 && (st.st_mode & S_IFMT) == type;
}

/* Whole file via the host path; caller frees. NULL if unreadable. */
static char *host_read(const char *base, const char *rel)
{
	char p[512], *s;
	FILE *f;
	long n;

	hpath(p, sizeof p, base, rel);
	f = fopen(p, "r");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	s = calloc(1, (size_t)n + 1);
	if (fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	fclose(f);
	return s;
}

static void assert_host_content(const char *base, const char *rel, const char *want)
{
	char *s = host_read(base, rel);

	assert_non_null(s);
	assert_string_equal(s, want);
	free(s);
}

static void host_rename(const char *base, const char *from, const char *to)
{
	char a[512], b[512];

	hpath(a, sizeof a, base, from);
	hpath(b, sizeof b, base, to);
	assert_int_equal(rename(a, b), 0);
}

/* Names starting with the temp prefix in a host directory. */
static int count_temps(const char *base, const char *rel)
{
	char cmd[700];

	snprintf(cmd, sizeof cmd, "find '%s/%s' -name '.sandboxd-tmp-*' | wc -l", base, rel);
	return host_count(cmd);
}

static char *fd_read_all(int fd)
{
	size_t cap = 256, n = 0;
	char *s = malloc(cap);

	for (;;) {
		ssize_t k;
		if (n + 1 >= cap) {
			char *grown = realloc(s, cap *= 2);
			assert_non_null(grown);
			s = grown;
		}
		k = read(fd, s + n, cap - n - 1);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	s[n] = '\0';
	return s;
}

/* ---- the outside: snapshot and inotify ---- */

static char snapbuf[16384];
static size_t snaplen;
static const char *snaproot;

static int snap_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)flag;
	(void)f;
	snaplen +=
	    (size_t)snprintf(snapbuf + snaplen, sizeof snapbuf - snaplen,
			     "%s|%o|%u:%u|%lld|%lld.%09ld|%lld.%09ld|", p + strlen(snaproot), st->st_mode,
			     st->st_uid, st->st_gid, (long long)st->st_size, (long long)st->st_mtim.tv_sec,
			     st->st_mtim.tv_nsec, (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec);
	if (S_ISREG(st->st_mode)) {
		FILE *fp = fopen(p, "r");
		if (fp) {
			size_t k = fread(snapbuf + snaplen, 1, sizeof snapbuf - snaplen - 1, fp);
			snaplen += k;
			fclose(fp);
		}
	}
	snaplen += (size_t)snprintf(snapbuf + snaplen, sizeof snapbuf - snaplen, "\n");
	return 0;
}

static char *snapshot(const char *dir)
{
	snaplen = 0;
	snaproot = dir;
	assert_int_equal(nftw(dir, snap_cb, 16, FTW_PHYS), 0);
	return strndup(snapbuf, snaplen);
}

static void drain_events(struct fx *fx)
{
	char b[4096];

	while (read(fx->ino, b, sizeof b) > 0)
		;
}

static void add_watch(struct fx *fx, const char *rel)
{
	char p[512];

	hpath(p, sizeof p, fx->h.out, rel);
	assert_true(inotify_add_watch(fx->ino, p, IN_ALL_EVENTS) >= 0);
}

/* Nothing outside was opened, read, written, created, removed or changed. */
static void assert_outside_untouched(struct fx *fx)
{
	char b[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n = read(fx->ino, b, sizeof b);
	char *now;

	if (n > 0) {
		const struct inotify_event *e = (const struct inotify_event *)b;
		fail_msg("outside touched: inotify mask 0x%x name \"%s\"", e->mask, e->len ? e->name : "");
	}
	now = snapshot(fx->h.out);
	if (strcmp(now, fx->snap) != 0)
		fail_msg("outside changed:\nbefore:\n%s\nafter:\n%s", fx->snap, now);
	free(now);
	drain_events(fx); /* the snapshot's own reads */
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof *fx);
	char p[512];

	host_ws_open(&fx->h, "fs");
	host_write(fx->h.out, "sub/inner.txt", "inner\n");
	host_mkdir(fx->h.out, "emptydir");
	host_write(fx->h.out, ".sandboxd-tmp-keep", "not yours\n");
	fx->snap = snapshot(fx->h.out);
	fx->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	assert_true(fx->ino >= 0);
	add_watch(fx, "");
	add_watch(fx, "sub");
	add_watch(fx, "emptydir");

	host_mkdir(fx->h.wsdir, "d");
	host_write(fx->h.wsdir, "d/f.txt", "inside");
	host_symlink(fx->h.wsdir, fx->h.out, "abs");
	host_symlink(fx->h.wsdir, "../out", "rel");
	host_symlink(fx->h.wsdir, "../../out", "d/rel2");
	snprintf(p, sizeof p, "%s/secret", fx->h.out);
	host_symlink(fx->h.wsdir, p, "abs_secret");
	host_symlink(fx->h.wsdir, "../out/secret", "rel_secret");
	snprintf(p, sizeof p, "%s/nothere", fx->h.out);
	host_symlink(fx->h.wsdir, p, "absdangle");
	host_symlink(fx->h.wsdir, "loop", "loop");
	host_symlink(fx->h.wsdir, "nothere", "dangle");
	host_symlink(fx->h.wsdir, "d", "in_link");
	host_symlink(fx->h.wsdir, "d/f.txt", "in_file_link");
	drain_events(fx);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;

	close(fx->ino);
	host_ws_close(&fx->h);
	free(fx->snap);
	free(fx);
	return 0;
}

/* ---- write / read ---- */

static void t_ftype_name(void **state)
{
	(void)state;
	assert_string_equal(sbx_ftype_name(SBX_FT_FILE), "file");
	assert_string_equal(sbx_ftype_name(SBX_FT_DIR), "directory");
	assert_string_equal(sbx_ftype_name(SBX_FT_SYMLINK), "symlink");
	assert_string_equal(sbx_ftype_name(SBX_FT_OTHER), "other");
}

static void t_write_read(void **state)
{
	struct fx *fx = *state;
	struct sbx_stat st;
	uint64_t size = 0;
	int fd = -1;
	char *s;
	struct stat hst;
	char p[512];

	assert_int_equal(sbx_fs_write(fx->h.ws, "a.txt", "hello", 5, false), 0);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "a.txt", &fd, &size), 0);
	assert_int_equal(size, 5);
	/* A regular file (O_NONBLOCK, as every workspace open, means nothing
	 * for one), close-on-exec. */
	assert_int_equal(fstat(fd, &hst), 0);
	assert_true(S_ISREG(hst.st_mode));
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	s = fd_read_all(fd);
	assert_string_equal(s, "hello");
	free(s);
	close(fd);

	assert_int_equal(sbx_fs_stat(fx->h.ws, "a.txt", &st), 0);
	assert_int_equal(st.type, SBX_FT_FILE);
	assert_false(st.is_symlink);
	assert_int_equal(st.size, 5);
	assert_int_equal(st.mode, 0644);
	hpath(p, sizeof p, fx->h.wsdir, "a.txt");
	assert_int_equal(stat(p, &hst), 0);
	if (am_root()) {
		assert_int_equal(hst.st_uid, TEST_UID);
		assert_int_equal(hst.st_gid, TEST_GID);
	}

	/* Replace: new content, new inode, no temp left behind. */
	assert_int_equal(sbx_fs_write(fx->h.ws, "a.txt", "world!!", 7, false), 0);
	assert_host_content(fx->h.wsdir, "a.txt", "world!!");
	assert_int_equal(sbx_fs_write(fx->h.ws, "empty", "", 0, false), 0);
	assert_host_content(fx->h.wsdir, "empty", "");
	assert_int_equal(count_temps(fx->h.wsdir, ""), 0);

	/* Through an in-workspace link to a directory. */
	assert_int_equal(sbx_fs_write(fx->h.ws, "in_link/g.txt", "g", 1, false), 0);
	assert_host_content(fx->h.wsdir, "d/g.txt", "g");
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "in_file_link", &fd, &size), 0);
	assert_int_equal(size, 6);
	close(fd);
}

static void t_write_parents(void **state)
{
	struct fx *fx = *state;
	struct sbx_upload *up = NULL;

	assert_int_equal(sbx_fs_write(fx->h.ws, "p/q.txt", "x", 1, false), -SBX_E_PARENT_MISSING);
	assert_int_equal(sbx_upload_begin(&up, fx->h.ws, "p/q.txt", false), -SBX_E_PARENT_MISSING);
	assert_null(up);
	assert_false(host_exists(fx->h.wsdir, "p"));
	assert_int_equal(sbx_fs_write(fx->h.ws, "x/y/z.txt", "deep", 4, true), 0);
	assert_host_content(fx->h.wsdir, "x/y/z.txt", "deep");
	host_expect_dir(fx->h.wsdir, "x/y");
	assert_int_equal(sbx_fs_write(fx->h.ws, "d/f.txt/z", "x", 1, true), -ENOTDIR);
	assert_int_equal(sbx_fs_write(fx->h.ws, "d/f.txt/z", "x", 1, false), -ENOTDIR);
	assert_int_equal(sbx_fs_write(fx->h.ws, "d", "x", 1, false), -EISDIR);
	assert_int_equal(sbx_fs_write(fx->h.ws, "", "x", 1, false), -EISDIR);
	assert_int_equal(sbx_upload_begin(&up, fx->h.ws, "x/y", true), -EISDIR);
	assert_null(up);
	assert_int_equal(count_temps(fx->h.wsdir, ""), 0);
}

static void t_write_escapes(void **state)
{
	struct fx *fx = *state;

	assert_int_equal(sbx_fs_write(fx->h.ws, "abs/new.txt", "x", 1, false), -EXDEV);
	assert_int_equal(sbx_fs_write(fx->h.ws, "abs/secret", "x", 1, false), -EXDEV);
	assert_int_equal(sbx_fs_write(fx->h.ws, "rel/secret", "x", 1, true), -EXDEV);
	assert_int_equal(sbx_fs_write(fx->h.ws, "abs/x/y.txt", "x", 1, true), -EXDEV);
	assert_int_equal(sbx_fs_write(fx->h.ws, "d/rel2/sub/inner.txt", "x", 1, true), -EXDEV);
	assert_int_equal(sbx_fs_write(fx->h.ws, "absdangle/x", "x", 1, true), -EXDEV);
	/* A link as the target that leads out is refused (the path names a
	 * place outside), and left as it is. */
	assert_int_equal(sbx_fs_write(fx->h.ws, "abs_secret", "mine", 4, false), -EXDEV);
	assert_int_equal(sbx_fs_write(fx->h.ws, "rel_secret", "mine", 4, false), -EXDEV);
	assert_int_equal(sbx_fs_write(fx->h.ws, "absdangle", "mine", 4, false), -EXDEV);
	assert_true(host_is(fx->h.wsdir, "abs_secret", S_IFLNK));
	assert_true(host_is(fx->h.wsdir, "rel_secret", S_IFLNK));
	assert_true(host_is(fx->h.wsdir, "absdangle", S_IFLNK));
	assert_int_equal(count_temps(fx->h.wsdir, ""), 0);
	/* One that stays inside (or dangles inside) is replaced as a link,
	 * never written through. */
	assert_int_equal(sbx_fs_write(fx->h.ws, "in_file_link", "mine", 4, false), 0);
	assert_true(host_is(fx->h.wsdir, "in_file_link", S_IFREG));
	assert_host_content(fx->h.wsdir, "d/f.txt", "inside");
	assert_int_equal(sbx_fs_write(fx->h.ws, "dangle", "mine", 4, false), 0);
	assert_true(host_is(fx->h.wsdir, "dangle", S_IFREG));
	assert_false(host_exists(fx->h.wsdir, "nothere"));
	assert_outside_untouched(fx);
	assert_false(host_exists(fx->h.out, "nothere"));
}

static void t_upload_abort_keeps_old(void **state)
{
	struct fx *fx = *state;
	struct sbx_upload *up = NULL;
	uint64_t size = 0;
	int fd = -1;
	char *s;

	assert_int_equal(sbx_fs_write(fx->h.ws, "doc", "old content", 11, false), 0);
	assert_int_equal(sbx_upload_begin(&up, fx->h.ws, "doc", false), 0);
	assert_int_equal(sbx_upload_write(up, "new ", 4), 0);
	assert_int_equal(sbx_upload_write(up, "partial", 7), 0);
	/* Mid-upload a reader sees the old file, and one temp exists. */
	assert_host_content(fx->h.wsdir, "doc", "old content");
	assert_int_equal(count_temps(fx->h.wsdir, ""), 1);
	sbx_upload_abort(&up);
	assert_null(up);
	sbx_upload_abort(&up);
	sbx_upload_abort(NULL);
	assert_host_content(fx->h.wsdir, "doc", "old content");
	assert_int_equal(count_temps(fx->h.wsdir, ""), 0);

	/* Commit: a reader holding the old file keeps the old bytes, a new
	 * open sees all of the new ones. */
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "doc", &fd, &size), 0);
	assert_int_equal(sbx_upload_begin(&up, fx->h.ws, "doc", false), 0);
	assert_int_equal(sbx_upload_write(up, "brand new", 9), 0);
	assert_int_equal(sbx_upload_commit(&up, &size), 0);
	assert_null(up);
	assert_int_equal(size, 9);
	s = fd_read_all(fd);
	assert_string_equal(s, "old content");
	free(s);
	close(fd);
	assert_host_content(fx->h.wsdir, "doc", "brand new");
	assert_int_equal(count_temps(fx->h.wsdir, ""), 0);
}

static void t_upload_long_leaf(void **state)
{
	struct fx *fx = *state;
	struct sbx_upload *up = NULL;
	struct sbx_dirent *ents = NULL;
	char leaf[SBX_NAME_MAX + 1];
	size_t n = 0;
	bool seen = false;

	memset(leaf, 'L', SBX_NAME_MAX);
	leaf[SBX_NAME_MAX] = '\0';
	assert_int_equal(sbx_upload_begin(&up, fx->h.ws, leaf, false), 0);
	/* The listing hides an upload in flight... */
	assert_int_equal(readdir_all(fx->h.ws, "", &ents, &n), 0);
	for (size_t i = 0; i < n; i++)
		assert_true(strncmp(ents[i].name, ".sandboxd-tmp-", 14) != 0);
	sbx_dirents_free(ents, n);
	/* ...which the host sees under a bounded name. */
	DIR *d = opendir(fx->h.wsdir);
	assert_non_null(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, ".sandboxd-tmp-", 14) == 0) {
			size_t len = strlen(e->d_name);
			assert_true(len <= SBX_NAME_MAX);
			/* "-" and 16 lower-case hex digits at the end */
			assert_int_equal(e->d_name[len - 17], '-');
			assert_int_equal(strspn(e->d_name + len - 16, "0123456789abcdef"), 16);
			seen = true;
		}
	}
	closedir(d);
	assert_true(seen);
	assert_int_equal(sbx_upload_write(up, "x", 1), 0);
	assert_int_equal(sbx_upload_commit(&up, NULL), 0);
	assert_true(host_is(fx->h.wsdir, leaf, S_IFREG));
}

/* A file-size limit makes write fail mid-upload (EFBIG, as ENOSPC would):
 * the old file stays, the temp goes. */
/* Bytes in the one temp file under base (host view). */
static int temp_size(const char *base)
{
	char cmd[700];

	snprintf(cmd, sizeof cmd, "find '%s' -name '.sandboxd-tmp-*' -printf '%%s\\n'", base);
	return host_count(cmd);
}

/* A gathering upload writes the file only when its buffer fills and at
 * commit, and the result is every byte in order; an error at that later
 * write still fails the upload and leaves the old file; publish refuses it. */
static void t_upload_gather(void **state)
{
	struct fx *fx = *state;
	struct sbx_upload *up = NULL;
	struct rlimit old, lim;
	static char big[100];
	void (*oldsig)(int);
	uint64_t size = 0;

	assert_int_equal(sbx_fs_write(fx->h.ws, "doc", "keep me", 7, false), 0);
	assert_int_equal(sbx_upload_begin(&up, fx->h.ws, "doc", false), 0);
	sbx_upload_gather(up, 16);
	assert_int_equal(sbx_upload_publish(up), -EINVAL);
	assert_int_equal(sbx_upload_write(up, "0123456789", 10), 0);
	assert_int_equal(temp_size(fx->h.wsdir), 0); /* gathered, not written */
	assert_int_equal(sbx_upload_write(up, "abcdef", 6), 0);
	assert_int_equal(temp_size(fx->h.wsdir), 0); /* exactly full */
	assert_int_equal(sbx_upload_write(up, "ABC", 3), 0);
	assert_int_equal(temp_size(fx->h.wsdir), 16); /* the full buffer went out */
	memset(big, 'z', sizeof big);
	assert_int_equal(sbx_upload_write(up, big, sizeof big), 0); /* over the buffer: straight */
	assert_int_equal(temp_size(fx->h.wsdir), 16 + 3 + 100);
	assert_int_equal(sbx_upload_write(up, "!", 1), 0);
	assert_host_content(fx->h.wsdir, "doc", "keep me");
	assert_int_equal(sbx_upload_commit(&up, &size), 0);
	assert_int_equal(size, 16 + 3 + 100 + 1);
	char want[128];
	snprintf(want, sizeof want, "0123456789abcdefABC%.100s!", big);
	assert_host_content(fx->h.wsdir, "doc", want);

	/* A write refused when the gathered bytes go out fails the commit. */
	assert_int_equal(sbx_upload_begin(&up, fx->h.ws, "doc", false), 0);
	sbx_upload_gather(up, 4096);
	assert_int_equal(sbx_upload_write(up, big, sizeof big), 0);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 10;
	oldsig = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	int r = sbx_upload_commit(&up, NULL);
	setrlimit(RLIMIT_FSIZE, &old);
	signal(SIGXFSZ, oldsig);
	assert_int_equal(r, -EFBIG);
	assert_null(up);
	assert_host_content(fx->h.wsdir, "doc", want);
	assert_int_equal(count_temps(fx->h.wsdir, ""), 0);
}

static void t_upload_write_fails(void **state)
{
	struct fx *fx = *state;
	struct sbx_upload *up = NULL;
	struct rlimit old, lim;
	static char big[128 * 1024];
	void (*oldsig)(int);
	int r;

	assert_int_equal(sbx_fs_write(fx->h.ws, "doc", "keep me", 7, false), 0);
	assert_int_equal(sbx_upload_begin(&up, fx->h.ws, "doc", false), 0);
	memset(big, 'z', sizeof big);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 64 * 1024;
	oldsig = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	r = sbx_upload_write(up, big, sizeof big);
	setrlimit(RLIMIT_FSIZE, &old);
	signal(SIGXFSZ, oldsig);
	assert_int_equal(r, -EFBIG);
	assert_host_content(fx->h.wsdir, "doc", "keep me");
	sbx_upload_abort(&up);
	assert_host_content(fx->h.wsdir, "doc", "keep me");
	assert_int_equal(count_temps(fx->h.wsdir, ""), 0);

	/* Read-only parent (only meaningful without CAP_DAC_OVERRIDE). */
	if (!am_root()) {
		char p[512];
		hpath(p, sizeof p, fx->h.wsdir, "d");
		assert_int_equal(chmod(p, 0555), 0);
		assert_int_equal(sbx_fs_write(fx->h.ws, "d/f.txt", "x", 1, false), -EACCES);
		assert_int_equal(chmod(p, 0755), 0);
		assert_host_content(fx->h.wsdir, "d/f.txt", "inside");
	}
}

/* The parent directory is swapped for a link out after begin: the upload
 * holds the real directory's fd, so the file lands there, not outside. */
static void t_upload_parent_swapped(void **state)
{
	struct fx *fx = *state;
	struct sbx_upload *up = NULL;

	host_mkdir(fx->h.wsdir, "sw");
	assert_int_equal(sbx_upload_begin(&up, fx->h.ws, "sw/secret", false), 0);
	assert_int_equal(sbx_upload_write(up, "planted", 7), 0);
	host_rename(fx->h.wsdir, "sw", "sw_real");
	host_symlink(fx->h.wsdir, fx->h.out, "sw");
	assert_int_equal(sbx_upload_commit(&up, NULL), 0);
	assert_host_content(fx->h.wsdir, "sw_real/secret", "planted");
	assert_outside_untouched(fx);

	/* From now on every operation through "sw" refuses. */
	uint64_t size;
	int fd;
	bool removed, ex;
	struct sbx_dirent *ents;
	size_t n;
	struct sbx_stat st;
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "sw/secret", &fd, &size), -EXDEV);
	assert_int_equal(sbx_fs_write(fx->h.ws, "sw/secret", "x", 1, false), -EXDEV);
	assert_int_equal(readdir_all(fx->h.ws, "sw", &ents, &n), -EXDEV);
	assert_int_equal(sbx_fs_stat(fx->h.ws, "sw/secret", &st), -EXDEV);
	assert_int_equal(sbx_fs_exists(fx->h.ws, "sw/secret", &ex), -EXDEV);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "sw/newdir", false), -EXDEV);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "sw/newdir/x", true), -EXDEV);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "sw/sub", true, true, &removed), -EXDEV);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "sw/secret", false, false, &removed), -EXDEV);
	assert_int_equal(sbx_fs_move(fx->h.ws, "sw/secret", "stolen", false), -EXDEV);
	assert_int_equal(sbx_fs_move(fx->h.ws, "d/f.txt", "sw/planted", false), -EXDEV);
	/* Removing "sw" removes the link only. */
	assert_int_equal(sbx_fs_rm(fx->h.ws, "sw", true, false, &removed), 0);
	assert_true(removed);
	assert_false(host_exists(fx->h.wsdir, "sw"));
	assert_true(host_is(fx->h.wsdir, "sw_real", S_IFDIR));
	assert_outside_untouched(fx); /* compares out/secret's content too */
}

/* ---- open_read / stat / exists / readdir ---- */

static void t_open_read_special(void **state)
{
	struct fx *fx = *state;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	uint64_t size = 77;
	int fd = -1, s;
	char p[512];

	alarm(20); /* a FIFO open that blocks fails the test instead of hanging */
	hpath(p, sizeof p, fx->h.wsdir, "fifo");
	assert_int_equal(mkfifo(p, 0644), 0);
	host_symlink(fx->h.wsdir, "fifo", "fifo_link");
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "fifo", &fd, &size), -SBX_E_SPECIAL);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "fifo_link", &fd, &size), -SBX_E_SPECIAL);
	assert_int_equal(fd, -1);
	assert_int_equal(size, 77);

	hpath(p, sizeof p, fx->h.wsdir, "sock");
	assert_true(strlen(p) < sizeof sa.sun_path);
	memcpy(sa.sun_path, p, strlen(p) + 1);
	s = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(s >= 0);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "sock", &fd, &size), -SBX_E_SPECIAL);
	close(s);

	if (am_root()) {
		hpath(p, sizeof p, fx->h.wsdir, "null");
		assert_int_equal(mknod(p, S_IFCHR | 0666, makedev(1, 3)), 0);
		assert_int_equal(sbx_fs_open_read(fx->h.ws, "null", &fd, &size), -SBX_E_SPECIAL);
	}
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "d", &fd, &size), -EISDIR);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "in_link", &fd, &size), -EISDIR);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "", &fd, &size), -EISDIR);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "nothere", &fd, &size), -ENOENT);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "dangle", &fd, &size), -ENOENT);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "loop", &fd, &size), -ELOOP);
	alarm(0);
}

/* ---- read_all: the whole file, ended by a short read ---- */

#define GROW_MAX (1u << 20)
#define GROW_STEP 100

/* Byte i of a file the grower writes: a pattern that shows a misplaced
 * or cut piece. */
static char grow_byte(size_t i)
{
	return (char)('a' + i % 26);
}

struct grower {
	int fd;
	atomic_bool stop;
};

/* Appends the pattern GROW_STEP bytes at a time up to GROW_MAX, then
 * truncates to 0 and starts over, until stopped (no asserts here: not the
 * test's thread). */
static void *grow_main(void *arg)
{
	struct grower *g = arg;
	char buf[GROW_STEP];
	size_t at = 0;
	while (!atomic_load(&g->stop)) {
		if (at >= GROW_MAX) { /* O_APPEND: the next write goes to 0 */
			if (ftruncate(g->fd, 0) < 0)
				break;
			at = 0;
		}
		for (size_t i = 0; i < GROW_STEP; i++)
			buf[i] = grow_byte(at + i);
		if (write(g->fd, buf, GROW_STEP) != GROW_STEP)
			break;
		at += GROW_STEP;
	}
	return NULL;
}

/* One read_all of "grow" while it grows (or is cut back to 0): every byte
 * is where the pattern says, and the answer is never shorter than the
 * file was when the call began, unless it was cut back meanwhile. */
static void read_growing_once(struct fx *fx, const char *host, bool nowait)
{
	struct stat before;
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(stat(host, &before), 0);
	if (nowait)
		nowait_begin();
	int rc = sbx_fs_read_all(fx->h.ws, "grow", 16u << 20, &data, &len, NULL);
	bool blocked = nowait ? nowait_end() : false;
	if (blocked) { /* the page cache did not hold it: the caller retries on a pool */
		assert_int_equal(rc, -EAGAIN);
		return;
	}
	assert_int_equal(rc, 0);
	struct stat after;
	assert_int_equal(stat(host, &after), 0);
	if (after.st_size >= before.st_size)
		assert_true(len >= (size_t)before.st_size);
	for (size_t i = 0; i < len; i++)
		if (data[i] != grow_byte(i))
			fail_msg("byte %zu of %zu is %d", i, len, data[i]);
	assert_int_equal(data[len], '\0');
	free(data);
}

static void t_read_all(void **state)
{
	struct fx *fx = *state;
	char *data = NULL;
	size_t len = 0;
	uint64_t size = 0;
	char p[512];

	host_write(fx->h.wsdir, "r.txt", "twelve bytes");
	assert_int_equal(sbx_fs_read_all(fx->h.ws, "r.txt", 100, &data, &len, &size), 0);
	assert_int_equal(len, 12);
	assert_int_equal(size, 12);
	assert_string_equal(data, "twelve bytes");
	free(data);
	host_write(fx->h.wsdir, "empty", "");
	assert_int_equal(sbx_fs_read_all(fx->h.ws, "empty", 100, &data, &len, NULL), 0);
	assert_int_equal(len, 0);
	assert_string_equal(data, "");
	free(data);
	assert_int_equal(sbx_fs_read_all(fx->h.ws, "r.txt", 11, &data, &len, &size), -EFBIG);
	assert_int_equal(size, 12);
	assert_int_equal(sbx_fs_read_all(fx->h.ws, "r.txt", 12, &data, &len, NULL), 0);
	free(data);

	/* A file written while it is read, in both modes. */
	hpath(p, sizeof p, fx->h.wsdir, "grow");
	struct grower g = {.fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644)};
	assert_true(g.fd >= 0);
	atomic_init(&g.stop, false);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, grow_main, &g), 0);
	for (int i = 0; i < 400; i++)
		read_growing_once(fx, p, i % 2);
	atomic_store(&g.stop, true);
	pthread_join(th, NULL);
	close(g.fd);
}

static void t_open_read_escapes(void **state)
{
	struct fx *fx = *state;
	uint64_t size;
	int fd = -1;

	assert_int_equal(sbx_fs_open_read(fx->h.ws, "abs_secret", &fd, &size), -EXDEV);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "rel_secret", &fd, &size), -EXDEV);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "abs/secret", &fd, &size), -EXDEV);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "rel/secret", &fd, &size), -EXDEV);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "d/rel2/sub/inner.txt", &fd, &size), -EXDEV);
	assert_int_equal(sbx_fs_open_read(fx->h.ws, "absdangle", &fd, &size), -EXDEV);
	assert_int_equal(fd, -1);
	assert_outside_untouched(fx);
}

static void t_stat(void **state)
{
	struct fx *fx = *state;
	struct sbx_stat st;
	struct stat hst;
	char p[512];

	hpath(p, sizeof p, fx->h.wsdir, "d/f.txt");
	assert_int_equal(chmod(p, 0640), 0);
	assert_int_equal(lstat(p, &hst), 0);

	assert_int_equal(sbx_fs_stat(fx->h.ws, "d/f.txt", &st), 0);
	assert_int_equal(st.type, SBX_FT_FILE);
	assert_int_equal(st.size, 6);
	assert_int_equal(st.mode, 0640);
	assert_false(st.is_symlink);
	assert_false(st.followed);
	assert_int_equal(st.mtime.tv_sec, hst.st_mtim.tv_sec);
	assert_int_equal(st.mtime.tv_nsec, hst.st_mtim.tv_nsec);

	assert_int_equal(sbx_fs_stat(fx->h.ws, "", &st), 0);
	assert_int_equal(st.type, SBX_FT_DIR);
	assert_int_equal(sbx_fs_stat(fx->h.ws, "d", &st), 0);
	assert_int_equal(st.type, SBX_FT_DIR);
	assert_int_equal(st.mode, 0755);

	/* In-workspace links: followed, fields of the target. */
	assert_int_equal(sbx_fs_stat(fx->h.ws, "in_file_link", &st), 0);
	assert_int_equal(st.type, SBX_FT_FILE);
	assert_true(st.is_symlink);
	assert_true(st.followed);
	assert_int_equal(st.size, 6);
	assert_int_equal(st.mode, 0640);
	assert_int_equal(st.mtime.tv_nsec, hst.st_mtim.tv_nsec);
	assert_int_equal(sbx_fs_stat(fx->h.ws, "in_link", &st), 0);
	assert_int_equal(st.type, SBX_FT_DIR);
	assert_true(st.is_symlink && st.followed);

	/* Escaping, dangling, looping: the link itself. */
	static const char *const links[] = {"abs",	 "rel",	   "abs_secret", "rel_secret",
					    "absdangle", "dangle", "loop",	 "d/rel2"};
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
		char target[512];
		ssize_t tl;
		hpath(p, sizeof p, fx->h.wsdir, links[i]);
		tl = readlink(p, target, sizeof target);
		assert_true(tl > 0);
		assert_int_equal(sbx_fs_stat(fx->h.ws, links[i], &st), 0);
		if (st.type != SBX_FT_SYMLINK || !st.is_symlink || st.followed)
			fail_msg("%s: type %d is_symlink %d followed %d", links[i], st.type, st.is_symlink,
				 st.followed);
		assert_int_equal(st.size, (uint64_t)tl);
	}
	assert_int_equal(sbx_fs_stat(fx->h.ws, "abs/secret", &st), -EXDEV);
	assert_int_equal(sbx_fs_stat(fx->h.ws, "rel/sub", &st), -EXDEV);
	assert_int_equal(sbx_fs_stat(fx->h.ws, "nothere", &st), -ENOENT);
	assert_int_equal(sbx_fs_stat(fx->h.ws, "d/f.txt/x", &st), -ENOTDIR);

	hpath(p, sizeof p, fx->h.wsdir, "fifo");
	assert_int_equal(mkfifo(p, 0600), 0);
	assert_int_equal(sbx_fs_stat(fx->h.ws, "fifo", &st), 0);
	assert_int_equal(st.type, SBX_FT_OTHER);
	assert_int_equal(st.mode, 0600);
	assert_outside_untouched(fx);
}

static void t_exists(void **state)
{
	struct fx *fx = *state;
	bool e = false;

	assert_int_equal(sbx_fs_exists(fx->h.ws, "d/f.txt", &e), 0);
	assert_true(e);
	assert_int_equal(sbx_fs_exists(fx->h.ws, "", &e), 0);
	assert_true(e);
	assert_int_equal(sbx_fs_exists(fx->h.ws, "nothere", &e), 0);
	assert_false(e);
	assert_int_equal(sbx_fs_exists(fx->h.ws, "no/such/thing", &e), 0);
	assert_false(e);
	assert_int_equal(sbx_fs_exists(fx->h.ws, "d/f.txt/x", &e), 0);
	assert_false(e);
	/* lstat sense: links exist, whatever they point at. */
	static const char *const links[] = {"dangle", "loop", "abs", "rel_secret", "absdangle"};
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
		e = false;
		assert_int_equal(sbx_fs_exists(fx->h.ws, links[i], &e), 0);
		assert_true(e);
	}
	assert_int_equal(sbx_fs_exists(fx->h.ws, "abs/secret", &e), -EXDEV);
	assert_int_equal(sbx_fs_exists(fx->h.ws, "rel/nothing", &e), -EXDEV);
	assert_int_equal(sbx_fs_exists(fx->h.ws, "d/rel2/secret", &e), -EXDEV);
	assert_outside_untouched(fx);
}

static void t_readdir(void **state)
{
	struct fx *fx = *state;
	static const char *const want[] = {".h", "B", "_", "a", "b", "dd", "ln", "z9", "\xc3\xa9"};
	struct sbx_dirent *ents = NULL;
	size_t n = 0;

	host_mkdir(fx->h.wsdir, "r");
	host_write(fx->h.wsdir, "r/b", "bb");
	host_write(fx->h.wsdir, "r/B", "B");
	host_write(fx->h.wsdir, "r/a", "aaa");
	host_write(fx->h.wsdir, "r/_", "");
	host_write(fx->h.wsdir, "r/.h", "");
	host_write(fx->h.wsdir, "r/\xc3\xa9", "");
	host_write(fx->h.wsdir, "r/z9", "");
	host_mkdir(fx->h.wsdir, "r/dd");
	host_symlink(fx->h.wsdir, "a", "r/ln");

	assert_int_equal(readdir_all(fx->h.ws, "r", &ents, &n), 0);
	assert_int_equal(n, sizeof want / sizeof want[0]);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(ents[i].name, want[i]);
		if (strcmp(want[i], "dd") == 0)
			assert_int_equal(ents[i].type, SBX_FT_DIR);
		else if (strcmp(want[i], "ln") == 0)
			assert_int_equal(ents[i].type, SBX_FT_SYMLINK);
		else
			assert_int_equal(ents[i].type, SBX_FT_FILE);
		if (strcmp(want[i], "a") == 0)
			assert_int_equal(ents[i].size, 3);
	}
	sbx_dirents_free(ents, n);

	assert_int_equal(readdir_all(fx->h.ws, "r/dd", &ents, &n), 0);
	assert_int_equal(n, 0);
	sbx_dirents_free(ents, n);
	assert_int_equal(readdir_all(fx->h.ws, "in_link", &ents, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(ents[0].name, "f.txt");
	assert_string_equal(ents[1].name, "rel2");
	assert_int_equal(ents[1].type, SBX_FT_SYMLINK);
	sbx_dirents_free(ents, n);
	sbx_dirents_free(NULL, 0);

	assert_int_equal(readdir_all(fx->h.ws, "abs", &ents, &n), -EXDEV);
	assert_int_equal(readdir_all(fx->h.ws, "rel", &ents, &n), -EXDEV);
	assert_int_equal(readdir_all(fx->h.ws, "d/rel2", &ents, &n), -EXDEV);
	assert_int_equal(readdir_all(fx->h.ws, "abs/sub", &ents, &n), -EXDEV);
	assert_int_equal(readdir_all(fx->h.ws, "d/f.txt", &ents, &n), -ENOTDIR);
	assert_int_equal(readdir_all(fx->h.ws, "nothere", &ents, &n), -ENOENT);
	assert_outside_untouched(fx);
}

/* ---- mkdir / rm / move ---- */

static void t_mkdir(void **state)
{
	struct fx *fx = *state;

	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "m", false), 0);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "m", false), -EEXIST);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "m", true), 0);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "m/a/b", false), -SBX_E_PARENT_MISSING);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "m/a/b/c", true), 0);
	host_expect_dir(fx->h.wsdir, "m/a/b/c");
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "d/f.txt", false), -EEXIST);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "d/f.txt", true), -EEXIST);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "d/f.txt/x", true), -ENOTDIR);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "in_link/viaLink", false), 0);
	assert_true(host_is(fx->h.wsdir, "d/viaLink", S_IFDIR));

	/* Through links that leave: refused, nothing created outside. */
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "abs/new", false), -EXDEV);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "abs/new/x", true), -EXDEV);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "abs/sub/new", true), -EXDEV);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "rel/new", true), -EXDEV);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "d/rel2/new/x/y", true), -EXDEV);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "absdangle", true), -EXDEV);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "absdangle/x", true), -EXDEV);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "abs", true), -EXDEV);
	assert_int_equal(sbx_fs_mkdir(fx->h.ws, "abs", false), -EEXIST);
	assert_outside_untouched(fx);
}

static void t_rm_basic(void **state)
{
	struct fx *fx = *state;
	bool removed = true;

	host_write(fx->h.wsdir, "a.txt", "a");
	assert_int_equal(sbx_fs_rm(fx->h.ws, "a.txt", false, false, &removed), 0);
	assert_true(removed);
	assert_false(host_exists(fx->h.wsdir, "a.txt"));

	host_mkdir(fx->h.wsdir, "e");
	assert_int_equal(sbx_fs_rm(fx->h.ws, "e", false, false, &removed), 0);
	assert_true(removed);
	assert_false(host_exists(fx->h.wsdir, "e"));

	host_mkdir(fx->h.wsdir, "ne");
	host_write(fx->h.wsdir, "ne/x", "x");
	assert_int_equal(sbx_fs_rm(fx->h.ws, "ne", false, false, &removed), -ENOTEMPTY);
	assert_false(removed);
	assert_true(host_exists(fx->h.wsdir, "ne/x"));
	assert_int_equal(sbx_fs_rm(fx->h.ws, "ne", true, false, &removed), 0);
	assert_true(removed);
	assert_false(host_exists(fx->h.wsdir, "ne"));

	removed = true;
	assert_int_equal(sbx_fs_rm(fx->h.ws, "nothere", false, false, &removed), -ENOENT);
	assert_false(removed);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "no/such", true, false, &removed), -ENOENT);
	removed = true;
	assert_int_equal(sbx_fs_rm(fx->h.ws, "nothere", false, true, &removed), 0);
	assert_false(removed);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "no/such", true, true, &removed), 0);
	assert_false(removed);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "d/f.txt/x", false, true, &removed), 0);
	assert_false(removed);
}

static void t_rm_roots(void **state)
{
	struct fx *fx = *state;
	bool removed = true;

	host_mkdir(fx->h.wsdir, "sessions");
	host_mkdir(fx->h.wsdir, "sessions/s1");
	host_symlink(fx->h.wsdir, ".", "rootlink");
	host_symlink(fx->h.wsdir, "sessions", "sesslink");
	assert_int_equal(sbx_fs_rm(fx->h.ws, "", true, true, &removed), -SBX_E_ROOT);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "sessions", true, true, &removed), -SBX_E_ROOT);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "sessions/s1", true, true, &removed), -SBX_E_ROOT);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "sessions/nothere", true, true, &removed), -SBX_E_ROOT);
	/* The same directories reached through in-workspace links. */
	assert_int_equal(sbx_fs_rm(fx->h.ws, "rootlink/sessions", true, true, &removed), -SBX_E_ROOT);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "rootlink/sessions/s1", true, true, &removed), -SBX_E_ROOT);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "sesslink/s1", true, true, &removed), -SBX_E_ROOT);
	assert_false(removed);
	assert_true(host_is(fx->h.wsdir, "sessions/s1", S_IFDIR));
	/* Below a session root is fine. */
	host_write(fx->h.wsdir, "sessions/s1/f", "x");
	assert_int_equal(sbx_fs_rm(fx->h.ws, "sessions/s1/f", false, false, &removed), 0);
	assert_true(removed);
}

static void t_rm_links(void **state)
{
	struct fx *fx = *state;
	bool removed = false;
	char p[512];

	/* Removing a link removes the link, recursive or not. */
	assert_int_equal(sbx_fs_rm(fx->h.ws, "abs", false, false, &removed), 0);
	assert_true(removed);
	assert_false(host_exists(fx->h.wsdir, "abs"));
	assert_int_equal(sbx_fs_rm(fx->h.ws, "rel", true, false, &removed), 0);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "rel_secret", true, false, &removed), 0);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "in_link", true, false, &removed), 0);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "loop", true, false, &removed), 0);
	assert_true(host_exists(fx->h.wsdir, "d/f.txt"));
	assert_false(host_exists(fx->h.wsdir, "in_link"));

	/* Through links: refused, force or not. */
	host_symlink(fx->h.wsdir, fx->h.out, "abs");
	assert_int_equal(sbx_fs_rm(fx->h.ws, "abs/secret", false, false, &removed), -EXDEV);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "abs/secret", false, true, &removed), -EXDEV);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "abs/sub", true, true, &removed), -EXDEV);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "abs/nothing", true, true, &removed), -EXDEV);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "d/rel2/sub", true, true, &removed), -EXDEV);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "absdangle/x", true, true, &removed), -EXDEV);

	/* A tree full of links: the tree goes, no link is followed. */
	host_mkdir(fx->h.wsdir, "tree");
	host_mkdir(fx->h.wsdir, "tree/a");
	host_mkdir(fx->h.wsdir, "tree/a/b");
	host_write(fx->h.wsdir, "tree/a/b/file", "x");
	host_write(fx->h.wsdir, "tree/top", "x");
	host_symlink(fx->h.wsdir, fx->h.out, "tree/a/out_abs");
	host_symlink(fx->h.wsdir, "../../../out", "tree/a/out_rel");
	host_symlink(fx->h.wsdir, "../../../out/secret", "tree/a/b/secret_rel");
	host_symlink(fx->h.wsdir, "../d", "tree/in_dir");
	host_symlink(fx->h.wsdir, "/", "tree/hostroot");
	hpath(p, sizeof p, fx->h.wsdir, "tree/a/fifo");
	assert_int_equal(mkfifo(p, 0644), 0);
	assert_int_equal(sbx_fs_rm(fx->h.ws, "tree", true, false, &removed), 0);
	assert_true(removed);
	assert_false(host_exists(fx->h.wsdir, "tree"));
	assert_true(host_exists(fx->h.wsdir, "d/f.txt"));
	assert_true(host_exists(fx->h.wsdir, "d/rel2"));
	assert_outside_untouched(fx);
}

static void t_move(void **state)
{
	struct fx *fx = *state;

	assert_int_equal(sbx_fs_move(fx->h.ws, "d/f.txt", "g.txt", false), 0);
	assert_host_content(fx->h.wsdir, "g.txt", "inside");
	assert_false(host_exists(fx->h.wsdir, "d/f.txt"));
	host_write(fx->h.wsdir, "h.txt", "hhh");
	assert_int_equal(sbx_fs_move(fx->h.ws, "g.txt", "h.txt", false), -EEXIST);
	assert_host_content(fx->h.wsdir, "g.txt", "inside");
	assert_host_content(fx->h.wsdir, "h.txt", "hhh");
	assert_int_equal(sbx_fs_move(fx->h.ws, "g.txt", "h.txt", true), 0);
	assert_host_content(fx->h.wsdir, "h.txt", "inside");
	assert_false(host_exists(fx->h.wsdir, "g.txt"));

	assert_int_equal(sbx_fs_move(fx->h.ws, "nothere", "x", false), -ENOENT);
	assert_int_equal(sbx_fs_move(fx->h.ws, "zz/a", "x", false), -ENOENT);
	assert_int_equal(sbx_fs_move(fx->h.ws, "h.txt", "zz/b", false), -SBX_E_PARENT_MISSING);
	assert_int_equal(sbx_fs_move(fx->h.ws, "h.txt", "in_link/h2.txt", false), 0);
	assert_true(host_exists(fx->h.wsdir, "d/h2.txt"));

	/* Directories: over a non-empty one refused, over an empty one fine. */
	host_mkdir(fx->h.wsdir, "src");
	host_write(fx->h.wsdir, "src/f", "f");
	host_mkdir(fx->h.wsdir, "full");
	host_write(fx->h.wsdir, "full/g", "g");
	host_mkdir(fx->h.wsdir, "empty");
	assert_int_equal(sbx_fs_move(fx->h.ws, "src", "full", false), -EEXIST);
	assert_int_equal(sbx_fs_move(fx->h.ws, "src", "full", true), -ENOTEMPTY);
	assert_int_equal(sbx_fs_move(fx->h.ws, "src", "empty", true), 0);
	assert_host_content(fx->h.wsdir, "empty/f", "f");

	/* Roots. */
	host_mkdir(fx->h.wsdir, "sessions");
	host_mkdir(fx->h.wsdir, "sessions/s1");
	host_symlink(fx->h.wsdir, ".", "rootlink");
	assert_int_equal(sbx_fs_move(fx->h.ws, "", "x", false), -SBX_E_ROOT);
	assert_int_equal(sbx_fs_move(fx->h.ws, "sessions", "x", false), -SBX_E_ROOT);
	assert_int_equal(sbx_fs_move(fx->h.ws, "sessions/s1", "x", false), -SBX_E_ROOT);
	assert_int_equal(sbx_fs_move(fx->h.ws, "empty", "sessions/s2", false), -SBX_E_ROOT);
	assert_int_equal(sbx_fs_move(fx->h.ws, "empty", "sessions", true), -SBX_E_ROOT);
	assert_int_equal(sbx_fs_move(fx->h.ws, "rootlink/sessions/s1", "x", false), -SBX_E_ROOT);
	assert_int_equal(sbx_fs_move(fx->h.ws, "rootlink/sessions", "x", false), -SBX_E_ROOT);
	assert_true(host_is(fx->h.wsdir, "sessions/s1", S_IFDIR));
	assert_int_equal(sbx_fs_move(fx->h.ws, "empty", "sessions/s1/moved", false), 0);

	/* Escapes: nothing leaves, nothing is planted. */
	assert_int_equal(sbx_fs_move(fx->h.ws, "abs/secret", "stolen", false), -EXDEV);
	assert_int_equal(sbx_fs_move(fx->h.ws, "rel/sub", "stolen", false), -EXDEV);
	assert_int_equal(sbx_fs_move(fx->h.ws, "d/h2.txt", "abs/planted", false), -EXDEV);
	assert_int_equal(sbx_fs_move(fx->h.ws, "d/h2.txt", "rel/planted", true), -EXDEV);
	assert_int_equal(sbx_fs_move(fx->h.ws, "d/h2.txt", "d/rel2/sub/planted", true), -EXDEV);
	assert_int_equal(sbx_fs_move(fx->h.ws, "d/h2.txt", "abs/secret", true), -EXDEV);
	assert_false(host_exists(fx->h.wsdir, "stolen"));
	/* Moving a link moves the link. */
	assert_int_equal(sbx_fs_move(fx->h.ws, "abs", "abs_moved", false), 0);
	assert_true(host_is(fx->h.wsdir, "abs_moved", S_IFLNK));
	assert_int_equal(sbx_fs_move(fx->h.ws, "d/h2.txt", "abs_secret", true), 0);
	assert_true(host_is(fx->h.wsdir, "abs_secret", S_IFREG));
	assert_outside_untouched(fx);
}

/* ---- temp sweep ---- */

static void t_sweep_temps(void **state)
{
	struct fx *fx = *state;
	struct sbx_upload *up = NULL;
	char p[512];

	host_write(fx->h.wsdir, ".sandboxd-tmp-a-1", "x");
	host_write(fx->h.wsdir, "d/.sandboxd-tmp-b-2", "x");
	host_mkdir(fx->h.wsdir, "d/e");
	host_write(fx->h.wsdir, "d/e/.sandboxd-tmp-c", "x");
	host_mkdir(fx->h.wsdir, ".sandboxd-tmp-dir");
	host_write(fx->h.wsdir, ".sandboxd-tmp-dir/.sandboxd-tmp-x", "x");
	host_write(fx->h.wsdir, "d/e/keep.txt", "keep");
	snprintf(p, sizeof p, "%s/.sandboxd-tmp-keep", fx->h.out);
	host_symlink(fx->h.wsdir, p, ".sandboxd-tmp-link");
	/* An interrupted upload's temp file is found too. */
	assert_int_equal(sbx_upload_begin(&up, fx->h.ws, "d/e/up.txt", false), 0);
	assert_int_equal(sbx_upload_write(up, "partial", 7), 0);

	assert_int_equal(sbx_fs_sweep_temps(fx->h.ws), 5);
	sbx_upload_abort(&up);
	assert_false(host_exists(fx->h.wsdir, ".sandboxd-tmp-a-1"));
	assert_false(host_exists(fx->h.wsdir, "d/.sandboxd-tmp-b-2"));
	assert_false(host_exists(fx->h.wsdir, "d/e/.sandboxd-tmp-c"));
	assert_false(host_exists(fx->h.wsdir, ".sandboxd-tmp-dir/.sandboxd-tmp-x"));
	assert_true(host_is(fx->h.wsdir, ".sandboxd-tmp-dir", S_IFDIR));
	assert_true(host_is(fx->h.wsdir, ".sandboxd-tmp-link", S_IFLNK));
	assert_false(host_exists(fx->h.wsdir, "d/e/up.txt"));
	assert_host_content(fx->h.wsdir, "d/e/keep.txt", "keep");
	assert_int_equal(sbx_fs_sweep_temps(fx->h.ws), 0);
	assert_outside_untouched(fx);
}

/* ---- races: a thread swaps directories for links out, files for FIFOs ---- */

struct racer {
	int wsfd;
	int racefd;
	atomic_bool stop;
	long swaps;
};

static void *race_thread(void *p)
{
	struct racer *r = p;

	while (!atomic_load(&r->stop)) {
		if (renameat2(r->wsfd, "race", r->wsfd, "race_alt", RENAME_EXCHANGE) == 0)
			r->swaps++;
		renameat2(r->racefd, "sub", r->racefd, "sub_alt", RENAME_EXCHANGE);
		renameat2(r->racefd, "data", r->racefd, "data_alt", RENAME_EXCHANGE);
		sched_yield();
	}
	return NULL;
}

static long elapsed_ms(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void t_race_swaps(void **state)
{
	struct fx *fx = *state;
	struct racer rc = {.stop = false};
	struct timespec t0;
	pthread_t th;
	long exdev = 0, ok = 0;
	char p[512];

	host_mkdir(fx->h.wsdir, "race");
	host_write(fx->h.wsdir, "race/secret", "inside secret");
	host_mkdir(fx->h.wsdir, "race/sub");
	host_write(fx->h.wsdir, "race/sub/inner.txt", "inside inner");
	host_write(fx->h.wsdir, "race/data", "data");
	hpath(p, sizeof p, fx->h.wsdir, "race/data_alt");
	assert_int_equal(mkfifo(p, 0644), 0);
	host_symlink(fx->h.wsdir, fx->h.out, "race_alt");
	host_symlink(fx->h.wsdir, "../../out/sub", "race/sub_alt");
	rc.wsfd = open(fx->h.wsdir, O_PATH | O_DIRECTORY);
	hpath(p, sizeof p, fx->h.wsdir, "race");
	rc.racefd = open(p, O_PATH | O_DIRECTORY);
	assert_true(rc.wsfd >= 0 && rc.racefd >= 0);
	drain_events(fx);

	alarm(60);
	assert_int_equal(pthread_create(&th, NULL, race_thread, &rc), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (elapsed_ms(&t0) < 400 || ((exdev == 0 || ok == 0) && elapsed_ms(&t0) < 10000)) {
		int res[14], k = 0, fd = -1;
		uint64_t size;
		bool b;
		struct sbx_dirent *ents = NULL;
		size_t n = 0;
		struct sbx_stat st;

		res[k++] = sbx_fs_write(fx->h.ws, "race/secret", "pwned", 5, false);
		res[k++] = sbx_fs_write(fx->h.ws, "race/sub/inner.txt", "pwned", 5, true);
		res[k++] = sbx_fs_mkdir(fx->h.ws, "race/sub/newdir/x", true);
		res[k++] = sbx_fs_mkdir(fx->h.ws, "race/newdir", false);
		res[k++] = sbx_fs_open_read(fx->h.ws, "race/data", &fd, &size);
		if (fd >= 0)
			close(fd);
		fd = -1;
		res[k++] = sbx_fs_open_read(fx->h.ws, "race/secret", &fd, &size);
		if (fd >= 0)
			close(fd);
		res[k++] = readdir_all(fx->h.ws, "race/sub", &ents, &n);
		if (res[k - 1] == 0)
			sbx_dirents_free(ents, n);
		res[k++] = sbx_fs_stat(fx->h.ws, "race/sub/inner.txt", &st);
		res[k++] = sbx_fs_exists(fx->h.ws, "race/sub/inner.txt", &b);
		res[k++] = sbx_fs_move(fx->h.ws, "race/sub/inner.txt", "race/stolen", true);
		res[k++] = sbx_fs_move(fx->h.ws, "race/stolen", "race/sub/inner.txt", true);
		res[k++] = sbx_fs_rm(fx->h.ws, "race/newdir", false, true, &b);
		res[k++] = sbx_fs_rm(fx->h.ws, "race/sub", true, true, &b);
		res[k++] = sbx_fs_rm(fx->h.ws, "race/secret", false, true, &b);
		for (int i = 0; i < k; i++) {
			if (res[i] == -EXDEV)
				exdev++;
			else if (res[i] == 0)
				ok++;
		}
	}
	atomic_store(&rc.stop, true);
	pthread_join(th, NULL);
	alarm(0);
	close(rc.wsfd);
	close(rc.racefd);
	assert_true(rc.swaps > 0);
	assert_true(exdev > 0);
	assert_true(ok > 0);
	assert_outside_untouched(fx);
}

/* Recursive removal with a directory inside the tree being swapped for a
 * link out between the walk's lstat and its open of that directory. */
struct rm_racer {
	int wsfd;
	atomic_int idx; /* victim tree to attack, -1 none */
	atomic_bool stop;
	char tree;	   /* trees are <tree><idx> */
	const char *a, *b; /* names in the tree to exchange */
};

static void *rm_race_thread(void *p)
{
	struct rm_racer *r = p;
	char a[64], b[64];

	while (!atomic_load(&r->stop)) {
		int i = atomic_load(&r->idx);
		if (i < 0) {
			sched_yield();
			continue;
		}
		snprintf(a, sizeof a, "%c%d/%s", r->tree, i, r->a);
		snprintf(b, sizeof b, "%c%d/%s", r->tree, i, r->b);
		renameat2(r->wsfd, a, r->wsfd, b, RENAME_EXCHANGE);
	}
	return NULL;
}

/* Up to 2000 rounds (at most 1.5 s) of round(fx, rc, i, arg) while
 * rm_race_thread swaps in tree i, then check that out was not reached. A
 * round marks its tree with rc->idx while it attacks. */
static void race_rounds(struct fx *fx, struct rm_racer *rc,
			void (*round)(struct fx *fx, struct rm_racer *rc, int i, const char *arg),
			const char *arg)
{
	struct timespec t0;
	pthread_t th;

	rc->wsfd = open(fx->h.wsdir, O_PATH | O_DIRECTORY);
	assert_true(rc->wsfd >= 0);
	alarm(60);
	assert_int_equal(pthread_create(&th, NULL, rm_race_thread, rc), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 2000 && elapsed_ms(&t0) < 1500; i++)
		round(fx, rc, i, arg);
	atomic_store(&rc->stop, true);
	pthread_join(th, NULL);
	alarm(0);
	close(rc->wsfd);
	assert_outside_untouched(fx);
}

/* v<i>/sub (with a file) and v<i>/sub_alt -> out_sub; remove v<i>. */
static void rm_round(struct fx *fx, struct rm_racer *rc, int i, const char *out_sub)
{
	char rel[64];
	bool removed;

	snprintf(rel, sizeof rel, "v%d", i);
	host_mkdir(fx->h.wsdir, rel);
	snprintf(rel, sizeof rel, "v%d/sub", i);
	host_mkdir(fx->h.wsdir, rel);
	snprintf(rel, sizeof rel, "v%d/sub/inner.txt", i);
	host_write(fx->h.wsdir, rel, "x");
	snprintf(rel, sizeof rel, "v%d/sub_alt", i);
	host_symlink(fx->h.wsdir, out_sub, rel);
	atomic_store(&rc->idx, i);
	snprintf(rel, sizeof rel, "v%d", i);
	(void)sbx_fs_rm(fx->h.ws, rel, true, false, &removed);
	(void)sbx_fs_sweep_temps(fx->h.ws);
	atomic_store(&rc->idx, -1);
}

static void t_race_rm_recursive(void **state)
{
	struct fx *fx = *state;
	struct rm_racer rc = {.idx = -1, .stop = false, .tree = 'v', .a = "sub", .b = "sub_alt"};
	char p[512];

	snprintf(p, sizeof p, "%s/sub", fx->h.out);
	race_rounds(fx, &rc, rm_round, p);
}

/* m<i>/n_alt -> out; mkdir m<i>/n/x/y and write m<i>/n/x/f.txt. */
static void mkdir_round(struct fx *fx, struct rm_racer *rc, int i, const char *out)
{
	char rel[64];

	snprintf(rel, sizeof rel, "m%d", i);
	host_mkdir(fx->h.wsdir, rel);
	snprintf(rel, sizeof rel, "m%d/n_alt", i);
	host_symlink(fx->h.wsdir, out, rel);
	atomic_store(&rc->idx, i);
	snprintf(rel, sizeof rel, "m%d/n/x/y", i);
	(void)sbx_fs_mkdir(fx->h.ws, rel, true);
	snprintf(rel, sizeof rel, "m%d/n/x/f.txt", i);
	(void)sbx_fs_write(fx->h.ws, rel, "x", 1, true);
	atomic_store(&rc->idx, -1);
}

/* Recursive mkdir with each new directory swapped for a link out between
 * its mkdirat and the open that continues the walk. */
static void t_race_mkdir_recursive(void **state)
{
	struct fx *fx = *state;
	struct rm_racer rc = {.idx = -1, .stop = false, .tree = 'm', .a = "n", .b = "n_alt"};

	race_rounds(fx, &rc, mkdir_round, fx->h.out);
}

static void t_session_dir_remove(void **state)
{
	struct fx *fx = *state;
	char p[512];

	assert_int_equal(sbx_session_dir_ensure(fx->h.ws, "s1-abc"), 0);
	assert_int_equal(sbx_fs_write(fx->h.ws, "sessions/s1-abc/a/b/c.txt", "x", 1, true), 0);
	host_symlink(fx->h.wsdir, fx->h.out, "sessions/s1-abc/a/out");
	host_symlink(fx->h.wsdir, "../../d", "sessions/s1-abc/in");
	drain_events(fx);
	assert_int_equal(sbx_session_dir_remove(fx->h.ws, "s1-abc"), 0);
	assert_false(host_exists(fx->h.wsdir, "sessions/s1-abc"));
	assert_true(host_is(fx->h.wsdir, "sessions", S_IFDIR));
	assert_host_content(fx->h.wsdir, "d/f.txt", "inside");
	assert_outside_untouched(fx);
	/* Missing: fine. The memo was forgotten: ensure makes it again. */
	assert_int_equal(sbx_session_dir_remove(fx->h.ws, "s1-abc"), 0);
	assert_int_equal(sbx_session_dir_ensure(fx->h.ws, "s1-abc"), 0);
	assert_true(host_is(fx->h.wsdir, "sessions/s1-abc", S_IFDIR));

	/* The session directory replaced by a link: the link goes. */
	hpath(p, sizeof p, fx->h.wsdir, "sessions/s1-abc");
	assert_int_equal(rmdir(p), 0);
	host_symlink(fx->h.wsdir, fx->h.out, "sessions/s1-abc");
	drain_events(fx);
	assert_int_equal(sbx_session_dir_remove(fx->h.ws, "s1-abc"), 0);
	assert_false(host_exists(fx->h.wsdir, "sessions/s1-abc"));
	assert_outside_untouched(fx);

	/* "sessions" itself a link: nothing is removed through it. */
	host_mkdir(fx->h.wsdir, "sessions/s2-abc");
	host_rename(fx->h.wsdir, "sessions", "moved");
	host_symlink(fx->h.wsdir, fx->h.out, "sessions");
	drain_events(fx);
	assert_int_equal(sbx_session_dir_remove(fx->h.ws, "sub"), 0);
	assert_int_equal(sbx_session_dir_remove(fx->h.ws, "emptydir"), 0);
	assert_outside_untouched(fx);
	assert_true(host_is(fx->h.wsdir, "moved/s2-abc", S_IFDIR));

	assert_int_equal(sbx_session_dir_remove(fx->h.ws, ""), -EINVAL);
	assert_int_equal(sbx_session_dir_remove(fx->h.ws, ".."), -EINVAL);
	assert_int_equal(sbx_session_dir_remove(fx->h.ws, "a/b"), -EINVAL);
	assert_int_equal(sbx_session_dir_remove(fx->h.ws, NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(t_ftype_name),
	    UNIT_TEST_FX(t_write_read),
	    UNIT_TEST_FX(t_write_parents),
	    UNIT_TEST_FX(t_write_escapes),
	    UNIT_TEST_FX(t_upload_abort_keeps_old),
	    UNIT_TEST_FX(t_upload_long_leaf),
	    UNIT_TEST_FX(t_upload_write_fails),
	    UNIT_TEST_FX(t_upload_gather),
	    UNIT_TEST_FX(t_upload_parent_swapped),
	    UNIT_TEST_FX(t_open_read_special),
	    UNIT_TEST_FX(t_open_read_escapes),
	    UNIT_TEST_FX(t_read_all),
	    UNIT_TEST_FX(t_stat),
	    UNIT_TEST_FX(t_exists),
	    UNIT_TEST_FX(t_readdir),
	    UNIT_TEST_FX(t_mkdir),
	    UNIT_TEST_FX(t_rm_basic),
	    UNIT_TEST_FX(t_rm_roots),
	    UNIT_TEST_FX(t_rm_links),
	    UNIT_TEST_FX(t_move),
	    UNIT_TEST_FX(t_session_dir_remove),
	    UNIT_TEST_FX(t_sweep_temps),
	    UNIT_TEST_FX(t_race_swaps),
	    UNIT_TEST_FX(t_race_rm_recursive),
	    UNIT_TEST_FX(t_race_mkdir_recursive),
	};

	umask(022);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
