/* Root images built with mmdebstrap (sbx_rootimg_build): the package
 * list and variant checked, the host's suite and apt sources, the tool
 * run into a staging directory (rootimg_impl.h). Apart from the imports
 * (rootimg_import.c, rootimg_oci.c): it reads no archive and shares
 * nothing with them but the staging. */
#include "sandbox/rootimg.h"

#include <errno.h>
#include <glob.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/xmalloc.h"
#include "sandbox/reaper.h"
#include "sandbox/rootimg_impl.h"

extern char **environ;

static bool package_ok(const char *p, size_t n)
{
	if (n < 2 || !((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= '0' && p[0] <= '9')))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'))
			return false;
	}
	return true;
}

static bool variant_ok(const char *v)
{
	static const char *const ok[] = {"extract", "custom", "essential", "apt",	  "required",
					 "minbase", "buildd", "important", "debootstrap", "standard"};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		if (strcmp(v, ok[i]) == 0)
			return true;
	return false;
}

/* The host's release name, e.g. "bookworm". */
static int host_codename(char *out, size_t outsz)
{
	FILE *f = fopen("/etc/os-release", "re");
	char line[256];
	int rc = -ENOENT;
	while (f && fgets(line, sizeof line, f)) {
		if (strncmp(line, "VERSION_CODENAME=", 17) != 0)
			continue;
		char *v = line + 17;
		v[strcspn(v, "\r\n")] = '\0';
		if (*v == '"') {
			v++;
			v[strcspn(v, "\"")] = '\0';
		}
		/* A name that does not fit is not cut to another suite's name. */
		size_t n = strlen(v);
		if (n > 0 && n < outsz && package_ok(v, n)) {
			memcpy(out, v, n + 1);
			rc = 0;
		}
	}
	if (f)
		fclose(f);
	return rc;
}

/* mmdebstrap pastes a MIRROR argument that names an existing file into the
 * image's sources: the host's own apt configuration, whatever mirror or
 * proxy the operator set up. */
static void add_sources(json_t *argv, json_t *used)
{
	struct stat st;
	if (stat("/etc/apt/sources.list", &st) == 0 && st.st_size > 0) {
		json_array_append_new(argv, json_string("/etc/apt/sources.list"));
		json_array_append_new(used, json_string("/etc/apt/sources.list"));
	}
	static const char *const pats[] = {"/etc/apt/sources.list.d/*.list",
					   "/etc/apt/sources.list.d/*.sources"};
	for (size_t i = 0; i < 2; i++) {
		glob_t g;
		if (glob(pats[i], 0, NULL, &g) != 0)
			continue;
		for (size_t k = 0; k < g.gl_pathc; k++) {
			json_array_append_new(argv, json_string(g.gl_pathv[k]));
			json_array_append_new(used, json_string(g.gl_pathv[k]));
		}
		globfree(&g);
	}
}

/* Run argv (a JSON array of strings) with stdout sent to stderr; the
 * exit status, or -errno when it cannot start. */
static int run_tool(json_t *argv)
{
	size_t n = json_array_size(argv);
	char **v = xcalloc(n + 1, sizeof *v);
	for (size_t i = 0; i < n; i++)
		v[i] = (char *)json_string_value(json_array_get(argv, i));
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, 2, 1);
	pid_t pid;
	int rc = sbx_reaper_spawn(&pid, v[0], &fa, v, environ, true);
	posix_spawn_file_actions_destroy(&fa);
	free(v);
	if (rc != 0)
		return -rc;
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int parse_packages(const char *packages, json_t *list, char *err, size_t errsz)
{
	const char *p = packages ? packages : "";
	while (*p) {
		size_t n = strcspn(p, ",");
		while (n && p[0] == ' ') {
			p++;
			n--;
		}
		size_t m = n;
		while (m && p[m - 1] == ' ')
			m--;
		if (m && !package_ok(p, m)) {
			snprintf(err, errsz, "not a Debian package name: %.*s", (int)m, p);
			return -EINVAL;
		}
		if (m)
			json_array_append_new(list, json_stringn(p, m));
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
}

static json_t *build_argv(const char *variant, json_t *pkgs, const char *suite, const char *rootfs,
			  json_t *sources)
{
	json_t *argv = json_pack("[s, s, s]", "mmdebstrap", "--quiet", "--format=directory");
	json_array_append_new(argv, json_sprintf("--variant=%s", variant));
	/* Documentation is of no use to a command and a third of the size. */
	static const char *const dpkg[] = {"path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
					   "path-exclude=/usr/share/doc/*",
					   "path-include=/usr/share/doc/*/copyright"};
	for (size_t i = 0; i < sizeof dpkg / sizeof dpkg[0]; i++)
		json_array_append_new(argv, json_sprintf("--dpkgopt=%s", dpkg[i]));
	if (json_array_size(pkgs)) {
		json_t *s = json_string("--include=");
		size_t i;
		json_t *p;
		json_array_foreach(pkgs, i, p) {
			char *t =
			    xasprintf("%s%s%s", json_string_value(s), i ? "," : "", json_string_value(p));
			json_string_set(s, t);
			free(t);
		}
		json_array_append_new(argv, s);
	}
	json_array_append_new(argv, json_string(suite));
	json_array_append_new(argv, json_string(rootfs));
	add_sources(argv, sources);
	return argv;
}

int sbx_rootimg_build(const char *dir, const char *name, const char *packages, const char *variant, char *err,
		      size_t errsz)
{
	struct rootimg_stage st;
	json_t *pkgs = json_array(), *sources = json_array(), *argv = NULL;
	char suite[64];
	variant = variant ? variant : "essential";
	int rc = parse_packages(packages, pkgs, err, errsz);
	if (rc == 0 && !variant_ok(variant)) {
		snprintf(err, errsz, "unknown mmdebstrap variant %s", variant);
		rc = -EINVAL;
	}
	if (rc == 0 && host_codename(suite, sizeof suite) < 0) {
		snprintf(err, errsz, "no VERSION_CODENAME in /etc/os-release: not a Debian host?");
		rc = -EINVAL;
	}
	if (rc < 0) {
		json_decref(pkgs);
		json_decref(sources);
		return rc;
	}
	rc = rootimg_stage_begin(&st, dir, name, err, errsz);
	if (rc == 0) {
		argv = build_argv(variant, pkgs, suite, st.rootfs, sources);
		if (json_array_size(sources) == 0) {
			snprintf(err, errsz, "no apt sources on this host (/etc/apt/sources.list[.d])");
			rc = -ENOENT;
		}
	}
	if (rc == 0) {
		int status = run_tool(argv);
		if (status != 0) {
			snprintf(err, errsz,
				 status < 0 ? "cannot run mmdebstrap (install it: apt-get install mmdebstrap)"
					    : "mmdebstrap failed (exit status %d; its messages are above)",
				 status);
			rc = status == -ENOENT ? -ENOENT : -EIO;
		}
	}
	if (rc == 0) {
		json_t *source = json_pack("{s:s, s:s, s:s, s:O}", "kind", "mmdebstrap", "suite", suite,
					   "variant", variant, "apt_sources", sources);
		rc = rootimg_stage_commit(&st, name, json_incref(pkgs), source, err, errsz);
	}
	rootimg_stage_end(&st);
	json_decref(argv);
	json_decref(pkgs);
	json_decref(sources);
	return rc;
}
