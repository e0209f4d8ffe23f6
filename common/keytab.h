#pragma once
/* A table keyed by a short string (a tenant's name, say): find, find or
 * add, remove, walk. Intrusive: the caller's record begins with a
 * struct keytab_node and the table links those; the caller frees them.
 * Keys are cut to KEYTAB_KEY - 1 bytes, and compared so. Not locked. */
#include <stddef.h>

#define KEYTAB_KEY 64
#define KEYTAB_BUCKETS 256

struct keytab_node {
	char key[KEYTAB_KEY];
	struct keytab_node *next; /* hash chain */
};

struct keytab {
	struct keytab_node *buckets[KEYTAB_BUCKETS];
};

struct keytab_node *keytab_find(const struct keytab *t, const char *key);
/* key's node, else a new one of size bytes (at least a keytab_node: the
 * caller's record), zeroed but for its key, in the table. */
struct keytab_node *keytab_find_or_add(struct keytab *t, const char *key, size_t size);
/* Unlink n from the table; it is the caller's to free. */
void keytab_remove(struct keytab *t, struct keytab_node *n);
/* A walk over every node: first, then next until NULL (bucket by bucket). */
struct keytab_node *keytab_first(const struct keytab *t);
struct keytab_node *keytab_next(const struct keytab *t, const struct keytab_node *n);
