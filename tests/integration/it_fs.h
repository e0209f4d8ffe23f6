#pragma once
/* The fixture of the file-route suites (test_fs_*.c): one server with
 * tenants acme and globex and a token per scope, acme's workspace on the
 * host, and "outside", a host directory no route may reach, watched with
 * inotify and compared with a snapshot (assert_outside_untouched). Each
 * suite runs fs_setup/fs_teardown as its group fixture. Helpers for the
 * requests (fs_get, fs_put, fs_post, put_ok, get_err, post_err), for
 * session paths (wire_in, host_in) and for host files. Include after
 * <cmocka.h>; everything is static inline so a suite may use any part. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <regex.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"

#define MIB (1024u * 1024u)
#define SECRET "TOP SECRET\n"

static struct it_server srv;
static struct it_server s2; /* the small-limit server, cleaned up by teardown should a test fail */
static char *tok_rw;	    /* acme, default scopes: fs:read fs:write exec */
static char *tok_ro;	    /* acme, fs:read */
static char *tok_wo;	    /* acme, fs:write */
static char *tok_audit;	    /* acme, audit:read */
static char *tok_globex;    /* globex, default scopes */
static char *tok_ops;	    /* ops, audit:read */
static const struct it_tok fs_toks[] = {
    {&tok_rw, "acme", NULL},	   {&tok_ro, "acme", "fs:read"},
    {&tok_wo, "acme", "fs:write"}, {&tok_audit, "acme", "audit:read"},
    {&tok_globex, "globex", NULL}, {&tok_ops, "ops", "audit:read"},
};
static char ws[512];	  /* acme's workspace on the host */
static char outside[128]; /* a host directory no route may reach */
static char *out_snap;	  /* its baseline snapshot */
static int ino = -1;	  /* inotify on it */

/* ---- small helpers ---- */

/* The wire path of rel inside a session: "/workspace/sessions/<seg>/rel". */
static inline char *wire_in(const char *key, const char *rel)
{
	char seg[80];
	it_session_segment(key, seg, sizeof seg);
	return *rel ? xasprintf("/workspace/sessions/%s/%s", seg, rel)
		    : xasprintf("/workspace/sessions/%s", seg);
}

/* The host path of rel inside a session of acme. */
static inline char *host_in(const char *key, const char *rel)
{
	char seg[80];
	it_session_segment(key, seg, sizeof seg);
	return *rel ? xasprintf("%s/sessions/%s/%s", ws, seg, rel) : xasprintf("%s/sessions/%s", ws, seg);
}

static inline char *enc(const char *s, size_t n)
{
	char *o = xmalloc(3 * n + 1), *p = o;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
		    c == '_' || c == '-' || c == '~' || c == '/')
			*p++ = (char)c;
		else {
			*p++ = '%';
			*p++ = "0123456789ABCDEF"[c >> 4];
			*p++ = "0123456789ABCDEF"[c & 15];
		}
	}
	*p = '\0';
	return o;
}

static inline void call(const char *method, const char *url, const char *token, const char *session,
			const char *reqid, const char *extra, const void *body, size_t len, struct it_resp *r)
{
	const char *h[4];
	int k = 0;
	char *sh = session ? xasprintf("X-Session-Key: %s", session) : NULL;
	char *rh = reqid ? xasprintf("X-Request-Id: %s", reqid) : NULL;
	if (sh)
		h[k++] = sh;
	if (rh)
		h[k++] = rh;
	if (extra)
		h[k++] = extra;
	h[k] = NULL;
	int rc = it_http(&srv, method, url, token, h, body, len, r);
	free(sh);
	free(rh);
	assert_int_equal(rc, 0);
}

/* GET /fs/<route>?path=<path> (encoded) in a session, with the rw token. */
static inline void fs_get(const char *route, const char *path, const char *session, const char *extra,
			  struct it_resp *r)
{
	char *e = enc(path, strlen(path));
	char *url = xasprintf("/fs/%s?path=%s", route, e);
	call("GET", url, tok_rw, session, NULL, extra, NULL, 0, r);
	free(url);
	free(e);
}

static inline void fs_put(const char *path, const char *session, const void *data, size_t len,
			  struct it_resp *r)
{
	char *e = enc(path, strlen(path));
	char *url = xasprintf("/fs/write?path=%s", e);
	call("PUT", url, tok_rw, session, NULL, NULL, data ? data : "", len, r);
	free(url);
	free(e);
}

/* POST /fs/<route> with a JSON body built by json_pack (stolen). */
static inline void fs_post(const char *route, const char *session, json_t *body, struct it_resp *r)
{
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	char *url = xasprintf("/fs/%s", route);
	call("POST", url, tok_rw, session, NULL, NULL, text, strlen(text), r);
	free(url);
	free(text);
}

/* The common one-liners: a write that must succeed, a request that must
 * fail with a given wire error. */
static inline void put_ok(const char *path, const char *session, const void *data, size_t len)
{
	struct it_resp r;
	fs_put(path, session, data, len, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
}

static inline void get_err(const char *route, const char *path, const char *session, const char *extra,
			   long status, const char *code)
{
	struct it_resp r;
	fs_get(route, path, session, extra, &r);
	it_expect_error(&r, status, code);
	it_resp_free(&r);
}

static inline void post_err(const char *route, const char *session, json_t *body, long status,
			    const char *code)
{
	struct it_resp r;
	fs_post(route, session, body, &r);
	it_expect_error(&r, status, code);
	it_resp_free(&r);
}

/* A request without a body that must fail with a wire error. */
static inline void call_err(const char *method, const char *url, const char *token, const char *session,
			    long status, const char *code)
{
	struct it_resp r;
	call(method, url, token, session, NULL, NULL, NULL, 0, &r);
	it_expect_error(&r, status, code);
	it_resp_free(&r);
}

/* The response is a JSON object; returns it (caller decrefs). */
static inline json_t *body_json(const struct it_resp *r)
{
	json_t *j = it_json(r);
	if (!json_is_object(j))
		it_show(r);
	assert_true(json_is_object(j));
	return j;
}

static inline const char *jstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	if (!s)
		fprintf(stderr, "  no string field %s\n", k);
	assert_non_null(s);
	return s;
}

/* The body's "path" is rel's wire path inside session key. */
static inline void assert_echoed_path(const struct it_resp *r, const char *key, const char *rel)
{
	json_t *j = body_json(r);
	char *want = wire_in(key, rel);
	assert_string_equal(jstr(j, "path"), want);
	free(want);
	json_decref(j);
}

/* The wire error's retry_hint mentions what. */
static inline void assert_retry_hint(const struct it_resp *r, const char *what)
{
	json_t *j = body_json(r);
	const char *hint = json_string_value(json_object_get(json_object_get(j, "error"), "retry_hint"));
	assert_non_null(hint);
	assert_non_null(strstr(hint, what));
	json_decref(j);
}

/* /fs/stat of path in session key describes a symlink as itself: no
 * size, mtime or mode of whatever it points to. */
static inline void assert_stat_symlink(const char *key, const char *path)
{
	struct it_resp r;
	fs_get("stat", path, key, NULL, &r);
	it_expect_status(&r, 200);
	json_t *j = body_json(&r);
	assert_string_equal(jstr(j, "type"), "symlink");
	assert_true(json_is_true(json_object_get(j, "is_symlink")));
	assert_null(json_object_get(j, "size"));
	assert_null(json_object_get(j, "mtime"));
	assert_null(json_object_get(j, "mode"));
	json_decref(j);
	it_resp_free(&r);
}

static inline bool is_rfc3339(const char *s)
{
	regex_t re;
	assert_int_equal(regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?Z$",
				 REG_EXTENDED | REG_NOSUB),
			 0);
	bool ok = regexec(&re, s, 0, NULL, 0) == 0;
	regfree(&re);
	return ok;
}

/* Make the session's directory exist (the server creates it lazily). */
static inline void touch_session(const char *key)
{
	struct it_resp r;
	fs_get("exists", ".", key, NULL, &r);
	it_expect_status(&r, 200);
	it_resp_free(&r);
}

static inline bool host_exists(const char *p)
{
	struct stat st;
	return lstat(p, &st) == 0;
}

static inline void host_put(const char *p, const char *s)
{
	assert_int_equal(it_write_file(p, s, strlen(s)), 0);
}

static inline void assert_host_content(const char *p, const char *want, size_t n)
{
	size_t len = 0;
	char *s = it_read_file(p, &len);
	if (!s)
		fprintf(stderr, "  host file %s missing\n", p);
	assert_non_null(s);
	assert_int_equal(len, n);
	assert_memory_equal(s, want, n);
	free(s);
}

/* The same, on rel inside session key of acme. */
static inline void assert_session_content(const char *key, const char *rel, const char *want, size_t n)
{
	char *p = host_in(key, rel);
	assert_host_content(p, want, n);
	free(p);
}

static inline bool session_exists(const char *key, const char *rel)
{
	char *p = host_in(key, rel);
	bool yes = host_exists(p);
	free(p);
	return yes;
}

/* Plant a symlink rel -> target inside session key, as a command could. */
static inline void session_symlink(const char *key, const char *target, const char *rel)
{
	char *p = host_in(key, rel);
	assert_int_equal(symlink(target, p), 0);
	free(p);
}

static inline int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static inline void rm_rf(const char *p)
{
	nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* Names under a host directory (recursively) starting with the temp prefix. */
static inline int count_temps(const char *dir)
{
	char *cmd = xasprintf("find '%s' -name '.sandboxd-tmp-*' | wc -l", dir);
	FILE *p = popen(cmd, "r");
	int n = -1;
	free(cmd);
	if (p) {
		if (fscanf(p, "%d", &n) != 1)
			n = -1;
		pclose(p);
	}
	return n;
}

/* ---- the outside: snapshot and inotify ---- */

static char snapbuf[65536];
static size_t snaplen;
static const char *snaproot;

static inline int snap_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)flag;
	(void)f;
	snaplen += (size_t)snprintf(snapbuf + snaplen, sizeof snapbuf - snaplen,
				    "%s|%o|%lld|%lld.%09ld|%lld.%09ld|", p + strlen(snaproot), st->st_mode,
				    (long long)st->st_size, (long long)st->st_mtim.tv_sec,
				    st->st_mtim.tv_nsec, (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec);
	if (S_ISREG(st->st_mode)) {
		FILE *fp = fopen(p, "r");
		if (fp) {
			snaplen += fread(snapbuf + snaplen, 1, sizeof snapbuf - snaplen - 1, fp);
			fclose(fp);
		}
	}
	snaplen += (size_t)snprintf(snapbuf + snaplen, sizeof snapbuf - snaplen, "\n");
	return 0;
}

static inline char *snapshot(const char *dir)
{
	snaplen = 0;
	snaproot = dir;
	assert_int_equal(nftw(dir, snap_cb, 16, FTW_PHYS), 0);
	return xstrndup(snapbuf, snaplen);
}

static inline void drain_events(void)
{
	char b[4096];
	while (read(ino, b, sizeof b) > 0)
		;
}

/* Nothing outside was opened, read, written, created, removed or changed. */
static inline void assert_outside_untouched(void)
{
	char b[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n = read(ino, b, sizeof b);
	if (n > 0) {
		const struct inotify_event *e = (const struct inotify_event *)b;
		fail_msg("outside touched: inotify mask 0x%x name \"%s\"", e->mask, e->len ? e->name : "");
	}
	char *now = snapshot(outside);
	if (strcmp(now, out_snap) != 0)
		fail_msg("outside changed:\nbefore:\n%s\nafter:\n%s", out_snap, now);
	free(now);
	drain_events(); /* the snapshot's own reads */
}

/* The server's log must show no sanitizer report. */
static inline int log_clean(const char *log)
{
	size_t n = 0;
	char *s = it_read_file(log, &n);
	int bad = 0;
	if (!s)
		return 0;
	if (strstr(s, "AddressSanitizer") || strstr(s, "runtime error") || strstr(s, "LeakSanitizer")) {
		fprintf(stderr, "sanitizer report in %s:\n", log);
		/* cppcheck-suppress strtokCalled ; one thread, and tests may use strtok (scripts/check) */
		for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n"))
			if (strstr(line, "Sanitizer") || strstr(line, "runtime error") || strstr(line, "#"))
				fprintf(stderr, "  %s\n", line);
		bad = 1;
	}
	free(s);
	return bad;
}

static inline int fs_setup(void **state)
{
	(void)state;
	if (it_start_minted(&srv, NULL, fs_toks, IT_NTOKS(fs_toks)) < 0)
		return -1;
	snprintf(ws, sizeof ws, "%s/tenants/acme/workspace", srv.dir);

	snprintf(outside, sizeof outside, "/tmp/sandboxd-outside-XXXXXX");
	if (!mkdtemp(outside))
		return -1;
	char p[256];
	snprintf(p, sizeof p, "%s/secret", outside);
	host_put(p, SECRET);
	snprintf(p, sizeof p, "%s/sub", outside);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/sub/inner.txt", outside);
	host_put(p, "inner\n");
	snprintf(p, sizeof p, "%s/emptydir", outside);
	mkdir(p, 0755);
	out_snap = snapshot(outside);
	ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (ino < 0)
		return -1;
	inotify_add_watch(ino, outside, IN_ALL_EVENTS);
	snprintf(p, sizeof p, "%s/sub", outside);
	inotify_add_watch(ino, p, IN_ALL_EVENTS);
	snprintf(p, sizeof p, "%s/emptydir", outside);
	inotify_add_watch(ino, p, IN_ALL_EVENTS);
	drain_events();
	return 0;
}

static inline int fs_teardown(void **state)
{
	(void)state;
	int bad = 0;
	if (srv.pid > 0 && !it_alive(&srv)) {
		fprintf(stderr, "the server died during the suite\n");
		bad = 1;
	}
	if (srv.pid > 0)
		it_stop(&srv, SIGTERM);
	bad |= log_clean(srv.log);
	it_cleanup(&srv);
	if (*s2.dir) {
		it_cleanup(&s2);
		*s2.dir = '\0';
	}
	if (ino >= 0)
		close(ino);
	if (*outside)
		rm_rf(outside);
	free(out_snap);
	it_free_all(fs_toks, IT_NTOKS(fs_toks));
	return bad ? -1 : 0;
}
