#pragma once
/* The seccomp program handed to bwrap (--seccomp FD): default allow, deny
 * the kernel surfaces a command has no business with (see security.md). */
#include <stddef.h>

/* Build the filter with libseccomp and export it as cBPF. *bpf is an
 * xmalloc'd copy of the program the caller frees. Errors: -errno. */
int sbx_seccomp_build(void **bpf, size_t *len);

/* A fresh memfd (O_CLOEXEC) holding the program, positioned at 0: bwrap
 * reads it to EOF, so every spawn needs its own. Errors: -errno. */
int sbx_seccomp_memfd(const void *bpf, size_t len);
