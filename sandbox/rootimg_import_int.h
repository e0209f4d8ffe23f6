#pragma once
/* Internal to sandbox/rootimg_import.c and rootimg_oci.c: one import
 * into a staging rootfs (struct extract, its bounds and what it has made
 * so far), the archives extracted into it, and the regular files an
 * import reads. rootimg_import.c has the extraction; rootimg_oci.c reads
 * an OCI layout's documents and blobs and hands each layer down. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rootimg_stage;
struct sbx_rootimg_limits;

/* One import: its bounds and what it has made so far, all layers. */
struct extract {
	const char *what; /* for messages: the file */
	bool oci;	  /* whiteouts are meaningful */
	int root;	  /* the rootfs, O_PATH */
	const struct sbx_rootimg_limits *lim;
	uint64_t in_bytes; /* archives opened so far, their sizes */
	uint64_t written, entries, space_checked;
	char *err;
	size_t errsz;
};

int rootimg_extract_begin(struct extract *x, const struct rootimg_stage *st, const char *what, bool oci,
			  const struct sbx_rootimg_limits *lim, char *err, size_t errsz);
int rootimg_extract_file(struct extract *x, int fd, uint64_t size, const char *file);
int rootimg_fix_root(const char *rootfs);
int rootimg_open_regular(int dirfd, const char *path, uint64_t resolve, const char *what, uint64_t *size,
			 char *err, size_t errsz);
