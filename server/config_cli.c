/* sandboxd config reference | show: the table of configuration keys
 * (common/config.c) as a person reads it, and the configuration in effect.
 * docs/reference/configuration.md is `config reference`'s output, checked
 * against the binary by the test docs_reference_current, and the key table
 * of sandboxd.conf(5) is made from that file (cmake/man.cmake). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "server/cli.h"

static const char config_usage[] = "usage: sandboxd config reference [--format markdown|json]\n"
				   "       sandboxd config show [--config FILE] [--set KEY=VALUE ...]\n";

static const char intro[] =
    "# Configuration reference\n"
    "\n"
    "Every key can be set in a JSON config file (`--config FILE`; keys spelled with `-` or `_`), with "
    "`--set KEY=VALUE` on the command line, and a few with a flag of their own (named in their meaning). "
    "Precedence: the built-in default, then the file, then the command line. Unknown keys, ill-typed "
    "values and values out of range are refused at start. `sandboxd config show` prints the "
    "configuration in effect, as JSON.\n"
    "\n"
    "This table is printed by `sandboxd config reference`, from the table of keys in the server's "
    "code.\n"
    "\n"
    "| key | default | values | meaning |\n"
    "|---|---|---|---|\n";

/* A whole multiple of the largest unit that divides n, for the reader:
 * "2 GiB", "30 days"; "" when none reads better than the number. */
static void human(const struct cfg_key *k, int64_t n, char *out, size_t outsz)
{
	static const struct {
		const char *suffix, *unit;
		int64_t size;
	} units[] = {
	    {"-bytes", "TiB", 1LL << 40},
	    {"-bytes", "GiB", 1LL << 30},
	    {"-bytes", "MiB", 1LL << 20},
	    {"-s", "days", 86400},
	};
	size_t nl = strlen(k->name);
	out[0] = '\0';
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
		size_t sl = strlen(units[i].suffix);
		if (nl > sl && strcmp(k->name + nl - sl, units[i].suffix) == 0 && n >= units[i].size &&
		    n % units[i].size == 0) {
			snprintf(out, outsz, " (%" PRId64 " %s)", n / units[i].size, units[i].unit);
			return;
		}
	}
}

static void md_default(const struct cfg_key *k, FILE *f)
{
	if (k->shown) {
		fputs(k->shown, f);
		return;
	}
	if (!k->def) {
		fputs("none", f);
		return;
	}
	char h[32] = "";
	char *end = NULL;
	long long n = strtoll(k->def, &end, 10);
	if (strcmp(k->type, "integer") == 0 && end && !*end)
		human(k, n, h, sizeof h);
	fprintf(f, "`%s`%s", k->def, h);
}

static void md_values(const struct cfg_key *k, FILE *f)
{
	if (strcmp(k->type, "integer") == 0) {
		if (k->max == INT64_MAX)
			fprintf(f, "`%" PRId64 "` or more", k->min);
		else
			fprintf(f, "`%" PRId64 "` to `%" PRId64 "`", k->min, k->max);
	} else if (strcmp(k->type, "millicores") == 0)
		fprintf(f, "`auto`, `0`, or `10` to `%" PRId64 "`", k->max);
	else if (strcmp(k->type, "boolean") == 0)
		fputs("`true`, `false`", f);
	else
		fputs(strcmp(k->type, "json") == 0 ? "JSON" : "text", f);
}

/* A table cell: '|' would end it. */
static void md_cell(const char *s, FILE *f)
{
	for (; *s; s++) {
		if (*s == '|')
			fputc('\\', f);
		fputc(*s, f);
	}
}

static void reference_markdown(FILE *f)
{
	fputs(intro, f);
	for (size_t i = 0; i < cfg_key_count(); i++) {
		struct cfg_key k;
		cfg_key_get(i, &k);
		fprintf(f, "| `%s` | ", k.name);
		md_default(&k, f);
		fputs(" | ", f);
		md_values(&k, f);
		fputs(" | ", f);
		md_cell(k.help, f);
		if (k.flag)
			fprintf(f, "; flag `--%s`", k.name);
		fputs(" |\n", f);
	}
}

/* The default as a JSON value of the key's type; null when unset. */
static json_t *json_default(const struct cfg_key *k)
{
	if (!k->def)
		return json_null();
	if (strcmp(k->type, "integer") == 0)
		return json_integer(strtoll(k->def, NULL, 10));
	if (strcmp(k->type, "boolean") == 0)
		return json_boolean(strcmp(k->def, "true") == 0);
	return json_string(k->def);
}

static void reference_json(FILE *f)
{
	json_t *keys = json_array();
	for (size_t i = 0; i < cfg_key_count(); i++) {
		struct cfg_key k;
		cfg_key_get(i, &k);
		json_t *o = json_pack("{s:s, s:s, s:o, s:s?, s:s, s:o}", "key", k.name, "type", k.type,
				      "default", json_default(&k), "default_shown", k.shown, "meaning",
				      k.help, "flag", k.flag ? json_sprintf("--%s", k.name) : json_null());
		if (strcmp(k.type, "integer") == 0 || strcmp(k.type, "millicores") == 0) {
			json_object_set_new(o, "min", json_integer(k.min));
			json_object_set_new(o, "max", json_integer(k.max));
		}
		json_array_append_new(keys, o);
	}
	json_t *root = json_pack("{s:o}", "keys", keys);
	json_dumpf(root, f, JSON_INDENT(2));
	fputc('\n', f);
	json_decref(root);
}

int cli_config(struct sbx_config *cfg, const struct cli_args *a)
{
	const char *what = a->nwords == 1 ? a->words[0] : "";
	if (strcmp(what, "reference") == 0) {
		const char *fmt = a->format ? a->format : "markdown";
		if (strcmp(fmt, "markdown") == 0)
			reference_markdown(stdout);
		else if (strcmp(fmt, "json") == 0)
			reference_json(stdout);
		else {
			fprintf(stderr,
				"sandboxd: config reference: --format is markdown or json, not '%s'\n", fmt);
			return 2;
		}
		return fflush(stdout) == 0 ? 0 : 1;
	}
	if (strcmp(what, "show") == 0 && !a->format) {
		cfg_dump(cfg, stdout);
		return fflush(stdout) == 0 ? 0 : 1;
	}
	fputs(config_usage, stderr);
	return 2;
}
