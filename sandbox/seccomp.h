#pragma once
/* The seccomp program handed to bwrap (--seccomp FD): default allow, deny
 * the kernel surfaces a command has no business with (see security.md). */
#include <stddef.h>

/* Build the filter with libseccomp and export it as cBPF. *bpf is an
 * xmalloc'd copy of the program the caller frees. Once per backend: the
 * program does not depend on the command. Errors: -errno. */
int sbx_seccomp_build(void **bpf, size_t *len);
