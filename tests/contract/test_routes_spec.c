/* Contract test: the route table compiled into sandboxd (routes/router.c)
 * and openapi/openapi.yaml describe the same routes.
 *
 * Both directions are checked, strictly:
 *   - every (method, pattern) of route_table[] is an operation of the spec;
 *   - every operation of the spec is a route of the table;
 * and, for the routes in both, that the spec says who may call them:
 *   - the operation's `x-scopes` names exactly the scope bits of the route
 *     (the admin bit alone for RF_ADMIN_ONLY routes);
 *   - a public route (RF_PUBLIC) has `security: []` and `x-scopes: []`,
 *     and a route that needs a token does not have `security: []`;
 *   - the query token `accessToken` is among the operation's security
 *     requirements exactly when the route is an event stream (RF_SSE).
 * HEAD is answered as GET by the dispatcher, so a `head` operation in the
 * spec is accepted where the table has GET for the same pattern.
 *
 * The YAML is read by indentation, as openapi.yaml is written: `paths:` at
 * column 0, path keys (starting with '/') at two spaces, method keys at
 * four, `x-scopes:` / `security:` of an operation at six (and the items of
 * a block `security:` or `x-scopes:` deeper). Any
 * difference is printed and the exit status is 1.
 *
 * Usage: contract_routes_spec [openapi.yaml] (default: OPENAPI_PATH, set by
 * tests/CMakeLists.txt to the source tree's openapi/openapi.yaml). */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth/auth.h"
#include "routes/routes.h"

#ifndef OPENAPI_PATH
#error "OPENAPI_PATH must name openapi/openapi.yaml"
#endif

#define MAX_OPS 512
#define PATH_LEN 256

struct op {
	char method[12]; /* upper case */
	char path[PATH_LEN];
	int line;
	bool has_scopes; /* an x-scopes key was seen */
	bool scopes_bad; /* an unknown scope name, or unreadable */
	unsigned scopes;
	char scope_text[128];
	bool security_empty; /* security: [] */
	bool security_seen;
	bool access_token; /* accessToken is one of its security requirements */
	bool matched;
};

static struct op ops[MAX_OPS];
static size_t nops;
static int problems;

static const char *const methods[] = {"get", "put", "post", "delete", "options", "head", "patch", "trace"};

static bool is_method(const char *k)
{
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
		if (strcmp(k, methods[i]) == 0)
			return true;
	return false;
}

static void trim_right(char *s)
{
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
}

/* "key: value" at s: key into key (quotes removed), value (may be "") into
 * val. false if s holds no mapping key. */
static bool split_key(const char *s, char *key, size_t keysz, char *val, size_t valsz)
{
	const char *p = s;
	char quote = 0;
	if (*p == '\'' || *p == '"')
		quote = *p++;
	const char *k = p;
	const char *ke;
	if (quote) {
		ke = strchr(p, quote);
		if (!ke || ke[1] != ':')
			return false;
		p = ke + 2;
	} else {
		/* The key ends at the first ": " or a ':' at the end of the line. */
		for (p = k; *p; p++)
			if (*p == ':' && (p[1] == '\0' || p[1] == ' '))
				break;
		if (!*p)
			return false;
		ke = p;
		p++;
	}
	size_t n = (size_t)(ke - k);
	if (n == 0 || n >= keysz)
		return false;
	memcpy(key, k, n);
	key[n] = '\0';
	while (*p == ' ')
		p++;
	snprintf(val, valsz, "%s", p);
	/* A trailing comment is not part of the value. */
	char *hash = strstr(val, " #");
	if (hash)
		*hash = '\0';
	trim_right(val);
	return true;
}

/* Add one scope name (quotes stripped) to op. */
static void add_scope(struct op *o, const char *name, size_t n)
{
	while (n && (*name == ' ' || *name == '\'' || *name == '"')) {
		name++;
		n--;
	}
	while (n && (name[n - 1] == ' ' || name[n - 1] == '\'' || name[n - 1] == '"'))
		n--;
	if (n == 0)
		return;
	char word[64];
	if (n >= sizeof word) {
		o->scopes_bad = true;
		return;
	}
	memcpy(word, name, n);
	word[n] = '\0';
	unsigned bit = auth_scopes_parse(word);
	if (!bit)
		o->scopes_bad = true;
	o->scopes |= bit;
	size_t used = strlen(o->scope_text);
	snprintf(o->scope_text + used, sizeof o->scope_text - used, "%s%s", used ? " " : "", word);
}

/* A flow sequence "[a, 'b', c]". */
static void parse_flow_scopes(struct op *o, const char *v)
{
	size_t n = strlen(v);
	if (n < 2 || v[0] != '[' || v[n - 1] != ']') {
		o->scopes_bad = true;
		return;
	}
	const char *p = v + 1, *end = v + n - 1;
	while (p < end) {
		const char *c = memchr(p, ',', (size_t)(end - p));
		const char *e = c ? c : end;
		add_scope(o, p, (size_t)(e - p));
		p = e + 1;
	}
}

static size_t indent_of(const char *line, bool *tab)
{
	size_t i = 0;
	while (line[i] == ' ')
		i++;
	*tab = line[i] == '\t';
	return i;
}

static int parse_spec(const char *file)
{
	FILE *f = fopen(file, "r");
	if (!f) {
		perror(file);
		return -1;
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int lineno = 0;
	bool in_paths = false, seen_paths = false;
	char cur_path[PATH_LEN] = "";
	struct op *cur = NULL;
	bool in_block_scopes = false, in_security = false;
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		trim_right(line);
		bool tab = false;
		size_t ind = indent_of(line, &tab);
		const char *s = line + ind;
		if (*s == '\0' || *s == '#')
			continue;
		if (tab) {
			fprintf(stderr, "%s:%d: a tab in the indentation\n", file, lineno);
			problems++;
			continue;
		}
		if (ind == 0) {
			in_paths = strcmp(s, "paths:") == 0;
			seen_paths |= in_paths;
			cur = NULL;
			cur_path[0] = '\0';
			continue;
		}
		if (!in_paths)
			continue;
		char key[PATH_LEN], val[512];
		if (in_block_scopes) {
			if (cur && ind > 6 && s[0] == '-' && s[1] == ' ') {
				add_scope(cur, s + 2, strlen(s + 2));
				continue;
			}
			in_block_scopes = false;
		}
		if (in_security) {
			if (cur && ind > 6) {
				if (strstr(s, "accessToken"))
					cur->access_token = true;
				continue;
			}
			in_security = false;
		}
		if (ind == 2) {
			cur = NULL;
			cur_path[0] = '\0';
			if (!split_key(s, key, sizeof key, val, sizeof val) || key[0] != '/')
				continue;
			snprintf(cur_path, sizeof cur_path, "%s", key);
			continue;
		}
		if (ind == 4) {
			cur = NULL;
			if (!cur_path[0] || !split_key(s, key, sizeof key, val, sizeof val) ||
			    !is_method(key))
				continue;
			if (nops == MAX_OPS) {
				fprintf(stderr, "%s:%d: more than %d operations\n", file, lineno, MAX_OPS);
				problems++;
				continue;
			}
			cur = &ops[nops++];
			memset(cur, 0, sizeof *cur);
			for (size_t i = 0; key[i] && i + 1 < sizeof cur->method; i++)
				cur->method[i] = (char)toupper((unsigned char)key[i]);
			snprintf(cur->path, sizeof cur->path, "%s", cur_path);
			cur->line = lineno;
			continue;
		}
		if (ind == 6 && cur && split_key(s, key, sizeof key, val, sizeof val)) {
			if (strcmp(key, "x-scopes") == 0) {
				cur->has_scopes = true;
				if (val[0])
					parse_flow_scopes(cur, val);
				else
					in_block_scopes = true;
			} else if (strcmp(key, "security") == 0) {
				cur->security_seen = true;
				cur->security_empty = strcmp(val, "[]") == 0;
				if (strstr(val, "accessToken"))
					cur->access_token = true;
				in_security = val[0] == '\0';
			}
		}
	}
	free(line);
	fclose(f);
	if (!seen_paths) {
		fprintf(stderr, "%s: no top-level paths: key\n", file);
		return -1;
	}
	return 0;
}

static struct op *find_op(const char *method, const char *path)
{
	for (size_t i = 0; i < nops; i++)
		if (strcasecmp(ops[i].method, method) == 0 && strcmp(ops[i].path, path) == 0)
			return &ops[i];
	return NULL;
}

static bool table_has(const char *method, const char *path)
{
	for (size_t i = 0; i < route_count; i++)
		if (strcasecmp(route_table[i].method, method) == 0 &&
		    strcmp(route_table[i].pattern, path) == 0)
			return true;
	return false;
}

static void heading(bool *printed, const char *title)
{
	if (!*printed)
		printf("\n%s\n", title);
	*printed = true;
}

int main(int argc, char **argv)
{
	/* The file built in, or another one (to try the checker itself). */
	const char *file = argc > 1 ? argv[1] : OPENAPI_PATH;
	if (parse_spec(file) < 0)
		return 1;
	printf("contract: %s has %zu operations; the route table has %zu routes\n", file, nops, route_count);

	bool h = false;
	for (size_t i = 0; i < nops; i++)
		for (size_t j = i + 1; j < nops; j++)
			if (strcmp(ops[i].method, ops[j].method) == 0 &&
			    strcmp(ops[i].path, ops[j].path) == 0) {
				heading(&h, "DUPLICATED IN THE SPEC:");
				printf("  %-7s %s (lines %d and %d)\n", ops[i].method, ops[i].path,
				       ops[i].line, ops[j].line);
				problems++;
			}
	h = false;
	for (size_t i = 0; i < route_count; i++)
		for (size_t j = i + 1; j < route_count; j++)
			if (strcmp(route_table[i].method, route_table[j].method) == 0 &&
			    strcmp(route_table[i].pattern, route_table[j].pattern) == 0) {
				heading(&h, "DUPLICATED IN THE ROUTE TABLE:");
				printf("  %-7s %s\n", route_table[i].method, route_table[i].pattern);
				problems++;
			}

	/* Table -> spec. */
	h = false;
	for (size_t i = 0; i < route_count; i++) {
		const struct http_route *rt = &route_table[i];
		struct op *o = find_op(rt->method, rt->pattern);
		if (!o) {
			heading(&h, "IN THE ROUTE TABLE, NOT IN THE SPEC:");
			printf("  %-7s %s\n", rt->method, rt->pattern);
			problems++;
			continue;
		}
		o->matched = true;
	}

	/* Spec -> table. */
	h = false;
	for (size_t i = 0; i < nops; i++) {
		struct op *o = &ops[i];
		if (o->matched)
			continue;
		if (strcmp(o->method, "HEAD") == 0 && table_has("GET", o->path))
			continue; /* HEAD is answered as GET */
		heading(&h, "IN THE SPEC, NOT IN THE ROUTE TABLE:");
		printf("  %-7s %s (line %d)\n", o->method, o->path, o->line);
		problems++;
	}

	/* Who may call: scopes and public routes, for the routes in both. */
	h = false;
	for (size_t i = 0; i < route_count; i++) {
		const struct http_route *rt = &route_table[i];
		struct op *o = find_op(rt->method, rt->pattern);
		if (!o)
			continue;
		bool is_public = rt->flags & RF_PUBLIC;
		unsigned want = is_public		      ? 0
				: (rt->flags & RF_ADMIN_ONLY) ? (unsigned)AUTH_SCOPE_ADMIN
							      : rt->scope;
		char want_text[128];
		auth_scopes_format(want, want_text, sizeof want_text);
		if (!o->has_scopes || o->scopes_bad || o->scopes != want) {
			heading(&h, "SCOPE OR SECURITY DIFFERENCES:");
			if (!o->has_scopes)
				printf("  %-7s %s: no x-scopes in the spec; the route table has [%s]\n",
				       rt->method, rt->pattern, want_text);
			else if (o->scopes_bad)
				printf("  %-7s %s: x-scopes [%s] holds an unknown scope name\n", rt->method,
				       rt->pattern, o->scope_text);
			else
				printf("  %-7s %s: x-scopes [%s] in the spec, [%s] in the route table\n",
				       rt->method, rt->pattern, o->scope_text, want_text);
			problems++;
		}
		if (is_public && !o->security_empty) {
			heading(&h, "SCOPE OR SECURITY DIFFERENCES:");
			printf("  %-7s %s: public in the route table, but the spec does not say `security: "
			       "[]`\n",
			       rt->method, rt->pattern);
			problems++;
		}
		if (!is_public && o->security_empty) {
			heading(&h, "SCOPE OR SECURITY DIFFERENCES:");
			printf(
			    "  %-7s %s: needs a token in the route table, but the spec says `security: []`\n",
			    rt->method, rt->pattern);
			problems++;
		}
		bool sse = rt->flags & RF_SSE;
		if (sse != o->access_token) {
			heading(&h, "SCOPE OR SECURITY DIFFERENCES:");
			printf("  %-7s %s: %s\n", rt->method, rt->pattern,
			       sse ? "an event stream (?access_token= accepted), but the spec has no "
				     "accessToken security"
				   : "the spec allows accessToken (?access_token=), but the route is not an "
				     "event stream");
			problems++;
		}
	}

	if (problems) {
		printf("\ncontract: FAIL, %d difference%s between routes/router.c and %s\n", problems,
		       problems == 1 ? "" : "s", file);
		return 1;
	}
	printf("contract: OK, the route table and the spec agree\n");
	return 0;
}
