/* Importing OCI image layouts into root images (sbx_rootimg_import_oci):
 * index.json, the manifest for this host's architecture, its
 * configuration and layers, every blob a regular file beneath the layout
 * of its recorded size and sha256 digest; the layers are then extracted
 * in order by rootimg_import.c (rootimg_import_int.h), whiteouts honoured. */
#include "sandbox/rootimg.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "sandbox/rootimg_impl.h"
#include "sandbox/rootimg_import_int.h"

/* Beneath the layout, no symlink on the way: a blob store whose files
 * or directories are links could have an import read a device or a file
 * of the host's. */
#define LAYOUT_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
/* JSON documents of a layout (index, manifests, configurations) are
 * small: registries refuse manifests over 4 MiB. */
#define JSON_MAX_BYTES (4u << 20)

/* A digest "sha256:<64 hex>" (the only algorithm accepted: the digest
 * becomes a path, so its form is checked strictly). */
static bool digest_ok(const char *digest)
{
	if (!digest || strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 7 + 64)
		return false;
	for (const char *p = digest + 7; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

/* The first size bytes of fd hash to the digest (no more is read). */
static int blob_hash(int fd, uint64_t size, const char *digest, char *err, size_t errsz)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	static unsigned char buf[1 << 16];
	ssize_t n = 1;
	for (uint64_t left = size; left > 0 && n > 0; left -= (uint64_t)n) {
		n = read(fd, buf, left < sizeof buf ? (size_t)left : sizeof buf);
		if (n > 0)
			EVP_DigestUpdate(c, buf, (size_t)n);
		else if (n < 0 && errno == EINTR)
			n = 0;
		else
			n = -1; /* shorter than it was a moment ago: refused below */
	}
	unsigned char md[32];
	unsigned int len = 0;
	EVP_DigestFinal_ex(c, md, &len);
	EVP_MD_CTX_free(c);
	char hex[65];
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	if (n < 0 || strcmp(hex, digest + 7) != 0 || lseek(fd, 0, SEEK_SET) < 0) {
		snprintf(err, errsz, "blob %s does not match its digest", digest);
		return -EIO;
	}
	return 0;
}

/* The blob a descriptor ({"digest", "size"}) names: a regular file
 * beneath the layout of exactly the recorded size, hashing to the digest.
 * Its fd at offset 0, or -errno with err. */
static int blob_open(int lfd, json_t *desc, uint64_t *size, char *err, size_t errsz)
{
	const char *digest = json_string_value(json_object_get(desc, "digest"));
	json_t *js = json_object_get(desc, "size");
	if (!digest_ok(digest)) {
		snprintf(err, errsz, "unsupported digest %s (sha256 only)", digest ? digest : "(none)");
		return -EINVAL;
	}
	if (!json_is_integer(js) || json_integer_value(js) < 0) {
		snprintf(err, errsz, "the descriptor of blob %s has no size: refused", digest);
		return -EINVAL;
	}
	char rel[96], what[96];
	snprintf(rel, sizeof rel, "blobs/sha256/%s", digest + 7);
	snprintf(what, sizeof what, "blob %s", digest);
	int fd = rootimg_open_regular(lfd, rel, LAYOUT_RESOLVE, what, size, err, errsz);
	if (fd < 0)
		return fd == -ENOENT ? -EIO : fd;
	if (*size != (uint64_t)json_integer_value(js)) {
		/* the descriptor names exactly size bytes hashing to digest */
		snprintf(err, errsz,
			 "blob %s does not match its digest and size: it is %" PRIu64
			 " bytes, its descriptor says size %" JSON_INTEGER_FORMAT ": refused",
			 digest, *size, json_integer_value(js));
		close(fd);
		return -EINVAL;
	}
	int rc = blob_hash(fd, *size, digest, err, errsz);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* The JSON document in fd (size bytes, at most JSON_MAX_BYTES); closes fd. */
static json_t *read_json(int fd, uint64_t size, const char *what, char *err, size_t errsz)
{
	json_t *j = NULL;
	char *buf = size <= JSON_MAX_BYTES ? xmalloc(size + 1) : NULL;
	size_t got = 0;
	ssize_t n = 1;
	while (buf && got < size && n > 0)
		if ((n = pread(fd, buf + got, size - got, (off_t)got)) > 0)
			got += (size_t)n;
		else if (n < 0 && errno == EINTR)
			n = 1;
	json_error_t je;
	if (!buf)
		snprintf(err, errsz, "%s: larger than %u bytes: refused", what, JSON_MAX_BYTES);
	else if (got < size)
		snprintf(err, errsz, "%s: cannot read it", what);
	else if (!(j = json_loadb(buf, size, 0, &je)))
		snprintf(err, errsz, "%s: %s", what, je.text);
	free(buf);
	close(fd);
	return j;
}

static json_t *load_blob_json(int lfd, json_t *desc, char *err, size_t errsz)
{
	uint64_t size = 0;
	int fd = blob_open(lfd, desc, &size, err, errsz);
	return fd < 0 ? NULL
		      : read_json(fd, size, json_string_value(json_object_get(desc, "digest")), err, errsz);
}

static const char *host_arch(void)
{
	struct utsname u;
	if (uname(&u) == 0 && strcmp(u.machine, "aarch64") == 0)
		return "arm64";
	return "amd64";
}

/* Of an index's manifests: the one for linux/<host arch>, else the only
 * one. Nested indexes are followed (depth bounded). Returns the image
 * manifest (new reference) or NULL with err. */
static json_t *pick_manifest(int lfd, json_t *index, int depth, char *err, size_t errsz)
{
	json_t *list = json_object_get(index, "manifests"), *pick = NULL, *m;
	size_t i;
	json_array_foreach(list, i, m) {
		json_t *plat = json_object_get(m, "platform");
		const char *os = json_string_value(json_object_get(plat, "os"));
		const char *arch = json_string_value(json_object_get(plat, "architecture"));
		if (!plat || (os && arch && strcmp(os, "linux") == 0 && strcmp(arch, host_arch()) == 0)) {
			pick = m;
			if (plat)
				break;
		}
	}
	if (!pick && json_array_size(list) == 1)
		pick = json_array_get(list, 0);
	if (!pick) {
		snprintf(err, errsz, "index.json names no manifest for linux/%s", host_arch());
		return NULL;
	}
	json_t *doc = load_blob_json(lfd, pick, err, errsz);
	if (doc && json_object_get(doc, "manifests")) {
		json_t *inner = depth < 2 ? pick_manifest(lfd, doc, depth + 1, err, errsz) : NULL;
		if (depth >= 2)
			snprintf(err, errsz, "image indexes nested too deeply");
		json_decref(doc);
		return inner;
	}
	if (doc && !json_is_array(json_object_get(doc, "layers"))) {
		snprintf(err, errsz, "the manifest has no layers");
		json_decref(doc);
		return NULL;
	}
	/* The configuration is not used (commands run /bin/sh -c), but a
	 * layout whose blobs do not all match is not imported. */
	json_t *config = doc ? load_blob_json(lfd, json_object_get(doc, "config"), err, errsz) : NULL;
	if (doc && !config) {
		json_decref(doc);
		return NULL;
	}
	json_decref(config);
	return doc;
}

static int apply_layers(int lfd, json_t *manifest, struct extract *x)
{
	json_t *l;
	size_t i;
	json_array_foreach(json_object_get(manifest, "layers"), i, l) {
		const char *mt = json_string_value(json_object_get(l, "mediaType"));
		if (!mt || !strstr(mt, "tar")) {
			snprintf(x->err, x->errsz, "layer %zu: unsupported media type %s", i,
				 mt ? mt : "(none)");
			return -EINVAL;
		}
		uint64_t size = 0;
		int fd = blob_open(lfd, l, &size, x->err, x->errsz);
		if (fd < 0)
			return fd;
		int rc = rootimg_extract_file(x, fd, size, json_string_value(json_object_get(l, "digest")));
		close(fd);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The layout's index.json: a regular file, no symlink, small. */
static json_t *load_index(int lfd, const char *layout, char *err, size_t errsz)
{
	uint64_t size = 0;
	char *what = xasprintf("%s/index.json", layout);
	int fd = rootimg_open_regular(lfd, "index.json", LAYOUT_RESOLVE, what, &size, err, errsz);
	json_t *index = fd >= 0 ? read_json(fd, size, what, err, errsz) : NULL;
	free(what);
	return index;
}

int sbx_rootimg_import_oci(const char *dir, const char *name, const char *layout_arg,
			   const struct sbx_rootimg_limits *lim, char *err, size_t errsz)
{
	char *layout = realpath(layout_arg, NULL); /* recorded in the manifest */
	int lfd = layout ? open(layout, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
	if (lfd < 0) {
		snprintf(err, errsz, "%s: %s", layout_arg, strerror(errno));
		free(layout);
		return -ENOENT;
	}
	json_t *index = load_index(lfd, layout, err, errsz), *manifest = NULL;
	if (!index) {
		close(lfd);
		free(layout);
		return -EINVAL;
	}
	struct rootimg_stage st;
	struct extract x = {.root = -1};
	int rc = rootimg_stage_begin(&st, dir, name, err, errsz);
	if (rc == 0)
		rc = rootimg_extract_begin(&x, &st, layout, true, lim, err, errsz);
	if (rc == 0 && !(manifest = pick_manifest(lfd, index, 0, err, errsz)))
		rc = -EINVAL;
	if (rc == 0)
		rc = apply_layers(lfd, manifest, &x);
	if (rc == 0)
		rc = rootimg_fix_root(st.rootfs);
	if (rc == 0) {
		json_t *src = json_pack("{s:s, s:s, s:i}", "kind", "oci", "layout", layout, "layers",
					(int)json_array_size(json_object_get(manifest, "layers")));
		rc = rootimg_stage_commit(&st, name, json_array(), src, err, errsz);
	}
	rootimg_stage_end(&st);
	if (x.root >= 0)
		close(x.root);
	close(lfd);
	json_decref(manifest);
	json_decref(index);
	free(layout);
	return rc;
}
