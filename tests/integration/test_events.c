/* Live events (wire.md "Live progress", "Exec" stream: true): heartbeats,
 * late joiners, Last-Event-ID, streamed output, tenant feeds, auth, many
 * watchers, disconnects and slow readers, against the real binary. The
 * server runs with heartbeat-ms=500. Streams are read with libcurl and an
 * incremental SSE parser that records each event's arrival time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "it_exec.h"

#define HB_MS 500

static struct it_server srv;
static struct sse *idle_feed; /* a feed that sees nothing, for the keepalive test */
static char *tok_acme, *tok_globex, *tok_admin, *tok_fsread, *tok_audit, *tok_ops_audit;
static const struct it_tok toks[] = {
    {&tok_acme, "acme", NULL},
    {&tok_globex, "globex", NULL},
    {&tok_admin, "ops", "admin audit:read"},
    {&tok_fsread, "acme", "fs:read"},
    {&tok_audit, "acme", "audit:read"},
    {&tok_ops_audit, "ops", "audit:read"},
};

/* ---- an SSE client ---- */

struct sse_ev {
	long id; /* -1: none */
	char event[24];
	char *data; /* NULL for output events unless keep_output */
	size_t data_len;
	long t; /* arrival, it_now_ms() */
};

struct sse {
	/* request */
	char path[512];
	const char *tok;
	bool tok_in_query;
	char last_id[32];   /* Last-Event-ID, "" = none */
	char *post_body;    /* POST /exec when set (owned) */
	int stop_after;	    /* hang up after this many events (0: never) */
	int pause_first_ms; /* sleep in the first write callback (a client that does not read) */
	bool keep_output;   /* keep the data of output events */
	long rcvbuf;	    /* SO_RCVBUF for the socket (0: default) */
	atomic_bool stop;   /* hang up at the next progress callback */

	/* parser */
	char *pend;
	size_t pend_len, pend_cap;
	long cur_id;
	char cur_event[24];
	char *cur_data;
	size_t cur_len, cur_cap;
	bool cur_has_data;
	bool paused_once;

	/* results (under mu) */
	pthread_mutex_t mu;
	struct sse_ev *ev;
	int n, cap;
	int comments;
	long t_comment[8];	 /* arrival of the first comments */
	bool saw_dropped;	 /* ": dropped ..." */
	bool saw_output_dropped; /* ": output events dropped ..." */
	long output_events;
	size_t output_bytes;
	atomic_bool got_bytes;
	long t_first_byte;
	char raw[4096]; /* first bytes of the body (error answers) */
	size_t raw_len;

	/* outcome */
	long status;
	CURLcode rc;
	long t_start, t_done;
	char ctype[96];
	CURL *easy;
	struct curl_slist *hl;
	char *url;
	pthread_t th;
};

static void sse_init(struct sse *s, const char *path, const char *tok)
{
	memset(s, 0, sizeof *s);
	snprintf(s->path, sizeof s->path, "%s", path);
	s->tok = tok;
	s->cur_id = -1;
	pthread_mutex_init(&s->mu, NULL);
}

static void sse_free(struct sse *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->ev[i].data);
	free(s->ev);
	free(s->pend);
	free(s->cur_data);
	free(s->post_body);
	free(s->url);
	curl_slist_free_all(s->hl);
	if (s->easy)
		curl_easy_cleanup(s->easy);
	pthread_mutex_destroy(&s->mu);
	memset(s, 0, sizeof *s);
}

static void grow(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return;
	size_t c = *cap ? *cap : 256;
	while (c < need)
		c *= 2;
	*p = xrealloc(*p, c);
	*cap = c;
}

static void sse_dispatch(struct sse *s)
{
	if (!s->cur_has_data && !*s->cur_event) {
		s->cur_id = -1;
		return;
	}
	const char *name = *s->cur_event ? s->cur_event : "message";
	pthread_mutex_lock(&s->mu);
	if (strcmp(name, "output") == 0) {
		s->output_events++;
		s->output_bytes += s->cur_len;
	}
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 64;
		s->ev = xrealloc(s->ev, (size_t)s->cap * sizeof *s->ev);
	}
	struct sse_ev *e = &s->ev[s->n++];
	memset(e, 0, sizeof *e);
	e->id = s->cur_id;
	snprintf(e->event, sizeof e->event, "%s", name);
	if (strcmp(name, "output") != 0 || s->keep_output) {
		e->data = xstrndup(s->cur_data ? s->cur_data : "", s->cur_len);
		e->data_len = s->cur_len;
	}
	e->t = it_now_ms();
	pthread_mutex_unlock(&s->mu);
	s->cur_id = -1;
	s->cur_event[0] = '\0';
	s->cur_len = 0;
	s->cur_has_data = false;
}

static void sse_line(struct sse *s, char *line, size_t len)
{
	if (len && line[len - 1] == '\r')
		line[--len] = '\0';
	if (len == 0) {
		sse_dispatch(s);
		return;
	}
	if (line[0] == ':') {
		pthread_mutex_lock(&s->mu);
		if (s->comments < 8)
			s->t_comment[s->comments] = it_now_ms();
		s->comments++;
		if (strstr(line, "output events dropped"))
			s->saw_output_dropped = true;
		else if (strstr(line, "dropped"))
			s->saw_dropped = true;
		pthread_mutex_unlock(&s->mu);
		return;
	}
	char *colon = memchr(line, ':', len);
	const char *val = colon ? colon + 1 : line + len;
	if (colon) {
		*colon = '\0';
		if (*val == ' ')
			val++;
	}
	size_t vlen = (size_t)(line + len - val);
	if (strcmp(line, "id") == 0) {
		s->cur_id = strtol(val, NULL, 10);
	} else if (strcmp(line, "event") == 0) {
		snprintf(s->cur_event, sizeof s->cur_event, "%.*s", (int)vlen, val);
	} else if (strcmp(line, "data") == 0) {
		grow(&s->cur_data, &s->cur_cap, s->cur_len + vlen + 2);
		if (s->cur_has_data)
			s->cur_data[s->cur_len++] = '\n';
		memcpy(s->cur_data + s->cur_len, val, vlen);
		s->cur_len += vlen;
		s->cur_data[s->cur_len] = '\0';
		s->cur_has_data = true;
	}
}

static size_t sse_write(char *p, size_t sz, size_t nm, void *ud)
{
	struct sse *s = ud;
	size_t n = sz * nm;
	if (!s->got_bytes) {
		s->t_first_byte = it_now_ms();
		s->got_bytes = true;
	}
	if (s->pause_first_ms && !s->paused_once) {
		s->paused_once = true;
		usleep((useconds_t)s->pause_first_ms * 1000);
	}
	if (s->raw_len < sizeof s->raw - 1) {
		size_t k = n < sizeof s->raw - 1 - s->raw_len ? n : sizeof s->raw - 1 - s->raw_len;
		memcpy(s->raw + s->raw_len, p, k);
		s->raw_len += k;
		s->raw[s->raw_len] = '\0';
	}
	grow(&s->pend, &s->pend_cap, s->pend_len + n + 1);
	memcpy(s->pend + s->pend_len, p, n);
	s->pend_len += n;
	size_t start = 0;
	for (size_t i = 0; i < s->pend_len; i++)
		if (s->pend[i] == '\n') {
			s->pend[i] = '\0';
			sse_line(s, s->pend + start, i - start);
			start = i + 1;
		}
	memmove(s->pend, s->pend + start, s->pend_len - start);
	s->pend_len -= start;
	if (s->stop_after && s->n >= s->stop_after)
		return 0; /* hang up */
	return n;
}

static size_t sse_header(char *p, size_t sz, size_t nm, void *ud)
{
	struct sse *s = ud;
	size_t n = sz * nm;
	if (n > 13 && strncasecmp(p, "Content-Type:", 13) == 0) {
		const char *v = p + 13;
		while (*v == ' ')
			v++;
		size_t k = strcspn(v, "\r\n");
		snprintf(s->ctype, sizeof s->ctype, "%.*s", (int)k, v);
	}
	return n;
}

static int sse_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	(void)a, (void)b, (void)c, (void)d;
	struct sse *s = ud;
	return s->stop ? 1 : 0;
}

static int sse_sockopt(void *ud, curl_socket_t fd, curlsocktype purpose)
{
	struct sse *s = ud;
	(void)purpose;
	if (s->rcvbuf) {
		int v = (int)s->rcvbuf;
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
	}
	return CURL_SOCKOPT_OK;
}

static CURL *sse_easy(struct sse *s)
{
	CURL *c = curl_easy_init();
	const char *sep = strchr(s->path, '?') ? "&" : "?";
	s->url = s->tok && s->tok_in_query
		     ? xasprintf("%s%s%saccess_token=%s", srv.base, s->path, sep, s->tok)
		     : xasprintf("%s%s", srv.base, s->path);
	if (s->tok && !s->tok_in_query) {
		char *a = xasprintf("Authorization: Bearer %s", s->tok);
		s->hl = curl_slist_append(s->hl, a);
		free(a);
	}
	if (*s->last_id) {
		char *a = xasprintf("Last-Event-ID: %s", s->last_id);
		s->hl = curl_slist_append(s->hl, a);
		free(a);
	}
	s->hl = curl_slist_append(s->hl, "Expect:");
	curl_easy_setopt(c, CURLOPT_URL, s->url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, s->hl);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sse_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, sse_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, s);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, sse_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, s);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_SOCKOPTFUNCTION, sse_sockopt);
	curl_easy_setopt(c, CURLOPT_SOCKOPTDATA, s);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (s->post_body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, s->post_body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(s->post_body));
	}
	s->easy = c;
	return c;
}

static void sse_finish(struct sse *s)
{
	curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &s->status);
	s->t_done = it_now_ms();
}

static void sse_run(struct sse *s)
{
	CURL *c = sse_easy(s);
	s->t_start = it_now_ms();
	s->rc = curl_easy_perform(c);
	sse_finish(s);
}

static void *sse_main(void *arg)
{
	sse_run(arg);
	return NULL;
}

static void sse_start(struct sse *s)
{
	pthread_create(&s->th, NULL, sse_main, s);
}

static void sse_join(struct sse *s)
{
	pthread_join(s->th, NULL);
}

/* Wait until the stream has delivered its first bytes (it is subscribed). */
static void sse_wait_connected(struct sse *s)
{
	long until = it_now_ms() + 5000;
	while (!s->got_bytes && it_now_ms() < until)
		usleep(10000);
	assert_true(s->got_bytes);
}

/* Wait until the stream holds an event named ev (NULL: any event). */
static bool sse_wait_event(struct sse *s, const char *ev, long timeout_ms)
{
	long until = it_now_ms() + timeout_ms;
	do {
		pthread_mutex_lock(&s->mu);
		bool hit = false;
		for (int i = 0; i < s->n && !hit; i++)
			hit = !ev || strcmp(s->ev[i].event, ev) == 0;
		pthread_mutex_unlock(&s->mu);
		if (hit)
			return true;
		usleep(10000);
	} while (it_now_ms() < until);
	return false;
}

/* Wait until the stream holds at least n events named ev. */
static bool sse_wait_count(struct sse *s, const char *ev, int n, long timeout_ms)
{
	long until = it_now_ms() + timeout_ms;
	do {
		pthread_mutex_lock(&s->mu);
		int k = 0;
		for (int i = 0; i < s->n; i++)
			k += strcmp(s->ev[i].event, ev) == 0;
		pthread_mutex_unlock(&s->mu);
		if (k >= n)
			return true;
		usleep(10000);
	} while (it_now_ms() < until);
	return false;
}

static json_t *ev_json(const struct sse_ev *e)
{
	json_t *j = e->data ? json_loads(e->data, 0, NULL) : NULL;
	if (!j)
		fprintf(stderr, "event %s (id %ld) data is not JSON: %.200s\n", e->event, e->id,
			e->data ? e->data : "(none)");
	assert_non_null(j);
	return j;
}

static void sse_dump(const struct sse *s)
{
	fprintf(stderr, "stream %s: status %ld rc %d, %d events:\n", s->path, s->status, (int)s->rc, s->n);
	for (int i = 0; i < s->n && i < 60; i++)
		fprintf(stderr, "  +%ldms id %ld %s %.160s\n", s->ev[i].t - s->t_start, s->ev[i].id,
			s->ev[i].event, s->ev[i].data ? s->ev[i].data : "");
}

/* The stream of one exec as wire.md has it: ids increase, `start` first,
 * `exit` last; returns the index of the exit event. */
static int check_exec_stream(struct sse *s)
{
	bool ok = s->rc == CURLE_OK && s->status == 200 && s->n >= 2 &&
		  strcmp(s->ev[0].event, "start") == 0 && strcmp(s->ev[s->n - 1].event, "exit") == 0;
	for (int i = 1; ok && i < s->n; i++)
		ok = s->ev[i].id > s->ev[i - 1].id;
	for (int i = 1; ok && i < s->n - 1; i++)
		ok = strcmp(s->ev[i].event, "exit") != 0 && strcmp(s->ev[i].event, "start") != 0;
	if (!ok)
		sse_dump(s);
	assert_int_equal(s->rc, CURLE_OK);
	assert_int_equal(s->status, 200);
	assert_true(s->n >= 2);
	assert_string_equal(s->ev[0].event, "start");
	assert_string_equal(s->ev[s->n - 1].event, "exit");
	assert_true(ok);
	assert_non_null(strstr(s->ctype, "text/event-stream"));
	/* the stream closed after `exit` by itself: well before the first
	 * keepalive (12 s) or idle timeout would have ended it; the bound is
	 * half that, so a loaded machine's delays do not matter */
	assert_true(s->t_done - s->ev[s->n - 1].t < 6000);
	return s->n - 1;
}

static char *exec_body(const char *cmd, const char *id, bool stream)
{
	json_t *j = json_pack("{s:s, s:i, s:b}", "command", cmd, "timeout_s", 60, "stream", stream);
	if (id)
		json_object_set_new(j, "id", json_string(id));
	char *t = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return t;
}

/* POST /exec (not streamed) with a client id in a thread; returns once the
 * exec is running. */
static void bg_running(struct bg_req *b, const char *tok, const char *cmd, const char *id)
{
	bg_exec(b, &srv, tok, json_pack("{s:s, s:s, s:i}", "command", cmd, "id", id, "timeout_s", 60), NULL);
	json_t *v = ex_wait_state(&srv, tok, id, "running|exited", 10000);
	assert_non_null(v);
	json_decref(v);
}

/* A command that runs until the test opens its gate: "still running"
 * then depends on the test, not on how fast the machine is. */
static char *gated(const char *gate, const char *then)
{
	return xasprintf("while [ ! -e /workspace/.gate-%s ]; do sleep 0.02; done; %s", gate, then);
}

static void gate_open(const char *gate)
{
	char *path = xasprintf("%s/tenants/acme/workspace/.gate-%s", srv.dir, gate);
	assert_int_equal(it_write_file(path, "", 0), 0);
	free(path);
}

static long metric(const char *name)
{
	struct it_resp r;
	assert_int_equal(it_http(&srv, "GET", "/metrics", tok_admin, NULL, NULL, 0, &r), 0);
	long v = -1;
	const char *p = r.body;
	size_t n = strlen(name);
	while (p && (p = strstr(p, name))) {
		if ((p == r.body || p[-1] == '\n') && p[n] == ' ') {
			v = strtol(p + n + 1, NULL, 10);
			break;
		}
		p += n;
	}
	it_resp_free(&r);
	return v;
}

/* The subscribers gauge, once it reads want: a closed stream leaves when
 * the server notices the hang-up, a moment after the client closed it
 * (up to 20 s on a loaded machine). */
static long wait_subscribers(long want)
{
	long until = it_now_ms() + 20000, v;
	while ((v = metric("sandboxd_sse_subscribers")) != want && it_now_ms() < until)
		usleep(20000);
	return v;
}

/* The server's open files, for a failure message. */
static void dump_fds(void)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/proc/%d/fd", (int)srv.pid);
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char p[400], t[256];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		ssize_t n = readlink(p, t, sizeof t - 1);
		t[n > 0 ? n : 0] = '\0';
		fprintf(stderr, "  fd %s -> %s\n", e->d_name, t);
	}
	closedir(d);
}

/* The server's open sockets: its connections (files come and go with
 * tenant and store work, and would blur the count). */
static int socket_count(void)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/proc/%d/fd", (int)srv.pid);
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char p[400], t[64];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		ssize_t k = readlink(p, t, sizeof t - 1);
		n += k > 7 && strncmp(t, "socket:", 7) == 0;
	}
	closedir(d);
	return n;
}

static int wait_socket_count(int want_at_most, long timeout_ms)
{
	long until = it_now_ms() + timeout_ms;
	int n;
	while ((n = socket_count()) > want_at_most && it_now_ms() < until)
		usleep(10000);
	return n;
}

static int wait_fd_count(int want_at_most, long timeout_ms)
{
	long until = it_now_ms() + timeout_ms;
	int n;
	while ((n = it_fd_count(&srv)) > want_at_most && it_now_ms() < until)
		usleep(20000);
	return n;
}

/* ---- setup ---- */

static int start_server(void)
{
	/* No warm sandboxes: their fds (a pidfd and a socket each, made and
	 * ended as the pool refills) would blur test_many_watchers' count of
	 * the server's fds; test_warm.c is theirs. */
	const char *const extra[] = {"--set", "heartbeat-ms=500", "--set", "warm-pool=0", NULL};
	return it_start_minted(&srv, extra, toks, IT_NTOKS(toks));
}

static int setup(void **state)
{
	(void)state;
	if (start_server() < 0)
		return -1;
	/* An admin feed filtered to a tenant that never runs anything: only
	 * keepalive comments reach it (test_keepalive_comment). */
	idle_feed = xcalloc(1, sizeof *idle_feed);
	sse_init(idle_feed, "/events?tenant=nobody", tok_admin);
	sse_start(idle_feed);
	return 0;
}

/* The memory tests measure the server's RSS: under AddressSanitizer its
 * quarantine keeps freed memory resident (up to 256 MiB), so that server
 * runs without quarantine and hands freed memory back to the system. */
static int setup_lean(void **state)
{
	(void)state;
	const char *old = getenv("ASAN_OPTIONS");
	char *saved = old ? xstrdup(old) : NULL;
	char *opts = xasprintf("%s%squarantine_size_mb=0:thread_local_quarantine_size_kb=0:"
			       "allocator_release_to_os_interval_ms=100",
			       old ? old : "", old && *old ? ":" : "");
	setenv("ASAN_OPTIONS", opts, 1);
	free(opts);
	int rc = start_server();
	if (saved)
		setenv("ASAN_OPTIONS", saved, 1);
	else
		unsetenv("ASAN_OPTIONS");
	free(saved);
	return rc;
}

static int teardown(void **state)
{
	(void)state;
	if (idle_feed) {
		idle_feed->stop = true;
		sse_join(idle_feed);
		sse_free(idle_feed);
		free(idle_feed);
		idle_feed = NULL;
	}
	return it_finish_minted(&srv, toks, IT_NTOKS(toks));
}

/* ---- tests ---- */

static void check_heartbeats(struct sse *s, int min_count, bool chatty)
{
	json_t *prev = NULL;
	int count = 0;
	for (int i = 0; i < s->n; i++) {
		if (strcmp(s->ev[i].event, "heartbeat") != 0)
			continue;
		json_t *h = ev_json(&s->ev[i]);
		for (const char *const *k =
			 (const char *const[]){"id", "elapsed_ms", "stdout_bytes", "stderr_bytes",
					       "last_output_at", "tail", NULL};
		     *k; k++)
			if (!json_object_get(h, *k)) {
				fprintf(stderr, "heartbeat lacks %s: %s\n", *k, s->ev[i].data);
				fail();
			}
		assert_true(json_is_string(json_object_get(h, "tail")));
		assert_int_equal(jint(h, "stderr_bytes"), 0);
		if (!chatty) {
			assert_int_equal(jint(h, "stdout_bytes"), 0);
			assert_true(json_is_null(json_object_get(h, "last_output_at")));
		}
		/* elapsed_ms is the contract (the server's clock): never closer
		 * than the interval. Arrival times are the network's and the
		 * scheduler's, so the flood guard counts instead (below). */
		if (prev) {
			long long d = jint(h, "elapsed_ms") - jint(prev, "elapsed_ms");
			if (d < HB_MS) {
				sse_dump(s);
				fprintf(stderr, "heartbeats too close: elapsed +%lld ms\n", d);
			}
			assert_true(d >= HB_MS);
			assert_true(jint(h, "stdout_bytes") >= jint(prev, "stdout_bytes"));
		}
		json_decref(prev);
		prev = h;
		count++;
	}
	/* No flood: at most one heartbeat per interval of the run. */
	if (prev)
		assert_true(count <= jint(prev, "elapsed_ms") / HB_MS + 1);
	if (count < min_count)
		sse_dump(s);
	assert_true(count >= min_count);
	json_decref(prev);
}

/* A streamed command that runs until the test opens its gate, once the
 * stream holds `hb` heartbeats (and `out` output events): "while it ran"
 * then depends on the gate, not on how fast the machine is. */
static int run_gated_stream(struct sse *s, const char *gate, const char *body_cmd, const char *then,
			    const char *id, int hb, int out)
{
	char *cmd = xasprintf("while [ ! -e /workspace/.gate-%s ]; do %s; done; %s", gate, body_cmd, then);
	s->post_body = exec_body(cmd, id, true);
	free(cmd);
	sse_start(s);
	bool ok =
	    sse_wait_count(s, "heartbeat", hb, 60000) && (!out || sse_wait_count(s, "output", out, 60000));
	/* Open the gate either way: the stream then ends and its thread can be
	 * joined before anything is asserted. */
	gate_open(gate);
	sse_join(s);
	if (!ok)
		sse_dump(s);
	assert_true(ok);
	return check_exec_stream(s);
}

static void test_heartbeat_spacing_with_chatty_output(void **state)
{
	(void)state;
	struct sse s;
	sse_init(&s, "/exec", tok_acme);
	/* output every 100 ms until at least 4 heartbeats and 10 outputs came */
	int x =
	    run_gated_stream(&s, "chatty", "i=$((i+1)); echo $i; sleep 0.1", "echo end", "hb-chatty", 4, 10);
	assert_int_equal(s.ev[0].id, 1);
	json_t *st = ev_json(&s.ev[0]);
	assert_string_equal(jstr(st, "id"), "hb-chatty");
	json_decref(st);
	check_heartbeats(&s, 4, true);
	assert_true(s.output_events >= 10);
	/* the heartbeats grow: the first has less output than the last, tail is a line printed */
	json_t *first = NULL, *last = NULL;
	for (int i = 0; i < x; i++)
		if (strcmp(s.ev[i].event, "heartbeat") == 0) {
			json_t *h = ev_json(&s.ev[i]);
			if (!first)
				first = json_incref(h);
			json_decref(last);
			last = h;
		}
	assert_true(jint(last, "stdout_bytes") > jint(first, "stdout_bytes"));
	assert_true(jint(last, "elapsed_ms") > jint(first, "elapsed_ms"));
	assert_true(json_is_string(json_object_get(last, "last_output_at")));
	const char *tail = jstr(last, "tail");
	assert_true(atoi(tail) >= 1);
	assert_string_equal(jstr(last, "id"), "hb-chatty");
	json_decref(first);
	json_decref(last);
	/* exit carries the ShellResult */
	json_t *res = ev_json(&s.ev[x]);
	assert_int_equal(jint(res, "exit_code"), 0);
	assert_string_equal(jstr(res, "id"), "hb-chatty");
	assert_non_null(strstr(jstr(res, "stdout"), "\nend\n"));
	assert_non_null(json_object_get(res, "duration_ms"));
	json_decref(res);
	sse_free(&s);
}

static void test_heartbeat_silent_command(void **state)
{
	(void)state;
	struct sse s;
	sse_init(&s, "/exec", tok_acme);
	/* prints nothing; heartbeats come all the same, while it runs (the
	 * gate opens only once two have arrived) */
	int x = run_gated_stream(&s, "silent", "sleep 0.05", "true", "hb-silent", 2, 0);
	check_heartbeats(&s, 2, false);
	assert_int_equal(s.output_events, 0);
	json_t *res = ev_json(&s.ev[x]);
	assert_int_equal(jint(res, "exit_code"), 0);
	json_decref(res);
	sse_free(&s);
}

static void test_stream_output_before_exit(void **state)
{
	(void)state;
	struct sse s;
	sse_init(&s, "/exec", tok_acme);
	s.keep_output = true;
	/* `early` must reach the client while the command still runs: the
	 * gate opens only once it has. */
	char *cmd = gated("early", "echo late >&2");
	char *full = xasprintf("echo early; %s", cmd);
	s.post_body = exec_body(full, NULL, true);
	free(cmd);
	free(full);
	sse_start(&s);
	bool ok = sse_wait_count(&s, "output", 1, 60000);
	gate_open("early");
	sse_join(&s);
	assert_true(ok);
	int x = check_exec_stream(&s);
	int early = -1, late = -1;
	for (int i = 0; i < x; i++) {
		if (strcmp(s.ev[i].event, "output") != 0)
			continue;
		json_t *o = ev_json(&s.ev[i]);
		if (strcmp(jstr(o, "data"), "early\n") == 0 && strcmp(jstr(o, "stream"), "stdout") == 0)
			early = i;
		if (strcmp(jstr(o, "data"), "late\n") == 0 && strcmp(jstr(o, "stream"), "stderr") == 0)
			late = i;
		json_decref(o);
	}
	if (early < 0 || late < 0)
		sse_dump(&s);
	assert_true(early > 0 && late > early);
	json_t *res = ev_json(&s.ev[x]);
	assert_string_equal(jstr(res, "stdout"), "early\n");
	assert_string_equal(jstr(res, "stderr"), "late\n");
	json_decref(res);
	sse_free(&s);
}

static void test_late_join_and_after_end(void **state)
{
	(void)state;
	struct bg_req b;
	char *cmd = gated("late-1", "echo done");
	bg_running(&b, tok_acme, cmd, "late-1");
	struct sse s;
	sse_init(&s, "/exec/late-1/events", tok_acme);
	sse_start(&s);
	/* start first, then live heartbeats while it runs; then the exit */
	assert_true(sse_wait_event(&s, "start", 10000));
	pthread_mutex_lock(&s.mu);
	int before = s.n;
	pthread_mutex_unlock(&s.mu);
	long until = it_now_ms() + 10000;
	int live_hb = 0;
	while (live_hb == 0 && it_now_ms() < until) {
		usleep(20000);
		pthread_mutex_lock(&s.mu);
		for (int i = before; i < s.n; i++)
			live_hb += strcmp(s.ev[i].event, "heartbeat") == 0;
		pthread_mutex_unlock(&s.mu);
	}
	assert_true(live_hb >= 1);
	gate_open("late-1");
	sse_join(&s);
	json_t *posted = bg_join(&b);
	assert_non_null(posted);
	int x = check_exec_stream(&s);
	assert_int_equal(s.ev[0].id, 1);
	json_t *start = ev_json(&s.ev[0]);
	assert_string_equal(jstr(start, "id"), "late-1");
	assert_string_equal(jstr(start, "command"), cmd);
	json_decref(start);
	free(cmd);
	json_t *res = ev_json(&s.ev[x]);
	assert_string_equal(jstr(res, "stdout"), "done\n");
	assert_true(json_equal(res, posted));
	json_decref(res);
	sse_free(&s);

	/* after the end: start and exit at once, and the stream closes */
	sse_init(&s, "/exec/late-1/events", tok_acme);
	sse_run(&s);
	x = check_exec_stream(&s);
	assert_int_equal(x, 1); /* and it ended by itself */
	assert_int_equal(s.rc, CURLE_OK);
	start = ev_json(&s.ev[0]);
	assert_string_equal(jstr(start, "id"), "late-1");
	json_decref(start);
	res = ev_json(&s.ev[1]);
	assert_true(json_equal(res, posted));
	json_decref(res);
	json_decref(posted);
	sse_free(&s);
	it_resp_free(&b.resp);
}

/* check_exec_stream() insists on `start` first; a resumed stream starts
 * after the last id seen instead. */
static void test_resume_ids_contiguous(void **state)
{
	(void)state;
	struct bg_req b;
	char *cmd = gated("resume-2", "true");
	bg_running(&b, tok_acme, cmd, "resume-2");
	free(cmd);
	struct sse s;
	sse_init(&s, "/exec/resume-2/events", tok_acme);
	s.stop_after = 3;
	sse_run(&s);
	assert_int_equal(s.n, 3);
	assert_string_equal(s.ev[0].event, "start");
	long last = s.ev[2].id;
	sse_free(&s);
	/* Away while heartbeats happen (the command runs until the gate
	 * opens, so none of this depends on timing: whatever happened while
	 * away is replayed, the rest follows live, ids contiguous). */
	usleep(600 * 1000);
	usleep(600 * 1000);

	sse_init(&s, "/exec/resume-2/events", tok_acme);
	snprintf(s.last_id, sizeof s.last_id, "%ld", last);
	sse_start(&s);
	assert_true(sse_wait_event(&s, NULL, 10000));
	gate_open("resume-2");
	sse_join(&s);
	bool ok = s.rc == CURLE_OK && s.status == 200 && s.n >= 3 && s.ev[0].id == last + 1 &&
		  strcmp(s.ev[s.n - 1].event, "exit") == 0;
	for (int i = 1; ok && i < s.n; i++)
		ok = s.ev[i].id == s.ev[i - 1].id + 1 && strcmp(s.ev[i].event, "start") != 0;
	if (!ok) {
		fprintf(stderr, "resumed after id %ld:\n", last);
		sse_dump(&s);
	}
	assert_true(ok);
	/* the first ones were replayed: they happened while away */
	assert_string_equal(s.ev[0].event, "heartbeat");
	json_decref(bg_join(&b));
	it_resp_free(&b.resp);
	sse_free(&s);
}

struct feed_ids {
	int starts, heartbeats, exits;
};

static struct feed_ids feed_count(struct sse *s, const char *exec_id, const char *tenant)
{
	struct feed_ids f = {0};
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->n; i++) {
		json_t *j = ev_json(&s->ev[i]);
		if (strcmp(jstr(j, "id"), exec_id) == 0) {
			if (!jstr(j, "tenant") || strcmp(jstr(j, "tenant"), tenant) != 0) {
				fprintf(stderr, "feed event of %s names tenant %s\n", exec_id,
					jstr(j, "tenant"));
				fail();
			}
			f.starts += strcmp(s->ev[i].event, "start") == 0;
			f.heartbeats += strcmp(s->ev[i].event, "heartbeat") == 0;
			f.exits += strcmp(s->ev[i].event, "exit") == 0;
		}
		json_decref(j);
		if (i)
			assert_true(s->ev[i].id > s->ev[i - 1].id);
	}
	pthread_mutex_unlock(&s->mu);
	return f;
}

static void test_tenant_feed(void **state)
{
	(void)state;
	struct sse acme, admin, admin_g;
	sse_init(&acme, "/events", tok_acme);
	sse_init(&admin, "/events", tok_admin);
	sse_init(&admin_g, "/events?tenant=globex", tok_admin);
	sse_start(&acme);
	sse_start(&admin);
	sse_start(&admin_g);
	sse_wait_connected(&acme);
	sse_wait_connected(&admin);
	sse_wait_connected(&admin_g);

	struct bg_req ba, bg;
	bg_exec(&ba, &srv, tok_acme, json_pack("{s:s, s:s}", "command", "sleep 1.2", "id", "feed-a"), NULL);
	bg_exec(&bg, &srv, tok_globex, json_pack("{s:s, s:s}", "command", "sleep 1.2", "id", "feed-g"), NULL);
	json_decref(bg_join(&ba));
	json_decref(bg_join(&bg));
	assert_int_equal(ba.resp.status, 200);
	assert_int_equal(bg.resp.status, 200);
	it_resp_free(&ba.resp);
	it_resp_free(&bg.resp);
	/* the exit events are published before the POSTs are answered */
	assert_true(sse_wait_event(&acme, "exit", 2000));
	usleep(200 * 1000);
	acme.stop = admin.stop = admin_g.stop = true;
	sse_join(&acme);
	sse_join(&admin);
	sse_join(&admin_g);
	assert_int_equal(acme.status, 200);
	assert_int_equal(admin.status, 200);
	assert_int_equal(admin_g.status, 200);

	struct feed_ids a = feed_count(&acme, "feed-a", "acme");
	struct feed_ids ag = feed_count(&acme, "feed-g", "globex");
	if (a.starts != 1 || a.exits != 1 || a.heartbeats < 1 || ag.starts + ag.heartbeats + ag.exits != 0)
		sse_dump(&acme);
	assert_int_equal(a.starts, 1);
	assert_true(a.heartbeats >= 1);
	assert_int_equal(a.exits, 1);
	assert_int_equal(ag.starts + ag.heartbeats + ag.exits, 0);
	/* nothing of globex at all in acme's feed */
	for (int i = 0; i < acme.n; i++)
		assert_null(strstr(acme.ev[i].data, "globex"));

	struct feed_ids xa = feed_count(&admin, "feed-a", "acme");
	struct feed_ids xg = feed_count(&admin, "feed-g", "globex");
	assert_true(xa.starts == 1 && xa.exits == 1 && xa.heartbeats >= 1);
	assert_true(xg.starts == 1 && xg.exits == 1 && xg.heartbeats >= 1);

	/* for the resumption below: acme's first two feed events */
	long acme_first = acme.ev[0].id, acme_second = acme.ev[1].id;
	struct feed_ids fa = feed_count(&admin_g, "feed-a", "acme");
	struct feed_ids fg = feed_count(&admin_g, "feed-g", "globex");
	assert_int_equal(fa.starts + fa.heartbeats + fa.exits, 0);
	assert_true(fg.starts == 1 && fg.exits == 1);
	sse_free(&acme);
	sse_free(&admin);
	sse_free(&admin_g);

	/* a tenant cannot read another's feed; nor can a non-admin operator token */
	struct it_resp r;
	it_expect_error_at(&srv, "GET", "/events?tenant=globex", tok_acme, 403, "insufficient_scope");
	assert_int_equal(it_http(&srv, "GET", "/events?tenant=globex", tok_ops_audit, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 403);
	it_resp_free(&r);
	assert_int_equal(
	    it_http(&srv, "GET", "/exec/feed-g/events?tenant=globex", tok_acme, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 403);
	it_resp_free(&r);
	/* a feed resumes with Last-Event-ID from its replay buffer: acme's
	 * events after that id, at once, none of globex's in between */
	struct sse again;
	sse_init(&again, "/events", tok_acme);
	snprintf(again.last_id, sizeof again.last_id, "%ld", acme_first);
	sse_start(&again);
	assert_true(sse_wait_event(&again, "exit", 3000));
	again.stop = true;
	sse_join(&again);
	if (again.n < 2 || again.ev[0].id != acme_second)
		sse_dump(&again);
	assert_true(again.n >= 2);
	assert_int_equal(again.ev[0].id, acme_second);
	struct feed_ids ra = feed_count(&again, "feed-a", "acme");
	struct feed_ids rg = feed_count(&again, "feed-g", "globex");
	assert_true(ra.starts == 0 && ra.exits == 1);
	assert_int_equal(rg.starts + rg.heartbeats + rg.exits, 0);
	sse_free(&again);
}

static void test_auth(void **state)
{
	(void)state;
	json_decref(ex_run(&srv, tok_acme, "true"));
	struct bg_req b;
	bg_running(&b, tok_acme, "sleep 1", "auth-1");
	struct sse s;
	/* ?access_token= on the exec stream */
	sse_init(&s, "/exec/auth-1/events", tok_acme);
	s.tok_in_query = true;
	sse_run(&s);
	check_exec_stream(&s);
	sse_free(&s);
	/* audit:read may watch, the ended exec as well */
	sse_init(&s, "/exec/auth-1/events", tok_audit);
	sse_run(&s);
	check_exec_stream(&s);
	sse_free(&s);
	json_decref(bg_join(&b));
	it_resp_free(&b.resp);
	/* ?access_token= on the feed */
	sse_init(&s, "/events", tok_audit);
	s.tok_in_query = true;
	sse_start(&s);
	sse_wait_connected(&s);
	s.stop = true;
	sse_join(&s);
	assert_int_equal(s.status, 200);
	assert_non_null(strstr(s.ctype, "text/event-stream"));
	sse_free(&s);

	struct it_resp r;
	static const char *const paths[] = {"/exec/auth-1/events", "/events"};
	for (int i = 0; i < 2; i++) {
		assert_int_equal(it_http(&srv, "GET", paths[i], NULL, NULL, NULL, 0, &r), 0);
		it_expect_error(&r, 401, "unauthorized");
		char *wa = it_header(&r, "WWW-Authenticate");
		assert_non_null(wa);
		free(wa);
		it_resp_free(&r);
		char *p = xasprintf("%s?access_token=garbage", paths[i]);
		assert_int_equal(it_http(&srv, "GET", p, NULL, NULL, NULL, 0, &r), 0);
		free(p);
		assert_int_equal(r.status, 401);
		it_resp_free(&r);
		it_expect_error_at(&srv, "GET", paths[i], tok_fsread, 403, "insufficient_scope");
		p = xasprintf("%s?access_token=%s", paths[i], tok_fsread);
		assert_int_equal(it_http(&srv, "GET", p, NULL, NULL, NULL, 0, &r), 0);
		free(p);
		assert_int_equal(r.status, 403);
		it_resp_free(&r);
	}
	/* no other route takes ?access_token= */
	char *p = xasprintf("/exec/auth-1?access_token=%s", tok_acme);
	assert_int_equal(it_http(&srv, "GET", p, NULL, NULL, NULL, 0, &r), 0);
	free(p);
	assert_int_equal(r.status, 401);
	it_resp_free(&r);
}

static void test_not_found(void **state)
{
	(void)state;
	struct it_resp r;
	it_expect_error_at(&srv, "GET", "/exec/no-such-exec/events", tok_acme, 404, "not_found");
	/* globex's exec, running (a live channel) and ended (the store) */
	struct bg_req b;
	bg_running(&b, tok_globex, "sleep 1", "nf-g");
	it_expect_error_at(&srv, "GET", "/exec/nf-g/events", tok_acme, 404, "not_found");
	json_decref(bg_join(&b));
	it_resp_free(&b.resp);
	it_expect_error_at(&srv, "GET", "/exec/nf-g/events", tok_acme, 404, "not_found");
	/* the admin of the operator tenant may look at it with ?tenant= */
	assert_int_equal(
	    it_http(&srv, "GET", "/exec/nf-g/events?tenant=globex", tok_admin, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "event: exit"));
	it_resp_free(&r);
}

#define WATCHERS 200

static void test_many_watchers(void **state)
{
	(void)state;
	/* warm up (threads, pools), then the baseline */
	json_decref(ex_run(&srv, tok_acme, "true"));
	usleep(300 * 1000);
	int fd0 = it_fd_count(&srv);
	long rss0 = it_rss_kib(&srv);

	long hb0 = metric("sandboxd_heartbeats_total");
	struct bg_req b;
	bg_running(&b, tok_acme, "sleep 3", "many-1");
	struct sse *w = xcalloc(WATCHERS, sizeof *w);
	CURLM *m = curl_multi_init();
	for (int i = 0; i < WATCHERS; i++) {
		sse_init(&w[i], "/exec/many-1/events", tok_acme);
		curl_multi_add_handle(m, sse_easy(&w[i]));
		w[i].t_start = it_now_ms();
	}
	long until = it_now_ms() + 30000;
	int running = WATCHERS, done = 0, max_fd = 0;
	long next_sample = 0;
	while (done < WATCHERS && it_now_ms() < until) {
		curl_multi_perform(m, &running);
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(m, &left)))
			if (msg->msg == CURLMSG_DONE) {
				for (int i = 0; i < WATCHERS; i++)
					if (w[i].easy == msg->easy_handle) {
						w[i].rc = msg->data.result;
						sse_finish(&w[i]);
					}
				done++;
			}
		if (it_now_ms() >= next_sample) {
			int n = it_fd_count(&srv);
			max_fd = n > max_fd ? n : max_fd;
			next_sample = it_now_ms() + 200;
		}
		curl_multi_poll(m, NULL, 0, 100, NULL);
	}
	assert_int_equal(done, WATCHERS);
	/* all of them were connected at once */
	assert_true(max_fd >= fd0 + WATCHERS);
	int got_exit = 0;
	for (int i = 0; i < WATCHERS; i++) {
		if (w[i].rc == CURLE_OK && w[i].status == 200 && w[i].n >= 2 &&
		    strcmp(w[i].ev[0].event, "start") == 0 && strcmp(w[i].ev[w[i].n - 1].event, "exit") == 0)
			got_exit++;
		else if (got_exit == i)
			sse_dump(&w[i]);
	}
	assert_int_equal(got_exit, WATCHERS);
	for (int i = 0; i < WATCHERS; i++) {
		curl_multi_remove_handle(m, w[i].easy);
		sse_free(&w[i]);
	}
	curl_multi_cleanup(m);
	free(w);
	json_decref(bg_join(&b));
	it_resp_free(&b.resp);

	int fd1 = wait_fd_count(fd0 + 5, 2000);
	long rss1 = it_rss_kib(&srv);
	fprintf(stderr, "200 watchers: fds %d -> max %d -> %d, rss %ld -> %ld KiB\n", fd0, max_fd, fd1, rss0,
		rss1);
	assert_true(fd1 <= fd0 + 5);
	assert_true(rss1 - rss0 < 16 * 1024);
	assert_int_equal(wait_subscribers(0), 0);
	/* one heartbeat computation per interval for all 200 (3 s / 500 ms) */
	long hbs = metric("sandboxd_heartbeats_total") - hb0;
	fprintf(stderr, "heartbeats computed: %ld\n", hbs);
	assert_true(hbs >= 4 && hbs <= 8);
}

/* Watchers of two execs at once, and a feed: each stream gets its own
 * exec's events only, every one of them, in order, whoever else listens;
 * watchers of one leaving early do not disturb those of the other (the
 * hub keeps each exec's subscribers apart from the others'). */
#define MIX 8
static void check_mix_stream(struct sse *w, const char *id)
{
	char want[48];
	snprintf(want, sizeof want, "\"id\":\"%s\"", id);
	bool ok = w->rc == CURLE_OK && w->status == 200 && w->n >= 3 &&
		  strcmp(w->ev[0].event, "start") == 0 && strcmp(w->ev[w->n - 1].event, "exit") == 0;
	for (int i = 0; ok && i < w->n; i++) {
		ok =
		    w->ev[i].data && strstr(w->ev[i].data, want) && (i == 0 || w->ev[i].id > w->ev[i - 1].id);
		ok = ok && (i == 0 || i == w->n - 1 || strcmp(w->ev[i].event, "heartbeat") == 0);
	}
	if (!ok)
		sse_dump(w);
	assert_true(ok);
}

static void test_watchers_of_several_execs(void **state)
{
	(void)state;
	struct sse feed, early[MIX], wa[MIX], wb[MIX];
	sse_init(&feed, "/events", tok_acme);
	sse_start(&feed);
	sse_wait_connected(&feed);
	struct bg_req ba, bb;
	bg_running(&ba, tok_acme, "sleep 2.5", "mix-a");
	bg_running(&bb, tok_acme, "sleep 2.5", "mix-b");
	for (int i = 0; i < MIX; i++) {
		sse_init(&wa[i], "/exec/mix-a/events", tok_acme);
		sse_init(&wb[i], "/exec/mix-b/events", tok_acme);
		sse_init(&early[i], i % 2 ? "/exec/mix-a/events" : "/exec/mix-b/events", tok_acme);
		early[i].stop_after = 1; /* hangs up after start */
		sse_start(&wa[i]);
		sse_start(&early[i]);
		sse_start(&wb[i]);
	}
	for (int i = 0; i < MIX; i++) {
		sse_join(&wa[i]);
		sse_join(&wb[i]);
		sse_join(&early[i]);
		check_mix_stream(&wa[i], "mix-a");
		check_mix_stream(&wb[i], "mix-b");
		assert_true(early[i].n >= 1);
		sse_free(&wa[i]);
		sse_free(&wb[i]);
		sse_free(&early[i]);
	}
	json_decref(bg_join(&ba));
	json_decref(bg_join(&bb));
	it_resp_free(&ba.resp);
	it_resp_free(&bb.resp);
	assert_true(sse_wait_event(&feed, "exit", 3000));
	long until = it_now_ms() + 3000;
	struct feed_ids fa, fb;
	do {
		fa = feed_count(&feed, "mix-a", "acme");
		fb = feed_count(&feed, "mix-b", "acme");
	} while ((fa.exits < 1 || fb.exits < 1) && it_now_ms() < until && usleep(20000) == 0);
	feed.stop = true;
	sse_join(&feed);
	assert_true(fa.starts == 1 && fa.exits == 1 && fa.heartbeats >= 1);
	assert_true(fb.starts == 1 && fb.exits == 1 && fb.heartbeats >= 1);
	sse_free(&feed);
	assert_int_equal(wait_subscribers(0), 0);
}

static int raw_connect(void)
{
	int fd = it_connect(&srv);
	assert_true(fd >= 0);
	return fd;
}

static void raw_send(int fd, const char *req)
{
	size_t off = 0, len = strlen(req);
	while (off < len) {
		ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);
		assert_true(w > 0);
		off += (size_t)w;
	}
}

/* Read until pattern shows up (or timeout); returns whether it did. */
static bool raw_read_until(int fd, const char *pattern, long timeout_ms)
{
	char buf[65536];
	size_t n = 0;
	long until = it_now_ms() + timeout_ms;
	while (it_now_ms() < until) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 50) <= 0)
			continue;
		ssize_t r = recv(fd, buf + n, sizeof buf - 1 - n, 0);
		if (r <= 0)
			return false;
		n += (size_t)r;
		buf[n] = '\0';
		if (strstr(buf, pattern))
			return true;
		if (n > sizeof buf / 2) {
			memmove(buf, buf + n / 2, n - n / 2);
			n -= n / 2;
		}
	}
	return false;
}

static void test_disconnect_noticed(void **state)
{
	(void)state;
	/* A feed with no traffic (ops publishes nothing): only the hang-up
	 * watch can notice the client leaving before the 15 s keepalive. */
	/* connections of earlier tests may still be closing: the settled count */
	int base = socket_count();
	for (long until = it_now_ms() + 300; it_now_ms() < until; usleep(10000)) {
		int n = socket_count();
		base = n < base ? n : base;
	}
	long subs0 = metric("sandboxd_sse_subscribers");
	for (int round = 0; round < 3; round++) {
		int fd = raw_connect();
		char *req = xasprintf("GET /events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
				      tok_ops_audit);
		raw_send(fd, req);
		free(req);
		assert_true(raw_read_until(fd, "retry:", 3000));
		long subs = metric("sandboxd_sse_subscribers");
		assert_int_equal(subs, subs0 + 1);
		int with = wait_socket_count(base + 1, 1000); /* the metrics request's connection gone */
		long t0 = it_now_ms();
		close(fd);
		int after = wait_socket_count(with - 1, 6000);
		long ms = it_now_ms() - t0;
		if (after > with - 1) {
			fprintf(stderr,
				"round %d: disconnect not noticed: sockets %d -> %d after %ld ms, "
				"subscribers %ld\n",
				round, with, after, ms, metric("sandboxd_sse_subscribers"));
			dump_fds();
		}
		assert_true(after <= with - 1);
		/* noticed by the watcher, not by a keepalive write 12 s later
		 * (half that is the bound: machine speed must not matter) */
		assert_true(ms < 6000);
		assert_int_equal(metric("sandboxd_sse_subscribers"), subs0);
	}
	/* the same for a watcher of a running exec (hung up between heartbeats) */
	struct bg_req b;
	bg_running(&b, tok_acme, "sleep 2", "dc-1");
	int fd = raw_connect();
	char *req = xasprintf("GET /exec/dc-1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
			      tok_acme);
	raw_send(fd, req);
	free(req);
	assert_true(raw_read_until(fd, "event: start", 3000));
	close(fd);
	assert_int_equal(wait_subscribers(subs0), subs0);
	json_decref(bg_join(&b));
	it_resp_free(&b.resp);
}

/* A stream with nothing to say still gets a comment line at least every
 * 15 s (wire.md), so that proxies keep it open; the subscriber has been
 * connected since the suite's setup. */
static void test_keepalive_comment(void **state)
{
	(void)state;
	assert_true(idle_feed->got_bytes);
	long connected = idle_feed->t_first_byte;
	while (it_now_ms() - connected < 15000 && !idle_feed->comments)
		usleep(100 * 1000);
	pthread_mutex_lock(&idle_feed->mu);
	int comments = idle_feed->comments, events = idle_feed->n;
	long first = idle_feed->t_comment[0] - connected;
	pthread_mutex_unlock(&idle_feed->mu);
	fprintf(stderr, "keepalive: %d comments, the first after %ld ms\n", comments, first);
	assert_int_equal(events, 0);
	assert_true(comments >= 1);
	/* at least every 15 s (wire.md), and not a flood */
	assert_true(first >= 11000 && first <= 15000);
	assert_null(idle_feed->t_done ? "ended" : NULL);
}

/* SIGTERM with streams open: every stream ends, the server exits 0 (no
 * suspended connection left behind for libmicrohttpd to trip over), and
 * its log is clean (checked by the teardown). Runs last: it stops the
 * server. */
static void test_shutdown_ends_streams(void **state)
{
	(void)state;
	struct bg_req b;
	bg_running(&b, tok_acme, "sleep 30", "shut-1");
	struct sse feed, watch, own;
	sse_init(&feed, "/events", tok_acme);
	sse_init(&watch, "/exec/shut-1/events", tok_acme);
	sse_init(&own, "/exec", tok_acme);
	own.post_body = exec_body("sleep 30", "shut-2", true);
	sse_start(&feed);
	sse_start(&watch);
	sse_start(&own);
	sse_wait_connected(&feed);
	sse_wait_connected(&watch);
	sse_wait_connected(&own);
	assert_true(sse_wait_event(&own, "start", 3000));
	long t0 = it_now_ms();
	assert_int_equal(it_stop(&srv, SIGTERM), 0);
	long ms = it_now_ms() - t0;
	sse_join(&feed);
	sse_join(&watch);
	sse_join(&own);
	json_decref(bg_join(&b));
	it_resp_free(&b.resp);
	fprintf(stderr, "shutdown took %ld ms\n", ms);
	assert_true(ms < 10000);
	/* the streams ended (cleanly or cut), none hung until curl's timeout */
	assert_true(feed.t_done - t0 < 10000 && watch.t_done - t0 < 10000 && own.t_done - t0 < 10000);
	sse_free(&feed);
	sse_free(&watch);
	sse_free(&own);
}

struct rss_sampler {
	atomic_bool stop;
	long max_kib;
	pthread_t th;
};

static void *rss_main(void *arg)
{
	struct rss_sampler *r = arg;
	while (!r->stop) {
		long k = it_rss_kib(&srv);
		if (k > r->max_kib)
			r->max_kib = k;
		usleep(50 * 1000);
	}
	return NULL;
}

static void test_slow_owner_bounded(void **state)
{
	(void)state;
	json_decref(ex_run(&srv, tok_acme, "true"));
	long rss0 = it_rss_kib(&srv);
	struct rss_sampler rs = {.max_kib = rss0};
	pthread_create(&rs.th, NULL, rss_main, &rs);
	struct sse s;
	sse_init(&s, "/exec", tok_acme);
	s.post_body = exec_body("head -c 30000000 /dev/urandom | base64", "slow-1", true);
	s.pause_first_ms = 3000; /* reads nothing for 3 s, then all */
	s.rcvbuf = 64 * 1024;
	sse_run(&s);
	rs.stop = true;
	pthread_join(rs.th, NULL);
	fprintf(stderr,
		"slow owner: %ld output events (%zu bytes), rss %ld -> max %ld KiB, dropped note %d\n",
		s.output_events, s.output_bytes, rss0, rs.max_kib, s.saw_output_dropped);
	int x = check_exec_stream(&s);
	assert_false(s.saw_dropped);
	assert_true(s.saw_output_dropped); /* the queue bound was reached */
	json_t *res = ev_json(&s.ev[x]);
	assert_int_equal(jint(res, "exit_code"), 0);
	assert_true(jtrue(res, "truncated"));
	assert_true(jint(res, "stdout_bytes") > 40000000);
	assert_true(json_string_length(json_object_get(res, "stdout")) < 200000);
	json_decref(res);
	assert_true(rs.max_kib - rss0 < 64 * 1024);
	sse_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_heartbeat_spacing_with_chatty_output),
	    cmocka_unit_test(test_heartbeat_silent_command),
	    cmocka_unit_test(test_stream_output_before_exit),
	    cmocka_unit_test(test_late_join_and_after_end),
	    cmocka_unit_test(test_resume_ids_contiguous),
	    cmocka_unit_test(test_tenant_feed),
	    cmocka_unit_test(test_auth),
	    cmocka_unit_test(test_not_found),
	    cmocka_unit_test(test_disconnect_noticed),
	    cmocka_unit_test(test_keepalive_comment),
	    cmocka_unit_test(test_shutdown_ends_streams),
	};
	const struct CMUnitTest memory_tests[] = {
	    cmocka_unit_test(test_many_watchers),
	    cmocka_unit_test(test_watchers_of_several_execs),
	    cmocka_unit_test(test_slow_owner_bounded),
	};
	if (getenv("IT_FILTER"))
		cmocka_set_test_filter(getenv("IT_FILTER"));
	curl_global_init(CURL_GLOBAL_ALL);
	int rc = cmocka_run_group_tests_name("events", tests, setup, teardown);
	rc += cmocka_run_group_tests_name("events_memory", memory_tests, setup_lean, teardown);
	curl_global_cleanup();
	return rc;
}
