/* sbx cp: a file between the local disk and the sandbox, either way, in
 * constant memory through the streaming routes (like docker cp, a
 * destination that is a directory gets the source's base name). Both
 * directions are checked with SHA-256: an upload against the digest the
 * server computed as it stored the bytes, a download against
 * `sha256sum` run in the sandbox (needs the exec scope; --no-verify skips
 * it). A download is written beside its destination and renamed into
 * place only when complete and verified. A progress bar goes to stderr
 * when it is a terminal. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client/cli/cli.h"
#include "common/buf.h"
#include "common/xmalloc.h"

struct copy {
	struct cli *c;
	int fd;
	EVP_MD_CTX *md;
	uint64_t done, size; /* size 0: unknown */
	bool bar;
	struct timespec start, last;
};

static mode_t umask_value(void)
{
	mode_t m = umask(0);
	umask(m);
	return m;
}

static double since(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static void progress(struct copy *k, bool final)
{
	if (!k->bar)
		return;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!final && since(&k->last, &now) < 0.1)
		return;
	k->last = now;
	double secs = since(&k->start, &now), mib = (double)k->done / 1048576.0;
	double rate = secs > 0 ? mib / secs : 0;
	if (k->size) {
		int pct = (int)(k->done * 100 / k->size), w = pct * 30 / 100;
		fprintf(stderr, "\r[%.*s%*s] %3d%% %.1f/%.1f MiB %.1f MiB/s ", w,
			"##############################", 30 - w, "", pct, mib, (double)k->size / 1048576.0,
			rate);
	} else {
		fprintf(stderr, "\r%.1f MiB %.1f MiB/s ", mib, rate);
	}
	if (final)
		fputc('\n', stderr);
}

static void hex_digest(EVP_MD_CTX *md, char out[65])
{
	unsigned char d[32];
	unsigned int n = 0;
	EVP_DigestFinal_ex(md, d, &n);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static ssize_t up_source(void *arg, void *buf, size_t cap)
{
	struct copy *k = arg;
	for (;;) {
		ssize_t n = read(k->fd, buf, cap);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		EVP_DigestUpdate(k->md, buf, (size_t)n);
		k->done += (uint64_t)n;
		progress(k, false);
		return n;
	}
}

static int down_sink(void *arg, const void *data, size_t len)
{
	struct copy *k = arg;
	const char *p = data;
	EVP_DigestUpdate(k->md, data, len);
	for (size_t left = len; left > 0;) {
		ssize_t w = write(k->fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		left -= (size_t)w;
	}
	k->done += len;
	progress(k, false);
	return 0;
}

static void report(struct copy *k, const char *from, const char *to, const char *sha, const char *verified)
{
	if (k->c->json)
		cli_print_json(json_pack("{s:s, s:s, s:I, s:s, s:b}", "from", from, "to", to, "bytes",
					 (json_int_t)k->done, "sha256", sha, "verified", verified == NULL));
	else if (verified && !k->c->quiet)
		fprintf(stderr, "sbx: %s: not verified (%s)\n", to, verified);
}

/* The remote destination: PATH, or PATH/basename when PATH is a directory
 * (or ends with '/'). */
static char *remote_target(struct cli *c, const char *dst, const char *src)
{
	size_t n = strlen(dst);
	bool slash = n > 0 && dst[n - 1] == '/', dir = slash;
	struct sbxc_stat st;
	if (!dir && sbxc_stat(c->h, &c->call, dst, &st, NULL) == 0) {
		dir = st.type == SBXC_DIR;
		sbxc_stat_clear(&st);
	}
	if (!dir)
		return xstrdup(dst);
	char *copy = xstrdup(src);
	char *out = xasprintf("%s%s%s", dst, slash ? "" : "/", basename(copy));
	free(copy);
	return out;
}

static int upload(struct cli *c, const char *src, const char *dst)
{
	struct copy k = {.c = c,
			 .fd = strcmp(src, "-") == 0 ? STDIN_FILENO : open(src, O_RDONLY | O_CLOEXEC)};
	if (k.fd < 0) {
		fprintf(stderr, "sbx: %s: %s\n", src, strerror(errno));
		return CLI_FAIL;
	}
	struct stat st;
	if (fstat(k.fd, &st) == 0 && S_ISREG(st.st_mode))
		k.size = (uint64_t)st.st_size;
	char *target = strcmp(src, "-") == 0 ? xstrdup(dst) : remote_target(c, dst, src);
	k.md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(k.md, EVP_sha256(), NULL);
	k.bar = isatty(STDERR_FILENO) && !c->quiet && !c->json;
	clock_gettime(CLOCK_MONOTONIC, &k.start);
	struct sbxc_upload up;
	struct sbxc_err err;
	int rc = sbxc_write_file_stream(c->h, &c->call, target, k.size ? (int64_t)k.size : -1, up_source, &k,
					&up, &err);
	progress(&k, true);
	char sha[65];
	hex_digest(k.md, sha);
	int status = CLI_OK;
	if (rc < 0)
		status = cli_fail(c, target, rc, &err);
	else if (strcmp(sha, up.sha256) != 0 || up.size != k.done)
		status =
		    cli_fail(c, target, -EIO,
			     &(struct sbxc_err){.message = "the server stored other bytes than were sent "
							   "(sha256 or size differ)"});
	else
		report(&k, src, up.path, sha, NULL);
	EVP_MD_CTX_free(k.md);
	if (k.fd != STDIN_FILENO)
		close(k.fd);
	free(target);
	return status;
}

/* sha256sum of the file, run in the sandbox: 0 and its digest, or why
 * not (the token may lack the exec scope). */
static int remote_sha256(struct cli *c, const char *path, char out[65], char *why, size_t whysz)
{
	struct buf cmd;
	buf_init(&cmd, 65536);
	buf_append(&cmd, "sha256sum -- '", 14);
	for (const char *p = path; *p; p++)
		if (*p == '\'')
			buf_append(&cmd, "'\\''", 4);
		else
			buf_append(&cmd, p, 1);
	buf_append(&cmd, "'", 1);
	struct sbxc_exec_req req = {.command = buf_cstr(&cmd), .timeout_s = 3600};
	struct sbxc_result res;
	struct sbxc_err err;
	int rc = sbxc_exec(c->h, &c->call, &req, NULL, NULL, NULL, &res, &err);
	buf_free(&cmd);
	if (rc < 0) {
		sbxc_err_text(&err, rc, why, whysz);
		return rc;
	}
	bool ok = res.exit_code == 0 && strspn(res.stdout_text, "0123456789abcdef") == 64;
	if (ok)
		snprintf(out, 65, "%.64s", res.stdout_text);
	else
		snprintf(why, whysz, "sha256sum in the sandbox failed: %s", res.stderr_text);
	sbxc_result_clear(&res);
	return ok ? 0 : -EIO;
}

/* The local destination: DST, or DST/basename when it is a directory. */
static char *local_target(const char *dst, const char *src)
{
	struct stat st;
	if (stat(dst, &st) != 0 || !S_ISDIR(st.st_mode))
		return xstrdup(dst);
	char *copy = xstrdup(src);
	char *out = xasprintf("%s/%s", dst, basename(copy));
	free(copy);
	return out;
}

static int download_into(struct cli *c, struct copy *k, const char *src, const char *shown, bool verify)
{
	struct sbxc_stat st;
	struct sbxc_err err;
	int rc = sbxc_stat(c->h, &c->call, src, &st, &err);
	if (rc < 0)
		return cli_fail(c, src, rc, &err);
	k->size = st.type == SBXC_FILE ? st.size : 0;
	sbxc_stat_clear(&st);
	k->md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(k->md, EVP_sha256(), NULL);
	k->bar = isatty(STDERR_FILENO) && !c->quiet && !c->json;
	clock_gettime(CLOCK_MONOTONIC, &k->start);
	rc = sbxc_read_file_stream(c->h, &c->call, src, 0, down_sink, k, NULL, &err);
	progress(k, true);
	char sha[65], remote[65], why[600] = "--no-verify";
	hex_digest(k->md, sha);
	EVP_MD_CTX_free(k->md);
	if (rc == -ECANCELED && !sbxc_cancel_fired(c->call.cancel))
		return cli_fail(c, shown, -EIO, &(struct sbxc_err){.message = "cannot write the local file"});
	if (rc < 0)
		return cli_fail(c, src, rc, &err);
	if (verify && remote_sha256(c, src, remote, why, sizeof why) == 0) {
		if (strcmp(remote, sha) != 0)
			return cli_fail(c, src, -EIO,
					&(struct sbxc_err){.message = "the bytes received differ from the "
								      "sandbox's file (sha256)"});
		report(k, src, shown, sha, NULL);
	} else {
		report(k, src, shown, sha, why);
	}
	return CLI_OK;
}

static int download(struct cli *c, const char *src, const char *dst, bool verify)
{
	struct copy k = {.c = c, .fd = STDOUT_FILENO};
	if (strcmp(dst, "-") == 0) {
		bool json = c->json;
		c->json = false; /* stdout carries the bytes */
		int st = download_into(c, &k, src, "-", verify);
		c->json = json;
		return st;
	}
	char *target = local_target(dst, src);
	char *tmp = xasprintf("%s.sbx-XXXXXX", target);
	k.fd = mkostemp(tmp, O_CLOEXEC);
	if (k.fd < 0) {
		fprintf(stderr, "sbx: %s: %s\n", target, strerror(errno));
		free(tmp);
		free(target);
		/* cppcheck-suppress memleak ; k.fd is -1 here: nothing was opened */
		return CLI_FAIL;
	}
	fchmod(k.fd, 0644 & ~umask_value());
	int st = download_into(c, &k, src, target, verify);
	if (close(k.fd) != 0 && st == CLI_OK)
		st =
		    cli_fail(c, target, -errno, &(struct sbxc_err){.message = "cannot write the local file"});
	if (st == CLI_OK && rename(tmp, target) != 0)
		st = cli_fail(c, target, -errno, &(struct sbxc_err){.message = "cannot rename into place"});
	if (st != CLI_OK)
		unlink(tmp);
	free(tmp);
	free(target);
	return st;
}

int cmd_cp(struct cli *c, int argc, char **argv)
{
	bool verify = true;
	int i = 1;
	if (i < argc && strcmp(argv[i], "--no-verify") == 0) {
		verify = false;
		i++;
	}
	if (argc - i != 2)
		return cli_usage("cp [--no-verify] SRC DST (one of them sandbox:PATH or :PATH)");
	const char *src = argv[i], *dst = argv[i + 1];
	const char *rsrc = cli_remote(src), *rdst = cli_remote(dst);
	if (!rsrc == !rdst)
		return cli_usage("cp copies between the local disk and the sandbox: mark exactly one side "
				 "as sandbox:PATH or :PATH");
	return rdst ? upload(c, src, rdst) : download(c, rsrc, dst, verify);
}
