/* The host checks, one table for `sandboxd doctor` and `serve`'s start
 * (server/doctor.h, docs/doctor.md). */
#include "server/doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/xmalloc.h"
#include "routes/policy.h"
#include "routes/tenant_cache.h"
#include "sandbox/backend.h"
#include "sandbox/cgroup.h"
#include "sandbox/diskimg.h"
#include "sandbox/egress/gateway.h"
#include "sandbox/quota.h"
#include "sandbox/registry.h"
#include "sandbox/seccomp.h"
#include "sandbox/workspace.h"
#include "server/cli.h"
#include "server/datadir.h"
#include "store/store.h"

#define CLOCK_YEAR_MIN 2024

extern char **environ;

#define DETAIL(c, ...) snprintf((c)->detail, sizeof(c)->detail, __VA_ARGS__)
#define FIX(c, ...) snprintf((c)->fix, sizeof(c)->fix, __VA_ARGS__)

static void missing(struct srv_check *c, bool refuse)
{
	c->status = SRV_CHECK_MISSING;
	c->refuse = refuse;
}

static void not_needed(struct srv_check *c)
{
	c->status = SRV_CHECK_NOT_NEEDED;
}

/* Whether name is one of the comma/space separated words of list. */
static bool listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *q = list; *q;) {
		q += strspn(q, ", ");
		size_t len = strcspn(q, ", ");
		if (len == n && strncmp(q, name, n) == 0)
			return true;
		q += len;
	}
	return false;
}

/* Run argv quietly (stdin, stdout and stderr /dev/null): its exit status,
 * or -errno when it could not be started. */
static int run_quiet(const char *path, char *const argv[])
{
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int st = 0;
	posix_spawn_file_actions_init(&fa);
	for (int fd = 0; fd < 3; fd++)
		posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", fd ? O_WRONLY : O_RDONLY, 0);
	int rc = posix_spawn(&pid, path, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return -rc;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The nearest existing directory at or above path (a copy). */
static char *existing_parent(const char *path)
{
	char *p = xstrdup(path);
	struct stat st;
	while (stat(p, &st) < 0 || !S_ISDIR(st.st_mode)) {
		char *slash = strrchr(p, '/');
		if (!slash || slash == p) {
			free(p);
			return xstrdup(path[0] == '/' ? "/" : ".");
		}
		*slash = '\0';
	}
	return p;
}

/* ---- clock ---- */

/* Tokens' iat, nbf and exp are judged by it: a clock before the binary
 * was built (its file's mtime; a package clamps it to the release date)
 * or before 2024 is wrong. */
static void check_clock(struct srv_host *h, struct srv_check *c)
{
	(void)h;
	struct timespec now;
	struct tm tm;
	struct stat st;
	char when[40] = "?", built[40] = "?";
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	bool have_built = stat("/proc/self/exe", &st) == 0;
	if (have_built) {
		struct tm bt;
		gmtime_r(&st.st_mtime, &bt);
		strftime(built, sizeof built, "%Y-%m-%d", &bt);
	}
	FIX(c, "set the clock (timedatectl set-ntp true, or date -u -s 'YYYY-MM-DD HH:MM:SS'); "
	       "tokens' iat, nbf and exp are judged by it");
	if (tm.tm_year + 1900 < CLOCK_YEAR_MIN) {
		DETAIL(c, "the clock says %s, before %d", when, CLOCK_YEAR_MIN);
		missing(c, true);
	} else if (have_built && now.tv_sec + 86400 < st.st_mtime) {
		DETAIL(c, "the clock says %s, before this binary was built (%s)", when, built);
		missing(c, true);
	} else {
		DETAIL(c, "%s (this binary: %s)", when, built);
		c->fix[0] = '\0';
	}
}

/* ---- the configuration ---- */

/* `backend` (the default of tenant policies) must be one of `backends`
 * (every backend this server starts), each a name of the registry
 * (sandbox/registry.h: those not on_host start nothing, they are per
 * tenant), one that isolates nothing only with allow-unsafe-local; the
 * configured policy must be well formed. */
static void check_config(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	const struct sbx_backend_kind *dflt = sbx_backend_kind_named(cfg->backend);
	bool unsafe = dflt && !dflt->isolated, bad = false;
	for (const char *q = cfg->backends; *q;) {
		q += strspn(q, ", ");
		size_t len = strcspn(q, ", ");
		const struct sbx_backend_kind *k = sbx_backend_kind_find(q, len);
		bad |= len && !k;
		unsafe |= k && !k->isolated;
		q += len;
	}
	struct route_policy p;
	char err[512] = "", all[96], here[96];
	sbx_backend_kind_list(all, sizeof all, false, false);
	sbx_backend_kind_list(here, sizeof here, false, true);
	missing(c, true);
	if (bad) {
		DETAIL(c, "backends must list some of %s (it is \"%s\")", all, cfg->backends);
		FIX(c, "--set backends=bwrap (or a list of %s)", all);
	} else if (unsafe && !cfg->allow_unsafe_local) {
		DETAIL(c,
		       "--backend local isolates nothing; it needs --allow-unsafe-local (development only)");
		FIX(c, "--backend bwrap, or --allow-unsafe-local on a development machine");
	} else if (!dflt || !dflt->on_host) {
		DETAIL(c, "--backend must be %s (it is \"%s\")", here, cfg->backend);
		FIX(c, "--backend bwrap");
	} else if (!route_policy_backend_offered(cfg, cfg->backend)) {
		DETAIL(c, "backend %s must be one of backends (%s)", cfg->backend, cfg->backends);
		FIX(c, "--set backends=%s,%s", cfg->backend, cfg->backends);
	} else if (route_policy_defaults(cfg, &p, err, sizeof err) < 0) {
		DETAIL(c, "configured policy: %s", err);
		FIX(c, "correct that key in the configuration file or its --set");
	} else {
		route_policy_clear(&p);
		c->status = SRV_CHECK_OK;
		c->refuse = false;
		DETAIL(c, "backend %s, backends %s, network %s, disk-quota %s, uid-base %lld", cfg->backend,
		       cfg->backends, cfg->network ? cfg->network : "none", cfg->disk_quota,
		       (long long)cfg->uid_base);
	}
}

/* ---- TLS ---- */

static X509 *read_cert(const char *path)
{
	BIO *b = BIO_new_file(path, "r");
	X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
	BIO_free(b);
	return x;
}

/* An encrypted key is refused, never asked a passphrase for: OpenSSL's
 * default callback would prompt on the terminal and wait (serve has no
 * option for a passphrase either). */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return -1;
}

static EVP_PKEY *read_key(const char *path)
{
	BIO *b = BIO_new_file(path, "r");
	EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL) : NULL;
	BIO_free(b);
	return k;
}

/* Whether path can be read, as a check's detail when it cannot. */
static bool readable(const char *what, const char *path, struct srv_check *c)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return true;
	}
	int err = errno;
	DETAIL(c, "%s %s: %s", what, path, strerror(err));
	FIX(c, "%s",
	    err == ENOENT ? "give --tls-cert/--tls-key the PEM files' real paths"
			  : "let the server's user read it (chown or chmod the file, e.g. 0640 "
			    "with the server's group)");
	return false;
}

static void check_tls(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	X509 *x = NULL;
	EVP_PKEY *k = NULL;
	if (!cfg->tls_cert && !cfg->tls_key) {
		DETAIL(c, "plain HTTP (no tls-cert and tls-key)");
		not_needed(c);
		return;
	}
	missing(c, true);
	if (!cfg->tls_cert || !cfg->tls_key) {
		DETAIL(c, "TLS needs both --tls-cert and --tls-key (only %s is set)",
		       cfg->tls_cert ? "tls-cert" : "tls-key");
		FIX(c, "give both, or neither for plain HTTP");
		return;
	}
	if (!readable("tls-cert", cfg->tls_cert, c) || !readable("tls-key", cfg->tls_key, c))
		return;
	if (!(x = read_cert(cfg->tls_cert))) {
		DETAIL(c, "tls-cert %s holds no PEM certificate", cfg->tls_cert);
		FIX(c, "point tls-cert at the PEM certificate (-----BEGIN CERTIFICATE-----)");
	} else if (!(k = read_key(cfg->tls_key))) {
		DETAIL(c, "tls-key %s holds no unencrypted PEM private key", cfg->tls_key);
		FIX(c, "point tls-key at the certificate's PEM private key, without a passphrase "
		       "(openssl pkey -in KEY -out KEY.plain)");
	} else if (X509_check_private_key(x, k) != 1) {
		DETAIL(c, "tls-key %s is not the key of tls-cert %s", cfg->tls_key, cfg->tls_cert);
		FIX(c, "give the key the certificate was issued for (openssl x509 -noout -pubkey -in CERT "
		       "and openssl pkey -pubout -in KEY must print the same)");
	} else {
		int days = 0, secs = 0;
		ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notAfter(x));
		bool expired = days < 0 || secs<0, early = X509_cmp_current_time(X509_get0_notBefore(x))> 0;
		char subject[256] = "";
		X509_NAME_oneline(X509_get_subject_name(x), subject, sizeof subject);
		if (expired || early) {
			/* A restart must not turn an expiry into an outage: said, not refused. */
			c->refuse = false;
			DETAIL(c, "tls-cert %s (%s) %s", cfg->tls_cert, subject,
			       expired ? "has expired: clients refuse it" : "is not valid yet");
			FIX(c, "renew the certificate (and check the clock)");
		} else {
			c->status = SRV_CHECK_OK;
			c->refuse = false;
			DETAIL(c, "%s (%s), key matches, expires in %d days", cfg->tls_cert, subject, days);
		}
	}
	X509_free(x);
	EVP_PKEY_free(k);
}

/* ---- the tenants' uids ---- */

static void check_uids(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	char err[768] = "";
	struct sbx_uids_config uc = {.uid_base = cfg->uid_base};
	long long first = (long long)cfg->uid_base, last = first + 65535;
	int rc = sbx_uids_setup(&h->uids, &uc, err, sizeof err);
	/* the server's own user (passwd), not $USER: sudo and su keep another's */
	const char *user = h->uids.user[0] ? h->uids.user : "USER";
	if (rc < 0) {
		DETAIL(c, "cannot give each tenant a uid of its own: %s", err);
		FIX(c,
		    "give the server's user a range holding uid-base (usermod --add-subuids %lld-%lld "
		    "--add-subgids %lld-%lld %s; apt-get install uidmap), or --set uid-base=N inside "
		    "its range, or run as root",
		    first, last, first, last, user);
		missing(c, true);
		return;
	}
	h->uids_ready = true;
	if (h->uids.mode == SBX_UIDS_SHARED && !cfg->allow_shared_uid) {
		DETAIL(c,
		       "shared: every tenant's commands run as the server's uid %u (%s); a second "
		       "tenant is not served",
		       (unsigned)h->uids.outer_uid, h->uids.why_shared);
		FIX(c,
		    "usermod --add-subuids %lld-%lld --add-subgids %lld-%lld %s (apt-get install "
		    "uidmap), or run as root; allow-shared-uid=true serves several tenants anyway",
		    first, last, first, last, user);
		missing(c, false);
		return;
	}
	DETAIL(c, "%s", h->uids.detail);
}

/* The uid range is this server's alone: an abstract unix socket named
 * after the uid-base, bound (and listening, so a second server can ask
 * who holds it) before any sweep kills what an earlier run left in the
 * range (server/leftovers.h), and held until the process ends (kill -9
 * included; no child inherits it: SOCK_CLOEXEC, and a command's child
 * closes every fd not its own first). Two servers with one uid-base would
 * kill each other's commands at start and give their tenants the same
 * uids. Whatever the cgroup driver: on cgroup v2 the driver's own claim
 * is below the server's group, which differs between two units, and
 * without cgroups there is none. An abstract name needs no writable path
 * (units with ProtectSystem=strict, read-only container roots) and spans
 * what the sweep can reach: a network namespace is the host's for units,
 * a container's own for a container, whose /proc shows its own
 * processes. A name held by a process other than a root one is named as
 * such (a local user squatting it). Root with a uid per tenant only: in
 * subuid mode the range is the user's own, shared-uid mode kills
 * nothing. Doctor binds it and lets it go. */
static void check_uid_range(struct srv_host *h, struct srv_check *c)
{
	long long base = (long long)h->cfg->uid_base;
	if (!h->uids_ready || h->uids.mode != SBX_UIDS_ROOT) {
		DETAIL(c, "%s",
		       !h->uids_ready			 ? "no uids set up (see uids)"
		       : h->uids.mode == SBX_UIDS_SUBUID ? "subuid mode: the range is this user's own"
							 : "shared uid: no range");
		not_needed(c);
		return;
	}
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int n = snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "sandboxd/uid-base/%lld", base);
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, len) == 0 && listen(fd, 4) == 0) {
		if (h->serving)
			h->uids_lock = fd;
		else
			close(fd);
		DETAIL(c, "uids %lld.. are %s (claim @%s)", base,
		       h->serving ? "this server's" : "free: no server holds them", sa.sun_path + 1);
		return;
	}
	int err = errno;
	if (fd >= 0)
		close(fd);
	missing(c, true);
	if (fd < 0 || err != EADDRINUSE) {
		DETAIL(c, "cannot claim uid-base %lld: %s", base, strerror(err));
		FIX(c, "let the server make unix sockets (no RestrictAddressFamilies without AF_UNIX)");
		return;
	}
	/* Who holds it: the listener's credentials, as it listened. Not
	 * blocking: a holder whose backlog is full (one that accepts nothing)
	 * would keep connect waiting for ever. */
	struct ucred who = {0};
	socklen_t wl = sizeof who;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	bool known = fd >= 0 && connect(fd, (struct sockaddr *)&sa, len) == 0 &&
		     getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &who, &wl) == 0;
	if (fd >= 0)
		close(fd);
	if (known && who.uid != 0) {
		DETAIL(c,
		       "uid-base %lld's claim (the abstract socket @%s) is held by pid %ld, uid %u, not a "
		       "root sandboxd",
		       base, sa.sun_path + 1, (long)who.pid, (unsigned)who.uid);
		FIX(c, "stop that process, or give this server another --set uid-base=N");
	} else {
		DETAIL(c,
		       "another sandboxd on this host runs with uid-base %lld%s (its tenants' uids and "
		       "cgroups)",
		       base, known ? "" : " (its claim is held)");
		if (known)
			FIX(c,
			    "that server is pid %ld: stop it first (systemctl stop sandboxd), or give each "
			    "server its own --set uid-base=N",
			    (long)who.pid);
		else
			FIX(c, "give each server its own --set uid-base=N");
	}
}

/* ---- the data directory ---- */

void srv_check_reach(const char *dir, uid_t uid, gid_t gid, const char *who, struct srv_check *c)
{
	char blocked[4096] = "";
	int r = sbx_workspace_reachable(dir, uid, gid, blocked, sizeof blocked);
	if (r == -EACCES) {
		struct stat st = {0};
		stat(blocked, &st);
		DETAIL(
		    c,
		    "%.200s cannot reach %.400s: %.400s (mode %04o, owner %u) is not searchable by that uid",
		    who, dir, blocked, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
		FIX(c,
		    "chmod o+x %.600s (0711 is enough), or put --data-dir where every parent directory is "
		    "searchable",
		    blocked);
		missing(c, true);
	} else if (r < 0) {
		DETAIL(c, "cannot check that %s reaches %s: %s", who, dir, sbx_strerror(r));
		FIX(c, "see the error");
		missing(c, false);
	}
}

/* What the data directory's filesystem means for it ("" when nothing). */
static const char *fs_note(long type, const char **name)
{
	switch (type) {
	case EXT4_SUPER_MAGIC:
		*name = "ext4";
		return "";
	case XFS_SUPER_MAGIC:
		*name = "xfs";
		return "";
	case BTRFS_SUPER_MAGIC:
		*name = "btrfs";
		return "; no project quotas on btrfs";
	case TMPFS_MAGIC:
		*name = "tmpfs";
		return "; warning: tmpfs is memory, emptied at reboot (the store and every workspace), "
		       "and has no project quotas";
	case OVERLAYFS_SUPER_MAGIC:
		*name = "overlayfs";
		return "; warning: a container's overlay goes with the container: mount a volume there";
	case NFS_SUPER_MAGIC:
		*name = "nfs";
		return "; warning: SQLite's locks are unreliable on NFS: keep the store on a local disk";
	default:
		*name = "other";
		return "";
	}
}

/* The first directory on the way to path (path included) that this
 * process cannot search, into out ("" when there is none). */
static void first_unsearchable(const char *path, char *out, size_t outsz)
{
	char *p = xstrdup(path);
	out[0] = '\0';
	for (char *q = p + 1;; q++) {
		if (*q != '/' && *q != '\0')
			continue;
		char saved = *q;
		*q = '\0';
		if (access(p, X_OK) < 0) {
			snprintf(out, outsz, "%s", p);
			break;
		}
		*q = saved;
		if (saved == '\0')
			break;
	}
	free(p);
}

/* The data directory cannot even be looked at (not "does not exist"):
 * a directory on the way is not searchable by the server's uid. */
static bool data_dir_hidden(const struct sbx_config *cfg, struct srv_check *c)
{
	struct stat st;
	if (stat(cfg->data_dir, &st) == 0 || errno == ENOENT || errno == ENOTDIR)
		return false;
	int err = errno;
	char blocked[2048];
	first_unsearchable(cfg->data_dir, blocked, sizeof blocked);
	if (!blocked[0] || stat(blocked, &st) < 0)
		memset(&st, 0, sizeof st);
	DETAIL(c,
	       "cannot look at the data directory %.400s: %s%s%.400s (mode %04o, owner %u) is not "
	       "searchable by the server's uid %u",
	       cfg->data_dir, strerror(err), blocked[0] ? ": " : "", blocked[0] ? blocked : "?",
	       (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, (unsigned)geteuid());
	FIX(c,
	    "chmod o+x %.600s (0711 is enough), or run the server (and doctor) as a user that can reach "
	    "the data directory",
	    blocked[0] ? blocked : cfg->data_dir);
	missing(c, true);
	return true;
}

static void check_data_dir(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	if (data_dir_hidden(cfg, c))
		return;
	char *at = existing_parent(cfg->data_dir);
	bool exists = strcmp(at, cfg->data_dir) == 0;
	struct statfs sfs = {0};
	const char *fsname = "?";
	const char *note = statfs(at, &sfs) == 0 ? fs_note((long)sfs.f_type, &fsname) : "";
	/* serve sets a data directory of its own to 0711 (server/datadir.c):
	 * then the server can write it, and the way to it is what the tenants'
	 * uids must search. */
	struct stat own;
	bool narrowed =
	    exists && stat(at, &own) == 0 && own.st_uid == geteuid() && (own.st_mode & 0777) != 0711;
	char mode[48] = "";
	if (narrowed)
		snprintf(mode, sizeof mode, " (serve sets its mode %04o to 0711)",
			 (unsigned)(own.st_mode & 0777));
	if (!narrowed && access(at, W_OK | X_OK) < 0 && (!exists || access(cfg->db_path, R_OK | W_OK) < 0)) {
		DETAIL(c, "%s %s is not writable by the server's uid %u",
		       exists ? "the data directory" : "its parent", at, (unsigned)geteuid());
		FIX(c, "%s (or run the server as that directory's owner)",
		    exists ? "chown the data directory to the server's user"
			   : "mkdir -p the data directory and chown it to the server's user");
		missing(c, true);
		free(at);
		return;
	}
	if (h->uids_ready && h->uids.mode != SBX_UIDS_SHARED) {
		char who[96];
		char *way = xstrdup(at), *slash = strrchr(way, '/');
		if (narrowed && slash)
			slash[slash == way ? 1 : 0] = '\0';
		snprintf(who, sizeof who, "the tenants' uids (uid-base %lld)", (long long)cfg->uid_base);
		srv_check_reach(narrowed ? way : at, (uid_t)cfg->uid_base, (gid_t)cfg->uid_base, who, c);
		free(way);
		if (c->status == SRV_CHECK_MISSING) {
			free(at);
			return;
		}
	}
	if (exists)
		DETAIL(c, "%s on %s, reachable by the tenants' uids%s%s", at, fsname, mode, note);
	else
		DETAIL(c,
		       "%s does not exist yet: serve makes it (0711) in %s, on %s, reachable by the "
		       "tenants' uids%s",
		       cfg->data_dir, at, fsname, note);
	free(at);
}

/* ---- disk quotas ---- */

/* Image mode, serving: the images are mounted in a mount namespace of the
 * server's own, so that a crash (SIGKILL, OOM) releases them with the
 * process instead of leaving loop mounts on the host (sandbox/diskimg.h).
 * What earlier runs of this data directory left on the host goes first.
 * Before any thread: a thread made before would stay in the host's. */
static void own_mount_ns(struct srv_host *h, struct srv_check *c)
{
	char why[512] = "";
	int swept = 0;
	if (sbx_diskimg_own_ns(h->cfg->data_dir, &h->images_lock, &swept, why, sizeof why) < 0) {
		DETAIL(c, "disk-quota=image: %s", why);
		FIX(c, "one server per data directory: stop the other one");
		missing(c, true);
		return;
	}
	if (swept > 0)
		log_msg("info",
			"unmounted %d disk images an earlier run of this data directory left mounted on "
			"the host",
			swept);
}

/* disk-quota: project quotas where the workspaces' filesystem enforces
 * them, else (auto) a filesystem image per tenant where loop devices
 * work, else none; an explicit mode that cannot work stops the start. */
static void check_disk_quota(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	const char *want = cfg->disk_quota;
	bool is_auto = strcmp(want, "auto") == 0, bytes = cfg->tenant_disk_quota_bytes > 0;
	bool project = strcmp(want, "project") == 0, image = strcmp(want, "image") == 0;
	if (!is_auto && !project && !image && strcmp(want, "none") != 0) {
		DETAIL(c, "disk-quota must be auto, project, image or none (it is \"%s\")", want);
		FIX(c, "--set disk-quota=auto");
		missing(c, true);
		return;
	}
	if (h->serving && srv_prepare_data_dir(cfg) < 0) {
		DETAIL(c, "cannot prepare the data directory %s (said above)", cfg->data_dir);
		FIX(c, "see data-dir");
		missing(c, true);
		return;
	}
	char *tenants = xasprintf("%s/tenants", cfg->data_dir), *at = existing_parent(tenants);
	int rc = sbx_quota_probe(&h->quota, at);
	if (rc < 0)
		log_msg("warn", "disk quotas: cannot look at %s: %s", at, sbx_strerror(rc));
	free(tenants);
	free(at);
	if (strcmp(want, "none") != 0 && !project)
		sbx_diskimg_probe(&h->diskimg);
	enum disk_mode m = DISK_NONE;
	if ((is_auto || project) && sbx_quota_enforced(h->quota))
		m = DISK_PROJECT;
	else if ((is_auto || image) && sbx_diskimg_usable(h->diskimg) && bytes)
		m = DISK_IMAGE;
	h->disk_mode = m;
	if (m != DISK_NONE) {
		DETAIL(c, "%s; each tenant %lld bytes and %lld inodes",
		       m == DISK_PROJECT ? sbx_quota_detail(h->quota) : sbx_diskimg_detail(h->diskimg),
		       (long long)cfg->tenant_disk_quota_bytes, (long long)cfg->tenant_disk_quota_inodes);
		if (m == DISK_IMAGE && h->serving)
			own_mount_ns(h, c);
		return;
	}
	if (strcmp(want, "none") == 0 || (is_auto && !bytes)) {
		DETAIL(c, "%s",
		       is_auto ? "tenant-disk-quota-bytes=0: no disk quota asked for" : "disk-quota=none");
		not_needed(c);
		return;
	}
	const char *proj_fix = "put data-dir on ext4 made with -O quota,project and mounted with prjquota "
			       "(XFS: pquota), as root";
	const char *img_fix = "run as root with loop devices and e2fsprogs (see loop-devices, mkfs.ext4)";
	if (!is_auto) {
		DETAIL(c, "disk-quota=%s cannot work here: %s", want,
		       project ? sbx_quota_detail(h->quota)
		       : bytes ? sbx_diskimg_detail(h->diskimg)
			       : "tenant-disk-quota-bytes is 0");
		FIX(c, "%s, or --set disk-quota=auto",
		    project ? proj_fix
		    : bytes ? img_fix
			    : "set tenant-disk-quota-bytes");
		missing(c, true);
		return;
	}
	DETAIL(c,
	       "no per-tenant disk quota (project quotas %s; %s); enforced instead: fsize-limit-bytes "
	       "per file, max-upload-bytes per upload, and store-reserve-bytes (%lld) kept for the store",
	       sbx_quota_detail(h->quota), sbx_diskimg_detail(h->diskimg),
	       (long long)cfg->store_reserve_bytes);
	FIX(c, "%s; or %s; or --set disk-quota=none to accept none", proj_fix, img_fix);
	missing(c, false);
}

/* Loop devices and mkfs.ext4 matter where images may be the choice:
 * disk-quota=image, or auto with a quota and no project quotas. */
static bool images_wanted(const struct srv_host *h)
{
	const struct sbx_config *cfg = h->cfg;
	return strcmp(cfg->disk_quota, "image") == 0 ||
	       (strcmp(cfg->disk_quota, "auto") == 0 && cfg->tenant_disk_quota_bytes > 0 &&
		!sbx_quota_enforced(h->quota));
}

static void images_not_needed(const struct srv_host *h, struct srv_check *c)
{
	DETAIL(c, "no disk images: %s",
	       h->disk_mode == DISK_PROJECT ? "project quotas are in force"
					    : "disk-quota or its bytes say none");
	not_needed(c);
}

static void check_loop(struct srv_host *h, struct srv_check *c)
{
	if (!images_wanted(h)) {
		images_not_needed(h, c);
		return;
	}
	FIX(c, "modprobe loop (a container needs /dev/loop-control and the /dev/loopN devices passed in, "
	       "and CAP_SYS_ADMIN)");
	int fd = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		DETAIL(c, "/dev/loop-control: %s", strerror(errno));
		if (errno == EACCES || errno == EPERM)
			FIX(c, "run the server as root (loop devices and mounts need it)");
		missing(c, false);
		return;
	}
	int n = ioctl(fd, LOOP_CTL_GET_FREE);
	int err = errno;
	close(fd);
	if (n < 0) {
		DETAIL(c, "/dev/loop-control gives no free loop device: %s", strerror(err));
		FIX(c, "free loop devices (losetup -D detaches unused ones) or raise max_loop");
		missing(c, false);
		return;
	}
	DETAIL(c, "/dev/loop-control gives a free loop device (/dev/loop%d)", n);
	c->fix[0] = '\0';
}

static void check_mkfs(struct srv_host *h, struct srv_check *c)
{
	if (!images_wanted(h)) {
		images_not_needed(h, c);
		return;
	}
	static const char *const where[] = {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4", "/usr/bin/mkfs.ext4"};
	for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
		char *argv[] = {(char *)"mkfs.ext4", (char *)"-V", NULL};
		if (access(where[i], X_OK) < 0)
			continue;
		int st = run_quiet(where[i], argv);
		if (st == 0) {
			DETAIL(c, "%s runs (e2fsprogs)", where[i]);
			return;
		}
		DETAIL(c, "%s -V fails (status %d)", where[i], st);
		FIX(c, "apt-get install --reinstall e2fsprogs");
		missing(c, false);
		return;
	}
	DETAIL(c, "mkfs.ext4 is not installed");
	FIX(c, "apt-get install e2fsprogs");
	missing(c, false);
}

/* ---- the store ---- */

static void check_store(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	char err[512] = "";
	struct stat st;
	if (!h->serving && stat(cfg->db_path, &st) < 0) {
		int why = errno;
		if (why == ENOENT) {
			DETAIL(c, "%s does not exist yet: serve makes it, at schema version %d", cfg->db_path,
			       store_known_version());
			return;
		}
		DETAIL(c, "cannot look at %s: %s", cfg->db_path, strerror(why));
		FIX(c, "see data-dir: the server's user must reach and write the data directory");
		missing(c, true);
		return;
	}
	int rc = store_open(&h->store, cfg->db_path, h->serving, err, sizeof err);
	if (rc == 0) {
		DETAIL(c, "%s at schema version %d (this binary's)", cfg->db_path,
		       store_schema_version(h->store));
		return;
	}
	if (rc == -ESTALE) {
		DETAIL(c, "%s: %s; serve applies the pending migrations at start", cfg->db_path, err);
		return;
	}
	DETAIL(c, "%s: %s", cfg->db_path, *err ? err : sbx_strerror(rc));
	FIX(c, "%s",
	    rc == -EPROTO ? "run a sandboxd at least as new as the one that last migrated it"
			  : "make it a sandboxd database the server's user can read and write "
			    "(ls -l it; move a damaged one aside and restore a backup)");
	missing(c, true);
}

/* ---- the stored tenants' uids ---- */

/* What serve refuses once the store is open (route_uids_check_start):
 * tenants that would share the server's uid without allow-shared-uid, a
 * tenant whose uid lies beyond the subordinate range. */
static void check_tenants(struct srv_host *h, struct srv_check *c)
{
	struct stat st;
	if (!h->uids_ready) {
		DETAIL(c, "not checked: no uids set up (see uids)");
		FIX(c, "see uids");
		missing(c, false);
		return;
	}
	if (!h->store) {
		bool none = stat(h->cfg->db_path, &st) < 0 && errno == ENOENT;
		DETAIL(c, "%s",
		       none ? "no tenants yet"
			    : "not checked: the store was not read (see store; serve checks them once it "
			      "has opened it)");
		return;
	}
	struct app *a = xcalloc(1, sizeof *a);
	char err[1024] = "";
	a->cfg = h->cfg;
	a->store = h->store;
	a->uids = &h->uids;
	int rc = route_uids_check_start(a, err, sizeof err);
	free(a);
	if (rc < 0) {
		char *fix = strstr(err, ". Fix: ");
		if (fix) {
			*fix = '\0';
			FIX(c, "%s", fix + strlen(". Fix: "));
		} else {
			FIX(c, "see the error");
		}
		DETAIL(c, "%s", err);
		missing(c, true);
		return;
	}
	struct store_tenant *v = NULL;
	size_t n = 0;
	if (store_tenant_list(h->store, &v, &n) == 0)
		store_tenants_free(v, n);
	DETAIL(c, "%zu tenants; %s", n,
	       h->uids.mode == SBX_UIDS_SHARED ? "all run as the server's uid (shared)"
					       : "each runs as a uid of its own");
}

/* ---- backends, user namespaces, seccomp, cgroups ---- */

/* Every backend of `backends` that starts commands here, once: the first
 * serving one claims the server's cgroup root for all; doctor claims
 * nothing (another server may hold it) and sweeps nothing. */
static int make_backends(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	/* cgroups are host-wide: the uid range (distinct per server on a
	 * host) names this server's own group. */
	char cgroup_root[64];
	snprintf(cgroup_root, sizeof cgroup_root, "sandboxd/%lld", (long long)cfg->uid_base);
	for (const char *q = cfg->backends; *q;) {
		q += strspn(q, ", ");
		size_t len = strcspn(q, ", ");
		char name[16];
		snprintf(name, sizeof name, "%.*s", (int)len, q);
		const struct sbx_backend_kind *k = sbx_backend_kind_find(q, len);
		q += len;
		/* remote and ssh are tenant-level (routes/provider.h): nothing to start. */
		bool started = !len || (k && !k->on_host);
		for (size_t i = 0; i < h->nbackends; i++)
			started |= strcmp(sbx_backend_name(h->backends[i]), name) == 0;
		if (started || h->nbackends == SRV_BACKENDS_MAX)
			continue;
		struct sbx_backend_config bc = {.name = name,
						.use_cgroups = cfg->use_cgroups,
						.cgroup_root = cgroup_root,
						.cgroup_shared = !h->serving || h->nbackends > 0,
						.warm_per_tenant = h->serving ? (unsigned)cfg->warm_pool : 0,
						.warm_idle_ms = (unsigned)cfg->warm_idle_s * 1000,
						.probe_uid = h->uids_ready ? sbx_uids_probe_id(&h->uids) : 0};
		struct sbx_backend *b = NULL;
		int rc = sbx_backend_new(&b, &bc);
		if (rc < 0) {
			if (rc == -EBUSY) {
				DETAIL(
				    c,
				    "another sandboxd on this host runs with uid-base %lld (its cgroups %s "
				    "and its tenants' uids)",
				    (long long)cfg->uid_base, cgroup_root);
				FIX(c, "give each server its own --set uid-base=N");
			} else if (rc == -ENOENT) {
				DETAIL(c, "backend %s unavailable: bwrap is not installed", name);
				FIX(c, "apt-get install bubblewrap");
			} else {
				DETAIL(c, "backend %s unavailable: %s", name, sbx_strerror(rc));
				FIX(c, "%s",
				    rc == -EACCES ? "let the server's user run /usr/bin/bwrap"
						  : "see the error");
			}
			missing(c, true);
			return rc;
		}
		h->backends[h->nbackends++] = b;
		if (strcmp(cfg->backend, name) == 0)
			h->backend = b;
	}
	return 0;
}

static struct sbx_backend *find_backend(const struct srv_host *h, const char *name)
{
	for (size_t i = 0; i < h->nbackends; i++)
		if (strcmp(sbx_backend_name(h->backends[i]), name) == 0)
			return h->backends[i];
	return NULL;
}

static void check_bwrap(struct srv_host *h, struct srv_check *c)
{
	if (h->nbackends == 0 && h->backends_rc == 0)
		h->backends_rc = make_backends(h, c);
	if (h->backends_rc < 0)
		return;
	if (!listed(h->cfg->backends, "bwrap")) {
		DETAIL(c, "backends=%s", h->cfg->backends);
		not_needed(c);
		return;
	}
	char msg[256] = "";
	sbx_backend_health(find_backend(h, "bwrap"), msg, sizeof msg);
	DETAIL(c, "%s", msg);
}

/* The kernel's knobs that forbid unprivileged user namespaces, as a fix. */
static void userns_fix(struct srv_check *c)
{
	static const struct {
		const char *path, *bad, *fix;
	} knob[] = {
	    {"/proc/sys/kernel/unprivileged_userns_clone", "0",
	     "sysctl -w kernel.unprivileged_userns_clone=1"},
	    {"/proc/sys/user/max_user_namespaces", "0", "sysctl -w user.max_user_namespaces=15000"},
	    {"/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
	     "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile for bwrap)"},
	};
	for (size_t i = 0; i < sizeof knob / sizeof knob[0]; i++) {
		char v[32] = "";
		FILE *f = fopen(knob[i].path, "re");
		if (!f)
			continue;
		if (fgets(v, sizeof v, f) && strncmp(v, knob[i].bad, strlen(knob[i].bad)) == 0 &&
		    (v[strlen(knob[i].bad)] == '\n' || v[strlen(knob[i].bad)] == '\0')) {
			fclose(f);
			FIX(c, "%s (and in /etc/sysctl.d/ to keep it)", knob[i].fix);
			return;
		}
		fclose(f);
	}
	FIX(c, "allow user namespaces: in a container run it with --security-opt seccomp=unconfined "
	       "--security-opt apparmor=unconfined (or --privileged); on a host check "
	       "user.max_user_namespaces and the LSM's policy for bwrap");
}

/* bwrap's start probe: a real sandbox (`--unshare-all --unshare-user`,
 * /bin/true) as an unprivileged uid. */
static void check_userns(struct srv_host *h, struct srv_check *c)
{
	struct sbx_backend *b = find_backend(h, "bwrap");
	char msg[256] = "";
	if (!b) {
		DETAIL(c, "%s",
		       h->backends_rc < 0 ? "not checked: bwrap is unavailable" : "no bwrap backend");
		if (h->backends_rc < 0) {
			FIX(c, "see bwrap");
			missing(c, false);
		} else {
			not_needed(c);
		}
		return;
	}
	if (sbx_backend_health(b, msg, sizeof msg) == 0) {
		DETAIL(c, "bwrap made a sandbox with user, pid, network, ipc, uts and mount namespaces");
		return;
	}
	DETAIL(c, "%s: user namespaces are not allowed here", msg);
	userns_fix(c);
	missing(c, true);
}

/* The filter commands get, loaded for real in a child (no_new_privs,
 * SECCOMP_MODE_FILTER) as bwrap --seccomp loads it. */
/* Whether bwrap is wanted here: made, or listed and failed (the checks
 * that do not need it made still run then, and say what they find). */
static bool bwrap_wanted(const struct srv_host *h)
{
	return find_backend(h, "bwrap") || (h->backends_rc < 0 && listed(h->cfg->backends, "bwrap"));
}

static void check_seccomp(struct srv_host *h, struct srv_check *c)
{
	if (!bwrap_wanted(h)) {
		DETAIL(c, "no bwrap backend");
		not_needed(c);
		return;
	}
	void *bpf = NULL;
	size_t len = 0;
	int rc = sbx_seccomp_build(&bpf, &len);
	if (rc < 0) {
		DETAIL(c, "cannot build the filter with libseccomp: %s", sbx_strerror(rc));
		FIX(c, "apt-get install libseccomp2");
		missing(c, true);
		return;
	}
	struct sock_fprog prog = {.len = (unsigned short)(len / sizeof(struct sock_filter)), .filter = bpf};
	pid_t pid = fork();
	if (pid == 0) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
			_exit(errno & 0x7f);
		_exit(0);
	}
	int st = 0;
	while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	free(bpf);
	int err = pid < 0 ? errno : WIFEXITED(st) ? WEXITSTATUS(st) : EINTR;
	if (err) {
		DETAIL(c, "the kernel refuses the filter: %s", strerror(err));
		FIX(c, "a kernel with CONFIG_SECCOMP_FILTER (every Debian kernel has it); in a container, "
		       "do not forbid prctl(PR_SET_SECCOMP)");
		missing(c, true);
		return;
	}
	DETAIL(c, "the commands' filter (%zu instructions) loads", len / sizeof(struct sock_filter));
}

/* Fail closed (security.md item 10): with use-cgroups=true (the
 * default), a server whose commands would run without cgroups, or
 * without a controller a configured default limit or budget needs, does
 * not start: the operator is told what is missing and the fix, unless
 * they said --allow-uncontained. use-cgroups=false is the operator's own
 * opt-out. Either way it then serves degraded, said in the log, /readyz
 * and /metrics, never `ready`. */
static void check_cgroups(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	char why[1024];
	if (h->backends_rc < 0 || h->nbackends == 0) {
		DETAIL(c, "%s",
		       h->backends_rc < 0 ? "not checked: no backend (see bwrap)"
					  : "no backend starts commands here");
		if (h->backends_rc < 0) {
			FIX(c, "see bwrap");
			missing(c, false);
		} else {
			not_needed(c);
		}
		return;
	}
	if (!cfg->use_cgroups) {
		DETAIL(c,
		       "use-cgroups=false: commands run with rlimits only (degraded, the operator's choice)");
		not_needed(c);
		return;
	}
	if (route_containment_describe(cfg, h->backends, h->nbackends, h->disk_mode == DISK_IMAGE, why,
				       sizeof why)) {
		const struct sbx_cgroup_caps *k = sbx_cgroup_caps();
		DETAIL(c,
		       "cgroup v%d, writable, controllers:%s%s%s%s%s: every configured limit and budget is "
		       "enforced",
		       k->version, k->memory ? " memory" : "", k->pids ? " pids" : "", k->cpu ? " cpu" : "",
		       k->io ? " io" : "", k->psi ? " (PSI)" : "");
		return;
	}
	DETAIL(c, "the configured limits and budgets cannot be enforced here: %s", why);
	FIX(c, "run the server as root where it can write its own cgroup subtree (cgroup v2: a writable "
	       "cgroup2 mount at /sys/fs/cgroup with the memory, pids and cpu controllers delegated to it: "
	       "systemd Delegate=yes, a container with its own cgroup namespace and /sys/fs/cgroup mounted "
	       "read-write; cgroup v1: writable memory, pids and cpu hierarchies), or set the budget that "
	       "needs a missing controller to 0, or start anyway with --allow-uncontained "
	       "(allow-uncontained=true: /readyz then says degraded)");
	missing(c, !cfg->allow_uncontained);
}

/* ---- network on request ---- */

/* Whether a command may ask for network: the configured default policy
 * gives it, or a tenant's stored policy does (read from the store when
 * it could be opened; else assumed). Policies changed later through the
 * API are not foreseen: doctor says what the configuration and the
 * tenants ask now. */
static bool network_wanted(struct srv_host *h, char *why, size_t whysz)
{
	const struct sbx_config *cfg = h->cfg;
	if (cfg->network && strcmp(cfg->network, "none") != 0) {
		snprintf(why, whysz, "network=%s", cfg->network);
		return true;
	}
	if (!h->store) {
		struct stat st;
		bool none = stat(cfg->db_path, &st) < 0 && errno == ENOENT;
		snprintf(why, whysz, "%s",
			 none ? "network=none and no tenants yet"
			      : "the tenants' policies could not be read (see store)");
		return !none;
	}
	struct store_tenant *v = NULL;
	size_t n = 0;
	bool want = false;
	snprintf(why, whysz, "network=none and no tenant's policy gives network");
	if (store_tenant_list(h->store, &v, &n) < 0)
		return false;
	for (size_t i = 0; i < n && !want; i++) {
		struct route_policy p;
		if (route_policy_load(h->store, cfg, v[i].name, &p, NULL, NULL) < 0)
			continue;
		if (p.network) {
			want = true;
			snprintf(why, whysz, "tenant %s's policy gives network %s", v[i].name, p.network);
		}
		route_policy_clear(&p);
	}
	store_tenants_free(v, n);
	return want;
}

static bool network_check_needed(struct srv_host *h, struct srv_check *c)
{
	char why[400];
	bool want = network_wanted(h, why, sizeof why);
	if (!want || !bwrap_wanted(h)) {
		DETAIL(c, "%s", want ? "no bwrap backend (the only one that gives network)" : why);
		not_needed(c);
		return false;
	}
	return true;
}

/* The real thing: a probe namespace made the way the egress gateway makes
 * them (netlink, libnftables), and a route out of the server's own. */
static void check_network(struct srv_host *h, struct srv_check *c)
{
	if (!network_check_needed(h, c))
		return;
	char msg[256] = "";
	if (!find_backend(h, "bwrap")) {
		DETAIL(c, "not checked: bwrap is unavailable");
		FIX(c, "see bwrap");
		missing(c, false);
		return;
	}
	if (sbx_backend_net_health(find_backend(h, "bwrap"), msg, sizeof msg) == 0) {
		DETAIL(c, "egress gateway: %s", msg);
		return;
	}
	DETAIL(c, "%s: commands with network are refused (503)", msg);
	FIX(c, "the server must run as root, on a kernel with network namespaces and nf_tables (modprobe "
	       "nf_tables), with a route out of its own namespace");
	missing(c, false);
}

/* ---- the table ---- */

static const struct {
	const char *name;
	enum srv_phase phase;
	void (*run)(struct srv_host *h, struct srv_check *c);
} checks[] = {
    {"clock", SRV_PHASE_CONFIG, check_clock},
    {"config", SRV_PHASE_CONFIG, check_config},
    {"tls", SRV_PHASE_CONFIG, check_tls},
    {"uids", SRV_PHASE_UIDS, check_uids},
    {"data-dir", SRV_PHASE_UIDS, check_data_dir},
    {"disk-quota", SRV_PHASE_STORE, check_disk_quota},
    {"loop-devices", SRV_PHASE_STORE, check_loop},
    {"mkfs.ext4", SRV_PHASE_STORE, check_mkfs},
    {"store", SRV_PHASE_STORE, check_store},
    {"tenants", SRV_PHASE_STORE, check_tenants},
    {"uid-range", SRV_PHASE_HOST, check_uid_range},
    {"bwrap", SRV_PHASE_HOST, check_bwrap},
    {"user-namespaces", SRV_PHASE_HOST, check_userns},
    {"seccomp", SRV_PHASE_HOST, check_seccomp},
    {"cgroups", SRV_PHASE_HOST, check_cgroups},
    {"network", SRV_PHASE_HOST, check_network},
};

#define NCHECKS (sizeof checks / sizeof checks[0])

void srv_host_init(struct srv_host *h, struct sbx_config *cfg, bool serving)
{
	memset(h, 0, sizeof *h);
	h->cfg = cfg;
	h->serving = serving;
	h->uids_lock = -1;
	h->images_lock = -1;
}

void srv_host_fini(struct srv_host *h)
{
	for (size_t i = 0; i < h->nbackends; i++)
		sbx_backend_free(&h->backends[i]);
	h->nbackends = 0;
	h->backend = NULL;
	sbx_egress_gateway_free(&h->egress);
	store_close(&h->store);
	/* After every request and command: the mounts go now (a command of
	 * a cancelled exec still running keeps its image until it ends). */
	sbx_diskimg_detach_all(h->diskimg);
	sbx_diskimg_free(&h->diskimg);
	if (h->images_lock >= 0)
		close(h->images_lock);
	if (h->uids_lock >= 0)
		close(h->uids_lock);
	h->images_lock = h->uids_lock = -1;
	sbx_quota_free(&h->quota);
}

size_t srv_checks_run(struct srv_host *h, enum srv_phase phase, struct srv_check *out, size_t max)
{
	size_t n = 0;
	bool serving = h->serving, refused = false;
	for (size_t i = 0; i < NCHECKS && n < max; i++) {
		if (checks[i].phase != phase)
			continue;
		struct srv_check *c = &out[n++];
		memset(c, 0, sizeof *c);
		c->name = checks[i].name;
		/* serve stops at the end of a phase with a refusal: the rest of
		 * it only looks, as doctor does (no store migrated, no mount
		 * namespace, no cgroup claimed after the uid range's refusal). */
		h->serving = serving && !refused;
		checks[i].run(h, c);
		refused |= c->status == SRV_CHECK_MISSING && c->refuse;
	}
	h->serving = serving;
	return n;
}

int srv_checks_start(struct srv_host *h, enum srv_phase phase)
{
	struct srv_check got[NCHECKS];
	size_t n = srv_checks_run(h, phase, got, NCHECKS);
	int status = 0;
	for (size_t i = 0; i < n; i++) {
		const struct srv_check *c = &got[i];
		if (c->status != SRV_CHECK_MISSING)
			continue;
		if (c->refuse) {
			fprintf(stderr, "sandboxd: refusing to start: %s: %s.\nFix: %s\n", c->name, c->detail,
				c->fix);
			status = strcmp(c->name, "config") == 0 ? 2 : status ? status : 1;
		} else {
			log_msg("warn", "%s: %s; fix: %s (sandboxd doctor lists every check)", c->name,
				c->detail, c->fix);
		}
	}
	return status;
}

/* ---- sandboxd doctor ---- */

/* A detail as a JSON string: paths need not be UTF-8 (jansson refuses
 * those, and the check would vanish from the list), and a cut detail may
 * end inside a character. */
static json_t *json_text(const char *s)
{
	size_t n = 0;
	char *clean = utf8_sanitize(s, strlen(s), &n);
	json_t *j = json_stringn(clean, n);
	free(clean);
	return j;
}

static const char *status_name(enum srv_check_status s)
{
	return s == SRV_CHECK_OK ? "ok" : s == SRV_CHECK_MISSING ? "missing" : "not needed";
}

/* The JSON of a doctor that checked nothing (exit 2). */
static void print_json_error(const char *why)
{
	json_t *doc = json_pack("{s:s, s:o, s:[]}", "status", "error", "error", json_text(why), "checks");
	char *text = json_dumps(doc, JSON_INDENT(2));
	puts(text);
	free(text);
	json_decref(doc);
}

void cli_doctor_refused(int argc, char **argv, const char *why)
{
	for (int i = 2; i < argc; i++)
		if (strcmp(argv[i], "--format=json") == 0 ||
		    (strcmp(argv[i], "--format") == 0 && i + 1 < argc && strcmp(argv[i + 1], "json") == 0)) {
			print_json_error(why);
			return;
		}
}

int cli_doctor(struct sbx_config *cfg, const struct cli_args *a)
{
	const char *format = a->format ? a->format : "text";
	if (strcmp(format, "text") != 0 && strcmp(format, "json") != 0) {
		fprintf(stderr, "sandboxd: doctor --format must be text or json\n");
		return 2;
	}
	struct srv_host h;
	struct srv_check got[NCHECKS];
	size_t n = 0;
	srv_host_init(&h, cfg, false);
	for (int ph = 0; ph < SRV_PHASES; ph++)
		n += srv_checks_run(&h, (enum srv_phase)ph, got + n, NCHECKS - n);
	srv_host_fini(&h);
	bool bad = false;
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++) {
		const struct srv_check *c = &got[i];
		bad |= c->status == SRV_CHECK_MISSING;
		if (strcmp(format, "json") == 0)
			json_array_append_new(list, json_pack("{s:s, s:s, s:o, s:o, s:b}", "name", c->name,
							      "status", status_name(c->status), "detail",
							      json_text(c->detail), "fix", json_text(c->fix),
							      "refuses_start", c->refuse));
		else if (c->status == SRV_CHECK_MISSING)
			printf("%-10s  %-15s  %s; fix: %s%s\n", status_name(c->status), c->name, c->detail,
			       c->fix, c->refuse ? " (serve refuses to start)" : "");
		else
			printf("%-10s  %-15s  %s\n", status_name(c->status), c->name, c->detail);
	}
	if (strcmp(format, "json") == 0) {
		json_t *doc = json_pack("{s:s, s:o}", "status", bad ? "missing" : "ok", "checks", list);
		char *text = json_dumps(doc, JSON_INDENT(2));
		puts(text);
		free(text);
		json_decref(doc);
	} else {
		json_decref(list);
	}
	return bad ? 1 : 0;
}
