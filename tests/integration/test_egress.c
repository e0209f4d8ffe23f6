/* Egress by name, on every connection (issue 29), against the real
 * binary over HTTP with real programs in the sandbox: curl, python's
 * http.client (which knows no proxy), openssl s_client, getent. The
 * server's outgoing side and the upstream servers live in namespaces
 * this test makes (it_egress.h): nothing leaves the machine. One server
 * and one upstream world for the file; each case runs many probes in one
 * command, one line each ("KEY body rc=N"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xmalloc.h"
#include "harness.h"
#include "it_egress.h"

static struct it_server srv;
static struct it_egress world;
static char *tok, *tok_audit, *tok_b, *tok_ops;

static const struct it_tok toks[] = {{&tok, "acme", NULL},
				     {&tok_audit, "acme", "audit:read"},
				     {&tok_b, "globex", NULL},
				     {&tok_ops, "ops", "admin"}};

/* The probe of every script: KEY, then curl's output on one line and its
 * exit status. */
#define PROBE                                                                                                \
	"c() { k=$1; shift; o=$(curl -sS --max-time 5 --cacert /workspace/ca.pem \"$@\" 2>&1); r=$?; "       \
	"echo \"$k $(echo \"$o\" | tr '\\n' ' ') rc=$r\"; }\n"

static int setup(void **state)
{
	(void)state;
	if (it_start_minted(&srv, NULL, toks, IT_NTOKS(toks)) != 0)
		return -1;
	it_egress_upload_ca(&srv, &world, tok);
	it_egress_upload_ca(&srv, &world, tok_b);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* script under `sh` with network: true as t; the ShellResult. */
static json_t *run_net(const char *t, const char *script)
{
	char *cmd = xasprintf(PROBE "%s", script);
	json_t *res =
	    ex_ok(&srv, t, NULL, json_pack("{s:s, s:b, s:i}", "command", cmd, "network", 1, "timeout_s", 60));
	free(cmd);
	fprintf(stderr, "--- %s", jstr(res, "stdout"));
	return res;
}

/* The line of out starting with "key " (caller frees), or fail. */
static char *line_of(const char *out, const char *key)
{
	size_t k = strlen(key);
	for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, key, k) == 0 && p[k] == ' ')
			return xstrndup(p, strcspn(p, "\n"));
	fail_msg("no line %s in:\n%s", key, out ? out : "(no output)");
	return NULL;
}

/* key reached who's server (its answer, curl's 0). */
static void reached(json_t *res, const char *key, const char *who)
{
	char *l = line_of(jstr(res, "stdout"), key), *want = xasprintf("I am %s ", who);
	if (!strstr(l, want) || !strstr(l, " rc=0"))
		fail_msg("%s: want the answer of %s, got '%s'", key, who, l);
	free(want);
	free(l);
}

/* key reached no server at all. */
static void refused(json_t *res, const char *key)
{
	char *l = line_of(jstr(res, "stdout"), key);
	if (strstr(l, "I am ") || strstr(l, " rc=0"))
		fail_msg("%s: want refused, got '%s'", key, l);
	free(l);
}

/* The ShellResult's egress_denied names dest with a reason containing
 * why (any reason when why is NULL). */
static void denied(json_t *res, const char *dest, const char *why)
{
	json_t *d = json_object_get(res, "egress_denied"), *v;
	size_t i;
	json_array_foreach(d, i, v) {
		const char *got = jstr(v, "dest"), *reason = jstr(v, "reason");
		if (got && strcmp(got, dest) == 0 && reason && *reason && (!why || strstr(reason, why)))
			return;
	}
	char *txt = json_dumps(d ? d : json_null(), JSON_COMPACT);
	fail_msg("egress_denied has no %s (%s): %s", dest, why ? why : "any reason", txt);
	free(txt);
}

/* The test's own world, before the server is asked anything: the
 * routes were checked by it_egress_enter; each name answers from here
 * with its own server, over HTTPS with the test CA. */
static void test_world(void **state)
{
	(void)state;
	for (size_t i = 0; i < EG_NNAMES; i++) {
		const char *name = eg_names[i][0];
		const char *who = strcmp(name, "shared.test") == 0 ? "allowed.test"
				  : strcmp(name, "wild.test") == 0 ? "api.wild.test"
								   : name;
		int rc =
		    it_sh("curl -sS --max-time 5 --cacert %s/ca.pem https://%s/ | grep -q 'I am %s at %s '",
			  world.dir, name, who, eg_names[i][1]);
		if (rc != 0)
			fail_msg("https://%s/ does not answer as %s from the test's namespace", name, who);
	}
	assert_int_equal(it_sh("python3 -c 'import socket; "
			       "s=socket.create_connection((\"" EG_ALLOWED "\", 2222), 5); "
			       "assert b\"I am allowed.test\" in s.recv(100)'"),
			 0);
	/* the sandbox has the programs and the CA, where the tests look */
	json_t *res =
	    ex_run(&srv, tok,
		   "command -v curl python3 openssl getent >/dev/null && "
		   "grep -q 'BEGIN CERTIFICATE' /workspace/ca.pem && touch /workspace/world-mark && echo ok");
	assert_string_equal(ex_stdout_ok(res), "ok\n");
	assert_true(it_ws_exists(&srv, "acme", "world-mark"));
	json_decref(res);
}

/* By name: the allowlisted name over HTTPS and HTTP; a name not listed
 * on the same address, by SNI and by Host; an SNI or Host forged to
 * another address lands on the allowed name's server or nowhere, never
 * on the address the command chose. */
static void test_by_name(void **state)
{
	(void)state;
	it_egress_forget(&world);
	it_egress_policy(&srv, tok_ops, "acme", "allowed.test");
	json_t *res = run_net(tok, "c A1 https://allowed.test/\n"
				   "c A2 http://allowed.test/\n"
				   "c S1 --resolve shared.test:443:" EG_ALLOWED " https://shared.test/\n"
				   "c S2 --resolve shared.test:80:" EG_ALLOWED " http://shared.test/\n"
				   "c S3 -H 'Host: shared.test' http://" EG_ALLOWED "/\n"
				   "c O1 --resolve other.test:443:" EG_OTHER " https://other.test/\n"
				   "c F1 --resolve allowed.test:443:" EG_OTHER " https://allowed.test/\n"
				   "c F2 --resolve allowed.test:80:" EG_OTHER " http://allowed.test/\n"
				   "c F3 -H 'Host: allowed.test' http://" EG_OTHER "/\n");
	reached(res, "A1", "allowed.test");
	reached(res, "A2", "allowed.test");
	const char *no[] = {"S1", "S2", "S3", "O1"};
	for (size_t i = 0; i < 4; i++)
		refused(res, no[i]);
	const char *forged[] = {"F1", "F2", "F3"};
	for (size_t i = 0; i < 3; i++) {
		char *l = line_of(jstr(res, "stdout"), forged[i]);
		if (strstr(l, "I am other.test"))
			fail_msg("%s: a forged name reached the address the command chose: '%s'", forged[i],
				 l);
		free(l);
	}
	denied(res, "shared.test:443", "not in");
	denied(res, "other.test:443", "not in");
	/* the upstream side: shared.test and other.test never asked */
	assert_int_equal(it_egress_seen(&world, "host=shared.test", NULL), 0);
	assert_int_equal(it_egress_seen(&world, "sni=shared.test", NULL), 0);
	assert_int_equal(it_egress_seen(&world, EG_OTHER ":", NULL), 0);
	json_decref(res);
}

/* A name resolving to a private or metadata address is refused unless a
 * CIDR rule grants the address; nothing can grant the metadata one. */
static void test_internal_addresses(void **state)
{
	(void)state;
	it_egress_forget(&world);
	static const char script[] = "c P1 http://private.test/\nc P2 https://private.test/\n"
				     "c M1 http://meta.test/\nc M2 https://meta.test/\n";
	it_egress_policy(&srv, tok_ops, "acme", "private.test, meta.test");
	json_t *res = run_net(tok, script);
	refused(res, "P1");
	refused(res, "P2");
	refused(res, "M1");
	refused(res, "M2");
	denied(res, "private.test:80", "private");
	denied(res, "meta.test:80", "metadata");
	json_decref(res);

	it_egress_policy(&srv, tok_ops, "acme", "private.test, meta.test, 10.77.0.0/16");
	res = run_net(tok, script);
	reached(res, "P1", "private.test");
	reached(res, "P2", "private.test");
	refused(res, "M1");
	refused(res, "M2");
	json_decref(res);
	assert_int_equal(pol_put(&srv, tok_ops, "acme", "{\"network\": \"meta.test, 169.254.0.0/16\"}", NULL),
			 400);
	assert_int_equal(it_egress_seen(&world, EG_META ":", NULL), 0);
}

/* Deny rules win whatever their order; wildcards match below the name
 * only; ports and port ranges. */
static void test_rules(void **state)
{
	(void)state;
	it_egress_policy(&srv, tok_ops, "acme", "!other.test, *.test");
	json_t *res = run_net(tok, "c D1 https://allowed.test/\n"
				   "c D2 --resolve other.test:443:" EG_OTHER " https://other.test/\n");
	reached(res, "D1", "allowed.test");
	refused(res, "D2");
	denied(res, "other.test:443", "!other.test");
	json_decref(res);

	it_egress_policy(&srv, tok_ops, "acme", "*.wild.test");
	res = run_net(tok, "c W1 https://api.wild.test/\n"
			   "c W2 --resolve wild.test:443:" EG_WILD " https://wild.test/\n"
			   "c W3 --resolve allowed.test:443:" EG_ALLOWED " https://allowed.test/\n");
	reached(res, "W1", "api.wild.test");
	refused(res, "W2");
	refused(res, "W3");
	json_decref(res);

	it_egress_policy(&srv, tok_ops, "acme", "allowed.test:443, api.wild.test:79-81");
	res = run_net(tok, "c T1 https://allowed.test/\nc T2 http://allowed.test/\n"
			   "c T3 http://api.wild.test/\nc T4 https://api.wild.test/\n");
	reached(res, "T1", "allowed.test");
	refused(res, "T2");
	reached(res, "T3", "api.wild.test");
	refused(res, "T4");
	denied(res, "allowed.test:80", NULL);
	json_decref(res);
}

/* A running command's next connection follows the policy of now: it
 * connects, says so (a mark in its workspace), waits for the test's
 * mark (deadline inside), and connects again. */
static void test_live_change(void **state)
{
	(void)state;
	it_egress_policy(&srv, tok_ops, "acme", "allowed.test");
	it_sh_quiet("rm -f %s/tenants/acme/workspace/phase1 %s/tenants/acme/workspace/go", srv.dir, srv.dir);
	char *cmd = xasprintf(
	    PROBE "c B1 https://allowed.test/\n"
		  "c B2 --resolve other.test:443:" EG_OTHER " https://other.test/\n"
		  "touch /workspace/phase1\n"
		  "i=0; while [ ! -e /workspace/go ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done\n"
		  "c L1 https://allowed.test/\n"
		  "c L2 --resolve other.test:443:" EG_OTHER " https://other.test/\n");
	char *id = it_egress_bg(&srv, tok, cmd);
	it_egress_wait_mark(&srv, "acme", tok, id, "phase1");
	it_egress_policy(&srv, tok_ops, "acme", "other.test");
	it_egress_mark(&srv, tok, "go");
	json_t *v = it_egress_result(&srv, tok, id);
	reached(v, "B1", "allowed.test");
	refused(v, "B2");
	refused(v, "L1");
	reached(v, "L2", "other.test");
	json_decref(v);
	free(id);
	free(cmd);
}

/* A ledger record's verdict. */
static bool rec_allowed(json_t *r)
{
	const char *v = jstr(r, "verdict");
	return v && strcmp(v, "allowed") == 0;
}

/* GET /exec/{id}/egress: its records once written (batched), each
 * connection one record. */
static json_t *ledger(const char *t, const char *id, size_t want)
{
	char *path = xasprintf("/exec/%s/egress", id);
	json_t *j = NULL;
	for (long until = it_now_ms() + 10000; it_now_ms() < until; usleep(50000)) {
		json_decref(j);
		j = NULL;
		if (it_get_json(&srv, t, path, &j) == 200 &&
		    json_array_size(json_object_get(j, "connections")) >= want)
			break;
	}
	free(path);
	assert_non_null(j);
	return j;
}

/* The server's warm pool (sandbox/warm.h): sandboxes waiting, commands
 * started in one. */
static long warm_waiting(void)
{
	return it_metric(&srv, tok_ops, "sandboxd_warm_sandboxes");
}

static long started_warm(void)
{
	return it_metric(&srv, tok_ops, "sandboxd_warm_commands_total{start=\"warm\"}");
}

/* The network namespace's inode a result printed on its NS line. */
static char *ns_of(json_t *res)
{
	char *l = line_of(jstr(res, "stdout"), "NS");
	assert_non_null(strstr(l, "net:["));
	return l;
}

/* Networked commands start in warm sandboxes too, each in an egress
 * namespace of its own made for it alone, and what the gateway tells of
 * them (the refusals in the result, the ledger by exec id) is the
 * command's: the waiting sandbox's session is bound to the command that
 * takes it. First in the list: no other tenant's sandboxes wait yet. */
static void test_warm_network(void **state)
{
	(void)state;
	assert_int_equal(warm_waiting(), 0);
	it_egress_policy(&srv, tok_ops, "globex", "allowed.test");
	const char *script = "echo NS $(readlink /proc/self/ns/net)\n"
			     "c W1 https://allowed.test/\n"
			     "c W2 --resolve other.test:443:" EG_OTHER " https://other.test/\n";
	long warm0 = started_warm();
	json_t *cold = run_net(tok_b, script);
	assert_int_equal(started_warm(), warm0); /* the pool learns the shape */
	reached(cold, "W1", "allowed.test");

	char *prev = ns_of(cold);
	for (int round = 0; round < 2; round++) {
		long until = it_now_ms() + 30000;
		while (warm_waiting() < 1 && it_now_ms() < until)
			usleep(20000);
		assert_true(warm_waiting() >= 1);
		long before = started_warm();
		json_t *res = run_net(tok_b, script);
		assert_int_equal(started_warm(), before + 1);
		reached(res, "W1", "allowed.test");
		refused(res, "W2");
		denied(res, "other.test:443", "not in");
		char *ns = ns_of(res);
		if (strcmp(ns, prev) == 0)
			fail_msg("two commands in one network namespace: %s", ns);
		/* Its connections are recorded under its own id: W1's, W2's. */
		json_t *j = ledger(tok_b, jstr(res, "id"), 2), *recs = json_object_get(j, "connections"), *r;
		size_t i;
		bool w1 = false, w2 = false;
		json_array_foreach(recs, i, r) {
			const char *name = jstr(r, "name"), *proto = jstr(r, "proto");
			char *txt = json_dumps(r, JSON_COMPACT);
			fprintf(stderr, "ledger: %s\n", txt);
			free(txt);
			if (!name || !proto || strcmp(proto, "tls") != 0)
				continue;
			w1 = w1 || (rec_allowed(r) && strcmp(name, "allowed.test") == 0);
			w2 = w2 || (!rec_allowed(r) && strcmp(name, "other.test") == 0);
		}
		assert_true(w1 && w2);
		json_decref(j);
		json_decref(res);
		free(prev);
		prev = ns;
	}
	free(prev);
	json_decref(cold);
}

/* Whatever the program: python's http.client (no proxy support at all)
 * to the name and to another address; UDP other than DNS goes nowhere
 * (and is recorded); raw sockets are refused. */
static void test_programs(void **state)
{
	(void)state;
	it_egress_forget(&world);
	it_egress_policy(&srv, tok_ops, "acme", "allowed.test");
	json_t *res = run_net(
	    tok, "HTTPS_PROXY=http://127.0.0.1:9 http_proxy=http://127.0.0.1:9 python3 - <<'EOF'\n"
		 "import http.client, socket, ssl\n"
		 "def get(key, conn, host):\n"
		 "    try:\n"
		 "        conn.request('GET', '/', headers={'Host': host})\n"
		 "        print(key, conn.getresponse().read().decode().strip(), 'rc=0')\n"
		 "    except Exception as e:\n"
		 "        print(key, 'refused', type(e).__name__, 'rc=1')\n"
		 "ctx = ssl.create_default_context(cafile='/workspace/ca.pem')\n"
		 "get('Y1', http.client.HTTPSConnection('allowed.test', 443, context=ctx, timeout=5), "
		 "'allowed.test')\n"
		 "get('Y2', http.client.HTTPConnection('" EG_OTHER "', 80, timeout=5), 'other.test')\n"
		 "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
		 "try:\n"
		 "    u.sendto(b'sandbox', ('" EG_ALLOWED "', 9999))\n"
		 "    print('U1 sent rc=0')\n"
		 "except PermissionError:\n"
		 "    print('U1 refused rc=1')\n"
		 "try:\n"
		 "    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\n"
		 "    print('R1 opened rc=0')\n"
		 "except PermissionError:\n"
		 "    print('R1 PermissionError rc=1')\n"
		 "EOF\n"
		 "s() { o=$(printf 'GET / HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n' | timeout 10 "
		 "openssl s_client -quiet -connect $2:443 -servername $3 -CAfile /workspace/ca.pem "
		 "-verify_return_error 2>&1 | grep -m1 -e 'I am' -e error); case $o in *'I am'*) r=0;; *) "
		 "r=1;; esac; "
		 "echo \"$1 $o rc=$r\"; }\n"
		 "s Z1 allowed.test allowed.test\ns Z2 " EG_ALLOWED " shared.test\n");
	reached(res, "Y1", "allowed.test");
	refused(res, "Y2");
	reached(res, "Z1", "allowed.test");
	refused(res, "Z2");
	char *l = line_of(jstr(res, "stdout"), "R1");
	assert_non_null(strstr(l, "PermissionError"));
	free(l);
	/* the datagram is in the ledger, refused */
	json_t *j = ledger(tok, jstr(res, "id"), 1), *r;
	size_t i;
	bool udp = false;
	json_array_foreach(json_object_get(j, "connections"), i, r) {
		udp = udp || (jstr(r, "proto") && strcmp(jstr(r, "proto"), "udp") == 0 && !rec_allowed(r) &&
			      jstr(r, "dialled") && strstr(jstr(r, "dialled"), EG_ALLOWED ":9999"));
	}
	json_decref(j);
	if (!udp)
		fail_msg("no refused udp record to " EG_ALLOWED ":9999 in the ledger");
	json_decref(res);
	/* The datagram a control sent from here arrives; the sandbox's (7
	 * bytes, sent before) never did. */
	assert_int_equal(it_sh("python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
			       ".sendto(b\"control-12345\", (\"" EG_ALLOWED "\", 9999))'"),
			 0);
	for (long until = it_now_ms() + 10000;
	     !it_egress_seen(&world, "udp ", "len=13") && it_now_ms() < until;)
		usleep(20000);
	assert_int_equal(it_egress_seen(&world, "udp ", "len=13"), 1);
	assert_int_equal(it_egress_seen(&world, "udp ", "len=7"), 0);
	assert_int_equal(it_egress_seen(&world, EG_OTHER ":", NULL), 0);
}

/* The ledger: one record per connection with the bytes that went; the
 * refused one named with its reason; the audit finds the exec by it. */
static void test_ledger_and_audit(void **state)
{
	(void)state;
	it_egress_policy(&srv, tok_ops, "acme", "allowed.test");
	json_t *res = run_net(
	    tok,
	    ": egress-ledger-mark\n"
	    "curl -sS --max-time 20 -o /dev/null -w 'G1 %{size_download} rc=0\\n' "
	    "--resolve allowed.test:80:" EG_ALLOWED " http://allowed.test/size/1048576\n"
	    "curl -sS --max-time 20 --cacert /workspace/ca.pem -o /dev/null -w 'G2 %{size_download} rc=0\\n' "
	    "--resolve allowed.test:443:" EG_ALLOWED " https://allowed.test/size/1048576\n"
	    "c G3 --resolve other.test:443:" EG_OTHER " https://other.test/\n");
	char *l = line_of(jstr(res, "stdout"), "G1");
	assert_non_null(strstr(l, " 1048576 "));
	free(l);
	refused(res, "G3");
	denied(res, "other.test:443", "not in");
	json_t *j = ledger(tok, jstr(res, "id"), 3), *recs = json_object_get(j, "connections"), *r;
	size_t i, allowed = 0;
	json_array_foreach(recs, i, r) {
		char *txt = json_dumps(r, JSON_COMPACT);
		fprintf(stderr, "ledger: %s\n", txt);
		free(txt);
		const char *name = jstr(r, "name");
		if (rec_allowed(r)) {
			allowed++;
			assert_string_equal(name ? name : "(none)", "allowed.test");
			assert_true(jint(r, "bytes_down") >= 1048576);
			assert_true(jint(r, "bytes_up") > 0 && jint(r, "bytes_up") < 65536);
			assert_true(jstr(r, "addr") && strstr(jstr(r, "addr"), EG_ALLOWED));
		} else {
			assert_string_equal(name ? name : "(none)", "other.test");
			assert_true(jstr(r, "name_source") && strcmp(jstr(r, "name_source"), "sni") == 0);
			assert_true(jstr(r, "reason") && *jstr(r, "reason"));
		}
	}
	assert_int_equal(json_array_size(recs), 3);
	assert_int_equal(allowed, 2);
	json_decref(j);
	json_decref(res);

	/* an exec with nothing refused is not in the denied audit */
	json_decref(run_net(tok, ": egress-clean-mark\nc K1 https://allowed.test/\n"));
	bool mark = false, clean = false;
	for (long until = it_now_ms() + 10000; !mark && it_now_ms() < until; usleep(50000)) {
		json_t *page = NULL;
		assert_int_equal(it_get_json(&srv, tok_audit, "/audit?egress=denied&limit=1000", &page), 200);
		json_array_foreach(json_object_get(page, "records"), i, r) {
			const char *t = jstr(r, "target");
			mark = mark || (t && strstr(t, "egress-ledger-mark"));
			clean = clean || (t && strstr(t, "egress-clean-mark"));
		}
		json_decref(page);
	}
	assert_true(mark);
	assert_false(clean);
}

/* A name with only an IPv6 address. */
static void test_ipv6_only_name(void **state)
{
	(void)state;
	it_egress_policy(&srv, tok_ops, "acme", "v6only.test");
	json_t *res = run_net(tok, "c V1 https://v6only.test/\nc V2 http://v6only.test/\n");
	reached(res, "V1", "v6only.test");
	reached(res, "V2", "v6only.test");
	json_decref(res);
}

/* The sandbox's DNS: allowed names answered, others not. */
static void test_dns(void **state)
{
	(void)state;
	it_egress_policy(&srv, tok_ops, "acme", "allowed.test, *.wild.test");
	json_t *res = run_net(tok, "for n in allowed.test api.wild.test other.test wild.test; do "
				   "getent hosts $n >/dev/null; echo \"N-$n rc=$?\"; done\n");
	const char *yes[] = {"N-allowed.test", "N-api.wild.test"}, *no[] = {"N-other.test", "N-wild.test"};
	for (size_t i = 0; i < 2; i++) {
		char *a = line_of(jstr(res, "stdout"), yes[i]), *b = line_of(jstr(res, "stdout"), no[i]);
		if (!strstr(a, "rc=0") || strstr(b, "rc=0"))
			fail_msg("DNS: '%s' (want an answer), '%s' (want none)", a, b);
		free(a);
		free(b);
	}
	json_decref(res);
}

/* An IPv4-only host (no IPv6 address or route on the outgoing side;
 * pasta refused every networked command there): the server started
 * afresh still runs networked commands. Last: it changes the world. */
static void test_ipv4_only_host(void **state)
{
	(void)state;
	assert_int_equal(it_sh("sysctl -q -w net.ipv6.conf.eg0.disable_ipv6=1"), 0);
	assert_int_equal(it_sh("! ip -6 route show table main | grep -q 2001:db8"), 0);
	assert_int_equal(it_stop(&srv, SIGTERM), 0);
	assert_int_equal(it_restart(&srv, NULL), 0);
	it_egress_policy(&srv, tok_ops, "acme", "allowed.test");
	json_t *res = run_net(tok, "c I1 https://allowed.test/\nc I2 http://allowed.test/\n");
	reached(res, "I1", "allowed.test");
	reached(res, "I2", "allowed.test");
	json_decref(res);
}

int main(void)
{
	it_egress_enter(&world);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_warm_network),   cmocka_unit_test(test_world),
	    cmocka_unit_test(test_by_name),	   cmocka_unit_test(test_internal_addresses),
	    cmocka_unit_test(test_rules),	   cmocka_unit_test(test_live_change),
	    cmocka_unit_test(test_programs),	   cmocka_unit_test(test_ledger_and_audit),
	    cmocka_unit_test(test_ipv6_only_name), cmocka_unit_test(test_dns),
	    cmocka_unit_test(test_ipv4_only_host),
	};
	int rc = cmocka_run_group_tests(tests, setup, teardown);
	it_egress_leave(&world);
	return rc;
}
