#pragma once
/* What an exec row keeps of its result (issue 26): a window of at most
 * SBX_COLLECTOR_ROW_WINDOW bytes per output stream whose spill file holds
 * the whole stream, and what GET /exec/{id} (and every other reader of a
 * stored result) answers from it: the whole window again, rebuilt from the
 * spill file in the tenant's workspace (inside its disk quota), or the
 * row's cut window with its marker when a command replaced, cut or
 * removed that file. */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct tenant;
struct store_exec;

/* The stored text of result (a ShellResult): each stream i (0 stdout,
 * 1 stderr) with whole[i] (its spill file has every byte) and text
 * longer than the row window is cut (sandbox/collector.h
 * sbx_window_cut), and "_row": {"window", "stdout", "stderr"} says which
 * were and with what max_output_bytes. Caller frees; NULL on no memory. */
char *route_exec_row_text(const json_t *result, const bool whole[2], size_t window);
/* The ShellResult for a stored text (NULL when unreadable): a stream the
 * row cut is rebuilt from its spill file beneath t's workspace (never
 * following a link at its name, a regular file of the recorded size
 * only); "_row" is removed. t may be NULL or have no workspace: the
 * row's window is answered. */
json_t *route_exec_result_load(const struct tenant *t, const char *text);
/* route_exec_result_load of ex's result, with why it ended from the
 * row's columns where the text does not say (rows written before those
 * fields: false). NULL when it has no readable result. */
json_t *route_exec_row_result(const struct tenant *t, const struct store_exec *ex);
