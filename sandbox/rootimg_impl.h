#pragma once
/* Internal to the root images: the staging directory an image is made in
 * before it is renamed into place. */
#include <jansson.h>
#include <stddef.h>

struct rootimg_stage {
	char *final; /* <dir>/<name> */
	char *tmp;   /* <dir>/.tmp-<name>-XXXXXX, flocked while we work */
	char *rootfs;
	int lock_fd;
};

/* Make dir (0711) if missing, refuse a bad or taken name, and make the
 * staging directory with an empty rootfs/ (0755). Stale staging
 * directories of interrupted runs (their lock free) are removed first. */
int rootimg_stage_begin(struct rootimg_stage *st, const char *dir, const char *name, char *err, size_t errsz);
/* Write manifest.json ({"name", "packages", "size_bytes" measured here,
 * "created_at", "source"}; packages and source are stolen) and rename the
 * staging directory into place. -EEXIST when the name was taken meanwhile. */
int rootimg_stage_commit(struct rootimg_stage *st, const char *name, json_t *packages, json_t *source,
			 char *err, size_t errsz);
/* Remove what is left of the staging directory; free. */
void rootimg_stage_end(struct rootimg_stage *st);

/* Remove the tree at path without following links (0 or -errno). */
int rootimg_remove_tree(const char *path);
