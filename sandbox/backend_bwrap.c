/* "bwrap": bubblewrap with every namespace, a read-only /usr, a generated
 * minimal /etc, private /proc, /dev and /tmp (the root and /dev
 * read-only, /tmp and /dev/shm sized), the workspace at /workspace,
 * no capabilities, a seccomp filter, and (when the server is root) an
 * unprivileged uid dropped to before bwrap runs, so that bwrap builds an
 * unprivileged user namespace instead of mapping the sandbox to host root.
 * bwrap has no policy of its own: only these arguments protect. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/xmalloc.h"
#include "sandbox/backend_impl.h"
#include "sandbox/egress/nsprep.h"
#include "sandbox/rootimg.h"
#include "sandbox/seccomp.h"

#define BWRAP_DEFAULT_PATH "/usr/bin/bwrap"
#define PROBE_UID 65534
#define SBX_ARGS_MAX (8u << 20)	  /* bwrap's options incl. the environment: far above any request's bound */
#define SBX_SHM_MAX (64ULL << 20) /* /dev/shm: Docker's default size */
#define SBX_TMP_DEFAULT (256ULL << 20) /* /tmp when no size is configured: never unbounded */
#define SBX_BWRAP_IDS_CACHE 16	       /* uid:gid whose passwd and group memfds are kept */

/* Bytes bwrap reads from an fd (--seccomp, --file): made once into a
 * sealed memfd that nothing can change, and handed to each spawn as a
 * fresh read-only open file description of it (blob_keep), so that
 * concurrent spawns never share a file offset. */
struct blob {
	int fd;	   /* sealed memfd, or -1: a fresh copy per spawn */
	dev_t dev; /* fd's inode, checked on each reopen */
	ino_t ino;
	char *data;
	size_t len;
};

/* passwd and group of one sandbox uid:gid, kept for the next spawns */
struct ids_etc {
	uid_t uid;
	gid_t gid;
	uint64_t used; /* 0: empty slot */
	struct blob passwd, group;
};

enum { ETC_HOSTS, ETC_RESOLV, ETC_NSSWITCH, ETC_HOSTNAME, ETC_FIXED };

struct bwrap {
	char *path;
	char version[32];
	bool runs;	 /* the probe sandbox started */
	uid_t probe_uid; /* what the probe runs as when root */
	struct blob seccomp;
	struct blob etc[2][ETC_FIXED]; /* the same in every sandbox: [0] without network, [1] with */
	struct sbx_strv head;	       /* the fixed front of every command line */
	pthread_mutex_t ids_mu;	       /* guards ids, ids_tick and the fds in ids */
	struct ids_etc ids[SBX_BWRAP_IDS_CACHE];
	uint64_t ids_tick;
};

static const char *const etc_fixed_name[ETC_FIXED] = {"hosts", "resolv.conf", "nsswitch.conf", "hostname"};

/* The text of the /etc files every sandbox shares. With network (net)
 * names are asked of the egress gateway's DNS (sandbox/egress/dns.h),
 * which answers only what the tenant's rules allow; without, there is no
 * resolver at all. */
static const char *etc_fixed_text(size_t i, bool net)
{
	static const char *const text[2][ETC_FIXED] = {
	    {
		[ETC_HOSTS] = "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
		[ETC_RESOLV] = "",
		[ETC_NSSWITCH] =
		    "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\n",
		[ETC_HOSTNAME] = "sandbox\n",
	    },
	    {
		[ETC_HOSTS] = "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
		[ETC_RESOLV] = "nameserver " SBX_EGRESS_RESOLVER "\noptions timeout:2 attempts:2\n",
		[ETC_NSSWITCH] =
		    "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n",
		[ETC_HOSTNAME] = "sandbox\n",
	    },
	};

	return text[net][i];
}

/* Write len bytes at offset 0 of fd, leaving its offset at 0 (pwrite):
 * bwrap reads from there. 0 or -errno. */
static int write_at0(int fd, const void *data, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = pwrite(fd, (const char *)data + off, len - off, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		off += (size_t)n;
	}
	return 0;
}

/* A new memfd (O_CLOEXEC) holding the bytes, positioned at 0; its fd or
 * -errno. */
static int fresh_memfd(const char *name, const void *data, size_t len, unsigned flags)
{
	int fd = memfd_create(name, MFD_CLOEXEC | flags);
	int rc;

	if (fd < 0)
		return -errno;
	rc = write_at0(fd, data, len);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

#define BLOB_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

/* b holds a copy of the bytes and, where memfd sealing works, a sealed
 * memfd of them (no write, grow, shrink or further seals). */
static void blob_make(struct blob *b, const char *name, const void *data, size_t len)
{
	b->data = xmalloc(len + 1);
	memcpy(b->data, data, len);
	b->len = len;
	b->fd = fresh_memfd(name, data, len, MFD_ALLOW_SEALING);
	struct stat st;
	if (b->fd >= 0 && (fcntl(b->fd, F_ADD_SEALS, BLOB_SEALS) < 0 || fstat(b->fd, &st) < 0)) {
		close(b->fd);
		b->fd = -1;
	}
	if (b->fd >= 0) {
		b->dev = st.st_dev;
		b->ino = st.st_ino;
	}
}

static void blob_free(struct blob *b)
{
	if (b->fd >= 0)
		close(b->fd);
	free(b->data);
	b->fd = -1;
	b->data = NULL;
}

/* Hand b to the child: a read-only open file description of its own
 * (offset 0, so concurrent and later spawns never see each other's
 * reads), opened again through /proc/self/fd; a fresh memfd copy where
 * that is not possible (no /proc, no sealing). Its number in the child,
 * or -errno. */
static int blob_keep(struct sbx_launch *l, const struct blob *b, const char *name)
{
	char proc[32];
	int fd = -1;

	if (b->fd >= 0) {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", b->fd);
		fd = open(proc, O_RDONLY | O_CLOEXEC);
	}
	/* The number must still be our sealed memfd: a stray close and reuse
	 * of it elsewhere in the process must not hand bwrap other bytes. */
	struct stat st;
	int seals = fd >= 0 ? fcntl(fd, F_GET_SEALS) : 0;
	if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_dev != b->dev || st.st_ino != b->ino || seals < 0 ||
			(seals & BLOB_SEALS) != BLOB_SEALS)) {
		static atomic_bool said;
		if (!atomic_exchange(&said, true))
			log_msg("error",
				"bwrap: the sealed memfd of %s (fd %d) is no longer ours; "
				"using fresh copies",
				name, b->fd);
		close(fd);
		fd = -1;
	}
	if (fd < 0)
		fd = fresh_memfd(name, b->data, b->len, 0);
	if (fd < 0)
		return fd;
	return sbx_launch_keep(l, fd);
}

/* The host's system in the sandbox: its /usr read-only, and its
 * merged-/usr layout (/bin -> usr/bin becomes a symlink in the sandbox,
 * a real directory a read-only bind). The host is trusted: its paths are
 * bound by name. */
static void add_system(struct sbx_strv *sv)
{
	char target[PATH_MAX];
	struct stat st;

	sbx_strv_add(sv, "--ro-bind");
	sbx_strv_add(sv, "/usr");
	sbx_strv_add(sv, "/usr");
	for (size_t i = 1; i < SBX_ROOTIMG_SYS_ETC; i++) {
		const char *path = sbx_rootimg_sys_path[i];
		char abs[16];

		snprintf(abs, sizeof(abs), "/%s", path);
		if (lstat(abs, &st) < 0)
			continue;
		if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlink(abs, target, sizeof(target) - 1);

			if (n <= 0)
				continue;
			target[n] = '\0';
			/* Only links into /usr mean something inside. */
			if (strncmp(target, "usr/", 4) != 0 && strncmp(target, "/usr/", 5) != 0)
				continue;
			sbx_strv_add(sv, "--symlink");
			sbx_strv_add(sv, target);
			sbx_strv_add(sv, abs);
		} else if (S_ISDIR(st.st_mode)) {
			sbx_strv_add(sv, "--ro-bind");
			sbx_strv_add(sv, abs);
			sbx_strv_add(sv, abs);
		}
	}
}

/* An image's system as the child holds it: the fds sbx_rootimg_sys_open
 * opened inside the image (their numbers in the child; -1 none) and the
 * links into /usr it found. bwrap binds the open files (--ro-bind-fd):
 * no path of the image is resolved again, on the host, by anyone. */
struct image_sys {
	int fd[SBX_ROOTIMG_SYS_N];
	struct sbx_rootimg_sys sys;
};

/* Open the system of the image at rootfs and hand its fds to the child.
 * 0, or -SBX_E_BACKEND when the image is not (or no longer) one the
 * server binds (the route checked it when the command was accepted). */
static int keep_image(struct sbx_launch *l, const char *rootfs, struct image_sys *img)
{
	char err[256];
	int root = open(rootfs, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int rc = root < 0 ? -errno : sbx_rootimg_sys_open(root, &img->sys, err, sizeof(err));

	if (root >= 0)
		close(root);
	if (rc < 0) {
		log_msg("error", "bwrap: the image at %s cannot be used: %s", rootfs,
			root < 0 ? strerror(-rc) : err);
		return -SBX_E_BACKEND;
	}
	for (size_t i = 0; i < SBX_ROOTIMG_SYS_N; i++) {
		int fd = img->sys.fd[i];

		img->sys.fd[i] = -1; /* the launch's from here on */
		img->fd[i] = fd < 0 ? -1 : sbx_launch_keep(l, fd);
		if (fd >= 0 && img->fd[i] < 0) {
			sbx_rootimg_sys_close(&img->sys);
			return img->fd[i];
		}
	}
	return 0;
}

/* Entry i of the image, bound read-only by fd at its own path (or made
 * again as its link into /usr). */
static void add_image_entry(struct sbx_strv *sv, const struct image_sys *img, size_t i)
{
	if (img->fd[i] >= 0) {
		sbx_strv_add(sv, "--ro-bind-fd");
		sbx_strv_addf(sv, "%d", img->fd[i]);
		sbx_strv_addf(sv, "/%s", sbx_rootimg_sys_path[i]);
	} else if (img->sys.link[i][0]) {
		sbx_strv_add(sv, "--symlink");
		sbx_strv_add(sv, img->sys.link[i]);
		sbx_strv_addf(sv, "/%s", sbx_rootimg_sys_path[i]);
	}
}

static const char *const head_fixed[] = {
    "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session", "--cap-drop",
    "ALL",	     "--clearenv",
};

/* The fixed front, then the system: the host's (img NULL) or an image's
 * usr, bin, sbin and lib*. */
static void build_head(struct sbx_strv *sv, const struct image_sys *img)
{
	for (size_t i = 0; i < sizeof(head_fixed) / sizeof(head_fixed[0]); i++)
		sbx_strv_add(sv, head_fixed[i]);
	if (!img)
		add_system(sv);
	for (size_t i = 0; img && i < SBX_ROOTIMG_SYS_ETC; i++)
		add_image_entry(sv, img, i);
}

/* The front of a command's options: the host's (made once) or, on an
 * image (rootfs), one with the image's system handed to the child. */
static int add_head(const struct bwrap *bw, struct sbx_launch *l, const char *rootfs, struct sbx_strv *args,
		    struct image_sys *img)
{
	int rc = rootfs ? keep_image(l, rootfs, img) : 0;

	if (rootfs && rc == 0)
		build_head(args, img);
	for (size_t i = 0; !rootfs && i < bw->head.n; i++)
		sbx_strv_add(args, bw->head.v[i]);
	return rc;
}

/* Run argv (bwrap_path) with stdout captured into out (at most outsz-1
 * bytes), as the probe uid when root. Returns the wait status or -errno. */
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
	l.uid = bw->probe_uid;
	l.gid = (gid_t)bw->probe_uid;
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
	sbx_strv_add(&argv, "bwrap");
	for (i = 0; i < bw->head.n; i++)
		sbx_strv_add(&argv, bw->head.v[i]);
	sbx_strv_add(&argv, "/bin/true");
	st = run_probe(bw, &argv, out, sizeof(out));
	sbx_strv_free(&argv);
	bw->runs = st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static int bw_init(struct sbx_backend *b, const struct sbx_backend_config *cfg)
{
	const char *path = cfg->bwrap_path ? cfg->bwrap_path : BWRAP_DEFAULT_PATH;
	struct bwrap *bw;
	void *bpf = NULL;
	size_t bpf_len = 0, i;
	int rc;

	if (access(path, X_OK) < 0)
		return errno == EACCES ? -EACCES : -ENOENT;
	bw = xcalloc(1, sizeof(*bw));
	bw->path = xstrdup(path);
	bw->probe_uid = cfg->probe_uid ? cfg->probe_uid : PROBE_UID;
	rc = sbx_seccomp_build(&bpf, &bpf_len);
	if (rc < 0)
		goto fail;
	blob_make(&bw->seccomp, "sbx-seccomp", bpf, bpf_len);
	free(bpf);
	for (i = 0; i < 2 * ETC_FIXED; i++) {
		const char *text = etc_fixed_text(i % ETC_FIXED, i >= ETC_FIXED);

		blob_make(&bw->etc[i / ETC_FIXED][i % ETC_FIXED], etc_fixed_name[i % ETC_FIXED], text,
			  strlen(text));
	}
	pthread_mutex_init(&bw->ids_mu, NULL);
	build_head(&bw->head, NULL);
	probe(bw);
	b->priv = bw;
	return 0;
fail:
	free(bw->path);
	free(bw);
	return rc;
}

static void bw_fini(struct sbx_backend *b)
{
	struct bwrap *bw = b->priv;
	size_t i;

	if (!bw)
		return;
	blob_free(&bw->seccomp);
	for (i = 0; i < 2 * ETC_FIXED; i++)
		blob_free(&bw->etc[i / ETC_FIXED][i % ETC_FIXED]);
	for (i = 0; i < SBX_BWRAP_IDS_CACHE; i++) {
		if (bw->ids[i].used) {
			blob_free(&bw->ids[i].passwd);
			blob_free(&bw->ids[i].group);
		}
	}
	pthread_mutex_destroy(&bw->ids_mu);
	free(bw->path);
	sbx_strv_free(&bw->head);
	free(bw);
	b->priv = NULL;
}

static void setenv_arg(struct sbx_strv *args, const char *name, size_t name_len, const char *value)
{
	char *n = xstrndup(name, name_len);

	sbx_strv_add(args, "--setenv");
	sbx_strv_add(args, n);
	sbx_strv_add(args, value);
	free(n);
}

/* /etc/<name> of the host bound read-only where it exists (an image's:
 * add_image_entry). */
static void add_etc_bind(struct sbx_strv *args, const char *name)
{
	sbx_strv_add(args, "--ro-bind-try");
	sbx_strv_addf(args, "/etc/%s", name);
	sbx_strv_addf(args, "/etc/%s", name);
}

/* e becomes the passwd and group of uid:gid. */
static void ids_fill(struct ids_etc *e, uid_t uid, gid_t gid)
{
	char passwd[256], group[128];
	int n;

	if (e->used) {
		blob_free(&e->passwd);
		blob_free(&e->group);
	}
	n = snprintf(passwd, sizeof(passwd),
		     "root:x:0:0:root:/root:/bin/sh\n"
		     "sandbox:x:%u:%u:sandbox:/workspace:/bin/sh\n"
		     "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		     (unsigned)uid, (unsigned)gid);
	blob_make(&e->passwd, "passwd", passwd, (size_t)n);
	n = snprintf(group, sizeof(group), "root:x:0:\nsandbox:x:%u:\nnogroup:x:65534:\n", (unsigned)gid);
	blob_make(&e->group, "group", group, (size_t)n);
	e->uid = uid;
	e->gid = gid;
}

/* passwd and group of uid:gid handed to the child (their numbers there in
 * fds[0] and fds[1]), from the cache of the last SBX_BWRAP_IDS_CACHE
 * uid:gid pairs (least recently used one replaced). 0 or -errno. */
static int keep_ids(struct bwrap *bw, struct sbx_launch *l, uid_t uid, gid_t gid, int fds[2])
{
	struct ids_etc *e = NULL, *victim = &bw->ids[0];
	size_t i;

	pthread_mutex_lock(&bw->ids_mu);
	for (i = 0; i < SBX_BWRAP_IDS_CACHE && !e; i++) {
		struct ids_etc *c = &bw->ids[i];

		if (c->used && c->uid == uid && c->gid == gid)
			e = c;
		else if (c->used < victim->used)
			victim = c;
	}
	if (!e) {
		e = victim;
		ids_fill(e, uid, gid);
	}
	e->used = ++bw->ids_tick;
	fds[0] = blob_keep(l, &e->passwd, "passwd");
	fds[1] = fds[0] < 0 ? fds[0] : blob_keep(l, &e->group, "group");
	pthread_mutex_unlock(&bw->ids_mu);
	return fds[1] < 0 ? fds[1] : 0;
}

/* The minimal /etc, written by bwrap into the sandbox's own root (then
 * read-only) from memfds: nothing is bound from a host path, so no host
 * path shows in the sandbox's mount table. ld.so.cache and alternatives
 * are the system's (the host's or the image's), bound read-only where
 * they exist. The memfds are made once (per uid:gid for passwd and
 * group) and sealed; a command with network gets the resolver's
 * (etc_fixed_text). */
static int add_etc(struct bwrap *bw, struct sbx_launch *l, struct sbx_strv *args, uid_t uid, gid_t gid,
		   const struct image_sys *img)
{
	static const char *const names[2 + ETC_FIXED] = {"passwd",	"group",	 "hosts",
							 "resolv.conf", "nsswitch.conf", "hostname"};
	int fds[2 + ETC_FIXED];
	size_t i;
	int rc;

	rc = keep_ids(bw, l, uid, gid, fds);
	if (rc < 0)
		return rc;
	for (i = 0; i < ETC_FIXED; i++) {
		fds[2 + i] = blob_keep(l, &bw->etc[l->net][i], etc_fixed_name[i]);
		if (fds[2 + i] < 0)
			return fds[2 + i];
	}
	sbx_strv_add(args, "--dir");
	sbx_strv_add(args, "/etc");
	for (i = 0; i < 2 + ETC_FIXED; i++) {
		sbx_strv_add(args, "--perms");
		sbx_strv_add(args, "0644");
		sbx_strv_add(args, "--file");
		sbx_strv_addf(args, "%d", fds[i]);
		sbx_strv_addf(args, "/etc/%s", names[i]);
	}
	for (size_t j = SBX_ROOTIMG_SYS_ETC; img && j < SBX_ROOTIMG_SYS_N; j++)
		add_image_entry(args, img, j);
	if (!img) {
		add_etc_bind(args, "ld.so.cache");
		add_etc_bind(args, "alternatives");
	}
	return 0;
}

/* Every filesystem a command can write is bounded: /tmp and /dev/shm are
 * sized tmpfs, the root (where bwrap made /etc and the mount points) and
 * /dev are read-only afterwards, the workspace is the tenant's. */
static void add_mounts(struct sbx_strv *args, const struct sbx_spawn_req *req, const char *rel)
{
	uint64_t tmp = req->limits.tmp_bytes ? req->limits.tmp_bytes : SBX_TMP_DEFAULT;
	uint64_t shm = tmp < SBX_SHM_MAX ? tmp : SBX_SHM_MAX;

	sbx_strv_add(args, "--proc");
	sbx_strv_add(args, "/proc");
	sbx_strv_add(args, "--dev");
	sbx_strv_add(args, "/dev");
	sbx_strv_add(args, "--size");
	sbx_strv_addf(args, "%llu", (unsigned long long)shm);
	sbx_strv_add(args, "--tmpfs");
	sbx_strv_add(args, "/dev/shm");
	sbx_strv_add(args, "--remount-ro");
	sbx_strv_add(args, "/dev");
	sbx_strv_add(args, "--size");
	sbx_strv_addf(args, "%llu", (unsigned long long)tmp);
	sbx_strv_add(args, "--tmpfs");
	sbx_strv_add(args, "/tmp");
	sbx_strv_add(args, "--bind");
	sbx_strv_add(args, req->workspace_host_dir);
	sbx_strv_add(args, "/workspace");
	sbx_strv_add(args, "--remount-ro");
	sbx_strv_add(args, "/");
	sbx_strv_add(args, "--chdir");
	sbx_strv_addf(args, "/workspace%s%s", rel[0] ? "/" : "", rel);
}

/* bwrap's options travel NUL-separated through a memfd (--args): its
 * command line, which every process in the sandbox can read as
 * /proc/1/cmdline, holds no host path, only "bwrap --args N" and the
 * tenant's own command. */
static int keep_args(struct sbx_launch *l, const struct sbx_strv *args)
{
	struct buf b;
	int rc;

	buf_init(&b, SBX_ARGS_MAX);
	for (size_t i = 0; i < args->n; i++) {
		if (buf_append(&b, args->v[i], strlen(args->v[i]) + 1) < 0) {
			buf_free(&b);
			return -E2BIG;
		}
	}
	rc = fresh_memfd("bwrap-args", b.ptr, b.len, 0);
	buf_free(&b);
	return rc < 0 ? rc : sbx_launch_keep(l, rc);
}

/* A warm sandbox's end of the command line: no environment (the
 * launcher gets the command's from the server), and the launcher as its
 * command, run from its memfd with its control socket as argument
 * (sandbox/warm.h). */
static int warm_tail(struct sbx_launch *l, const struct sbx_strv *args)
{
	int ctl = fcntl(l->warm_ctl, F_DUPFD_CLOEXEC, 3);
	ctl = ctl < 0 ? -errno : sbx_launch_keep(l, ctl);
	if (ctl < 0)
		return ctl;
	int exe = fcntl(l->warm_exe, F_DUPFD_CLOEXEC, 3);
	exe = exe < 0 ? -errno : sbx_launch_keep(l, exe);
	if (exe < 0)
		return exe;
	int fd = keep_args(l, args);
	if (fd < 0)
		return fd;
	sbx_strv_add(&l->argv, "bwrap");
	sbx_strv_add(&l->argv, "--args");
	sbx_strv_addf(&l->argv, "%d", fd);
	sbx_strv_addf(&l->argv, "/proc/self/fd/%d", exe);
	sbx_strv_addf(&l->argv, "%d", ctl);
	return 0;
}

static int bw_prepare(struct sbx_backend *b, const struct sbx_spawn_req *req, struct sbx_launch *l)
{
	struct bwrap *bw = b->priv;
	const char *rel = req->cwd_rel ? req->cwd_rel : "";
	bool drop = req->drop_privs && geteuid() == 0;
	uid_t uid = drop ? req->uid : getuid();
	gid_t gid = drop ? req->gid : getgid();
	struct sbx_strv args = {0};
	struct image_sys img;
	size_t i;
	int rc, fd;

	/* bwrap resolves the cwd again inside the sandbox; this only turns a
	 * missing directory into ENOENT instead of a bwrap error message. */
	rc = sbx_cwd_check(req->workspace_host_dir, rel);
	if (rc < 0)
		return rc;

	l->path = bw->path;
	l->exec_fail_is_backend = true;
	fd = blob_keep(l, &bw->seccomp, "sbx-seccomp");
	if (fd < 0) {
		rc = fd;
		goto out;
	}
	rc = add_head(bw, l, req->rootfs, &args, &img);
	if (rc < 0)
		goto out;
	/* The egress namespace the dispatch took (l->netns_fd, joined
	 * before bwrap runs) instead of a new one without any network. */
	if (l->net)
		sbx_strv_add(&args, "--share-net");
	sbx_strv_add(&args, "--seccomp");
	sbx_strv_addf(&args, "%d", fd);
	rc = add_etc(bw, l, &args, uid, gid, req->rootfs ? &img : NULL);
	if (rc < 0)
		goto out;
	add_mounts(&args, req, rel);
	if (l->warm_ctl >= 0) {
		rc = warm_tail(l, &args);
		goto out;
	}

	setenv_arg(&args, "PATH", 4, SBX_ENV_PATH);
	setenv_arg(&args, "HOME", 4, "/workspace");
	setenv_arg(&args, "LANG", 4, SBX_ENV_LANG);
	setenv_arg(&args, "USER", 4, "sandbox");
	for (i = 0; req->env && req->env[i]; i++) {
		const char *eq = strchr(req->env[i], '=');

		if (!eq || eq == req->env[i]) {
			rc = -EINVAL;
			goto out;
		}
		setenv_arg(&args, req->env[i], (size_t)(eq - req->env[i]), eq + 1);
	}
	fd = keep_args(l, &args);
	if (fd < 0) {
		rc = fd;
		goto out;
	}
	/* bwrap itself gets an empty environment: nothing of the server's
	 * reaches it, not even in the sandbox's pid 1. */
	sbx_strv_add(&l->argv, "bwrap");
	sbx_strv_add(&l->argv, "--args");
	sbx_strv_addf(&l->argv, "%d", fd);
	/* A terminal: bwrap's --new-session still detaches the command from
	 * every terminal it had; setsid then makes the fresh pty (the
	 * runner's, never the server's own terminal) the controlling one of
	 * a session inside the sandbox, so ^C and SIGWINCH reach the
	 * foreground job. TIOCSTI stays denied by the seccomp filter. */
	sbx_command_argv(&l->argv, req);
	rc = 0;
out:
	sbx_strv_free(&args);
	return rc;
}

static int bw_health(struct sbx_backend *b, char *msg, size_t msgsz)
{
	struct bwrap *bw = b->priv;
	char net[160];

	if (access(bw->path, X_OK) < 0) {
		snprintf(msg, msgsz, "bwrap missing at %s", bw->path);
		return -SBX_E_BACKEND;
	}
	if (!bw->version[0] || !bw->runs) {
		snprintf(msg, msgsz, "bwrap %s cannot start a sandbox",
			 bw->version[0] ? bw->version : "(unknown version)");
		return -SBX_E_BACKEND;
	}
	/* bwrap works without it: it only says whether network-on-request
	 * commands can run here */
	sbx_backend_net_health(b, net, sizeof(net));
	snprintf(msg, msgsz, "bwrap %s; seccomp on; network on request: %s", bw->version, net);
	return 0;
}

const struct sbx_backend_ops sbx_backend_bwrap_ops = {
    .name = "bwrap",
    .isolation = "user, pid, network, ipc, uts and mount namespaces; no capabilities; seccomp; read-only "
		 "system; only the workspace writable; an unprivileged uid per tenant (as root); rlimits; "
		 "cgroup memory, pids and CPU budgets where the host allows",
    .init = bw_init,
    .fini = bw_fini,
    .prepare = bw_prepare,
    .health = bw_health,
    .net = true,
    .warm = true,
};
