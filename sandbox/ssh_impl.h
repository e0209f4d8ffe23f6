#pragma once
/* Shared by sandbox/ssh.c and ssh_sftp.c only. */
#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <libssh/sftp.h>
#include <stdbool.h>
#include <stdint.h>

struct sbx_ssh_host;
struct sbx_collector;
struct sbx_ssh_exec;

/* A deadline on a connection's blocking exchanges (ssh_watch.c): while
 * armed, its socket is shut down (fired set) once mono_ms() passes
 * deadline_ms (0: none) or *cancel (NULL: none) is set. Arm and disarm
 * from the connection's holder; rearming updates it in place. */
struct sbx_ssh_watch {
	int fd;
	int64_t deadline_ms;
	const _Atomic bool *cancel;
	bool on, fired, by_cancel; /* under the watchdog's lock */
	struct sbx_ssh_watch *next;
};
void sbx_ssh_watch_arm(struct sbx_ssh_watch *w, int fd, int64_t deadline_ms, const _Atomic bool *cancel);
/* Unlist w: whether it fired (then the connection is broken). */
bool sbx_ssh_watch_disarm(struct sbx_ssh_watch *w);
/* 0: not fired; 1: its deadline passed; 2: cancelled. */
int sbx_ssh_watch_state(struct sbx_ssh_watch *w);

struct sbx_ssh_conn {
	struct sbx_ssh_host *host;
	ssh_session s;
	sftp_session sftp;
	char root[4096];	    /* the remote root, canonical (no symlink in it) */
	bool broken;		    /* the connection failed: never pooled again */
	struct sbx_ssh_watch watch; /* armed from sbx_ssh_get to sbx_ssh_put */
	char session[128];	    /* the session directory last made sure of (sbx_ssh_session) */
	/* for messages */
	const char *hostname;
	int port;
};

/* One command's state (ssh.c). */
struct sbx_ssh_run {
	struct sbx_ssh_conn *c;
	const struct sbx_ssh_exec *x;
	ssh_channel ch;
	struct ssh_channel_callbacks_struct cb;
	struct sbx_collector *out, *err;
	char pidbuf[64];
	size_t pidlen, preamble_bytes;
	long pgid; /* 0: not read yet; -1: unreadable */
	bool killed, cancelled, timed_out, idle, has_status;
	int status, signal;
	int last_stream;
	int64_t start_mono, last_out_mono, last_out_ms, started_ms, next_hb, killed_mono;
};

/* Open SFTP on c and make root (absolute) exist, canonical in c->root: 0,
 * or -SBX_E_BACKEND with why. */
int sbx_ssh_sftp_open(struct sbx_ssh_conn *c, const char *root, char *why, size_t whysz);
