/* Released migrations are immutable (migrations/RELEASED, docs/upgrades.md):
 * each file a release shipped keeps the bytes it shipped with, in the
 * source tree and in the binary, and every new migration runs after them.
 * A store of that release is at its last migration's number and runs only
 * the migrations numbered above it: an edit of a released file would never
 * reach it, and a migration numbered among the released ones would never
 * run there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "common/buf.h"
#include "common/embedded.h"
#include "common/xmalloc.h"
#include "store/store.h"

#define RELEASED_PATH SBX_SOURCE_DIR "/migrations/RELEASED"
#define MAX_RELEASED 1000

struct released {
	char tag[32];
	char file[128];
	char sha[72];
};

/* migrations/RELEASED's lines into out (comments and blank lines left
 * out); a malformed line fails the test. */
static size_t load_released(struct released *out, size_t max)
{
	struct buf b;
	size_t n = 0, line = 0;
	char *text, *next;

	buf_init(&b, 1u << 20);
	if (buf_read_file(&b, RELEASED_PATH) < 0)
		fail_msg("cannot read %s", RELEASED_PATH);
	text = buf_steal(&b, NULL);
	for (char *l = text; l && *l; l = next) {
		char extra[2];

		next = strchr(l, '\n');
		if (next)
			*next++ = '\0';
		line++;
		if (l[0] == '#' || l[strspn(l, " \t")] == '\0')
			continue;
		if (n == max ||
		    sscanf(l, "%31s %127s %71s %1s", out[n].tag, out[n].file, out[n].sha, extra) != 3 ||
		    strlen(out[n].sha) != 64 || strspn(out[n].sha, "0123456789abcdef") != 64)
			fail_msg("%s line %zu: want \"TAG FILE SHA256\" (lower-case hex), got: %s",
				 RELEASED_PATH, line, l);
		n++;
	}
	free(text);
	return n;
}

static void sha256_hex(const void *p, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	assert_int_equal(EVP_Digest(p, len, md, &mdlen, EVP_sha256(), NULL), 1);
	assert_int_equal(mdlen, 32);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* What a changed released file gets told. */
static void say_changed(const struct released *r, const char *where, const char *have)
{
	print_error("migrations/%s %s (sha256 %s; migrations/RELEASED records %s): it shipped in %s, so "
		    "stores in the field already ran it and would never run it again. Restore it as it was "
		    "released and change the schema with a new migration, numbered above every released "
		    "one, instead (docs/upgrades.md)\n",
		    r->file, where, have, r->sha, r->tag);
}

/* The source tree's files and the binary's copies are the bytes released. */
static void test_released_unchanged(void **state)
{
	(void)state;
	static struct released rel[MAX_RELEASED];
	size_t n = load_released(rel, MAX_RELEASED);
	int bad = 0;

	assert_true(n > 0);
	for (size_t i = 0; i < n; i++) {
		char *path = xasprintf("%s/migrations/%s", SBX_SOURCE_DIR, rel[i].file), have[65];
		struct buf b;
		size_t len = 0;

		buf_init(&b, 1u << 26);
		if (buf_read_file(&b, path) < 0) {
			print_error(
			    "migrations/%s shipped in %s and is gone: restore it (a released migration is "
			    "never removed or renamed; docs/upgrades.md)\n",
			    rel[i].file, rel[i].tag);
			bad++;
		} else {
			char *data = buf_steal(&b, &len);

			sha256_hex(data, len, have);
			if (strcmp(have, rel[i].sha) != 0) {
				say_changed(&rel[i], "changed after its release", have);
				bad++;
			}
			free(data);
		}
		buf_free(&b);
		free(path);
		/* The binary runs its embedded copies, in order: the released
		 * ones first, as released. */
		if (i >= embedded_migrations_count || strcmp(embedded_migrations[i].name, rel[i].file) != 0) {
			print_error("the binary's migration %zu is %s, migrations/RELEASED's is %s: released "
				    "migrations run first, in the order released\n",
				    i + 1,
				    i < embedded_migrations_count ? embedded_migrations[i].name : "(none)",
				    rel[i].file);
			bad++;
			continue;
		}
		sha256_hex(embedded_migrations[i].data, embedded_migrations[i].len, have);
		if (strcmp(have, rel[i].sha) != 0) {
			say_changed(&rel[i], "embedded in this binary differs", have);
			bad++;
		}
	}
	assert_int_equal(bad, 0);
}

/* Releases in order, each file once; every migration numbered, the
 * numbers rising in the order they run, so a new one runs after the
 * released ones on every store. */
static void test_numbering(void **state)
{
	(void)state;
	static struct released rel[MAX_RELEASED];
	size_t n = load_released(rel, MAX_RELEASED);
	const char *name;
	int num = 0, last = 0;

	for (size_t i = 1; i < n; i++) {
		bool new_tag = strcmp(rel[i].tag, rel[i - 1].tag) != 0;

		for (size_t j = 0; j < i; j++) {
			if (new_tag && strcmp(rel[j].tag, rel[i].tag) == 0)
				fail_msg(
				    "migrations/RELEASED: the lines of %s are not together (%s): a release's "
				    "migrations are appended after the last release's",
				    rel[i].tag, rel[i].file);
			if (strcmp(rel[j].file, rel[i].file) == 0)
				fail_msg("migrations/RELEASED names %s twice", rel[i].file);
		}
	}
	for (size_t i = 0; (name = store_migration_name(i, &num)); i++) {
		if (num <= last)
			fail_msg("migration %s (number %d) runs after number %d: each new migration takes "
				 "the next "
				 "number (NNNN_name.sql), above every released one",
				 name, num, last);
		last = num;
	}
	assert_int_equal(last, store_known_version());
	assert_true(n <= embedded_migrations_count);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_released_unchanged),
	    cmocka_unit_test(test_numbering),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
