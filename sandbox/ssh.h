#pragma once
/* A host reached over SSH (libssh), for backend `ssh` (routes/ssh.c): the
 * connection with its host key pinned (no trust on first use) and public
 * key authentication, commands through an exec channel, and files over
 * SFTP confined to a remote root directory. No HTTP here.
 *
 * Connections: a struct sbx_ssh_host keeps the settings and a pool of
 * idle connections. libssh sessions are not thread-safe, so a connection
 * belongs to one thread at a time: sbx_ssh_get hands out an idle one (one
 * that the peer closed meanwhile is dropped, found by a zero-timeout poll
 * of its socket) or connects a new one, lazily; sbx_ssh_put gives it back
 * (or drops it after an error). A failed connect leaves nothing behind:
 * the next call connects afresh.
 *
 * Confinement: every path is a rel path (sandbox/workspace.h's form)
 * resolved under the remote root, one component at a time with SFTP
 * lstat; a symlink is followed (readlink, its target resolved the same
 * way) only while it stays under the root, otherwise -EXDEV, after 40
 * links -ELOOP. What a command on the host does between that walk and the
 * operation is not prevented (SFTP has no openat): the confinement keeps
 * the API's paths under the root; it is no boundary against the remote
 * account, which the tenant's commands run as anyway.
 *
 * Errors: 0 or a negative errno as sandbox/fsops.h's functions give them;
 * -SBX_E_BACKEND when the host cannot be reached or the connection broke
 * (with why, where a why is taken). Threads: the host is shared (its pool
 * is locked); a connection is its holder's alone. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandbox/fsops.h"
#include "sandbox/runner.h"

struct sbx_ssh_opts {
	const char *host, *user, *root; /* root: absolute directory on the host */
	int port;
	const char *key_file; /* private key: regular file of ours, 0600 or 0400 */
	/* "ssh-ed25519 AAAA..." (a known_hosts key) or "SHA256:<base64>" */
	const char *host_key;
	int timeout_ms; /* connect, and each blocking exchange */
};

struct sbx_ssh_host;
struct sbx_ssh_conn;

/* Check the settings and read the key file now. 0, or -EINVAL / -EACCES
 * with why. */
int sbx_ssh_host_new(struct sbx_ssh_host **out, const struct sbx_ssh_opts *o, char *why, size_t whysz);
/* Accepts NULL; no connection may be out. */
void sbx_ssh_host_free(struct sbx_ssh_host **h);
/* Whether a and b have the same settings and the same private key (so
 * one's pool may serve the other's users). */
bool sbx_ssh_host_same(const struct sbx_ssh_host *a, const struct sbx_ssh_host *b);
/* Whether a and b log in to the same account (host, port, user). */
bool sbx_ssh_host_same_account(const struct sbx_ssh_host *a, const struct sbx_ssh_host *b);

/* A connection of h (pooled or new, with the root created if missing). 0,
 * or -SBX_E_BACKEND with why (refused, timed out, host key not the pinned
 * one, authentication refused); -EAGAIN on an HTTP event thread. Its
 * deadline: 2 x timeout_ms from now (sbx_ssh_get_by to choose). */
int sbx_ssh_get(struct sbx_ssh_host *h, struct sbx_ssh_conn **c, char *why, size_t whysz);
/* The deadline of everything c does until it is put back (mono_ms();
 * 0: none) and a cancel flag (NULL: none): when either comes, c's socket
 * is shut down, the call under way fails with -SBX_E_BACKEND and c is
 * dropped (libssh alone would wait forever on a stopped SFTP server).
 * sbx_ssh_get arms it with deadline_ms and cancel from the connect on. */
int sbx_ssh_get_by(struct sbx_ssh_host *h, int64_t deadline_ms, const _Atomic bool *cancel,
		   struct sbx_ssh_conn **c, char *why, size_t whysz);
void sbx_ssh_deadline(struct sbx_ssh_conn *c, int64_t deadline_ms, const _Atomic bool *cancel);
/* Why c's calls failed: 0 not the deadline; 1 the deadline passed; 2 cancelled. */
int sbx_ssh_expired(struct sbx_ssh_conn *c);
/* Give c back to the pool, or close it when !ok; *c is NULL after. */
void sbx_ssh_put(struct sbx_ssh_host *h, struct sbx_ssh_conn **c, bool ok);
/* Whether c still works (after an error: -SBX_E_BACKEND means no). */
bool sbx_ssh_alive(struct sbx_ssh_conn *c);

/* ---- files (sandbox/ssh_sftp.c), each as its sandbox/fsops.h twin ---- */
/* Bytes [start, start + want) (want 0: to the end) of a regular file, at
 * most max (-EFBIG beyond, *size still set); *size: the file's size. */
int sbx_ssh_read(struct sbx_ssh_conn *c, const char *rel, uint64_t start, uint64_t want, size_t max,
		 char **data, size_t *len, uint64_t *size);
int sbx_ssh_write(struct sbx_ssh_conn *c, const char *rel, const void *data, size_t len);
int sbx_ssh_stat(struct sbx_ssh_conn *c, const char *rel, struct sbx_stat *out);
/* A page of names sorted bytewise after `after` (a name; NULL: from the
 * start); next is the page's last name when more. */
int sbx_ssh_readdir(struct sbx_ssh_conn *c, const char *rel, const char *after, size_t limit, bool detail,
		    struct sbx_dir_page *page);
int sbx_ssh_exists(struct sbx_ssh_conn *c, const char *rel, bool *exists);
int sbx_ssh_mkdir(struct sbx_ssh_conn *c, const char *rel, bool recursive);
int sbx_ssh_rm(struct sbx_ssh_conn *c, const char *rel, bool recursive, bool force, bool *removed);
int sbx_ssh_move(struct sbx_ssh_conn *c, const char *from, const char *to, bool overwrite);
/* The absolute path on the host of the directory rel (created, with its
 * parents, when create), for a command's cwd: -ENOENT, -ENOTDIR, -EXDEV. */
int sbx_ssh_dir(struct sbx_ssh_conn *c, const char *rel, bool create, char *abs, size_t abssz);

/* Make sure the session directory rel ("sessions/<segment>") exists, as
 * the local routes do on each request: once per connection and session
 * (remembered by c). */
int sbx_ssh_session(struct sbx_ssh_conn *c, const char *rel);

/* ---- commands ---- */
struct sbx_ssh_exec {
	const char *dir;	/* absolute, from sbx_ssh_dir */
	const char *const *env; /* "NAME=value", NULL-terminated */
	const char *command;	/* run by sh -c */
	const void *stdin_data; /* sent, then EOF */
	size_t stdin_len;
	uint64_t timeout_ms, idle_timeout_ms, heartbeat_ms; /* 0: none */
	size_t max_output_bytes;    /* per stream window (sandbox/collector.h, no spill file) */
	const _Atomic bool *cancel; /* set by another thread: the command is killed */
	void *ctx;
	void (*on_start)(void *ctx);
	void (*on_output)(void *ctx, int stream, const char *data, size_t len);
	void (*on_heartbeat)(void *ctx, const struct sbx_event *hb);
};
/* Run x on c. The command runs in a process group of its own (sshd makes
 * its shell a session leader); timeout, idle timeout and cancel kill that
 * group with SIGKILL from a second channel, then close the channel. 0
 * with *res (the runner's fields: 124 on timeout, 128+N for a signal), or
 * -SBX_E_BACKEND with why when the connection failed or broke (what became
 * of the command is unknown). */
int sbx_ssh_run(struct sbx_ssh_conn *c, const struct sbx_ssh_exec *x, struct sbx_exec_result *res, char *why,
		size_t whysz);
