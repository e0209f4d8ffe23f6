/* "bwrap": bubblewrap with every namespace, a read-only /usr, a generated
 * minimal /etc, private /proc, /dev and /tmp, the workspace at /workspace,
 * no capabilities, a seccomp filter, and (when the server is root) an
 * unprivileged uid dropped to before bwrap runs, so that bwrap builds an
 * unprivileged user namespace instead of mapping the sandbox to host root.
 * bwrap has no policy of its own: only these arguments protect. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/xmalloc.h"
#include "sandbox/backend_impl.h"
#include "sandbox/seccomp.h"

#define BWRAP_DEFAULT_PATH "/usr/bin/bwrap"
#define PROBE_UID 65534

struct bwrap {
	char *path;
	char *tmpdir; /* private: holds etc-<uid>-<gid>/ */
	char version[32];
	bool runs; /* the probe sandbox started */
	void *bpf;
	size_t bpf_len;
	struct sbx_strv head; /* the fixed front of every command line */
};

/* The merged-/usr layout of the host: /bin -> usr/bin becomes a symlink
 * in the sandbox, a real directory a read-only bind. */
static void add_root_dirs(struct sbx_strv *sv)
{
	static const char *const dirs[] = {"bin", "sbin", "lib", "lib64", "lib32", "libx32"};
	char path[32], target[PATH_MAX];
	struct stat st;
	size_t i;

	for (i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		ssize_t n;

		snprintf(path, sizeof(path), "/%s", dirs[i]);
		if (lstat(path, &st) < 0)
			continue;
		if (S_ISLNK(st.st_mode)) {
			n = readlink(path, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			/* Only links into /usr mean something inside. */
			if (strncmp(target, "usr/", 4) != 0 && strncmp(target, "/usr/", 5) != 0)
				continue;
			sbx_strv_add(sv, "--symlink");
			sbx_strv_add(sv, target);
			sbx_strv_add(sv, path);
		} else if (S_ISDIR(st.st_mode)) {
			sbx_strv_add(sv, "--ro-bind");
			sbx_strv_add(sv, path);
			sbx_strv_add(sv, path);
		}
	}
}

static void build_head(struct bwrap *bw)
{
	static const char *const fixed[] = {
	    "bwrap",
	    "--unshare-all",
	    "--unshare-user",
	    "--disable-userns",
	    "--die-with-parent",
	    "--new-session",
	    "--cap-drop",
	    "ALL",
	    "--clearenv",
	    "--ro-bind",
	    "/usr",
	    "/usr",
	};
	size_t i;

	for (i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		sbx_strv_add(&bw->head, fixed[i]);
	add_root_dirs(&bw->head);
}

/* Run argv (bwrap_path) with stdout captured into out (at most outsz-1
 * bytes), as PROBE_UID when root. Returns the wait status or -errno. */
static int run_probe(struct bwrap *bw, const struct sbx_strv *argv, char *out, size_t outsz)
{
	struct sbx_launch l;
	int pipefd[2] = {-1, -1};
	int devnull = -1, pidfd = -1;
	size_t got = 0;
	pid_t pid;
	int rc, i;

	sbx_launch_init(&l);
	for (i = 0; i < (int)argv->n; i++)
		sbx_strv_add(&l.argv, argv->v[i]);
	l.path = bw->path;
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0 || pipe2(pipefd, O_CLOEXEC) < 0) {
		rc = -errno;
		goto out;
	}
	l.std_fds[0] = devnull;
	l.std_fds[1] = pipefd[1];
	l.std_fds[2] = devnull;
	l.drop_privs = geteuid() == 0;
	l.uid = PROBE_UID;
	l.gid = PROBE_UID;
	l.pdeathsig = true;
	rc = sbx_launch_start(&l, &pid, &pidfd);
	if (rc < 0)
		goto out;
	close(pipefd[1]);
	pipefd[1] = -1;
	for (;;) {
		ssize_t n = read(pipefd[0], out + got, got + 1 < outsz ? outsz - 1 - got : 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (outsz)
		out[got] = '\0';
	rc = sbx_wait_status(pid);
out:
	if (pidfd >= 0)
		close(pidfd);
	for (i = 0; i < 2; i++) {
		if (pipefd[i] >= 0)
			close(pipefd[i]);
	}
	if (devnull >= 0)
		close(devnull);
	sbx_launch_release(&l);
	return rc;
}

static void probe(struct bwrap *bw)
{
	struct sbx_strv argv = {0};
	char out[128];
	size_t i;
	int st;

	sbx_strv_add(&argv, "bwrap");
	sbx_strv_add(&argv, "--version");
	st = run_probe(bw, &argv, out, sizeof(out));
	sbx_strv_free(&argv);
	if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		const char *v = strncmp(out, "bubblewrap ", 11) == 0 ? out + 11 : out;

		size_t n = strcspn(v, " \r\n");

		if (n >= sizeof(bw->version))
			n = sizeof(bw->version) - 1;
		memcpy(bw->version, v, n);
		bw->version[n] = '\0';
	}
	/* Can it actually build a sandbox here (user namespaces allowed)? */
	for (i = 0; i < bw->head.n; i++)
		sbx_strv_add(&argv, bw->head.v[i]);
	sbx_strv_add(&argv, "/bin/true");
	st = run_probe(bw, &argv, out, sizeof(out));
	sbx_strv_free(&argv);
	bw->runs = st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void remove_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (d) {
		while ((de = readdir(d))) {
			char *p;
			struct stat st;

			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			p = xasprintf("%s/%s", dir, de->d_name);
			if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
				remove_tree(p);
			else
				unlink(p);
			free(p);
		}
		closedir(d);
	}
	rmdir(dir);
}

static int bw_init(struct sbx_backend *b, const struct sbx_backend_config *cfg)
{
	const char *path = cfg->bwrap_path ? cfg->bwrap_path : BWRAP_DEFAULT_PATH;
	const char *tmp = getenv("TMPDIR");
	struct bwrap *bw;
	char *tpl;
	int rc;

	if (access(path, X_OK) < 0)
		return errno == EACCES ? -EACCES : -ENOENT;
	bw = xcalloc(1, sizeof(*bw));
	bw->path = xstrdup(path);
	rc = sbx_seccomp_build(&bw->bpf, &bw->bpf_len);
	if (rc < 0)
		goto fail;
	tpl = xasprintf("%s/sandboxd-bwrap-XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp");
	if (!mkdtemp(tpl)) {
		rc = -errno;
		free(tpl);
		goto fail;
	}
	bw->tmpdir = tpl;
	/* The sandbox uid must be able to reach the generated /etc. */
	if (chmod(bw->tmpdir, 0711) < 0) {
		rc = -errno;
		goto fail;
	}
	build_head(bw);
	probe(bw);
	b->priv = bw;
	return 0;
fail:
	if (bw->tmpdir)
		remove_tree(bw->tmpdir);
	free(bw->tmpdir);
	free(bw->bpf);
	free(bw->path);
	free(bw);
	return rc;
}

static void bw_fini(struct sbx_backend *b)
{
	struct bwrap *bw = b->priv;

	if (!bw)
		return;
	remove_tree(bw->tmpdir);
	free(bw->tmpdir);
	free(bw->bpf);
	free(bw->path);
	sbx_strv_free(&bw->head);
	free(bw);
	b->priv = NULL;
}

static int write_all_file(int dirfd, const char *name, const char *text)
{
	size_t len = strlen(text), off = 0;
	int fd, rc = 0;

	fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			break;
		}
		off += (size_t)n;
	}
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* The minimal /etc for one uid:gid, generated once and reused: built in a
 * temporary directory and renamed into place, so concurrent spawns never
 * see half of it. ld.so.cache and alternatives are empty mount points
 * that the real ones are bound over (--ro-bind-try). */
static int etc_dir(struct bwrap *bw, uid_t uid, gid_t gid, char **out)
{
	char *final = xasprintf("%s/etc-%u-%u", bw->tmpdir, (unsigned)uid, (unsigned)gid);
	char *tmp = NULL, *passwd = NULL, *group = NULL;
	struct stat st;
	int dfd = -1;
	int rc;

	if (stat(final, &st) == 0 && S_ISDIR(st.st_mode)) {
		*out = final;
		return 0;
	}
	tmp = xasprintf("%s/.etc-XXXXXX", bw->tmpdir);
	if (!mkdtemp(tmp)) {
		rc = -errno;
		free(tmp);
		tmp = NULL;
		goto out;
	}
	dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		rc = -errno;
		goto out;
	}
	passwd = xasprintf("root:x:0:0:root:/root:/bin/sh\n"
			   "sandbox:x:%u:%u:sandbox:/workspace:/bin/sh\n"
			   "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			   (unsigned)uid, (unsigned)gid);
	group = xasprintf("root:x:0:\nsandbox:x:%u:\nnogroup:x:65534:\n", (unsigned)gid);
	if ((rc = write_all_file(dfd, "passwd", passwd)) < 0 ||
	    (rc = write_all_file(dfd, "group", group)) < 0 ||
	    (rc = write_all_file(dfd, "hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost\n")) < 0 ||
	    (rc = write_all_file(dfd, "resolv.conf", "")) < 0 ||
	    (rc = write_all_file(dfd, "nsswitch.conf",
				 "passwd: files\ngroup: files\nshadow: files\n"
				 "hosts: files\nnetworks: files\n")) < 0 ||
	    (rc = write_all_file(dfd, "hostname", "sandbox\n")) < 0 ||
	    (rc = write_all_file(dfd, "ld.so.cache", "")) < 0)
		goto out;
	if (mkdirat(dfd, "alternatives", 0755) < 0 || fchmod(dfd, 0755) < 0) {
		rc = -errno;
		goto out;
	}
	if (rename(tmp, final) < 0) {
		/* Someone else won the race: theirs is as good as ours. */
		if (errno != EEXIST && errno != ENOTEMPTY) {
			rc = -errno;
			goto out;
		}
		remove_tree(tmp);
	}
	free(tmp);
	tmp = NULL;
	*out = final;
	final = NULL;
	rc = 0;
out:
	if (dfd >= 0)
		close(dfd);
	if (tmp) {
		remove_tree(tmp);
		free(tmp);
	}
	free(final);
	free(passwd);
	free(group);
	return rc;
}

static void setenv_arg(struct sbx_launch *l, const char *name, size_t name_len, const char *value)
{
	char *n = xstrndup(name, name_len);

	sbx_strv_add(&l->argv, "--setenv");
	sbx_strv_add(&l->argv, n);
	sbx_strv_add(&l->argv, value);
	free(n);
}

static int bw_prepare(struct sbx_backend *b, const struct sbx_spawn_req *req, struct sbx_launch *l)
{
	struct bwrap *bw = b->priv;
	const char *rel = req->cwd_rel ? req->cwd_rel : "";
	bool drop = req->drop_privs && geteuid() == 0;
	uid_t uid = drop ? req->uid : getuid();
	gid_t gid = drop ? req->gid : getgid();
	char *etc = NULL;
	size_t i;
	int rc;

	/* bwrap resolves the cwd again inside the sandbox; this only turns a
	 * missing directory into ENOENT instead of a bwrap error message. */
	rc = sbx_cwd_check(req->workspace_host_dir, rel);
	if (rc < 0)
		return rc;
	rc = etc_dir(bw, uid, gid, &etc);
	if (rc < 0)
		return rc;

	l->path = bw->path;
	l->exec_fail_is_backend = true;
	for (i = 0; i < bw->head.n; i++)
		sbx_strv_add(&l->argv, bw->head.v[i]);
	sbx_strv_add(&l->argv, "--ro-bind");
	sbx_strv_add(&l->argv, etc);
	sbx_strv_add(&l->argv, "/etc");
	sbx_strv_add(&l->argv, "--ro-bind-try");
	sbx_strv_add(&l->argv, "/etc/ld.so.cache");
	sbx_strv_add(&l->argv, "/etc/ld.so.cache");
	sbx_strv_add(&l->argv, "--ro-bind-try");
	sbx_strv_add(&l->argv, "/etc/alternatives");
	sbx_strv_add(&l->argv, "/etc/alternatives");
	free(etc);
	sbx_strv_add(&l->argv, "--proc");
	sbx_strv_add(&l->argv, "/proc");
	sbx_strv_add(&l->argv, "--dev");
	sbx_strv_add(&l->argv, "/dev");
	if (req->limits.tmp_bytes) {
		sbx_strv_add(&l->argv, "--size");
		sbx_strv_addf(&l->argv, "%llu", (unsigned long long)req->limits.tmp_bytes);
	}
	sbx_strv_add(&l->argv, "--tmpfs");
	sbx_strv_add(&l->argv, "/tmp");
	sbx_strv_add(&l->argv, "--bind");
	sbx_strv_add(&l->argv, req->workspace_host_dir);
	sbx_strv_add(&l->argv, "/workspace");
	sbx_strv_add(&l->argv, "--chdir");
	sbx_strv_addf(&l->argv, "/workspace%s%s", rel[0] ? "/" : "", rel);

	setenv_arg(l, "PATH", 4, SBX_ENV_PATH);
	setenv_arg(l, "HOME", 4, "/workspace");
	setenv_arg(l, "LANG", 4, SBX_ENV_LANG);
	setenv_arg(l, "USER", 4, "sandbox");
	for (i = 0; req->env && req->env[i]; i++) {
		const char *eq = strchr(req->env[i], '=');

		if (!eq || eq == req->env[i])
			return -EINVAL;
		setenv_arg(l, req->env[i], (size_t)(eq - req->env[i]), eq + 1);
	}

	rc = sbx_seccomp_memfd(bw->bpf, bw->bpf_len);
	if (rc < 0)
		return rc;
	l->keep_fd = rc;
	sbx_strv_add(&l->argv, "--seccomp");
	sbx_strv_add(&l->argv, "3");
	sbx_strv_add(&l->argv, "/bin/sh");
	sbx_strv_add(&l->argv, "-c");
	sbx_strv_add(&l->argv, req->command);
	/* bwrap itself gets an empty environment: nothing of the server's
	 * reaches it, not even in the sandbox's pid 1. */
	return 0;
}

static int bw_health(struct sbx_backend *b, char *msg, size_t msgsz)
{
	struct bwrap *bw = b->priv;

	if (access(bw->path, X_OK) < 0) {
		snprintf(msg, msgsz, "bwrap missing at %s", bw->path);
		return -SBX_E_BACKEND;
	}
	if (!bw->version[0] || !bw->runs) {
		snprintf(msg, msgsz, "bwrap %s cannot start a sandbox",
			 bw->version[0] ? bw->version : "(unknown version)");
		return -SBX_E_BACKEND;
	}
	snprintf(msg, msgsz, "bwrap %s; seccomp on", bw->version);
	return 0;
}

const struct sbx_backend_ops sbx_backend_bwrap_ops = {
    .name = "bwrap",
    .init = bw_init,
    .fini = bw_fini,
    .prepare = bw_prepare,
    .health = bw_health,
};
