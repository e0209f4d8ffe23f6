#include "sandbox/uids.h"
#include "sandbox/reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xmalloc.h"

#define SUBUID_DEFAULT "/etc/subuid"
#define SUBGID_DEFAULT "/etc/subgid"
#define NEWUIDMAP_DEFAULT "/usr/bin/newuidmap"
#define NEWGIDMAP_DEFAULT "/usr/bin/newgidmap"
#define NOBODY_ID 65534
#define TEXT_MAX (1u << 20) /* /etc/subuid, /proc/self/uid_map */

const char *sbx_uids_mode_name(enum sbx_uid_mode m)
{
	return m == SBX_UIDS_ROOT ? "root" : m == SBX_UIDS_SUBUID ? "subuid" : "shared";
}

static uint32_t last_id(const struct sbx_id_range *r)
{
	return r->first + r->count - 1;
}

/* Decimal digits only (no sign, no space), fitting 32 bits. */
static bool parse_u32(const char *p, size_t n, uint32_t *out)
{
	uint64_t v = 0;
	if (n == 0 || n > 10)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	if (v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

/* One line "owner:first:count" (len bytes, no newline) of the user, named
 * name or numbered idtxt: its range, or false. */
static bool line_range(const char *p, size_t len, const char *name, const char *idtxt, struct sbx_id_range *r)
{
	const char *c1 = memchr(p, ':', len);
	if (!c1)
		return false;
	size_t olen = (size_t)(c1 - p);
	bool mine = (name && *name && olen == strlen(name) && memcmp(p, name, olen) == 0) ||
		    (olen == strlen(idtxt) && memcmp(p, idtxt, olen) == 0);
	if (!mine)
		return false;
	const char *rest = c1 + 1;
	size_t rlen = len - olen - 1;
	const char *c2 = memchr(rest, ':', rlen);
	if (!c2)
		return false;
	size_t flen = (size_t)(c2 - rest);
	return parse_u32(rest, flen, &r->first) && parse_u32(c2 + 1, rlen - flen - 1, &r->count) &&
	       r->count > 0 && (uint64_t)r->first + r->count - 1 <= UINT32_MAX - 1;
}

int sbx_subid_find(const char *text, const char *name, uid_t id, uint32_t want, struct sbx_id_range *out)
{
	char idtxt[16];
	bool found = false;
	snprintf(idtxt, sizeof idtxt, "%u", (unsigned)id);
	for (const char *p = text; p && *p;) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		struct sbx_id_range r;
		if (line_range(p, len, name, idtxt, &r)) {
			bool holds = want >= r.first && want - r.first < r.count;
			if (!found || holds)
				*out = r;
			found = true;
			if (holds)
				return 0;
		}
		p = eol ? eol + 1 : NULL;
	}
	return found ? 0 : -ENOENT;
}

/* A small text file whole (NUL-terminated, caller frees), or NULL. */
static char *read_text(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, len = 0;
	char *s = xmalloc(cap);
	for (;;) {
		if (len + 1 == cap) {
			if (cap >= TEXT_MAX)
				break;
			cap *= 2;
			s = xrealloc(s, cap);
		}
		ssize_t n = read(fd, s + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	s[len] = '\0';
	return s;
}

/* The three numbers of each line of /proc/self/{uid,gid}_map: up to max
 * rows into m; how many, or -1. */
static int read_map(const char *path, uint64_t m[][3], int max)
{
	char *text = read_text(path);
	int n = 0;
	if (!text)
		return -1;
	for (char *p = text; *p && n < max;) {
		char *end = NULL;
		for (int k = 0; k < 3; k++) {
			m[n][k] = strtoull(p, &end, 10);
			p = end;
		}
		n++;
		p += strspn(p, " \n");
	}
	free(text);
	return n;
}

static void root_mode(struct sbx_uids *u)
{
	uint64_t m[4][3];
	u->mode = SBX_UIDS_ROOT;
	int n = read_map("/proc/self/uid_map", m, 4);
	/* Root of a container's user namespace (userns-remap, rootless
	 * Docker): say which host uid it is. */
	if (n >= 1 && !(m[0][0] == 0 && m[0][1] == 0 && m[0][2] == 4294967295ULL))
		snprintf(u->detail, sizeof u->detail,
			 "root: one uid per tenant (in a user namespace: uid 0 is host uid %" PRIu64 ")",
			 m[0][0] == 0 ? m[0][1] : 0);
	else
		snprintf(u->detail, sizeof u->detail, "root: one uid per tenant");
}

static void shared_mode(struct sbx_uids *u, const char *why)
{
	u->mode = SBX_UIDS_SHARED;
	snprintf(u->why_shared, sizeof u->why_shared, "%s", why);
	snprintf(u->detail, sizeof u->detail, "shared uid %u", (unsigned)u->outer_uid);
}

static void user_name(struct sbx_uids *u)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	if (getpwuid_r(u->outer_uid, &pw, buf, sizeof buf, &res) == 0 && res)
		snprintf(u->user, sizeof u->user, "%s", pw.pw_name);
}

/* The user's ranges in both files; false (shared mode, saying why) when
 * either is missing or the tools are not installed. */
static bool find_ranges(struct sbx_uids *u, const struct sbx_uids_config *cfg)
{
	const char *files[2] = {cfg->subuid_path ? cfg->subuid_path : SUBUID_DEFAULT,
				cfg->subgid_path ? cfg->subgid_path : SUBGID_DEFAULT};
	const char *tools[2] = {cfg->newuidmap ? cfg->newuidmap : NEWUIDMAP_DEFAULT,
				cfg->newgidmap ? cfg->newgidmap : NEWGIDMAP_DEFAULT};
	struct sbx_id_range *ranges[2] = {&u->uids, &u->gids};
	uint32_t want = cfg->uid_base > 0 && cfg->uid_base <= UINT32_MAX ? (uint32_t)cfg->uid_base : 0;
	char why[256];
	for (int i = 0; i < 2; i++) {
		char *text = read_text(files[i]);
		int rc = text ? sbx_subid_find(text, u->user, u->outer_uid, want, ranges[i]) : -ENOENT;
		free(text);
		if (rc < 0) {
			snprintf(why, sizeof why, "no range for user %s (uid %u) in %s",
				 *u->user ? u->user : "?", (unsigned)u->outer_uid, files[i]);
			shared_mode(u, why);
			return false;
		}
	}
	for (int i = 0; i < 2; i++)
		if (access(tools[i], X_OK) < 0) {
			snprintf(why, sizeof why, "%s is not installed (Debian package uidmap)", tools[i]);
			shared_mode(u, why);
			return false;
		}
	return true;
}

/* The ids a tenant may have: in both ranges, the last kept for the probe. */
static struct sbx_id_range usable_ids(const struct sbx_uids *u)
{
	uint32_t lo = u->uids.first > u->gids.first ? u->uids.first : u->gids.first;
	uint32_t hi = last_id(&u->uids) < last_id(&u->gids) ? last_id(&u->uids) : last_id(&u->gids);
	struct sbx_id_range r = {lo, hi > lo ? hi - lo + 1 : 0};
	return r;
}

static int check_ranges(const struct sbx_uids *u, int64_t uid_base, char *err, size_t errsz)
{
	struct sbx_id_range ids = usable_ids(u);
	if (ids.count < 2) {
		snprintf(err, errsz,
			 "the subordinate uids %u..%u and gids %u..%u of user %s share fewer than two ids",
			 u->uids.first, last_id(&u->uids), u->gids.first, last_id(&u->gids), u->user);
		return -EINVAL;
	}
	if (uid_base < ids.first || uid_base >= (int64_t)last_id(&ids)) {
		snprintf(err, errsz,
			 "uid-base %lld is outside the subordinate ids %u..%u of user %s (/etc/subuid, "
			 "/etc/subgid; the last is kept for the start probe): set --set uid-base=%u",
			 (long long)uid_base, ids.first, last_id(&ids) - 1, u->user, ids.first);
		return -EINVAL;
	}
	if ((u->outer_uid >= u->uids.first && u->outer_uid <= last_id(&u->uids)) ||
	    (u->outer_gid >= u->gids.first && u->outer_gid <= last_id(&u->gids))) {
		snprintf(err, errsz, "the subordinate range of user %s holds its own uid %u or gid %u",
			 u->user, (unsigned)u->outer_uid, (unsigned)u->outer_gid);
		return -EINVAL;
	}
	return 0;
}

/* fork + exec path with argv; the exit status (0 is success), or -1. */
static int run_tool(const char *path, char *const argv[])
{
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		sbx_reaper_child_unblock();
		execv(path, argv);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* The helper, a child forked before the parent unshares: newuidmap must
 * run outside the new namespace (inside it, its setuid bit means
 * nothing). Waits for the parent's go, writes both maps, exits. */
static void helper_main(int go, pid_t parent, const struct sbx_uids *u, const struct sbx_uids_config *cfg)
{
	char c = 0, pid[16], own[2][16], first[2][16], count[2][16];
	ssize_t n;
	while ((n = read(go, &c, 1)) < 0 && errno == EINTR)
		;
	if (n != 1 || c != 'g')
		_exit(0);
	snprintf(pid, sizeof pid, "%d", (int)parent);
	const struct sbx_id_range *r[2] = {&u->uids, &u->gids};
	unsigned ids[2] = {(unsigned)u->outer_uid, (unsigned)u->outer_gid};
	const char *tools[2] = {cfg->newuidmap ? cfg->newuidmap : NEWUIDMAP_DEFAULT,
				cfg->newgidmap ? cfg->newgidmap : NEWGIDMAP_DEFAULT};
	for (int i = 0; i < 2; i++) {
		snprintf(own[i], sizeof own[i], "%u", ids[i]);
		snprintf(first[i], sizeof first[i], "%u", r[i]->first);
		snprintf(count[i], sizeof count[i], "%u", r[i]->count);
		/* 0 -> the server's own id; the range -> itself. */
		char *const argv[] = {(char *)tools[i], pid,	  "0",	    own[i], "1",
				      first[i],		first[i], count[i], NULL};
		int st = run_tool(tools[i], argv);
		if (st != 0) {
			fprintf(stderr, "sandboxd: %s %s 0 %s 1 %s %s %s failed (status %d)\n", tools[i], pid,
				own[i], first[i], first[i], count[i], st);
			_exit(1);
		}
	}
	_exit(0);
}

/* Both maps hold exactly what was asked, and setgroups is allowed (the
 * child of every command calls it before dropping to the tenant). */
static int verify_maps(const struct sbx_uids *u, char *err, size_t errsz)
{
	const char *paths[2] = {"/proc/self/uid_map", "/proc/self/gid_map"};
	const struct sbx_id_range *r[2] = {&u->uids, &u->gids};
	uint64_t own[2] = {u->outer_uid, u->outer_gid};
	for (int i = 0; i < 2; i++) {
		uint64_t m[4][3];
		int n = read_map(paths[i], m, 4);
		bool ok = n == 2 && m[0][0] == 0 && m[0][1] == own[i] && m[0][2] == 1 &&
			  m[1][0] == r[i]->first && m[1][1] == r[i]->first && m[1][2] == r[i]->count;
		if (!ok) {
			snprintf(err, errsz, "%s does not hold the map newuidmap/newgidmap were asked for",
				 paths[i]);
			return -EPROTO;
		}
	}
	char *sg = read_text("/proc/self/setgroups");
	bool allow = sg && strncmp(sg, "allow", 5) == 0;
	free(sg);
	if (!allow || getuid() != 0 || getgid() != 0) {
		snprintf(err, errsz, "the user namespace denies setgroups or does not make the server uid 0");
		return -EPROTO;
	}
	return 0;
}

/* In the kernel's count a user namespace is bounded, as a whole, by the
 * RLIMIT_NPROC its creator had: take the hard limit for all tenants. */
static void raise_nproc(struct sbx_uids *u)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NPROC, &rl) < 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NPROC, &rl);
	}
	u->nproc_all = rl.rlim_cur == RLIM_INFINITY ? 0 : (uint64_t)rl.rlim_cur;
}

static int enter_userns(struct sbx_uids *u, const struct sbx_uids_config *cfg, char *err, size_t errsz)
{
	int go[2];
	raise_nproc(u);
	if (pipe2(go, O_CLOEXEC) < 0) {
		snprintf(err, errsz, "pipe: %s", strerror(errno));
		return -errno;
	}
	pid_t parent = getpid(), helper = fork();
	if (helper < 0) {
		int e = errno;
		close(go[0]);
		close(go[1]);
		snprintf(err, errsz, "fork: %s", strerror(e));
		return -e;
	}
	if (helper == 0) {
		close(go[1]);
		helper_main(go[0], parent, u, cfg);
	}
	close(go[0]);
	int rc = 0;
	if (unshare(CLONE_NEWUSER) < 0) {
		rc = -errno;
		snprintf(err, errsz, "cannot create a user namespace: %s", strerror(errno));
	}
	char c = rc == 0 ? 'g' : 'q';
	if (write(go[1], &c, 1) != 1 && rc == 0) {
		rc = -EPIPE;
		snprintf(err, errsz, "the newuidmap helper is gone");
	}
	close(go[1]);
	int st = 0;
	while (waitpid(helper, &st, 0) < 0 && errno == EINTR)
		;
	if (rc == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		rc = -EPERM;
		snprintf(err, errsz, "newuidmap/newgidmap did not write the map (their message is above)");
	}
	return rc < 0 ? rc : verify_maps(u, err, errsz);
}

int sbx_uids_setup(struct sbx_uids *u, const struct sbx_uids_config *cfg, char *err, size_t errsz)
{
	memset(u, 0, sizeof *u);
	u->outer_uid = getuid();
	u->outer_gid = getgid();
	if (geteuid() == 0) {
		root_mode(u);
		return 0;
	}
	user_name(u);
	if (!find_ranges(u, cfg))
		return 0;
	int rc = check_ranges(u, cfg->uid_base, err, errsz);
	if (rc == 0)
		rc = enter_userns(u, cfg, err, errsz);
	if (rc < 0)
		return rc;
	u->mode = SBX_UIDS_SUBUID;
	snprintf(u->detail, sizeof u->detail, "subuid range %u..%u via newuidmap", u->uids.first,
		 last_id(&u->uids));
	return 0;
}

bool sbx_uids_tenant_ok(const struct sbx_uids *u, int64_t id)
{
	if (u->mode != SBX_UIDS_SUBUID)
		return true;
	struct sbx_id_range ids = usable_ids(u);
	return id >= ids.first && id < (int64_t)last_id(&ids);
}

uid_t sbx_uids_probe_id(const struct sbx_uids *u)
{
	if (u->mode != SBX_UIDS_SUBUID)
		return NOBODY_ID;
	struct sbx_id_range ids = usable_ids(u);
	return (uid_t)last_id(&ids);
}
