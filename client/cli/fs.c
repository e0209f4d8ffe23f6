/* sbx cat, ls, stat, rm, mkdir, mv: one call per path, the first failure
 * reported and the status non-zero (the remaining paths still tried, as
 * rm and mkdir do). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/cli/cli.h"

static const char *type_name(enum sbxc_type t)
{
	static const char *const names[] = {"unknown", "file", "directory", "symlink", "other"};
	return names[t <= SBXC_OTHER ? t : 0];
}

static void fmt_time(int64_t t, char *out, size_t n)
{
	struct tm tm;
	time_t tt = (time_t)t;
	if (!gmtime_r(&tt, &tm) || !strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(out, n, "-");
}

/* Flags given as letters; returns the first operand's index or -1. */
static int letters(int argc, char **argv, const char *allowed, bool *set)
{
	int ch;
	while ((ch = getopt(argc, argv, allowed)) != -1) {
		const char *p = strchr(allowed, ch);
		if (ch == '?' || !p)
			return -1;
		set[p - allowed] = true;
	}
	return optind;
}

static int out_sink(void *arg, const void *data, size_t len)
{
	(void)arg;
	return fwrite(data, 1, len, stdout) == len ? 0 : -1;
}

int cmd_cat(struct cli *c, int argc, char **argv)
{
	if (argc < 2)
		return cli_usage("cat needs a path");
	int status = CLI_OK;
	for (int i = 1; i < argc; i++) {
		struct sbxc_err err;
		int rc = sbxc_read_file_stream(c->h, &c->call, argv[i], 0, out_sink, NULL, NULL, &err);
		if (rc < 0)
			status = cli_fail(c, argv[i], rc, &err);
	}
	fflush(stdout);
	return status;
}

static json_t *dirent_json(const struct sbxc_dirent *d, bool detail)
{
	if (!detail)
		return json_string(d->name);
	char t[40];
	fmt_time(d->mtime, t, sizeof t);
	json_t *o = json_pack("{s:s, s:s}", "name", d->name, "type", type_name(d->type));
	if (d->has_size)
		json_object_set_new(o, "size", json_integer((json_int_t)d->size));
	if (d->has_mtime)
		json_object_set_new(o, "mtime", json_string(t));
	return o;
}

int cmd_ls(struct cli *c, int argc, char **argv)
{
	bool set[2] = {false};
	int i = letters(argc, argv, "l", set);
	if (i < 0 || argc - i > 1)
		return cli_usage("ls [-l] [PATH]");
	const char *path = i < argc ? argv[i] : ".";
	struct sbxc_dirent *v = NULL;
	size_t n = 0;
	struct sbxc_err err;
	int rc = sbxc_readdir(c->h, &c->call, path, set[0] || c->json, &v, &n, &err);
	if (rc < 0)
		return cli_fail(c, path, rc, &err);
	json_t *arr = c->json ? json_array() : NULL;
	for (size_t k = 0; k < n; k++) {
		if (arr) {
			json_array_append_new(arr, dirent_json(&v[k], true));
		} else if (set[0]) {
			char t[40];
			fmt_time(v[k].mtime, t, sizeof t);
			printf("%-9s %12llu %s ", type_name(v[k].type), (unsigned long long)v[k].size, t);
			cli_term_line(stdout, v[k].name);
		} else {
			cli_term_line(stdout, v[k].name); /* a name the sandbox's code chose */
		}
	}
	if (arr)
		cli_print_json(json_pack("{s:o}", "entries", arr));
	sbxc_dirents_free(v, n);
	return CLI_OK;
}

int cmd_stat(struct cli *c, int argc, char **argv)
{
	if (argc < 2)
		return cli_usage("stat needs a path");
	int status = CLI_OK;
	for (int i = 1; i < argc; i++) {
		struct sbxc_stat st;
		struct sbxc_err err;
		int rc = sbxc_stat(c->h, &c->call, argv[i], &st, &err);
		if (rc < 0) {
			status = cli_fail(c, argv[i], rc, &err);
			continue;
		}
		char t[40], mode[8];
		fmt_time(st.mtime, t, sizeof t);
		snprintf(mode, sizeof mode, "%04o", st.mode);
		json_t *o = json_pack("{s:s, s:s, s:b}", "path", st.path ? st.path : "", "type",
				      type_name(st.type), "is_symlink", st.is_symlink);
		if (st.has_size)
			json_object_set_new(o, "size", json_integer((json_int_t)st.size));
		if (st.has_mtime)
			json_object_set_new(o, "mtime", json_string(t));
		if (st.has_mode)
			json_object_set_new(o, "mode", json_string(mode));
		if (c->json) {
			cli_print_json(o);
		} else {
			cli_term_puts(stdout, st.path ? st.path : "", st.path ? strlen(st.path) : 0);
			printf(": %s%s, %llu bytes, mode %s, modified %s\n", type_name(st.type),
			       st.is_symlink ? " (via a symlink)" : "", (unsigned long long)st.size,
			       st.has_mode ? mode : "-", st.has_mtime ? t : "-");
			json_decref(o);
		}
		sbxc_stat_clear(&st);
	}
	return status;
}

int cmd_rm(struct cli *c, int argc, char **argv)
{
	bool set[2] = {false};
	int i = letters(argc, argv, "rf", set);
	if (i < 0 || i >= argc)
		return cli_usage("rm [-r] [-f] PATH...");
	int status = CLI_OK;
	for (; i < argc; i++) {
		bool removed = false;
		struct sbxc_err err;
		int rc = sbxc_rm(c->h, &c->call, argv[i], set[0], set[1], &removed, &err);
		if (rc < 0)
			status = cli_fail(c, argv[i], rc, &err);
		else if (c->json)
			cli_print_json(json_pack("{s:s, s:b}", "path", argv[i], "removed", removed));
	}
	return status;
}

int cmd_mkdir(struct cli *c, int argc, char **argv)
{
	bool set[1] = {false};
	int i = letters(argc, argv, "p", set);
	if (i < 0 || i >= argc)
		return cli_usage("mkdir [-p] PATH...");
	int status = CLI_OK;
	for (; i < argc; i++) {
		struct sbxc_err err;
		int rc = sbxc_mkdir(c->h, &c->call, argv[i], set[0], &err);
		if (rc < 0)
			status = cli_fail(c, argv[i], rc, &err);
		else if (c->json)
			cli_print_json(json_pack("{s:s}", "path", argv[i]));
	}
	return status;
}

int cmd_mv(struct cli *c, int argc, char **argv)
{
	bool set[1] = {false};
	int i = letters(argc, argv, "f", set);
	if (i < 0 || argc - i != 2)
		return cli_usage("mv [-f] FROM TO");
	struct sbxc_err err;
	int rc = sbxc_move(c->h, &c->call, argv[i], argv[i + 1], set[0], &err);
	if (rc < 0)
		return cli_fail(c, argv[i], rc, &err);
	if (c->json)
		cli_print_json(json_pack("{s:s, s:s}", "from", argv[i], "to", argv[i + 1]));
	return CLI_OK;
}
