#pragma once
/* Three sandboxd nodes behind a load balancer running the configuration
 * shipped in deploy/ (docs/nodes.md), changed only in its
 * addresses, ports and paths. Shared by test_nodes_nginx.c and
 * test_nodes_haproxy.c, which say how to start their balancer
 * (balancer_start, balancer_config) and include this after <cmocka.h>.
 *
 * The nodes share their tenants' secrets (as a deployment must: a token
 * is checked by whichever node it reaches) and list each other in
 * `nodes`, so the merged audit has the whole cluster. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/buf.h"
#include "it_exec.h"

#define NNODES 3
#define NSESSIONS 100

static const char *const node_ids[NNODES] = {"node-a", "node-b", "node-c"};
/* The addresses the shipped configurations name, in node order. */
static const char *const shipped_addr[NNODES] = {"node-a.internal:8080", "node-b.internal:8080",
						 "node-c.internal:8080"};

struct cluster {
	char dir[128];
	struct it_server node[NNODES];
	int ports[NNODES];
	struct it_server lb; /* only base and port: the balancer */
	pid_t lb_pid;
	char lb_log[200];
	char *tok_acme, *tok_globex, *tok_ops;
	char node_of[NSESSIONS][16]; /* Sandboxd-Node of each session, by index */
	char default_node[16];	     /* where a request without tenant and session lands */
};

static struct cluster C;

/* Provided by the including suite: start the balancer on C.lb.port with
 * the shipped configuration templated into C.dir; 0 or -1. */
static int balancer_start(void);

static int pick_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof a;
	int port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &n) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* The session key of session i and its tenant's token and headers. */
static void session_of(int i, char key[32], const char **tenant, const char **tok)
{
	snprintf(key, 32, "chat:%d", i);
	*tenant = i % 2 ? "globex" : "acme";
	*tok = i % 2 ? C.tok_globex : C.tok_acme;
}

/* Copy src to dst, every (from, to) pair replaced everywhere; each from
 * must occur (a changed shipped file must break the test, not skip it). */
static int template_file(const char *src, const char *dst, const char *const *pairs, size_t npairs)
{
	size_t len = 0;
	char *text = it_read_file(src, &len);
	if (!text)
		return -1;
	for (size_t i = 0; i + 1 < npairs; i += 2) {
		if (!strstr(text, pairs[i])) {
			fprintf(stderr, "%s no longer holds '%s'\n", src, pairs[i]);
			free(text);
			return -1;
		}
		struct buf b;
		buf_init(&b, 1u << 24);
		const char *p = text, *hit;
		while ((hit = strstr(p, pairs[i]))) {
			buf_append(&b, p, (size_t)(hit - p));
			buf_append(&b, pairs[i + 1], strlen(pairs[i + 1]));
			p = hit + strlen(pairs[i]);
		}
		buf_append(&b, p, strlen(p));
		free(text);
		text = buf_steal(&b, &len);
	}
	/* An address left as shipped would send test traffic off this host. */
	if (strstr(text, ".internal:")) {
		fprintf(stderr, "%s names an address this test does not replace\n", src);
		free(text);
		return -1;
	}
	int rc = it_write_file(dst, text, len);
	free(text);
	return rc;
}

/* The address pairs for template_file: shipped address -> loopback port. */
static void address_pairs(const char **pairs, char addrs[NNODES][32])
{
	for (int i = 0; i < NNODES; i++) {
		snprintf(addrs[i], 32, "127.0.0.1:%d", C.ports[i]);
		pairs[2 * i] = shipped_addr[i];
		pairs[2 * i + 1] = addrs[i];
	}
}

static int wait_answering(struct it_server *s, long timeout_ms)
{
	long until = it_now_ms() + timeout_ms;
	do {
		struct it_resp r;
		if (it_http(s, "GET", "/healthz", NULL, NULL, NULL, 0, &r) == 0) {
			long st = r.status;
			it_resp_free(&r);
			if (st == 200)
				return 0;
		}
		usleep(20000);
	} while (it_now_ms() < until);
	return -1;
}

/* Run argv in the background, its output appended to log; the pid. */
static pid_t spawn_logged(const char *const *argv, const char *log)
{
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* Start node i on its fixed port (a restart keeps port and data). */
static int node_start(int i)
{
	struct it_server *s = &C.node[i];
	char listen[48], id[40], base[48], nodes[512];
	snprintf(listen, sizeof listen, "127.0.0.1:%d", C.ports[i]);
	snprintf(id, sizeof id, "node-id=%s", node_ids[i]);
	snprintf(base, sizeof base, "uid-base=%ld",
		 3000000L + (long)(getpid() % 100000) * 256 + 160 + i * 16);
	int o = snprintf(nodes, sizeof nodes, "nodes=[");
	for (int k = 0; k < NNODES; k++)
		o += snprintf(nodes + o, sizeof nodes - (size_t)o,
			      "%s{\"id\":\"%s\",\"url\":\"http://127.0.0.1:%d\"}", k ? "," : "", node_ids[k],
			      C.ports[k]);
	snprintf(nodes + o, sizeof nodes - (size_t)o, "]");
	const char *argv[] = {it_bin(), "serve", "--data-dir", s->dir,	"--listen", listen, "--set",
			      id,	"--set", base,	       "--set", nodes,	    NULL};
	s->pid = spawn_logged(argv, s->log);
	s->port = C.ports[i];
	snprintf(s->base, sizeof s->base, "http://127.0.0.1:%d", C.ports[i]);
	return wait_answering(s, 15000);
}

/* Data directory of node i with the cluster's tenants and secrets. */
static int node_prepare(int i)
{
	struct it_server *s = &C.node[i];
	snprintf(s->dir, sizeof s->dir, "%s/%s", C.dir, node_ids[i]);
	snprintf(s->log, sizeof s->log, "%s/%s.log", C.dir, node_ids[i]);
	if (mkdir(s->dir, 0755) < 0)
		return -1;
	static const char *const add[] = {"acme", "globex", "ops --operator"};
	for (size_t k = 0; k < 3; k++) {
		int st = 0;
		char name[16];
		snprintf(name, sizeof name, "%.*s", (int)strcspn(add[k], " "), add[k]);
		char *args = xasprintf("tenant add %s --secret-file '%s/%s.key'", add[k], C.dir, name);
		free(it_cli(s, &st, args));
		free(args);
		if (st != 0)
			return -1;
	}
	return 0;
}

static int cluster_setup(void **state)
{
	(void)state;
	memset(&C, 0, sizeof C);
	snprintf(C.dir, sizeof C.dir, "/tmp/sandboxd-nodes-XXXXXX");
	if (!mkdtemp(C.dir))
		return -1;
	chmod(C.dir, 0755);
	static const char *const tenants[] = {"acme", "globex", "ops"};
	for (size_t k = 0; k < 3; k++) {
		unsigned char rnd[24];
		char hexkey[64], path[200];
		FILE *f = fopen("/dev/urandom", "r");
		if (!f || fread(rnd, 1, sizeof rnd, f) != sizeof rnd)
			return -1;
		fclose(f);
		for (size_t j = 0; j < sizeof rnd; j++)
			snprintf(hexkey + 2 * j, 3, "%02x", rnd[j]);
		snprintf(path, sizeof path, "%s/%s.key", C.dir, tenants[k]);
		if (it_write_file(path, hexkey, strlen(hexkey)) < 0)
			return -1;
	}
	for (int i = 0; i < NNODES; i++)
		C.ports[i] = pick_port();
	for (int i = 0; i < NNODES; i++)
		if (node_prepare(i) < 0 || node_start(i) < 0)
			return -1;
	C.tok_acme = it_token(&C.node[0], "acme", NULL);
	C.tok_globex = it_token(&C.node[0], "globex", NULL);
	C.tok_ops = it_token(&C.node[0], "ops", "audit:read admin");
	C.lb.port = pick_port();
	snprintf(C.lb.base, sizeof C.lb.base, "http://127.0.0.1:%d", C.lb.port);
	snprintf(C.lb_log, sizeof C.lb_log, "%s/balancer.log", C.dir);
	if (!C.tok_acme || !C.tok_globex || !C.tok_ops || balancer_start() < 0)
		return -1;
	return wait_answering(&C.lb, 15000);
}

static int cluster_teardown(void **state)
{
	(void)state;
	if (C.lb_pid > 0) {
		kill(C.lb_pid, SIGTERM);
		waitpid(C.lb_pid, NULL, 0);
	}
	for (int i = 0; i < NNODES; i++) {
		if (C.node[i].pid > 0)
			assert_log_clean(&C.node[i]);
		if (C.node[i].pid > 0)
			it_stop(&C.node[i], SIGTERM);
	}
	free(C.tok_acme);
	free(C.tok_globex);
	free(C.tok_ops);
	if (getenv("IT_KEEP")) {
		fprintf(stderr, "kept %s\n", C.dir);
		return 0;
	}
	char *cmd = xasprintf("rm -rf '%s'", C.dir);
	int rc = system(cmd);
	(void)rc;
	free(cmd);
	return 0;
}

/* Session i's headers as a gateway sends them; returns its token. */
struct session_headers {
	char th[64], sh[64];
	const char *v[3];
};

static const char *session_headers(int i, struct session_headers *h)
{
	char key[32];
	const char *tenant, *tok;
	session_of(i, key, &tenant, &tok);
	snprintf(h->th, sizeof h->th, "X-Tenant-Id: %s", tenant);
	snprintf(h->sh, sizeof h->sh, "X-Session-Key: %s", key);
	h->v[0] = h->th;
	h->v[1] = h->sh;
	h->v[2] = NULL;
	return tok;
}

/* A request through the balancer as session i. */
static int lb_session(int i, const char *method, const char *path, const char *body, struct it_resp *out)
{
	struct session_headers h;
	const char *tok = session_headers(i, &h);
	return it_http(&C.lb, method, path, tok, h.v, body, body ? strlen(body) : 0, out);
}

static int node_index(const char *id)
{
	for (int i = 0; i < NNODES; i++)
		if (id && strcmp(id, node_ids[i]) == 0)
			return i;
	return -1;
}

/* The Sandboxd-Node of a response (static buffer), "" when absent; one
 * longer than the cluster's buffers fails the test, never cut to fit. */
static const char *node_header(const struct it_resp *r)
{
	static char v[sizeof C.default_node];
	char *h = it_header(r, "Sandboxd-Node");
	int n = snprintf(v, sizeof v, "%s", h ? h : "");
	free(h);
	assert_true(n >= 0 && (size_t)n < sizeof v);
	return v;
}

/* A session whose node is not where header-less requests land: requests
 * that reach it without its headers prove routing by id. */
static int session_elsewhere(void)
{
	for (int i = 0; i < NSESSIONS; i++)
		if (C.node_of[i][0] && strcmp(C.node_of[i], C.default_node) != 0)
			return i;
	fail_msg("every session landed on %s", C.default_node);
	return -1;
}

/* 100 sessions of two tenants: each writes a file through the balancer,
 * reads it back through it on the same node, and the file exists on
 * exactly that node (asked directly); all three nodes get sessions. */
static void test_sessions_stick(void **state)
{
	(void)state;
	int per_node[NNODES] = {0};
	for (int i = 0; i < NSESSIONS; i++) {
		char path[64], want[48];
		struct it_resp r;
		snprintf(want, sizeof want, "session %d", i);
		assert_int_equal(lb_session(i, "PUT", "/fs/write?path=mine.txt", want, &r), 0);
		it_expect_status(&r, 200);
		snprintf(C.node_of[i], sizeof C.node_of[i], "%s", node_header(&r));
		it_resp_free(&r);
		int n = node_index(C.node_of[i]);
		assert_true(n >= 0);
		per_node[n]++;
		for (int again = 0; again < 2; again++) {
			assert_int_equal(lb_session(i, "GET", "/fs/read?path=mine.txt", NULL, &r), 0);
			it_expect_status(&r, 200);
			assert_string_equal(node_header(&r), C.node_of[i]);
			assert_int_equal(r.len, strlen(want));
			assert_memory_equal(r.body, want, r.len);
			it_resp_free(&r);
		}
		/* On its node and no other (asked without the balancer). */
		char key[32], sh[64];
		const char *tenant, *tok;
		session_of(i, key, &tenant, &tok);
		snprintf(sh, sizeof sh, "X-Session-Key: %s", key);
		const char *const hdrs[] = {sh, NULL};
		snprintf(path, sizeof path, "/fs/exists?path=mine.txt");
		for (int k = 0; k < NNODES; k++) {
			assert_int_equal(it_http(&C.node[k], "GET", path, tok, hdrs, NULL, 0, &r), 0);
			json_t *j = it_json(&r);
			assert_int_equal(jtrue(j, "exists"), k == n);
			json_decref(j);
			it_resp_free(&r);
		}
	}
	for (int k = 0; k < NNODES; k++)
		assert_true(per_node[k] > 0);
	struct it_resp r;
	assert_int_equal(it_http(&C.lb, "GET", "/execs", C.tok_acme, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	snprintf(C.default_node, sizeof C.default_node, "%s", node_header(&r));
	it_resp_free(&r);
}

/* The id of the one running exec of session i, through the balancer. */
static char *running_exec(int i)
{
	long until = it_now_ms() + 15000;
	do {
		struct it_resp r;
		assert_int_equal(lb_session(i, "GET", "/execs?state=running", NULL, &r), 0);
		json_t *j = it_json(&r);
		it_resp_free(&r);
		json_t *first = json_array_get(json_object_get(j, "execs"), 0);
		char *id = first ? xstrdup(jstr(first, "id")) : NULL;
		json_decref(j);
		if (id)
			return id;
		usleep(20000);
	} while (it_now_ms() < until);
	fail_msg("no running exec appeared");
	return NULL;
}

/* An exec started through the balancer is followed, cancelled and read
 * by its id alone (no tenant or session header: the id's node prefix
 * routes it); a client-chosen id works with the session's headers. */
static void test_exec_by_id(void **state)
{
	(void)state;
	int i = session_elsewhere();
	struct session_headers h;
	const char *tok = session_headers(i, &h);
	const char *const *hdrs = h.v;
	struct bg_req run = {
	    .s = &C.lb, .tok = tok, .method = "POST", .path = "/exec", .hdrs = hdrs, .rc = -1};
	run.body = xstrdup("{\"command\": \"echo started; sleep 60\"}");
	pthread_create(&run.th, NULL, bg_main, &run);
	char *id = running_exec(i);
	char want[40];
	snprintf(want, sizeof want, "%s_", C.node_of[i]);
	assert_true(strncmp(id, want, strlen(want)) == 0);

	char path[160];
	char events[160];
	snprintf(events, sizeof events, "/exec/%s/events", id);
	struct bg_req follow = {.s = &C.lb, .tok = tok, .method = "GET", .path = events, .rc = -1};
	pthread_create(&follow.th, NULL, bg_main, &follow);
	/* Cancel once the follower is subscribed (its node counts it). */
	struct it_server *node = &C.node[node_index(C.node_of[i])];
	char gauge[96];
	snprintf(gauge, sizeof gauge, "sandboxd_sse_subscribers{node=\"%s\"} 1", C.node_of[i]);
	struct it_resp r;
	bool subscribed = false;
	for (long until = it_now_ms() + 10000; !subscribed && it_now_ms() < until;) {
		assert_int_equal(it_http(node, "GET", "/metrics", C.tok_ops, NULL, NULL, 0, &r), 0);
		subscribed = r.body && strstr(r.body, gauge);
		it_resp_free(&r);
		if (!subscribed)
			usleep(20000);
	}
	assert_true(subscribed);
	snprintf(path, sizeof path, "/exec/%s/cancel", id);
	assert_int_equal(it_http(&C.lb, "POST", path, tok, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 202);
	assert_string_equal(node_header(&r), C.node_of[i]);
	it_resp_free(&r);

	json_t *res = bg_join(&run);
	assert_non_null(res);
	assert_true(jtrue(res, "cancelled"));
	assert_string_equal(jstr(res, "id"), id);
	json_decref(res);
	it_resp_free(&run.resp);
	pthread_join(follow.th, NULL);
	assert_int_equal(follow.rc, 0);
	it_expect_status(&follow.resp, 200);
	assert_non_null(strstr(follow.resp.body, "event: start"));
	assert_non_null(strstr(follow.resp.body, "event: exit"));
	assert_non_null(strstr(follow.resp.body, "\"cancelled\":true"));
	it_resp_free(&follow.resp);

	snprintf(path, sizeof path, "/exec/%s", id);
	json_t *v = NULL;
	assert_int_equal(it_get_json(&C.lb, tok, path, &v), 200);
	assert_string_equal(jstr(v, "state"), "cancelled");
	json_decref(v);
	/* Sent to another node (a misrouting balancer): 404 saying whose it is. */
	struct it_server *elsewhere = &C.node[(node_index(C.node_of[i]) + 1) % NNODES];
	assert_int_equal(it_http(elsewhere, "GET", path, tok, NULL, NULL, 0, &r), 0);
	it_expect_error(&r, 404, "not_found");
	assert_non_null(strstr(r.body, "its id names node"));
	it_resp_free(&r);
	free(id);

	/* A client's own id: routed by the session, like the POST that made it. */
	json_t *mine =
	    ex_ok(&C.lb, tok, hdrs, json_pack("{s:s, s:s}", "command", "echo mine", "id", "mine-1"));
	json_decref(mine);
	assert_int_equal(lb_session(i, "GET", "/exec/mine-1", NULL, &r), 0);
	it_expect_status(&r, 200);
	assert_string_equal(node_header(&r), C.node_of[i]);
	it_resp_free(&r);
	/* An id naming another node is the balancer's to route: refused. */
	char other[48];
	snprintf(other, sizeof other, "%s_mine", node_ids[(node_index(C.node_of[i]) + 1) % NNODES]);
	assert_int_equal(
	    ex_post(&C.lb, tok, hdrs, json_pack("{s:s, s:s}", "command", "true", "id", other), NULL, &r),
	    400);
	it_resp_free(&r);
}

/* A transfer token minted through the balancer works through it with no
 * header at all: upload, then download of what was uploaded. */
static void test_transfer_token(void **state)
{
	(void)state;
	int i = session_elsewhere();
	struct it_resp r;
	const char *dirs[] = {"write", "read"};
	char url[2][200];
	for (int d = 0; d < 2; d++) {
		char body[96];
		snprintf(body, sizeof body, "{\"path\": \"streamed.bin\", \"direction\": \"%s\"}", dirs[d]);
		if (d == 1) { /* a read token needs the file: upload first */
			assert_int_equal(
			    it_http(&C.lb, "PUT", url[0], NULL, NULL, "through the balancer", 20, &r), 0);
			it_expect_status(&r, 201);
			assert_string_equal(node_header(&r), C.node_of[i]);
			it_resp_free(&r);
		}
		assert_int_equal(lb_session(i, "POST", "/fs/transfers", body, &r), 0);
		it_expect_status(&r, 201);
		json_t *j = it_json(&r);
		char want[40];
		snprintf(want, sizeof want, "%s_", C.node_of[i]);
		assert_true(strncmp(jstr(j, "token"), want, strlen(want)) == 0);
		snprintf(url[d], sizeof url[d], "%s", jstr(j, "url"));
		json_decref(j);
		it_resp_free(&r);
	}
	assert_int_equal(it_http(&C.lb, "GET", url[1], NULL, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	assert_int_equal(r.len, 20);
	assert_memory_equal(r.body, "through the balancer", 20);
	it_resp_free(&r);
}

/* Every acme record of node k, asked of k alone, as "node/id" strings. */
static json_t *local_audit(int k)
{
	json_t *ids = json_array();
	char after[32] = "0";
	for (;;) {
		char path[128];
		snprintf(path, sizeof path, "/audit?tenant=acme&limit=1000&after=%s", after);
		json_t *j = NULL;
		assert_int_equal(it_get_json(&C.node[k], C.tok_ops, path, &j), 200);
		size_t n;
		json_t *rec;
		json_array_foreach(json_object_get(j, "records"), n, rec)
			json_array_append_new(ids,
					      json_sprintf("%s/%lld", jstr(rec, "node"), jint(rec, "id")));
		const char *next = jstr(j, "next");
		snprintf(after, sizeof after, "%s", next ? next : "");
		json_decref(j);
		if (!*after)
			return ids;
	}
}

/* The merged walk of acme's records through the balancer, limit a page. */
static json_t *merged_audit(int limit, int *pages, const char *expect_down)
{
	json_t *ids = json_array();
	char *after = xstrdup("");
	*pages = 0;
	do {
		char path[512];
		snprintf(path, sizeof path, "/audit?nodes=all&tenant=acme&limit=%d&after=%s", limit, after);
		json_t *j = NULL;
		assert_int_equal(it_get_json(&C.lb, C.tok_ops, path, &j), 200);
		size_t n;
		json_t *rec, *st;
		json_array_foreach(json_object_get(j, "records"), n, rec)
			json_array_append_new(ids,
					      json_sprintf("%s/%lld", jstr(rec, "node"), jint(rec, "id")));
		json_array_foreach(json_object_get(j, "nodes"), n, st) {
			bool down = expect_down && strcmp(jstr(st, "id"), expect_down) == 0;
			assert_string_equal(jstr(st, "status"), down ? "unavailable" : "ok");
		}
		assert_int_equal(json_array_size(json_object_get(j, "nodes")), NNODES);
		free(after);
		after = jstr(j, "next") ? xstrdup(jstr(j, "next")) : NULL;
		json_decref(j);
		(*pages)++;
	} while (after);
	return ids;
}

/* Audit rows are committed by a batching writer: wait until node k has
 * the row of a request made now (and so every row before it). */
static void audit_settled(int k)
{
	struct it_resp r;
	assert_int_equal(it_http(&C.node[k], "GET", "/fs/exists?path=x", C.tok_acme, NULL, NULL, 0, &r), 0);
	char *rid = it_header(&r, "X-Request-Id");
	it_resp_free(&r);
	long until = it_now_ms() + 10000;
	bool seen = false;
	while (!seen && it_now_ms() < until) {
		json_t *j = NULL;
		char path[160];
		snprintf(path, sizeof path, "/audit?tenant=acme&route=/fs/exists&limit=1000");
		assert_int_equal(it_get_json(&C.node[k], C.tok_ops, path, &j), 200);
		size_t n;
		json_t *rec;
		json_array_foreach(json_object_get(j, "records"), n, rec)
			seen |= strcmp(jstr(rec, "request_id"), rid) == 0;
		json_decref(j);
		if (!seen)
			usleep(20000);
	}
	free(rid);
	assert_true(seen);
}

/* `sandboxd audit --all-nodes` as node k's operator runs it, acme's
 * records as "node/id"; the exit status must be want_status. */
static json_t *cli_audit_all_status(int k, int want_status)
{
	char tokfile[200], nodes[512];
	snprintf(tokfile, sizeof tokfile, "%s/ops.token", C.dir);
	assert_int_equal(it_write_file(tokfile, C.tok_ops, strlen(C.tok_ops)), 0);
	int o = 0;
	for (int i = 0; i < NNODES; i++)
		o += snprintf(nodes + o, sizeof nodes - (size_t)o,
			      "%s{\"id\":\"%s\",\"url\":\"http://127.0.0.1:%d\"}", i ? "," : "[", node_ids[i],
			      C.ports[i]);
	snprintf(nodes + o, sizeof nodes - (size_t)o, "]");
	char *args =
	    xasprintf("audit --all-nodes --tenant acme --format ndjson --limit 100000 --token-file '%s' "
		      "--set node-id=%s --set 'nodes=%s'",
		      tokfile, node_ids[k], nodes);
	int st = -1;
	char *out = it_cli(&C.node[k], &st, args);
	free(args);
	assert_non_null(out);
	assert_int_equal(st, want_status);
	json_t *ids = json_array();
	for (char *line = out, *nl; *line; line = nl + 1) {
		nl = strchr(line, '\n');
		assert_non_null(nl);
		*nl = '\0';
		json_t *rec = json_loads(line, 0, NULL);
		assert_non_null(rec);
		json_array_append_new(ids, json_sprintf("%s/%lld", jstr(rec, "node"), jint(rec, "id")));
		json_decref(rec);
	}
	free(out);
	return ids;
}

static json_t *cli_audit_all(int k)
{
	return cli_audit_all_status(k, 0);
}

static bool same_set(json_t *a, json_t *b)
{
	if (json_array_size(a) != json_array_size(b))
		return false;
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v) {
		bool found = false;
		for (size_t k = 0; k < json_array_size(b) && !found; k++)
			found = json_equal(v, json_array_get(b, k));
		if (!found)
			return false;
	}
	return true;
}

/* The operator's merged history through the balancer: every record of
 * the three nodes exactly once while paging, the same order twice. */
static void test_audit_merged(void **state)
{
	(void)state;
	json_t *all = json_array();
	for (int k = 0; k < NNODES; k++) {
		audit_settled(k);
		json_t *l = local_audit(k);
		assert_true(json_array_size(l) > 0);
		json_array_extend(all, l);
		json_decref(l);
	}
	int pages = 0, pages2 = 0;
	json_t *walk = merged_audit(37, &pages, NULL);
	assert_true(pages > 2);
	assert_true(same_set(walk, all));
	json_t *again = merged_audit(37, &pages2, NULL);
	assert_true(json_equal(walk, again));
	json_decref(again);
	/* The command line on node-a's store, the others over HTTP. */
	json_t *cli = cli_audit_all(0);
	assert_true(json_equal(cli, walk));
	json_decref(cli);
	json_decref(walk);
	json_decref(all);
	/* Metrics name their node. */
	struct it_resp r;
	assert_int_equal(it_http(&C.node[1], "GET", "/metrics", C.tok_ops, NULL, NULL, 0, &r), 0);
	it_expect_status(&r, 200);
	assert_non_null(strstr(r.body, "sandboxd_node_info{node=\"node-b\""));
	assert_non_null(strstr(r.body, "sandboxd_http_requests_total{node=\"node-b\",route="));
	it_resp_free(&r);
}

/* One node stopped: its sessions (and ids) get 503 backend_unavailable
 * with Retry-After and a hint; the others keep working; the merged audit
 * says which node is missing. Restarted, it has its workspaces back. */
static void test_node_down(void **state)
{
	(void)state;
	int down = node_index(C.node_of[session_elsewhere()]);
	assert_int_equal(it_stop(&C.node[down], SIGTERM), 0);
	int on_down = 0, on_up = 0;
	for (int i = 0; i < NSESSIONS; i++) {
		struct it_resp r;
		assert_int_equal(lb_session(i, "GET", "/fs/read?path=mine.txt", NULL, &r), 0);
		if (strcmp(C.node_of[i], node_ids[down]) == 0) {
			it_expect_error(&r, 503, "backend_unavailable");
			char *ra = it_header(&r, "Retry-After");
			assert_non_null(ra);
			assert_true(atoi(ra) > 0);
			free(ra);
			json_t *j = it_json(&r);
			const char *hint =
			    json_string_value(json_object_get(json_object_get(j, "error"), "retry_hint"));
			assert_non_null(hint);
			assert_non_null(strstr(hint, "node unavailable"));
			json_decref(j);
			on_down++;
		} else {
			it_expect_status(&r, 200);
			on_up++;
		}
		it_resp_free(&r);
	}
	assert_true(on_down > 0 && on_up > 0);
	/* An id of the stopped node: 503 too, not another node's 404. */
	char path[96];
	snprintf(path, sizeof path, "/exec/%s_00000000000000000000", node_ids[down]);
	it_expect_error_at(&C.lb, "GET", path, C.tok_acme, 503, "backend_unavailable");
	int pages = 0;
	json_t *walk = merged_audit(500, &pages, node_ids[down]);
	json_decref(walk);
	/* The command line says so with its exit status. */
	json_decref(cli_audit_all_status((down + 1) % NNODES, 1));

	assert_int_equal(node_start(down), 0);
	for (int i = 0; i < NSESSIONS; i++) {
		if (strcmp(C.node_of[i], node_ids[down]) != 0)
			continue;
		struct it_resp r;
		char want[48];
		snprintf(want, sizeof want, "session %d", i);
		assert_int_equal(lb_session(i, "GET", "/fs/read?path=mine.txt", NULL, &r), 0);
		it_expect_status(&r, 200);
		assert_int_equal(r.len, strlen(want));
		assert_memory_equal(r.body, want, r.len);
		it_resp_free(&r);
	}
}

static int run_cluster_tests(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sessions_stick), cmocka_unit_test(test_exec_by_id),
	    cmocka_unit_test(test_transfer_token), cmocka_unit_test(test_audit_merged),
	    cmocka_unit_test(test_node_down),
	};
	return cmocka_run_group_tests(tests, cluster_setup, cluster_teardown);
}
