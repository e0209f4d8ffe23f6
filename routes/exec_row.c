/* An exec row's output window and its rebuild from the spill file. */
#include "routes/exec_row.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "routes/app.h"
#include "store/store.h"
#include "sandbox/collector.h"
#include "sandbox/workspace.h"

#define SPILL_DIR ".sandboxd/spill"

static const char *const stream_name[2] = {"stdout", "stderr"};

char *route_exec_row_text(const json_t *result, const bool whole[2], size_t window)
{
	json_t *row = json_copy((json_t *)result); /* shallow: the replaced strings are its own */
	bool cut[2] = {false, false};
	for (int i = 0; i < 2 && row; i++) {
		const char *spill =
		    json_string_value(json_object_get(row, i ? "stderr_spill" : "stdout_spill"));
		json_t *s = json_object_get(row, stream_name[i]);
		size_t len = json_string_length(s);
		if (!whole[i] || !spill || len <= SBX_COLLECTOR_ROW_WINDOW)
			continue;
		char *small = NULL;
		size_t n = 0;
		sbx_window_cut(json_string_value(s), len, SBX_COLLECTOR_ROW_WINDOW, spill, &small, &n);
		json_object_set_new(row, stream_name[i], json_stringn(small, n));
		free(small);
		cut[i] = true;
	}
	if (row && (cut[0] || cut[1]))
		json_object_set_new(row, "_row",
				    json_pack("{s:I, s:b, s:b}", "window", (json_int_t)window, "stdout",
					      cut[0], "stderr", cut[1]));
	char *text = row ? json_dumps(row, JSON_COMPACT) : NULL;
	json_decref(row);
	return text;
}

/* The spill file of stream i of the exec whose wire path is spill_wire
 * ("/workspace/.sandboxd/spill/<id>.stdout"): opened beneath the
 * workspace's fd, its directory without leaving it, its own name never
 * through a link, without blocking on a FIFO a command put there. */
static int open_spill(const struct tenant *t, const char *spill_wire)
{
	const char *name = strrchr(spill_wire, '/');
	if (!name || strncmp(spill_wire, "/workspace/" SPILL_DIR "/", sizeof "/workspace/" SPILL_DIR) != 0)
		return -1;
	int dir = sbx_ws_openat(t->ws, SPILL_DIR, O_RDONLY | O_DIRECTORY, 0);
	if (dir < 0)
		return -1;
	int fd = sbx_ws_open_child(dir, name + 1, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
	close(dir);
	return fd;
}

/* Stream i again as POST /exec answered it; false leaves the row's. */
static bool rebuild(const struct tenant *t, json_t *res, int i, size_t window)
{
	const char *spill = json_string_value(json_object_get(res, i ? "stderr_spill" : "stdout_spill"));
	json_int_t total = json_integer_value(json_object_get(res, i ? "stderr_bytes" : "stdout_bytes"));
	int fd = spill && total > 0 ? open_spill(t, spill) : -1;
	if (fd < 0)
		return false;
	char *text = NULL;
	size_t len = 0;
	int rc = sbx_collector_replay(fd, window, (uint64_t)total, spill, &text, &len);
	close(fd);
	if (rc < 0)
		return false;
	json_object_set_new(res, stream_name[i], json_stringn(text, len));
	free(text);
	return true;
}

json_t *route_exec_result_load(const struct tenant *t, const char *text)
{
	json_t *res = text ? json_loads(text, 0, NULL) : NULL;
	json_t *row = json_object_get(res, "_row");
	if (!row)
		return res;
	json_int_t window = json_integer_value(json_object_get(row, "window"));
	for (int i = 0; i < 2 && t && t->ws && window > 0; i++)
		if (json_is_true(json_object_get(row, stream_name[i])))
			rebuild(t, res, i, (size_t)window);
	json_object_del(res, "_row");
	return res;
}

json_t *route_exec_row_result(const struct tenant *t, const struct store_exec *ex)
{
	json_t *res = route_exec_result_load(t, ex->result);
	const struct {
		const char *name;
		bool v;
	} why[3] = {{"oom_killed", ex->why.oom_killed},
		    {"pids_limited", ex->why.pids_limited},
		    {"uncontained", ex->why.uncontained}};
	for (size_t i = 0; i < 3 && json_is_object(res); i++)
		if (!json_object_get(res, why[i].name))
			json_object_set_new(res, why[i].name, json_boolean(why[i].v));
	return res;
}
