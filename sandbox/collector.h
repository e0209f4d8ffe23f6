#pragma once
/* Bounded capture of one output stream (stdout or stderr) of a command:
 * the first 40 % and the last 60 % of `max` bytes, one marker line between
 * them, and the full raw stream teed to a spill file in the workspace,
 * opened only when the output first overflows the window. Short output
 * costs no file I/O. Not thread-safe: owned by the runner thread. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbx_workspace;
struct sbx_collector;

/* Output past this many bytes (or past the window, if smaller) is teed to
 * the spill file: then an exec row keeps only this much of each stream
 * (sbx_window_cut) and the whole window can be rebuilt from the spill
 * file (sbx_collector_replay) when it is asked for again. */
#define SBX_COLLECTOR_ROW_WINDOW 65536

/* spill_rel: the workspace-relative spill path, e.g.
 * ".sandboxd/spill/<id>.stdout" (its directory is created on first need).
 * spill_cap: at most this many bytes go to the spill file (0: no spill).
 * ws may be NULL (no spill at all). */
int sbx_collector_new(struct sbx_collector **out, size_t max, struct sbx_workspace *ws, const char *spill_rel,
		      uint64_t spill_cap);
/* Feed bytes as they arrive. Returns 0; a spill I/O error is remembered
 * (the window keeps working) and not fatal. */
int sbx_collector_feed(struct sbx_collector *c, const void *p, size_t n);
/* Total bytes seen. */
uint64_t sbx_collector_total(const struct sbx_collector *c);
/* Whether anything was left out of the window. */
bool sbx_collector_truncated(const struct sbx_collector *c);
/* The last complete-or-partial line seen, at most max bytes, valid UTF-8
 * (for heartbeats' "tail"). Writes NUL-terminated into out. */
void sbx_collector_tail(const struct sbx_collector *c, char *out, size_t max);
/* The result text: valid UTF-8 (undecodable bytes replaced by U+FFFD, cuts
 * never split a character), head + marker + tail when truncated. The
 * marker line is "\n[... sandboxd: N bytes omitted; full output in
 * /workspace/<spill_rel> ...]\n" (or "... not kept ..." without a spill
 * file). Caller frees *text. *len excludes the NUL. */
void sbx_collector_finish(struct sbx_collector *c, char **text, size_t *len);
/* The wire path of the spill file if one was written, else NULL
 * (borrowed, valid until free). */
const char *sbx_collector_spill_path(const struct sbx_collector *c);
/* Whether the spill file holds the whole stream (no cap reached, no
 * write failed): then sbx_collector_replay can rebuild the window. */
bool sbx_collector_spill_whole(const struct sbx_collector *c);
void sbx_collector_free(struct sbx_collector **c);

/* The result text sbx_collector_finish gave for a stream of total bytes
 * with window max, rebuilt from its spill file fd (read with pread: the
 * first 40 % and the last 60 % of the window, or all of a stream that
 * fitted); spill_wire names it in the marker. -EBADF when fd is not a
 * regular file of exactly total bytes (a command replaced or cut it);
 * -EIO on a short read. */
int sbx_collector_replay(int fd, size_t max, uint64_t total, const char *spill_wire, char **text,
			 size_t *len);
/* A window text of len bytes cut for an exec row: when longer than
 * window, its first 40 % and last 60 % of window (never splitting a
 * character) around a marker line naming spill_wire. Caller frees *out. */
void sbx_window_cut(const char *text, size_t len, size_t window, const char *spill_wire, char **out,
		    size_t *outlen);
