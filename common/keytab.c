#include "common/keytab.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/xmalloc.h"

static unsigned bucket_of(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < KEYTAB_KEY - 1 && s[i]; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h % KEYTAB_BUCKETS;
}

struct keytab_node *keytab_find(const struct keytab *t, const char *key)
{
	for (struct keytab_node *n = t->buckets[bucket_of(key)]; n; n = n->next)
		if (strncmp(n->key, key, KEYTAB_KEY - 1) == 0)
			return n;
	return NULL;
}

struct keytab_node *keytab_find_or_add(struct keytab *t, const char *key, size_t size)
{
	struct keytab_node *n = keytab_find(t, key);
	if (n)
		return n;
	n = xcalloc(1, size < sizeof *n ? sizeof *n : size);
	snprintf(n->key, sizeof n->key, "%s", key);
	unsigned b = bucket_of(n->key);
	n->next = t->buckets[b];
	t->buckets[b] = n;
	return n;
}

void keytab_remove(struct keytab *t, struct keytab_node *n)
{
	for (struct keytab_node **p = &t->buckets[bucket_of(n->key)]; *p; p = &(*p)->next)
		if (*p == n) {
			*p = n->next;
			n->next = NULL;
			return;
		}
}

static struct keytab_node *from_bucket(const struct keytab *t, size_t b)
{
	for (; b < KEYTAB_BUCKETS; b++)
		if (t->buckets[b])
			return t->buckets[b];
	return NULL;
}

struct keytab_node *keytab_first(const struct keytab *t)
{
	return from_bucket(t, 0);
}

struct keytab_node *keytab_next(const struct keytab *t, const struct keytab_node *n)
{
	return n->next ? n->next : from_bucket(t, bucket_of(n->key) + 1);
}
