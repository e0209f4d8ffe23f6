#pragma once
/* Internal to sandbox/fsops*.c: what the reading side (fsops.c) and the
 * writing side (fsops_write.c) share. */
#include <stddef.h>

#include "sandbox/fsops.h"

#define TMP_PREFIX ".sandboxd-tmp-"
#define TMP_PREFIX_LEN (sizeof TMP_PREFIX - 1)
#define TMP_RAND_HEX 16
/* prefix + leaf + '-' + 16 hex must stay a valid name. */
#define TMP_LEAF_MAX (SBX_NAME_MAX - TMP_PREFIX_LEN - 1 - TMP_RAND_HEX)
/* Deepest directory nesting a recursive walk descends (one fd per level). */
#define WALK_DEPTH_MAX 256

/* Names in directory dfd, without "." and "..", through a fresh open file
 * description so dfd's offset is left alone. */
int sbx_fs_list_names(int dfd, char ***out, size_t *nout);
void sbx_fs_free_names(char **names, size_t n);
