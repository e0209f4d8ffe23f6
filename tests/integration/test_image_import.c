/* Image imports (sandbox/rootimg_import.c, rootimg_oci.c) from outside, through
 * `sandboxd image import`: bounds on what an archive may put on the data
 * disk, hard links kept, whiteouts confined to the image being built, and
 * OCI blobs that are not regular files of their recorded size refused
 * promptly. The images are made on the spot from the host's own shell and
 * coreutils (with the libraries ldd names), so no network is needed. Needs
 * root (images are root's). */
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
static char *tok;
static const struct it_tok toks[] = {{&tok, "acme", NULL}};
static char work[256]; /* scratch directory of this run */

/* The generator of every archive and layout the tests import. */
static const char gen_py[] =
    "import hashlib, io, json, os, subprocess, sys, tarfile\n"
    "work, victim = sys.argv[1], sys.argv[2]\n"
    "def add(t, name, data=b'', mode=0o644, kind=tarfile.REGTYPE, link=''):\n"
    "    i = tarfile.TarInfo(name); i.type = kind; i.mode = mode; i.linkname = link\n"
    "    i.size = len(data) if kind == tarfile.REGTYPE else 0\n"
    "    t.addfile(i, io.BytesIO(data) if kind == tarfile.REGTYPE else None)\n"
    "def dirs(t, names):\n"
    "    for d in names: add(t, d, mode=0o755, kind=tarfile.DIRTYPE)\n"
    "def base(t):\n"
    "    files = {}\n"
    "    for b in ['/bin/sh', '/usr/bin/cat', '/usr/bin/stat', '/usr/bin/ls']:\n"
    "        files['bin/' + os.path.basename(b)] = b\n"
    "        out = subprocess.run(['ldd', b], capture_output=True, text=True).stdout\n"
    "        for w in out.split():\n"
    "            if w.startswith('/'): files[w.lstrip('/')] = w\n"
    "    made = set()\n"
    "    dirs(t, ['usr', 'usr/bin', 'etc']); made |= {'usr', 'usr/bin', 'etc'}\n"
    "    for name in sorted(files):\n"
    "        parts = name.split('/')\n"
    "        for k in range(1, len(parts)):\n"
    "            d = '/'.join(parts[:k])\n"
    "            if d not in made: dirs(t, [d]); made.add(d)\n"
    "        with open(files[name], 'rb') as f: add(t, name, f.read(), 0o755)\n"
    "with tarfile.open(work + '/hardlink.tar', 'w') as t:\n"
    "    base(t); dirs(t, ['usr/lib', 'usr/lib/py'])\n"
    "    add(t, 'usr/bin/python3', b'the interpreter\\n', 0o755)\n"
    "    add(t, 'usr/bin/python3.11', kind=tarfile.LNKTYPE, link='usr/bin/python3')\n"
    "    add(t, './usr/lib/py/alias', kind=tarfile.LNKTYPE, link='./usr/bin/python3')\n"
    "    add(t, 'usr/made/here/py', kind=tarfile.LNKTYPE, link='usr/bin/python3')\n"
    "def hostile(name, entries):\n"
    "    with tarfile.open(work + '/' + name + '.tar', 'w') as t:\n"
    "        dirs(t, ['usr', 'usr/bin']); add(t, 'usr/bin/real', b'x')\n"
    "        add(t, 'sl', kind=tarfile.SYMTYPE, link='usr/bin'); add(t, 'out', kind=tarfile.SYMTYPE, "
    "link=victim)\n"
    "        for e in entries: add(t, e[0], kind=tarfile.LNKTYPE, link=e[1])\n"
    "hostile('hl-via-symlink', [('x', 'sl/real')])\n"
    "hostile('hl-via-outside', [('x', 'out/secret')])\n"
    "hostile('hl-in-symlinked-dir', [('sl/x', 'usr/bin/real')])\n"
    "hostile('hl-to-dir', [('x', 'usr')])\n"
    "hostile('hl-to-root', [('x', '.')])\n"
    "hostile('hl-to-nothing', [('x', 'usr/bin/nothing')])\n"
    "class Zeros(io.RawIOBase):\n"
    "    def __init__(self, n): self.n = n\n"
    "    def readable(self): return True\n"
    "    def readinto(self, b):\n"
    "        k = min(len(b), self.n); b[:k] = bytes(k); self.n -= k; return k\n"
    "with tarfile.open(work + '/bomb.tar.gz', 'w:gz') as t:\n"
    "    dirs(t, ['usr']); i = tarfile.TarInfo('usr/zeros'); i.size = 200 << 20\n"
    "    t.addfile(i, io.BufferedReader(Zeros(i.size)))\n"
    "with tarfile.open(work + '/many.tar', 'w') as t:\n"
    "    dirs(t, ['usr'])\n"
    "    for k in range(3000): add(t, 'usr/f%d' % k)\n"
    "def blob(d, data):\n"
    "    s = hashlib.sha256(data).hexdigest()\n"
    "    with open(d + '/blobs/sha256/' + s, 'wb') as f: f.write(data)\n"
    "    return {'digest': 'sha256:' + s, 'size': len(data)}\n"
    "def tarbytes(entries):\n"
    "    b = io.BytesIO()\n"
    "    with tarfile.open(fileobj=b, mode='w') as t:\n"
    "        for e in entries: e(t)\n"
    "    return b.getvalue()\n"
    "arch = subprocess.run(['dpkg', '--print-architecture'], capture_output=True, text=True).stdout.strip()\n"
    "def oci(name, layers, fix=None):\n"
    "    d = work + '/' + name; os.makedirs(d + '/blobs/sha256')\n"
    "    ls = [dict(blob(d, tarbytes(l)), mediaType='application/vnd.oci.image.layer.v1.tar') for l in "
    "layers]\n"
    "    if fix: fix(d, ls)\n"
    "    c = dict(blob(d, b'{\"architecture\":\"%s\",\"os\":\"linux\"}' % arch.encode()),\n"
    "             mediaType='application/vnd.oci.image.config.v1+json')\n"
    "    m = dict(blob(d, json.dumps({'schemaVersion': 2, 'config': c, 'layers': ls}).encode()),\n"
    "             mediaType='application/vnd.oci.image.manifest.v1+json',\n"
    "             platform={'os': 'linux', 'architecture': arch})\n"
    "    with open(d + '/index.json', 'w') as f: json.dump({'schemaVersion': 2, 'manifests': [m]}, f)\n"
    "    with open(d + '/oci-layout', 'w') as f: f.write('{\"imageLayoutVersion\":\"1.0.0\"}')\n"
    "lower = [lambda t: dirs(t, ['usr', 'sub', 'other']), lambda t: add(t, 'keep', b'k'),\n"
    "         lambda t: add(t, 'sub/x', b'x'), lambda t: add(t, 'sub/y', b'y'),\n"
    "         lambda t: add(t, 'other/z', b'z'), lambda t: add(t, 'out', kind=tarfile.SYMTYPE, "
    "link=victim)]\n"
    "def wh(*names): return [lambda t, n=n: add(t, n) for n in names]\n"
    "oci('wh-top-dotdot', [lower, wh('.wh...')])\n"
    "oci('wh-sub-dotdot', [lower, wh('sub/.wh...')])\n"
    "oci('wh-sub-dot', [lower, wh('sub/.wh..')])\n"
    "oci('wh-top-dot', [lower, wh('.wh..')])\n"
    "oci('wh-via-symlink', [lower, wh('out/.wh.secret')])\n"
    "oci('wh-opq-via-symlink', [lower, wh('out/.wh..wh..opq')])\n"
    "oci('wh-ok', [lower, wh('sub/.wh.x', 'other/.wh..wh..opq', '.wh.missing')])\n"
    "def symlink_zero(d, ls):\n"
    "    p = d + '/blobs/sha256/' + ls[0]['digest'][7:]; os.unlink(p); os.symlink('/dev/zero', p)\n"
    "def fifo(d, ls):\n"
    "    p = d + '/blobs/sha256/' + ls[0]['digest'][7:]; os.unlink(p); os.mkfifo(p)\n"
    "def bigger(d, ls): ls[0]['size'] += 1\n"
    "def smaller(d, ls): ls[0]['size'] -= 1\n"
    "def nosize(d, ls): del ls[0]['size']\n"
    "oci('blob-zero', [lower], symlink_zero)\n"
    "oci('blob-fifo', [lower], fifo)\n"
    "oci('blob-size-bigger', [lower], bigger)\n"
    "oci('blob-size-smaller', [lower], smaller)\n"
    "oci('blob-no-size', [lower], nosize)\n"
    "oci('index-fifo', [lower]); os.unlink(work + '/index-fifo/index.json'); os.mkfifo(work + "
    "'/index-fifo/index.json')\n"
    "oci('index-zero', [lower]); os.unlink(work + '/index-zero/index.json'); os.symlink('/dev/zero', work + "
    "'/index-zero/index.json')\n";

static int setup(void **state)
{
	(void)state;
	snprintf(work, sizeof work, "/tmp/sandboxd-it-imgimport-%d", (int)getpid());
	if (it_sh("mkdir -p '%s/victim' && echo secret > '%s/victim/secret' && echo s > "
		  "'%s/victim/other'",
		  work, work, work) != 0)
		return -1;
	char *py = xasprintf("%s/gen.py", work);
	int rc = it_write_file(py, gen_py, sizeof gen_py - 1);
	if (rc == 0)
		rc = it_sh("python3 '%s' '%s' '%s/victim'", py, work, work);
	free(py);
	if (rc != 0)
		return -1;
	long uid_base;
	const char *const extra[] = {"--set", it_uid_base_arg(&uid_base), NULL};
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int teardown(void **state)
{
	(void)state;
	int rc = it_finish_minted(&srv, toks, IT_NTOKS(toks));
	it_sh("rm -rf '%s'", work);
	return rc;
}

/* `sandboxd image import NAME HOW WORK/FILE EXTRA --data-dir` within
 * 30 s: its exit status (137 when killed for running out of time), its
 * stdout and stderr into *out. */
static int import(char **out, const char *name, const char *how, const char *file, const char *extra)
{
	int st =
	    it_sh("timeout -s KILL 30 '%s' image import %s %s '%s/%s' %s --data-dir '%s' > '%s/out' 2>&1",
		  it_bin(), name, how, work, file, extra, srv.dir, work);
	char *p = xasprintf("%s/out", work);
	*out = it_read_file(p, NULL);
	free(p);
	if (!*out)
		*out = xstrdup("");
	return st;
}

/* Import expected to succeed. */
static void imported(const char *name, const char *how, const char *file)
{
	char *out = NULL;
	int rc = import(&out, name, how, file, "");
	if (rc != 0)
		fprintf(stderr, "%s: status %d: %s\n", name, rc, out);
	free(out);
	assert_int_equal(rc, 0);
}

/* Nothing of a refused import is left in the image store. */
static void assert_nothing_left(const char *name)
{
	char *p = xasprintf("%s/images/%s", srv.dir, name);
	struct stat st;
	assert_int_not_equal(lstat(p, &st), 0);
	free(p);
	assert_int_equal(it_sh("ls -A '%s/images' 2>/dev/null | grep -q '^\\.tmp-'", srv.dir), 1);
}

/* Import expected to fail with want in its message, promptly. */
static void refused(const char *name, const char *want, const char *how, const char *file, const char *extra)
{
	char *out = NULL;
	int rc = import(&out, name, how, file, extra);
	if (rc == 0 || rc == 137 || !strstr(out, want))
		fprintf(stderr, "%s: status %d, wanted \"%s\": %s\n", name, rc, want, out);
	assert_int_not_equal(rc, 0);
	assert_int_not_equal(rc, 137); /* killed by timeout: it hung */
	assert_non_null(strstr(out, want));
	free(out);
	assert_nothing_left(name);
}

/* The victim directory outside every image, as it was made. */
static void assert_victim_intact(void)
{
	assert_int_equal(
	    it_sh("test \"$(cat '%s/victim/secret' '%s/victim/other')\" = \"$(printf 'secret\\ns')\"", work,
		  work),
	    0);
}

struct refusal {
	const char *name, *want; /* the name is the file's in work */
};

/* Each layout of v refused with its reason; the victim untouched. */
static void refused_layouts(const struct refusal *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		refused(v[i].name, v[i].want, "--oci", v[i].name, "");
		assert_victim_intact();
	}
}

/* A 200 MiB file of zeros in a 200 KiB gzip, and 3000 files: each bound
 * refuses its import, with the key to raise in the message. */
static void test_bounds(void **state)
{
	(void)state;
	/* the defaults: 200 MiB out of 200 KiB is far beyond the ratio */
	refused("bomb", "image-import-max-ratio=100", "--rootfs", "bomb.tar.gz", "");
	refused("bomb-bytes", "image-import-max-bytes=8388608", "--rootfs", "bomb.tar.gz",
		"--set image-import-max-ratio=0 --set image-import-max-bytes=8388608");
	refused("bomb-reserve", "store-reserve-bytes", "--rootfs", "bomb.tar.gz",
		"--set image-import-max-ratio=0 --set store-reserve-bytes=4611686018427387904");
	refused("many", "image-import-max-entries=1000", "--rootfs", "many.tar",
		"--set image-import-max-entries=1000");
	/* within the bounds, the same archive imports */
	imported("many", "--rootfs", "many.tar");
	assert_int_equal(it_sh("'%s' image rm many --data-dir '%s' >/dev/null", it_bin(), srv.dir), 0);
}

/* Hard links are made, not dropped: four names (one in directories the
 * archive does not list), one inode, in a command on the image; links
 * through a symlink, to a directory or to nothing are refused. */
static void test_hard_links(void **state)
{
	(void)state;
	imported("linked", "--rootfs", "hardlink.tar");
	assert_int_equal(
	    it_sh("'%s' tenant set acme image=linked --data-dir '%s' >/dev/null", it_bin(), srv.dir), 0);
	json_t *r = ex_run(&srv, tok,
			   "cd /usr && set -- $(stat -c '%i %h' bin/python3 bin/python3.11 lib/py/alias "
			   "made/here/py) && [ $1 = $3 ] && [ $1 = $5 ] && [ $1 = $7 ] && "
			   "echo one inode, links $2 $4 $6 $8; cat bin/python3.11 lib/py/alias");
	assert_string_equal(ex_stdout_ok(r), "one inode, links 4 4 4 4\nthe interpreter\nthe interpreter\n");
	json_decref(r);
	assert_int_equal(
	    it_sh("'%s' tenant set acme image=none --data-dir '%s' >/dev/null", it_bin(), srv.dir), 0);
	static const char *const bad[] = {"hl-via-symlink.tar",	     "hl-via-outside.tar",
					  "hl-in-symlinked-dir.tar", "hl-to-dir.tar",
					  "hl-to-root.tar",	     "hl-to-nothing.tar"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		refused("hostile", "refused", "--rootfs", bad[i], "");
		assert_victim_intact();
	}
	char *secret = xasprintf("%s/victim/secret", work);
	struct stat st;
	assert_int_equal(stat(secret, &st), 0);
	assert_int_equal(st.st_nlink, 1);
	free(secret);
}

/* Whiteouts naming "." or "..", or reached through a symlink, are refused
 * and remove nothing, inside the image or out; ordinary ones work. Before,
 * the first four reached the whiteout's directory's parent (at the top:
 * the staging directory around the image) and the import failed only by
 * accident, on what was gone. */
static void test_whiteouts(void **state)
{
	(void)state;
	static const struct refusal bad[] = {
	    {"wh-top-dotdot", "names no file of its directory"},
	    {"wh-sub-dotdot", "names no file of its directory"},
	    {"wh-sub-dot", "names no file of its directory"},
	    {"wh-top-dot", "names no file of its directory"},
	    {"wh-via-symlink", "whiteout out/.wh.secret refused: a symlink is on the way"},
	    {"wh-opq-via-symlink", "whiteout out/.wh..wh..opq refused: a symlink is on the way"},
	};
	refused_layouts(bad, sizeof bad / sizeof bad[0]);
	imported("wh-ok", "--oci", "wh-ok");
	assert_int_equal(
	    it_sh("cd '%s/images/wh-ok/rootfs' && test -e keep && test ! -e sub/x && test -e "
		  "sub/y && test -d other && test ! -e other/z && test -L out && test ! -e .wh.missing",
		  srv.dir),
	    0);
	assert_int_equal(it_sh("'%s' image rm wh-ok --data-dir '%s' >/dev/null", it_bin(), srv.dir), 0);
	assert_victim_intact();
}

/* A blob or index.json that is a link to /dev/zero or a FIFO, or whose
 * size is not the one recorded, is refused at once (not hashed forever,
 * not waited on). */
static void test_blobs(void **state)
{
	(void)state;
	static const struct refusal bad[] = {
	    {"blob-zero", "not a regular file"},  {"blob-fifo", "not a regular file"},
	    {"blob-size-bigger", "size 10241"},	  {"blob-size-smaller", "size 10239"},
	    {"blob-no-size", "has no size"},	  {"index-fifo", "not a regular file"},
	    {"index-zero", "not a regular file"},
	};
	refused_layouts(bad, sizeof bad / sizeof bad[0]);
	/* and a rootfs tarball that is a FIFO or a device likewise */
	assert_int_equal(it_sh("mkfifo '%s/fifo.tar' && ln -s /dev/zero '%s/zero.tar'", work, work), 0);
	refused("fifo", "not a regular file", "--rootfs", "fifo.tar", "");
	refused("zero", "not a regular file", "--rootfs", "zero.tar", "");
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "test_image_import: SKIPPED: images are root's; run as root\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bounds),
	    cmocka_unit_test(test_hard_links),
	    cmocka_unit_test(test_whiteouts),
	    cmocka_unit_test(test_blobs),
	};
	return cmocka_run_group_tests_name("image_import", tests, setup, teardown);
}
