/* Node ids and the node list (common/nodes.h), and the configuration
 * keys that carry them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/nodes.h"

static void test_node_id_grammar(void **state)
{
	(void)state;
	static const char *const good[] = {"a", "node-a",   "sandboxd-0",
					   "0", "a1-b2-c3", "abcdefghijklmnopqrstuvwxyz012345"};
	static const char *const bad[] = {
	    "", "-a", "a-", "Node", "node_a", "node.a", "a b", "abcdefghijklmnopqrstuvwxyz0123456", "é"};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
		assert_true(sbx_node_id_ok(good[i]));
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_false(sbx_node_id_ok(bad[i]));
	assert_false(sbx_node_id_ok(NULL));
}

static void test_node_id_from_host(void **state)
{
	(void)state;
	char id[SBX_NODE_ID_MAX + 1];
	static const char *const cases[][2] = {
	    {"sandboxd-0", "sandboxd-0"},
	    {"Web01.example.com", "web01"},
	    {"my_host", "my-host"},
	    {"--x--", "x"},
	    {"", "node"},
	    {"___", "node"},
	    {"a-very-long-host-name-that-goes-on-and-on", "a-very-long-host-name-that-goes"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		sbx_node_id_from_host(cases[i][0], id, sizeof id);
		assert_string_equal(id, cases[i][1]);
		assert_true(sbx_node_id_ok(id));
	}
}

static void test_node_of(void **state)
{
	(void)state;
	char n[SBX_NODE_ID_MAX + 1];
	assert_true(sbx_node_of("node-a_0123abcd", n, sizeof n));
	assert_string_equal(n, "node-a");
	/* base64url tokens hold '_' too: only the first one separates */
	assert_true(sbx_node_of("node-b_ab_c-d", n, sizeof n));
	assert_string_equal(n, "node-b");
	assert_false(sbx_node_of("mine-1", n, sizeof n));
	assert_false(sbx_node_of("_x", n, sizeof n));
	assert_false(sbx_node_of("Node_x", n, sizeof n));
	assert_false(sbx_node_of("abcdefghijklmnopqrstuvwxyz0123456_x", n, sizeof n));
}

static void test_nodes_parse(void **state)
{
	(void)state;
	struct sbx_nodes n;
	char err[256];
	assert_int_equal(sbx_nodes_parse(NULL, &n, err, sizeof err), 0);
	assert_int_equal(n.n, 0);
	assert_int_equal(
	    sbx_nodes_parse(
		"[{\"id\":\"node-a\",\"url\":\"http://10.1.2.3:8080/\"},"
		"{\"id\":\"node-b\",\"url\":\"https://b:8443\",\"token-file\":\"/t\",\"ca-file\":\"/ca\"}]",
		&n, err, sizeof err),
	    0);
	assert_int_equal(n.n, 2);
	assert_string_equal(n.v[0].url, "http://10.1.2.3:8080");
	assert_null(n.v[0].token_file);
	assert_string_equal(sbx_nodes_find(&n, "node-b")->token_file, "/t");
	assert_string_equal(sbx_nodes_find(&n, "node-b")->ca_file, "/ca");
	assert_null(sbx_nodes_find(&n, "node-c"));
	sbx_nodes_free(&n);
	static const char *const bad[][2] = {
	    {"{}", "JSON array"},
	    {"[1]", "expected an object"},
	    {"[{\"id\":\"a\"}]", "url"},
	    {"[{\"id\":\"A\",\"url\":\"http://x\"}]", "id must match"},
	    {"[{\"id\":\"a\",\"url\":\"ftp://x\"}]", "url"},
	    {"[{\"id\":\"a\",\"url\":\"http://x?y\"}]", "url"},
	    /* credentials in the URL would be printed by `config show` and logged:
	     * a peer's token is its token-file */
	    {"[{\"id\":\"a\",\"url\":\"https://ops:hunter2@x:8443\"}]", "no user:password@"},
	    {"[{\"id\":\"a\",\"url\":\"http://ops@x\"}]", "no user:password@"},
	    {"[{\"id\":\"a\",\"url\":\"http://x\",\"token\":\"t\"}]", "unknown key 'token'"},
	    {"[{\"id\":\"a\",\"url\":\"http://x\"},{\"id\":\"a\",\"url\":\"http://y\"}]", "twice"},
	    {"[", "JSON array"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		assert_int_equal(sbx_nodes_parse(bad[i][0], &n, err, sizeof err), -EINVAL);
		if (!strstr(err, bad[i][1]))
			fail_msg("%s: '%s' does not say '%s'", bad[i][0], err, bad[i][1]);
	}
}

static void test_config_keys(void **state)
{
	(void)state;
	struct sbx_config c;
	char err[256];
	cfg_defaults(&c);
	assert_int_equal(cfg_set(&c, "node-id", "Bad_Id", err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "node-id"));
	assert_int_equal(cfg_set(&c, "nodes", "[{\"id\":\"x\"}]", err, sizeof err), -EINVAL);
	assert_int_equal(cfg_set(&c, "nodes", "[{\"id\":\"x\",\"url\":\"http://h:1\"}]", err, sizeof err), 0);
	cfg_finish(&c);
	/* The default comes from the host name, and is a valid id. */
	assert_non_null(c.node_id);
	assert_true(sbx_node_id_ok(c.node_id));
	assert_int_equal(c.nodes_timeout_ms, 5000);
	cfg_free(&c);

	/* In a file the node list is JSON itself. */
	char path[64];
	snprintf(path, sizeof path, "/tmp/sandboxd-cfg-XXXXXX");
	int fd = mkstemp(path);
	const char *text =
	    "{\"node-id\": \"node-b\", \"nodes\": [{\"id\": \"node-a\", \"url\": \"http://a:8080\"}]}";
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	cfg_defaults(&c);
	assert_int_equal(cfg_load_file(&c, path, err, sizeof err), 0);
	cfg_finish(&c);
	assert_string_equal(c.node_id, "node-b");
	struct sbx_nodes n;
	assert_int_equal(sbx_nodes_parse(c.nodes, &n, err, sizeof err), 0);
	assert_int_equal(n.n, 1);
	assert_string_equal(n.v[0].url, "http://a:8080");
	sbx_nodes_free(&n);
	cfg_free(&c);
	cfg_defaults(&c);
	const char *bad = "{\"nodes\": {\"id\": \"node-a\"}}";
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
	close(fd);
	assert_int_equal(cfg_load_file(&c, path, err, sizeof err), -EINVAL);
	cfg_free(&c);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_node_id_grammar), cmocka_unit_test(test_node_id_from_host),
	    cmocka_unit_test(test_node_of),	    cmocka_unit_test(test_nodes_parse),
	    cmocka_unit_test(test_config_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
