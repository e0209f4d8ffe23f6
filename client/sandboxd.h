#pragma once
/* libsandboxd: the C client of sandboxd's wire contract (wire.md,
 * openapi/openapi.yaml), on libcurl. What a gateway links to drive a
 * tenant's sandbox: the eleven SandboxApi methods, move, exec with every
 * field, cancel, an exec's record, the event feeds and the audit history.
 *
 * Handles. One struct sbxc per (base URL, token, tenant). It is immutable
 * once made and safe to use from any number of threads at once: each call
 * borrows a libcurl easy handle from the handle's small pool (so
 * connections, TLS sessions included, are reused) and returns it. There is
 * no global state but libcurl's: call curl_global_init(CURL_GLOBAL_ALL)
 * once, before any thread is started, as libcurl asks. sbxc_new calls it
 * too (never curl_global_cleanup), which is safe from any thread where
 * curl_version_info reports CURL_VERSION_THREADSAFE (Debian 12's libcurl
 * 7.88 does), and elsewhere only while the program has one thread. Nothing here
 * installs a signal handler or sends a signal (CURLOPT_NOSIGNAL is set;
 * name resolution may then not time out with libcurl's synchronous
 * resolver: Debian's libcurl uses the threaded one). libcurl sends with
 * MSG_NOSIGNAL; a program that also writes to sockets or pipes itself
 * should ignore SIGPIPE, as servers do anyway.
 *
 * Calls. Every call takes a struct sbxc_call (NULL: the defaults): the
 * session key, a deadline for the whole call, retries included, and a
 * cancel object another thread may fire. Strings going in are borrowed for
 * the call; everything coming out is owned by the caller and freed with
 * the matching sbxc_*_free (or free() where the comment says so).
 *
 * Errors. Every call returns 0 or a negative errno, and fills a struct
 * sbxc_err when one is given: the HTTP status, the wire error code,
 * message and retry hint, Retry-After, the request id. Wire codes map to
 * errnos in one table (sbxc_errno_of_code below); failures that never got
 * an answer are -ECONNREFUSED (no connection), -ETIMEDOUT (the deadline),
 * -ECANCELED (the cancel object), -EPROTO (TLS or a reply that breaks the
 * contract) and -EIO (the connection broke). Out of memory aborts.
 *
 * Retries. A call is retried automatically, within its deadline and at most
 * max_retries times, only where the contract says it is safe: answers 429
 * and 503 (after their Retry-After, else a bounded exponential backoff),
 * and a connection that could not be made. A request that may have been
 * acted upon (the connection broke after sending) is never retried, except
 * idempotent reads. sbxc_exec always carries an exec id (the caller's or
 * one the library makes), which the server uses as an idempotency key, so
 * a retried exec never runs the command twice. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#if defined(__GNUC__)
#define SBXC_API __attribute__((visibility("default")))
#else
#define SBXC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct sbxc;
struct sbxc_cancel;

/* ---- handles ---- */

struct sbxc_opts {
	const char *base_url;	 /* "https://host:port" (a trailing '/' is ignored); required */
	const char *token;	 /* the bearer JWT; required */
	const char *tenant;	 /* sent as X-Tenant-Id (must equal the token's claim); NULL: the
				    token's `tenant` claim, read (not verified), since balancers hash on it */
	const char *ca_file;	 /* PEM bundle to verify the server with; NULL: the system's */
	bool insecure;		 /* skip TLS verification (tests only); default false: verified */
	long connect_timeout_ms; /* 0: 10 000 */
	long timeout_ms;	 /* default deadline of a call without one (0: 60 000; -1: none) */
	int max_retries;	 /* 0: 4; -1: never retry */
	long max_backoff_ms;	 /* longest wait between attempts (0: 30 000) */
	size_t max_body_bytes;	 /* largest buffered answer accepted (0: 64 MiB) */
	const char *user_agent;	 /* NULL: "libsandboxd/VERSION" */
};

/* A handle with copies of opts' strings. 0, or -EINVAL (a missing or
 * unusable field; *out untouched). */
SBXC_API int sbxc_new(struct sbxc **out, const struct sbxc_opts *opts);
/* Frees the handle; no call may be running on it. Accepts NULL. */
SBXC_API void sbxc_free(struct sbxc **h);

/* ---- per call ---- */

/* Fired from any thread (or a signal handler: sbxc_cancel_fire is
 * async-signal-safe), it makes the calls that carry it return -ECANCELED
 * at once: their transfer waits on the object's eventfd, so a fire wakes
 * it (the connection is then closed), and a wait between retries ends.
 * It stays fired; one object may serve many calls. */
SBXC_API void sbxc_cancel_new(struct sbxc_cancel **out);
SBXC_API void sbxc_cancel_fire(struct sbxc_cancel *c);
SBXC_API bool sbxc_cancel_fired(const struct sbxc_cancel *c);
SBXC_API void sbxc_cancel_free(struct sbxc_cancel **c);

struct sbxc_call {
	const char *session;	    /* X-Session-Key; NULL: the session "default" */
	long timeout_ms;	    /* deadline of this call; 0: the handle's; -1: none */
	struct sbxc_cancel *cancel; /* NULL: not cancellable */
	const char *request_id;	    /* X-Request-Id to send; NULL: the server makes one */
	int max_retries; /* 0: the handle's; -1: none (a front server passing 503s on); else this */
};

struct sbxc_err {
	long status;	      /* HTTP status; 0 when no answer came */
	char code[40];	      /* wire error code ("not_found"), or "" */
	char message[512];    /* the server's message, or what went wrong locally */
	char retry_hint[256]; /* the server's retry_hint, or "" */
	long retry_after_s;   /* Retry-After, or -1 */
	char request_id[80];  /* X-Request-Id of the (last) answer, or "" */
	char node[72];	      /* Sandboxd-Node of the (last) answer: the node that answered, or "" */
	int attempts;	      /* requests made, retries included */
};

/* The errno a wire error code maps to (the table): not_found and
 * parent_missing -ENOENT, exists -EEXIST, not_empty -ENOTEMPTY,
 * not_a_directory -ENOTDIR, is_a_directory -EISDIR, outside_workspace
 * -EXDEV, forbidden -EPERM, insufficient_scope and unauthorized -EACCES,
 * conflict -EBUSY, token_used and token_expired -ESTALE, too_large -EFBIG,
 * not_text -EILSEQ, range_not_satisfiable -ERANGE, too_many_requests
 * -EAGAIN, backend_unavailable and store_unavailable -EHOSTDOWN,
 * insufficient_storage -ENOSPC, quota_exceeded and store_budget_exceeded
 * (the tenant's disk quota, its budget of the server's records) -EDQUOT,
 * bad_request -EINVAL, method_not_allowed -EOPNOTSUPP; any other code
 * -EIO. */
SBXC_API int sbxc_errno_of_code(const char *code);
/* A one-line description of a failed call for people ("not_found: no such
 * file: a.txt"), into buf; returns buf. */
SBXC_API const char *sbxc_err_text(const struct sbxc_err *e, int rc, char *buf, size_t bufsz);

/* ---- files (wire.md "Filesystem routes") ---- */

/* read_file: the whole file as UTF-8 text; *data is NUL-terminated, *len
 * excludes the NUL; free() it. -EILSEQ (not_text) for bytes that are not
 * UTF-8, -EFBIG past the server's buffered limit (use the streams). */
SBXC_API int sbxc_read_file(struct sbxc *h, const struct sbxc_call *c, const char *path, char **data,
			    size_t *len, struct sbxc_err *err);
/* read_file_buffer: bytes [offset, offset+length) of the file (length 0:
 * to the end); *data as above (NUL-terminated for convenience). */
SBXC_API int sbxc_read_file_buffer(struct sbxc *h, const struct sbxc_call *c, const char *path,
				   uint64_t offset, uint64_t length, char **data, size_t *len,
				   struct sbxc_err *err);
/* write_file: replace (atomically) or create the file, parents included;
 * *size_out (may be NULL) gets the size the server wrote. */
SBXC_API int sbxc_write_file(struct sbxc *h, const struct sbxc_call *c, const char *path, const void *data,
			     size_t len, uint64_t *size_out, struct sbxc_err *err);

enum sbxc_type { SBXC_UNKNOWN = 0, SBXC_FILE, SBXC_DIR, SBXC_SYMLINK, SBXC_OTHER };

struct sbxc_stat {
	char *path; /* absolute workspace path */
	enum sbxc_type type;
	bool is_symlink;
	bool has_size, has_mtime, has_mode; /* fields the server left out are false */
	uint64_t size;
	int64_t mtime;	  /* seconds since the epoch, UTC */
	unsigned mode;	  /* permission bits, e.g. 0644 */
	int64_t mtime_ms; /* mtime in milliseconds, as the server gave it */
};
/* stat: fills *st (free its strings with sbxc_stat_clear). */
SBXC_API int sbxc_stat(struct sbxc *h, const struct sbxc_call *c, const char *path, struct sbxc_stat *st,
		       struct sbxc_err *err);
SBXC_API void sbxc_stat_clear(struct sbxc_stat *st);

struct sbxc_dirent {
	char *name;
	enum sbxc_type type; /* SBXC_UNKNOWN unless detail was asked */
	bool has_size, has_mtime;
	uint64_t size;
	int64_t mtime;
	int64_t mtime_ms; /* mtime in milliseconds */
};
/* readdir: the names in the directory, sorted bytewise; detail asks for
 * type, size and mtime too. *out is an array of *n entries, freed with
 * sbxc_dirents_free. A server that pages directories (`more`, `next`) is
 * followed page after page until the end, so *out is the whole directory;
 * sbxc_readdir_page reads one page at a time instead. */
SBXC_API int sbxc_readdir(struct sbxc *h, const struct sbxc_call *c, const char *path, bool detail,
			  struct sbxc_dirent **out, size_t *n, struct sbxc_err *err);
/* One page: at most limit entries (0: the server's default) after the
 * cursor after (NULL: from the start); *next gets the cursor of the next
 * page, or NULL at the end (free() it). A server without paging answers
 * the whole directory as one page. */
SBXC_API int sbxc_readdir_page(struct sbxc *h, const struct sbxc_call *c, const char *path, bool detail,
			       const char *after, int limit, struct sbxc_dirent **out, size_t *n, char **next,
			       struct sbxc_err *err);
SBXC_API void sbxc_dirents_free(struct sbxc_dirent *v, size_t n);
/* exists: *yes tells; never -ENOENT for the path itself. */
SBXC_API int sbxc_exists(struct sbxc *h, const struct sbxc_call *c, const char *path, bool *yes,
			 struct sbxc_err *err);
/* mkdir: -EEXIST when it exists (even with recursive, when it is not a
 * directory), -ENOENT (parent_missing) without recursive. */
SBXC_API int sbxc_mkdir(struct sbxc *h, const struct sbxc_call *c, const char *path, bool recursive,
			struct sbxc_err *err);
/* rm: removes a file, a link or (recursive) a tree; force makes a missing
 * path a success with *removed false. removed may be NULL. */
SBXC_API int sbxc_rm(struct sbxc *h, const struct sbxc_call *c, const char *path, bool recursive, bool force,
		     bool *removed, struct sbxc_err *err);
/* move: atomic rename inside the workspace; -EEXIST unless overwrite. */
SBXC_API int sbxc_move(struct sbxc *h, const struct sbxc_call *c, const char *from, const char *to,
		       bool overwrite, struct sbxc_err *err);

/* ---- streaming transfers (wire.md "Streaming transfers") ---- */

/* Data arrives in the order of the file. Return 0 to go on, anything else
 * to stop the transfer (the call then returns -ECANCELED). Called on the
 * calling thread. */
typedef int (*sbxc_sink_fn)(void *arg, const void *data, size_t len);
/* Fill buf with up to cap bytes: the count, 0 at the end, or a negative
 * errno to abort the upload (the call returns it; the server keeps the old
 * file). */
typedef ssize_t (*sbxc_source_fn)(void *arg, void *buf, size_t cap);

/* read_file_stream: GET /fs/read_stream from offset to the end, handed to
 * sink in pieces; memory stays constant whatever the size. *total (may be
 * NULL) gets the bytes delivered. A transfer that breaks before any byte
 * was delivered is retried like a read; after, it fails with -EIO and
 * *total says where to resume (offset). */
SBXC_API int sbxc_read_file_stream(struct sbxc *h, const struct sbxc_call *c, const char *path,
				   uint64_t offset, sbxc_sink_fn sink, void *arg, uint64_t *total,
				   struct sbxc_err *err);
/* The same into an fd (written fully, EINTR handled). */
SBXC_API int sbxc_read_file_to_fd(struct sbxc *h, const struct sbxc_call *c, const char *path, int fd,
				  uint64_t *total, struct sbxc_err *err);

struct sbxc_upload {
	uint64_t size;	 /* bytes the server stored */
	char sha256[65]; /* its SHA-256, lowercase hex, as the server computed it */
	char path[4096]; /* absolute workspace path */
};
/* write_file_stream: PUT /fs/write_stream with a chunked body pulled from
 * source; the file appears atomically when the body ends cleanly, and an
 * aborted upload leaves the old file. The parent must exist (-ENOENT,
 * parent_missing). size: the body's length when known (sent as
 * Content-Length), or -1. Sent with Expect: 100-continue, so that a 429 is
 * answered before any byte is read from source; it is then retried (an
 * upload already under way never is). out may be NULL. */
SBXC_API int sbxc_write_file_stream(struct sbxc *h, const struct sbxc_call *c, const char *path, int64_t size,
				    sbxc_source_fn source, void *arg, struct sbxc_upload *out,
				    struct sbxc_err *err);
/* The same from an fd, read to its end (its size is sent when it is a
 * regular file). */
SBXC_API int sbxc_write_file_from_fd(struct sbxc *h, const struct sbxc_call *c, const char *path, int fd,
				     struct sbxc_upload *out, struct sbxc_err *err);

/* Pull and push forms of the same two streams, for a program that is
 * itself driven from outside (a server handing a download to
 * libmicrohttpd's content reader, or passing an upload on as it
 * arrives): no thread and no callback, memory still constant (a 256 KiB
 * buffer per reader). A reader or writer belongs to one thread at a time;
 * its calls honour the cancel object and deadline of the sbxc_call it was
 * opened with (a transfer that moves nothing for 60 s is cut). */
struct sbxc_reader;
struct sbxc_writer;
/* Opens GET /fs/read_stream from offset and waits for the answer's head
 * (retried on 429/503 as ever): 0 and *out, or the error (-ENOENT, ...).
 * *size (may be NULL) gets the bytes to come, or -1. */
SBXC_API int sbxc_reader_open(struct sbxc *h, const struct sbxc_call *c, const char *path, uint64_t offset,
			      struct sbxc_reader **out, int64_t *size, struct sbxc_err *err);
/* Up to cap bytes into buf: the count, 0 at the end of the file, or a
 * negative errno (the connection broke: -EIO; the call's cancel object:
 * -ECANCELED). Blocks until at least one byte, the end or an error. */
SBXC_API ssize_t sbxc_reader_read(struct sbxc_reader *r, void *buf, size_t cap, struct sbxc_err *err);
/* Ends the reader; one not read to its end closes its connection.
 * Accepts NULL. */
SBXC_API void sbxc_reader_close(struct sbxc_reader **r);

/* Opens PUT /fs/write_stream and waits until the server asks for the
 * body (100 Continue): 0 and *out, or the refusal (-ENOENT
 * parent_missing, -EAGAIN after the retries of a 429, ...). size: the
 * body's length when known, else -1 (chunked). */
SBXC_API int sbxc_writer_open(struct sbxc *h, const struct sbxc_call *c, const char *path, int64_t size,
			      struct sbxc_writer **out, struct sbxc_err *err);
/* Sends len bytes (blocks until libcurl has taken them all): 0, or the
 * error; an answer that comes before the end (the server refused the
 * body) ends the writer with its error. */
SBXC_API int sbxc_writer_write(struct sbxc_writer *w, const void *data, size_t len, struct sbxc_err *err);
/* Ends the body and waits for the answer: 0 and *out (may be NULL), the
 * new file in place. */
SBXC_API int sbxc_writer_finish(struct sbxc_writer *w, struct sbxc_upload *out, struct sbxc_err *err);
/* Ends the writer; one not finished is cut off, and the server keeps the
 * old file. Accepts NULL. */
SBXC_API void sbxc_writer_close(struct sbxc_writer **w);

struct sbxc_transfer {
	char token[64];
	char url[128];	   /* "/fs/stream/<token>", relative to the base URL */
	char direction[8]; /* "read" or "write" */
	char path[4096];
	char expires_at[40]; /* RFC 3339 */
};
/* POST /fs/transfers: a single-use token another party may spend without
 * the bearer token (ttl_s 0: the server's default). */
SBXC_API int sbxc_transfer_mint(struct sbxc *h, const struct sbxc_call *c, const char *path, bool write,
				long ttl_s, struct sbxc_transfer *out, struct sbxc_err *err);

/* ---- exec (wire.md "Exec") ---- */

struct sbxc_env {
	const char *name, *value;
};

struct sbxc_exec_req {
	const char *command;	    /* required: run as /bin/sh -c command */
	const char *cwd;	    /* NULL: the session directory */
	const struct sbxc_env *env; /* nenv entries */
	size_t nenv;
	long timeout_s;		/* 0: the server's default */
	long idle_timeout_s;	/* 0: none */
	const void *stdin_data; /* NULL: empty; must be UTF-8 text (a JSON string) */
	size_t stdin_len;
	long max_output_bytes; /* 0: the server's default */
	const char *id;	       /* NULL: the library makes one ("c" and 32 hex digits) */
	/* "network": true: the command may reach what the tenant policy's
	 * allowlist names, through the server's egress gateway (403,
	 * -EPERM, when the policy has none); the result's egress_denied says
	 * what was refused. false: no network at all. */
	bool network;
};

/* The server keeps at most 8 refused destinations per command. */
#define SBXC_EGRESS_DENIED_MAX 8
struct sbxc_egress_denied {
	char *dest;   /* "evil.example:443", "10.0.0.1:22", "udp 203.0.113.5:443"; never NULL */
	char *reason; /* "not in the allowlist", ...; never NULL ("" when the server gave none) */
};

struct sbxc_result {
	char id[72];
	int exit_code;
	char *stdout_text, *stderr_text; /* bounded windows, valid UTF-8; never NULL */
	bool timed_out, cancelled, truncated, idle;
	uint64_t stdout_bytes, stderr_bytes;
	char *stdout_spill, *stderr_spill; /* workspace paths of the full streams, or NULL */
	char started_at[40], finished_at[40];
	int64_t duration_ms;
	/* Why it ended, as the server's cgroups saw it: the OOM killer ended
	 * a process of it (its memory limit or its tenant's budget), a fork
	 * of it was refused by a pids limit; uncontained: it ran without
	 * cgroups (rlimits only). false from a server that does not say. */
	bool oom_killed, pids_limited, uncontained;
	/* What the server's egress gateway refused a command with network
	 * (`egress_denied`), so that a caller, a model, stops retrying a
	 * host it will never reach. networked: the field was there (the
	 * command had network; false without, or from a server that does not
	 * say). Then the first refused destinations, each once, with the
	 * reason: n_egress_denied entries, at most SBXC_EGRESS_DENIED_MAX
	 * (a longer list is cut there), none when nothing was refused (NULL).
	 * Every connection, allowed ones too, is in GET /exec/{id}/egress. */
	bool networked;
	struct sbxc_egress_denied *egress_denied;
	size_t n_egress_denied;
};
/* Frees the result's strings and egress_denied, and zeroes it. */
SBXC_API void sbxc_result_clear(struct sbxc_result *r);

/* Output as it is printed: stream 1 stdout, 2 stderr; data is not
 * NUL-terminated. Return nonzero to stop following (the command goes on;
 * the call then returns -ECANCELED: cancel it with sbxc_exec_cancel). */
typedef int (*sbxc_output_fn)(void *arg, int stream, const char *data, size_t len);
/* Told the exec's id: in the streamed form once the server accepted the
 * command (before any output); in the buffered form just before the
 * request is sent (a cancel that overtakes it answers -ENOENT). */
typedef void (*sbxc_started_fn)(void *arg, const char *id);

/* exec: runs the command and fills *res when it ends (timeouts and
 * cancellation are results, not errors). Without on_output the answer is
 * the buffered ShellResult; with it the call asks for the event stream
 * ("stream": true) and calls on_output as output arrives. on_started (may
 * be NULL) learns the id, e.g. for sbxc_exec_cancel from another thread.
 * The call's deadline should exceed the command's timeout (a call without
 * one waits as long as the command runs). Cancelling the call (its cancel
 * object, or its deadline) closes the connection, which the server takes
 * as a cancel of the command. */
SBXC_API int sbxc_exec(struct sbxc *h, const struct sbxc_call *c, const struct sbxc_exec_req *req,
		       sbxc_output_fn on_output, sbxc_started_fn on_started, void *arg,
		       struct sbxc_result *res, struct sbxc_err *err);
/* Behind a balancer (docs/nodes.md) an id the library or
 * the caller chose names no node: the calls about it (cancel, get, its
 * events) are routed by the session, so give them the session the exec
 * ran in. */
/* POST /exec/{id}/cancel: 0 when the cancel was sent (202), -EBUSY
 * (conflict) when the exec had finished, -ENOENT for no such exec. */
SBXC_API int sbxc_exec_cancel(struct sbxc *h, const struct sbxc_call *c, const char *id,
			      struct sbxc_err *err);

struct sbxc_exec_info {
	char id[72];
	char state[16]; /* running, exited, timed_out, cancelled, lost */
	char *command, *session, *cwd;
	char started_at[40];
	bool has_result;
	struct sbxc_result result; /* when has_result */
};
/* GET /exec/{id}. Free with sbxc_exec_info_clear. */
SBXC_API int sbxc_exec_get(struct sbxc *h, const struct sbxc_call *c, const char *id,
			   struct sbxc_exec_info *out, struct sbxc_err *err);
SBXC_API void sbxc_exec_info_clear(struct sbxc_exec_info *x);
/* GET /execs: newest first; state and session may be NULL (any); limit 0:
 * the server's default. *out is freed with sbxc_exec_infos_free. */
SBXC_API int sbxc_exec_list(struct sbxc *h, const struct sbxc_call *c, const char *state, const char *session,
			    int limit, struct sbxc_exec_info **out, size_t *n, struct sbxc_err *err);
SBXC_API void sbxc_exec_infos_free(struct sbxc_exec_info *v, size_t n);

/* ---- events (wire.md "Live progress") ---- */

struct sbxc_event {
	const char *id;	  /* the event's id, or NULL (gap events have none) */
	const char *name; /* start, heartbeat, output, exit, exec_error, gap, ... */
	const char *data; /* the data lines joined with '\n' (JSON for the server's events) */
	size_t data_len;
};
/* One event; borrowed for the call. Return 0 to go on, nonzero to stop
 * (the follow call then returns 0). */
typedef int (*sbxc_event_fn)(void *arg, const struct sbxc_event *ev);

struct sbxc_follow {
	const char *exec_id;	   /* NULL: the tenant's feed (GET /events); else GET /exec/{id}/events */
	bool output;		   /* with exec_id: output events too (?output=true) */
	const char *tenant;	   /* with the feed and an admin token: only this tenant (NULL: all) */
	const char *last_event_id; /* resume after this id (NULL: from now) */
	long max_backoff_ms;	   /* reconnect delay grows from 100 ms to this (0: 5 000) */
	long idle_timeout_ms;	   /* no byte for this long (the server sends a comment every 15 s)
				      counts as a broken connection (0: 45 000) */
	int max_reconnects;	   /* consecutive failed reconnects before giving up (0: unbounded) */
};
/* Follows a stream of server-sent events, calling on_event for each, in
 * order, exactly once each: a broken connection is reopened with
 * Last-Event-ID after a bounded, growing delay (reset by every event), so
 * no event is lost or repeated while the server still keeps it (past its
 * replay window the server sends `gap`, passed on as such). Returns 0
 * when on_event stops, when an exec's stream has ended (after its exit or
 * exec_error event; or 204: nothing more), -ECANCELED when the call's
 * cancel object fires (the way to stop it from another thread), or the
 * error of an answer that is not worth retrying (401, 403, 404, ...).
 * The call's timeout_ms bounds the whole follow (default: none). */
SBXC_API int sbxc_follow(struct sbxc *h, const struct sbxc_call *c, const struct sbxc_follow *f,
			 sbxc_event_fn on_event, void *arg, struct sbxc_err *err);

/* ---- sessions and health (wire.md "Operators") ---- */

struct sbxc_session {
	char *key, *dir;
	char created_at[40], last_used_at[40];
};
/* GET /sessions: the tenant's sessions; free with sbxc_sessions_free. */
SBXC_API int sbxc_sessions(struct sbxc *h, const struct sbxc_call *c, struct sbxc_session **out, size_t *n,
			   struct sbxc_err *err);
SBXC_API void sbxc_sessions_free(struct sbxc_session *v, size_t n);
/* DELETE /session: removes the call's session (c->session) and its
 * directory; running commands of it are not stopped. */
SBXC_API int sbxc_session_delete(struct sbxc *h, const struct sbxc_call *c, struct sbxc_err *err);
/* GET /readyz (no token needed): 0 when the server is ready, -EHOSTDOWN
 * when it answers 503 (*detail, when not NULL, gets its JSON body either
 * way; free() it), or a transport error. Never retried: it is the probe. */
SBXC_API int sbxc_ready(struct sbxc *h, const struct sbxc_call *c, char **detail, struct sbxc_err *err);

/* ---- audit (wire.md "Operators") ---- */

struct sbxc_audit_query {
	const char *since, *until;			/* RFC 3339 or NULL */
	const char *session, *route, *outcome, *tenant; /* NULL: any (tenant: admin only) */
	int limit;					/* per page; 0: the server's default */
	const char *after; /* the cursor of the previous page (NULL: from the start) */
};
struct sbxc_audit_record {
	int64_t id;
	char *at, *tenant, *session, *request_id, *method, *route, *target, *outcome, *client;
	long status;
	bool has_exit_code;
	int exit_code;
	int64_t bytes_in, bytes_out, duration_ms;
};
/* One page of GET /audit, oldest first; *next gets the cursor of the next
 * page or NULL at the end (free() it). Free the records with
 * sbxc_audit_free. */
SBXC_API int sbxc_audit_page(struct sbxc *h, const struct sbxc_call *c, const struct sbxc_audit_query *q,
			     struct sbxc_audit_record **out, size_t *n, char **next, struct sbxc_err *err);
SBXC_API void sbxc_audit_free(struct sbxc_audit_record *v, size_t n);

#ifdef __cplusplus
}
#endif
