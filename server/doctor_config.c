/* The checks of the server's own settings: the clock, the
 * configuration, the TLS certificate and key, and the tenants' uids (the
 * uid base and its range's claim). The first phases of the table in
 * doctor.c, run before anything is made on disk. */
#include "server/doctor_int.h"

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

/* ---- clock ---- */

/* Tokens' iat, nbf and exp are judged by it: a clock before the binary
 * was built (its file's mtime; a package clamps it to the release date)
 * or before 2024 is wrong. */
void check_clock(struct srv_host *h, struct srv_check *c)
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
		doctor_missing(c, true);
	} else if (have_built && now.tv_sec + 86400 < st.st_mtime) {
		DETAIL(c, "the clock says %s, before this binary was built (%s)", when, built);
		doctor_missing(c, true);
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
void check_config(struct srv_host *h, struct srv_check *c)
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
	doctor_missing(c, true);
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

void check_tls(struct srv_host *h, struct srv_check *c)
{
	const struct sbx_config *cfg = h->cfg;
	X509 *x = NULL;
	EVP_PKEY *k = NULL;
	if (!cfg->tls_cert && !cfg->tls_key) {
		DETAIL(c, "plain HTTP (no tls-cert and tls-key)");
		doctor_not_needed(c);
		return;
	}
	doctor_missing(c, true);
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

void check_uids(struct srv_host *h, struct srv_check *c)
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
		doctor_missing(c, true);
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
		doctor_missing(c, false);
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
void check_uid_range(struct srv_host *h, struct srv_check *c)
{
	long long base = (long long)h->cfg->uid_base;
	if (!h->uids_ready || h->uids.mode != SBX_UIDS_ROOT) {
		DETAIL(c, "%s",
		       !h->uids_ready			 ? "no uids set up (see uids)"
		       : h->uids.mode == SBX_UIDS_SUBUID ? "subuid mode: the range is this user's own"
							 : "shared uid: no range");
		doctor_not_needed(c);
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
	doctor_missing(c, true);
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
