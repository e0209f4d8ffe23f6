#include "common/nodes.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xmalloc.h"

static bool lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool sbx_node_id_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n < 1 || n > SBX_NODE_ID_MAX || !lower_alnum(s[0]) || !lower_alnum(s[n - 1]))
		return false;
	for (size_t i = 1; i + 1 < n; i++)
		if (!lower_alnum(s[i]) && s[i] != '-')
			return false;
	return true;
}

void sbx_node_id_from_host(const char *host, char *out, size_t outsz)
{
	char tmp[SBX_NODE_ID_MAX + 1];
	size_t n = 0;
	for (const char *p = host ? host : ""; *p && *p != '.' && n < SBX_NODE_ID_MAX; p++) {
		char c = *p >= 'A' && *p <= 'Z' ? (char)(*p - 'A' + 'a') : *p;
		tmp[n++] = lower_alnum(c) ? c : '-';
	}
	while (n && tmp[n - 1] == '-')
		n--;
	tmp[n] = '\0';
	const char *s = tmp;
	while (*s == '-')
		s++;
	snprintf(out, outsz, "%s", *s ? s : "node");
}

bool sbx_node_of(const char *id, char *out, size_t outsz)
{
	const char *us = id ? strchr(id, '_') : NULL;
	if (!us || us == id || (size_t)(us - id) > SBX_NODE_ID_MAX)
		return false;
	char tmp[SBX_NODE_ID_MAX + 1];
	memcpy(tmp, id, (size_t)(us - id));
	tmp[us - id] = '\0';
	if (!sbx_node_id_ok(tmp))
		return false;
	snprintf(out, outsz, "%s", tmp);
	return true;
}

static int url_ok(const char *u)
{
	size_t n = strlen(u);
	if (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0)
		return -EINVAL;
	if (n > 512 || strpbrk(u, "?# \t\r\n") || strlen(strstr(u, "//") + 2) == 0)
		return -EINVAL;
	/* No user:password@ in the authority: `config show` prints the URL and
	 * the log names it; a peer's secret is its token-file. */
	const char *auth = strstr(u, "//") + 2;
	size_t alen = strcspn(auth, "/");
	if (memchr(auth, '@', alen))
		return -EPERM;
	return 0;
}

/* One element of the array into p. 0 or -EINVAL with err. */
static int parse_peer(json_t *e, size_t i, struct sbx_peer *p, char *err, size_t errsz)
{
	const char *k;
	json_t *v;
	if (!json_is_object(e)) {
		snprintf(err, errsz, "nodes[%zu]: expected an object {\"id\", \"url\"}", i);
		return -EINVAL;
	}
	json_object_foreach(e, k, v) {
		bool known = !strcmp(k, "id") || !strcmp(k, "url") || !strcmp(k, "token-file") ||
			     !strcmp(k, "ca-file");
		if (!known || !json_is_string(v)) {
			snprintf(err, errsz, "nodes[%zu]: %s '%s'", i,
				 known ? "expected a string for" : "unknown key", k);
			return -EINVAL;
		}
	}
	const char *id = json_string_value(json_object_get(e, "id"));
	const char *url = json_string_value(json_object_get(e, "url"));
	if (!sbx_node_id_ok(id)) {
		snprintf(err, errsz, "nodes[%zu]: id must match [a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?", i);
		return -EINVAL;
	}
	int urc = url ? url_ok(url) : -EINVAL;
	if (urc == -EPERM) {
		snprintf(err, errsz,
			 "nodes[%zu] (%s): url must hold no user:password@ (the token is token-file)", i, id);
		return -EINVAL;
	}
	if (urc < 0) {
		snprintf(err, errsz,
			 "nodes[%zu] (%s): url must be http://HOST[:PORT] or https://... (no query)", i, id);
		return -EINVAL;
	}
	snprintf(p->id, sizeof p->id, "%s", id);
	p->url = xstrdup(url);
	size_t n = strlen(p->url);
	while (n && p->url[n - 1] == '/')
		p->url[--n] = '\0';
	const char *tf = json_string_value(json_object_get(e, "token-file"));
	const char *ca = json_string_value(json_object_get(e, "ca-file"));
	p->token_file = tf ? xstrdup(tf) : NULL;
	p->ca_file = ca ? xstrdup(ca) : NULL;
	return 0;
}

int sbx_nodes_parse(const char *text, struct sbx_nodes *out, char *err, size_t errsz)
{
	struct sbx_nodes r = {NULL, 0};
	json_error_t jerr;
	json_t *root = NULL;
	int rc = 0;
	if (!text || !*text) {
		*out = r;
		return 0;
	}
	root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_array(root)) {
		snprintf(err, errsz, "nodes: expected a JSON array of {\"id\", \"url\"}%s%s",
			 root ? "" : ": ", root ? "" : jerr.text);
		json_decref(root);
		return -EINVAL;
	}
	r.v = xcalloc(json_array_size(root) + 1, sizeof *r.v);
	for (size_t i = 0; i < json_array_size(root) && rc == 0; i++) {
		rc = parse_peer(json_array_get(root, i), i, &r.v[r.n], err, errsz);
		if (rc == 0 && sbx_nodes_find(&r, r.v[r.n].id)) {
			snprintf(err, errsz, "nodes: id %s appears twice", r.v[r.n].id);
			rc = -EINVAL;
		}
		r.n++;
	}
	json_decref(root);
	if (rc < 0) {
		sbx_nodes_free(&r);
		return rc;
	}
	*out = r;
	return 0;
}

void sbx_nodes_free(struct sbx_nodes *n)
{
	for (size_t i = 0; n && i < n->n; i++) {
		free(n->v[i].url);
		free(n->v[i].token_file);
		free(n->v[i].ca_file);
	}
	if (n) {
		free(n->v);
		n->v = NULL;
		n->n = 0;
	}
}

const struct sbx_peer *sbx_nodes_find(const struct sbx_nodes *n, const char *id)
{
	for (size_t i = 0; n && i < n->n; i++)
		if (strcmp(n->v[i].id, id) == 0)
			return &n->v[i];
	return NULL;
}
