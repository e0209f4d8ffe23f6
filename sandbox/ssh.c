/* A host over SSH: settings, pinned host key, the connection pool, and
 * commands through exec channels (see ssh.h). Files: ssh_sftp.c. */
#include "sandbox/ssh.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/nowait.h"
#include "common/timeutil.h"
#include "common/secretfile.h"
#include "common/xmalloc.h"
#include "sandbox/collector.h"
#include "sandbox/runner.h"
#include "sandbox/ssh_impl.h"

#define KEY_MAX 65536
#define POOL_MAX 4
#define POLL_MS 100
#define PID_MARK "SBXPID:" /* the line of the shell's pid, after what rc files print */
#define PREAMBLE_MAX 65536 /* bytes before PID_MARK's line; beyond, the pid is unreadable */
#define KILL_WAIT_MS 5000  /* for the output's end after the group was killed */

struct sbx_ssh_host {
	char *host, *user, *root, *pin;
	int port, timeout_ms;
	ssh_key key; /* the private key, read at sbx_ssh_host_new */
	pthread_mutex_t mu;
	struct sbx_ssh_conn *idle[POOL_MAX];
	size_t nidle;
};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init_libssh(void)
{
	ssh_init();
}

/* The key file under remote_token_file's rules (common/secretfile.h). */
static char *read_key_file(const char *path, char *why, size_t whysz)
{
	size_t n;
	return sbx_secret_file_read(path, "ssh_key_file", KEY_MAX, &n, why, whysz);
}

/* A pin is "TYPE BASE64" (a known_hosts or .pub key, a comment allowed)
 * or "SHA256:BASE64". */
static int pin_check(const char *pin, char *why, size_t whysz)
{
	if (strncmp(pin, "SHA256:", 7) == 0 && strlen(pin) > 7)
		return 0;
	char type[64], b64[8192];
	ssh_key k = NULL;
	int ok = sscanf(pin, "%63s %8191s", type, b64) == 2 &&
		 ssh_pki_import_pubkey_base64(b64, ssh_key_type_from_name(type), &k) == SSH_OK;
	ssh_key_free(k);
	if (ok)
		return 0;
	snprintf(why, whysz, "ssh_host_key must be \"TYPE BASE64\" (as in known_hosts) or \"SHA256:...\"");
	return -EINVAL;
}

int sbx_ssh_host_new(struct sbx_ssh_host **out, const struct sbx_ssh_opts *o, char *why, size_t whysz)
{
	pthread_once(&init_once, init_libssh);
	*out = NULL;
	if (!o->host || !o->user || !o->root || !o->key_file || !o->host_key || o->root[0] != '/') {
		snprintf(why, whysz,
			 "backend ssh needs ssh_host, ssh_user, ssh_root (absolute), ssh_key_file "
			 "and ssh_host_key");
		return -EINVAL;
	}
	if (pin_check(o->host_key, why, whysz) < 0)
		return -EINVAL;
	char *pem = read_key_file(o->key_file, why, whysz);
	if (!pem)
		return -EACCES;
	ssh_key key = NULL;
	int rc = ssh_pki_import_privkey_base64(pem, NULL, NULL, NULL, &key);
	memset(pem, 0, strlen(pem));
	free(pem);
	if (rc != SSH_OK) {
		snprintf(why, whysz, "ssh_key_file %s holds no private key libssh can read (unencrypted)",
			 o->key_file);
		return -EINVAL;
	}
	struct sbx_ssh_host *h = xcalloc(1, sizeof *h);
	h->host = xstrdup(o->host);
	h->user = xstrdup(o->user);
	h->root = xstrdup(o->root);
	h->pin = xstrdup(o->host_key);
	h->port = o->port > 0 ? o->port : 22;
	h->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000;
	h->key = key;
	pthread_mutex_init(&h->mu, NULL);
	*out = h;
	return 0;
}

static bool str_eq(const char *a, const char *b)
{
	return strcmp(a, b) == 0;
}

bool sbx_ssh_host_same(const struct sbx_ssh_host *a, const struct sbx_ssh_host *b)
{
	return str_eq(a->host, b->host) && str_eq(a->user, b->user) && str_eq(a->root, b->root) &&
	       str_eq(a->pin, b->pin) && a->port == b->port && a->timeout_ms == b->timeout_ms &&
	       ssh_key_cmp(a->key, b->key, SSH_KEY_CMP_PRIVATE) == 0;
}

bool sbx_ssh_host_same_account(const struct sbx_ssh_host *a, const struct sbx_ssh_host *b)
{
	return str_eq(a->host, b->host) && str_eq(a->user, b->user) && a->port == b->port;
}

static void conn_close(struct sbx_ssh_conn *c)
{
	if (!c)
		return;
	sbx_ssh_watch_disarm(&c->watch);
	if (c->sftp)
		sftp_free(c->sftp);
	ssh_disconnect(c->s);
	ssh_free(c->s);
	free(c);
}

void sbx_ssh_host_free(struct sbx_ssh_host **ph)
{
	struct sbx_ssh_host *h = *ph;
	if (!h)
		return;
	for (size_t i = 0; i < h->nidle; i++)
		conn_close(h->idle[i]);
	ssh_key_free(h->key);
	pthread_mutex_destroy(&h->mu);
	free(h->host);
	free(h->user);
	free(h->root);
	free(h->pin);
	free(h);
	*ph = NULL;
}

/* The server's key against the pin: 0, or -SBX_E_BACKEND with why. */
static int verify_host_key(struct sbx_ssh_host *h, ssh_session s, char *why, size_t whysz)
{
	ssh_key srv = NULL;
	if (ssh_get_server_publickey(s, &srv) != SSH_OK) {
		snprintf(why, whysz, "%s:%d sent no host key", h->host, h->port);
		return -SBX_E_BACKEND;
	}
	unsigned char *hash = NULL;
	size_t hlen = 0;
	char *fp = NULL;
	if (ssh_get_publickey_hash(srv, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen) == 0)
		fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hlen);
	bool ok = false;
	if (strncmp(h->pin, "SHA256:", 7) == 0) {
		ok = fp && strcmp(fp, h->pin) == 0;
	} else {
		char type[64], b64[8192];
		ssh_key pinned = NULL;
		if (sscanf(h->pin, "%63s %8191s", type, b64) == 2 &&
		    ssh_pki_import_pubkey_base64(b64, ssh_key_type_from_name(type), &pinned) == SSH_OK)
			ok = ssh_key_cmp(srv, pinned, SSH_KEY_CMP_PUBLIC) == 0;
		ssh_key_free(pinned);
	}
	if (!ok)
		snprintf(
		    why, whysz,
		    "host key of %s:%d (%s %s) is not the pinned ssh_host_key: refused (no trust on first "
		    "use)",
		    h->host, h->port, ssh_key_type_to_char(ssh_key_type(srv)), fp ? fp : "?");
	ssh_string_free_char(fp);
	ssh_clean_pubkey_hash(&hash);
	ssh_key_free(srv);
	return ok ? 0 : -SBX_E_BACKEND;
}

static void set_options(struct sbx_ssh_host *h, ssh_session s)
{
	bool no = false;
	long usec = (long)h->timeout_ms * 1000;
	ssh_options_set(s, SSH_OPTIONS_PROCESS_CONFIG, &no); /* nothing of ~/.ssh/config */
	ssh_options_set(s, SSH_OPTIONS_HOST, h->host);
	ssh_options_set(s, SSH_OPTIONS_PORT, &h->port);
	ssh_options_set(s, SSH_OPTIONS_USER, h->user);
	ssh_options_set(s, SSH_OPTIONS_TIMEOUT_USEC, &usec);
	ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, "/dev/null");
	ssh_options_set(s, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null");
	char type[64];
	if (strncmp(h->pin, "SHA256:", 7) != 0 && sscanf(h->pin, "%63s", type) == 1)
		ssh_options_set(s, SSH_OPTIONS_HOSTKEYS, type); /* offer the pinned kind first */
}

static int connect_new(struct sbx_ssh_host *h, int64_t deadline_ms, const _Atomic bool *cancel,
		       struct sbx_ssh_conn **out, char *why, size_t whysz)
{
	struct sbx_ssh_conn *c = xcalloc(1, sizeof *c);
	c->watch.fd = -1;
	c->s = ssh_new();
	c->host = h;
	c->hostname = h->host;
	c->port = h->port;
	set_options(h, c->s);
	int rc = -SBX_E_BACKEND;
	bool up = ssh_connect(c->s) == SSH_OK;
	if (up) /* from here, libssh might wait on the peer for good */
		sbx_ssh_watch_arm(&c->watch, ssh_get_fd(c->s), deadline_ms, cancel);
	if (!up)
		snprintf(why, whysz, "cannot connect to %s:%d: %s", h->host, h->port, ssh_get_error(c->s));
	else if (verify_host_key(h, c->s, why, whysz) < 0)
		rc = -SBX_E_BACKEND;
	else if (ssh_userauth_publickey(c->s, NULL, h->key) != SSH_AUTH_SUCCESS)
		snprintf(why, whysz, "%s@%s:%d refused the key of ssh_key_file: %s", h->user, h->host,
			 h->port, ssh_get_error(c->s));
	else
		rc = sbx_ssh_sftp_open(c, h->root, why, whysz);
	if (rc < 0 && sbx_ssh_watch_state(&c->watch))
		snprintf(why, whysz, "%s:%d did not answer in time (%s)", h->host, h->port,
			 sbx_ssh_watch_state(&c->watch) == 2 ? "cancelled" : "deadline passed");
	if (rc < 0) {
		conn_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* An idle connection the peer has closed (or said anything on) is no
 * longer one to hand out. */
static bool idle_ok(struct sbx_ssh_conn *c)
{
	struct pollfd p = {.fd = ssh_get_fd(c->s), .events = POLLIN};
	return ssh_is_connected(c->s) && p.fd >= 0 && poll(&p, 1, 0) == 0;
}

/* No SSH I/O on an HTTP event thread or in no-wait mode, ever: a stopped
 * peer would hold the thread (common/nowait.h). */
static int refuse_here(char *why, size_t whysz)
{
	if (!nowait_network_refused())
		return 0;
	if (!nowait_on())
		log_msg("error", "backend ssh: network I/O refused on an HTTP event thread (a bug)");
	snprintf(why, whysz, "no SSH I/O on an HTTP event thread");
	return -EAGAIN;
}

int sbx_ssh_get(struct sbx_ssh_host *h, struct sbx_ssh_conn **out, char *why, size_t whysz)
{
	return sbx_ssh_get_by(h, mono_ms() + 2 * (int64_t)h->timeout_ms, NULL, out, why, whysz);
}

int sbx_ssh_get_by(struct sbx_ssh_host *h, int64_t deadline_ms, const _Atomic bool *cancel,
		   struct sbx_ssh_conn **out, char *why, size_t whysz)
{
	if (refuse_here(why, whysz) < 0)
		return -EAGAIN;
	for (;;) {
		struct sbx_ssh_conn *c = NULL;
		pthread_mutex_lock(&h->mu);
		if (h->nidle)
			c = h->idle[--h->nidle];
		pthread_mutex_unlock(&h->mu);
		if (!c)
			break;
		if (idle_ok(c)) {
			c->broken = false;
			sbx_ssh_watch_arm(&c->watch, ssh_get_fd(c->s), deadline_ms, cancel);
			*out = c;
			return 0;
		}
		conn_close(c);
	}
	return connect_new(h, deadline_ms, cancel, out, why, whysz);
}

void sbx_ssh_deadline(struct sbx_ssh_conn *c, int64_t deadline_ms, const _Atomic bool *cancel)
{
	sbx_ssh_watch_arm(&c->watch, ssh_get_fd(c->s), deadline_ms, cancel);
}

int sbx_ssh_expired(struct sbx_ssh_conn *c)
{
	return sbx_ssh_watch_state(&c->watch);
}

void sbx_ssh_put(struct sbx_ssh_host *h, struct sbx_ssh_conn **pc, bool ok)
{
	struct sbx_ssh_conn *c = *pc;
	*pc = NULL;
	if (!c)
		return;
	if (sbx_ssh_watch_disarm(&c->watch))
		ok = false; /* its socket was shut down */
	if (ok && !c->broken && ssh_is_connected(c->s)) {
		pthread_mutex_lock(&h->mu);
		if (h->nidle < POOL_MAX) {
			h->idle[h->nidle++] = c;
			c = NULL;
		}
		pthread_mutex_unlock(&h->mu);
	}
	conn_close(c);
}

bool sbx_ssh_alive(struct sbx_ssh_conn *c)
{
	return c && !c->broken && ssh_is_connected(c->s);
}

/* ---- commands ---- */

/* s in single quotes for sh, appended to b. */
static void sh_quote(struct buf *b, const char *s)
{
	buf_append(b, "'", 1);
	for (const char *p = s; *p; p++) {
		if (*p == '\'')
			buf_append(b, "'\\''", 4);
		else
			buf_append(b, p, 1);
	}
	buf_append(b, "' ", 2);
}

/* The line the account's shell runs: its pid first (sshd made it a
 * session leader: it is the command's process group), then the command
 * in dir with the environment, replacing the shell. */
static char *command_line(const struct sbx_ssh_exec *x)
{
	struct buf b;
	buf_init(&b, (size_t)1 << 30);
	buf_appendf(&b, "echo " PID_MARK "$$ && cd ");
	sh_quote(&b, x->dir);
	buf_appendf(&b, "&& exec env -- ");
	for (const char *const *e = x->env; e && *e; e++)
		sh_quote(&b, *e);
	buf_appendf(&b, "/bin/sh -c ");
	sh_quote(&b, x->command);
	buf_cstr(&b);
	return buf_steal(&b, NULL);
}

static const struct {
	const char *name;
	int sig;
} signals[] = {{"HUP", SIGHUP},	  {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ILL", SIGILL},
	       {"ABRT", SIGABRT}, {"FPE", SIGFPE},   {"KILL", SIGKILL}, {"SEGV", SIGSEGV},
	       {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"USR1", SIGUSR1},
	       {"USR2", SIGUSR2}, {"BUS", SIGBUS},   {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ}};

static void on_exit_signal(ssh_session s, ssh_channel ch, const char *sig, int core, const char *msg,
			   const char *lang, void *arg)
{
	struct sbx_ssh_run *run = arg;
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
		if (strcmp(signals[i].name, sig) == 0)
			run->signal = signals[i].sig;
	if (!run->signal)
		run->signal = SIGKILL; /* one we have no number for */
}

static void on_exit_status(ssh_session s, ssh_channel ch, int status, void *arg)
{
	struct sbx_ssh_run *run = arg;
	run->status = status;
	run->has_status = true;
}

/* Kill the command's process group from a second channel of the same
 * connection, and signal the first as the protocol allows. */
static void kill_group(struct sbx_ssh_run *run)
{
	if (run->killed)
		return;
	run->killed = true;
	ssh_channel_request_send_signal(run->ch, "KILL");
	if (run->pgid <= 0) {
		log_msg("warn",
			"backend ssh: %s:%d: the command's process group is unknown: only the "
			"channel's KILL was sent, its processes may remain on the host",
			run->c->hostname, run->c->port);
		return;
	}
	ssh_channel k = ssh_channel_new(run->c->s);
	char line[64];
	snprintf(line, sizeof line, "kill -KILL -- -%ld 2>/dev/null", run->pgid);
	bool done = false;
	if (k && ssh_channel_open_session(k) == SSH_OK && ssh_channel_request_exec(k, line) == SSH_OK) {
		int64_t until = mono_ms() + KILL_WAIT_MS;
		while (!ssh_channel_is_eof(k) && mono_ms() < until &&
		       ssh_channel_poll_timeout(k, POLL_MS, 0) != SSH_ERROR)
			;
		done = ssh_channel_is_eof(k);
		ssh_channel_close(k);
	}
	if (k)
		ssh_channel_free(k);
	if (!done)
		log_msg("warn", "backend ssh: %s:%d: the kill of process group %ld was not confirmed",
			run->c->hostname, run->c->port, run->pgid);
}

/* The preamble before the command's own output: lines the account's
 * shell rc files may print, then PID_MARK and the shell's pid. Eats from
 * *p; true once it is over (run->pgid set: > 1, or -1 when unreadable,
 * so never a kill of -1 or of group 0). */
static bool preamble(struct sbx_ssh_run *run, const char **p, size_t *len)
{
	while (*len) {
		const char *nl = memchr(*p, '\n', *len);
		size_t take = nl ? (size_t)(nl - *p) : *len;
		for (size_t i = 0; i < take && run->pidlen < sizeof run->pidbuf - 1; i++)
			run->pidbuf[run->pidlen++] = (*p)[i];
		run->preamble_bytes += take + (nl ? 1 : 0);
		*p += take + (nl ? 1 : 0);
		*len -= take + (nl ? 1 : 0);
		if (!nl && run->preamble_bytes < PREAMBLE_MAX)
			return false;
		run->pidbuf[run->pidlen] = '\0';
		run->pidlen = 0;
		bool mark = nl && strncmp(run->pidbuf, PID_MARK, strlen(PID_MARK)) == 0;
		if (nl && !mark && run->preamble_bytes < PREAMBLE_MAX)
			continue; /* a line of the rc files: not the command's */
		char *end = NULL;
		long v = mark ? strtol(run->pidbuf + strlen(PID_MARK), &end, 10) : 0;
		run->pgid = nl && end && *end == '\0' && v > 1 ? v : -1;
		return true;
	}
	return false;
}

/* Feed what arrived on stream (0 stdout, 1 stderr); -1 when the
 * connection broke. stdout begins with the preamble (see preamble). */
static int drain(struct sbx_ssh_run *run, int is_stderr)
{
	char buf[16384];
	int n;
	while ((n = ssh_channel_read_nonblocking(run->ch, buf, sizeof buf, is_stderr)) > 0) {
		const char *p = buf;
		size_t len = (size_t)n;
		if (!is_stderr && run->pgid == 0) {
			if (!preamble(run, &p, &len))
				continue;
			if (run->x->on_start)
				run->x->on_start(run->x->ctx);
		}
		if (!len)
			continue;
		run->last_out_mono = mono_ms();
		run->last_out_ms = now_ms();
		run->last_stream = is_stderr ? 2 : 1;
		sbx_collector_feed(is_stderr ? run->err : run->out, p, len);
		if (run->x->on_output)
			run->x->on_output(run->x->ctx, is_stderr ? 2 : 1, p, len);
	}
	return n == SSH_ERROR ? -1 : 0;
}

static void heartbeat(struct sbx_ssh_run *run, int64_t now)
{
	char tail[256] = "";
	if (run->last_stream)
		sbx_collector_tail(run->last_stream == 2 ? run->err : run->out, tail, sizeof tail);
	struct sbx_event ev = {.kind = SBX_EV_HEARTBEAT,
			       .at_ms = now_ms(),
			       .pid = (int)(run->pgid > 0 ? run->pgid : 0),
			       .elapsed_ms = now - run->start_mono,
			       .stdout_bytes = sbx_collector_total(run->out),
			       .stderr_bytes = sbx_collector_total(run->err),
			       .last_output_at_ms = run->last_out_ms,
			       .tail = tail};
	run->x->on_heartbeat(run->x->ctx, &ev);
}

/* What is due now: a deadline or a cancel kills the group; a heartbeat. */
static void due(struct sbx_ssh_run *run)
{
	const struct sbx_ssh_exec *x = run->x;
	int64_t now = mono_ms();
	if (!run->killed && x->cancel && *x->cancel) {
		run->cancelled = true;
		kill_group(run);
	} else if (!run->killed && x->timeout_ms && now - run->start_mono >= (int64_t)x->timeout_ms) {
		run->timed_out = true;
		kill_group(run);
	} else if (!run->killed && x->idle_timeout_ms &&
		   now - run->last_out_mono >= (int64_t)x->idle_timeout_ms) {
		run->timed_out = run->idle = true;
		kill_group(run);
	}
	if (x->heartbeat_ms && x->on_heartbeat && now >= run->next_hb) {
		heartbeat(run, now);
		run->next_hb = now + (int64_t)x->heartbeat_ms;
	}
}

/* Read until the command's output ends (or, once it was killed, for at
 * most KILL_WAIT_MS): 0, or -1 when the connection broke. */
static int pump(struct sbx_ssh_run *run)
{
	while (!ssh_channel_is_eof(run->ch)) {
		due(run);
		if (run->killed && !run->killed_mono)
			run->killed_mono = mono_ms();
		if (run->killed && mono_ms() - run->killed_mono > KILL_WAIT_MS)
			return 0; /* killed; what still holds its output is not it */
		int rc = ssh_channel_poll_timeout(run->ch, POLL_MS, 0);
		if (rc == SSH_ERROR || drain(run, 0) < 0 || drain(run, 1) < 0)
			return -1;
		if (!ssh_is_connected(run->c->s))
			return -1;
	}
	return drain(run, 0) < 0 || drain(run, 1) < 0 ? -1 : 0;
}

static void finish(struct sbx_ssh_run *run, struct sbx_exec_result *res)
{
	*res = (struct sbx_exec_result){
	    .timed_out = run->timed_out,
	    .idle = run->idle,
	    .cancelled = run->cancelled,
	    .stdout_bytes = sbx_collector_total(run->out),
	    .stderr_bytes = sbx_collector_total(run->err),
	    .started_at_ms = run->started_ms,
	    .finished_at_ms = now_ms(),
	};
	res->truncated = sbx_collector_truncated(run->out) || sbx_collector_truncated(run->err);
	sbx_collector_finish(run->out, &res->stdout_text, &res->stdout_len);
	sbx_collector_finish(run->err, &res->stderr_text, &res->stderr_len);
	if (run->timed_out)
		res->exit_code = 124;
	else if (run->has_status)
		res->exit_code = run->status;
	else
		res->exit_code = 128 + (run->signal ? run->signal : SIGKILL);
}

static int start_channel(struct sbx_ssh_run *run, char *why, size_t whysz)
{
	ssh_callbacks_init(&run->cb);
	run->cb.userdata = run;
	run->cb.channel_exit_status_function = on_exit_status;
	run->cb.channel_exit_signal_function = on_exit_signal;
	run->ch = ssh_channel_new(run->c->s);
	char *line = command_line(run->x);
	int ok = run->ch && ssh_set_channel_callbacks(run->ch, &run->cb) == SSH_OK &&
		 ssh_channel_open_session(run->ch) == SSH_OK &&
		 ssh_channel_request_exec(run->ch, line) == SSH_OK;
	free(line);
	if (ok && run->x->stdin_len)
		ok = ssh_channel_write(run->ch, run->x->stdin_data, (uint32_t)run->x->stdin_len) ==
		     (int)run->x->stdin_len;
	if (ok)
		ok = ssh_channel_send_eof(run->ch) == SSH_OK;
	if (!ok)
		snprintf(why, whysz, "cannot start the command over SSH: %s", ssh_get_error(run->c->s));
	return ok ? 0 : -SBX_E_BACKEND;
}

int sbx_ssh_run(struct sbx_ssh_conn *c, const struct sbx_ssh_exec *x, struct sbx_exec_result *res, char *why,
		size_t whysz)
{
	if (refuse_here(why, whysz) < 0)
		return -EAGAIN;
	struct sbx_ssh_run run = {.c = c, .x = x};
	sbx_collector_new(&run.out, x->max_output_bytes, NULL, NULL, 0);
	sbx_collector_new(&run.err, x->max_output_bytes, NULL, NULL, 0);
	run.start_mono = run.last_out_mono = mono_ms();
	run.started_ms = now_ms();
	run.next_hb = run.start_mono + (int64_t)x->heartbeat_ms;
	int rc = start_channel(&run, why, whysz);
	if (rc == 0) /* from here pump() keeps the time and the cancel; this bounds its kill */
		sbx_ssh_deadline(c,
				 x->timeout_ms ? run.start_mono + (int64_t)x->timeout_ms + KILL_WAIT_MS +
						     2 * (int64_t)c->host->timeout_ms
					       : 0,
				 NULL);
	if (rc == 0 && pump(&run) < 0) {
		snprintf(why, whysz, "the SSH connection to %s:%d broke while the command ran%s", c->hostname,
			 c->port, run.killed ? " (after it was killed)" : "");
		rc = -SBX_E_BACKEND;
	}
	if (rc == 0) {
		/* exit-status (or exit-signal) follows EOF: wait for it, within
		 * the session's timeout (the callbacks record either). */
		if (!run.has_status && !run.signal)
			ssh_channel_get_exit_status(run.ch);
		finish(&run, res);
	}
	if (rc < 0)
		c->broken = true;
	if (run.ch) {
		if (!c->broken)
			ssh_channel_close(run.ch);
		ssh_channel_free(run.ch);
	}
	sbx_collector_free(&run.out);
	sbx_collector_free(&run.err);
	return rc;
}
