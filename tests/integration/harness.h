#pragma once
/* Integration harness: starts the real sandboxd binary on a free loopback
 * port with a temporary data directory, and drives it over HTTP with
 * libcurl. Every helper aborts the test (cmocka fail) on harness errors. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct it_server {
	pid_t pid;
	char dir[256]; /* temporary data directory */
	char log[300]; /* the server's stderr */
	int port;
	char base[64]; /* "http://127.0.0.1:PORT" */
	bool tls;
	char uid_base[48]; /* "uid-base=N" given when the extra args name none */
	bool as_user;	   /* the server and the CLI run as as_uid:as_gid (it_start_as) */
	uid_t as_uid;
	gid_t as_gid;
	bool keep_port; /* it_restart listens on the same port again (a back server behind a front) */
};

struct it_resp {
	long status;
	char *body;
	size_t len;
	char *headers; /* raw response header block */
};

/* On a cgroup-v2 host: the group s's server delegates from (its base,
 * sandbox/cgroup.h), a group of its own the harness starts it in (a
 * sibling of the test's, as a systemd unit's), or the test's own group
 * when that is the root. "/sys/fs/cgroup/..." into out. */
void it_cgroup2_base(const struct it_server *s, char *out, size_t outsz);

/* The binary under test ($SANDBOXD_BIN). */
const char *it_bin(void);
/* A loopback port free a moment ago (bound, then closed): where the next
 * server may listen, or where nothing does. -1 when none could be had. */
int it_free_port(void);
/* Make a data directory with tenants "acme" and "globex" (HS256, each
 * with an HS256 approver key) and "ops" (HS256, operator), then start `serve` with extra args (NULL
 * terminated, may be NULL). Waits for /healthz. 0 or -1. */
int it_start(struct it_server *s, const char *const *extra);
/* Like it_start with the data directory made under parent (a test's own
 * filesystem) instead of /tmp; the log stays in /tmp. */
int it_start_under(struct it_server *s, const char *parent, const char *const *extra);
/* Like it_start, but the data directory is owned by uid:gid and the
 * server and every it_cli call (tenant add, token, ...) run as that user
 * (setpriv --reuid --regid --clear-groups); the test must be root. */
int it_start_as(struct it_server *s, uid_t uid, gid_t gid, const char *const *extra);
/* 0 when uid:gid (no supplementary groups) can run bin; else -1 with why
 * naming the first directory on its way that user cannot search and how
 * to fix it (a checkout under a 0700 directory). Tests whose server runs
 * as another user skip (77) with why. */
int it_runnable_as(const char *bin, uid_t uid, gid_t gid, char *why, size_t whysz);
/* Like it_start but on an existing data directory (restart). */
int it_restart(struct it_server *s, const char *const *extra);
/* Defines setup() and teardown(), the group fixture of a suite whose
 * tests share one server s with default settings: started before the
 * first test, removed after the last. */
#define IT_DEFAULT_SERVER_FIXTURE(s)                                                                         \
	static int setup(void **state)                                                                       \
	{                                                                                                    \
		(void)state;                                                                                 \
		return it_start(&(s), NULL);                                                                 \
	}                                                                                                    \
	static int teardown(void **state)                                                                    \
	{                                                                                                    \
		(void)state;                                                                                 \
		it_cleanup(&(s));                                                                            \
		return 0;                                                                                    \
	}

/* Send sig and wait; returns the exit status (or 128+signal). */
int it_stop(struct it_server *s, int sig);
/* Make the process exit 1 whatever main returns: cmocka does not count a
 * failed group teardown (a sanitizer report in a server's log found at
 * the end), so the suite would pass. */
void it_fail_at_exit(void);
/* Run a shell command (fixtures only: mounts, users, files); its exit
 * status (128 when it did not exit). it_sh_quiet sends its output to
 * /dev/null. */
int it_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int it_sh_quiet(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Remove the data directory. */
void it_cleanup(struct it_server *s);
/* Run `sandboxd <args> --data-dir DIR` and return its stdout (caller
 * frees); *status gets the exit status. */
char *it_cli(struct it_server *s, int *status, const char *args);
/* Mint a token: scope NULL means no scope claim. Caller frees. */
char *it_token(struct it_server *s, const char *tenant, const char *scope);
/* The same with a sub claim (NULL: none). */
char *it_token_sub(struct it_server *s, const char *tenant, const char *scope, const char *sub);
/* An HS256 token signed here with secret (a tenant registered with
 * --secret-file), whatever the CLI would mint: the tokens a gateway that
 * holds its tenant's key can make. kid NULL: no kid header. Caller frees. */
char *it_token_hs256(const char *secret, const char *kid, const char *tenant, const char *scope,
		     const char *sub);

/* A suite's tokens as a table: where each goes, its tenant and its scope
 * (NULL: the default scopes). it_mint_all fills every *out and returns 0
 * when all were minted, -1 otherwise; it_free_all frees them. */
struct it_tok {
	char **out;
	const char *tenant, *scope;
};
int it_mint_all(struct it_server *s, const struct it_tok *t, size_t n);
void it_free_all(const struct it_tok *t, size_t n);
/* it_start, then it_mint_all on the new server: 0 or -1. */
int it_start_minted(struct it_server *s, const char *const *extra, const struct it_tok *t, size_t n);
#define IT_NTOKS(t) (sizeof(t) / sizeof((t)[0]))

/* One request. token may be NULL; headers: NULL-terminated "Name: value"
 * list or NULL; body may be NULL. Returns 0 or -1 (transport error).
 * With $SANDBOXD_RECORD_DIR set, each response is also appended as a JSON
 * line to $SANDBOXD_RECORD_DIR/<pid>.ndjson (method, path without query,
 * status, content_type, body parsed or null) for the contract test
 * tests/contract/responses.sh. */
int it_http(struct it_server *s, const char *method, const char *path, const char *token,
	    const char *const *headers, const void *body, size_t len, struct it_resp *out);
/* Value of a response header (case-insensitive), or NULL; caller frees. */
char *it_header(const struct it_resp *r, const char *name);
/* The value of the Prometheus series `series` (name and labels as
 * written, e.g. sandboxd_pool_running{tenant="acme"}) in GET /metrics
 * read with token; -1 when absent. */
long it_metric(struct it_server *s, const char *token, const char *series);
/* Parsed JSON body (new reference) or NULL. */
json_t *it_json(const struct it_resp *r);
/* The error code of a wire error body, or "" — borrowed from a static buffer. */
const char *it_error_code(const struct it_resp *r);
void it_resp_free(struct it_resp *r);

/* Send raw bytes on a new TCP connection and return what came back
 * within timeout_ms (caller frees), NULL on connect failure. */
char *it_raw(struct it_server *s, const void *data, size_t len, int timeout_ms);
/* The same, and *closed tells whether the server closed the connection
 * (EOF or reset) rather than falling silent for timeout_ms. */
char *it_raw_closed(struct it_server *s, const void *data, size_t len, int timeout_ms, bool *closed);
/* A new TCP connection to the server (fd), or -1. */
int it_connect(struct it_server *s);
/* The server's RSS in KiB and open fd count, from /proc. */
long it_rss_kib(struct it_server *s);
int it_fd_count(struct it_server *s);
/* Whether the server process is alive. */
bool it_alive(struct it_server *s);
/* Write a file on the host (for setting up tests). */
int it_write_file(const char *path, const char *data, size_t len);
/* Read a host file whole; NULL if missing. Caller frees. */
char *it_read_file(const char *path, size_t *len);

/* Assertions (cmocka) on a response; each prints the response on failure.
 * it_expect_status: the HTTP status. it_expect_error: a wire error — the
 * status, Content-Type exactly "application/json", and the error code. */
void it_show(const struct it_resp *r);
void it_expect_status(const struct it_resp *r, long status);
void it_expect_error(const struct it_resp *r, long status, const char *code);
/* The response carries header name with exactly the value want. */
void it_expect_header(const struct it_resp *r, const char *name, const char *want);
/* An audit page (GET /audit) with at least one record, every one of them
 * of tenant. */
void it_expect_audit_tenant(const struct it_resp *r, const char *tenant);
/* A request without headers or body that must fail with a wire error
 * (transport errors fail too). */
void it_expect_error_at(struct it_server *s, const char *method, const char *path, const char *token,
			long status, const char *code);

/* wire.md "The model": the directory segment of a session key — its
 * first 32 characters with all but [A-Za-z0-9._-] made '_', then '-' and
 * the base-36 djb2-64 hash of the whole key. Computed here independently
 * of the server. out must hold at least 48 bytes. */
void it_session_segment(const char *key, char *out, size_t outsz);
