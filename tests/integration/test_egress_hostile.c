/* A hostile tenant against the egress gateway (issue 29): ClientHellos
 * that never finish, 10,000 connections, 64 KiB Host headers, half-open
 * connections, a DNS flood and over-long names, all from tenant A's
 * commands at once, while tenant B runs networked commands and the HTTP
 * threads answer. No timing threshold: B's commands must complete within
 * a generous deadline, A's are bounded and end, the server stays up. The
 * world of it_egress.h: nothing leaves the machine. */
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
static char *tok_a, *tok_b, *tok_ops;

static const struct it_tok toks[] = {
    {&tok_a, "acme", NULL}, {&tok_b, "globex", NULL}, {&tok_ops, "ops", "admin"}};

static int setup(void **state)
{
	(void)state;
	/* a short hello deadline keeps the never-finishing ClientHello's
	 * case short */
	const char *const extra[] = {"--set", "egress-hello-ms=1000", NULL};
	if (it_start_minted(&srv, extra, toks, IT_NTOKS(toks)) != 0)
		return -1;
	it_egress_upload_ca(&srv, &world, tok_b);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* Every attack of tenant A in one python program, each in threads of its
 * own, until /workspace/stop appears (at most 40 s); prints one line per
 * attack with what it saw. */
static const char attacks[] =
    "python3 - <<'EOF'\n"
    "import os, socket, threading, time, random\n"
    "A = ('" EG_ALLOWED "', 443)\n"
    "H = ('" EG_ALLOWED "', 80)\n"
    "stop = lambda: os.path.exists('/workspace/stop') or time.time() > T0 + 40\n"
    "T0 = time.time()\n"
    "out = {}\n"
    "hello_sent = threading.Event()\n"
    "def slow_hello():\n"
    "    # a TLS record header promising 512 bytes, then 5 of them, then\n"
    "    # nothing; the other attacks start once it is sent, so that the\n"
    "    # flood cannot take this command's connection budget first\n"
    "    try:\n"
    "        s = socket.create_connection(A, 10)\n"
    "        s.sendall(bytes([22, 3, 1, 2, 0]) + b'\\x01\\x00\\x01\\xfc\\x03')\n"
    "    finally:\n"
    "        hello_sent.set()\n"
    "    s.settimeout(30)\n"
    "    t = time.time()\n"
    "    try:\n"
    "        got = s.recv(100)\n"
    "        out['slow'] = 'closed' if not got else 'answered'\n"
    "    except ConnectionResetError:\n"
    "        out['slow'] = 'closed'\n"
    "    except socket.timeout:\n"
    "        out['slow'] = 'held'\n"
    "    out['slow'] += ' after %d ms' % ((time.time() - t) * 1000)\n"
    "def flood():\n"
    "    n = ok = 0\n"
    "    while n < 10000 and not stop():\n"
    "        try:\n"
    "            s = socket.socket(); s.settimeout(2); s.connect(H); ok += 1\n"
    "            s.sendall(b'GET /flood HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n')\n"
    "        except OSError:\n"
    "            pass\n"
    "        finally:\n"
    "            s.close()\n"
    "        n += 1\n"
    "    out['flood'] = '%d tried %d connected' % (n, ok)\n"
    "def huge_host():\n"
    "    try:\n"
    "        s = socket.create_connection(H, 10); s.settimeout(20)\n"
    "        s.sendall(b'GET /huge HTTP/1.1\\r\\nHost: ' + b'a' * 65536 + b'.test\\r\\n\\r\\n')\n"
    "        out['huge'] = 'answered' if s.recv(100) else 'closed'\n"
    "    except OSError as e:\n"
    "        out['huge'] = 'closed ' + type(e).__name__\n"
    "def half_open():\n"
    "    held = []\n"
    "    for i in range(200):\n"
    "        try:\n"
    "            s = socket.create_connection(H, 2)\n"
    "            s.sendall(b'GET /half HTTP/1.1\\r\\nHost: allow')\n"
    "            if i % 2: s.shutdown(socket.SHUT_WR)\n"
    "            held.append(s)\n"
    "        except OSError:\n"
    "            pass\n"
    "    while not stop(): time.sleep(0.1)\n"
    "    out['half'] = '%d held' % len(held)\n"
    "def qname(name):\n"
    "    return b''.join(bytes([len(l)]) + l for l in name.split(b'.')) + b'\\x00'\n"
    "def dns_flood():\n"
    "    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "    n = 0\n"
    "    long63 = b'.'.join([b'l' * 63] * 3) + b'.test'\n"
    "    while n < 100000 and not stop():\n"
    "        q = random.randbytes(2) + b'\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00'\n"
    "        name = long63 if n % 3 else b'x%d.allowed.test' % n\n"
    "        try: u.sendto(q + qname(name) + b'\\x00\\x01\\x00\\x01', ('127.0.0.53', 53))\n"
    "        except OSError: pass\n"
    "        n += 1\n"
    "    # and one with a label of 64 and a name of 300: malformed\n"
    "    u.sendto(b'\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00' + bytes([64]) + b'a' * 300 "
    "+ b'\\x00\\x00\\x01\\x00\\x01', ('127.0.0.53', 53))\n"
    "    out['dns'] = '%d sent' % n\n"
    "def long_sni():\n"
    "    import ssl\n"
    "    ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE\n"
    "    name = '.'.join(['s' * 63] * 3) + '.allowed.test'\n"
    "    try:\n"
    "        with socket.create_connection(A, 10) as s, ctx.wrap_socket(s, server_hostname=name[:253]) as "
    "t:\n"
    "            out['sni'] = 'handshake done'\n"
    "    except (OSError, ssl.SSLError, ValueError) as e:\n"
    "        out['sni'] = 'refused ' + type(e).__name__\n"
    "ts = [threading.Thread(target=f) for f in (slow_hello, flood, huge_host, half_open, dns_flood, "
    "long_sni)]\n"
    "open('/workspace/started', 'w').close()\n"
    "ts[0].start(); hello_sent.wait(30)\n"
    "for t in ts[1:]: t.start()\n"
    "for t in ts: t.join()\n"
    "for k in sorted(out): print(k, out[k])\n"
    "EOF\n";

/* B's networked command, A attacking: it completes and reaches its name. */
static void b_reaches(void)
{
	long t0 = it_now_ms();
	json_t *res =
	    ex_ok(&srv, tok_b, NULL,
		  json_pack("{s:s, s:b, s:i}", "command",
			    "curl -sS --max-time 20 --cacert /workspace/ca.pem https://allowed.test/",
			    "network", 1, "timeout_s", 60));
	fprintf(stderr, "tenant B's networked curl, A attacking: %ld ms\n", it_now_ms() - t0);
	assert_non_null(strstr(ex_stdout_ok(res), "I am allowed.test"));
	json_decref(res);
}

static void test_attacks_hold_nobody(void **state)
{
	(void)state;
	it_egress_policy(&srv, tok_ops, "acme", "allowed.test");
	it_egress_policy(&srv, tok_ops, "globex", "allowed.test");
	it_egress_forget(&world);
	it_sh_quiet("rm -f %s/tenants/acme/workspace/stop %s/tenants/acme/workspace/started", srv.dir,
		    srv.dir);
	char *id = it_egress_bg(&srv, tok_a, attacks);
	it_egress_wait_mark(&srv, "acme", tok_a, id, "started");

	/* While every attack runs: B's commands, and the HTTP threads. */
	for (int i = 0; i < 3; i++)
		b_reaches();
	json_t *h = NULL;
	assert_int_equal(it_get_json(&srv, NULL, "/healthz", &h), 200);
	json_decref(h);

	it_egress_mark(&srv, tok_a, "stop");
	json_t *v = it_egress_result(&srv, tok_a, id);
	const char *out = jstr(v, "stdout");
	assert_non_null(out);
	/* the never-finishing hello was ended by the gateway, not held */
	assert_non_null(strstr(out, "slow closed"));
	/* the 64 KiB Host reached no server; nor did any half-open request */
	assert_null(strstr(out, "huge answered"));
	assert_int_equal(it_egress_seen(&world, "path=/huge", NULL), 0);
	assert_int_equal(it_egress_seen(&world, "path=/half", NULL), 0);
	/* the flood was bounded: new connections per command at
	 * network-conn-per-s (10 by default, bursts of 20), and the attacks
	 * end within 40 s (their own cap) */
	int flooded = it_egress_seen(&world, "path=/flood", NULL);
	fprintf(stderr, "of A's flood (%s) %d reached the upstream\n",
		strstr(out, "flood ") ? strstr(out, "flood ") : "?", flooded);
	assert_true(flooded <= 20 + 10 * 41);
	assert_true(json_array_size(json_object_get(v, "egress_denied")) > 0);
	json_decref(v);
	free(id);
	/* and after it all, A itself is served again */
	json_t *res = ex_ok(&srv, tok_a, NULL,
			    json_pack("{s:s, s:b, s:i}", "command",
				      "getent hosts allowed.test >/dev/null && echo dns-ok", "network", 1,
				      "timeout_s", 30));
	assert_string_equal(ex_stdout_ok(res), "dns-ok\n");
	json_decref(res);
	assert_true(it_alive(&srv));
}

int main(void)
{
	it_egress_enter(&world);
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_attacks_hold_nobody)};
	int rc = cmocka_run_group_tests(tests, setup, teardown);
	it_egress_leave(&world);
	return rc;
}
