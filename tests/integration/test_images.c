/* Root images (sandbox/rootimg.h) for real: an image built with mmdebstrap
 * from the host's apt sources (Debian's "essential" set plus `hello`, which
 * the host does not have), imported from a root filesystem tarball, run
 * through the bwrap backend with the isolation checks of test_isolation.c,
 * results compared with the host's bwrap, the selection rules, OCI layouts
 * with whiteouts, hostile tarballs refused, and removal refused while in
 * use.
 *
 * The built image is cached as a tarball under
 * /var/cache/sandboxd-test-images (or $SANDBOXD_TEST_IMAGE_CACHE), keyed
 * by the package set, the host's release and mmdebstrap's version: the
 * first run on a machine builds (about a minute), later runs import the
 * tarball (seconds). Needs root (images are root's) and mmdebstrap; when
 * the Debian archive is unreachable and nothing is cached, it skips (77)
 * and says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_exec.h"

#define PACKAGES "hello"
#define VARIANT "essential"

static struct it_server srv;
static char *tok, *tok_globex;
static const struct it_tok toks[] = {{&tok, "acme", NULL}, {&tok_globex, "globex", NULL}};
static long uid_base;
static char cache_tar[512];
static char work[256]; /* scratch directory of this run */

/* The first line a shell command prints (static buffer). */
static const char *sh_line(const char *cmd)
{
	static char line[256];
	line[0] = '\0';
	FILE *f = popen(cmd, "r");
	if (f) {
		if (!fgets(line, sizeof line, f))
			line[0] = '\0';
		pclose(f);
	}
	line[strcspn(line, "\n")] = '\0';
	return line;
}

/* `sandboxd ARGS --data-dir DIR`: exit status; output to *out (optional). */
static int cli(const char *dir, char **out, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int cli(const char *dir, char **out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *args = NULL;
	if (vasprintf(&args, fmt, ap) < 0)
		abort();
	va_end(ap);
	char *cmd = xasprintf("%s %s --data-dir '%s' > '%s/cli.out' 2>&1", it_bin(), args, dir, work);
	int st = system(cmd);
	free(cmd);
	free(args);
	if (out) {
		char *p = xasprintf("%s/cli.out", work);
		FILE *f = fopen(p, "r");
		char buf[8192];
		size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
		buf[n] = '\0';
		if (f)
			fclose(f);
		free(p);
		*out = xstrdup(buf);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Build the image once per machine into the cache: 0, 77 (skip), 1. */
static int prepare_cache(void)
{
	const char *cache = getenv("SANDBOXD_TEST_IMAGE_CACHE");
	cache = cache && *cache ? cache : "/var/cache/sandboxd-test-images";
	char ver[128];
	snprintf(ver, sizeof ver, "%s",
		 sh_line("mmdebstrap --version 2>/dev/null | tr -c 'a-zA-Z0-9.\\n' _"));
	char rel[64];
	snprintf(rel, sizeof rel, "%s", sh_line(". /etc/os-release; echo $VERSION_CODENAME"));
	snprintf(cache_tar, sizeof cache_tar, "%s/%s-%s-%s-%s.tar", cache, rel, VARIANT, PACKAGES, ver);
	struct stat st;
	if (stat(cache_tar, &st) == 0)
		return 0;
	/* Reachable? The release file of the first archive the host's own apt
	 * sources name, which mmdebstrap will use (its package lists need not
	 * be on the host). */
	char url[512];
	snprintf(
	    url, sizeof url, "%s/dists/%s/Release",
	    sh_line(
		"cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list "
		"/etc/apt/sources.list.d/*.sources 2>/dev/null | awk '$1 == \"URIs:\" { print $2; exit } "
		"$1 == \"deb\" { for (i = 2; i <= NF; i++) if (index($i, \"://\")) { print $i; exit } }'"),
	    rel);
	if (url[0] == '/' || it_sh("curl -sfI --max-time 20 '%s' >/dev/null", url) != 0) {
		fprintf(stderr,
			"test_images: SKIPPED: the Debian archive is unreachable (%s) and no image is "
			"cached at %s\n",
			url, cache_tar);
		return 77;
	}
	char *dir = xasprintf("%s/build-data", work);
	char *out = NULL;
	int rc = cli(dir, &out, "image build base --packages " PACKAGES " --variant " VARIANT);
	if (rc != 0) {
		fprintf(stderr, "test_images: image build failed (%d):\n%s\n", rc, out);
		free(out);
		free(dir);
		return 1;
	}
	free(out);
	rc = it_sh("mkdir -p '%s' && tar -C '%s/images/base/rootfs' -cf '%s.tmp' . && mv '%s.tmp' '%s'",
		   cache, dir, cache_tar, cache_tar, cache_tar);
	it_sh("rm -rf '%s'", dir);
	free(dir);
	return rc == 0 ? 0 : 1;
}

static int setup(void **state)
{
	(void)state;
	const char *const extra[] = {"--set", it_uid_base_arg(&uid_base), NULL};
	if (it_start_minted(&srv, extra, toks, IT_NTOKS(toks)) < 0)
		return -1;
	char *out = NULL;
	int rc = cli(srv.dir, &out, "image import hello --rootfs '%s'", cache_tar);
	if (rc != 0)
		fprintf(stderr, "import: %s\n", out);
	free(out);
	if (rc == 0)
		rc = cli(srv.dir, NULL, "tenant set acme image=hello");
	return rc == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* POST /exec with body (stolen): status, *out the body. */
static long post(const char *t, json_t *body, json_t **out)
{
	return ex_post(&srv, t, NULL, body, out, NULL);
}

static void test_package_in_image_not_on_host(void **state)
{
	(void)state;
	json_t *r = ex_run(&srv, tok, "hello; command -v hello");
	assert_string_equal(ex_stdout_ok(r), "Hello, world!\n/usr/bin/hello\n");
	json_decref(r);
	/* globex runs on the host's /usr, which has no hello */
	struct stat st;
	assert_int_not_equal(stat("/usr/bin/hello", &st), 0);
	r = ex_run(&srv, tok_globex, "command -v hello || echo absent");
	assert_string_equal(ex_stdout_ok(r), "absent\n");
	json_decref(r);
	/* and the image's system is not the host's: dpkg's database says so */
	r = ex_run(&srv, tok, "test -e /usr/bin/python3 && echo python || echo no-python");
	assert_string_equal(ex_stdout_ok(r), "no-python\n");
	json_decref(r);
}

static void test_isolation_on_image(void **state)
{
	(void)state;
	json_t *r = ex_run(&srv, tok,
			   "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; "
			   "echo made > img-owner-probe");
	const char *out = ex_stdout_ok(r);
	assert_int_equal(strtol(out, NULL, 10), uid_base);
	static const char *const want[] = {"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000",
					   "NoNewPrivs:\t1", "Seccomp:\t2"};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		assert_non_null(strstr(out, want[i]));
	json_decref(r);
	/* the workspace is the tenant's, writable, its files the tenant uid's on the host */
	char seg[64];
	it_session_segment("default", seg, sizeof seg);
	char *p = xasprintf("%s/tenants/acme/workspace/sessions/%s/img-owner-probe", srv.dir, seg);
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_uid, (uid_t)uid_base);
	free(p);
	/* no namespaces, no writes to the system or the root, minimal /etc */
	r = ex_run(&srv, tok,
		   "unshare -Ur true 2>/dev/null && echo unshared; touch /usr/x 2>&1; mkdir /newdir 2>&1; "
		   "echo x >> /etc/passwd 2>&1; ls /etc | tr '\\n' ' '; echo; test -e /etc/debian_version && "
		   "echo host-etc; echo end");
	out = ex_stdout_ok(r);
	assert_null(strstr(out, "unshared"));
	assert_non_null(strstr(out, "touch: cannot touch '/usr/x': Read-only file system"));
	assert_non_null(strstr(out, "/newdir"));
	assert_null(strstr(out, "Permission denied")); /* read-only, not merely not ours */
	assert_null(strstr(out, "host-etc"));
	assert_null(strstr(out, "shadow"));
	assert_non_null(strstr(out, "end"));
	json_decref(r);
	/* the image's files on the host are untouched */
	p = xasprintf("%s/images/hello/rootfs/usr/x", srv.dir);
	assert_int_not_equal(stat(p, &st), 0);
	free(p);
	/* no network: only lo, and the server's port is not the server */
	char *cmd = xasprintf("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
			      "bash -c 'echo > /dev/tcp/127.0.0.1/%d' 2>/dev/null && echo connected; true",
			      srv.port);
	r = ex_run(&srv, tok, cmd);
	free(cmd);
	assert_string_equal(ex_stdout_ok(r), "lo\n");
	json_decref(r);
	/* private /proc: the server is not there; private bounded /tmp */
	cmd = xasprintf("ls -d /proc/[0-9]* | wc -l; test -e /proc/%d && echo server-visible; "
			"echo one > /tmp/mine; ls -A /tmp; cat /proc/mounts | grep -c ' /tmp tmpfs'",
			(int)srv.pid);
	r = ex_run(&srv, tok, cmd);
	free(cmd);
	out = ex_stdout_ok(r);
	long npids = strtol(out, NULL, 10);
	assert_true(npids >= 1 && npids <= 5);
	assert_null(strstr(out, "server-visible"));
	assert_non_null(strstr(out, "\nmine\n1\n"));
	json_decref(r);
	/* the data directory (and so the image store) is not reachable */
	cmd = xasprintf("ls %s/images 2>&1 || echo hidden", srv.dir);
	r = ex_run(&srv, tok, cmd);
	free(cmd);
	assert_non_null(strstr(jstr(r, "stdout"), "hidden"));
	json_decref(r);
}

/* stdout with the exec's own id (in a truncation marker) as "ID". */
static void unid(json_t *res)
{
	const char *id = jstr(res, "id"), *out = jstr(res, "stdout");
	char *p = out && id ? strstr(out, id) : NULL;
	if (!p)
		return;
	char *s = xasprintf("%.*sID%s", (int)(p - out), out, p + strlen(id));
	json_object_set_new(res, "stdout", json_string(s));
	free(s);
}

/* The same request on the image (acme) and on the host (globex). */
static void same_result(json_t *req)
{
	json_t *a = NULL, *b = NULL;
	assert_int_equal(post(tok, json_deep_copy(req), &a), 200);
	assert_int_equal(post(tok_globex, req, &b), 200);
	unid(a);
	unid(b);
	static const char *const keys[] = {"exit_code", "stdout",    "stderr",	     "timed_out",
					   "cancelled", "truncated", "stdout_bytes", "stderr_bytes"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		json_t *x = json_object_get(a, keys[i]), *y = json_object_get(b, keys[i]);
		if (!json_equal(x, y)) {
			char *sa = json_dumps(a, 0), *sb = json_dumps(b, 0);
			fprintf(stderr, "%s differs:\nimage %s\nhost  %s\n", keys[i], sa, sb);
			free(sa);
			free(sb);
		}
		assert_true(json_equal(x, y));
	}
	json_decref(a);
	json_decref(b);
}

static void test_results_identical_to_host(void **state)
{
	(void)state;
	same_result(json_pack("{s:s}", "command", "echo hello from $(pwd | sed 's|/[^/]*$||')"));
	same_result(json_pack("{s:s}", "command", "printf 'a\\nb'; echo err >&2; exit 3"));
	same_result(json_pack("{s:s, s:{s:s}}", "command",
			      "echo \"$GREETING\" $HOME $USER; env | sort | "
			      "grep -v '^PWD=\\|^SHLVL=\\|^_='",
			      "env", "GREETING", "hi"));
	same_result(json_pack("{s:s}", "command", "kill -9 $$"));
	same_result(json_pack("{s:s, s:i}", "command", "echo start; sleep 30", "timeout_s", 1));
	same_result(json_pack("{s:s, s:i}", "command", "head -c 100000 /dev/zero | tr '\\0' x",
			      "max_output_bytes", 1000));
	/* what a command changed in the workspace is reported alike */
	same_result(json_pack("{s:s, s:b}", "command",
			      "mkdir -p tc && echo x > tc/a && echo y > tc-b && cat tc/a", "track_changes",
			      1));
}

static void test_selection(void **state)
{
	(void)state;
	json_t *b = NULL;
	/* globex may not name an image it is not allowed */
	assert_int_equal(post(tok_globex, json_pack("{s:s, s:s}", "command", "hello", "image", "hello"), &b),
			 403);
	assert_string_equal(jstr(json_object_get(b, "error"), "code"), "forbidden");
	json_decref(b);
	/* acme, whose image is hello, may not step out to the host */
	assert_int_equal(post(tok, json_pack("{s:s, s:s}", "command", "true", "image", "none"), &b), 403);
	json_decref(b);
	/* allowed: it runs there */
	/* the policy refuses what is not an image name */
	assert_int_not_equal(cli(srv.dir, NULL, "tenant set globex image=../etc"), 0);
	assert_int_not_equal(cli(srv.dir, NULL, "tenant set globex image=a,b"), 0);
	assert_int_not_equal(cli(srv.dir, NULL, "tenant set globex images=hello,,ghost"), 0);
	assert_int_equal(cli(srv.dir, NULL, "tenant set globex images=hello,ghost"), 0);
	assert_int_equal(post(tok_globex, json_pack("{s:s, s:s}", "command", "hello", "image", "hello"), &b),
			 200);
	assert_string_equal(jstr(b, "stdout"), "Hello, world!\n");
	json_decref(b);
	/* allowed but missing: 422 with what there is */
	assert_int_equal(post(tok_globex, json_pack("{s:s, s:s}", "command", "true", "image", "ghost"), &b),
			 422);
	json_t *err = json_object_get(b, "error");
	assert_string_equal(jstr(err, "code"), "unknown_image");
	json_t *avail = json_object_get(json_object_get(err, "details"), "available");
	assert_int_equal(json_array_size(avail), 1);
	assert_string_equal(json_string_value(json_array_get(avail, 0)), "hello");
	json_decref(b);
	/* a bad name is a bad request */
	assert_int_equal(post(tok_globex, json_pack("{s:s, s:s}", "command", "true", "image", "../etc"), &b),
			 400);
	json_decref(b);
	/* the idempotency key covers the image: same id, other image, 409 */
	assert_int_equal(post(tok_globex, json_pack("{s:s, s:s}", "command", "true", "id", "img-idem"), &b),
			 200);
	json_decref(b);
	assert_int_equal(
	    post(tok_globex,
		 json_pack("{s:s, s:s, s:s}", "command", "true", "id", "img-idem", "image", "hello"), &b),
	    409);
	json_decref(b);
	assert_int_equal(cli(srv.dir, NULL, "tenant set globex images=none"), 0);
}

/* A tiny OCI layout: two layers, the second with a whiteout and an opaque
 * directory, made with tar and sha256sum. */
static void make_oci(const char *dir)
{
	int rc = it_sh(
	    "set -e; d='%s'; rm -rf \"$d\" \"$d.src\"; mkdir -p \"$d/blobs/sha256\" \"$d.src/l1/etc\" "
	    "\"$d.src/l1/opt/keep\" \"$d.src/l1/opt/opq\" \"$d.src/l2/etc\" \"$d.src/l2/opt/opq\"; "
	    "echo old > \"$d.src/l1/etc/old.conf\"; echo kept > \"$d.src/l1/etc/kept.conf\"; "
	    "echo k > \"$d.src/l1/opt/keep/a\"; echo lower > \"$d.src/l1/opt/opq/lower\"; "
	    "touch \"$d.src/l2/etc/.wh.old.conf\" \"$d.src/l2/opt/opq/.wh..wh..opq\"; "
	    "echo upper > \"$d.src/l2/opt/opq/upper\"; chmod 4777 \"$d.src/l1/opt/keep/a\"; "
	    "blob() { s=$(sha256sum \"$1\" | cut -d' ' -f1); mv \"$1\" \"$d/blobs/sha256/$s\"; "
	    "echo \"$s $(stat -c %%s \"$d/blobs/sha256/$s\")\"; }; "
	    "tar -C \"$d.src/l1\" -czf \"$d/l1\" .; set -- $(blob \"$d/l1\"); L1=$1; S1=$2; "
	    "tar -C \"$d.src/l2\" -cf \"$d/l2\" .; set -- $(blob \"$d/l2\"); L2=$1; S2=$2; "
	    "echo '{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\"}}' > "
	    "\"$d/c\"; "
	    "set -- $(blob \"$d/c\"); C=$1; CS=$2; "
	    "printf '{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
	    "\"config\":{\"mediaType\":\"application/"
	    "vnd.oci.image.config.v1+json\",\"digest\":\"sha256:%%s\","
	    "\"size\":%%s},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\","
	    "\"digest\":\"sha256:%%s\",\"size\":%%s},{\"mediaType\":\"application/"
	    "vnd.oci.image.layer.v1.tar\","
	    "\"digest\":\"sha256:%%s\",\"size\":%%s}]}' $C $CS $L1 $S1 $L2 $S2 > \"$d/m\"; "
	    "set -- $(blob \"$d/m\"); "
	    "printf "
	    "'{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/"
	    "vnd.oci.image.manifest.v1+json\","
	    "\"digest\":\"sha256:%%s\",\"size\":%%s,\"platform\":{\"os\":\"linux\",\"architecture\":\"%%"
	    "s\"}}]}' "
	    "$1 $2 \"$(dpkg --print-architecture)\" > \"$d/index.json\"; "
	    "echo '{\"imageLayoutVersion\":\"1.0.0\"}' > \"$d/oci-layout\"; rm -rf \"$d.src\"",
	    dir);
	assert_int_equal(rc, 0);
}

static void test_import_oci(void **state)
{
	(void)state;
	char *layout = xasprintf("%s/oci", work);
	make_oci(layout);
	char *out = NULL;
	int rc = cli(srv.dir, &out, "image import layered --oci '%s'", layout);
	if (rc != 0)
		fprintf(stderr, "%s\n", out);
	free(out);
	assert_int_equal(rc, 0);
	char *root = xasprintf("%s/images/layered/rootfs", srv.dir);
	struct stat st;
	char *p = xasprintf("%s/etc/old.conf", root); /* whited out */
	assert_int_not_equal(lstat(p, &st), 0);
	free(p);
	p = xasprintf("%s/etc/kept.conf", root);
	assert_int_equal(lstat(p, &st), 0);
	free(p);
	p = xasprintf("%s/opt/opq/lower", root); /* under an opaque directory */
	assert_int_not_equal(lstat(p, &st), 0);
	free(p);
	p = xasprintf("%s/opt/opq/upper", root);
	assert_int_equal(lstat(p, &st), 0);
	free(p);
	p = xasprintf("%s/opt/opq/.wh..wh..opq", root); /* markers are not files */
	assert_int_not_equal(lstat(p, &st), 0);
	free(p);
	p = xasprintf("%s/opt/keep/a", root); /* root's, no set-id, no write for others */
	assert_int_equal(lstat(p, &st), 0);
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	free(p);
	/* a blob that does not match its digest is refused, whichever it is */
	for (int i = 1; i <= 4; i++) {
		assert_int_equal(it_sh("cd '%s/blobs/sha256' && f=$(ls | sed -n %dp) && cp $f $f.orig && "
				       "echo tampered >> $f",
				       layout, i),
				 0);
		assert_int_not_equal(cli(srv.dir, &out, "image import tampered --oci '%s'", layout), 0);
		assert_non_null(strstr(out, "does not match its digest"));
		free(out);
		assert_int_equal(
		    it_sh("cd '%s/blobs/sha256' && for o in *.orig; do mv $o ${o%%.orig}; done", layout), 0);
	}
	/* it has no /bin/sh: listed, and /readyz says it is not usable */
	json_t *ready = NULL;
	it_get_json(&srv, NULL, "/readyz", &ready);
	json_t *img;
	size_t i;
	bool seen = false;
	json_array_foreach(json_object_get(ready, "images"), i, img) {
		if (strcmp(jstr(img, "name"), "layered") == 0) {
			seen = true;
			assert_string_equal(jstr(img, "status"), "unavailable");
		}
		if (strcmp(jstr(img, "name"), "hello") == 0)
			assert_string_equal(jstr(img, "status"), "ok");
	}
	assert_true(seen);
	json_decref(ready);
	assert_int_equal(cli(srv.dir, NULL, "image rm layered"), 0);
	free(root);
	free(layout);
}

/* Each hostile tarball is refused whole: no image, nothing outside. */
static void test_import_hostile(void **state)
{
	(void)state;
	char *victim = xasprintf("%s/victim", work);
	assert_int_equal(it_sh("mkdir -p '%s'", victim), 0);
	static const char *const kinds[] = {"dotdot", "absolute", "symlink", "hardlink"};
	int rc = it_sh("python3 - '%s' '%s' <<'EOF'\n"
		       "import io, sys, tarfile\n"
		       "work, victim = sys.argv[1], sys.argv[2]\n"
		       "def f(t, name, data=b'x'):\n"
		       "    i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))\n"
		       "def l(t, name, target, kind=tarfile.SYMTYPE):\n"
		       "    i = tarfile.TarInfo(name); i.type = kind; i.linkname = target; t.addfile(i)\n"
		       "with tarfile.open(work + '/dotdot.tar', 'w') as t:\n"
		       "    f(t, 'usr/ok'); f(t, '../../../..' + victim + '/dotdot')\n"
		       "with tarfile.open(work + '/absolute.tar', 'w') as t:\n"
		       "    f(t, 'usr/ok'); f(t, victim + '/absolute')\n"
		       "with tarfile.open(work + '/symlink.tar', 'w') as t:\n"
		       "    l(t, 'escape', victim); f(t, 'escape/symlink')\n"
		       "with tarfile.open(work + '/hardlink.tar', 'w') as t:\n"
		       "    l(t, 'passwd', '/etc/passwd', tarfile.LNKTYPE)\n"
		       "EOF",
		       work, victim);
	assert_int_equal(rc, 0);
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		char *out = NULL;
		rc =
		    cli(srv.dir, &out, "image import evil-%s --rootfs '%s/%s.tar'", kinds[i], work, kinds[i]);
		if (rc == 0 || !strstr(out, "refused"))
			fprintf(stderr, "%s: %d %s\n", kinds[i], rc, out);
		assert_int_not_equal(rc, 0);
		assert_non_null(strstr(out, "refused"));
		free(out);
		char *p = xasprintf("%s/%s", victim, kinds[i]);
		struct stat st;
		assert_int_not_equal(lstat(p, &st), 0);
		free(p);
		p = xasprintf("%s/images/evil-%s", srv.dir, kinds[i]);
		assert_int_not_equal(lstat(p, &st), 0);
		free(p);
	}
	/* no staging directory left behind */
	assert_int_equal(it_sh("ls -A '%s/images' | grep -q '^\\.tmp-'", srv.dir), 1);
	free(victim);
}

static void test_rm_refused_while_in_use(void **state)
{
	(void)state;
	char *out = NULL;
	/* selected by a tenant */
	assert_int_not_equal(cli(srv.dir, &out, "image rm hello"), 0);
	assert_non_null(strstr(out, "in use by acme (selects)"));
	free(out);
	/* a command runs on it, though no tenant selects it any more */
	struct bg_req bg;
	bg_exec(&bg, &srv, tok, json_pack("{s:s, s:s}", "command", "sleep 30", "id", "img-busy"), NULL);
	json_t *v = ex_wait_state(&srv, tok, "img-busy", "running", 10000);
	assert_non_null(v);
	json_decref(v);
	assert_int_equal(cli(srv.dir, NULL, "tenant set acme image=none"), 0);
	assert_int_not_equal(cli(srv.dir, &out, "image rm hello"), 0);
	assert_non_null(strstr(out, "a command runs on it"));
	free(out);
	assert_int_equal(cli(srv.dir, &out, "image list"), 0);
	assert_non_null(strstr(out, "commands running"));
	free(out);
	struct it_resp cr;
	assert_int_equal(it_http(&srv, "POST", "/exec/img-busy/cancel", tok, NULL, NULL, 0, &cr), 0);
	assert_int_equal(cr.status, 202);
	it_resp_free(&cr);
	json_t *b = bg_join(&bg);
	assert_true(jtrue(b, "cancelled"));
	json_decref(b);
	it_resp_free(&bg.resp);
	/* the command has ended: removal goes through, and is gone for good */
	assert_int_equal(cli(srv.dir, &out, "image rm hello"), 0);
	free(out);
	struct stat st;
	char *p = xasprintf("%s/images/hello", srv.dir);
	assert_int_not_equal(lstat(p, &st), 0);
	free(p);
	assert_int_equal(cli(srv.dir, NULL, "tenant set acme image=hello"), 0);
	b = NULL;
	assert_int_equal(post(tok, json_pack("{s:s}", "command", "true"), &b), 503);
	assert_string_equal(jstr(json_object_get(b, "error"), "code"), "backend_unavailable");
	json_decref(b);
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "test_images: SKIPPED: images are root's; run as root\n");
		return 77;
	}
	if (it_sh("command -v mmdebstrap >/dev/null") != 0) {
		fprintf(stderr,
			"test_images: SKIPPED: mmdebstrap is not installed (scripts/deps installs it)\n");
		return 77;
	}
	snprintf(work, sizeof work, "/tmp/sandboxd-it-images-%d", (int)getpid());
	if (it_sh("mkdir -p '%s'", work) != 0)
		return 1;
	int rc = prepare_cache();
	if (rc == 0) {
		const struct CMUnitTest tests[] = {
		    cmocka_unit_test(test_package_in_image_not_on_host),
		    cmocka_unit_test(test_isolation_on_image),
		    cmocka_unit_test(test_results_identical_to_host),
		    cmocka_unit_test(test_selection),
		    cmocka_unit_test(test_import_oci),
		    cmocka_unit_test(test_import_hostile),
		    cmocka_unit_test(test_rm_refused_while_in_use),
		};
		rc = cmocka_run_group_tests_name("images", tests, setup, teardown);
	}
	it_sh("rm -rf '%s'", work);
	return rc;
}
