/* Issue 26, breach 1: what the server binds from a root image is the
 * image's own, never a host path an image's symlink names. An image whose
 * etc (or etc/alternatives, or a /lib* beside /usr) is a symlink to a host
 * directory, or into the publishing tenant's workspace, is refused at
 * import and, when it is on disk already (imported before the check),
 * refused at each command with an error the tenant sees; the host
 * directory's marker never shows. And any view of the host tree a
 * sandbox might get shows no other tenant's files: workspaces are 0700,
 * the tenant uid's, tightened at start for older ones.
 *
 * The image is a tiny one made here from the host's dash and its
 * libraries (no Debian archive needed). Needs root (images are root's)
 * and bwrap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

static struct it_server srv;
static char *tok, *tok_globex;
static const struct it_tok toks[] = {{&tok, "acme", NULL}, {&tok_globex, "globex", NULL}};
static char work[128]; /* scratch directory of this run, outside every workspace */
static char marker[64];

/* `sandboxd ARGS`: exit status; its output, stderr included, in *out
 * (owned; optional). */
static int cli(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cli(char **out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *args = xvasprintf(fmt, ap), *o = xasprintf("%s/cli.out", work);
	va_end(ap);
	int st = it_sh_quiet("'%s' %s --data-dir '%s' > '%s' 2>&1", it_bin(), args, srv.dir, o);
	free(args);
	size_t len = 0;
	char *text = it_read_file(o, &len);
	free(o);
	if (out)
		*out = text ? text : xstrdup("");
	else
		free(text);
	return st;
}

/* A merged-/usr root filesystem at W/base: the host's dash as /bin/sh
 * with the libraries it needs, and an /etc/alternatives of its own. */
static int make_base(void)
{
	return it_sh("set -e; r='%s/base'; mkdir -p \"$r/usr/bin\" \"$r/etc/alternatives\"; "
		     "cp /bin/dash \"$r/usr/bin/sh\"; "
		     "for l in $(ldd /bin/dash | grep -o '/[^ ]*'); do "
		     "  d=\"$r/usr$(dirname \"$l\")\"; mkdir -p \"$d\" \"$r/usr/lib\"; cp -L \"$l\" \"$d/\"; "
		     "  cp -L \"$l\" \"$r/usr/lib/\"; done; "
		     "for d in lib lib64; do test -d \"$r/usr/$d\" && ln -s usr/$d \"$r/$d\"; done; "
		     "ln -s usr/bin \"$r/bin\"; echo image-own > \"$r/etc/alternatives/own\"; "
		     "tar -C \"$r\" -cf '%s/base.tar' .",
		     work, work);
}

/* W/NAME.tar: the base with REL replaced by a symlink to TARGET. */
static void make_linked(const char *name, const char *rel, const char *target)
{
	assert_int_equal(it_sh("set -e; rm -rf '%s/%s'; cp -a '%s/base' '%s/%s'; cd '%s/%s'; rm -rf '%s'; "
			       "ln -s '%s' '%s'; tar -cf '%s/%s.tar' .",
			       work, name, work, work, name, work, name, rel, target, rel, work, name),
			 0);
}

/* An image already on disk (as an import before the check left it): the
 * base image's copy with REL a symlink to TARGET. */
static void plant(const char *name, const char *rel, const char *target)
{
	assert_int_equal(it_sh("set -e; d='%s/images/%s'; rm -rf \"$d\"; cp -a '%s/images/base' \"$d\"; "
			       "rm -rf \"$d/rootfs/%s\"; ln -s '%s' \"$d/rootfs/%s\"",
			       srv.dir, name, srv.dir, rel, target, rel),
			 0);
}

static int setup(void **state)
{
	(void)state;
	snprintf(work, sizeof work, "/tmp/sandboxd-it-imglinks-%d", (int)getpid());
	snprintf(marker, sizeof marker, "host-marker-%d", (int)getpid());
	/* the host directory: readable by anyone, as most of a host is */
	if (it_sh("mkdir -p '%s/host/alternatives' && chmod 0755 '%s' '%s/host' '%s/host/alternatives' && "
		  "echo %s > '%s/host/alternatives/marker' && echo %s > '%s/host/ld.so.cache' && "
		  "chmod 0644 '%s/host/alternatives/marker'",
		  work, work, work, work, marker, work, marker, work, work) != 0 ||
	    make_base() != 0)
		return -1;
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), NULL};
	if (it_start_minted(&srv, extra, toks, IT_NTOKS(toks)) < 0)
		return -1;
	char *out = NULL;
	int rc = cli(&out, "image import base --rootfs '%s/base.tar'", work);
	if (rc != 0)
		fprintf(stderr, "import base: %s\n", out);
	free(out);
	return rc == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish_minted(&srv, toks, IT_NTOKS(toks));
	it_sh("rm -rf '%s'", work);
	return rc;
}

/* A command on image NAME (allowed to acme for it): status, body in *out. */
static long run_on(const char *name, const char *cmd, char **out)
{
	assert_int_equal(cli(NULL, "tenant set acme images=base,%s", name), 0);
	struct it_resp raw = {0};
	long st =
	    ex_post(&srv, tok, NULL, json_pack("{s:s, s:s}", "command", cmd, "image", name), NULL, &raw);
	*out = raw.body ? xstrndup(raw.body, raw.len) : xstrdup("");
	it_resp_free(&raw);
	return st;
}

#define PEEK                                                                                                 \
	"for f in /etc/alternatives/* /etc/ld.so.cache; do echo \"$f\"; test -f \"$f\" && read l < \"$f\" "  \
	"&& echo \"$l\"; done; echo end"

/* The base image runs, with its own /etc/alternatives: the checks below
 * refuse only what they must. */
static void test_base_runs(void **state)
{
	(void)state;
	char *out = NULL;
	assert_int_equal(run_on("base", PEEK, &out), 200);
	assert_non_null(strstr(out, "image-own"));
	assert_null(strstr(out, marker));
	free(out);
}

/* Import an image whose REL is a link to TARGET: refused whole, saying
 * what; had it been kept, what its commands show. */
static void import_refused(const char *name, const char *rel, const char *target)
{
	make_linked(name, rel, target);
	char *out = NULL;
	int rc = cli(&out, "image import %s --rootfs '%s/%s.tar'", name, work, name);
	if (rc == 0) {
		char *got = NULL;
		long st = run_on(name, PEEK, &got);
		fprintf(stderr, "%s imported; its command answered %ld: %s\n", name, st, got);
		assert_null(strstr(got, marker));
		free(got);
	}
	assert_int_not_equal(rc, 0);
	assert_non_null(strstr(out, "refused"));
	assert_non_null(strstr(out, rel));
	assert_non_null(strstr(out, "symlink"));
	free(out);
	struct stat st;
	char *p = xasprintf("%s/images/%s", srv.dir, name);
	assert_int_not_equal(lstat(p, &st), 0);
	free(p);
}

/* The same image already on disk: every command on it is refused with an
 * error naming the link; the marker never shows; /readyz says why. */
static void use_refused(const char *name, const char *rel, const char *target)
{
	plant(name, rel, target);
	char *out = NULL;
	long st = run_on(name, PEEK, &out);
	if (st == 200 || strstr(out, marker))
		fprintf(stderr, "%s (%s -> %s) answered %ld: %s\n", name, rel, target, st, out);
	assert_null(strstr(out, marker));
	assert_int_equal(st, 503);
	assert_non_null(strstr(out, "backend_unavailable"));
	assert_non_null(strstr(out, "symlink"));
	assert_non_null(strstr(out, rel));
	free(out);
	json_t *ready = NULL;
	it_get_json(&srv, NULL, "/readyz", &ready);
	json_t *img;
	size_t i;
	bool seen = false;
	json_array_foreach(json_object_get(ready, "images"), i, img) {
		if (strcmp(jstr(img, "name"), name) == 0) {
			seen = true;
			assert_string_equal(jstr(img, "status"), "unavailable");
			assert_non_null(strstr(jstr(img, "detail"), "symlink"));
		}
	}
	assert_true(seen);
	json_decref(ready);
	assert_int_equal(cli(NULL, "tenant set acme images=base"), 0);
	assert_int_equal(cli(NULL, "image rm %s", name), 0);
}

static void test_etc_link_to_host(void **state)
{
	(void)state;
	char *host = xasprintf("%s/host", work);
	import_refused("hostetc", "etc", host);
	use_refused("hostetc", "etc", host);
	free(host);
}

/* Each other path the server binds or follows from the image */
static void test_other_links_to_host(void **state)
{
	(void)state;
	char *alt = xasprintf("%s/host/alternatives", work), *cache = xasprintf("%s/host/ld.so.cache", work),
	     *host = xasprintf("%s/host", work);
	import_refused("hostalt", "etc/alternatives", alt);
	use_refused("hostalt", "etc/alternatives", alt);
	import_refused("hostcache", "etc/ld.so.cache", cache);
	use_refused("hostcache", "etc/ld.so.cache", cache);
	/* a /lib* beside /usr that is no link into it was skipped silently */
	import_refused("hostlib", "lib32", host);
	use_refused("hostlib", "lib32", host);
	free(alt);
	free(cache);
	free(host);
}

/* etc pointing into the publishing tenant's workspace, where the tenant
 * decides what it is: here a link of its own to the host directory */
static void test_etc_link_into_workspace(void **state)
{
	(void)state;
	char *cmd = xasprintf("ln -s '%s/host' pub && echo linked", work);
	json_t *r = ex_run(&srv, tok, cmd);
	assert_string_equal(ex_stdout_ok(r), "linked\n");
	json_decref(r);
	free(cmd);
	char seg[64];
	it_session_segment("default", seg, sizeof seg);
	char *pub = xasprintf("%s/tenants/acme/workspace/sessions/%s/pub", srv.dir, seg);
	import_refused("wsetc", "etc", pub);
	use_refused("wsetc", "etc", pub);
	free(pub);
}

/* uid of the owner of path, or -1 */
static long owner_of(const char *path, unsigned *mode)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return -1;
	*mode = st.st_mode & 07777;
	return (long)st.st_uid;
}

/* globex's files, as acme's uid sees them on the host: nothing */
static void expect_private(const char *ws, const char *file)
{
	unsigned mode = 0, amode = 0;
	long gx = owner_of(ws, &mode);
	char *aws = xasprintf("%s/tenants/acme/workspace", srv.dir);
	long acme = owner_of(aws, &amode);
	free(aws);
	assert_true(gx > 0 && acme > 0 && gx != acme);
	int rc = it_sh("setpriv --reuid=%ld --regid=%ld --clear-groups sh -c \"cat '%s' || ls '%s' || "
		       "find '%s' -name 'gx-*'\" 2>/dev/null | grep -q .",
		       acme, acme, file, ws, ws);
	if (rc == 0)
		fprintf(stderr, "acme's uid %ld reads %s (mode %o)\n", acme, file, mode);
	assert_int_not_equal(rc, 0);
	assert_int_equal(mode, 0700);
	assert_int_equal(amode, 0700);
}

static void test_workspaces_private(void **state)
{
	(void)state;
	static const char secret[] = "gx-secret-content";
	struct it_resp hr;
	assert_int_equal(it_http(&srv, "PUT", "/fs/write?path=/workspace/gx-secret.txt", tok_globex, NULL,
				 secret, strlen(secret), &hr),
			 0);
	assert_int_equal(hr.status, 200);
	it_resp_free(&hr);
	char *ws = xasprintf("%s/tenants/globex/workspace", srv.dir);
	char *file = xasprintf("%s/gx-secret.txt", ws); /* no session: the workspace's root */
	struct stat st;
	assert_int_equal(stat(file, &st), 0);
	expect_private(ws, file);
	/* and globex still works in it */
	json_t *r = ex_run(&srv, tok_globex, "cat /workspace/gx-secret.txt && echo more > gx-2 && cat gx-2");
	assert_string_equal(ex_stdout_ok(r), "gx-secret-contentmore\n");
	json_decref(r);
	/* a workspace of an older server (0755) is tightened at start */
	assert_int_equal(it_stop(&srv, SIGTERM), 0);
	assert_int_equal(chmod(ws, 0755), 0);
	const char *const extra[] = {"--set", it_uid_base_arg(NULL), NULL};
	assert_int_equal(it_restart(&srv, extra), 0);
	expect_private(ws, file);
	free(file);
	free(ws);
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "test_image_links: SKIPPED: images are root's; run as root\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_base_runs),		cmocka_unit_test(test_etc_link_to_host),
	    cmocka_unit_test(test_other_links_to_host), cmocka_unit_test(test_etc_link_into_workspace),
	    cmocka_unit_test(test_workspaces_private),
	};
	return cmocka_run_group_tests_name("image_links", tests, setup, teardown);
}
